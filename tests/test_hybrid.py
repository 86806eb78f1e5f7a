"""Hybrid trees (a model drafter and prompt lookup in one tree): the joint ranks follow from the
two drafters' own, live decoding with a hybrid tree is lossless (greedy and sampled, every kind
of model drafter) and walking its trace reproduces live decoding step by step, and a hybrid is
named on the command line as ``DIR+prompt-lookup[:…]``."""

from __future__ import annotations

import numpy as np
import pytest
from continuous import assert_each_prompt_as_alone  # noqa: E402
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from treeopt.drafters.hybrid import hybrid_ranks
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402
from test_eagle import trained_eagle_drafter  # noqa: E402

from treeopt.decoding.calibrate import CalibrateConfig, calibrate  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, decode  # noqa: E402
from treeopt.drafters.hybrid import HybridDrafter, hybrid_layout, hybrid_trace  # noqa: E402
from treeopt.drafters.prompt_lookup import PromptLookup  # noqa: E402

V = 256
PROMPTS = [[5, 17, 99, 3, 42, 5, 17], [7, 7, 8, 7, 7], [200, 100, 50, 25, 12, 6, 3], [9]]
SAMPLED = DecodeConfig(max_new_tokens=40, mode="sample", temperature=0.8, seed=3)
TREE = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [1, 1], [0, 0, 0], [0, 0, 1],
                          [0, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0]])  # the spine runs to depth 5

RANKS = arrays(np.int16, st.tuples(st.integers(0, 6), st.integers(1, 5)),
               elements=st.integers(-1, 5))


@settings(max_examples=200, deadline=None)
@given(RANKS, st.data())
def test_the_joint_rank_is_zero_along_the_chain_else_the_models_shifted(model, data):
    chain = data.draw(arrays(np.int16, (model.shape[0], data.draw(st.integers(1, 6))),
                             elements=st.sampled_from([-1, 0])))
    got = hybrid_ranks(model, chain, top_k=5)
    assert got.shape == (model.shape[0], max(model.shape[1], chain.shape[1]))
    for t in range(model.shape[0]):
        followed = True
        for k in range(got.shape[1]):
            followed = followed and k < chain.shape[1] and chain[t, k] == 0
            m = model[t, k] if k < model.shape[1] else -1
            want = 0 if followed else (m + 1 if 0 <= m and m + 1 < 5 else -1)
            assert got[t, k] == want


def test_the_layout_names_the_spine_the_holes_and_the_models_copies():
    lay = hybrid_layout(TREE, 3, "cpu")
    assert lay.spine.tolist() == [1, 4, 8, 11, 12]  # (0,), (0,0), (0,0,0), … depth 5
    assert lay.holes.tolist() == [6, 10]  # (1,0) and (0,1,0): rank 0 off the chain
    assert lay.dedupe.tolist() == [2, 3, 5, 9]  # rank ≥ 1 below the root or a spine node
    assert lay.dedupe_depth.tolist() == [0, 0, 1, 2]
    assert lay.model_tokens == 11  # the root and the ten nodes of depth ≤ 3
    with pytest.raises(TreeoptError, match="must lie on the lookup's chain.*\\[0, 0, 1\\]"):
        hybrid_layout(TREE, 2, "cpu")


@pytest.fixture(scope="module")
def base(peaked):
    return peaked[0]


@pytest.fixture(scope="module")
def drafters(base, trained):
    lookup = PromptLookup(depth=5, min_n=1, max_n=2, vocab_size=V)
    from treeopt.drafters.draft_model import DraftModel

    small = DraftModel(tiny_llama(vocab=V, layers=1, seed=5), depth=3)
    models = {"medusa": trained["medusa"], "hydra": trained["hydra"],
              "eagle": trained_eagle_drafter(base), "draft-model": small}
    return {k: HybridDrafter(m, lookup) for k, m in models.items()}


@pytest.mark.parametrize("kind", ["medusa", "hydra", "eagle", "draft-model"])
@pytest.mark.parametrize("cfg", [DecodeConfig(max_new_tokens=40), SAMPLED],
                         ids=["greedy", "sampled"])
def test_hybrid_tree_decoding_is_lossless(base, drafters, kind, cfg):
    hybrid = drafters[kind]
    assert hybrid.kind.name == f"{kind}+lookup" and hybrid.config.num_heads == 5
    want = decode(base, None, Tree(()), PROMPTS, config=cfg).tokens
    got = decode(base, hybrid, TREE, PROMPTS, config=cfg)
    assert got.tokens == want
    assert got.stats.mean_accept_length > (1.2 if cfg.mode == "greedy" else 1.05)


@pytest.mark.parametrize("kind", ["medusa", "hydra", "eagle", "draft-model"])
def test_continuous_batching_decodes_each_prompt_as_alone(base, drafters, kind):
    cfg = DecodeConfig(max_new_tokens=30)
    assert_each_prompt_as_alone(base, drafters[kind], TREE, PROMPTS, cfg, batch=2)


@pytest.mark.parametrize("kind", ["hydra", "eagle"])
@pytest.mark.parametrize("cfg", [DecodeConfig(max_new_tokens=40), SAMPLED],
                         ids=["greedy", "sampled"])
def test_the_trace_walk_reproduces_live_decoding_step_by_step(base, drafters, kind, cfg,
                                                              tmp_path):
    from treeopt.model.simulation import step_lengths

    sampling = {} if cfg.mode == "greedy" else {"temperature": cfg.temperature,
                                                "seed": cfg.seed}
    hybrid, seen = drafters[kind], set()
    for i, prompt in enumerate(PROMPTS[:3]):
        trace, _ = calibrate(base, hybrid, [prompt], tmp_path / f"{i}.npz",
                             config=CalibrateConfig(top_k=8, max_new_tokens=cfg.max_new_tokens,
                                                    **sampling))
        assert (trace.head_kind, trace.heads) == (f"{kind}+lookup", 5)
        walk = step_lengths(TREE, trace).tolist()
        live = decode(base, hybrid, TREE, [prompt], config=cfg,
                      streams=[0] if sampling else None)
        assert list(live.stats.accept_lengths[: len(walk)]) == walk
        seen |= {int(r) for r in trace.ranks[:, 0]}
    assert 0 in seen and max(seen) >= 1  # both sources hold true tokens somewhere


def test_the_joint_trace_of_two_traces_equals_the_hybrids_calibration(base, drafters,
                                                                      tmp_path):
    hybrid = drafters["eagle"]
    config = CalibrateConfig(top_k=8, max_new_tokens=30)
    joint, _ = calibrate(base, hybrid, PROMPTS, tmp_path / "h.npz", config=config)
    model, _ = calibrate(base, hybrid.model, PROMPTS, tmp_path / "m.npz", config=config)
    chain, _ = calibrate(base, hybrid.lookup, PROMPTS, tmp_path / "c.npz", config=config)
    combined = hybrid_trace(model, chain)
    assert combined.meta["sequence_positions"] == joint.meta["sequence_positions"]
    assert np.array_equal(combined.ranks, joint.ranks)
    assert combined.head_kind == "eagle+lookup"
    with pytest.raises(TreeoptError, match="chain trace is of 'eagle'"):
        hybrid_trace(model, model)


def test_a_hybrid_is_named_dir_plus_a_lookup_spec(base, trained, tmp_path):
    from treeopt.drafters.checkpoints import load_heads_for, save_heads

    save_heads(trained["hydra"], tmp_path / "hydra")
    hybrid = load_heads_for(base, f"{tmp_path / 'hydra'}+prompt-lookup:depth=7,max-n=2")
    assert isinstance(hybrid, HybridDrafter)
    assert (hybrid.kind.name, hybrid.config.num_heads, hybrid.config.max_match) == (
        "hydra+lookup", 7, 2)
    with pytest.raises(TreeoptError, match="'size=3' is not one of depth=N"):
        load_heads_for(base, f"{tmp_path / 'hydra'}+prompt-lookup:size=3")
    with pytest.raises(TreeoptError, match="joins prompt lookup to a model drafter"):
        HybridDrafter(PromptLookup(depth=2, vocab_size=V), PromptLookup(depth=2, vocab_size=V))


def test_the_cli_calibrates_grows_profiles_selects_and_verifies_a_hybrid(
        tiny_model_dir, prompts_file, tmp_path):
    """A hybrid goes through the same commands as any drafter (--drafter DIR+prompt-lookup),
    and export refuses its tree: no engine verifies one."""
    import json

    from test_cli_models import assert_user_error, run
    from transformers import AutoModelForCausalLM

    from treeopt import RankTrace
    from treeopt.drafters.checkpoints import save_heads
    from treeopt.drafters.heads import build_heads
    from treeopt.registry.drafter_configs import HeadsConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    heads = build_heads(HeadsConfig(kind="medusa", num_heads=2, hidden_size=64,
                                    vocab_size=model.config.vocab_size),
                        lm_head=model.lm_head)
    save_heads(heads, tmp_path / "medusa")
    spec = f"{tmp_path / 'medusa'}+prompt-lookup:depth=4,max-n=2"
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", spec, "--prompts",
               prompts_file, "--max-new-tokens", "16", "--top-k", "4", "--out", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    trace = RankTrace.load(tmp_path / "t.npz")
    assert (trace.head_kind, trace.heads) == ("medusa+lookup", 4)
    assert trace.meta["heads_config"]["max_match"] == 2
    proc = run("grow", "--trace", tmp_path / "t.npz", "--max-nodes", "6", "--max-depth", "2",
               "--out", tmp_path / "g.json")
    assert proc.returncode == 0, proc.stderr
    proc = run("profile", "step", "--model", tiny_model_dir, "--drafter", spec, "--growth",
               tmp_path / "g.json", "--prompts", prompts_file, "--batch", "1,2", "--sizes",
               "1,2,4", "--max-new-tokens", "6", "--rounds", "1", "--out", tmp_path / "step.json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "step.json").read_text())["heads"]["kind"] == "medusa+lookup"
    proc = run("select", "--growth", tmp_path / "g.json", "--step-profile", tmp_path / "step.json",
               "--batch", "1,2", "--out", tmp_path / "sel.json")
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "tree.json").write_text("[[0], [1], [0, 0], [0, 1], [0, 0, 0]]")
    proc = run("verify", "--model", tiny_model_dir, "--drafter", spec, "--tree",
               tmp_path / "tree.json", "--batch", "2", "--prompts", prompts_file,
               "--max-new-tokens", "10", "--trace", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs_match"] is True
    proc = run("export", "--tree", tmp_path / "g.json", "--format", "medusa")
    assert_user_error(proc, "grown for a hybrid (Medusa heads + prompt lookup)",
                      "no engine verifies")


def test_walk_against_live_counts_the_prompts_that_agree(base, drafters, tmp_path):
    from treeopt.decoding.exactness import walk_against_live

    cfg = DecodeConfig(max_new_tokens=30)
    traces = {k: calibrate(base, drafters[k], PROMPTS, tmp_path / f"{k}.npz",
                           config=CalibrateConfig(top_k=8, max_new_tokens=30))[0]
              for k in ("eagle", "hydra")}
    same = walk_against_live(base, drafters["eagle"], TREE, PROMPTS, traces["eagle"], cfg)
    assert (same.prompts, same.step_equal, same.lossless, same.gap) == (4, 4, 4, 0.0)
    assert same.steps > 0 and same.walk_mean == same.live_mean > 1
    other = walk_against_live(base, drafters["eagle"], TREE, PROMPTS, traces["hydra"], cfg)
    assert other.step_equal < 4 and other.lossless == 4  # another drafter's trace disagrees


def test_select_prices_a_hybrid_with_its_models_profile_drafting_the_models_depths_only():
    from types import SimpleNamespace

    from treeopt.cli.select_sources import hybrid_draft
    from treeopt.pricing.costs import DraftCost

    draft = DraftCost("medusa", "profile", lambda batch, expanded: float(sum(expanded)))
    deep = (1, 1, 1, 1, 1)  # a spine five deep

    def growth(kind):
        return SimpleNamespace(drafter={"kind": kind})

    def profile(kind):
        return SimpleNamespace(kind=kind, heads={"kind": kind, "num_heads": 2})

    assert hybrid_draft(growth("medusa+lookup"), profile("medusa"), draft).seconds(1, deep) == 2
    for g, p in (("medusa+lookup", "medusa+lookup"), ("medusa", "medusa"),
                 ("medusa+lookup", "hydra"), ("medusa+lookup", None)):
        priced = hybrid_draft(growth(g), profile(p) if p else None, draft)
        assert priced.seconds(1, deep) == 5, (g, p)
