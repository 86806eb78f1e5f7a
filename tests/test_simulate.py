"""Simulation and the two acceptance models: exact values on a hand-made trace, and properties."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt import AccuracyTable, RankTrace, Tree, TreeoptError
from treeopt.model.acceptance import expected_accept_length, node_probabilities, prefix_counts
from treeopt.model.simulation import (
    accept_lengths,
    held_out,
    nested_step_means,
    node_visits,
    simulate,
    step_lengths,
)

ROWS = [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, -1], [0, -1, 0], [2, 0, 0], [-1, 0, 0], [0, 0, 0]]
TRACE = RankTrace(np.array(ROWS, np.int16))
T7 = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]])


def test_accept_lengths_exact():
    # t0 000 -> (0)(0,0)(0,0,0): 4    t1 001 -> (0)(0,0): 3    t2 010 -> (0)(0,1): 3
    # t3 1 0 -1 -> (1)(1,0): 3        t4 0 -1 0 -> (0): 2      t5 200 -> (2), no (2,0): 2
    # t6 -1 -> root only: 1           t7 000 -> 4
    assert accept_lengths(T7, TRACE).tolist() == [4, 3, 3, 3, 2, 2, 1, 4]
    assert node_visits(T7, TRACE).tolist() == [5, 1, 1, 3, 1, 1, 2]  # canonical node order


def test_simulate_exact():
    s = simulate(T7, TRACE)
    assert s.mean_accept_length == 2.75  # 22 / 8
    assert s.histogram == (0, 1, 2, 3, 2)
    assert s.positions == 8
    # squared deviations from 2.75: 1.5625 + 3 * 0.0625 + 2 * 0.5625 + 3.0625 + 1.5625 = 7.5
    assert abs(s.stderr - math.sqrt(7.5 / 7) / math.sqrt(8)) < 1e-15
    assert s.to_json() == {"mean_accept_length": 2.75, "stderr": s.stderr,
                           "histogram": [0, 1, 2, 3, 2], "positions": 8}


def test_simulate_empty_tree_chain_and_one_position():
    empty = simulate(Tree(()), TRACE)
    assert (empty.mean_accept_length, empty.histogram, empty.stderr) == (1.0, (0, 8), 0.0)
    chain = simulate(Tree.chain(3), TRACE)
    assert accept_lengths(Tree.chain(3), TRACE).tolist() == [4, 3, 2, 1, 2, 1, 1, 4]
    assert chain.mean_accept_length == 2.25 and chain.histogram == (0, 3, 2, 1, 2)
    one = simulate(Tree.chain(1), RankTrace(np.array([[0]], np.int16)))
    assert (one.mean_accept_length, one.stderr, one.histogram) == (2.0, 0.0, (0, 0, 1))


def test_ranks_beyond_the_tree_are_misses():
    tr = RankTrace(np.array([[7, 0], [1, 9], [-1, -1]], np.int16))
    assert accept_lengths(Tree.from_choices([[0], [1], [1, 0]]), tr).tolist() == [1, 2, 1]


def test_expected_accept_length_both_models():
    assert expected_accept_length(T7, TRACE, method="empirical") == 2.75
    # independent: 1 + .625 + .125 + .125 + .625*.75 + .625*.125 + .125*.75 + .625*.75*.75
    assert expected_accept_length(T7, TRACE, method="independent") == 2.8671875
    assert node_probabilities(T7, TRACE, method="empirical").tolist() == [
        5 / 8, 1 / 8, 1 / 8, 3 / 8, 1 / 8, 1 / 8, 2 / 8]
    assert node_probabilities(T7, TRACE, method="independent").tolist() == [
        0.625, 0.125, 0.125, 0.46875, 0.078125, 0.09375, 0.3515625]
    table = AccuracyTable(np.array([[0.5, 0.25], [0.5, 0.25]]))
    # a path deeper than the table or a rank beyond its top-k is worth 0
    t = Tree.from_choices([[0], [1], [2], [0, 1], [0, 1, 0]])
    assert expected_accept_length(t, table, method="independent") == 1 + 0.5 + 0.25 + 0.125


def test_expected_accept_length_errors():
    table = AccuracyTable(np.array([[0.5]]))
    with pytest.raises(TreeoptError, match="the empirical model needs a rank trace"):
        expected_accept_length(Tree.chain(1), table, method="empirical")
    with pytest.raises(TreeoptError, match="unknown method 'typical'"):
        node_probabilities(Tree.chain(1), TRACE, method="typical")
    with pytest.raises(TreeoptError, match="empirical model: the trace has 3 heads but the tree "
                                           "needs depth 4"):
        node_probabilities(Tree.chain(4), TRACE, method="empirical")


def test_prefix_counts_exact():
    assert prefix_counts(TRACE, max_depth=3, max_rank=3) == {
        (0,): 5, (1,): 1, (2,): 1, (0, 0): 3, (0, 1): 1, (1, 0): 1, (2, 0): 1,
        (0, 0, 0): 2, (0, 0, 1): 1, (0, 1, 0): 1, (2, 0, 0): 1}
    assert prefix_counts(TRACE, max_depth=2, max_rank=1) == {(0,): 5, (0, 0): 3}
    assert prefix_counts(TRACE, max_depth=9, max_rank=2) == {
        (0,): 5, (1,): 1, (0, 0): 3, (0, 1): 1, (1, 0): 1, (0, 0, 0): 2, (0, 0, 1): 1, (0, 1, 0): 1}


def test_held_out_exact():
    evaluation = RankTrace(np.array([[0, 0, 0], [1, 1, 1]], np.int16))
    h = held_out(T7, TRACE, evaluation)
    assert h.calibration.mean_accept_length == 2.75
    assert h.held_out.mean_accept_length == 3.0  # lengths 4 and 2
    assert h.gap == -0.25 and h.relative_gap == -0.25 / 3
    doc = h.to_json()
    assert doc["gap"] == -0.25 and doc["held_out"]["histogram"] == [0, 0, 1, 0, 1]
    with pytest.raises(TreeoptError, match="held-out trace has 2 heads but the tree needs 3"):
        held_out(T7, TRACE, RankTrace(np.zeros((2, 2), np.int16)))


# ----- properties ---------------------------------------------------------------------------------
@st.composite
def trace_and_tree(draw):
    heads = draw(st.integers(1, 4))
    row = st.lists(st.integers(-1, 4), min_size=heads, max_size=heads)
    rows = draw(st.lists(row, min_size=1, max_size=24))
    raw = draw(st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=heads), max_size=8))
    tree = Tree.from_choices(sorted({tuple(p[:d]) for p in raw for d in range(1, len(p) + 1)}))
    return RankTrace(np.array(rows, np.int16).reshape(len(rows), heads)), tree


def reference_accept_length(tree: Tree, row: list[int]) -> int:
    """1 + the longest rank prefix of ``row`` that is a node of ``tree`` (a plain loop)."""
    k = 0
    while k < len(row) and tuple(row[:k + 1]) in tree:
        k += 1
    return 1 + k


@settings(max_examples=100, deadline=None)
@given(trace_and_tree())
def test_simulation_matches_the_definition(case):
    tr, tree = case
    lengths = accept_lengths(tree, tr)
    assert lengths.tolist() == [reference_accept_length(tree, row) for row in tr.ranks.tolist()]
    s = simulate(tree, tr)
    visits = node_visits(tree, tr)
    # E[L](T) = 1 + sum over nodes of P(node accepted), on the same trace
    assert abs(s.mean_accept_length - (1 + visits.sum() / tr.positions)) < 1e-12
    assert abs(s.mean_accept_length - expected_accept_length(tree, tr, method="empirical")) < 1e-12
    assert sum(s.histogram) == tr.positions and len(s.histogram) == tree.depth + 2
    counts = prefix_counts(tr, max_depth=tree.depth, max_rank=max(tree.max_rank + 1, 1))
    assert visits.tolist() == [counts.get(p, 0) for p in tree.paths]


def reference_window(tree: Tree, tr: RankTrace, counts: list[int], batch: int) -> float:
    """The steady window of batches of ``batch`` sequences, by a plain loop: every row of a group
    steps together until the first reaches the end of its sequence."""
    starts = [sum(counts[:i]) for i in range(len(counts))]
    tokens = row_steps = 0
    for g in range(len(counts) // batch):
        at = [0] * batch
        rows = range(g * batch, (g + 1) * batch)
        while all(at[k] < counts[i] for k, i in enumerate(rows)):
            for k, i in enumerate(rows):
                taken = reference_accept_length(tree, tr.ranks[starts[i] + at[k]].tolist())
                at[k] += taken
                tokens += taken
            row_steps += batch
    return tokens / row_steps


def cut_into_sequences(tr: RankTrace, data) -> tuple[RankTrace, list[int], int]:
    """``tr`` cut into up to 7 sequences at drawn positions, their lengths, and a batch size
    from 1 to their number."""
    cuts = sorted(set(data.draw(st.lists(st.integers(1, tr.positions - 1), max_size=6)))
                  ) if tr.positions > 1 else []
    counts = [b - a for a, b in zip([0, *cuts], [*cuts, tr.positions], strict=True)]
    return (RankTrace(tr.ranks, {"sequence_positions": counts}), counts,
            data.draw(st.integers(1, len(counts))))


@settings(max_examples=100, deadline=None)
@given(trace_and_tree(), st.data())
def test_the_batch_window_counts_every_row_until_the_first_finishes(case, data):
    from treeopt.model.simulation import batch_window_accept_length

    tr, tree = case
    tr, counts, batch = cut_into_sequences(tr, data)
    got = batch_window_accept_length(tree, tr, batch)
    assert got == pytest.approx(reference_window(tree, tr, counts, batch), rel=1e-12)
    if batch == 1:  # one row per group: the pooled per-step mean
        assert got == pytest.approx(simulate(tree, tr, per_step=True).mean_accept_length)
    assert batch_window_accept_length(tree, tr, len(counts) + 1) is None


def reference_continuous_window(tree, tr, counts, batch):
    """Continuous batching as the live loop runs it, position by position: ``batch`` rows take
    the sequences in order, a row whose sequence ends takes the next one before the next step,
    and the window ends with the step in which a row ends with none left to take."""
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rows, waiting = [[i, 0] for i in range(batch)], batch
    tokens = row_steps = 0
    while True:
        for row in rows:
            taken = reference_accept_length(tree, tr.ranks[starts[row[0]] + row[1]].tolist())
            tokens += taken
            row[1] += taken
        row_steps += batch
        ended = False
        for row in rows:
            if row[1] >= counts[row[0]] and waiting < len(counts):
                row[0], row[1], waiting = waiting, 0, waiting + 1
            ended = ended or row[1] >= counts[row[0]]
        if ended:
            return tokens / row_steps


@settings(max_examples=100, deadline=None)
@given(trace_and_tree(), st.data())
def test_the_continuous_window_counts_every_row_until_one_ends_with_none_waiting(case, data):
    from treeopt.model.simulation import batch_window_accept_length, continuous_window_accept_length

    tr, tree = case
    tr, counts, batch = cut_into_sequences(tr, data)
    got = continuous_window_accept_length(tree, tr, batch)
    assert got == pytest.approx(reference_continuous_window(tree, tr, counts, batch), rel=1e-12)
    if batch == 1:  # one row through every sequence: the pooled per-step mean
        assert got == pytest.approx(simulate(tree, tr, per_step=True).mean_accept_length)
    if batch == len(counts):  # nothing waits: the static batch's window
        assert got == pytest.approx(batch_window_accept_length(tree, tr, batch))
    assert continuous_window_accept_length(tree, tr, len(counts) + 1) is None


def test_the_continuous_window_outlasts_a_short_sequence():
    """Two rows, three sequences: the long one accepts 2 tokens a step for 4 steps, the short
    one 1 token a step for 2, the third 2 tokens a step for 2. Statically the first two's window
    ends with the short one (2 steps); continuously its row takes the third, and both rows
    count until the long one ends."""
    from treeopt.model.simulation import batch_window_accept_length, continuous_window_accept_length

    ranks = np.array([[0]] * 8 + [[-1]] * 2 + [[0]] * 4, np.int16)
    tr = RankTrace(ranks, {"sequence_positions": [8, 2, 4]})
    chain = Tree.chain(1)
    assert batch_window_accept_length(chain, tr, 2) == (2 + 1) * 2 / 4
    assert continuous_window_accept_length(chain, tr, 2) == (2 + 1 + 2 + 1 + 2 + 2 + 2 + 2) / 8


# ----- per step against position-weighted -----------------------------------------------------
# One sequence of 10 positions, 5 heads: six positions where the chain of 5 accepts everything
# (6 tokens), then four where it accepts nothing (1 token). Positions weigh (6·6 + 4) / 10 = 4;
# decoding steps at position 0 (6 tokens), then at 6, 7, 8 and 9: 10 tokens in 5 steps, 2.
BURSTY = RankTrace(np.array([[0] * 5] * 6 + [[-1] * 5] * 4, np.int16),
                   {"sequence_positions": [10]})


def test_a_bursty_trace_halves_the_per_step_mean():
    chain = Tree.chain(5)
    assert simulate(chain, BURSTY).mean_accept_length == 4.0
    walk = simulate(chain, BURSTY, per_step=True)
    assert (walk.mean_accept_length, walk.count, walk.histogram) == (2.0, 5, (0, 4, 0, 0, 0, 0, 1))
    assert step_lengths(chain, BURSTY).tolist() == [6, 1, 1, 1, 1]
    # shorter chains: 2 tokens a step → 3 steps of 2, then 4 of 1: 10 / 7; 3 a step: 10 / 6;
    # 4: steps at 0 and 4 (good), 8 and 9: 10 / 4; 5: at 0 and 5, ending at 10: 10 / 2
    order = [(0,) * k for k in range(1, 6)]
    assert nested_step_means(order, BURSTY, sizes=6).tolist() == [
        1.0, 10 / 7, 10 / 6, 2.5, 5.0, 2.0]


def test_nested_step_means_in_chunks_equal_one_pass(monkeypatch):
    order = [(0,) * k for k in range(1, 6)]
    whole = nested_step_means(order, BURSTY, sizes=6)
    # 2 trees of 10 positions at a time
    monkeypatch.setattr(importlib.import_module("treeopt.model.simulation"), "_CHUNK", 25)
    assert nested_step_means(order, BURSTY, sizes=6).tolist() == whole.tolist()
