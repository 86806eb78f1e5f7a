"""Slow, readable reference of the papers' tree search, kept to check and time the fast one.

Medusa's and Hydra's tree search is greedy: at each step, try every frontier candidate (a child of a
node already in the tree), simulate the enlarged tree over the whole calibration set, and keep the
candidate that raises the mean accepted length most. :func:`treeopt.model.growth.grow` reaches the
same trees by one pass over rank-prefix counts; tests compare the two and
``benchmarks/bench_grow.py`` prints the speed ratio.
"""

from __future__ import annotations

from treeopt.model.simulation import accept_lengths
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Path, Tree, canonical_key


def greedy_by_resimulation(trace: RankTrace, *, max_nodes: int, max_depth: int,
                           max_rank: int) -> tuple[list[Path], list[float]]:
    """Grow node by node, re-simulating every frontier candidate; ties go to canonical order."""
    order: list[Path] = []
    ell = [1.0]
    frontier = {(r,) for r in range(max_rank)}
    while frontier and len(order) < max_nodes:
        best: tuple[float, Path] | None = None
        for cand in sorted(frontier, key=canonical_key):
            value = float(accept_lengths(Tree.from_choices(order + [cand]), trace).mean())
            if best is None or value > best[0] + 1e-12:
                best = (value, cand)
        assert best is not None
        if best[0] <= ell[-1] + 1e-12:  # no candidate is ever accepted: stop, as grow() does
            break
        order.append(best[1])
        ell.append(best[0])
        frontier.discard(best[1])
        if len(best[1]) < max_depth:
            frontier.update(best[1] + (r,) for r in range(max_rank))
    return order, ell
