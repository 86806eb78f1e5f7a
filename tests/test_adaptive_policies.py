"""The engines' step controllers: SGLang's adaptive rule against the research test vectors and
the released wheel's own classes, vLLM's and TensorRT-LLM's tables with exact values."""

from __future__ import annotations

import glob
import json
import os
import sys
import types
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.adaptive import (
    FixedSteps,
    RoundState,
    SGLangConfig,
    SGLangPolicy,
    SGLangSlot,
    TRTLLMSchedule,
    VLLMSchedule,
)
from treeopt.engines.sglang.adaptive import (
    cuda_graph_batch_sizes,
    loader_problems,
    sglang_default_slots,
)
from treeopt.errors import TreeoptError


def run(config: SGLangConfig, rounds: list[list[int]], *, batch: int | None = None) -> list[int]:
    """The steps drafted in each round, feeding the given per-request accepts."""
    policy, out = SGLangPolicy(config), []
    for r, accepted in enumerate(rounds):
        state = RoundState(r, batch or len(accepted))
        out.append(policy.decide(state))
        policy.observe(state, accepted)
    return out


def single(key: int, **options) -> SGLangConfig:
    """The default config with only the default slot ``key`` (what a batch routed there sees)."""
    slots = dict(sglang_default_slots())
    return SGLangConfig(((key, slots[key]),), **{"num_steps": None, "overlap": False, **options})


# ---- SGLang: the research notes' vectors (decisions after the 15th, 20th, … round) ----------

def test_slot1_rises_to_5_at_the_15th_round():
    # EMA of 3-accepts from 2.0 by 0.2: 2.96 after 15 rounds > 3 - 0.5: 3 → 5
    steps = run(SGLangConfig.default(overlap=False), [[3, 3]] * 30, batch=1)
    assert steps == [3] * 15 + [5] * 15
    lagged = run(SGLangConfig.default(), [[3, 3]] * 30, batch=1)
    assert lagged == [3] * 16 + [5] * 14


def test_slot1_drops_to_1_on_zero_accepts_and_holds_on_two():
    assert run(SGLangConfig.default(overlap=False), [[0]] * 20) == [3] * 15 + [1] * 5
    assert run(SGLangConfig.default(overlap=False), [[2]] * 200) == [3] * 200  # dead zone


def test_slot8_cycles_between_0_and_1_on_zero_accepts():
    steps = run(single(8, num_steps=3), [[0] * 8] * 40, batch=8)
    assert steps == [3] * 15 + [0] * 5 + [1] * 5 + [0] * 5 + [1] * 5 + [0] * 5


def test_slot32_starts_at_its_middle_when_the_start_is_not_a_candidate():
    config = SGLangConfig.default(overlap=False)
    policy = SGLangPolicy(config)
    slot = policy.slot_for(32)
    assert (slot.current, slot.ema) == (1, 0.0)
    assert policy.slot_for(64).current == 0 and policy.slot_for(64).ema == -1.0
    assert run(single(64, num_steps=0), [[5] * 64] * 50, batch=64) == [0] * 50


def test_slots_keep_their_own_state_and_padding_routes_up():
    config = SGLangConfig(((1, SGLangSlot((1, 3))), (35, SGLangSlot((1, 2, 3)))), num_steps=3,
                          overlap=False)
    assert [config.route(b) for b in (1, 32, 33, 34, 35, 36)] == [1, 1, 35, 35, 35, 35]
    assert SGLangConfig(config.slots, cuda_graph_bs=None).route(33) == 1
    policy = SGLangPolicy(config)
    for r in range(15):  # only slot 1 sees rounds: slot 35 stays at its start
        policy.decide(RoundState(r, 1))
        policy.observe(RoundState(r, 1), [0])
    assert policy.decide(RoundState(15, 1)) == 1
    assert policy.decide(RoundState(16, 33)) == 3


def test_down_move_skips_levels_and_suppresses_the_up_walk():
    slot = SGLangSlot((0, 1, 3, 5), ema_alpha=1.0, down_hysteresis=0.0, update_interval=1,
                      warmup_batches=0)
    config = SGLangConfig(((1, slot),), num_steps=5, overlap=False)
    assert run(config, [[0]] * 3) == [5, 0, 1]  # 5 → 0 at once; 0 always probes up
    # EMA 3: the drop threshold 2.5 + 1 lets 5 fall to 3, whose rise threshold 2.5 the EMA
    # passes; the up-walk is skipped after a down-move, so it stays at 3
    slot = SGLangSlot((1, 3, 5), ema_alpha=1.0, down_hysteresis=1.0, update_interval=1,
                      warmup_batches=0)
    assert run(SGLangConfig(((1, slot),), num_steps=5, overlap=False), [[3]] * 3) == [5, 3, 5]


def test_ceiling_caps_only_moves_that_are_not_up():
    slot = SGLangSlot((1, 3, 7), ceiling_coeff=1.0, update_interval=1, warmup_batches=0,
                      down_hysteresis=-10.0)
    config = SGLangConfig(((1, slot),), num_steps=7, overlap=False)
    # EMA 6 → 0.8·6 + 0.2·1 = 5.0 → cap ceil(5.0) = 5 < 7: drop to 3
    assert run(config, [[1]] * 2) == [7, 3]


def test_num_steps_must_be_a_candidate():
    with pytest.raises(TreeoptError, match=r"4 is not in the adaptive config's candidate_steps"):
        SGLangConfig.default(num_steps=4)
    with pytest.raises(TreeoptError, match="update_interval must be ≥ 1"):
        SGLangSlot((1,), update_interval=0)


def test_default_tables_by_version():
    assert SGLangConfig.default("0.5.19").to_json()["1"]["candidate_steps"] == [1, 3, 7]
    assert SGLangConfig.default("0.5.19").start_steps == 3  # union [0, 1, 3, 7]
    doc = SGLangConfig.default().to_json()
    assert {k: v["candidate_steps"] for k, v in doc.items()} == {
        "1": [1, 3, 5, 7], "8": [0, 1, 3], "32": [0, 1], "64": [0]}
    assert doc["1"]["down_hysteresis"] == -0.25 and doc["8"]["down_hysteresis"] == 0.0
    with pytest.raises(TreeoptError, match="0.5.13"[:4]):
        SGLangConfig.default("0.5.13")


def test_cuda_graph_list():
    sizes = cuda_graph_batch_sizes(320)
    assert sizes[:10] == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12)
    assert sizes[-6:] == (248, 256, 272, 288, 304, 320) and 64 in sizes and 66 not in sizes


# ---- the loader's rules --------------------------------------------------------------------

LOADER_CASES = [
    {"1": {"candidate_steps": [1, 3, 7]}},
    {"1": {"candidate_steps": [True, 3]}, "ema_alpha": 9, "-1": {"x": 1}},
    {"01": {"candidate_steps": [0]}},
    {"1": {"candidate_steps": []}},
    {"1": {"candidate_steps": [3.0]}},
    {"1": {"candidate_steps": [-1, 2]}},
    {"1": {"candidate_steps": "1,3"}},
    {"1.5": {"candidate_steps": [1]}, "ema_alpha": 0.5},
    {},
]
ACCEPTED = [True, True, True, False, False, False, False, False, False]


def test_loader_fixture_verdicts():
    assert [not loader_problems(doc) for doc in LOADER_CASES] == ACCEPTED
    assert loader_problems([1, 2])[0].startswith("speculative_adaptive_config must be a JSON object")
    config = SGLangConfig.from_json({"2": {"candidate_steps": [3, 1, 3]}, "ema_alpha": 0.5,
                                     "8": {"candidate_steps": [0], "ema_alpha": 0.1}})
    assert [(k, s.candidate_steps, s.ema_alpha) for k, s in config.slots] == [
        (2, (1, 3), 0.5), (8, (0,), 0.1)]
    with pytest.raises(TreeoptError, match="x.json: BS 1: candidate_steps must be a list"):
        SGLangConfig.from_json({"1": {"candidate_steps": [2.0]}}, source="x.json")
    with pytest.raises(TreeoptError, match="ema_alpha must be a number"):
        SGLangConfig.from_json({"1": {"candidate_steps": [2], "ema_alpha": "0.3"}})


# ---- the released wheel's own classes ------------------------------------------------------

WHEELS = Path(__file__).resolve().parents[1] / ".cache" / "engine-wheels"

def _wheel_module() -> types.ModuleType:
    """``adaptive_spec_params`` from SGLang's released wheel, its engine imports stubbed (the
    loader and the slot use none of them)."""
    paths = ([os.environ["TREEOPT_SGLANG_WHEEL"]] if os.environ.get("TREEOPT_SGLANG_WHEEL")
             else sorted(glob.glob(str(WHEELS / "sglang-0.5.23-*.whl"))))
    if not paths or not os.path.exists(paths[0]):
        reason = ("SGLang's 0.5.23 wheel is not in .cache/engine-wheels/ (run "
                  "scripts/fetch-engine-wheels, or set TREEOPT_SGLANG_WHEEL to a sglang-0.5.2x "
                  ".whl); the pure-Python loader fixture covers its rules")
        if os.environ.get("CI"):  # CI fetches it: a missing wheel there is a failure
            pytest.fail(reason)
        pytest.skip(reason)
    with zipfile.ZipFile(paths[0]) as z:
        source = z.read("sglang/srt/speculative/adaptive_spec_params.py").decode()
    stubs = {"sglang.srt.arg_groups.overrides": {"resolved_view": None, "resolving_view": None},
             "sglang.srt.runtime_context": {"attn_dp_enabled_of": None},
             "sglang.srt.speculative.spec_info": {"SpeculativeAlgorithm": None},
             "sglang.srt.utils": {"log_info_on_rank0": lambda logger, msg: None}}
    saved = {name: sys.modules.get(name) for name in stubs}
    try:
        for name, attrs in stubs.items():
            sys.modules[name] = types.SimpleNamespace(**attrs)  # type: ignore[assignment]
        module = types.ModuleType("sglang_adaptive_spec_params")
        exec(compile(source, paths[0] + "!adaptive_spec_params.py", "exec"), module.__dict__)  # noqa: S102
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return module


@pytest.fixture(scope="module")
def wheel() -> types.ModuleType:
    return _wheel_module()


def test_wheel_loader_agrees_with_the_fixture(wheel, tmp_path):
    for i, doc in enumerate(LOADER_CASES):
        path = tmp_path / f"c{i}.json"
        path.write_text(json.dumps(doc))
        try:
            wheel._load_adaptive_config(str(path))
            loaded = True
        except ValueError:
            loaded = False
        assert loaded == ACCEPTED[i], doc
    ours = {k: {n: v[n] for n in ("candidate_steps", "up_hysteresis", "down_hysteresis",
                                  "ceiling_coeff")}
            for k, v in SGLangConfig.default().to_json().items()}
    assert wheel.DEFAULT_ADAPTIVE_CONFIG == ours


knobs = st.fixed_dictionaries({
    "candidate_steps": st.lists(st.integers(0, 7), min_size=1, max_size=4),
    "ema_alpha": st.sampled_from([0.1, 0.2, 0.5, 1.0]),
    "update_interval": st.integers(1, 6), "warmup_batches": st.integers(0, 12),
    "down_hysteresis": st.sampled_from([-0.5, -0.25, 0.0, 0.3]),
    "up_hysteresis": st.sampled_from([-0.3, 0.0, 0.25]),
    "ceiling_coeff": st.sampled_from([0, 0.8, 1.5])})


@settings(max_examples=60, deadline=None)
@given(knobs, knobs, st.integers(0, 7),
       st.lists(st.tuples(st.sampled_from([1, 2, 3, 9, 12]), st.integers(0, 7)), max_size=80))
def test_policy_equals_the_wheel_round_by_round(wheel, a, b, start, rounds):
    config = SGLangConfig.from_json({"1": a, "9": b}, overlap=False,
                                    cuda_graph_bs=(1, 2, 4, 8, 16))
    start = start if start in config.union else None
    config = SGLangConfig(config.slots, num_steps=start, overlap=False, cuda_graph_bs=(1, 2, 4, 8, 16))
    theirs = wheel.AdaptiveSpeculativeParams.__new__(wheel.AdaptiveSpeculativeParams)
    theirs._bs_list, theirs._cuda_graph_bs = [1, 9], [1, 2, 4, 8, 16]
    theirs._slots = {1: wheel.AdaptiveStepSlot(config.start_steps, a),
                     9: wheel.AdaptiveStepSlot(config.start_steps, b)}
    ours = SGLangPolicy(config)
    for r, (batch, accept) in enumerate(rounds):
        steps = ours.decide(RoundState(r, batch))
        assert steps == theirs.get_steps_for_batch(batch)
        accepted = [min(accept, steps)] * batch
        ours.observe(RoundState(r, batch), accepted)
        theirs.on_verify_complete(accepted, batch)
        slot = ours.slot_for(batch)
        assert slot.ema == theirs._route(batch).ema_accept_len


# ---- vLLM and TensorRT-LLM: tables ---------------------------------------------------------

def test_vllm_table_carries_forward_and_caps():
    s = VLLMSchedule(((9, 16, 1), (1, 4, 3), (6, 6, 7)), num_speculative_tokens=5, max_num_seqs=20)
    assert [s.lookup(n) for n in range(1, 21)] == [3] * 5 + [5, 5, 5] + [1] * 12
    assert s.decide(RoundState(0, batch=9)) == 1  # the first round: its own batch
    assert s.decide(RoundState(3, batch=9, previous_batch=4)) == 3
    assert s.ranges == ((1, 4, 3), (6, 6, 7), (9, 16, 1))
    with pytest.raises(TreeoptError, match="must start at 1"):
        VLLMSchedule(((2, 4, 3),), num_speculative_tokens=3)
    with pytest.raises(TreeoptError, match="non-overlapping"):
        VLLMSchedule(((1, 4, 3), (4, 8, 1)), num_speculative_tokens=3)
    with pytest.raises(TreeoptError, match="must be positive"):
        VLLMSchedule(((0, 4, 3),), num_speculative_tokens=3)
    with pytest.raises(TreeoptError, match="> 0"):
        VLLMSchedule(((1, 4, 0),), num_speculative_tokens=0)
    with pytest.raises(TreeoptError, match="outside 1 … max_num_seqs"):
        s.lookup(21)


def test_trtllm_two_readings_of_one_schedule():
    pairs = ((1, 4), (4, 2), (8, 0))
    lower = TRTLLMSchedule(pairs, max_draft_len=4)
    upper = TRTLLMSchedule(pairs, max_draft_len=4, reading="main")
    assert [lower.lookup(b) for b in range(1, 11)] == [4, 4, 4, 2, 2, 2, 2, 0, 0, 0]
    assert [upper.lookup(b) for b in range(1, 11)] == [4, 2, 2, 2, 0, 0, 0, 0, 0, 0]
    assert lower.decide(RoundState(5, batch=4, previous_batch=1)) == 2
    with pytest.raises(TreeoptError, match="must include batch_size=1"):
        TRTLLMSchedule(((4, 4), (8, 2)), max_draft_len=4)
    assert TRTLLMSchedule(((4, 4), (8, 2)), max_draft_len=4, reading="main").lookup(1) == 4
    with pytest.raises(TreeoptError, match="must equal max_draft_len"):
        TRTLLMSchedule(((1, 3), (4, 4)), max_draft_len=4)
    with pytest.raises(TreeoptError, match="in 0 … max_draft_len"):
        TRTLLMSchedule(((1, 4), (4, 5)), max_draft_len=4)


@given(st.integers(0, 9), st.integers(1, 300))
def test_fixed_steps_ignore_everything(k, batch):
    p = FixedSteps(k)
    p.observe(RoundState(0, batch), [0] * batch)
    assert p.decide(RoundState(1, batch, batch)) == k
