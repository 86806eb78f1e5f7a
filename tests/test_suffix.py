"""Suffix decoding (kind suffix) on a tiny model: calibrated in the prompts' order, its trace's
walk equals live decoding of those prompts one at a time step by step (greedy and sampled at
T = 0.7), the order is recorded and matters, decoding is lossless (one row, several, continuous
batching), and the CLI calibrates, grows and verifies it from a spec."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from treeopt import Tree  # noqa: E402
from treeopt.decoding.calibrate import CalibrateConfig, calibrate  # noqa: E402
from treeopt.decoding.exactness import walk_against_live  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, Decoder, decode  # noqa: E402
from treeopt.drafters.suffix import SuffixDrafter, parse_suffix_spec  # noqa: E402
from treeopt.errors import TreeoptError  # noqa: E402
from treeopt.model.growth import grow  # noqa: E402
from treeopt.model.simulation import step_lengths, steps_inside  # noqa: E402

A, B, C = [5, 17, 99, 3, 42], [7, 7, 8], [200, 100, 50, 25, 12, 6, 3]
PROMPTS = [A, B, [9, *A], C, [11, *B], A]  # later requests repeat earlier continuations
GREEDY = DecodeConfig(max_new_tokens=40)
SAMPLED = DecodeConfig(max_new_tokens=40, mode="sample", temperature=0.7, seed=3)
TOP_K = 4
TREES = [Tree.chain(6),  # vLLM's chain
         Tree.from_choices([[0], [1], [0, 0], [1, 0], [0, 1], [0, 0, 0], [0, 0, 0, 0]])]


@pytest.fixture(scope="module")
def base(peaked):
    return peaked[0]


def _drafter(**kwargs):
    return SuffixDrafter(depth=6, max_tree_depth=kwargs.pop("max_tree_depth", 12),
                         vocab_size=256, **kwargs)


def _config(cfg: DecodeConfig) -> CalibrateConfig:
    sampled = {} if cfg.mode == "greedy" else {"temperature": cfg.temperature, "seed": cfg.seed}
    return CalibrateConfig(top_k=TOP_K, max_new_tokens=cfg.max_new_tokens, batch_size=4,
                           **sampled)


@pytest.mark.parametrize("cfg", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_the_walk_in_request_order_equals_live_decoding_one_request_at_a_time(
        base, cfg, tmp_path):
    """Chunks of 4: the cache goes from the first chunk to the second. Live: one row takes the
    prompts in order (streams 0 … n-1, as calibration draws them)."""
    drafter = _drafter()
    trace, _ = calibrate(base, drafter, PROMPTS, tmp_path / "t.npz", config=_config(cfg))
    assert trace.meta["request_order"] == list(range(len(PROMPTS)))
    assert (trace.head_kind, trace.heads) == ("suffix", 6)
    assert trace.meta["heads_config"]["min_token_prob"] == 0.1
    decoder = Decoder(base, drafter)
    longest = 0
    for tree in [*TREES, grow(trace, method="empirical", max_nodes=8).tree(8)]:
        live = decoder.decode(tree, PROMPTS, config=cfg, batch=1)
        walk = step_lengths(tree, trace).tolist()
        steps = live.stats.sequence_accept_lengths
        assert steps_inside(steps, trace.meta["sequence_positions"]) == walk
        assert np.mean(walk) > (1.5 if cfg.mode == "greedy" else 1.1)  # drafts were accepted
        longest = max(longest, *walk)
    assert longest >= 4  # the walks compared steps that accepted several drafted tokens
    found = walk_against_live(base, drafter, TREES[0], PROMPTS, trace, cfg)
    assert (found.step_equal, found.lossless, found.gap) == (len(PROMPTS), len(PROMPTS), 0.0)


def test_the_order_matters_and_the_cache_limit_evicts_it(base, tmp_path):
    """The last request repeats the first prompt: with the cache it is drafted almost whole;
    with a cache of one response (its own) it ranks as it does served first."""
    cfg = _config(GREEDY)
    full, _ = calibrate(base, _drafter(), PROMPTS, tmp_path / "full.npz", config=cfg)
    one, _ = calibrate(base, _drafter(max_cached_requests=1), PROMPTS, tmp_path / "one.npz",
                       config=cfg)
    alone, _ = calibrate(base, _drafter(), [A], tmp_path / "alone.npz", config=cfg)
    n = alone.positions
    assert np.array_equal(full.ranks[:n], alone.ranks)  # the first request meets no other
    assert np.array_equal(one.ranks[-n:], alone.ranks)
    assert (full.ranks[-n:] == 0).mean() > (alone.ranks == 0).mean() + 0.2
    assert one.meta["heads_config"]["max_cached_requests"] == 1


def test_a_resumed_calibration_puts_the_finished_chunks_back_into_the_cache(base, tmp_path):
    cfg = _config(GREEDY)
    whole, _ = calibrate(base, _drafter(), PROMPTS, tmp_path / "whole.npz", config=cfg)
    parts = tmp_path / ".half.npz.parts"

    def stop(done, total):
        if done == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        calibrate(base, _drafter(), PROMPTS, tmp_path / "half.npz", config=cfg, progress=stop)
    assert len(list(parts.glob("chunk-*.npz"))) == 1
    resumed, _ = calibrate(base, _drafter(), PROMPTS, tmp_path / "half.npz", config=cfg)
    assert np.array_equal(resumed.ranks, whole.ranks) and "requests" not in resumed.meta


def test_one_shard_and_continuations_only(base, tmp_path):
    with pytest.raises(TreeoptError, match="shard 0/2: suffix decoding reads every earlier"):
        calibrate(base, _drafter(), PROMPTS, tmp_path / "t.npz",
                  config=CalibrateConfig(num_shards=2))
    with pytest.raises(TreeoptError, match="suffix decoding is calibrated on the base model.s continuations"):
        calibrate(base, _drafter(), PROMPTS, tmp_path / "t.npz",
                  config=CalibrateConfig(source="texts"))


@pytest.mark.parametrize("cfg", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_tree_decoding_with_suffix_decoding_is_lossless(base, cfg):
    want = decode(base, None, Tree(()), PROMPTS, config=cfg).tokens
    wide = Tree.from_choices([[r] for r in range(TOP_K)] + [[0, r] for r in range(TOP_K)])
    drafter = _drafter()
    for tree in [*TREES, wide]:  # wide: holes, -1 nodes
        for batch in (None, 1, 2):  # every row at once; one row; continuous batching
            got = decode(base, drafter, tree, PROMPTS, config=cfg, batch=batch)
            assert got.tokens == want, (tree.size, batch)
    got = decode(base, drafter, TREES[0], PROMPTS, config=cfg, batch=1)
    assert got.stats.mean_accept_length > (1.5 if cfg.mode == "greedy" else 1.1)


def test_each_finished_request_is_cached_as_exactly_its_output(base):
    """Budgets of 1 (each request ends at its first token) and 5 (a last step accepts past
    the budget; the last request's last step is never read back): the cache keeps each
    output."""
    drafter = _drafter()
    for cfg in (DecodeConfig(max_new_tokens=1), DecodeConfig(max_new_tokens=5)):
        with torch.inference_mode():
            run = Decoder(base, drafter)._run(TREES[0], PROMPTS, cfg, profile=False,
                                              streams=None, batch=1)
            got = run.loop()
        cache = run.drafting.state.cache
        assert [cache.tree.seqs[s] for s in cache.held] == [list(t) for t in got.tokens]


def test_specs_and_drafter_files_name_the_settings(tmp_path, base):
    from treeopt.drafters.checkpoints import load_heads_for

    d = load_heads_for(base, "suffix:depth=5,max-tree-depth=20,max-spec-factor=2,"
                             "min-token-prob=0.25,max-cached-requests=-1")
    assert isinstance(d, SuffixDrafter)
    assert d.settings() == {"depth": 5, "max_tree_depth": 20, "max_spec_factor": 2.0,
                            "max_spec_offset": 0.0, "min_token_prob": 0.25,
                            "max_cached_requests": -1}
    assert (d.config.max_match, d.config.max_spec_factor, d.config.vocab_size) == (20, 2.0, 256)
    assert load_heads_for(base, "suffix", depth=8).rule.max_spec_tokens == 8
    d.save(tmp_path)
    again = load_heads_for(base, tmp_path)
    assert isinstance(again, SuffixDrafter) and again.config == d.config
    for spec, message in [
            ("suffix:size=3", "'size=3' is not one of depth=N, max-tree-depth=N, "
                              "max-spec-factor=X"),
            ("suffix:depth=x", "depth must be an integer, got 'x'"),
            ("suffix:min-token-prob=lots", "min-token-prob must be a number, got 'lots'"),
            ("suffix:min-token-prob=2", "min_token_prob must be in 0 … 1, got 2.0"),
            ("suffix:max-tree-depth=1", "max_tree_depth must be ≥ 2, got 1"),
            ("suffix:depth=0", "depth must be ≥ 1, got 0")]:
        with pytest.raises(TreeoptError, match=f"drafter spec '{spec}': .*{message}"):
            parse_suffix_spec(spec, vocab_size=10)
    (tmp_path / "drafter.json").write_text(json.dumps(
        {"format": "treeopt.drafter/1", "kind": "suffix", "depth": 4, "min_token_prob": "x"}))
    with pytest.raises(TreeoptError, match="drafter.json: min_token_prob must be a number"):
        load_heads_for(base, tmp_path)
    with pytest.raises(TreeoptError, match="ranks depend on the requests served before"):
        d.rank_depths(None, torch.zeros(1, 9, dtype=torch.long), top_k=2)


def test_the_cli_calibrates_grows_and_verifies_suffix_decoding(tiny_model_dir, prompts_file,
                                                               tmp_path):
    from test_cli_models import assert_user_error, run

    from treeopt import RankTrace
    from treeopt.model.growth import Growth

    spec = "suffix:depth=4,max-tree-depth=12,min-token-prob=0.2"
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", spec, "--prompts",
               prompts_file, "--max-new-tokens", "16", "--top-k", "4", "--out", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    trace = RankTrace.load(tmp_path / "t.npz")
    assert (trace.head_kind, trace.heads) == ("suffix", 4)
    assert trace.meta["request_order"] == list(range(trace.meta["sequences"]))
    assert trace.meta["heads_config"]["max_match"] == 12
    proc = run("grow", "--trace", tmp_path / "t.npz", "--max-nodes", "6", "--out",
               tmp_path / "g.json")
    assert proc.returncode == 0, proc.stderr
    drafter = Growth.load(tmp_path / "g.json").drafter  # what an export reads
    assert {k: v for k, v in drafter.items() if k != "checkpoint"} == {
        "kind": "suffix", "depth": 4, "min_match": 1, "max_match": 12, "max_spec_factor": 1.0,
        "max_spec_offset": 0.0, "min_token_prob": 0.2, "max_cached_requests": 10000}
    (tmp_path / "tree.json").write_text("[[0], [1], [0, 0], [0, 1], [1, 0]]")
    proc = run("verify", "--model", tiny_model_dir, "--drafter", spec, "--tree",
               tmp_path / "tree.json", "--batch", "2", "--prompts", prompts_file,
               "--max-new-tokens", "10")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs_match"] is True
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", "suffix:match=3",
               "--prompts", prompts_file, "--out", tmp_path / "o.npz")
    assert_user_error(proc, "suffix:match=3", "'match=3' is not one of")


def test_the_kinds_with_a_request_cache_are_those_that_rank_requests_in_order():
    from treeopt.decoding.drafter import Drafter
    from treeopt.drafters.heads import drafter_class
    from treeopt.registry.kinds import KINDS

    methods = ("request_cache", "rank_requests", "remember_requests", "finish")
    for kind in KINDS.values():
        cls = drafter_class(kind)
        own = [m for m in methods if getattr(cls, m) is not getattr(Drafter, m)]
        assert own == (list(methods) if kind.request_cache else []), kind.name
    assert [k for k, kind in KINDS.items() if kind.request_cache] == ["suffix"]
