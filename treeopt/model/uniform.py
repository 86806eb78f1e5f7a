"""Level-uniform trees (vLLM's tree drafter): a search over per-level branching factors.

A uniform tree is given by a branching vector (c_1 … c_D): every node at depth l-1 has the c_l
children ranked 0 … c_l-1, so depth l holds c_1·…·c_l nodes. A path of depth l is accepted iff
ρ_j < c_j for every j ≤ l, hence

    E[L] = 1 + Σ_l P(ρ_1 < c_1, …, ρ_l < c_l)

which is a product of cumulative accuracies under the independence model and a count over the
trace under the empirical model. The family is not nested, so every vector within the caps is
scored (depth-first, sharing work between vectors with a common prefix).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError
from treeopt.model.acceptance import Source, accuracy_table
from treeopt.model.trace import RankTrace

# level_probability(prefix_state, level, c) -> (probability of acceptance through this level, state)
LevelFn = Callable[[object, int, int], tuple[float, object]]


def grow_uniform(source: Source, *, method: str, max_nodes: int, max_depth: int,
                 max_rank: int) -> tuple[tuple[tuple[int, ...], ...], npt.NDArray[np.float64]]:
    """Best branching vector and its E[L] for every size 1 … max_nodes (at most that many nodes).

    >>> tr = RankTrace(np.array([[0, 0], [0, 1], [1, 0], [0, 0]], np.int16))
    >>> vectors, ell = grow_uniform(tr, method="empirical", max_nodes=4, max_depth=2, max_rank=2)
    >>> vectors, ell.tolist()
    (((1,), (1, 1), (1, 2), (2, 1)), [1.0, 1.75, 2.25, 2.5, 2.75])
    """
    max_nodes = min(max_nodes, largest_uniform(max_depth=max_depth, max_rank=max_rank,
                                               limit=max_nodes))
    level = (_independent(source) if method == "independent"
             else _empirical(source, max_rank=max_rank, max_depth=max_depth))
    best_ell = np.full(max_nodes + 1, -np.inf)
    best_ell[0] = 1.0
    best_vec: list[tuple[int, ...]] = [()] * (max_nodes + 1)

    def visit(prefix: tuple[int, ...], state: object, width: int, used: int, ell: float) -> None:
        depth = len(prefix)
        for c in range(1, max_rank + 1):
            size = used + width * c
            if size > max_nodes:
                break
            p, child_state = level(state, depth, c)
            vec, value = prefix + (c,), ell + p
            if value > best_ell[size] + 1e-15:
                best_ell[size], best_vec[size] = value, vec
            if p > 0 and depth + 1 < max_depth:
                visit(vec, child_state, width * c, size, value)

    visit((), None, 1, 0, 1.0)
    # the best tree with at most n nodes: carry the running best forward (ties keep the smaller)
    for n in range(1, max_nodes + 1):
        if best_ell[n] <= best_ell[n - 1] + 1e-15:
            best_ell[n], best_vec[n] = best_ell[n - 1], best_vec[n - 1]
    return tuple(best_vec[1:]), best_ell


def largest_uniform(*, max_depth: int, max_rank: int, limit: int | None = None) -> int:
    """Nodes of the largest uniform tree within the caps, R + R² + … + R^D (counting stops
    once past ``limit``): no larger tree exists, so sizes beyond it are not grown.

    >>> largest_uniform(max_depth=3, max_rank=2), largest_uniform(max_depth=60, max_rank=16, limit=100)
    (14, 272)
    """
    total, level = 0, 1
    for _ in range(max_depth):
        level *= max_rank
        total += level
        if limit is not None and total > limit:
            break
    return total


def capped_note(requested: int, grown: int) -> str:
    """The growth meta's note when ``--max-nodes`` asked for more than the caps allow."""
    return (f"--max-nodes {requested} is more than the largest uniform tree within the caps "
            f"({grown} nodes); grew sizes 1 … {grown}")


def _independent(source: Source) -> LevelFn:
    cumulative = accuracy_table(source).cumulative  # [heads, top_k]

    def level(state: object, depth: int, c: int) -> tuple[float, object]:
        prob = (1.0 if state is None else float(state)) * float(cumulative[depth, c - 1])
        return prob, prob

    return level


def _empirical(source: Source, *, max_rank: int, max_depth: int) -> LevelFn:
    if not isinstance(source, RankTrace):
        raise TreeoptError("the empirical method needs a rank trace, not an accuracy table")
    rows, weights = _compressed_rows(source, max_rank=max_rank, depth=min(max_depth, source.heads))
    total = float(source.positions)

    def level(state: object, depth: int, c: int) -> tuple[float, object]:
        idx = np.arange(rows.shape[0]) if state is None else state
        kept = idx[rows[idx, depth] < c]  # type: ignore[index]
        return float(weights[kept].sum()) / total, kept

    return level


def _compressed_rows(trace: RankTrace, *, max_rank: int,
                     depth: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Distinct rows of the first ``depth`` ranks (clipped to 0..max_rank, max_rank = missed)
    and how many positions share each: far fewer rows than positions."""
    base = max_rank + 1
    clipped = np.where(trace.ranks[:, :depth] < 0, max_rank,
                       np.minimum(trace.ranks[:, :depth], max_rank)).astype(np.int64)
    if depth * np.log2(base) > 62:  # keys would overflow int64: compare rows directly
        rows, weights = np.unique(clipped, axis=0, return_counts=True)
        return rows, weights
    key = np.zeros(trace.positions, dtype=np.int64)
    for h in range(depth):
        key = key * base + clipped[:, h]
    uniq, weights = np.unique(key, return_counts=True)
    rows = np.stack([(uniq // base ** (depth - 1 - h)) % base for h in range(depth)], axis=1)
    return rows, weights
