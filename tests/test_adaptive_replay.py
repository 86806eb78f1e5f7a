"""Replay of step policies over chain-acceptance tables, workloads, and offline tuning."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.adaptive import (
    FixedSteps,
    SGLangConfig,
    SGLangPolicy,
    SGLangSlot,
    TRTLLMSchedule,
    VLLMSchedule,
)
from treeopt.adaptive.replay import chain_step_seconds, replay
from treeopt.adaptive.report import trtllm_schedule, vllm_schedule
from treeopt.adaptive.tune import SearchSpace, fixed_replays, tune_sglang
from treeopt.adaptive.workload import ChainAcceptance, by_difficulty, shifted
from treeopt.dynamic.simulate import DynamicTrace
from treeopt.errors import TreeoptError
from treeopt.model.simulation import step_walk
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree

SECONDS = np.array([1.0, 1.5, 2.0, 2.5])  # a chain step of k = 0 … 3


def table(rows: list[list[int]], lengths: tuple[int, ...]) -> ChainAcceptance:
    return ChainAcceptance(np.array(rows, dtype=np.int8), lengths, "toy")


def test_replay_by_hand_one_row():
    # one sequence of 5 positions; a 2-step chain accepts 2, then 0, then (at position 4) 1
    acc = table([[0, 1, 2], [0, 0, 0], [0, 0, 0], [0, 0, 0], [0, 1, 1]], (5,))
    r = replay(FixedSteps(2), acc, batch=1, costs=SECONDS[:3])
    # position 0: 2 drafts → 3 tokens, to 3; position 3: 0 → 1 token, to 4; position 4: 1 → 2
    assert r.steps.tolist() == [2, 2, 2] and r.accept_length.tolist() == [3.0, 1.0, 2.0]
    assert (r.tokens, r.seconds, r.rounds) == (6, 6.0, 3)
    assert r.tokens_per_s == 1.0 and r.step_counts() == {2: 3}


def test_rows_take_the_next_sequence_and_the_steady_window_ends():
    # three sequences of 2, 4 and 3 positions, every position accepting min(k, 1)
    acc = table([[0, 1]] * 9, (2, 4, 3))
    r = replay(FixedSteps(1), acc, batch=2, costs=SECONDS[:2])
    # round 0: rows at 0 and 2 → 2 and 4; row 0 ends its sequence (end 2), takes sequence 2
    # (start 6); round 1: rows at 6 and 4 → 8, 6 (row 1 ends: no sequence left) → stop
    assert (r.rounds, r.rows.tolist(), r.tokens) == (2, [2, 2], 8)
    drained = replay(FixedSteps(1), acc, batch=2, costs=SECONDS[:2], drain=True)
    assert drained.rows.tolist() == [2, 2, 1] and drained.tokens == 10
    assert drained.seconds == 3 * 1.5  # stopped rows priced as rows
    with pytest.raises(TreeoptError, match="batch 4: the workload has 3 sequences"):
        replay(FixedSteps(1), acc, batch=4, costs=SECONDS[:2])


def test_a_step_beyond_the_trace_is_refused_naming_the_round():
    acc = table([[0, 1]] * 60, (60,))
    config = SGLangConfig(((1, SGLangSlot((1, 3))),), num_steps=1, overlap=False)
    with pytest.raises(TreeoptError, match=r"chose 3 steps in round 15 at batch 1; toy records "
                                           r"chains of 0 … 1 steps"):
        replay(SGLangPolicy(config), acc, batch=1, costs=SECONDS)


ranks = st.lists(st.lists(st.sampled_from([0, 0, 0, 1, -1]), min_size=4, max_size=4),
                 min_size=2, max_size=60)


@settings(max_examples=40, deadline=None)
@given(ranks, st.integers(0, 4), st.integers(1, 3))
def test_fixed_chain_at_batch_1_is_the_step_walk(rows, k, cut):
    n = len(rows)
    lengths = [n // 2, n - n // 2] if cut > 1 and n >= 2 else [n]
    trace = RankTrace(np.array(rows, np.int16), {"sequence_positions": lengths})
    r = replay(FixedSteps(k), ChainAcceptance.from_rank_trace(trace), batch=1,
               costs=np.ones(5))
    steps, per_sequence = step_walk(Tree.chain(k) if k else Tree(()), trace)
    assert r.rounds == len(steps) and r.tokens == int(steps.sum())
    assert (r.accept_length == steps).all()


def test_dynamic_top1_trace_matches_its_own_walk():
    places = np.full((6, 3, 3), -1, np.int16)
    places[:, 2, :2] = 0  # a 3-step chain keeps its first two drafts at every position
    places[:, 1, :2] = 0
    places[:, 0, :1] = 0
    dyn = DynamicTrace(1, places, (6,))
    acc = ChainAcceptance.from_dynamic(dyn)
    assert acc.accepted.tolist() == [[0, 1, 2, 2]] * 6
    r = replay(FixedSteps(3), acc, batch=1, costs=SECONDS)
    from treeopt.model.dynamic_settings import DynamicSettings

    assert r.mean_accept_length == dyn.walk(DynamicSettings(1, 3, 4)).mean_accept_length
    with pytest.raises(TreeoptError, match="top-k 2"):
        ChainAcceptance.from_dynamic(DynamicTrace(2, places, (6,)))


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 5), st.integers(1, 4))
def test_constant_acceptance_converges_to_one_above_it(a, batch):
    # every position: the first a drafts are right, the next wrong: a chain of k accepts min(a, k)
    row = [min(a, k) for k in range(7)]
    acc = table([row] * 4000, (1000,) * 4)
    slot = SGLangSlot(tuple(range(7)))
    for overlap in (False, True):
        config = SGLangConfig(((1, slot),), num_steps=3, overlap=overlap)
        r = replay(SGLangPolicy(config), acc, batch=batch, costs=np.ones(7))
        assert set(r.steps[-100:].tolist()) == {min(a + 1, 6)}


def test_zero_acceptance_cycles_between_0_and_1():
    acc = table([[0] * 4] * 400, (400,))
    config = SGLangConfig(((1, SGLangSlot((0, 1, 3), down_hysteresis=0.0)),), num_steps=3,
                          overlap=False)
    r = replay(SGLangPolicy(config), acc, batch=1, costs=SECONDS)
    assert r.steps[:15].tolist() == [3] * 15
    assert r.steps[15:35].tolist() == [0] * 5 + [1] * 5 + [0] * 5 + [1] * 5


def test_workloads():
    acc = table([[0, 0], [0, 1], [0, 1], [0, 0], [0, 1]], (1, 2, 2))
    assert acc.difficulty().tolist() == [0.0, 1.0, 0.5]
    assert by_difficulty(acc).lengths == (2, 2, 1)
    assert by_difficulty(acc, easy_first=False).accepted[:, 1].tolist() == [0, 0, 1, 1, 1]
    both = shifted(acc, table([[0, 1, 2]] * 2, (2,)))
    assert both.max_steps == 1 and both.lengths == (1, 2, 2, 2)
    assert both.source == "toy, then toy"


def test_step_seconds_of_the_demo_profile():
    from treeopt.pricing.sources import profiled_costs

    costs = profiled_costs("data/demo/latency/step-eagle-cpu.json")
    s = chain_step_seconds(costs, batch=1, max_steps=7)
    assert s.shape == (8,) and (np.diff(s) > 0).all()
    with pytest.raises(TreeoptError, match="no measurements at batch 3"):
        chain_step_seconds(costs, batch=3, max_steps=2)


# ---- tuning ---------------------------------------------------------------------------------

def drifting(seed: int, sequences: int = 8, positions: int = 60) -> ChainAcceptance:
    """Sequences whose chance of a right draft differs: some easy, some hard."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(sequences):
        p = 0.2 + 0.7 * (s % 3) / 2
        lead = np.minimum(rng.geometric(1 - p, positions) - 1, 3)
        rows += [[min(int(x), k) for k in range(4)] for x in lead]
    return ChainAcceptance(np.array(rows, np.int8), (positions,) * sequences, "drift")


SMALL = SearchSpace(max_candidates=2, knobs=(("ema_alpha", (0.2, 0.5)),
                                             ("update_interval", (1, 5))), shortlist=2, passes=1)
DEFAULT = SGLangConfig(((1, SGLangSlot((1, 3), down_hysteresis=-0.25)),
                        (4, SGLangSlot((0, 1, 3), down_hysteresis=0.0))))


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 1000))
def test_tuned_is_never_below_the_default_nor_the_best_fixed(seed):
    acc = drifting(seed)
    seconds = {b: SECONDS * (1 + 0.2 * b) for b in (1, 2, 4)}
    tuning = tune_sglang(acc, seconds, default=DEFAULT, space=SMALL)
    assert [k for k, _ in tuning.tuned.slots] == [1, 2, 4]
    for b, used, d, t in tuning.replays:
        assert used is DEFAULT
        assert t.tokens_per_s >= d.tokens_per_s
        best = max(f.tokens_per_s for f in fixed_replays(acc, seconds[b], batch=b))
        assert t.tokens_per_s >= best
        # exact, repeatable
        again = replay(SGLangPolicy(tuning.tuned), acc, batch=b, costs=seconds[b])
        assert (again.steps == t.steps).all() and again.tokens_per_s == t.tokens_per_s


def test_tables_of_the_best_fixed_chains():
    acc = table([[0, 1, 2, 3]] * 400, (50,) * 8)  # every draft right: k + 1 tokens a row
    seconds = {1: np.array([1.0, 1.1, 1.2, 1.3]), 4: np.array([1.0, 1.5, 3.2, 4.5]),
               8: np.array([1.0, 2.5, 4.0, 5.5])}
    fixed = {b: fixed_replays(acc, s, batch=b) for b, s in seconds.items()}
    best = {b: max(range(4), key=lambda k, f=f: f[k].tokens_per_s) for b, f in fixed.items()}
    assert best == {1: 3, 4: 1, 8: 0}
    v = vllm_schedule(best)
    assert v.ranges == ((1, 3, 3), (4, 7, 1), (8, 8, 0)) and v.num_speculative_tokens == 3
    for reading in ("release-1.2", "main"):
        t = trtllm_schedule(fixed, reading=reading)
        assert t == TRTLLMSchedule(((1, 3), (4, 1), (8, 0)), max_draft_len=3, reading=reading)
        for b in seconds:
            r = replay(t, acc, batch=b, costs=seconds[b])
            assert r.tokens_per_s == fixed[b][best[b]].tokens_per_s
    r = replay(v, acc, batch=4, costs=seconds[4])
    assert r.steps.tolist() == [1] * r.rounds


def test_trtllm_keeps_its_first_key_the_largest():
    acc = drifting(5)
    # batch 1 is best at 1 step, batch 2 at 3: the schedule's key 1 must hold the largest value
    seconds = {1: np.array([1.0, 1.0, 9.0, 9.5]), 2: np.array([1.0, 1.1, 1.2, 1.3])}
    fixed = {b: fixed_replays(acc, s, batch=b) for b, s in seconds.items()}
    t = trtllm_schedule(fixed, reading="release-1.2")
    assert t.max_draft_len == t.lookup(1) >= t.lookup(2)
    total = sum(math.log(fixed[b][t.lookup(b)].tokens_per_s) for b in seconds)
    for m in range(1, 4):
        for k2 in range(m + 1):
            other = math.log(fixed[1][m].tokens_per_s) + math.log(fixed[2][k2].tokens_per_s)
            assert total >= other - 1e-12


def test_vllm_policy_reads_the_previous_rounds_batch():
    acc = table([[0, 1, 2]] * 6, (2, 4))
    v = VLLMSchedule(((1, 1, 2), (2, 8, 1)), num_speculative_tokens=2)
    r = replay(v, acc, batch=2, costs=SECONDS[:3], drain=True)
    # the batch shrinks to 1 in the last round; the drafts verified there were drafted at 2
    assert r.rows.tolist() == [2, 1] and r.steps.tolist() == [1, 1]
    t = TRTLLMSchedule(((1, 2), (2, 1)), max_draft_len=2)  # the round's own batch size
    assert replay(t, acc, batch=2, costs=SECONDS[:3], drain=True).steps.tolist() == [1, 2]


def _two_context_costs():
    from treeopt.pricing.costs import NO_DRAFT, NO_OVERHEAD, StepCosts, StepLatency

    points = [(1, s, q, 0.01 * q + 1e-5 * s) for s in (128, 1024) for q in range(1, 9)]
    return StepCosts(StepLatency.from_points(points, "lat.json"), NO_DRAFT, NO_OVERHEAD, {}, {})


def test_one_rule_for_the_context_a_price_is_read_at():
    """A profile of several contexts is priced at a named one (the nearest profiled), and
    refused without one, by the replay, the adaptive report's static tree and the sweep's
    prediction alike (the last two once took the first context in silence)."""
    from treeopt.adaptive.report import _static
    from treeopt.model.growth import grow
    from treeopt.pricing.sweep_prediction import predict

    costs = _two_context_costs()
    assert costs.context(200) == 128 and costs.context(900) == 1024
    trace = RankTrace(np.array([[0, 0], [0, -1], [1, 0]], np.int16), {"sequence_positions": [3]})
    growth = grow(trace, method="empirical", max_nodes=2)
    refusal = r"lat\.json: contexts \[128, 1024\] to choose from; pick one with context S"
    with pytest.raises(TreeoptError, match=refusal):
        costs.context()
    with pytest.raises(TreeoptError, match=refusal):
        _static(growth, trace, costs, 1, None)
    with pytest.raises(TreeoptError, match=refusal):
        predict(Tree.chain(1), growth, costs, trace, 1)
    with pytest.raises(TreeoptError, match=refusal):
        chain_step_seconds(costs, batch=1, max_steps=2)
    assert _static(growth, trace, costs, 1, 1000).size >= 0
