"""Prompt lookup (n-gram drafting): its rule equals Hugging Face's own generator on random
contexts, its rank trace equals the lookup applied position by position, live tree decoding with
it is lossless (greedy and sampled, batched, ragged), and walking its trace reproduces live
decoding step by step."""

from __future__ import annotations

import json

import numpy as np
import pytest
from continuous import assert_each_prompt_as_alone  # noqa: E402
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.drafters.ngram import LookupRule, NgramIndex, chain_ranks, propose

CONTEXTS = st.lists(st.integers(0, 4), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(CONTEXTS, st.integers(1, 4), st.integers(1, 6), st.sampled_from([None, 0]))
def test_the_lookup_equals_hugging_faces_prompt_lookup(context, max_n, depth, eos):
    """transformers' PromptLookupCandidateGenerator, the installed version, is the reference."""
    torch = pytest.importorskip("torch")
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    hf = PromptLookupCandidateGenerator(
        eos_token_id=None if eos is None else torch.tensor([eos]), num_output_tokens=depth,
        max_matching_ngram_size=max_n, max_length=10**6)
    out, _ = hf.get_candidates(torch.tensor([context]))
    want = out[0, len(context):].tolist()
    rule = LookupRule(min_n=1, max_n=max_n, eos_token_id=eos)
    index = NgramIndex(rule)
    index.extend(context)
    assert propose(context, rule, depth) == index.propose(depth) == want


@settings(max_examples=200, deadline=None)
@given(CONTEXTS, st.integers(1, 3), st.integers(0, 2), st.integers(1, 5))
def test_the_index_grown_token_by_token_equals_the_scan(context, min_n, extra, depth):
    rule = LookupRule(min_n=min_n, max_n=min_n + extra)
    index = NgramIndex(rule)
    for i, token in enumerate(context):
        index.extend([token])
        assert index.propose(depth) == propose(context[: i + 1], rule, depth)


def test_vllms_rules_match_the_longest_suffix_and_may_overlap_it():
    """vLLM's ngram_proposer docstring example, and a run whose match overlaps the suffix."""
    assert propose([1, 2, 3, 4, 2, 3], LookupRule(min_n=2, max_n=3), 4) == [4, 2, 3]
    assert propose([7, 7, 7, 7], LookupRule(min_n=2, max_n=2), 4) == [7, 7]  # cut by the end
    assert propose([1, 2, 9, 1, 2], LookupRule(min_n=3, max_n=3), 4) == []  # no 3-gram repeats
    assert propose([5, 1, 2, 6, 9, 1, 2], LookupRule(min_n=1, max_n=2), 2) == [6, 9]


def test_the_eos_cut_proposes_nothing_when_eos_follows_at_once():
    rule = LookupRule(min_n=1, max_n=2, eos_token_id=0)
    assert propose([4, 0, 3, 4], rule, 3) == []  # no retry at a shorter n
    assert propose([4, 5, 0, 4], rule, 3) == [5]


def test_chain_ranks_score_each_depth_of_the_lookup_at_each_position():
    seq = [1, 2, 3, 1, 2, 4, 1, 2, 3, 1]
    rule = LookupRule(min_n=1, max_n=2)
    got = chain_ranks(seq, 1, rule, 3)
    for row, t in enumerate(range(1, len(seq) - 1 - 3)):
        chain = propose(seq[: t + 2], rule, 3)
        want = [0 if k < len(chain) and chain[k] == seq[t + 2 + k] else -1 for k in range(3)]
        assert got[row].tolist() == want
    assert got.dtype == np.int16 and (got == 0).any() and (got == -1).any()


def test_bad_settings_are_refused_naming_the_setting():
    from treeopt.errors import TreeoptError

    with pytest.raises(TreeoptError, match="min_n must be ≥ 1"):
        LookupRule(min_n=0)
    with pytest.raises(TreeoptError, match="max_n must be ≥ min_n"):
        LookupRule(min_n=3, max_n=2)


# ---- the drafter, live and in calibration ------------------------------------------------------

torch = pytest.importorskip("torch")

from treeopt import Tree, TreeoptError  # noqa: E402
from treeopt.decoding.calibrate import CalibrateConfig, calibrate  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, decode, generate  # noqa: E402
from treeopt.drafters.prompt_lookup import PromptLookup, parse_lookup_spec  # noqa: E402

PROMPTS = [[5, 17, 99, 3, 42, 5, 17], [7, 7, 8], [200, 100, 50, 25, 12, 6, 3], [9]]
SAMPLED = DecodeConfig(max_new_tokens=40, mode="sample", temperature=0.8, seed=3)


@pytest.fixture(scope="module")
def base(peaked):
    return peaked[0]


@pytest.fixture(scope="module")
def lookup():
    return PromptLookup(depth=6, min_n=1, max_n=3, vocab_size=256)


@pytest.mark.parametrize("tree", [Tree.chain(6), Tree.chain(2), Tree.chain(1)],
                         ids=["chain6", "chain2", "chain1"])
@pytest.mark.parametrize("cfg", [DecodeConfig(max_new_tokens=40), SAMPLED],
                         ids=["greedy", "sampled"])
def test_tree_decoding_with_prompt_lookup_is_lossless(base, lookup, tree, cfg):
    want = decode(base, None, Tree(()), PROMPTS, config=cfg).tokens
    got = decode(base, lookup, tree, PROMPTS, config=cfg)
    assert got.tokens == want
    if tree.depth > 1:  # the peaked model repeats itself: the lookup hits
        assert got.stats.mean_accept_length > (1.3 if cfg.mode == "greedy" else 1.05)


def test_every_row_of_a_batch_equals_that_row_decoded_alone(base, lookup):
    tree, cfg = Tree.chain(6), DecodeConfig(max_new_tokens=30)
    batch = decode(base, lookup, tree, PROMPTS, config=cfg)
    for i, prompt in enumerate(PROMPTS):
        assert batch.tokens[i] == generate(base, lookup, tree, prompt, config=cfg).tokens


@pytest.mark.parametrize("cfg", [DecodeConfig(max_new_tokens=30), SAMPLED],
                         ids=["greedy", "sampled"])
def test_continuous_batching_decodes_each_prompt_as_alone(base, lookup, cfg):
    assert_each_prompt_as_alone(base, lookup, Tree.chain(6), PROMPTS, cfg, batch=3)


@pytest.mark.parametrize("cfg", [DecodeConfig(max_new_tokens=48), SAMPLED],
                         ids=["greedy", "sampled"])
def test_the_trace_walk_reproduces_live_decoding_step_by_step(base, lookup, cfg, tmp_path):
    from treeopt.model.simulation import step_lengths

    sampling = ({} if cfg.mode == "greedy" else
                {"temperature": cfg.temperature, "seed": cfg.seed})
    longest = 0
    for depth in (6, 3):
        tree = Tree.chain(depth)
        for i, prompt in enumerate(PROMPTS[:3]):
            trace, _ = calibrate(base, lookup, [prompt], tmp_path / f"{depth}-{i}.npz",
                                 config=CalibrateConfig(top_k=4, max_new_tokens=cfg.max_new_tokens,
                                                        **sampling))
            assert (trace.head_kind, trace.heads) == ("prompt-lookup", 6)
            walk = step_lengths(tree, trace).tolist()
            live = decode(base, lookup, tree, [prompt], config=cfg,
                          streams=[0] if sampling else None)  # calibration's stream
            assert list(live.stats.accept_lengths[: len(walk)]) == walk
            longest = max(longest, *walk)
    assert longest > 2  # the walks compared steps where the lookup's chain was accepted


def test_a_branching_tree_is_refused_for_a_chain_drafter(base, lookup):
    with pytest.raises(TreeoptError, match="one token per depth.*rank 1"):
        decode(base, lookup, Tree.from_choices([[0], [1]]), PROMPTS[:1])
    with pytest.raises(TreeoptError, match="depth 7 but there are only 6"):
        decode(base, lookup, Tree.chain(7), PROMPTS[:1])


def test_specs_and_drafter_files_name_the_settings(tmp_path, base):
    from treeopt.drafters.checkpoints import load_heads_for

    d = load_heads_for(base, "prompt-lookup:depth=4,max-n=2")
    assert isinstance(d, PromptLookup)
    assert (d.config.num_heads, d.rule.min_n, d.rule.max_n, d.config.vocab_size) == (4, 1, 2, 256)
    assert load_heads_for(base, "prompt-lookup", depth=8).config.num_heads == 8
    d.save(tmp_path)
    again = load_heads_for(base, tmp_path)
    assert again.config == d.config
    with pytest.raises(TreeoptError, match="'size=3' is not one of depth=N, min-n=N, max-n=N"):
        parse_lookup_spec("prompt-lookup:size=3", vocab_size=10)
    with pytest.raises(TreeoptError, match="max_n must be ≥ min_n"):
        parse_lookup_spec("prompt-lookup:min-n=3,max-n=2", vocab_size=10)
    (tmp_path / "drafter.json").write_text(json.dumps(
        {"format": "treeopt.drafter/1", "kind": "prompt-lookup", "depth": "four"}))
    with pytest.raises(TreeoptError, match="drafter.json: depth must be an integer"):
        load_heads_for(base, tmp_path)


def test_the_cli_calibrates_grows_selects_and_verifies_with_prompt_lookup(
        tiny_model_dir, prompts_file, tmp_path):
    """Prompt lookup goes through the same commands as any drafter: --drafter SPEC."""
    from test_cli_models import assert_user_error, run

    from treeopt import RankTrace

    spec = "prompt-lookup:depth=4,max-n=2"
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", spec, "--prompts",
               prompts_file, "--max-new-tokens", "16", "--top-k", "4", "--out", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    trace = RankTrace.load(tmp_path / "t.npz")
    assert (trace.head_kind, trace.heads) == ("prompt-lookup", 4)
    assert trace.meta["heads_config"]["max_match"] == 2
    proc = run("grow", "--trace", tmp_path / "t.npz", "--max-nodes", "6", "--out",
               tmp_path / "g.json")
    assert proc.returncode == 0, proc.stderr
    growth = json.loads((tmp_path / "g.json").read_text())
    assert json.dumps(growth).count("[0, 1]") == 0  # chains only: rank 0 at every depth
    proc = run("profile", "step", "--model", tiny_model_dir, "--drafter", spec, "--growth",
               tmp_path / "g.json", "--prompts", prompts_file, "--batch", "1,2", "--sizes",
               "1,2,4", "--max-new-tokens", "6", "--rounds", "1", "--out", tmp_path / "step.json")
    assert proc.returncode == 0, proc.stderr
    proc = run("select", "--growth", tmp_path / "g.json", "--step-profile", tmp_path / "step.json",
               "--batch", "1,2", "--out", tmp_path / "sel.json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "sel.json").read_text())["points"]
    (tmp_path / "tree.json").write_text("[[0], [0, 0], [0, 0, 0]]")
    proc = run("verify", "--model", tiny_model_dir, "--drafter", spec, "--tree",
               tmp_path / "tree.json", "--batch", "2", "--prompts", prompts_file,
               "--max-new-tokens", "10", "--trace", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs_match"] is True
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", "prompt-lookup:max-n=0",
               "--prompts", prompts_file, "--out", tmp_path / "o.npz")
    assert_user_error(proc, "prompt-lookup:max-n=0", "max_n must be ≥ min_n")
