"""What a live decoding step costs: ``t_step = t_verify(b, s, q) + t_draft(T, b) +
t_overhead(b, q, depth)``.

``t_verify`` comes from a latency table, a step profile (its per-q medians made non-decreasing in
q from two tokens on) or a roofline, interpolated linearly between measured q
(:class:`StepLatency`); the drafter's cost (:class:`DraftCost`) is a function of the batch and
the nodes expanded at each depth (:func:`expanded_nodes`); the decoder's own overhead
(:class:`OverheadCost`) of the batch, the tokens verified and the depth. A step profile
(``treeopt profile step``: the live decoder timed phase by phase on real trees) gives all three
(:func:`step_costs`), fitted as linear terms whose coefficients are milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError
from treeopt.model.tree import Path
from treeopt.pricing.contexts import pick_context
from treeopt.pricing.verify_prices import verify_prices
from treeopt.registry.kinds import drafter_kind

if TYPE_CHECKING:
    from treeopt.documents.step_profile import StepRecord

Grid = dict[tuple[int, int], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]
DraftFn = Callable[[int, tuple[int, ...]], float]  # (batch, nodes expanded per depth) → seconds


@dataclass(frozen=True, eq=False)
class StepLatency:
    """Verify-step seconds: ``grid[(b, s)] = (q ascending, seconds)``; ``source`` describes it."""

    grid: Grid
    source: str
    meta: dict[str, Any] = field(default_factory=dict)

    def seconds(self, batch: int, context: int, tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Seconds at each q, linear between measured q, NaN beyond the largest.

        >>> lat = StepLatency({(1, 8): (np.array([1.0, 4.0]), np.array([0.01, 0.04]))}, "toy")
        >>> lat.seconds(1, 8, np.array([1, 2, 5])).tolist()
        [0.01, 0.02, nan]
        """
        if (batch, context) not in self.grid:
            known = ", ".join(f"{b}×{s}" for b, s in sorted(self.grid))
            raise TreeoptError(f"{self.source}: no measurements at batch {batch}, context "
                               f"{context}; it has (batch×context) {known}")
        q, t = self.grid[(batch, context)]
        if q[0] != 1:
            raise TreeoptError(f"{self.source}: no tokens=1 step at batch {batch}, context "
                               f"{context}; the autoregressive baseline needs it")
        tokens = np.asarray(tokens, dtype=np.float64)
        return np.where(tokens <= q[-1], np.interp(tokens, q, t), np.nan)

    @property
    def batches(self) -> list[int]:
        return sorted({b for b, _ in self.grid})

    @property
    def contexts(self) -> list[int]:
        return sorted({s for _, s in self.grid})

    @property
    def max_tokens(self) -> int:
        """The largest q measured anywhere: trees beyond it cannot be priced."""
        return int(max(q[-1] for q, _ in self.grid.values()))

    @classmethod
    def from_points(cls, points: Sequence[tuple[int, int, int, float]], source: str,
                    **meta: Any) -> StepLatency:
        """From ``(batch, context, tokens, seconds)`` points (at least one, each finite)."""
        if not points:
            raise TreeoptError(f"{source}: no measured points (empty, or every point failed, "
                               "e.g. out of memory); nothing to price trees with")
        bad = [p for p in points if not np.isfinite(p[3]) or p[3] <= 0]
        if bad:
            b, s, q, sec = bad[0]
            raise TreeoptError(f"{source}: batch {b}, context {s}, tokens {q} takes {sec} s; "
                               "expected a positive finite time")
        rows: dict[tuple[int, int], list[tuple[int, float]]] = {}
        for b, s, q, sec in points:
            rows.setdefault((int(b), int(s)), []).append((int(q), float(sec)))
        grid = {k: (np.array([q for q, _ in sorted(v)], dtype=np.float64),
                    np.array([t for _, t in sorted(v)], dtype=np.float64)) for k, v in rows.items()}
        return cls(grid, source, dict(meta))


@dataclass(frozen=True)
class DraftCost:
    """The drafter's seconds per step, ``fn(batch, expanded)``; ``kind`` names the drafter
    ("none": drafting not priced)."""

    kind: str = "none"
    source: str = "not included"
    fn: DraftFn | None = None

    def seconds(self, batch: int, expanded: tuple[int, ...]) -> float:
        return 0.0 if self.fn is None or not expanded else float(self.fn(batch, expanded))

    @property
    def per_depth(self) -> bool:
        """One drafter call per tree depth, so deeper trees cost more to draft."""
        return self.kind != "none" and drafter_kind(self.kind).per_depth

    def first_depths(self, depths: int) -> DraftCost:
        """This drafter drafting only a tree's first ``depths`` depths (a hybrid's model
        drafter, below which prompt lookup's chain runs alone): deeper expansions cost nothing.

        >>> cost = DraftCost("eagle", "profile", lambda b, e: float(sum(e)))
        >>> cost.seconds(1, (1, 2, 1)), cost.first_depths(2).seconds(1, (1, 2, 1))
        (4.0, 3.0)
        """
        fn = self.fn
        if fn is None:
            return self
        return replace(self, source=f"{self.source}, first {depths} depths",
                       fn=lambda batch, expanded: fn(batch, expanded[:depths]))


NO_DRAFT = DraftCost()


@dataclass(frozen=True)
class OverheadCost:
    """The decoder's own seconds per step outside drafting and the verify forward — acceptance,
    reading the accepted tokens, moving the cache, the loop itself: ``fn(batch, q, depth)``."""

    source: str = "not included"
    fn: Callable[[int, int, int], float] | None = None

    def seconds(self, batch: int, tokens: int, depth: int) -> float:
        return 0.0 if self.fn is None else float(self.fn(batch, tokens, depth))


NO_OVERHEAD = OverheadCost()


@dataclass(frozen=True, eq=False)
class StepCosts:
    """Everything a live step pays, measured in the decoder's own loop (a step profile):
    the verify forward by q, drafting and the loop's overhead as fitted linear terms, and how
    well the fit reproduces the profiled trees (``fit``: largest relative error per term)."""

    verify: StepLatency
    draft: DraftCost
    overhead: OverheadCost
    # largest relative error of draft + overhead over the profiled trees, and the largest fall
    # of the measured verify time as q grows (verify_prices: priced pooled where it is noise)
    fit: dict[str, float]
    coefficients: dict[str, dict[int, list[float]]]  # term → batch → ms per feature

    def context(self, requested: int | None = None) -> int:
        """The profiled context a price is read at: the one nearest ``requested``; with none
        requested, the only one profiled (:func:`~treeopt.pricing.contexts.pick_context`)."""
        return pick_context(self.verify.contexts, requested, nearest=True,
                            where=self.verify.source)


@dataclass(frozen=True, eq=False)
class Throughput:
    """Predicted tokens/s of a run of steps, and the seconds of each term of their step (one
    entry per step; NaN where q is beyond the latency source)."""

    tokens_per_s: npt.NDArray[np.float64]
    verify_s: npt.NDArray[np.float64]
    draft_s: npt.NDArray[np.float64]
    overhead_s: npt.NDArray[np.float64]


def throughput(accept_length: npt.ArrayLike, *, tokens: Sequence[int],
               expanded: Sequence[tuple[int, ...]], verify: StepLatency,
               draft: DraftCost = NO_DRAFT, overhead: OverheadCost = NO_OVERHEAD, batch: int,
               context: int) -> Throughput:
    """The step-throughput formula, for steps that verify ``tokens`` (q), expand ``expanded``
    nodes per depth and accept ``accept_length`` (E[L]) tokens per row:
    ``tokens/s = b · E[L] / (t_verify(b, s, q) + t_draft(b, expanded) + t_overhead(b, q,
    depth))``, where depth is ``len(expanded)``.

    >>> lat = StepLatency({(2, 8): (np.array([1.0, 3.0]), np.array([0.01, 0.02]))}, "toy")
    >>> throughput([1.0, 1.5], tokens=[1, 3], expanded=[(), (1, 1)], verify=lat, batch=2,
    ...            context=8).tokens_per_s.tolist()
    [200.0, 150.0]
    """
    t_verify = verify.seconds(batch, context, np.asarray(tokens))
    t_draft = np.array([draft.seconds(batch, e) for e in expanded], dtype=np.float64)
    t_over = np.array([overhead.seconds(batch, q, len(e)) for q, e in zip(tokens, expanded,
                                                                          strict=True)],
                      dtype=np.float64)
    tokens_per_s = batch * np.asarray(accept_length, dtype=np.float64) / (
        t_verify + t_draft + t_over)
    return Throughput(tokens_per_s, t_verify, t_draft, t_over)


def draft_features(expanded: Sequence[int], *, per_depth: bool) -> list[float]:
    """What drafting a tree costs in proportion to: a tree at all, each depth (a head, or a call
    of one), and — for drafters called per depth — each node expanded (a row of the call).

    >>> draft_features((1, 2, 1), per_depth=True), draft_features((), per_depth=False)
    ([1.0, 3.0, 4.0], [0.0, 0.0])
    """
    base = [float(bool(expanded)), float(len(expanded))]
    return base + [float(sum(expanded))] if per_depth else base


def overhead_features(tokens: int, depth: int) -> list[float]:
    """What the loop's own work costs in proportion to: a step, a step with a tree (a tree
    step's bookkeeping — longest path, gathers, cache moves — is work an autoregressive step
    skips, so the autoregressive step keeps its own intercept and the speed-up's denominator is
    priced as measured), each token verified beyond the root (acceptance reads every node), each
    depth (a longer accepted path to read and move).

    >>> overhead_features(5, 2), overhead_features(1, 0)
    ([1.0, 1.0, 4.0, 2.0], [1.0, 0.0, 0.0, 0.0])
    """
    return [1.0, float(depth > 0), float(tokens - 1), float(depth)]


def _fit(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Least squares with non-negative coefficients: a term that comes out negative (noise on a
    cost that is really zero) is dropped and the rest refitted."""
    keep = np.ones(x.shape[1], dtype=bool)
    while True:
        coef = np.zeros(x.shape[1])
        if keep.any():
            coef[keep] = np.linalg.lstsq(x[:, keep], y, rcond=None)[0]
        if (coef >= 0).all():
            return coef
        keep &= coef > 0


def step_costs(records: Sequence[StepRecord], *, kind: str, source: str,
               device: str = "", verify_records: Sequence[StepRecord] | None = None,
               **verify_meta: Any) -> StepCosts:
    """Fit :class:`StepCosts` to a step profile's records (:class:`~treeopt.documents.step_profile.
    StepRecord`): each gives a batch, a tree (size, depth, tokens q, nodes expanded per depth),
    the context and the milliseconds per step of its draft, verify and bookkeeping phases.

    The loop's time outside drafting when there is no tree (the autoregressive records) belongs
    to the overhead; drafting is what a tree adds on top of it.

    Drafting and the overhead are priced as measured where the profile measured them —
    drafting by (batch, nodes expanded per depth), the overhead by (batch, q, depth), the
    median where several records (or pooled profiles) share a key — and by the fit in between:
    neither is quite linear in those features, so a profiled tree is priced without the fit's
    error. ``fit`` says how far the fit is from the profiled trees.

    ``verify_records``: the records the verify forward is priced from (default ``records``;
    :mod:`~treeopt.pricing.shared_verify` gives the drafter's own with other drafters' of the
    same model and machine); ``verify_meta`` goes into the verify latency's ``meta``.
    """
    per_depth = drafter_kind(kind, source=f"{source}: heads kind").per_depth
    batches = sorted({r.batch for r in records})
    contexts = [int(r.context) for r in records]
    context = int(np.median(contexts)) if contexts else 0
    coefficients: dict[str, dict[int, list[float]]] = {"draft": {}, "overhead": {}}
    measured_draft: dict[tuple[int, tuple[int, ...]], list[float]] = {}
    measured_overhead: dict[tuple[int, int, int], list[float]] = {}
    worst = 0.0
    for b in batches:
        rows = [r for r in records if r.batch == b]
        ar = [r for r in rows if r.size == 0]
        if not ar:
            raise TreeoptError(f"{source}: no autoregressive record (size 0) at batch {b}")
        residue = float(np.median([r.ms_draft for r in ar]))  # the loop outside drafting
        xd = np.array([draft_features(r.expanded, per_depth=per_depth) for r in rows])
        yd = np.array([r.ms_draft - residue for r in rows])
        xo = np.array([overhead_features(r.q, r.depth) for r in rows])
        yo = np.array([r.ms_bookkeeping + residue for r in rows])
        cd, co = _fit(xd, yd), _fit(xo, yo)
        for r, d, o in zip(rows, yd, yo, strict=True):
            measured_draft.setdefault((b, r.expanded), []).append(float(d))
            measured_overhead.setdefault((b, r.q, r.depth), []).append(float(o))
        coefficients["draft"][b], coefficients["overhead"][b] = cd.tolist(), co.tolist()
        step = np.array([r.ms_draft + r.ms_bookkeeping for r in rows])
        worst = max(worst, _worst(xd @ cd + xo @ co, step))
    verified = records if verify_records is None else verify_records
    priced, dip = verify_prices(verified)
    points = [(b, context, q, ms / 1e3) for b, by_q in priced.items() for q, ms in by_q.items()
              if b in batches]
    verify = StepLatency.from_points(points, source, context=context, device=device,
                                     **({"step_se": noise} if (noise := step_noise(verified))
                                        else {}), **verify_meta)
    draft_at = {k: max(float(np.median(v)), 0.0) for k, v in measured_draft.items()}
    overhead_at = {k: float(np.median(v)) for k, v in measured_overhead.items()}

    def draft_s(b: int, expanded: tuple[int, ...]) -> float:
        coef = _coefficients(coefficients["draft"], b, source)
        if (b, tuple(expanded)) in draft_at:
            return draft_at[(b, tuple(expanded))] / 1e3
        return float(np.dot(draft_features(expanded, per_depth=per_depth), coef)) / 1e3

    def overhead_s(b: int, tokens: int, depth: int) -> float:
        coef = _coefficients(coefficients["overhead"], b, source)
        if (b, tokens, depth) in overhead_at:
            return overhead_at[(b, tokens, depth)] / 1e3
        return float(np.dot(overhead_features(tokens, depth), coef)) / 1e3

    return StepCosts(verify, DraftCost(kind, source, draft_s), OverheadCost(source, overhead_s),
                     {"draft_and_overhead": worst,
                      "verify_dip": dip},
                     coefficients)


def step_noise(records: Sequence[StepRecord]) -> dict[str, float]:
    """Batch (as text, the JSON key) → the median relative standard error of the profiled trees'
    steps over their reference's (:attr:`~treeopt.documents.step_profile.StepRecord.se`): how
    far one record's price may be off. Empty where the profile records none.

    >>> from treeopt.documents.step_profile import StepRecord
    >>> rec = lambda b, se: StepRecord(b, 1, 1, 2, (1,), 100.0, 0.1, 1.0, 0.1, se=se)
    >>> step_noise([rec(1, 0.01), rec(1, 0.03), rec(1, 0.02), rec(8, None)])
    {'1': 0.02}
    """
    by_batch: dict[int, list[float]] = {}
    for r in records:
        if r.size > 0 and r.se is not None:
            by_batch.setdefault(r.batch, []).append(r.se)
    return {str(b): round(float(np.median(v)), 6) for b, v in sorted(by_batch.items())}


def _coefficients(table: dict[int, list[float]], batch: int, source: str) -> list[float]:
    if batch not in table:
        raise TreeoptError(f"{source}: no step profile at batch {batch}; profiled batches "
                           f"{sorted(table)}")
    return table[batch]


def _worst(predicted: npt.NDArray[np.float64], measured: npt.NDArray[np.float64]) -> float:
    """Largest relative error of a fit over the points it was fitted to."""
    return float(np.max(np.abs(predicted / measured - 1.0))) if measured.size else 0.0


def expanded_nodes(paths: Sequence[Path]) -> tuple[int, ...]:
    """Nodes each depth's head runs on: the root at depth 0, then every node that has a child.

    >>> expanded_nodes([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
    (1, 2, 1)
    """
    if not paths:
        return ()
    depth = max(len(p) for p in paths)
    parents = {p[:-1] for p in paths}
    return tuple(sum(1 for p in parents if len(p) == k) for k in range(depth))
