"""The verify-step milliseconds ``select`` prices, from the ones a step profile measured.

A verify forward of more tokens does no more than the same kernels' work on more rows, so a
verify time that falls as q grows is most often noise: a busy moment during the smaller q's
record, or a quiet one during the larger's. Priced as it stands, it makes one tree look cheap
and select picks it for that. Such a fall is pooled: the q it fell below and the q that fell
are priced at their common mean (isotonic regression, :func:`pooled`).

Not every fall is noise. A fall larger than twice the standard error its two records give
together (each record's ``se``, :attr:`~treeopt.documents.step_profile.StepRecord.se`) is the
kernels', and is priced as measured: oneDNN's packed bf16 products on an AVX512-BF16 CPU
without AMX take longer for 2 rows than for 3–5, so SmolLM2's 2-token step costs more than its
4-token one (timed in 5 rounds each, 1.4% standard error: 42.8 against 38.7 ms; the shipped
build's verify table, another tool: 43.3 against 39.9). Pooled, the two were priced 5% off each
way, and the 5-token chain measured 4.9% faster live than select priced it. Records without a
standard error (one round, or profiles of earlier versions) are pooled as before.

The one-token step runs other kernels (matrix × vector) and is priced as measured
(:data:`OWN_KERNELS`): on CPUs in bf16 it can be the slower one — SmolLM2's 2-token step
measured 7–8% below its one-token step in every trained drafter's profile on an AMX Xeon,
record after record, and pooled, every tree's speed-up was priced that much low. The
autoregressive record is also the quickest reference step of every round
(:func:`treeopt.profiling.step.batch_records`), so no busy moment raises it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from treeopt.documents.step_profile import StepRecord

OWN_KERNELS = 1  # tokens up to which a verify step runs other kernels: priced as measured
BEYOND_NOISE = 2.0  # a fall this many joint standard errors deep is the kernels', not noise

Prices = dict[int, dict[int, float]]  # batch → q → verify milliseconds


def verify_prices(records: Sequence[StepRecord]) -> tuple[Prices, float]:
    """batch → q → the verify milliseconds select prices (each q's median over its records,
    its falls pooled where they are noise), and the largest fall measured (0 where none).

    >>> from treeopt.documents.step_profile import StepRecord
    >>> rec = lambda q, ms, se=None: StepRecord(1, q - 1, q - 1, q, (1,) * (q - 1), 100.0, 0.1,
    ...                                          ms, 0.1, se=se)
    >>> verify_prices([rec(1, 40.0), rec(2, 43.0, 0.014), rec(3, 39.0, 0.014), rec(5, 40.0)])
    ({1: {1: 40.0, 2: 43.0, 3: 39.0, 5: 40.0}}, 0.093023255814)
    >>> verify_prices([rec(1, 40.0), rec(2, 43.0, 0.03), rec(3, 41.0, 0.03)])[0]  # within noise
    {1: {1: 40.0, 2: 42.0, 3: 42.0}}
    """
    groups = _groups((r.batch, r.q, r.ms_verify) for r in records)
    medians = _medians(groups)
    noise = record_noise(records)
    out: Prices = {}
    for b, by_q in groups.items():
        own = {q: medians[b][q] for q in by_q if q <= OWN_KERNELS}
        rest = [q for q in by_q if q > OWN_KERNELS]
        priced = pooled([medians[b][q] for q in rest], [len(by_q[q]) for q in rest],
                        [noise.get((b, q)) for q in rest])
        out[b] = {**own, **dict(zip(rest, priced, strict=True))}
    return out, max((d[3] for d in _dips(medians)), default=0.0)


def verify_dips(points: Iterable[tuple[int, int, float]]) -> list[tuple[int, int, int, float]]:
    """Where the verify time of a step profile's ``points`` — (batch, q, verify milliseconds)
    — falls as q grows: (batch, q, the smaller q it fell below, the fall as a share of that
    q's time), largest first. The profiler measures both sides of a fall again; select prices
    what is left (:func:`verify_prices`). A step of two tokens below the one-token step is no
    fall.

    >>> verify_dips([(1, 1, 6.8), (1, 3, 8.7), (1, 4, 6.96), (1, 5, 9.5)])
    [(1, 4, 3, 0.2)]
    >>> verify_dips([(1, 1, 9.2), (1, 2, 8.5), (1, 3, 8.7)])
    []
    """
    return _dips(_medians(_groups(points)))


def kernel_dips(records: Sequence[StepRecord]) -> list[tuple[int, int, int, float]]:
    """The falls of :func:`verify_dips` over ``records`` that lie beyond their noise
    (:func:`beyond_noise`): priced as measured."""
    noise = record_noise(records)
    return [(b, q, below, fall) for b, q, below, fall
            in verify_dips((r.batch, r.q, r.ms_verify) for r in records)
            if beyond_noise(fall, noise.get((b, below)), noise.get((b, q)))]


def beyond_noise(fall: float, se_before: float | None, se_after: float | None) -> bool:
    """Whether a fall (a share of the earlier time) is deeper than :data:`BEYOND_NOISE` times
    the joint relative standard error of its two figures; never where either has none.

    >>> beyond_noise(0.09, 0.014, 0.014), beyond_noise(0.04, 0.014, 0.02), beyond_noise(0.2, None, 0)
    (True, False, False)
    """
    if se_before is None or se_after is None:
        return False
    return fall > BEYOND_NOISE * math.hypot(se_before, se_after)


def pooled(values: Sequence[float], weights: Sequence[float],
           noise: Sequence[float | None] | None = None) -> list[float]:
    """``values`` with every fall that is noise pooled: adjacent violators are replaced by
    their weighted mean, repeatedly, until no fall is left but those beyond their noise
    (:func:`beyond_noise`, each value's relative standard error in ``noise``; a pooled run's,
    the largest of its values'). Without ``noise``: the non-decreasing sequence closest to
    ``values`` in weighted least squares (isotonic regression, pooling adjacent violators).

    >>> pooled([5.0, 7.0, 6.0, 8.0], [1, 1, 1, 1])
    [5.0, 6.5, 6.5, 8.0]
    >>> pooled([14.0, 12.6], [3, 1])  # the better-measured value moves less
    [13.65, 13.65]
    >>> pooled([43.0, 39.0, 38.6, 40.0], [1, 1, 1, 1], [0.014, 0.014, 0.014, 0.02])
    [43.0, 38.8, 38.8, 40.0]
    """
    if len(values) != len(weights):
        raise ValueError(f"{len(values)} values but {len(weights)} weights")
    noise = list(noise) if noise is not None else [None] * len(values)
    # (weighted mean, weight, count, relative standard error) of each run
    blocks: list[tuple[float, float, int, float | None]] = []
    for v, w, se in zip(values, weights, noise, strict=True):
        blocks.append((float(v), float(w), 1, se))
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (v1, w1, n1, s1), (v2, w2, n2, s2) = blocks[-2], blocks[-1]
            if v1 > 0 and beyond_noise(1.0 - v2 / v1, s1, s2):
                break
            blocks[-2:] = [((v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2,
                            None if s1 is None or s2 is None else max(s1, s2))]
    # rounded to 12 decimals, far below any timing's precision, so that a mean reads as itself
    return [round(v, 12) for v, _, n, _ in blocks for _ in range(n)]


def _groups(points: Iterable[tuple[int, int, float]]) -> dict[int, dict[int, list[float]]]:
    """batch → q → the verify milliseconds of the (batch, q, ms) points at that q, both
    ascending."""
    grouped: dict[int, dict[int, list[float]]] = {}
    for b, q, ms in points:
        grouped.setdefault(b, {}).setdefault(q, []).append(ms)
    return {b: dict(sorted(by_q.items())) for b, by_q in sorted(grouped.items())}


def _medians(groups: dict[int, dict[int, list[float]]]) -> Prices:
    """batch → q → the median verify milliseconds of :func:`_groups`' records."""
    return {b: {q: float(np.median(ms)) for q, ms in by_q.items()} for b, by_q in groups.items()}


def record_medians(records: Sequence[StepRecord]) -> Prices:
    """batch → q → the median verify milliseconds of ``records`` at that q, both ascending."""
    return _medians(_groups((r.batch, r.q, r.ms_verify) for r in records))


def record_noise(records: Sequence[StepRecord]) -> dict[tuple[int, int], float | None]:
    """(batch, q) → the median relative standard error of its records (None where one has
    none)."""
    by_key: dict[tuple[int, int], list[float | None]] = {}
    for r in records:
        by_key.setdefault((r.batch, r.q), []).append(r.se)
    return {k: None if any(se is None for se in v) else float(np.median(v))  # type: ignore[arg-type]
            for k, v in by_key.items()}


def _dips(verify_ms: Prices) -> list[tuple[int, int, int, float]]:
    """The falls of :func:`verify_dips` in medians already taken."""
    dips = []
    for b, by_q in verify_ms.items():
        top_q, top = 0, 0.0  # the most expensive smaller q so far (of the same kernels)
        for q, ms in by_q.items():
            if q <= OWN_KERNELS:
                continue
            if ms < top:
                dips.append((b, q, top_q, round(1.0 - ms / top, 12)))
            else:
                top_q, top = q, ms
    return sorted(dips, key=lambda d: -d[3])


