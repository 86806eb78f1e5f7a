"""Calibration: one-pass rank traces equal a slow reference; resume, shards, merge, bad input."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402

import treeopt.decoding.calibrate as calibrate_module  # noqa: E402
from treeopt import RankTrace, TreeoptError, merge_traces  # noqa: E402
from treeopt.decoding.calibrate import (  # noqa: E402
    CalibrateConfig,
    calibrate,
    continued,
    shard_path,
)
from treeopt.decoding.continuations import ContinuationStore, weights_digest  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, autoregressive  # noqa: E402
from treeopt.decoding.rank_pass import greedy_continuations, rank_batch, reference_ranks  # noqa: E402
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.drafters.prompt_lookup import PromptLookup  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig  # noqa: E402

V, D = 256, 64
PROMPTS = [[1, 5, 17, 33], [1, 9, 100, 3, 4, 200, 7], [1, 44], [1, 8, 8, 8, 9], [1, 250, 3]]


@pytest.fixture(scope="module")
def model():
    m = tiny_llama(vocab=V, hidden=D, seed=1)
    with torch.no_grad():
        m.lm_head.weight.mul_(10)
    return m


def _heads(model, kind, **options):
    torch.manual_seed(2)
    cfg = HeadsConfig(kind=kind, num_heads=4, hidden_size=D, vocab_size=V, **options)
    heads = build_heads(cfg, lm_head=model.lm_head, embeddings=model.model.embed_tokens)
    with torch.no_grad():
        for p in heads.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    return heads.eval()


@pytest.fixture(scope="module")
def seqs(model):
    return greedy_continuations(model, PROMPTS, max_new_tokens=24)


def test_greedy_continuations_equal_plain_greedy_decoding(model, seqs):
    for p, s in zip(PROMPTS, seqs, strict=True):
        ar = autoregressive(model, p, config=DecodeConfig(max_new_tokens=24))
        assert tuple(s[len(p):]) == ar.tokens


@pytest.mark.parametrize("kind,options", [
    ("medusa", {}), ("medusa", {"num_layers": 2, "share_lm_head": True}),
    ("hydra", {}), ("hydra", {"num_layers": 2, "prefix_attention": True}),
])
def test_rank_trace_equals_the_slow_reference(model, seqs, kind, options):
    heads = _heads(model, kind, **options)
    starts = [len(p) - 1 for p in PROMPTS]
    fast = rank_batch(model, heads, seqs, starts, top_k=20)
    for s, st, got in zip(seqs, starts, fast, strict=True):
        want = reference_ranks(model, heads, s, st, top_k=20)
        assert got.dtype == np.int16 and got.shape == want.shape == (24 - 4, 4)
        np.testing.assert_array_equal(got, want)
    ranks = np.concatenate(fast)
    assert ranks.shape == (sum(24 - 4 for _ in PROMPTS), 4)  # the last K positions are dropped
    assert (ranks == -1).any() and (ranks == 0).any()


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
def test_a_continuation_is_ranked_at_every_position_its_run_visits(model, seqs, kind):
    """``to_end``: the 23 positions a 24-token run starts steps at, each target at or past the
    last token a miss; the rest as the trace of whole depths ranks them."""
    heads = _heads(model, kind)
    starts = [len(p) - 1 for p in PROMPTS]
    whole = rank_batch(model, heads, seqs, starts, top_k=20)
    run = rank_batch(model, heads, seqs, starts, top_k=20, to_end=True)
    for s, st, w, got in zip(seqs, starts, whole, run, strict=True):
        want = reference_ranks(model, heads, s, st, top_k=20, to_end=True)
        assert got.shape == want.shape == (24 - 1, 4)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got[: len(w) - 1], w[:-1])  # (w's last: to the end)
        reaches_end = np.triu(np.ones((4, 4), bool))[::-1]  # depth k of the j-th last position
        assert (got[-4:][reaches_end] == -1).all()


def test_texts_mode_equals_greedy_mode_on_greedy_text(model, seqs):
    heads = _heads(model, "hydra")
    greedy = rank_batch(model, heads, seqs, [len(p) - 1 for p in PROMPTS], top_k=20)
    texts = rank_batch(model, heads, seqs, [0] * len(seqs), top_k=20, targets="argmax")
    for p, g, t in zip(PROMPTS, greedy, texts, strict=True):
        np.testing.assert_array_equal(t[len(p) - 1:], g)


def test_calibrate_writes_a_trace_with_meta(model, tmp_path):
    heads = _heads(model, "medusa")
    cfg = CalibrateConfig(top_k=8, max_new_tokens=16, batch_size=2)
    trace, path = calibrate(model, heads, PROMPTS, tmp_path / "t.npz", config=cfg,
                            meta={"model": "tiny", "prompts": "inline"})
    assert path == tmp_path / "t.npz"
    # every step a 16-token run takes starts at one of its first 15 tokens' positions
    assert trace.positions == 5 * (16 - 1) and trace.heads == 4
    m = trace.meta
    assert (m["head_kind"], m["top_k"], m["model"], m["sequences"], m["positions"]) == (
        "medusa", 8, "tiny", 5, 75)
    assert m["tokens"] == sum(len(p) + 16 for p in PROMPTS)
    assert not (tmp_path / ".t.npz.parts").exists()


def test_interrupted_calibration_resumes(model, tmp_path, monkeypatch):
    heads = _heads(model, "hydra")
    cfg = CalibrateConfig(top_k=8, max_new_tokens=12, batch_size=2)
    whole, _ = calibrate(model, heads, PROMPTS, tmp_path / "whole.npz", config=cfg)

    def interrupt(done, total):
        if done == 2:
            raise KeyboardInterrupt

    out = tmp_path / "t.npz"
    with pytest.raises(KeyboardInterrupt):
        calibrate(model, heads, PROMPTS, out, config=cfg, progress=interrupt)
    assert not out.exists()  # a half-done run is never visible as the output
    assert len(list((tmp_path / ".t.npz.parts").glob("chunk-*.npz"))) == 2
    ran = []
    real = calibrate_module._run_chunk
    monkeypatch.setattr(calibrate_module, "_run_chunk",
                        lambda *a, **k: ran.append(1) or real(*a, **k))
    trace, _ = calibrate(model, heads, PROMPTS, out, config=cfg)
    assert len(ran) == 1  # only the third chunk ran again
    np.testing.assert_array_equal(trace.ranks, whole.ranks)
    ran.clear()
    again, _ = calibrate(model, heads, PROMPTS, out, config=cfg)  # finished: skipped
    assert not ran and np.array_equal(again.ranks, whole.ranks)


def test_shards_merge_to_the_whole(model, tmp_path):
    heads = _heads(model, "medusa")
    whole, _ = calibrate(model, heads, PROMPTS, tmp_path / "w.npz",
                         config=CalibrateConfig(top_k=8, max_new_tokens=12, batch_size=1))
    parts = []
    for i in range(2):
        cfg = CalibrateConfig(top_k=8, max_new_tokens=12, batch_size=1, shard=i, num_shards=2)
        trace, path = calibrate(model, heads, PROMPTS, tmp_path / "t.npz", config=cfg)
        assert path == shard_path(tmp_path / "t.npz", i, 2) and trace.meta["shard"] == f"{i}/2"
        parts.append(trace)
    merged = merge_traces(parts)
    assert merged.meta["sequences"] == 5
    rows = sorted(map(tuple, merged.ranks.tolist()))
    assert rows == sorted(map(tuple, whole.ranks.tolist()))


def test_finished_file_from_another_run_is_not_overwritten(model, tmp_path):
    heads = _heads(model, "medusa")
    out = tmp_path / "t.npz"
    calibrate(model, heads, PROMPTS, out, config=CalibrateConfig(top_k=8, max_new_tokens=8))
    before = out.read_bytes()
    with pytest.raises(TreeoptError, match="exists from a different calibration run"):
        calibrate(model, heads, PROMPTS, out, config=CalibrateConfig(top_k=4, max_new_tokens=8))
    assert out.read_bytes() == before
    assert RankTrace.load(out).top_k == 8


def test_prompt_longer_than_context_is_rejected(tmp_path):
    small = tiny_llama(vocab=V, hidden=D, context=32)
    heads = _heads(small, "medusa")
    with pytest.raises(TreeoptError, match="context is 32"):
        calibrate(small, heads, [list(range(3, 30))], tmp_path / "t.npz",
                  config=CalibrateConfig(max_new_tokens=8))


def test_bad_config():
    with pytest.raises(TreeoptError, match="^shard 2/2"):
        CalibrateConfig(shard=2, num_shards=2)
    with pytest.raises(TreeoptError, match="expected i/n"):
        calibrate_module.parse_shard("two")


WALK_TREE = [[0], [1], [0, 0], [1, 0], [0, 0, 0], [0, 1]]


@pytest.fixture(scope="module")
def walker():
    """A sharpened tiny model and Hydra heads trained on its greedy text: a drafter whose
    trees are accepted often enough for a step walk to mean something."""
    from treeopt.drafters.training import TrainConfig, train_heads

    model = tiny_llama(vocab=V, hidden=D, seed=3)
    with torch.no_grad():
        model.lm_head.weight.mul_(25)
    heads = train_heads(model, greedy_continuations(model, PROMPTS, max_new_tokens=40),
                        TrainConfig(kind="hydra", num_heads=3, steps=30, seq_len=32, lr=3e-3))[0]
    return model, heads


def test_trace_walk_reproduces_live_decoding_step_by_step(walker, tmp_path):
    """The rank trace is an exact substrate: walking it reproduces every decoding step."""
    from treeopt import Tree
    from treeopt.decoding.loop import generate
    from treeopt.model.simulation import step_lengths

    model, heads = walker
    tree = Tree.from_choices(WALK_TREE)
    for i, prompt in enumerate(PROMPTS):
        trace, _ = calibrate(model, heads, [prompt], tmp_path / f"{i}.npz",
                             config=CalibrateConfig(top_k=8, max_new_tokens=32))
        walk = step_lengths(tree, trace).tolist()
        live = generate(model, heads, tree, prompt, config=DecodeConfig(max_new_tokens=32))
        assert list(live.stats.accept_lengths) == walk  # every step, the last ones too
        assert sum(walk) == 32 - 1 and max(walk) > 1  # each step counts the tokens it keeps


def test_a_trace_stopped_at_eos_walks_every_step_of_a_run_that_stops_there(walker, tmp_path):
    """With the tokenizer's EOS, a continuation ends at it and so does the live run: the walk
    takes every step the run takes, the one that reaches EOS keeping what the run keeps."""
    from treeopt import Tree
    from treeopt.decoding.loop import generate
    from treeopt.model.simulation import step_lengths

    model, heads = walker
    tree = Tree.from_choices(WALK_TREE)
    for i, prompt in enumerate(PROMPTS):
        plain = autoregressive(model, prompt, config=DecodeConfig(max_new_tokens=32)).tokens
        eos = plain[12 + i]  # a token of the continuation: it ends at its first occurrence
        cfg = DecodeConfig(max_new_tokens=32, eos_token_id=eos)
        trace, _ = calibrate(model, heads, [prompt], tmp_path / f"{i}.npz",
                             config=CalibrateConfig(top_k=8, max_new_tokens=32, eos_token_id=eos))
        live = generate(model, heads, tree, prompt, config=cfg)
        assert live.tokens[-1] == eos and len(live.tokens) == plain.index(eos) + 1
        walk = step_lengths(tree, trace).tolist()
        assert list(live.stats.accept_lengths) == walk and sum(walk) == len(live.tokens) - 1


def test_a_sampled_trace_walks_exactly_as_live_lossless_sampling(walker, tmp_path):
    """Calibrated on sampled continuations, the trace predicts sample-and-match step by step:
    sequence j of the run (prompt j // S, sample j % S) is live decoding on stream j."""
    from treeopt import Tree
    from treeopt.decoding.loop import decode
    from treeopt.model.simulation import step_lengths

    model, heads = walker
    tree = Tree.from_choices(WALK_TREE)
    S = 2
    cfg = CalibrateConfig(top_k=8, max_new_tokens=32, temperature=1.5, top_p=0.95, seed=9,
                          samples_per_prompt=S, batch_size=2)  # 3 chunks: streams continue
    trace, _ = calibrate(model, heads, PROMPTS, tmp_path / "t.npz", config=cfg)
    assert trace.sampling == {"temperature": 1.5, "top_p": 0.95, "top_k": 0, "seed": 9,
                              "samples_per_prompt": 2}
    assert trace.meta["source"] == "sampled" and trace.meta["sequences"] == S * len(PROMPTS)
    rows = [p for p in PROMPTS for _ in range(S)]
    live = decode(model, heads, tree, rows, config=cfg.decoding(), streams=range(len(rows)))
    per_row, at = [], 0
    for _, steps in live.stats.runs:
        per_row.append(live.stats.accept_lengths[at: at + steps])
        at += steps
    walked = 0
    for j in range(len(rows)):
        walk = step_lengths(tree, trace.sequences(j + 1)).tolist()[walked:]
        walked += len(walk)
        assert list(per_row[j]) == walk, j  # every step of the row
    greedy_walk = step_lengths(tree, calibrate(model, heads, PROMPTS, tmp_path / "g.npz",
                                               config=CalibrateConfig(top_k=8, max_new_tokens=32))[0])
    assert float(np.mean(greedy_walk)) > float(np.mean(step_lengths(tree, trace)))  # sampling
    # accepts less than greedy decoding, and the trace says how much less


def test_bad_sampling_config():
    with pytest.raises(TreeoptError, match="^samples_per_prompt, top_p and sample_top_k need "
                                           "temperature > 0"):
        CalibrateConfig(samples_per_prompt=3)
    with pytest.raises(TreeoptError, match=r"^top_p must be in \(0, 1\]"):
        CalibrateConfig(temperature=1.0, top_p=2.0)
    with pytest.raises(TreeoptError, match="^sample_top_k must be ≥ 0"):
        CalibrateConfig(temperature=1.0, sample_top_k=-1)
    with pytest.raises(TreeoptError, match="^temperature must be ≥ 0"):
        CalibrateConfig(temperature=-1.0)
    with pytest.raises(TreeoptError, match="ranked, not sampled"):
        CalibrateConfig(temperature=1.0, source="texts")


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_drafters_share_one_decoding_and_get_the_traces_they_would_alone(
        model, tmp_path, monkeypatch, temperature):
    """A continuation store decodes each batch once for every drafter calibrated on it, and each
    drafter's trace is the one it gets alone (greedy and sampled)."""
    config = CalibrateConfig(max_new_tokens=12, batch_size=2, temperature=temperature, seed=3)
    drafters = {"medusa": _heads(model, "medusa"),
                "prompt-lookup": PromptLookup(depth=4, min_n=1, max_n=3, vocab_size=V)}
    alone = {k: calibrate(model, d, PROMPTS, tmp_path / f"alone-{k}.npz", config=config)[0]
             for k, d in drafters.items()}
    decoded: list[int] = []
    for name in ("greedy_continuations", "sampled_continuations"):
        real = getattr(calibrate_module, name)
        monkeypatch.setattr(calibrate_module, name,
                            lambda *a, real=real, **k: decoded.append(1) or real(*a, **k))
    store = ContinuationStore(tmp_path / "store")
    shared = {k: calibrate(model, d, PROMPTS, tmp_path / f"shared-{k}.npz", config=config,
                           continuations=store)[0] for k, d in drafters.items()}
    assert len(decoded) == 3  # 5 prompts in chunks of 2: decoded once, for both drafters
    kept = continued(model, PROMPTS, config, store=store)  # what the dynamic stage reads
    assert len(decoded) == 3  # none decoded again
    assert kept == continued(model, PROMPTS, config)  # and what decoding them again gives
    rows = [p for p in PROMPTS for _ in range(config.samples_per_prompt if temperature else 1)]
    assert [s[: len(p)] for s, p in zip(kept, rows, strict=True)] == rows
    assert sum(len(s) for s in kept) == shared["medusa"].meta["tokens"]
    for k in alone:
        assert np.array_equal(alone[k].ranks, shared[k].ranks)
        assert alone[k].meta["sequence_positions"] == shared[k].meta["sequence_positions"]


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_drafters_that_read_features_share_one_forward_per_batch(
        model, tmp_path, monkeypatch, temperature):
    """A feature cache runs the base model's teacher-forced forward once per batch for every
    drafter that reads its features, and each drafter's trace is the one it gets alone."""
    from treeopt.decoding import rank_pass
    from treeopt.decoding.features import FeatureCache

    config = CalibrateConfig(max_new_tokens=12, batch_size=2, temperature=temperature, seed=3)
    drafters = {k: _heads(model, k) for k in ("medusa", "hydra")}
    store = ContinuationStore(tmp_path / "store")
    alone = {k: calibrate(model, d, PROMPTS, tmp_path / f"alone-{k}.npz", config=config,
                          continuations=store)[0] for k, d in drafters.items()}
    forwards: list[int] = []
    real = rank_pass._stream
    monkeypatch.setattr(rank_pass, "_stream",
                        lambda *a, **k: forwards.append(1) or real(*a, **k))
    features = FeatureCache()
    shared = {k: calibrate(model, d, PROMPTS, tmp_path / f"shared-{k}.npz", config=config,
                           continuations=store, features=features)[0]
              for k, d in drafters.items()}
    assert len(forwards) == len(features) == 3  # 5 prompts in chunks of 2, for both drafters
    for k in alone:
        assert np.array_equal(alone[k].ranks, shared[k].ranks)


def test_the_weights_digest_tells_models_apart(model):
    assert weights_digest(model) == weights_digest(model)
    assert weights_digest(model) != weights_digest(tiny_llama(vocab=V, hidden=D, seed=2))
