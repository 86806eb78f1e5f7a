"""vLLM's per-batch K of a chain drafter, by treeopt's table and by vLLM's profiler rule from the
same chains: hand-computed tables, the chains priced against the simulation, a selection's
schedule carrying both, and each chain method's vLLM config."""

from __future__ import annotations

import numpy as np
import pytest

from treeopt.engines.vllm.chains import drafter_config, per_batch_drafter_config, takes_k
from treeopt.errors import TreeoptError
from treeopt.model.growth import grow
from treeopt.model.simulation import simulate
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.pricing.chains import ChainPrices, ChainTable, price_chains
from treeopt.pricing.costs import StepLatency
from treeopt.pricing.per_batch_k import table_text, treeopt_ks, vllm_per_batch
from treeopt.pricing.selection import Curve, Point, Selection, schedule

# chain E[L] 1, 1.8, 2.4, 2.8, 3.0, 3.1 (rates 0.8 0.6 0.4 0.2 0.1); at batch 1 the chain of 4
# steps in 13.5 ms where vLLM's rule, measuring K 3 and 5 only, interpolates 14 ms
ELL = (1.0, 1.8, 2.4, 2.8, 3.0, 3.1)
CHAINS = ChainTable((ChainPrices(1, 64, ELL, (10.0, 11.0, 12.0, 13.0, 13.5, 15.0)),
                     ChainPrices(4, 64, ELL, (20.0, 26.0, 32.0, 38.0, 44.0, 50.0))),
                    (0.8, 0.6, 0.4, 0.2, 0.1), "hand-made")
EAGLE = {"kind": "eagle", "checkpoint": "E"}


def test_both_tables_on_hand_computed_chains():
    # treeopt: batch 1 K 4 (3.0/13.5 beats 2.8/13), batch 4 K 2 (9.6/32 beats 11.2/38).
    # vLLM's rule: batch 1 K 3 (K 4 at the interpolated 14 ms loses); batch 2 interpolates
    # 13.33/16/18.67/21.33/24/26.67 ms → K 3; batch 3 → K 2; batch 4 → K 2
    doc = vllm_per_batch(CHAINS, EAGLE, context=64)
    assert doc["treeopt"]["ranges"] == [[1, 1, 4], [2, 4, 2]]
    assert doc["treeopt"]["speculative_config"] == {
        "method": "eagle", "model": "E", "num_speculative_tokens": 4,
        "num_speculative_tokens_per_batch_size": [[1, 1, 4], [2, 4, 2], [5, 5, 0]]}
    assert doc["vllm_rule"]["rows"] == [[1, 2, 3], [3, 4, 2]]
    assert doc["vllm_rule"]["speculative_config"]["num_speculative_tokens_per_batch_size"] == [
        [1, 2, 3], [3, 4, 2]]
    assert doc["vllm_rule"]["measured_at"].startswith("the batch sizes select priced, 1, 4")
    b1, b4 = doc["batches"]
    assert (b1["treeopt"]["k"], b1["vllm_rule"]["k"], b4["treeopt"]["k"], b4["vllm_rule"]["k"]) \
        == (4, 3, 2, 2)
    assert b1["treeopt"]["tokens_per_s"] == pytest.approx(3.0 / 13.5e-3)
    assert b1["vllm_rule"]["tokens_per_s"] == pytest.approx(2.8 / 13e-3)
    assert b1["treeopt"]["speedup"] == pytest.approx(3.0 / 13.5e-3 / 100.0)
    [switch] = doc["switches"]
    assert (switch["batch_below"], switch["batch"], switch["k_below"], switch["k"]) == (1, 4, 4, 2)
    assert switch["tokens_per_s_at"] == pytest.approx({"4": 12.0 / 44e-3, "2": 9.6 / 32e-3})
    assert "+3.2%" in table_text(doc).splitlines()[2]  # 222.2 over 215.4 tok/s at batch 1


def test_mtp_takes_k_up_to_its_layers_and_their_multiples():
    mtp = {"kind": "mtp", "num_layers": 2}
    assert [k for k in range(7) if takes_k("mtp", k, mtp)] == [0, 1, 2, 4, 6]
    assert treeopt_ks(CHAINS.prices, mtp) == {1: 4, 4: 2}
    doc = vllm_per_batch(CHAINS, mtp, context=64)
    assert doc["treeopt"]["speculative_config"]["method"] == "mtp"
    assert doc["vllm_rule"] == {**doc["vllm_rule"], "refused": "batches 1-2: vLLM's mtp does "
                                "not draft 3 tokens with 2 layers"}


def test_a_chain_drafter_keeps_select_s_picks():
    ngram = {"kind": "prompt-lookup", "min_match": 1, "max_match": 3}
    assert treeopt_ks(CHAINS.prices, ngram, picks={1: 5, 4: 1}) == {1: 5, 4: 1}
    assert treeopt_ks(CHAINS.prices, ngram) == {1: 4, 4: 2}  # without picks: the best chain


def test_a_shorter_chain_within_the_profile_s_noise_is_taken():
    # √2 · 3% = 4.24%: at batch 1 K 4's 222.2 tok/s floors at 212.8, and K 3 (215.4) is above
    # it, K 2 (200.0) below; at batch 4 K 2 (300.0) floors at 287.3, above K 1 (276.9)
    noisy = {"1": 0.03, "4": 0.03}
    assert treeopt_ks(CHAINS.prices, EAGLE, step_se=noisy) == {1: 3, 4: 2}
    assert treeopt_ks(CHAINS.prices, EAGLE, step_se={"1": 0.02}) == {1: 4, 4: 2}  # 215.9 > 215.4
    ngram = {"kind": "prompt-lookup", "min_match": 1, "max_match": 3}
    assert treeopt_ks(CHAINS.prices, ngram, picks={1: 5, 4: 1}, step_se=noisy) == {1: 2, 4: 1}
    doc = vllm_per_batch(CHAINS, EAGLE, context=64, step_se=noisy)
    assert doc["treeopt"]["ranges"] == [[1, 1, 3], [2, 4, 2]]
    assert doc["treeopt"]["step_se"] == noisy
    assert "within one standard error" in doc["treeopt"]["rule"]
    assert "step_se" not in vllm_per_batch(CHAINS, EAGLE, context=64)["treeopt"]


def test_a_selection_s_step_noise_reaches_its_schedule():
    pts = tuple(Point(b, 64, Tree.chain(1), None, 1.8, 1.0, 0.0, 0.0, 100.0, 50.0, 1,
                      Curve((), ())) for b in (1, 4))
    sel = Selection({"drafter": EAGLE}, {"step_se": {"1": 0.03, "4": 0.03}}, {}, {}, (None,),
                    pts, chains=CHAINS)
    plan = schedule(Selection.from_json(sel.to_json()), context=64)
    assert plan["vllm_per_batch"]["treeopt"]["ranges"] == [[1, 1, 3], [2, 4, 2]]


def test_a_drafter_vllm_drafts_no_chains_of_is_refused():
    with pytest.raises(TreeoptError, match="vLLM drafts no chains of a 'medusa' drafter"):
        vllm_per_batch(CHAINS, {"kind": "medusa"}, context=64)


TRACE = RankTrace(np.array([[0, 0, 1], [0, -1, 0], [1, 0, 0], [0, 0, 0], [0, 0, -1],
                            [-1, 0, 0], [0, 1, 0]], np.int16), {"sequence_positions": [4, 3]})


def test_chains_priced_equal_the_simulation_and_the_latency_source():
    q = np.array([1.0, 2.0, 3.0, 4.0])
    verify = StepLatency({(2, 64): (q, np.array([0.010, 0.012, 0.013, 0.016]))}, "toy")
    growth = grow(TRACE, method="empirical", max_nodes=3)
    table = price_chains(growth, verify, batch=[2], context=[64], trace=TRACE)
    [p] = table.prices
    assert p.accept_length == pytest.approx([simulate(Tree.chain(k), TRACE, per_step=True)
                                             .mean_accept_length for k in range(4)])
    assert p.step_ms == pytest.approx((10.0, 12.0, 13.0, 16.0))
    hist = simulate(Tree.chain(3), TRACE, per_step=True).histogram
    steps = sum(hist)
    assert table.acceptance_rate_per_pos == pytest.approx(
        [sum(hist[2:]) / steps, sum(hist[3:]) / steps, sum(hist[4:]) / steps])


def test_a_selection_carries_its_chains_and_schedules_both_tables():
    pts = tuple(Point(b, 64, Tree.chain(1), None, 1.8, 1.0, 0.0, 0.0, 100.0, 50.0, 1,
                      Curve((), ())) for b in (1, 4))
    sel = Selection({"drafter": EAGLE}, {}, {}, {}, (None,), pts, chains=CHAINS)
    back = Selection.from_json(sel.to_json())
    assert back.chains == CHAINS
    plan = schedule(back, context=64)
    assert plan["vllm_per_batch"]["treeopt"]["ranges"] == [[1, 1, 4], [2, 4, 2]]
    assert plan["ranges"][0]["size"] == 1  # the trees' schedule is unchanged beside it


def test_each_chain_method_s_config():
    suffix = {"kind": "suffix", "max_match": 16, "max_spec_factor": 2.0, "max_spec_offset": 0.0,
              "min_token_prob": 0.2, "max_cached_requests": 100}
    assert drafter_config("suffix", k=8, drafter=suffix) == {
        "method": "suffix", "num_speculative_tokens": 8, "suffix_decoding_max_tree_depth": 16,
        "suffix_decoding_max_cached_requests": 100, "suffix_decoding_max_spec_factor": 2.0,
        "suffix_decoding_min_token_prob": 0.2}
    with pytest.raises(TreeoptError, match="no max_spec_offset"):
        drafter_config("suffix", k=8, drafter={**suffix, "max_spec_offset": 1.0})
    assert drafter_config("draft_model", k=2, drafter={"checkpoint": "D"}) == {
        "method": "draft_model", "model": "D", "num_speculative_tokens": 2}
    with pytest.raises(TreeoptError, match="no num_layers"):
        drafter_config("mtp", k=2, drafter={})
    assert per_batch_drafter_config("ngram", [(1, 2, 3)], drafter={"min_match": 2, "max_match": 4},
                                    off_above=False)["num_speculative_tokens_per_batch_size"] \
        == [[1, 2, 3]]


def test_select_prints_and_writes_both_tables_for_a_prompt_lookup_growth(tmp_path):
    """Chains of E[L] 1, 2, 8/3, 3 (position-weighted: rates 1, 2/3, 1/3); ms at q = 1 … 4.
    vLLM's rule at batch 3 interpolates K 1 at 13.3 ms (2/13.3 beats K 0's 1/10), at batch 5
    K 1 at 20 ms ties K 0, so K 0 (the smaller on a tie)."""
    import contextlib
    import io
    import json

    from treeopt.cli import main
    from treeopt.profiling.table import LatencyRecord, LatencyTable
    from treeopt.roofline import preset

    trace = RankTrace(np.array([[0, 0, -1], [0, -1, -1], [0, 0, 0]], np.int16),
                      {"top_k": 4, "head_kind": "prompt-lookup", "num_heads": 3,
                       "heads_config": {"kind": "prompt-lookup", "num_heads": 3,
                                        "min_match": 2, "max_match": 3}})
    grow(trace, method="empirical", max_nodes=3).save(tmp_path / "g.json")
    ms = {1: [10.0, 10.0, 10.0, 10.0], 2: [10.0, 10.0, 20.0, 40.0], 8: [10.0, 30.0, 40.0, 80.0]}
    LatencyTable("cpu", "fp32", preset("tiny"), tuple(
        LatencyRecord(b, 128, q + 1, t, t, t, 5) for b, row in ms.items()
        for q, t in enumerate(row))).save(tmp_path / "lat.json")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["select", "--growth", str(tmp_path / "g.json"), "--latency",
                     str(tmp_path / "lat.json"), "--out", str(tmp_path / "s.json")]) == 0
    section = json.loads((tmp_path / "s.json").read_text())["schedules"][0]["vllm_per_batch"]
    assert section["treeopt"]["speculative_config"] == {
        "method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2,
        "prompt_lookup_max": 3,
        "num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 2, 1], [3, 8, 0]]}
    assert section["vllm_rule"]["rows"] == [[1, 1, 3], [2, 4, 1], [5, 8, 0]]
    assert section["vllm_rule"]["acceptance_rate_per_pos"] == pytest.approx([1, 2 / 3, 1 / 3])
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("vLLM per-batch K (ngram, context 128): treeopt's table vs "
                               "vLLM's profiler rule (measured at the batch sizes select priced, "
                               "1, 2, 8")
    assert lines[2].split() == ["1", "3", "300.0", "3.00×", "3", "300.0", "3.00×", "+0.0%"]
