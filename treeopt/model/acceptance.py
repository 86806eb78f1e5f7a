"""The two acceptance models: the probability that a tree node is accepted at a step.

- ``independent`` (Medusa's model): the product of the marginal top-i accuracies along the path;
  needs only an :class:`~treeopt.model.accuracy.AccuracyTable`.
- ``empirical``: the fraction of trace positions whose rank prefix equals the path; exact under
  greedy verification, for independent and sequentially dependent (Hydra) heads alike.

In both, a child's value never exceeds its parent's, and E[L](T) = 1 + Σ_{node ∈ T} value(node).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError
from treeopt.model.accuracy import AccuracyTable
from treeopt.model.simulation import accept_lengths, node_visits
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Path, Tree

Method = Literal["independent", "empirical"]
Source = RankTrace | AccuracyTable
METHODS: tuple[str, ...] = ("independent", "empirical")


def methods_for(source: Source) -> tuple[Method, ...]:
    """The models a source supports, best first: a trace both (empirical is exact), an accuracy
    table only the independent one.

    >>> methods_for(RankTrace(np.zeros((1, 1), np.int16)))
    ('empirical', 'independent')
    """
    return ("empirical", "independent") if isinstance(source, RankTrace) else ("independent",)


def usable_method(source: Source, method: str | None = None) -> Method:
    """``method`` when ``source`` supports it, else the best model it does support."""
    methods = methods_for(source)
    return method if method in methods else methods[0]  # type: ignore[return-value]


def accuracy_table(source: Source) -> AccuracyTable:
    """The accuracy table of ``source`` (computed from the trace when given one)."""
    return source if isinstance(source, AccuracyTable) else AccuracyTable.from_trace(source)


def independent_value(marginal: npt.NDArray[np.float64], path: Path) -> float:
    """Product of per-depth marginal accuracies along ``path`` (0 beyond the table).

    >>> independent_value(np.array([[0.5, 0.2], [0.4, 0.1]]), (0, 1))
    0.05
    """
    value = 1.0
    for depth, rank in enumerate(path):
        if depth >= marginal.shape[0] or rank >= marginal.shape[1]:
            return 0.0
        value *= float(marginal[depth, rank])
    return value


def prefix_counts(trace: RankTrace, *, max_depth: int, max_rank: int) -> dict[Path, int]:
    """Positions whose rank prefix equals each path (depth ≤ max_depth, ranks < max_rank).

    Vectorised per depth: positions are grouped by their prefix with ``np.unique``.

    >>> tr = RankTrace(np.array([[0, 0], [0, 1], [1, 0], [0, 0]], np.int16))
    >>> prefix_counts(tr, max_depth=2, max_rank=4)
    {(0,): 3, (1,): 1, (0, 0): 2, (0, 1): 1, (1, 0): 1}
    """
    counts: dict[Path, int] = {}
    group_paths: list[Path] = [()]
    group = np.zeros(trace.positions, dtype=np.int64)  # prefix id of each live position
    live = np.arange(trace.positions)
    for d in range(min(max_depth, trace.heads)):
        rank = trace.ranks[live, d].astype(np.int64)
        ok = (rank >= 0) & (rank < max_rank)
        live, key = live[ok], group[ok] * max_rank + rank[ok]
        if live.size == 0:
            break
        uniq, group, cnt = _group(key, space=len(group_paths) * max_rank)
        group_paths = [group_paths[u // max_rank] + (int(u % max_rank),) for u in uniq.tolist()]
        counts.update(zip(group_paths, cnt.tolist(), strict=True))
    return counts


def _group(key: npt.NDArray[np.int64], *, space: int) -> tuple[npt.NDArray[np.int64], ...]:
    """Distinct keys, each key's group index, and group sizes (``np.unique`` semantics).

    When the key space is small a histogram replaces the sort: O(n) instead of O(n log n).
    """
    if space > 4 * key.size + 1024:
        return tuple(np.unique(key, return_inverse=True, return_counts=True))
    hist = np.bincount(key, minlength=space)
    present = np.flatnonzero(hist)
    ids = np.full(space, -1, dtype=np.int64)
    ids[present] = np.arange(present.size)
    return present, ids[key], hist[present]


def node_probabilities(tree: Tree, source: Source, *, method: Method) -> npt.NDArray[np.float64]:
    """P(node accepted) for every node of ``tree`` under ``method``, in canonical order."""
    if method == "independent":
        marginal = accuracy_table(source).marginal
        return np.array([independent_value(marginal, p) for p in tree.paths], dtype=np.float64)
    if method == "empirical":
        trace = _require_trace(source, method)
        trace.require(heads=tree.depth, source="empirical model")
        return node_visits(tree, trace) / trace.positions
    raise TreeoptError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")


def expected_accept_length(tree: Tree, source: Source, *, method: Method) -> float:
    """E[L](T) = 1 + Σ_{node ∈ T} P(node accepted).

    >>> tr = RankTrace(np.array([[0, 0], [0, 1], [1, 0], [2, 0], [-1, 0]], np.int16))
    >>> t = Tree.from_choices([[0], [1], [0, 0]])
    >>> round(expected_accept_length(t, tr, method="empirical"), 12)
    1.8
    """
    if method == "empirical":
        trace = _require_trace(source, method)
        return float(accept_lengths(tree, trace).mean())
    return 1.0 + float(node_probabilities(tree, source, method=method).sum())


def _require_trace(source: Source, method: str) -> RankTrace:
    if not isinstance(source, RankTrace):
        raise TreeoptError(
            f"the {method} model needs a rank trace, not an accuracy table; "
            "use the independent method with accuracy tables")
    return source
