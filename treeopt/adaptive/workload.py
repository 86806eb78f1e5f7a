"""What a chain of k draft steps accepts at every position of a trace, sequence by sequence,
and the workloads a replay runs: the trace as recorded, or reordered so that acceptance shifts.

A chain of k steps (top-k 1) accepts, at a position, its leading drafts that are the base
model's tokens, at most k: on a rank trace, the number of leading rank-0 entries capped at k
(:mod:`treeopt.model.simulation`); on a dynamic trace of top-k 1, the nodes a ``(1, k, k + 1)`` step
keeps (:meth:`treeopt.dynamic.simulate.DynamicTrace.accepted`). Counts exclude the bonus token,
as the engines' controllers count them, so a step emits the count + 1 tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from treeopt.dynamic.simulate import DynamicTrace
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.model.runs import as_runs
from treeopt.model.trace import RankTrace


@dataclass(frozen=True, eq=False)
class ChainAcceptance:
    """``accepted[t, k]``: draft tokens a chain of k steps accepts at position t (k = 0 …
    ``max_steps``), positions grouped into sequences of ``lengths``; ``source`` names it.

    >>> tr = RankTrace(np.array([[0, 0], [0, 1], [2, 0]], np.int16), {"sequence_positions": [3]})
    >>> ChainAcceptance.from_rank_trace(tr).accepted.tolist()
    [[0, 1, 2], [0, 1, 1], [0, 0, 0]]
    """

    accepted: npt.NDArray[np.int8]  # [positions, max_steps + 1]
    lengths: tuple[int, ...]
    source: str = "trace"

    def __post_init__(self) -> None:
        a = self.accepted
        if a.ndim != 2 or a.shape[1] < 2 or not a.shape[0]:
            raise TreeoptError(f"{self.source}: chain acceptance must be [positions, steps + 1] "
                               f"with steps ≥ 1, got shape {a.shape}")
        if any(n < 1 for n in self.lengths) or sum(self.lengths) != a.shape[0]:
            raise TreeoptError(f"{self.source}: sequence lengths must be ≥ 1 and sum to the "
                               f"{a.shape[0]} positions")

    @property
    def max_steps(self) -> int:
        return self.accepted.shape[1] - 1

    @property
    def sequences(self) -> int:
        return len(self.lengths)

    @cached_property
    def rows(self) -> list[list[int]]:
        """``accepted`` as nested lists, for the replay's per-round reads."""
        return self.accepted.tolist()

    @classmethod
    def from_rank_trace(cls, trace: RankTrace, *, source: str | None = None) -> ChainAcceptance:
        """From a rank trace that records its sequences (``sequence_positions``)."""
        counts = trace.sequence_lengths(source=source)  # every sequence a request
        lead = np.cumprod(trace.ranks == 0, axis=1).sum(axis=1)  # leading rank-0 entries
        steps = np.arange(trace.heads + 1)
        return cls(np.minimum(lead[:, None], steps[None, :]).astype(np.int8), tuple(counts),
                   source or str(trace.meta.get("source_path") or "rank trace"))

    @classmethod
    def from_dynamic(cls, trace: DynamicTrace, *, source: str = "dynamic trace",
                     ) -> ChainAcceptance:
        """From a dynamic trace of top-k 1: each k its own ``(1, k, k + 1)`` step."""
        if trace.topk != 1:
            raise TreeoptError(f"{source}: a dynamic trace of top-k {trace.topk}; the engines' "
                               "adaptive controllers draft chains, which a top-k 1 trace records")
        cols = [np.zeros(trace.places.shape[0], np.int64)]
        cols += [trace.accepted(DynamicSettings(1, k, k + 1)) - 1
                 for k in range(1, trace.steps + 1)]
        return cls(np.stack(cols, axis=1).astype(np.int8), trace.lengths, source)

    def bounds(self) -> list[tuple[int, int]]:
        """Each sequence's (first position, end)."""
        ends = np.cumsum(self.lengths).tolist()
        return [(e - n, e) for e, n in zip(ends, self.lengths, strict=True)]

    def difficulty(self) -> npt.NDArray[np.float64]:
        """Each sequence's mean accepted drafts of the deepest chain, over its positions."""
        return np.array([self.accepted[s:e, -1].mean() for s, e in self.bounds()])

    def select(self, order: Sequence[int], *, source: str | None = None) -> ChainAcceptance:
        """The sequences ``order`` names, in that order."""
        spans = self.bounds()
        rows = np.concatenate([np.arange(*spans[i]) for i in order])
        return ChainAcceptance(self.accepted[rows], tuple(self.lengths[i] for i in order),
                               source or self.source)

    def capped(self, max_steps: int) -> ChainAcceptance:
        """Only chains of up to ``max_steps`` steps."""
        return ChainAcceptance(self.accepted[:, : max_steps + 1], self.lengths, self.source)


# the workloads a demo's adaptive replay runs (the Live page's choice): its held-out sequences
WORKLOADS: dict[str, str] = {
    "steady": "held-out prompts in order",
    "shifting": "held-out prompts, easiest first (acceptance falls)",
}


def replayed_runs(heldout: RankTrace, *, sequences: int, positions: int) -> RankTrace:
    """The first ``sequences`` of a held-out trace (all, where it has fewer), each as a run of
    ``positions + 1`` new tokens sees it: its first ``positions`` positions, a target past the
    run's last token a miss (:func:`~treeopt.model.runs.as_runs`)."""
    held = len(heldout.meta.get("sequence_positions") or ())
    if not held:  # a trace that does not record its sequences: its first positions
        return heldout.sequences(sequences, positions=positions)
    return as_runs(heldout, [positions + 1] * min(sequences, held))


def replay_workload(heldout: RankTrace, workload: str, *, sequences: int, positions: int,
                    source: str) -> tuple[RankTrace, ChainAcceptance]:
    """:func:`replayed_runs` of a held-out trace, and their chains' acceptance as ``workload``
    (:data:`WORKLOADS`) orders them."""
    if workload not in WORKLOADS:
        raise TreeoptError(f"workload {workload!r}: expected one of {', '.join(WORKLOADS)}")
    trace = replayed_runs(heldout, sequences=sequences, positions=positions)
    acceptance = ChainAcceptance.from_rank_trace(trace, source=source)
    if workload == "shifting":
        acceptance = by_difficulty(acceptance, easy_first=True)
    return trace, acceptance


def by_difficulty(acceptance: ChainAcceptance, *, easy_first: bool = True) -> ChainAcceptance:
    """The sequences ordered by :meth:`ChainAcceptance.difficulty` (the easiest first, or the
    hardest; ties keep trace order): a workload whose acceptance drifts.

    >>> acc = ChainAcceptance(np.array([[0, 0], [0, 1], [0, 1]], np.int8), (1, 2))
    >>> by_difficulty(acc).lengths, by_difficulty(acc).source
    ((2, 1), 'trace, easiest first')
    """
    score = acceptance.difficulty()
    order = np.argsort(-score if easy_first else score, kind="stable").tolist()
    label = "easiest first" if easy_first else "hardest first"
    return acceptance.select(order, source=f"{acceptance.source}, {label}")


def shifted(first: ChainAcceptance, then: ChainAcceptance) -> ChainAcceptance:
    """``first``'s sequences, then ``then``'s (e.g. code, then prose), with the steps both
    record."""
    k = min(first.max_steps, then.max_steps)
    a, b = first.capped(k), then.capped(k)
    return ChainAcceptance(np.concatenate([a.accepted, b.accepted]), a.lengths + b.lengths,
                           f"{first.source}, then {then.source}")
