"""Growth: exact orders and E[L] on hand-made cases, caps, constraints, files, and properties."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt import AccuracyTable, RankTrace, Tree, TreeoptError
from treeopt.engines.registry import engine_problems
from treeopt.model.acceptance import expected_accept_length
from treeopt.model.growth import Growth, grow, uniform_tree
from treeopt.model.simulation import simulate
from treeopt.model.uniform import largest_uniform

# 8 positions x 3 heads. Rank-prefix counts (the empirical values, in positions):
#   (0): t0 t1 t2 t4 t7 = 5    (1): t3 = 1    (2): t5 = 1
#   (0,0): t0 t1 t7 = 3   (0,1): t2 = 1   (1,0): t3 = 1   (2,0): t5 = 1
#   (0,0,0): t0 t7 = 2   (0,0,1): t1 = 1   (0,1,0): t2 = 1   (2,0,0): t5 = 1
ROWS = [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, -1], [0, -1, 0], [2, 0, 0], [-1, 0, 0], [0, 0, 0]]
TRACE = RankTrace(np.array(ROWS, np.int16), {"head_kind": "hydra"})

# Best first, ties shallower then lexicographic: 5, 3, 2, then eight nodes worth 1 each.
EMPIRICAL_ORDER = ((0,), (0, 0), (0, 0, 0), (1,), (2,), (0, 1), (1, 0), (2, 0),
                   (0, 0, 1), (0, 1, 0), (2, 0, 0))
# E[L] = 1 + (cumulative count) / 8
EMPIRICAL_ELL = [1, 1.625, 2.0, 2.25, 2.375, 2.5, 2.625, 2.75, 2.875, 3.0, 3.125, 3.25]


def tree_from(order) -> Tree:
    return Tree.from_choices(order)


# ----- hand-made cases ----------------------------------------------------------------------------
def test_empirical_growth_exact():
    g = grow(TRACE, method="empirical", max_nodes=20)
    assert g.order == EMPIRICAL_ORDER
    assert g.expected_accept_length.tolist() == EMPIRICAL_ELL
    assert (g.method, g.constraint, g.max_nodes) == ("empirical", "none", 11)
    assert g.caps == {"max_nodes": 20, "max_depth": 3, "max_rank": 3}
    assert g.meta["exhausted"].startswith("only 11 nodes have a non-zero acceptance probability")
    assert g.meta["source"] == "rank trace" and g.meta["positions"] == 8
    assert g.meta["head_kind"] == "hydra" and g.meta["trace_meta"] == {"head_kind": "hydra"}
    assert g.tree(0) == Tree(()) and g.tree(3) == Tree.chain(3)
    assert g.tree(5).paths == ((0,), (1,), (2,), (0, 0), (0, 0, 0))


def test_empirical_growth_prefix_equals_smaller_growth():
    g = grow(TRACE, method="empirical", max_nodes=4)
    assert g.order == EMPIRICAL_ORDER[:4] and "exhausted" not in g.meta
    assert g.expected_accept_length.tolist() == EMPIRICAL_ELL[:5]


def test_independent_growth_exact_from_trace():
    # marginals: head 1 (5/8, 1/8, 1/8), heads 2 and 3 (6/8, 1/8, 0). Node values:
    #   (0) .625  (1) .125  (2) .125  (0,0) .46875  (0,0,0) .3515625  (1,0) = (2,0) .09375
    #   (0,1) .078125 ...  -> order (0) (0,0) (0,0,0) (1) (2) (1,0) [tie with (2,0): lexicographic]
    g = grow(TRACE, method="independent", max_nodes=6)
    assert g.order == ((0,), (0, 0), (0, 0, 0), (1,), (2,), (1, 0))
    assert g.expected_accept_length.tolist() == [
        1, 1.625, 2.09375, 2.4453125, 2.5703125, 2.6953125, 2.7890625]


def test_independent_growth_tie_break_from_a_table():
    # values: (0) .5, (1) .25, (0,0) .25, (0,1) .125, (1,0) .125, (1,1) .0625
    # the (1)/(0,0) tie goes to the shallower node, the (0,1)/(1,0) tie to the smaller path
    table = AccuracyTable(np.array([[0.5, 0.25], [0.5, 0.25]]))
    g = grow(table, method="independent", max_nodes=10)
    assert g.order == ((0,), (1,), (0, 0), (0, 1), (1, 0), (1, 1))
    assert g.expected_accept_length.tolist() == [1, 1.5, 1.75, 2.0, 2.125, 2.25, 2.3125]
    assert g.meta["source"] == "accuracy table" and g.meta["counts"] is None


@pytest.mark.parametrize("caps, order, ell", [
    ({"max_depth": 1}, ((0,), (1,), (2,)), [1, 1.625, 1.75, 1.875]),
    ({"max_rank": 1}, ((0,), (0, 0), (0, 0, 0)), [1, 1.625, 2.0, 2.25]),
    ({"max_depth": 2, "max_rank": 2}, ((0,), (0, 0), (1,), (0, 1), (1, 0)),
     [1, 1.625, 2.0, 2.125, 2.25, 2.375]),
    ({"max_depth": 9, "max_rank": 9}, EMPIRICAL_ORDER, EMPIRICAL_ELL),  # clipped to the trace
])
def test_caps(caps, order, ell):
    g = grow(TRACE, method="empirical", max_nodes=20, **caps)
    assert g.order == order and g.expected_accept_length.tolist() == ell
    t = g.tree(g.max_nodes)
    assert t.depth <= g.caps["max_depth"] and t.max_rank < g.caps["max_rank"]


def test_contiguous_growth_waits_for_the_left_sibling():
    # rank 1 at head 1 is never right, rank 2 often: unconstrained growth takes (2) at once,
    # contiguous growth may only take (1) after (0) and (2) after (1).
    tr = RankTrace(np.array([[2, 0], [2, 0], [2, 1], [0, 0], [1, 0]], np.int16))
    free = grow(tr, method="empirical", max_nodes=3)
    assert free.order == ((2,), (2, 0), (0,))
    # counts: (0) 1, (1) 1, (2) 3, (0,0) 1, (1,0) 1, (2,0) 2, (2,1) 1; (1) ties (0,0) but is shallower
    g = grow(tr, method="empirical", max_nodes=5, constraint="contiguous")
    assert g.order == ((0,), (1,), (2,), (2, 0), (0, 0))
    assert g.expected_accept_length.tolist() == [1, 1.2, 1.4, 2.0, 2.4, 2.6]
    assert all(g.tree(n).is_contiguous() for n in range(6))


def test_uniform_growth_exact():
    # branching vectors by size: (1) 1.625; (1,1) 2.0 beats (2) 1.75; (1,1,1) 2.25 beats (1,2)
    # 2.125 and (3) 1.875; (1,1,2) 2.375 beats (2,1) 2.25 and (1,3) 2.125
    g = grow(TRACE, method="empirical", max_nodes=4, constraint="uniform")
    assert g.uniform == ((1,), (1, 1), (1, 1, 1), (1, 1, 2))
    assert g.expected_accept_length.tolist() == [1, 1.625, 2.0, 2.25, 2.375]
    assert g.order == ()
    assert g.tree(4).paths == ((0,), (0, 0), (0, 0, 0), (0, 0, 1))


def test_uniform_tree():
    assert uniform_tree([2, 1]).paths == ((0,), (1,), (0, 0), (1, 0))
    assert uniform_tree([1, 3]).paths == ((0,), (0, 0), (0, 1), (0, 2))
    assert uniform_tree([]).paths == ()


def test_evaluate_on_the_same_and_another_trace():
    g = grow(TRACE, method="empirical", max_nodes=20)
    np.testing.assert_allclose(g.evaluate(TRACE), g.expected_accept_length, rtol=0, atol=1e-12)
    # held out: t0 walks (0) (0,0) (0,0,0); t1 walks (1) only: order positions 1, 2, 3, 4
    other = RankTrace(np.array([[0, 0, 0], [1, 1, 1]], np.int16))
    assert g.evaluate(other).tolist() == [1, 1.5, 2, 2.5, 3, 3, 3, 3, 3, 3, 3, 3]
    with pytest.raises(TreeoptError, match="held-out trace: the trace has 2 heads but the tree "
                                           "needs depth 3"):
        g.evaluate(RankTrace(np.zeros((3, 2), np.int16)))


@pytest.mark.parametrize("kwargs, fragment", [
    ({"method": "magic", "max_nodes": 3}, "unknown method 'magic'; choose one of independent, empirical"),
    ({"method": "empirical", "max_nodes": 3, "constraint": "round"}, "unknown constraint 'round'"),
    ({"method": "empirical", "max_nodes": 0}, "max_nodes must be at least 1, got 0"),
    ({"method": "empirical", "max_nodes": 3, "max_depth": 0}, "must be at least 1"),
    ({"method": "empirical", "max_nodes": 3, "max_rank": 0}, "must be at least 1"),
    ({"method": "empirical", "max_nodes": 3, "max_rank": -2}, "must be at least 1"),
])
def test_grow_rejects_bad_arguments(kwargs, fragment):
    with pytest.raises(TreeoptError) as err:
        grow(TRACE, **kwargs)
    assert fragment in str(err.value)


def test_grow_rejects_empty_traces_and_tables_for_empirical():
    with pytest.raises(TreeoptError, match=r"the rank trace is empty \(0 positions\)"):
        grow(RankTrace(np.zeros((0, 2), np.int16)), method="empirical", max_nodes=2)
    table = AccuracyTable(np.array([[0.5]]))
    for constraint in ("none", "uniform"):
        with pytest.raises(TreeoptError, match="needs a rank trace"):
            grow(table, method="empirical", max_nodes=2, constraint=constraint)


def test_growth_tree_size_out_of_range():
    g = grow(TRACE, method="empirical", max_nodes=3)
    for n in (-1, 4):
        with pytest.raises(TreeoptError, match=f"tree size {n} is outside this growth's 0 … 3"):
            g.tree(n)


# ----- files --------------------------------------------------------------------------------------
@pytest.mark.parametrize("constraint", ["none", "contiguous", "uniform"])
def test_growth_save_load_round_trip(tmp_path, constraint):
    g = grow(TRACE, method="empirical", max_nodes=6, constraint=constraint)
    path = tmp_path / "g.json"
    g.save(path)
    doc = json.loads(path.read_text())
    assert doc["format"] == "treeopt.growth/1" and doc["constraint"] == constraint
    back = Growth.load(path)
    assert (back.method, back.constraint, back.order, back.caps, back.uniform, back.meta) == (
        g.method, g.constraint, g.order, g.caps, g.uniform, g.meta)
    np.testing.assert_allclose(back.expected_accept_length, g.expected_accept_length, atol=1e-12)
    assert [back.tree(n) for n in range(7)] == [g.tree(n) for n in range(7)]


def test_growth_file_literal(tmp_path):
    g = grow(RankTrace(np.array([[0, 0], [0, 1], [1, 0], [0, 0]], np.int16)),
             method="empirical", max_nodes=2)
    g.meta.clear()
    path = tmp_path / "g.json"
    g.save(path)
    assert path.read_text() == (
        '{\n "format": "treeopt.growth/1",\n "method": "empirical",\n "constraint": "none",\n'
        ' "caps": {\n  "max_nodes": 2,\n  "max_depth": 2,\n  "max_rank": 2\n },\n'
        ' "order": [[0], [0, 0]],\n "expected_accept_length": [1.0, 1.75, 2.25],\n'
        ' "meta": {}\n}\n')


GOOD = {"format": "treeopt.growth/1", "method": "empirical", "order": [[0], [0, 0]],
        "expected_accept_length": [1.0, 1.5, 1.75]}


@pytest.mark.parametrize("change, fragment", [
    ({"format": "treeopt.latency/1"}, "format is 'treeopt.latency/1', expected 'treeopt.growth/1'"),
    ({"format": None}, "missing 'format' tag"),
    ({"order": None}, "malformed growth file"),
    ({"method": None, "order": 5}, "malformed growth file"),
    ({"expected_accept_length": ["x", 1, 2]}, "malformed growth file"),
    ({"expected_accept_length": [1.0, 1.5]}, "2 nodes in 'order' but 2 E[L] values"),
    ({"order": [[0], [1, 0]]}, "tree path [1, 0] has no parent [1]"),
    ({"order": [[0, 0], [0]]}, "'order' lists [0, 0] before its parent [0]"),
    ({"order": [[0], [0]]}, "tree path [0] appears twice"),
    ({"order": [[0], [0, -1]]}, "tree path [0, -1] has a negative rank -1"),
    ({"order": [[0], [0.5]]}, "tree path [0.5] has a non-integer rank 0.5"),
    ({"order": [[0], []]}, "tree path [] is empty"),
    ({"constraint": "uniform", "branching": [[1]]}, "'branching' needs one entry per size"),
    ({"per_step_accept_length": [1.0, 1.5]}, "2 values in 'per_step_accept_length' but 3 in "
                                             "'expected_accept_length'"),
    ({"per_step_accept_length": [1.0, 0.5, 2.0]}, "'per_step_accept_length' of size 1 is 0.5"),
    ({"per_step_accept_length": ["x", 1, 2]}, "malformed growth file"),
])
def test_malformed_growth_files(tmp_path, change, fragment):
    doc = {**GOOD, **change}
    doc = {k: v for k, v in doc.items() if v is not None or k == "order"}
    if change.get("order", 0) is None:
        del doc["order"]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TreeoptError) as err:
        Growth.load(path)
    assert str(err.value).startswith(f"{path}: ")
    assert fragment in str(err.value)


# ----- per step --------------------------------------------------------------------------------
# Six positions where the chain of 5 accepts everything, then four where it accepts nothing
# (tests/test_simulate.py works its walks out): positions weigh the 5-node chain at 4, steps at 2.
BURSTY = RankTrace(np.array([[0] * 5] * 6 + [[-1] * 5] * 4, np.int16),
                   {"sequence_positions": [10]})
BURSTY_STEPS = [1.0, 10 / 7, 10 / 6, 2.5, 5.0, 2.0]


def test_growth_holds_the_per_step_e_l_of_every_size():
    g = grow(BURSTY, method="empirical", max_nodes=5)
    assert g.order == tuple((0,) * k for k in range(1, 6))
    assert g.expected_accept_length.tolist() == pytest.approx([1.0, 1.6, 2.2, 2.8, 3.4, 4.0],
                                                              abs=1e-12)
    assert g.per_step_accept_length.tolist() == BURSTY_STEPS
    assert g.headline_accept_length is g.per_step_accept_length and g.acceptance == "per step"
    assert g.evaluate_per_step(BURSTY).tolist() == BURSTY_STEPS
    assert g.evaluate_headline(BURSTY).tolist() == BURSTY_STEPS
    # a trace without its sequences: position-weighted only
    plain = grow(RankTrace(BURSTY.ranks), method="empirical", max_nodes=5)
    assert plain.per_step_accept_length is None and plain.acceptance == "position-weighted"
    assert plain.headline_accept_length is plain.expected_accept_length
    assert plain.evaluate_headline(BURSTY).tolist() == pytest.approx(
        plain.expected_accept_length.tolist(), abs=1e-12)


def test_uniform_growth_holds_the_per_step_e_l_too():
    g = grow(BURSTY, method="empirical", max_nodes=5, constraint="uniform")
    assert g.per_step_accept_length.tolist() == BURSTY_STEPS  # its trees are the chains


def test_growth_file_round_trip_with_per_step_e_l(tmp_path):
    g = grow(BURSTY, method="empirical", max_nodes=2)
    g.meta.clear()
    path = tmp_path / "g.json"
    g.save(path)
    assert path.read_text() == (
        '{\n "format": "treeopt.growth/1",\n "method": "empirical",\n "constraint": "none",\n'
        ' "caps": {\n  "max_nodes": 2,\n  "max_depth": 5,\n  "max_rank": 1\n },\n'
        ' "order": [[0], [0, 0]],\n "per_step_accept_length": [1.0, 1.428571428571, '
        '1.666666666667],\n "expected_accept_length": [1.0, 1.6, 2.2],\n "meta": {}\n}\n')
    back = Growth.load(path)
    assert back.per_step_accept_length.tolist() == [1.0, 1.428571428571, 1.666666666667]
    assert back.acceptance == "per step"
    old = json.loads(path.read_text())
    del old["per_step_accept_length"]  # a file written before growths held it
    path.write_text(json.dumps(old))
    assert Growth.load(path).per_step_accept_length is None


def test_growth_file_that_is_not_json(tmp_path):
    path = tmp_path / "g.json"
    path.write_text('{"format": "treeopt.growth/1", "order": [[0]')
    with pytest.raises(TreeoptError, match=f"^{path}: not valid JSON"):
        Growth.load(path)
    with pytest.raises(TreeoptError, match=f"^{tmp_path / 'none.json'}: no such file"):
        Growth.load(tmp_path / "none.json")


# ----- properties ---------------------------------------------------------------------------------
@st.composite
def rank_traces(draw, *, max_heads: int = 4, rank_end: int = 5, max_positions: int = 24):
    """A small random trace: 1 … max_positions rows of int16 ranks in [-1, rank_end)."""
    heads = draw(st.integers(1, max_heads))
    row = st.lists(st.integers(-1, rank_end - 1), min_size=heads, max_size=heads)
    rows = draw(st.lists(row, min_size=1, max_size=max_positions))
    return RankTrace(np.array(rows, dtype=np.int16).reshape(len(rows), heads))


def count_prefix(trace: RankTrace, path) -> int:
    """Reference count: positions whose first len(path) ranks equal path (a plain loop)."""
    return sum(1 for row in trace.ranks.tolist() if tuple(row[:len(path)]) == tuple(path))


def all_trees(n: int, *, max_depth: int, max_rank: int):
    """Every prefix-closed tree of at most n nodes within the caps (brute force)."""
    cands = [p for d in range(1, max_depth + 1) for p in itertools.product(range(max_rank), repeat=d)]
    for combo in itertools.chain.from_iterable(itertools.combinations(cands, k)
                                               for k in range(min(n, len(cands)) + 1)):
        s = set(combo)
        if all(len(p) == 1 or p[:-1] in s for p in combo):
            yield combo


@st.composite
def trees_within(draw, *, max_depth: int, max_rank: int) -> Tree:
    raw = draw(st.lists(st.lists(st.integers(0, max_rank - 1), min_size=1, max_size=max_depth),
                        max_size=10))
    return Tree.from_choices(sorted({tuple(p[:d]) for p in raw for d in range(1, len(p) + 1)}))


@settings(max_examples=100, deadline=None)
@given(rank_traces(), st.sampled_from(["none", "contiguous"]), st.integers(1, 12))
def test_empirical_growth_is_nested_monotone_and_exact(tr, constraint, max_nodes):
    g = grow(tr, method="empirical", max_nodes=max_nodes, constraint=constraint)
    ell = g.expected_accept_length
    assert ell[0] == 1.0 and len(g.order) == g.max_nodes <= max_nodes
    assert np.all(np.diff(ell) >= 0)  # E[L] never decreases along the order
    for n in range(g.max_nodes + 1):
        t = Tree.from_choices(g.order[:n])  # every prefix is prefix-closed
        assert t == g.tree(n) and t.size == n
        assert t.depth <= g.caps["max_depth"] and t.max_rank < g.caps["max_rank"]
        assert abs(simulate(t, tr).mean_accept_length - ell[n]) < 1e-9
        if constraint == "contiguous":
            assert t.is_contiguous()
    np.testing.assert_allclose(g.evaluate(tr), ell, rtol=0, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(rank_traces(), st.data())
def test_empirical_growth_beats_random_trees(tr, data):
    g = grow(tr, method="empirical", max_nodes=12)
    other = data.draw(trees_within(max_depth=g.caps["max_depth"], max_rank=g.caps["max_rank"]))
    if other.size > g.max_nodes == 12:
        other = other.prefix(12)  # compare trees of the same size
    n = min(other.size, g.max_nodes)  # an exhausted growth holds every valuable node
    assert simulate(other, tr).mean_accept_length <= g.expected_accept_length[n] + 1e-12


@settings(max_examples=60, deadline=None)
@given(rank_traces(max_heads=2, rank_end=3, max_positions=12), st.integers(1, 4))
def test_empirical_growth_equals_brute_force_optimum(tr, n):
    g = grow(tr, method="empirical", max_nodes=n)
    caps = g.caps
    best = max(1 + sum(count_prefix(tr, p) for p in combo) / tr.positions
               for combo in all_trees(n, max_depth=caps["max_depth"], max_rank=caps["max_rank"]))
    # the best tree of at most n nodes; when the growth ran out of valuable nodes, bigger trees
    # cannot do better than its last
    assert abs(g.expected_accept_length[min(n, g.max_nodes)] - best) < 1e-12


@settings(max_examples=100, deadline=None)
@given(rank_traces(), st.integers(1, 10), st.data())
def test_independent_growth_and_the_product_formula(tr, max_nodes, data):
    g = grow(tr, method="independent", max_nodes=max_nodes)
    ell = g.expected_accept_length
    assert np.all(np.diff(ell) >= -1e-15)
    marginal = {(d, r): sum(1 for row in tr.ranks.tolist() if row[d] == r) / tr.positions
                for d in range(tr.heads) for r in range(max(tr.top_k, 1))}

    def product_formula(t: Tree) -> float:
        return 1 + sum(float(np.prod([marginal[d, r] for d, r in enumerate(p)])) for p in t.paths)

    for n in range(g.max_nodes + 1):
        t = g.tree(n)
        assert t.size == n
        assert abs(expected_accept_length(t, tr, method="independent") - product_formula(t)) < 1e-12
        assert abs(ell[n] - product_formula(t)) < 1e-12
    other = data.draw(trees_within(max_depth=g.caps["max_depth"], max_rank=g.caps["max_rank"]))
    if other.size > g.max_nodes == max_nodes:
        other = other.prefix(max_nodes)  # compare trees of the same size
    assert product_formula(other) <= ell[min(other.size, g.max_nodes)] + 1e-12


def uniform_brute_force(tr: RankTrace, n: int, *, max_depth: int, max_rank: int) -> float:
    """Best E[L] (by simulation) over every branching vector of at most n nodes."""
    best = 1.0
    for depth in range(1, max_depth + 1):
        for vec in itertools.product(range(1, max_rank + 1), repeat=depth):
            size = sum(int(np.prod(vec[:d])) for d in range(1, depth + 1))
            if size <= n:
                best = max(best, simulate(uniform_tree(vec), tr).mean_accept_length)
    return best


@settings(max_examples=50, deadline=None)
@given(rank_traces(max_heads=3, rank_end=4, max_positions=16), st.integers(1, 7))
def test_uniform_growth_equals_brute_force(tr, max_nodes):
    g = grow(tr, method="empirical", max_nodes=max_nodes, constraint="uniform")
    ell = g.expected_accept_length
    largest = largest_uniform(max_depth=g.caps["max_depth"], max_rank=g.caps["max_rank"])
    assert np.all(np.diff(ell) >= 0) and len(g.uniform) == g.max_nodes == min(max_nodes, largest)
    for n in range(1, g.max_nodes + 1):
        t = g.tree(n)
        assert t.size <= n and (t.size == 0 or engine_problems(t, "vllm") == [])  # level-uniform
        assert abs(simulate(t, tr).mean_accept_length - ell[n]) < 1e-9
        assert abs(ell[n] - uniform_brute_force(tr, n, **{k: g.caps[k] for k in
                                                          ("max_depth", "max_rank")})) < 1e-12
    np.testing.assert_allclose(g.evaluate(tr), ell, rtol=0, atol=1e-12)


def test_uniform_independent_equals_brute_force():
    table = AccuracyTable.from_cumulative([[0.6, 0.75, 0.8], [0.5, 0.7, 0.8], [0.4, 0.6, 0.7]])
    g = grow(table, method="independent", max_nodes=9, constraint="uniform")
    for n in range(1, 10):
        best = 1.0
        for depth in (1, 2, 3):
            for vec in itertools.product((1, 2, 3), repeat=depth):
                t = uniform_tree(vec)
                if t.size <= n:
                    best = max(best, expected_accept_length(t, table, method="independent"))
        assert abs(g.expected_accept_length[n] - best) < 1e-12
        assert abs(expected_accept_length(g.tree(n), table, method="independent")
                   - g.expected_accept_length[n]) < 1e-12
