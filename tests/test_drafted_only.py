"""Steps that verify only what a lookup drafter drafted (``DecodeConfig.drafted_only``): the same
tokens and steps as the chain verified with holes, each step exactly as many tokens as the
trace's drafted lengths say, and priced by them (:mod:`treeopt.pricing.drafted`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt import Tree, TreeoptError
from treeopt.decoding.calibrate import CalibrateConfig, calibrate
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.loop import decode
from treeopt.drafters.ngram import LookupRule, chain_lengths, propose
from treeopt.drafters.ngram_trie import TrieRule, reference_candidates, trie_chain_lengths
from treeopt.drafters.prompt_lookup import PromptLookup
from treeopt.drafters.suffix import SuffixDrafter
from treeopt.drafters.trie_drafter import TrieDrafter
from treeopt.model.trace import RankTrace, merge_traces
from treeopt.pricing.costs import StepLatency
from treeopt.pricing.drafted import DRAFTED_CHAIN, drafted_throughput, longest_of, step_drafts

PROMPTS = [[5, 17, 99, 3, 42, 5, 17], [7, 7, 8], [200, 100, 50, 25, 12, 6, 3], [9]]
SAMPLED = DecodeConfig(max_new_tokens=40, mode="sample", temperature=0.8, seed=3)


# ----- the drafted lengths a trace records ----------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=40), st.integers(1, 3),
       st.integers(1, 5))
def test_prompt_lookups_lengths_are_its_chains_at_every_position(seq, max_n, depth):
    rule = LookupRule(min_n=1, max_n=max_n)
    want = [len(propose(seq[: t + 2], rule, depth)) for t in range(0, len(seq) - 1 - depth)]
    assert chain_lengths(seq, 0, rule, depth).tolist() == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=2, max_size=40), st.integers(1, 4))
def test_the_tries_lengths_follow_its_first_candidate_down(seq, depth):
    rule = TrieRule(max_trie_depth=4)
    want = []
    for t in range(0, len(seq) - 1 - depth):
        path: list[int] = []
        while len(path) < depth and (c := reference_candidates(seq[: t + 2], path, rule, 1)):
            path.append(c[0])
        want.append(len(path))
    assert trie_chain_lengths(seq, 0, rule, depth).tolist() == want


def test_the_trace_keeps_its_drafted_lengths_through_files_cuts_and_merges(tmp_path):
    tr = RankTrace(np.array([[0, 0], [-1, -1], [0, -1]], np.int16),
                   {"top_k": 4, "sequence_positions": [2, 1], "sequences": 2},
                   drafted=np.array([2, 0, 1]))
    back = RankTrace.load(tr.save(tmp_path / "t.npz"))
    assert back.drafted.tolist() == [2, 0, 1]
    assert back.sequences(1).drafted.tolist() == [2, 0]
    assert back.sequences(2, positions=1).drafted.tolist() == [2, 1]
    assert merge_traces([back, back]).drafted.tolist() == [2, 0, 1, 2, 0, 1]
    plain = RankTrace(tr.ranks, tr.meta)
    assert merge_traces([back, plain]).drafted is None  # only where every shard records them
    assert RankTrace.load(plain.save(tmp_path / "p.npz")).drafted is None
    with pytest.raises(TreeoptError, match="drafted length 3 at position 0 is outside 0 … 2"):
        RankTrace(tr.ranks, tr.meta, drafted=np.array([3, 0, 1]))
    with pytest.raises(TreeoptError, match="one integer per position"):
        RankTrace(tr.ranks, tr.meta, drafted=np.array([1, 1]))


# ----- live decoding ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def base(peaked):
    return peaked[0]


DRAFTERS = {"prompt-lookup": lambda: PromptLookup(depth=6, min_n=1, max_n=3, vocab_size=256),
            "ngram-trie": lambda: TrieDrafter(depth=6, vocab_size=256),
            "suffix": lambda: SuffixDrafter(depth=6, min_token_prob=0.0, vocab_size=256)}


class StepSizes:
    """Records the tokens each verified step holds per row (the root included)."""

    def __init__(self, monkeypatch):
        import treeopt.decoding.batch_run as batch_run

        self.sizes: list[int] = []
        real = batch_run.verify_step

        def spy(verify, tokens, plan, **kw):
            self.sizes.append(int(tokens.shape[1]))
            return real(verify, tokens, plan, **kw)

        monkeypatch.setattr(batch_run, "verify_step", spy)


@pytest.mark.parametrize("kind", DRAFTERS)
@pytest.mark.parametrize("cfg", [DecodeConfig(max_new_tokens=40), SAMPLED],
                         ids=["greedy", "sampled"])
@pytest.mark.parametrize("batch", [1, 3])
def test_drafted_only_steps_emit_the_same_tokens_in_the_same_steps(base, kind, cfg, batch,
                                                                    monkeypatch):
    from dataclasses import replace

    drafter = DRAFTERS[kind]()
    full = decode(base, drafter, Tree.chain(6), PROMPTS, config=cfg, batch=batch)
    spy = StepSizes(monkeypatch)
    cut = decode(base, drafter, Tree.chain(6), PROMPTS, config=replace(cfg, drafted_only=True),
                 batch=batch)
    assert cut.tokens == full.tokens
    assert cut.stats.accept_lengths == full.stats.accept_lengths
    assert min(spy.sizes) < 7 and max(spy.sizes) > 1  # steps were cut, and some drafted
    if kind != "suffix" or cfg.mode == "greedy":  # (sampled text rarely repeats 6 tokens)
        assert max(spy.sizes) == 7  # some ran whole


@pytest.mark.parametrize("kind", DRAFTERS)
def test_each_live_step_verifies_what_the_trace_says_was_drafted(base, kind, tmp_path,
                                                                monkeypatch):
    """At batch 1, the walk over the trace's drafted lengths is the live run's step sizes, to
    the last step (suffix decoding: its request cache fresh in both)."""
    drafter = DRAFTERS[kind]()
    cfg = DecodeConfig(max_new_tokens=48, drafted_only=True)
    checked = 0
    for depth in (6, 3):
        for i, prompt in enumerate(PROMPTS[:3]):
            trace, _ = calibrate(base, drafter, [prompt], tmp_path / f"{kind}-{depth}-{i}.npz",
                                 config=CalibrateConfig(top_k=4, max_new_tokens=48))
            accepted, drafts = step_drafts(depth, trace)
            spy = StepSizes(monkeypatch)
            live = decode(base, drafter, Tree.chain(depth), [prompt], config=cfg)
            assert list(live.stats.accept_lengths) == accepted.tolist()
            assert spy.sizes == (drafts + 1).tolist()
            checked += int((drafts < depth).sum())
    assert checked  # some steps drafted less than the chain is deep


@pytest.mark.parametrize("kind", ["prompt-lookup", "ngram-trie"])
def test_a_batchs_live_steps_verify_its_rows_longest_drafts(base, kind, tmp_path, monkeypatch):
    """At batch 2, while both rows run, every live step verifies 1 + the longer of the two
    rows' drafts that the trace's walk gives for that step (``window_drafts``), step by step."""
    from treeopt.pricing.drafted import window_drafts

    drafter = DRAFTERS[kind]()
    depth, prompts = 6, PROMPTS[:2]
    trace, _ = calibrate(base, drafter, prompts, tmp_path / f"{kind}.npz",
                         config=CalibrateConfig(top_k=4, max_new_tokens=48))
    longest = window_drafts(depth, trace, 2)
    spy = StepSizes(monkeypatch)
    decode(base, drafter, Tree.chain(depth), prompts,
           config=DecodeConfig(max_new_tokens=48, drafted_only=True), batch=2)
    assert spy.sizes[: len(longest)] == (longest + 1).tolist()
    assert len(longest) > 3 and (longest < depth).any()  # some steps of both rows were cut


def test_a_race_cuts_only_the_runs_it_names(base, monkeypatch):
    """``race_in_batches(drafted_runs=…)``: the runs named verify what was drafted, the others
    the whole chain; every output the same (how the benchmarks race a drafted-chain pick)."""
    from treeopt.decoding.loop import Decoder, race_in_batches

    drafter = DRAFTERS["prompt-lookup"]()
    spy = StepSizes(monkeypatch)
    chain = Tree.chain(6)
    runs = [(Decoder(base, drafter), chain), (Decoder(base, drafter), chain),
            (Decoder(base), Tree(()))]
    totals = race_in_batches(runs, PROMPTS, batch=1, config=DecodeConfig(max_new_tokens=40),
                             drafted_runs={0})
    assert all(t.same_as_reference for t in totals)
    assert totals[0].accept_lengths == totals[1].accept_lengths
    steps = [len(t.accept_lengths) for t in totals]  # the plain run's steps verify 1 token
    assert any(1 < s < 7 for s in spy.sizes)  # the first run's cut steps
    assert spy.sizes.count(7) >= steps[1] and spy.sizes.count(1) >= steps[2]
    assert len(spy.sizes) == sum(steps)  # one verify call per step of each run
    plain = decode(base, None, Tree(()), PROMPTS, config=DecodeConfig(max_new_tokens=40))
    assert all(t.emitted == tuple(len(o) for o in plain.tokens) for t in totals)
    cut = decode(base, drafter, chain, PROMPTS[:1], config=DecodeConfig(max_new_tokens=40,
                                                                          drafted_only=True))
    assert cut.stats.accept_lengths == totals[0].accept_lengths[: len(cut.stats.accept_lengths)]


def test_only_a_lookup_drafters_chain_is_cut(base, trained, monkeypatch):
    spy = StepSizes(monkeypatch)
    tree = Tree.from_choices([[0], [1], [0, 0]])
    decode(base, DRAFTERS["ngram-trie"](), tree, PROMPTS[:1],
           config=DecodeConfig(max_new_tokens=12, drafted_only=True))
    assert set(spy.sizes) == {4}  # a branching tree keeps its shape, holes and all
    spy.sizes.clear()
    decode(base, trained["medusa"], Tree.chain(3), PROMPTS[:1],
           config=DecodeConfig(max_new_tokens=12, drafted_only=True))
    assert set(spy.sizes) == {4}  # heads leave no holes: nothing to cut


# ----- the price ------------------------------------------------------------------------------

LATENCY = StepLatency({(b, 64): (np.array([1.0, 2.0, 3.0]), np.array([0.010, 0.012, 0.016]) * b)
                       for b in (1, 2)}, "toy")


def toy_trace(drafted):
    ranks = np.where(np.arange(2)[None, :] < np.asarray(drafted)[:, None], 0, -1)
    return RankTrace(ranks.astype(np.int16), {"sequence_positions": [len(drafted)]},
                     drafted=np.asarray(drafted))


def test_the_price_at_batch_one_is_each_steps_own_size():
    # every step accepts what it drafted: the chain of 2 steps at positions 0 (2 drafted,
    # 3 accepted), 3 (0, 1) and 4 (1, 2); the chain of 1 at 0, 2 and 4, 2 accepted each
    tr = toy_trace([2, 2, 2, 0, 1, 0])
    ell, tp = drafted_throughput(tr, max_depth=2, verify=LATENCY, batch=1, context=64)
    assert ell.tolist() == [1.0, 2.0, 2.0]
    steps = [0.016, 0.010, 0.012]
    assert tp.verify_s[2] == pytest.approx(np.mean(steps))
    assert tp.tokens_per_s[2] == pytest.approx(2.0 / np.mean(steps))
    assert tp.tokens_per_s[0] == pytest.approx(100.0)


def test_a_batch_verifies_its_longest_draft():
    assert longest_of(np.array([0, 0, 2, 1]), 2, 2).tolist() == pytest.approx(
        [0.25, 0.75 ** 2 - 0.25, 1 - 0.75 ** 2])
    tr = toy_trace([2, 2, 2, 0, 1, 0])
    _, tp = drafted_throughput(tr, max_depth=2, verify=LATENCY, batch=2, context=64)
    p = longest_of(step_drafts(2, tr)[1], 2, 2)
    assert tp.verify_s[2] == pytest.approx(p @ (np.array([0.010, 0.012, 0.016]) * 2))


def test_a_chain_always_drafted_whole_costs_what_the_static_chain_costs():
    from treeopt.pricing.throughput import price_tree

    tr = toy_trace([2] * 8)
    ell, tp = drafted_throughput(tr, max_depth=2, verify=LATENCY, batch=1, context=64)
    static, _ = price_tree(Tree.chain(2), verify=LATENCY, batch=1, context=64,
                           expected_accept_length=float(ell[2]))
    assert tp.tokens_per_s[2] == pytest.approx(static)


def test_a_picks_held_out_prediction_prices_it_as_select_does_and_only_a_chain():
    from treeopt.model.growth import grow
    from treeopt.pricing.costs import NO_DRAFT, NO_OVERHEAD, StepCosts
    from treeopt.pricing.sweep_prediction import predict
    from treeopt.pricing.throughput import select

    rng = np.random.default_rng(1)
    tr = toy_trace(np.where(rng.random(300) < 0.3, 2, 0))
    growth = grow(tr, method="empirical", max_nodes=2)
    costs = StepCosts(LATENCY, NO_DRAFT, NO_OVERHEAD, {}, {})
    pick = select(growth, LATENCY, batch=[1], context=[64], trace=tr, drafted_only=True).points[0]
    assert pick.family == DRAFTED_CHAIN
    held = predict(pick.tree, growth, costs, tr, 1, drafted=True)
    assert (held.speedup, held.accept_length) == (pytest.approx(pick.speedup),
                                                  pytest.approx(pick.expected_accept_length))
    whole = predict(pick.tree, growth, costs, tr, 1)  # the same E[L], every step 3 tokens
    assert whole.accept_length == pytest.approx(held.accept_length)
    assert whole.speedup < held.speedup
    with pytest.raises(TreeoptError, match="no top-1 chain"):
        predict(Tree.from_choices([[0], [1]]), growth, costs, tr, 1, drafted=True)


def test_drafted_chain_prices_are_selects_up_to_the_depth_it_can_price():
    from treeopt.model.growth import grow
    from treeopt.pricing.throughput import drafted_chain_prices, select

    rng = np.random.default_rng(2)
    tr = toy_trace(np.where(rng.random(300) < 0.4, 2, rng.integers(0, 2, 300)))
    growth = grow(tr, method="empirical", max_nodes=2)
    for b in (1, 2):
        tp = drafted_chain_prices(growth, tr, verify=LATENCY, batch=b, context=64)
        assert len(tp.tokens_per_s) == 3  # depths 0, 1, 2: the latency prices 3 tokens
        _, want = drafted_throughput(tr, max_depth=2, verify=LATENCY, batch=b, context=64)
        assert tp.tokens_per_s.tolist() == pytest.approx(want.tokens_per_s.tolist())
        cut = select(growth, LATENCY, batch=[b], context=[64], trace=tr, drafted_only=True)
        if cut.points[0].family == DRAFTED_CHAIN:
            assert cut.points[0].tokens_per_s == pytest.approx(float(np.max(tp.tokens_per_s)))
    short = StepLatency({(1, 64): (np.array([1.0, 2.0]), np.array([0.010, 0.012]))}, "short")
    assert len(drafted_chain_prices(growth, tr, verify=short, batch=1,
                                    context=64).tokens_per_s) == 2  # 2 tokens: depth 1 at most


def test_a_trace_without_drafted_lengths_is_refused_by_name():
    tr = RankTrace(np.zeros((3, 2), np.int16), {"sequence_positions": [3]})
    with pytest.raises(TreeoptError, match="records no drafted chain lengths"):
        step_drafts(2, tr)


def test_select_picks_the_drafted_chain_where_the_lookup_rarely_matches(tmp_path):
    from treeopt.model.growth import grow
    from treeopt.pricing.selection import Selection
    from treeopt.pricing.throughput import select
    from treeopt.pricing.tree_files import picks_drafted_chain

    rng = np.random.default_rng(0)
    drafted = np.where(rng.random(400) < 0.3, 2, 0)  # 30% of positions hold a whole chain
    tr = toy_trace(drafted)
    growth = grow(tr, method="empirical", max_nodes=2)
    static = select(growth, LATENCY, batch=[1, 2], context=[64], trace=tr)
    cut = select(growth, LATENCY, batch=[1, 2], context=[64], trace=tr, drafted_only=True)
    assert cut.growth["drafted_only"] is True
    for a, b in zip(static.points, cut.points, strict=True):
        assert b.tokens_per_s >= a.tokens_per_s
    best = cut.points[0]
    assert (best.family, best.tree) == (DRAFTED_CHAIN, Tree.chain(2))
    back = Selection.from_json(json.loads(json.dumps(cut.to_json())), source="s.json")
    assert back.points[0].family == DRAFTED_CHAIN
    (tmp_path / "s.json").write_text(json.dumps(cut.to_json()))  # verify decodes it so
    assert picks_drafted_chain(tmp_path / "s.json", batch=1)
    (tmp_path / "static.json").write_text(json.dumps(static.to_json()))
    assert not picks_drafted_chain(tmp_path / "static.json", batch=1)


def test_the_cli_selects_and_verifies_a_drafted_chain(tiny_model_dir, prompts_file, tmp_path):
    from test_cli_models import assert_user_error, run

    spec = "prompt-lookup:depth=4,max-n=2"
    assert run("calibrate", "--model", tiny_model_dir, "--drafter", spec, "--prompts",
               prompts_file, "--max-new-tokens", "16", "--top-k", "4", "--out",
               tmp_path / "t.npz").returncode == 0
    assert RankTrace.load(tmp_path / "t.npz").drafted is not None
    assert run("grow", "--trace", tmp_path / "t.npz", "--max-nodes", "4", "--out",
               tmp_path / "g.json").returncode == 0
    proc = run("profile", "step", "--model", tiny_model_dir, "--drafter", spec, "--growth",
               tmp_path / "g.json", "--prompts", prompts_file, "--batch", "1", "--sizes",
               "1,2,4", "--max-new-tokens", "6", "--rounds", "1", "--out", tmp_path / "step.json")
    assert proc.returncode == 0, proc.stderr
    select = ("select", "--growth", tmp_path / "g.json", "--step-profile", tmp_path / "step.json",
              "--drafted-only", "--out", tmp_path / "s.json")
    assert_user_error(run(*select), "--trace", "drafted-only steps")
    proc = run(*select, "--trace", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "s.json").read_text())
    assert doc["growth"]["drafted_only"] is True
    plain = [a for a in select if a != "--drafted-only"]  # on by default: the trace records them
    assert run(*plain, "--trace", tmp_path / "t.npz").returncode == 0
    assert json.loads((tmp_path / "s.json").read_text()) == doc
    assert run(*plain, "--trace", tmp_path / "t.npz", "--no-drafted-only").returncode == 0
    assert "drafted_only" not in json.loads((tmp_path / "s.json").read_text())["growth"]
    assert run(*select, "--trace", tmp_path / "t.npz").returncode == 0
    proc = run("verify", "--model", tiny_model_dir, "--drafter", spec, "--tree",
               tmp_path / "s.json", "--prompts", prompts_file, "--max-new-tokens", "10",
               "--prompt-count", "2", "--rounds", "1", "--drafted-only")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert_user_error(run("verify", "--model", tiny_model_dir, "--drafter", spec, "--tree",
                          tmp_path / "s.json", "--prompts", prompts_file, "--drafted-only",
                          "--compile"), "drafted-only steps", "leave out --compile")
    assert report["outputs_match"] is True and report["drafted_only"] is True
    tune = ("tune", "--model", tiny_model_dir, "--drafter", spec, "--growth", tmp_path / "g.json",
            "--prompts", prompts_file, "--batch", "1", "--sizes", "2", "--prompt-count", "2",
            "--max-new-tokens", "8", "--rounds", "1", "--step-profile", tmp_path / "step.json",
            "--drafted-only", "--out", tmp_path / "sweep.json")
    assert_user_error(run(*tune), "--drafted-only", "needs --trace")
    assert_user_error(run(*tune, "--trace", tmp_path / "t.npz", "--compile"),
                      "--drafted-only", "leave out --compile")
    proc = run(*tune, "--trace", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    assert sweep["meta"]["verified"] == "as drafted"
    points = sweep["points"]
    assert all(p["measured"]["lossless"] for p in points) and any(p["selected"] for p in points)


def test_the_apps_choice_of_a_drafted_pick_is_that_chain_grown_again_and_decoded_so():
    """The app carries select's drafted-chain pick to every page: the Trees page's settings
    grow that chain again (rank 0 alone, where the rank-1 node would come second otherwise),
    so it stays the pick, verified as drafted."""
    from treeopt.model.growth import grow
    from treeopt.pricing.selection import Curve, Point
    from treeopt.workbench.trees import grown_choice, pick_choice

    first = np.array([0, 1, 1, 1, 0, 1, 1, 0, 1, 1], np.int16)  # rank 1 beats the chain's 2nd
    ranks = np.stack([first, np.where(first == 0, 0, -1)], axis=1).astype(np.int16)
    tr = RankTrace(ranks, {"sequence_positions": [10]}, drafted=np.full(10, 2))
    assert grow(tr, method="empirical", max_nodes=2, max_rank=10).tree(2) != Tree.chain(2)
    pick = Point(1, 64, Tree.chain(2), None, 1.5, 1.0, 0.0, 0.0, 150.0, 100.0, 2, Curve((), ()),
                 family=DRAFTED_CHAIN)
    choice = pick_choice("prompt-lookup", pick, heads=2, hardware="cpu", held_out=1.4)
    assert choice.drafted and choice.description == (
        "prompt-lookup · select's pick on cpu at batch 1 · 2 nodes, depth 2, verified as "
        "drafted, 1.40× predicted on held-out prompts")
    s = choice.settings
    again = grow(tr, method=s.method, max_nodes=s.max_nodes, max_depth=s.max_depth,
                 max_rank=s.max_rank).tree(s.size)
    assert again == Tree.chain(2)
    assert grown_choice("prompt-lookup", again, s, batch=1, pick=choice) == choice


def test_a_drafted_sweep_verifies_as_drafted_and_is_predicted_and_picked_so(base, tmp_path,
                                                                           monkeypatch):
    """``tune(drafted=True)``: every point's steps verify only what prompt lookup drafted, each
    point is predicted as ``select`` prices drafted chains, the pick is select's drafted chain,
    and the file says so (a sweep of whole trees is not resumed into it, nor it into one)."""
    from treeopt.decoding.live_sweep import tune
    from treeopt.documents.measure import Measurement
    from treeopt.model.growth import grow
    from treeopt.model.runs import as_run
    from treeopt.pricing.costs import NO_DRAFT, NO_OVERHEAD, StepCosts
    from treeopt.pricing.sweep_prediction import predict
    from treeopt.pricing.throughput import select

    drafter = DRAFTERS["prompt-lookup"]()
    trace, _ = calibrate(base, drafter, PROMPTS, tmp_path / "t.npz",
                         config=CalibrateConfig(top_k=4, max_new_tokens=24))
    growth = grow(trace, method="empirical", max_nodes=6)
    latency = StepLatency({(1, 64): (np.arange(1.0, 8.0), 0.010 + 0.004 * np.arange(7))}, "toy")
    costs = StepCosts(latency, NO_DRAFT, NO_OVERHEAD, {}, {})
    run = {"batch": [1], "sizes": [4], "out": tmp_path / "cut.json",
           "config": DecodeConfig(max_new_tokens=24), "measure": Measurement(rounds=1)}
    spy = StepSizes(monkeypatch)
    cut = tune(base, drafter, growth, PROMPTS, drafted=True, **run)  # no pick: one tree
    assert set(spy.sizes) - {1, 5}  # steps cut to what was drafted (whole: 1 or 5 tokens)
    assert cut.meta["verified"] == "as drafted" and cut.points[0].lossless
    run = {**run, "sizes": [2, 4], "out": tmp_path / "sweep.json", "costs": costs,
           "trace": trace}
    sweep = tune(base, drafter, growth, PROMPTS, drafted=True, **run)
    assert all(p.lossless for p in sweep.points)
    for p in sweep.points:
        tree = Tree.from_choices([list(c) for c in p.choices])
        assert p.predicted_speedup == pytest.approx(
            predict(tree, growth, costs, as_run(trace, 24), 1, drafted=True).speedup)
    picked = [Tree.from_choices([list(c) for c in p.choices]) for p in sweep.points if p.selected]
    best = select(growth, latency, batch=[1], context=[64], trace=trace, drafted_only=True)
    drafted_best = max(range(len(growth.order) + 1), key=lambda n: predict(Tree.chain(n), growth, costs, trace, 1,
                                                       drafted=True).tokens_per_s)
    assert picked == [Tree.chain(drafted_best)] and drafted_best > 0
    if best.points[0].family == DRAFTED_CHAIN:  # select's own pick, where a drafted chain wins
        assert picked == [best.points[0].tree]
    with pytest.raises(TreeoptError, match="a sweep of trees verified as drafted, not whole"):
        tune(base, drafter, growth, PROMPTS, **run)
    with pytest.raises(TreeoptError, match="records no drafted chain lengths"):
        tune(base, drafter, growth, PROMPTS, drafted=True,
             **{**run, "out": tmp_path / "s2.json", "trace": RankTrace(trace.ranks, trace.meta)})


def test_a_drafted_chains_batched_point_is_priced_over_its_own_runs_window():
    """At batch 2 a sweep's steady window weights both rows alike, so a drafted chain's point
    is priced with the window's E[L] (the whole chain's, holes never accepted), not the pooled
    walk; and its steps' longest drafts are the window's rows' own: here every window step has
    one row drafting 2 (the matching run), where rows drawn independently from all the steps
    would mostly draft nothing. At batch 1 both are the walk."""
    from treeopt.model.growth import grow
    from treeopt.pricing.costs import NO_DRAFT, NO_OVERHEAD, StepCosts
    from treeopt.pricing.drafted import window_longest
    from treeopt.pricing.sweep_prediction import predict, sweep_accept_length

    drafted = np.array([2] * 12 + [0] * 36)  # a run that matches, then one that never does
    ranks = np.where(np.arange(2)[None, :] < drafted[:, None], 0, -1).astype(np.int16)
    tr = RankTrace(ranks, {"sequence_positions": [12, 36]}, drafted=drafted)
    growth = grow(tr, method="empirical", max_nodes=2)
    costs = StepCosts(LATENCY, NO_DRAFT, NO_OVERHEAD, {}, {})
    chain = Tree.chain(2)
    window = sweep_accept_length(chain, tr, 2)
    pooled = sweep_accept_length(chain, tr, 1)
    assert (window, pooled) == (pytest.approx(2.0), pytest.approx(48 / 40))  # 4 steps of 3, 36 of 1
    assert window_longest(2, tr, 2).tolist() == [0.0, 0.0, 1.0]
    at2 = predict(chain, growth, costs, tr, 2, drafted=True)
    assert at2.accept_length == pytest.approx(window)
    assert at2.accept_length == pytest.approx(predict(chain, growth, costs, tr, 2).accept_length)
    assert at2.tokens_per_s == pytest.approx(2 * window / 0.032)  # q = 3 at batch 2: 16 ms × 2
    assert at2.speedup == pytest.approx(at2.tokens_per_s / (2 / 0.020))
    ell, tp = drafted_throughput(tr, max_depth=2, verify=LATENCY, batch=2, context=64)
    assert tp.tokens_per_s[-1] * window / ell[-1] > 1.4 * at2.tokens_per_s  # independent rows
    at1 = predict(chain, growth, costs, tr, 1, drafted=True)
    assert at1.accept_length == pytest.approx(pooled)
    _, tp1 = drafted_throughput(tr, max_depth=2, verify=LATENCY, batch=1, context=64)
    assert at1.tokens_per_s == pytest.approx(tp1.tokens_per_s[-1])
