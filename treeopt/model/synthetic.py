"""Synthetic rank traces with a realistic skew, for benchmarks, tests and the bundled example.

Each head's rank follows a truncated geometric law whose top-1 accuracy falls with depth, and a
head that follows a correct (rank-0) head is more often right itself — the dependence that
sequentially dependent (Hydra) heads show and Medusa's independence model ignores. These traces
are labelled ``synthetic`` in their meta; nothing measured is ever replaced by them.
"""

from __future__ import annotations

import numpy as np

from treeopt.model.trace import MISS, RankTrace

# top-1 accuracies of heads 1..5, of the order the Medusa paper reports for Vicuna-7B heads
DEFAULT_TOP1 = (0.60, 0.42, 0.33, 0.27, 0.23)


def synthetic_trace(positions: int, *, heads: int = 5, top_k: int = 10, seed: int = 0,
                    top1: tuple[float, ...] = DEFAULT_TOP1, coupling: float = 0.15) -> RankTrace:
    """A trace of ``positions`` × ``heads`` ranks; ``coupling`` raises P(rank 0 | parent rank 0).

    >>> synthetic_trace(4, heads=2, seed=1).ranks.shape
    (4, 2)
    """
    rng = np.random.default_rng(seed)
    ranks = np.empty((positions, heads), dtype=np.int16)
    prev_right = np.ones(positions, dtype=bool)
    for k in range(heads):
        p = top1[min(k, len(top1) - 1)]
        p_here = np.where(prev_right, min(p + coupling, 0.95), max(p - coupling, 0.02))
        # geometric rank: P(rank = i) = p (1-p)^i; beyond the recorded top-k it is a miss
        rank = rng.geometric(p_here) - 1
        ranks[:, k] = np.where(rank < top_k, rank, MISS)
        prev_right = ranks[:, k] == 0
    meta = {"synthetic": True, "head_kind": "synthetic", "top_k": top_k, "seed": seed,
            "note": "geometric ranks with coupled heads; not measured on any model"}
    return RankTrace(ranks, meta)
