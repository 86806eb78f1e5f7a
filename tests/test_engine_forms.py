"""The engine modules' forms of chains and dynamic trees, against the rules read from each
engine's source (cited in the modules): exact configs, the refusals in one line, the one
``draft_len_schedule`` encoder read back by both TensorRT-LLM readings, vLLM's per-batch table
against a slow replay of ``build_dynamic_sd_schedule_lookup``, and vLLM's profiler rule on
hand-computed tables."""

from __future__ import annotations

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.engines import sglang, trtllm, vllm
from treeopt.engines.dynamic_trees import check_dynamic, export_dynamic
from treeopt.engines.trtllm.configs import eagle3_dynamic_tree_text
from treeopt.engines.vllm.per_batch import acceptance_rate_per_pos, profiler_itl, rows_of
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings


# ----- vLLM -----------------------------------------------------------------------------------
def test_vllm_suffix_config_with_its_defaults_and_refusals():
    assert vllm.suffix_config(k=16) == {
        "method": "suffix", "num_speculative_tokens": 16, "suffix_decoding_max_tree_depth": 24,
        "suffix_decoding_max_cached_requests": 10000, "suffix_decoding_max_spec_factor": 1.0,
        "suffix_decoding_min_token_prob": 0.1}
    assert "num_speculative_tokens" not in vllm.suffix_config()  # vLLM takes the tree depth
    for kwargs, message in [({"max_tree_depth": 0}, "suffix_decoding_max_tree_depth=0: it must "
                                                    "be >= 1"),
                            ({"max_cached_requests": -1}, "max_cached_requests=-1: it must be >= 0"),
                            ({"max_spec_factor": -0.5}, "max_spec_factor=-0.5: it must be >= 0"),
                            ({"k": 0}, "num_speculative_tokens must be an integer ≥ 1")]:
        with pytest.raises(TreeoptError, match=message):
            vllm.suffix_config(**kwargs)
    assert vllm.suffix_config(max_cached_requests=0)["suffix_decoding_max_cached_requests"] == 0


@pytest.mark.parametrize("k, layers, ok", [(1, 1, True), (3, 1, True), (1, 3, True), (3, 3, True),
                                           (6, 3, True), (4, 3, False), (5, 2, False)])
def test_vllm_mtp_takes_multiples_of_the_layer_count_above_it(k, layers, ok):
    if ok:
        assert vllm.mtp_config(k=k, num_nextn_predict_layers=layers) == {
            "method": "mtp", "num_speculative_tokens": k}
    else:
        with pytest.raises(TreeoptError, match=f"refuses num_speculative_tokens {k} with "
                                               f"{layers} MTP layers"):
            vllm.mtp_config(k=k, num_nextn_predict_layers=layers)


def test_vllm_chain_configs():
    assert vllm.chain_config(method="draft_model", k=2, model="small") == {
        "method": "draft_model", "model": "small", "num_speculative_tokens": 2}
    with pytest.raises(TreeoptError, match="vLLM method 'mtp': a model drafter's chain is"):
        vllm.chain_config(method="mtp", k=2)


def dense_reference(rows, max_num_seqs, cap):
    """vLLM's dense lookup, replayed slowly: a row's K over its range, gaps and the tail carry
    the row before, every K capped."""
    dense = [0] * (max_num_seqs + 1)
    last = None
    nxt = 1
    for lo, hi, k in sorted(rows):
        if lo > nxt and last is not None:
            for b in range(nxt, min(lo, max_num_seqs + 1)):
                dense[b] = min(cap, last)
        for b in range(max(lo, nxt), min(hi, max_num_seqs) + 1):
            dense[b] = min(cap, k)
        nxt, last = max(nxt, hi + 1), k
    for b in range(nxt, max_num_seqs + 1):
        dense[b] = min(cap, last)
    return dense[1:]


@st.composite
def tables(draw):
    cuts = sorted(draw(st.sets(st.integers(2, 40), max_size=5)))
    starts = [1, *cuts]
    rows = []
    for i, lo in enumerate(starts):
        end = (starts[i + 1] - 1) if i + 1 < len(starts) else lo + draw(st.integers(0, 8))
        hi = draw(st.integers(lo, end))  # gaps allowed
        rows.append((lo, hi, draw(st.integers(0, 6))))
    return rows


@settings(max_examples=80, deadline=None)
@given(tables(), st.integers(1, 6))
def test_vllm_table_lookup_is_vllms_dense_table(rows, cap):
    table = vllm.BatchTable(tuple(rows), num_speculative_tokens=cap, max_num_seqs=64)
    assert [table.lookup(b) for b in range(1, 65)] == dense_reference(rows, 64, cap)


def test_vllm_table_refusals_name_the_row():
    for rows, message in [([], "non-empty"), ([(1, 2, 3, 4)], "exactly 3 items"),
                          ([(0, 2, 1)], r"\(0, 2\) must be positive"),
                          ([(1, 4, 1), (3, 8, 1)], "non-overlapping"),
                          ([(1, 2, -1)], "draft length -1")]:
        with pytest.raises(TreeoptError, match=message):
            vllm.table_rows(rows, off_above=False)


def test_vllm_per_batch_config_of_a_chain_drafter():
    doc = vllm.per_batch_config(vllm.suffix_config(), [(1, 4, 8), (5, 16, 4)], off_above=True)
    assert doc["num_speculative_tokens"] == 8
    assert doc["num_speculative_tokens_per_batch_size"] == [[1, 4, 8], [5, 16, 4], [17, 17, 0]]
    with pytest.raises(TreeoptError, match="drafts nothing at any batch size"):
        vllm.per_batch_config({"method": "ngram"}, [(1, 4, 0)], off_above=False)


# ----- vLLM's profiler rule, by hand ----------------------------------------------------------
def test_profiler_rule_interpolates_batch_sizes_between_measured_ones():
    # AL(K) = 1, 1.9, 2.5. b=1: goodputs .1, .19, .25 → 2. b=3: .1, .095, .0625 → 0.
    # b=2 halfway: ITL 10, 15, 25 → goodputs .1, .1267, .1 → 1.
    itl = {1: {0: 10.0, 1: 10.0, 2: 10.0}, 3: {0: 10.0, 1: 20.0, 2: 40.0}}
    assert vllm.profiler_choice([0.9, 0.6], itl) == {1: 2, 2: 1, 3: 0}
    assert vllm.profiler_table([0.9, 0.6], itl) == [[1, 1, 2], [2, 2, 1], [3, 3, 0]]


def test_profiler_rule_interpolates_k_between_measured_ones():
    # AL(K) = 1, 1.9, 2.5, 2.8; ITL(2) = 13 halfway: .1, .1727, .1923, .1867 → the unmeasured K 2
    itl = {1: {0: 10.0, 1: 11.0, 3: 15.0}}
    assert profiler_itl(itl, 1, 2) == 13.0
    assert vllm.profiler_choice([0.9, 0.6, 0.3], itl) == {1: 2}


def test_profiler_rule_ties_go_to_the_shorter_draft_and_bad_profiles_are_refused():
    assert vllm.profiler_choice([0.9], {1: {0: 10.0, 1: 19.0}}) == {1: 0}  # .1 against .1
    with pytest.raises(TreeoptError, match="batch size 1 is not measured"):
        vllm.profiler_choice([0.9], {4: {0: 1.0, 1: 1.0}})
    with pytest.raises(TreeoptError, match=r"batch size 4: measure K 0 and 1"):
        vllm.profiler_choice([0.9], {1: {0: 1.0, 1: 1.0}, 4: {0: 1.0}})
    with pytest.raises(TreeoptError, match="every rate must be in"):
        vllm.profiler_choice([1.5], {1: {0: 1.0, 1: 1.0}})
    with pytest.raises(TreeoptError, match="K 2 is above the largest measured K 1"):
        vllm.profiler_choice([0.9, 0.8], {1: {0: 1.0, 1: 1.0}})


def test_profiler_inputs_from_accepted_counts():
    assert acceptance_rate_per_pos([0, 1, 3, 2], 3) == [0.75, 0.5, 0.25]
    assert rows_of({1: 5, 2: 5, 3: 3}) == [[1, 2, 5], [3, 3, 3]]


# ----- TensorRT-LLM ---------------------------------------------------------------------------
@st.composite
def schedules(draw):
    cuts = sorted(draw(st.sets(st.integers(2, 30), max_size=4)))
    bounds = [1, *cuts, draw(st.integers(max(cuts, default=1), 40))]
    first = draw(st.integers(1, 6))
    ranges = [(bounds[i] if i == 0 else bounds[i], bounds[i + 1] - (i + 2 < len(bounds)),
               first if i == 0 else draw(st.integers(0, first))) for i in range(len(bounds) - 1)]
    ranges[-1] = (ranges[-1][0], max(ranges[-1][0], bounds[-1]), ranges[-1][2])
    return ranges


@settings(max_examples=80, deadline=None)
@given(schedules(), st.sampled_from(trtllm.READINGS))
def test_one_encoder_read_back_by_each_reading_gives_the_ranges(ranges, reading):
    s = trtllm.encode(ranges, reading=reading)
    for lo, hi, k in ranges:
        assert all(s.lookup(b) == k for b in range(lo, hi + 1))
    assert s.lookup(ranges[-1][1] + 1) == 0  # off above the last range
    assert s.max_draft_len == ranges[0][2]


def test_the_readings_write_different_keys_for_one_schedule():
    ranges = [(1, 4, 4), (5, 8, 2), (9, 32, 1)]
    assert trtllm.encode(ranges, reading="release-1.2").as_dict() == {1: 4, 5: 2, 9: 1, 33: 0}
    assert trtllm.encode(ranges, reading="main").as_dict() == {4: 4, 8: 2, 32: 1}
    with pytest.raises(TreeoptError, match="main switches speculation off above the largest key"):
        trtllm.encode([(1, None, 3)], reading="main")
    with pytest.raises(TreeoptError, match="must be contiguous"):
        trtllm.encode([(1, 2, 3), (4, 8, 1)])


def test_trtllm_mtp_config():
    assert trtllm.mtp_config(k=3, num_nextn_predict_layers=1) == {"decoding_type": "MTP",
                                                                  "max_draft_len": 3}
    assert trtllm.mtp_config(k=3, num_nextn_predict_layers=3)["max_draft_len"] == 3
    with pytest.raises(TreeoptError, match="max_draft_len 2 must equal num_nextn_predict_layers 3"):
        trtllm.mtp_config(k=2, num_nextn_predict_layers=3)
    with pytest.raises(TreeoptError, match="refuses max_draft_len 0"):
        trtllm.mtp_config(k=0, num_nextn_predict_layers=1)


def test_trtllm_suffix_automaton_standalone_and_enhancing():
    mtp = trtllm.mtp_config(k=2, num_nextn_predict_layers=1)
    assert trtllm.with_suffix_automaton(mtp, threshold=6, generation="use-sa-spec") == {
        **mtp, "use_sa_spec": True, "sa_spec_threshold": 6}
    eagle = {"decoding_type": "Eagle3", "max_draft_len": 3}
    assert trtllm.with_suffix_automaton(eagle, global_pool=True)["sa_config"] == {
        "threshold": 4, "enable_global_pool": True}
    for config, kwargs, message in [
            ({"decoding_type": "NGram"}, {}, "enhances MTP, Eagle3, PARD drafts, not"),
            (eagle, {"generation": "use-sa-spec"}, "enhances MTP drafts, not"),
            ({**eagle, "use_dynamic_tree": True}, {}, "dynamic tree refuses the suffix"),
            (mtp, {"threshold": 0}, "threshold 0")]:
        with pytest.raises(TreeoptError, match=message):
            trtllm.with_suffix_automaton(config, **kwargs)
    assert trtllm.sa_config(k=4, max_matching_ngram_size=3, global_pool=True) == {
        "decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": 3,
        "enable_global_pool": True}
    with pytest.raises(TreeoptError, match="max_matching_ngram_size 0"):
        trtllm.sa_config(k=4, max_matching_ngram_size=0)
    with pytest.raises(TreeoptError, match="max_matching_ngram_size 65 with the global pool"):
        trtllm.sa_config(k=4, max_matching_ngram_size=65, global_pool=True)


@pytest.mark.parametrize("config, kind", [
    ({"kv_lora_rank": 512, "q_lora_rank": 1536}, "mla"),  # DeepSeek-V3
    ({"layer_types": ["sliding_attention", "full_attention"]}, "sliding-window"),  # Gemma 3
    ({"sliding_window": 4096}, "sliding-window"),  # Mistral 7B v0.1
    ({"sliding_window": 131072, "use_sliding_window": False}, "full"),  # Qwen2.5
    ({"sliding_window": None}, "full"),
    ({"text_config": {"kv_lora_rank": 64}}, "mla")])
def test_attention_kind_from_a_transformers_config(config, kind):
    assert trtllm.attention_kind(config) == kind


def test_trtllm_eagle3_dynamic_tree():
    s = DynamicSettings(topk=4, steps=3, draft_tokens=10)
    doc = trtllm.eagle3_dynamic_tree_config(s, speculative_model="eagle3")
    assert doc == {"decoding_type": "Eagle3", "speculative_model": "eagle3", "max_draft_len": 3,
                   "use_dynamic_tree": True, "dynamic_tree_max_topK": 4,
                   "max_total_draft_tokens": 9}
    assert yaml.safe_load(eagle3_dynamic_tree_text(s, speculative_model="eagle3")) == {
        "speculative_config": doc}
    with pytest.raises(TreeoptError, match="no EAGLE-3 dynamic tree for a model with "
                                           "sliding-window attention"):
        trtllm.eagle3_dynamic_tree_config(s, speculative_model="e", attention="sliding-window")
    with pytest.raises(TreeoptError, match=r"max_total_draft_tokens 15 must be in \[max_draft_len "
                                           r"\(3\), dynamic_tree_max_topK × max_draft_len \(12\)\]"):
        trtllm.eagle3_dynamic_tree_config(DynamicSettings(4, 3, 16), speculative_model="e")
    with pytest.raises(TreeoptError, match="top-k 1 is a chain"):
        trtllm.eagle3_dynamic_tree_config(DynamicSettings(1, 3, 4), speculative_model="e")
    assert check_dynamic(s, "trtllm") == []
    assert check_dynamic(s, "trtllm", attention="mla") == [
        "TensorRT-LLM runs no EAGLE-3 dynamic tree for a model with mla attention"]
    assert "decoding_type: Eagle3" in export_dynamic(s, "trtllm")


# ----- SGLang ---------------------------------------------------------------------------------
def test_sglang_nextn_flags():
    assert sglang.nextn_flags(steps=2, topk=4, draft_tokens=6, draft_model="mtp") == (
        "--speculative-algorithm NEXTN --speculative-draft-model-path mtp "
        "--speculative-num-steps 2 --speculative-eagle-topk 4 --speculative-num-draft-tokens 6")
    with pytest.raises(TreeoptError, match="top-k > 1 needs the number of draft tokens"):
        sglang.nextn_flags(steps=2, topk=4)
    with pytest.raises(TreeoptError, match="at most 21 tokens"):
        sglang.nextn_flags(steps=2, topk=4, draft_tokens=30)
