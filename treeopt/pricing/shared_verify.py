"""The verify step shared by every drafter of one base model.

A step profile times three phases of the live step: drafting, the verify forward and the loop's
bookkeeping. Drafting and bookkeeping are the drafter's own. The verify forward is not: it is the
base model's forward over the q tokens of a tree, and it costs the same whichever drafter
proposed the tree. Every drafter profiled on one model and machine therefore measures the same
verify step, each in a few rounds of its own, at its own hour. One profile alone prices a tree
with its own rounds' noise: SmolLM2's n-gram trie profile timed its autoregressive step at
batch 8 16% above the other five drafters' median (70.0 against 60.2 ms), and its 8-node chain
at batch 8 was priced 23% faster than it ran.

:func:`shared_verify_costs` prices the verify step from every such profile at once. Each other
profile's verify times are first scaled, batch by batch, so that its autoregressive step is the
drafter's own profile's: the drafter's profile keeps the level of the host at its hour, which
its sweep met minutes later, and the others contribute the shape (how a step's cost grows with
q), the median of all of them at each q. Only profiles that agree with the drafter's own within
their noise are shared (:func:`agrees`): on a model so small that the step is Python, each
drafter's loop times more than the forward in its verify phase, and well-timed profiles there
disagree beyond their noise. On the SmolLM2 demo (profiles of 2 rounds) sharing took the points
of the shipped sweeps within 5% of the prediction from 139 to 143 of 155; on the shipped demo
(profiles timed to a 2% standard error) it shares little and changes no count (165 of 178);
shared without the agreement test, that count fell to 158.

Numpy only (no torch): the app prices with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from treeopt.documents.step_profile import POOLED_ALIKE, StepProfile, StepRecord
from treeopt.errors import TreeoptError
from treeopt.pricing.costs import StepCosts, step_costs
from treeopt.pricing.verify_prices import beyond_noise, record_medians, record_noise

# what a verify step's cost depends on: every field pooled profiles must share but the drafter
SHARED_ALIKE = tuple(k for k in POOLED_ALIKE if k != "heads")


def unlike(own: StepProfile, other: StepProfile) -> str | None:
    """Why ``other`` does not share ``own``'s verify step (another model, dtype, device, …;
    another CPU), or None where it profiled the same model on the same setup."""
    differ = own.differences(other, SHARED_ALIKE)
    if differ:
        return (f"profiled with other {', '.join(differ)} than the drafter's own step profile; "
                "only profiles of one model and setup share their verify step")
    if (theirs := other.cpu_matmul) and (ours := own.cpu_matmul) and theirs != ours:
        return (f"profiled on a CPU with {theirs}, the drafter's own step profile on one with "
                f"{ours}; only profiles of one machine share their verify step")
    return None


def autoregressive_ms(profile: StepProfile) -> dict[int, float]:
    """Batch → the median verify milliseconds of the profile's autoregressive records (q = 1).

    >>> rec = lambda b, ms: StepRecord(b, 0, 0, 1, (), 100.0, 0.0, ms, 0.1)
    >>> records = (rec(1, 10.0), rec(1, 12.0), rec(8, 30.0))
    >>> autoregressive_ms(StepProfile({"kind": "hydra"}, records))
    {1: 11.0, 8: 30.0}
    """
    return {b: by_q[1] for b, by_q in record_medians(profile.records).items() if 1 in by_q}


def shared_verify_records(own: StepProfile, others: Sequence[StepProfile],
                          ) -> tuple[list[StepRecord], dict[str, list[str]]]:
    """``own``'s records, then each of ``others``' at the batches where the two agree
    (:func:`agrees`), their verify milliseconds scaled so that their autoregressive step is
    ``own``'s at that batch; and batch (as text, a JSON key) → the names of the profiles
    shared there (each other profile's first file's name, or its kind).

    >>> rec = lambda b, q, ms: StepRecord(b, q - 1, q - 1, q, (1,) * (q - 1), 100.0, 0.0, ms,
    ...                                   0.1, se=None if q == 1 else 0.05)
    >>> own = StepProfile({"kind": "hydra"}, (rec(1, 1, 10.0), rec(1, 2, 14.0)))
    >>> other = StepProfile({"kind": "eagle"}, (rec(1, 1, 20.0), rec(1, 2, 26.0), rec(2, 1, 9.0)))
    >>> records, shared = shared_verify_records(own, [other])
    >>> [(r.batch, r.q, r.ms_verify) for r in records], shared
    ([(1, 1, 10.0), (1, 2, 14.0), (1, 1, 10.0), (1, 2, 13.0)], {'1': ['eagle']})
    """
    reference = autoregressive_ms(own)
    records = list(own.records)
    shared: dict[int, list[str]] = {}  # batch → the names of the profiles shared there
    for other in others:
        theirs = autoregressive_ms(other)
        name = Path(other.sources[0]).name if other.sources else other.kind
        for b in sorted(set(reference) & set(theirs)):
            scaled = [replace(r, ms_verify=r.ms_verify * reference[b] / theirs[b])
                      for r in other.records if r.batch == b]
            if agrees(own.records, scaled, b):
                records += scaled
                shared.setdefault(b, []).append(name)
    return records, {str(b): names for b, names in sorted(shared.items())}


def agrees(own: Sequence[StepRecord], other: Sequence[StepRecord], batch: int) -> bool:
    """Whether ``other``'s verify times at ``batch`` (scaled to ``own``'s autoregressive step)
    agree with ``own``'s within their noise: at every q both timed with a standard error, the
    two medians lie within twice the records' joint relative standard error of each other
    (:func:`~treeopt.pricing.verify_prices.beyond_noise`, the test a fall in one profile's
    verify times meets). Profiles that disagree measured another verify step (a drafter whose
    loop times more than the forward in it, as on a model so small that the step is Python) or
    the host in another state, and are not shared; so are profiles that record no standard
    error, whose agreement cannot be told.

    >>> rec = lambda q, ms, se: StepRecord(1, q - 1, q - 1, q, (1,) * (q - 1), 100.0, 0.0, ms,
    ...                                    0.1, se=se)
    >>> agrees([rec(2, 14.0, 0.05)], [rec(2, 15.0, 0.05)], 1)  # 7% apart, 7% joint noise
    True
    >>> agrees([rec(2, 14.0, 0.01)], [rec(2, 15.0, 0.01)], 1)  # 7% apart, 1.4% joint noise
    False
    """
    mine, theirs = (record_medians(own).get(batch, {}), record_medians(other).get(batch, {}))
    my_se, their_se = record_noise(own), record_noise(other)
    timed = [q for q in mine if q in theirs and my_se.get((batch, q)) is not None
             and their_se.get((batch, q)) is not None]
    return bool(timed) and not any(
        beyond_noise(abs(theirs[q] / mine[q] - 1), my_se[(batch, q)], their_se[(batch, q)])
        for q in timed)


def shared_verify_costs(own: StepProfile, others: Sequence[StepProfile], *,
                        source: str | None = None) -> StepCosts:
    """``own``'s step costs (its drafting and bookkeeping, :func:`~treeopt.pricing.costs.
    step_costs`) with the verify step priced from it and ``others`` together
    (:func:`shared_verify_records`); the verify latency's ``meta["shared_with"]`` names, per
    batch, the profiles shared there. ``source``: how what is priced names ``own`` (default
    its files)."""
    for other in others:
        if (why := unlike(own, other)) is not None:
            raise TreeoptError(f"{' + '.join(other.sources) or other.kind}: {why}")
    named = source or " + ".join(own.sources)
    records, shared = shared_verify_records(own, others)
    return step_costs(own.records, kind=own.kind, source=named, device=own.device or "",
                      verify_records=records, **({"shared_with": shared} if shared else {}))


__all__ = ["SHARED_ALIKE", "agrees", "autoregressive_ms", "shared_verify_costs",
           "shared_verify_records",
           "unlike"]
