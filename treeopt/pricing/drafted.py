"""The price of steps that verify only what a lookup drafter drafted.

A lookup drafter (prompt lookup, the n-gram trie) may hold fewer tokens than its chain is deep:
the n-gram matched nowhere, or its continuation ends. Decoded with
:attr:`~treeopt.decoding.config.DecodeConfig.drafted_only`, a chain of depth D then verifies the
root and the m ≤ D tokens drafted, not D tokens with holes — what Hugging Face's prompt lookup
and vLLM's ``ngram`` and ``suffix`` methods verify. Acceptance is the same (a hole is never
accepted); the step is cheaper where the chain is short.

The trace records m at every position (:attr:`~treeopt.model.trace.RankTrace.drafted`); the
steps decoding takes are the trace walked step by step (:func:`~treeopt.model.simulation.
step_walk`), so a step that starts at position t drafts ``min(D, drafted[t])`` tokens. A batch's
step verifies every row's chain cut to the longest any row drafted, q = 1 + max m over its b
rows; with the rows' m drawn independently from the steps', ``P(max ≤ m) = F(m)^b``. Then

``tokens/s = b · E[L] / E[t_verify(b, s, 1 + M) + t_draft(b, M) + t_overhead(b, 1 + M, M)]``,

M the batch's longest draft: exact at batch 1, and at batch b where rows draft independently —
what ``select`` prices for a serving load. A run of the trace's own sequences (a live sweep's
point) meets its rows' drafts jointly: :func:`window_longest` reads M from that run's steps.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError
from treeopt.model.simulation import step_walk, window_steps
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.pricing.costs import (
    NO_DRAFT,
    NO_OVERHEAD,
    DraftCost,
    OverheadCost,
    StepLatency,
    Throughput,
)

DRAFTED_CHAIN = "drafted chain"  # a selection point's family: chains verified as drafted

NO_DRAFTED = ("records no drafted chain lengths, which drafted-only steps are priced by: "
              "calibrate a lookup drafter (prompt lookup, the n-gram trie, suffix decoding) "
              "again (traces from before this version hold none)")


def prices_drafted(trace: RankTrace | None) -> bool:
    """Whether pricing with ``trace`` prices drafted chains beside the whole trees by default:
    where the trace records how far its lookup drafter drafted (``select`` without
    ``--drafted-only`` or ``--no-drafted-only``, and the demo's selections)."""
    return trace is not None and trace.drafted is not None


def step_drafts(depth: int, trace: RankTrace) -> tuple[npt.NDArray[np.int64],
                                                       npt.NDArray[np.int64]]:
    """The steps greedy decoding takes with the chain of ``depth`` along the trace: each one's
    accepted tokens and the chain tokens drafted at its start, sequence by sequence.

    >>> tr = RankTrace(np.array([[-1, -1], [0, 0], [0, -1], [-1, -1], [0, 0]], np.int16),
    ...                {"sequence_positions": [5]}, drafted=np.array([0, 2, 1, 1, 2]))
    >>> [a.tolist() for a in step_drafts(2, tr)]
    [[1, 3, 3], [0, 2, 2]]
    """
    lengths, drafts, _ = _walked_drafts(depth, trace)
    return lengths, drafts


def _walked_drafts(depth: int, trace: RankTrace) -> tuple[npt.NDArray[np.int64],
                                                          npt.NDArray[np.int64], list[int]]:
    """:func:`step_drafts`, with each sequence's step count."""
    if trace.drafted is None:
        raise TreeoptError(f"the rank trace {NO_DRAFTED}")
    walked = step_walk(Tree.chain(depth), trace)
    if walked is None:
        raise TreeoptError("the rank trace lacks 'sequence_positions', which the steps need")
    lengths, per_sequence = walked
    starts, at, i = np.zeros(len(lengths), np.int64), 0, 0
    for (_, steps), n in zip(per_sequence, trace.meta["sequence_positions"], strict=True):
        run = lengths[i: i + steps]
        starts[i: i + steps] = at + np.concatenate([[0], np.cumsum(run)[:-1]])
        i, at = i + steps, at + n
    drafts = np.minimum(trace.drafted[starts].astype(np.int64), depth)
    return lengths, drafts, [steps for _, steps in per_sequence]


def longest_of(drafts: npt.NDArray[np.int64], depth: int, batch: int) -> npt.NDArray[np.float64]:
    """P(M = m), m = 0 … ``depth``: the longest of ``batch`` rows' drafts, each drawn from
    ``drafts`` (the steps' drafted tokens).

    >>> longest_of(np.array([0, 2]), 2, 1).tolist(), longest_of(np.array([0, 2]), 2, 2).tolist()
    ([0.5, 0.0, 0.5], [0.25, 0.0, 0.75])
    """
    share = np.bincount(drafts, minlength=depth + 1)[: depth + 1] / max(len(drafts), 1)
    below = np.cumsum(share) ** batch
    return np.diff(np.concatenate([[0.0], below]))


def window_longest(depth: int, trace: RankTrace, batch: int, *,
                   continuous: bool = False) -> npt.NDArray[np.float64] | None:
    """P(M = m), m = 0 … ``depth``, over the steps a batched run of the trace's own sequences
    takes while all its rows run (:func:`window_drafts`): the rows' drafts as that run meets
    them, where :func:`longest_of` draws them independently from all the steps. None with fewer
    sequences than ``batch``.

    >>> tr = RankTrace(np.array([[0], [-1], [-1], [-1]], np.int16),
    ...                {"sequence_positions": [2, 2]}, drafted=np.array([1, 0, 0, 0]))
    >>> window_longest(1, tr, 2).tolist(), longest_of(step_drafts(1, tr)[1], 1, 2).tolist()
    ([0.0, 1.0], [0.4444444444444444, 0.5555555555555556])
    """
    longest = window_drafts(depth, trace, batch, continuous=continuous)
    if longest is None:
        return None
    return np.bincount(longest, minlength=depth + 1)[: depth + 1] / len(longest)


def window_drafts(depth: int, trace: RankTrace, batch: int, *,
                  continuous: bool = False) -> npt.NDArray[np.int64] | None:
    """The longest draft M among the rows of each step that a run of the trace's sequences with
    ``batch`` rows takes while all its rows run (:func:`~treeopt.model.simulation.window_steps`:
    groups of ``batch`` sequences, or ``continuous`` batching), in step order; each such step
    verifies 1 + M tokens per row. None with fewer sequences than ``batch``."""
    _, drafts, counts = _walked_drafts(depth, trace)
    if len(counts) < batch:
        return None
    return drafts[window_steps(counts, batch, continuous=continuous)].max(axis=1)


def step_seconds(p: npt.NDArray[np.float64], *, verify: StepLatency, draft: DraftCost = NO_DRAFT,
                 overhead: OverheadCost = NO_OVERHEAD, batch: int,
                 context: int) -> npt.NDArray[np.float64]:
    """Expected verify, draft and overhead seconds of a step whose longest draft M has the
    distribution ``p`` (P(M = m), m = 0 … len(p) - 1): q = 1 + M tokens verified."""
    m = np.arange(len(p))
    seconds = np.stack([verify.seconds(batch, context, m + 1),
                        [draft.seconds(batch, (1,) * k) for k in m],
                        [overhead.seconds(batch, k + 1, k) for k in m]])
    used = p > 0  # a size never taken adds nothing, even beyond the latency source
    return seconds[:, used] @ p[used]


def chain_steps(trace: RankTrace, max_depth: int) -> tuple[npt.NDArray[np.float64],
                                                          list[npt.NDArray[np.int64]]]:
    """Per-step E[L] of the chains of depth 0 … ``max_depth`` along the trace, and the tokens
    each one's steps drafted (:func:`step_drafts`; depth 0 drafts nothing): what
    :func:`drafted_price` prices at any batch and context.

    >>> tr = RankTrace(np.array([[0, 0], [0, -1], [0, 0]], np.int16),
    ...                {"sequence_positions": [3]}, drafted=np.array([2, 1, 2]))
    >>> ell, drafts = chain_steps(tr, 2)
    >>> ell.tolist(), [d.tolist() for d in drafts]
    ([1.0, 2.0, 3.0], [[0], [1, 1], [2]])
    """
    ell, drafts = np.ones(max_depth + 1), [np.zeros(1, np.int64)]
    for depth in range(1, max_depth + 1):
        accepted, drafted = step_drafts(depth, trace)
        ell[depth] = accepted.mean() if len(accepted) else 1.0
        drafts.append(drafted)
    return ell, drafts


def drafted_price(ell: npt.NDArray[np.float64], drafts: list[npt.NDArray[np.int64]], *,
                  verify: StepLatency, draft: DraftCost = NO_DRAFT,
                  overhead: OverheadCost = NO_OVERHEAD, batch: int, context: int) -> Throughput:
    """The predicted tokens/s (with each term's expected seconds) of the chains of
    :func:`chain_steps` verified as drafted (NaN where a step's q is beyond the latency
    source)."""
    terms = np.zeros((3, len(ell)))  # verify, draft, overhead seconds, expected
    for depth, drafted in enumerate(drafts):
        terms[:, depth] = step_seconds(longest_of(drafted, depth, batch), verify=verify,
                                       draft=draft, overhead=overhead, batch=batch,
                                       context=context)
    return Throughput(batch * ell / terms.sum(axis=0), terms[0], terms[1], terms[2])


def drafted_throughput(trace: RankTrace, *, max_depth: int, verify: StepLatency,
                       draft: DraftCost = NO_DRAFT, overhead: OverheadCost = NO_OVERHEAD,
                       batch: int, context: int) -> tuple[npt.NDArray[np.float64], Throughput]:
    """Per-step E[L] and the predicted tokens/s of the chains of depth 0 … ``max_depth``
    verified as drafted: :func:`chain_steps`, then :func:`drafted_price`."""
    ell, drafts = chain_steps(trace, max_depth)
    return ell, drafted_price(ell, drafts, verify=verify, draft=draft, overhead=overhead,
                              batch=batch, context=context)
