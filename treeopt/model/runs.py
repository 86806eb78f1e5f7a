"""A rank trace as live runs see it: the positions a run of a budget of new tokens starts its
steps at, and only the targets it keeps.

A run stops at its last token (its EOS, or the last of its budget) and keeps nothing after it.
Live decoding counts each step's kept tokens (:class:`~treeopt.decoding.batch_rows.BatchRows`),
so a target at or past the run's last token is a miss here: each step of the walk then accepts
what the run keeps, and the walk of a trace calibrated with the run's budget and EOS
(:func:`treeopt.decoding.rank_pass.cut_to_run`) takes every step the run takes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from treeopt.model.trace import RankTrace


def past_run_end(kept: int, depths: int, new_tokens: int) -> np.ndarray:
    """``[kept, depths]``: where the target of depth ``d + 1`` at position ``t`` lies at or past
    the last token of a run of ``new_tokens`` (new token ``new_tokens - 1``), a miss.

    >>> past_run_end(2, 2, 3).tolist()
    [[False, True], [True, True]]
    """
    target = np.arange(kept)[:, None] + 1 + np.arange(depths)[None, :]
    return target >= new_tokens - 1


def as_runs(trace: RankTrace, new_tokens: Sequence[int]) -> RankTrace:
    """The first ``len(new_tokens)`` sequences of ``trace`` as live runs that kept
    ``new_tokens[i]`` new tokens each see them: the positions their steps start at (the first
    ``new_tokens[i] - 1``, or fewer where the trace holds fewer), a target at or past each run's
    last token a miss.

    >>> t = RankTrace(np.zeros((6, 2), np.int16), {"sequence_positions": [4, 2]})
    >>> run = as_runs(t, [4, 5])
    >>> run.meta["sequence_positions"], run.ranks.tolist()
    ([3, 2], [[0, 0], [0, -1], [-1, -1], [0, 0], [0, 0]])
    """
    cut = trace.sequences(len(new_tokens), positions=[max(n - 1, 0) for n in new_tokens])
    ranks = cut.ranks.copy()
    at = 0
    for n, kept in zip(new_tokens, cut.meta["sequence_positions"], strict=True):
        ranks[at: at + kept][past_run_end(kept, cut.heads, n)] = -1
        at += kept
    return RankTrace(ranks, cut.meta, cut.drafted)


def as_run(trace: RankTrace, new_tokens: int) -> RankTrace:
    """Every sequence of ``trace`` as a live run of ``new_tokens`` new tokens sees it
    (:func:`as_runs`; a sequence that ended earlier, at its EOS, as it ended). Acceptance changes
    along a continuation — on the demo it rises, so a 256-token trace predicts a 64-token run's
    E[L] about 5% high. A trace that does not record its sequences is returned as it is.

    >>> t = RankTrace(np.zeros((5, 1), np.int16), {"sequence_positions": [2, 3]})
    >>> as_run(t, 3).ranks[:, 0].tolist(), as_run(t, 9).positions
    ([0, -1, 0, -1], 5)
    """
    counts = trace.meta.get("sequence_positions")
    if not counts:
        return trace
    return as_runs(trace, [new_tokens] * len(counts))


__all__ = ["as_run", "as_runs", "past_run_end"]
