"""The per-step greedy growth: an exact hand-made case where it beats the growth order, a slow
reference that re-simulates every candidate, the engine shapes, and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt import RankTrace, Tree, TreeoptError
from treeopt.engines.registry import engine_problems
from treeopt.model.growth import grow
from treeopt.model.simulation import simulate
from treeopt.model.step_growth import grow_per_step

# One head, one sequence of 5 positions. Rank 0 is right at 3 positions, rank 1 at 2, so the
# growth order takes (0,) first; but (0,) accepts at t1 and t2 together, so decoding steps over
# t2: t0 1, t1 2, t3 1, t4 2 (ends at 6) — 6 tokens in 4 steps, 1.5 — while (1,) steps t0 2,
# t2 1, t3 2 — 5 tokens in 3 steps, 5/3.
LOPSIDED = RankTrace(np.array([[1], [0], [0], [1], [0]], np.int16), {"sequence_positions": [5]})


def test_the_per_step_greedy_tree_beats_the_growth_order_at_the_same_size():
    order = grow(LOPSIDED, method="empirical", max_nodes=2)
    assert order.order == ((0,), (1,))
    assert order.expected_accept_length.tolist() == [1.0, 1.6, 2.0]
    assert order.per_step_accept_length.tolist() == [1.0, 1.5, 2.0]
    greedy = grow_per_step(LOPSIDED, max_nodes=2)
    assert greedy.order == ((1,), (0,))
    assert greedy.accept_length.tolist() == [1.0, 5 / 3, 2.0]
    assert greedy.tree(1) == Tree.from_choices([[1]])


def reference_greedy(trace: RankTrace, max_nodes: int) -> list[tuple[int, ...]]:
    """The greedy growth the slow way: every frontier node some position reaches, each tree
    simulated whole, the best per-step mean taken (ties: shallower, then the smaller path)."""
    paths: list[tuple[int, ...]] = []
    while len(paths) < max_nodes:
        parents = [(), *paths]
        frontier = [p + (r,) for p in parents for r in range(trace.top_k)
                    if len(p) < trace.heads and p + (r,) not in paths]
        reached = [c for c in frontier  # some position's first ranks are c's path
                   if any(tuple(row[:len(c)]) == c for row in trace.ranks.tolist())]
        if not reached:
            return paths
        paths.append(min(reached, key=lambda c: (
            -simulate(Tree.from_choices([*paths, c]), trace, per_step=True).mean_accept_length,
            len(c), c)))
    return paths


@st.composite
def sequenced_traces(draw):
    """A small random trace of 1 … 3 heads, ranks in [-1, 3), cut into 1 … 4 sequences."""
    heads = draw(st.integers(1, 3))
    counts = draw(st.lists(st.integers(1, 12), min_size=1, max_size=4))
    ranks = draw(st.lists(st.integers(-1, 2), min_size=heads * sum(counts),
                          max_size=heads * sum(counts)))
    return RankTrace(np.array(ranks, np.int16).reshape(sum(counts), heads),
                     {"sequence_positions": counts, "top_k": 3})


@settings(max_examples=60, deadline=None)
@given(sequenced_traces(), st.integers(1, 6))
def test_the_greedy_growth_equals_re_simulating_every_candidate(trace, max_nodes):
    grown = grow_per_step(trace, max_nodes=max_nodes)
    assert list(grown.order) == reference_greedy(trace, max_nodes)
    assert grown.accept_length.tolist() == [
        simulate(grown.tree(n), trace, per_step=True).mean_accept_length
        for n in range(len(grown.order) + 1)]


@settings(max_examples=60, deadline=None)
@given(sequenced_traces(), st.sampled_from(["contiguous", "grounded"]), st.integers(1, 8))
def test_the_greedy_growth_keeps_the_engine_shape(trace, constraint, max_nodes):
    grown = grow_per_step(trace, max_nodes=max_nodes, max_depth=2, max_rank=2,
                          constraint=constraint)
    for n in range(len(grown.order) + 1):
        tree = grown.tree(n)
        assert tree.depth <= 2 and (n == 0 or tree.max_rank < 2)
        assert tree.is_contiguous()
        if constraint == "grounded" and n:  # Hydra's reference code runs it
            assert engine_problems(tree, "hydra") == []
        assert grown.accept_length[n] == simulate(tree, trace, per_step=True).mean_accept_length


def test_the_greedy_growth_refuses_a_trace_without_sequences_and_uniform_trees():
    with pytest.raises(TreeoptError, match="needs its 'sequence_positions'"):
        grow_per_step(RankTrace(LOPSIDED.ranks), max_nodes=2)
    with pytest.raises(TreeoptError, match="not constraint 'uniform'"):
        grow_per_step(LOPSIDED, max_nodes=2, constraint="uniform")
