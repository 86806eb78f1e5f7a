"""Selection: hand-made latency tables whose best tree is known, depth caps, schedules."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from profiling.table import LatencyRecord, LatencyTable
from roofline import preset
from treeopt.costs import DraftCost, StepLatency, draft_from_measurements, expanded_nodes
from treeopt.errors import TreeoptError
from treeopt.grow import Growth
from treeopt.select import select
from treeopt.selection import schedule

# node values 0.8, 0.6, 0.1: E[L] 1, 1.8, 2.4, 2.5
GROWTH = Growth("empirical", "none", ((0,), (0, 0), (1,)), np.array([1.0, 1.8, 2.4, 2.5]), {})


def table(rows: dict[tuple[int, int], list[float]]) -> LatencyTable:
    """Records ms at q = 1, 2, 3, 4 for each (batch, context)."""
    recs = [LatencyRecord(b, s, q + 1, ms, ms, ms, 5) for (b, s), row in rows.items()
            for q, ms in enumerate(row)]
    return LatencyTable("cpu", "fp32", preset("tiny"), tuple(recs))


def latency(rows: dict[tuple[int, int], list[float]]) -> StepLatency:
    return StepLatency.from_points(table(rows).points(), "hand-made")


def test_best_size_on_a_hand_made_table():
    # q = 1, 2, 3, 4 → 10, 10, 11, 20 ms; tokens/s = b·E[L]/t: 100, 180, 218.18…, 125
    sel = select(GROWTH, latency({(1, 128): [10, 10, 11, 20]}), batch=[1], context=[128])
    p = sel.points[0]
    assert (p.best_size, p.depth, p.choices) == (2, 2, [[0], [0, 0]])
    assert p.tokens_per_s == pytest.approx(2.4 / 0.011)
    assert p.autoregressive_tokens_per_s == pytest.approx(100.0)
    assert p.speedup == pytest.approx(2.4 / 0.011 / 100)
    assert p.curve.tokens_per_s == pytest.approx([100.0, 180.0, 2.4 / 0.011, 125.0])
    assert (p.max_paying_size, p.pays) == (3, True)
    assert sel.stops_paying() == [{"context": 128, "batch": None}]


def test_speculation_stops_paying_at_large_batch():
    rows = {(1, 128): [10, 10, 11, 20], (8, 128): [10, 20, 30, 40]}
    sel = select(GROWTH, latency(rows), batch=[1, 8], context=[128])
    big = sel.points[1]
    assert (big.best_size, big.pays, big.max_paying_size) == (0, False, 0)
    assert big.tokens_per_s == pytest.approx(800.0)  # 8 sequences × 1 token / 10 ms
    assert sel.stops_paying() == [{"context": 128, "batch": 8}]
    sch = schedule(sel, context=128)
    assert [(r["min_batch"], r["max_batch"], r["size"]) for r in sch["ranges"]] == [(1, 1, 2),
                                                                                    (2, 8, 0)]
    assert sch["tensorrt_llm"] == {"draft_len_schedule": {"1": 2}}
    assert sch["vllm"] == {"num_speculative_tokens_per_batch_size": [[1, 1, 2], [2, 8, 0]]}


def test_equal_trees_merge_into_one_range():
    rows = {(b, 64): [10, 10, 11, 20] for b in (1, 2, 4)}
    sch = schedule(select(GROWTH, latency(rows), batch=[1, 2, 4], context=[64]), context=64)
    assert [(r["min_batch"], r["max_batch"]) for r in sch["ranges"]] == [(1, 4)]
    with pytest.raises(TreeoptError, match=r"--schedule-context 128 was not swept.*\[64\]"):
        schedule(select(GROWTH, latency(rows), batch=[1], context=[64]), context=128)


def test_interpolates_between_measured_q_and_stops_beyond():
    lat = StepLatency.from_points([(1, 8, 1, 0.010), (1, 8, 3, 0.012)], "two points")
    sel = select(GROWTH, lat, batch=[1], context=[8])
    curve = sel.points[0].curve.tokens_per_s
    assert curve[:3] == pytest.approx([100.0, 1.8 / 0.011, 2.4 / 0.012])
    assert curve[3] is None  # q = 4 was not measured


def test_depth_cap_pays_when_drafting_grows_with_depth():
    # Hydra-like: 5 ms per drafted depth; verify flat at 10 ms
    draft = DraftCost("hydra", "5 ms per depth", lambda b, expanded: 0.005 * len(expanded))
    sel = select(GROWTH, latency({(1, 64): [10, 10, 10, 10]}), batch=[1], context=[64],
                 draft=draft)
    p = sel.points[0]
    # uncapped best: 2.5 / 20 ms = 125; capped at depth 1: [(0,), (1,)] → 1.9 / 15 ms = 126.7
    assert (p.max_depth, p.best_size, p.choices) == (1, 2, [[0], [1]])
    assert p.tokens_per_s == pytest.approx(1.9 / 0.015)
    assert p.draft_ms == pytest.approx(5.0)
    assert [(c.max_depth, c.best_size) for c in p.by_depth_cap] == [(1, 2), (2, 3)]
    assert [c.tokens_per_s for c in p.by_depth_cap] == pytest.approx([1.9 / 0.015, 125.0])
    assert list(sel.depth_caps) == [1, 2]


def test_medusa_draft_cost_is_one_call_per_step():
    doc = {"heads": {"kind": "medusa"}, "records": [
        {"batch": 1, "head": None, "nodes": 1, "ms_median": 2.0}]}
    draft = draft_from_measurements(doc, source="d.json")
    sel = select(GROWTH, latency({(1, 64): [10, 10, 11, 20]}), batch=[1], context=[64],
                 draft=draft)
    p = sel.points[0]
    assert p.curve.tokens_per_s == pytest.approx([100.0, 1.8 / 0.012, 2.4 / 0.013,
                                                        2.5 / 0.022])
    assert list(sel.depth_caps) == [None]
    with pytest.raises(TreeoptError, match=r"d.json: no draft measurement at batch 2; measured \[1\]"):
        select(GROWTH, latency({(2, 64): [10, 10, 11, 20]}), batch=[2], context=[64],
               draft=draft)


def test_hydra_draft_measurements_interpolate_in_nodes():
    doc = {"heads": {"kind": "hydra"}, "records": [
        {"batch": 1, "head": 0, "nodes": 1, "ms_median": 1.0},
        {"batch": 1, "head": 1, "nodes": 1, "ms_median": 2.0},
        {"batch": 1, "head": 1, "nodes": 3, "ms_median": 4.0},
        {"batch": 1, "head": 1, "nodes": 4, "error": "out of memory: …"}]}
    draft = draft_from_measurements(doc, source="h.json")
    assert draft.seconds(1, (1, 2)) == pytest.approx(0.004)  # 1 ms + 3 ms
    assert np.isnan(draft.seconds(1, (1, 2, 1)))  # head 2 was never measured
    assert np.isnan(draft.seconds(1, (1, 4)))  # 4 nodes failed
    assert draft.seconds(1, ()) == 0.0


def test_missing_points_are_named():
    lat = latency({(1, 128): [10, 10, 11, 20]})
    with pytest.raises(TreeoptError, match=r"hand-made: no measurements at batch 2, context 128"):
        select(GROWTH, lat, batch=[2], context=[128])
    no_ar = StepLatency.from_points([(1, 8, 2, 0.01)], "t.json")
    with pytest.raises(TreeoptError, match="no tokens=1 step"):
        select(GROWTH, no_ar, batch=[1], context=[8])


def test_expanded_nodes_counts_parents_per_depth():
    assert expanded_nodes([]) == ()
    assert expanded_nodes([(0,), (1,), (2,)]) == (1,)
    assert expanded_nodes([(0,), (0, 0), (0, 1), (0, 0, 0), (0, 1, 0)]) == (1, 1, 2)


@settings(max_examples=50, deadline=None)
@given(ms=st.lists(st.floats(1.0, 100.0), min_size=4, max_size=4),
       b=st.integers(1, 64))
def test_selected_tree_is_the_argmax_of_the_curve(ms, b):
    lat = latency({(b, 16): sorted(ms)})
    p = select(GROWTH, lat, batch=[b], context=[16]).points[0]
    curve = np.array(p.curve.tokens_per_s)
    assert p.tokens_per_s == pytest.approx(curve.max())
    assert p.best_size == int(np.argmax(curve))
    assert p.speedup >= 1.0 - 1e-12
