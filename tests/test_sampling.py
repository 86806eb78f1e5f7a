"""Lossless sampling: per-position noise, sample-and-match equal to plain sampling token for token,
and a distribution test with the power to see a biased rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402
from test_decode import TREES, ragged  # noqa: E402

from treeopt import Tree, TreeoptError  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, autoregressive, decode, generate  # noqa: E402
from treeopt.decoding.sampling import (  # noqa: E402
    filtered_logits,
    gumbel_noise,
    sample,
    stream_keys,
)
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig  # noqa: E402


# ----- the noise and the draw -----------------------------------------------------------------
def test_noise_depends_on_stream_and_position_only():
    keys = stream_keys(5, torch.tensor([0, 1, 0]))
    g = gumbel_noise(keys, torch.tensor([[9, 10], [9, 10], [9, 10]]), 64)
    assert torch.equal(g[0], g[2])  # same stream, same positions: the same numbers
    assert not torch.equal(g[0], g[1]) and not torch.equal(g[0, 0], g[0, 1])
    assert torch.equal(g, gumbel_noise(keys, torch.tensor([[9, 10]] * 3), 64))  # drawn again
    assert not torch.equal(g[0], gumbel_noise(stream_keys(6, torch.tensor([0])),
                                              torch.tensor([[9, 10]]), 64)[0])


def test_noise_is_standard_gumbel():
    g = gumbel_noise(stream_keys(0, torch.arange(64)), torch.arange(64)[:, None].repeat(1, 8),
                     1024).flatten()
    euler_gamma = 0.5772156649
    n = g.numel()  # 524,288 draws: mean γ, variance π²/6
    assert abs(float(g.mean()) - euler_gamma) < 5 * math.sqrt(math.pi ** 2 / 6 / n)
    assert abs(float(g.var()) - math.pi ** 2 / 6) < 0.02
    u = torch.exp(-torch.exp(-g))  # back to uniform: every decile holds a tenth
    counts = torch.histc(u, bins=10, min=0, max=1)
    assert float((counts / n - 0.1).abs().max()) < 0.002


def test_top_k_and_top_p_keep_exactly_the_right_tokens():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    keep = lambda **kw: torch.isfinite(filtered_logits(logits, temperature=1.0, **kw)).tolist()  # noqa: E731
    assert keep(top_k=2) == [True, True, False, False]
    assert keep(top_p=0.5) == [True, False, False, False]  # 0.5 reached by the first
    assert keep(top_p=0.6) == [True, True, False, False]
    assert keep(top_p=0.95) == [True, True, True, False]
    assert keep(top_p=1.0) == [True, True, True, True]
    assert filtered_logits(logits, temperature=2.0)[0].item() == pytest.approx(math.log(0.5) / 2)


def test_a_draw_has_the_softmax_distribution():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 0.5])
    n = 40_000
    keys = stream_keys(11, torch.arange(n))
    drawn = sample(logits.expand(n, 1, 5), keys, torch.zeros(n, 1, dtype=torch.long),
                   temperature=0.8)[:, 0]
    observed = torch.bincount(drawn, minlength=5).double()
    expected = torch.softmax(logits.double() / 0.8, -1) * n
    assert chi_square_p(observed.numpy(), expected.numpy()) > 0.01


def chi_square_p(observed: np.ndarray, expected: np.ndarray) -> float:
    """p-value of Pearson's χ² goodness of fit (scipy-free: Wilson–Hilferty normal approximation
    of the χ² tail, accurate to a few % for the degrees of freedom used here)."""
    keep = expected > 0
    stat = float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    return chi2_tail(stat, int(keep.sum()) - 1)


def chi2_tail(stat: float, dof: int) -> float:
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


# ----- sample-and-match equals plain sampling, token for token --------------------------------
@pytest.mark.parametrize("kind", ["medusa", "hydra"])
@pytest.mark.parametrize("temperature", [0.7, 1.0, 4.0])
def test_tree_sampling_emits_the_autoregressive_samples(peaked, trained, kind, temperature):
    model, _, prompts = peaked
    cfg = DecodeConfig(max_new_tokens=24, mode="sample", temperature=temperature, seed=3)
    for name in ("chain", "medusa-63"):
        for i, prompt in enumerate(prompts[:3]):
            ar = decode(model, None, Tree(()), [prompt], config=cfg, streams=[i])
            got = decode(model, trained[kind], TREES[name], [prompt], config=cfg, streams=[i])
            assert got.tokens == ar.tokens
            assert got.stats.tokens == 24


def test_sampling_really_samples_and_heads_are_accepted(peaked, trained):
    model, _, prompts = peaked
    hot = DecodeConfig(max_new_tokens=32, mode="sample", temperature=4.0, seed=1)
    greedy = [autoregressive(model, p, config=DecodeConfig(max_new_tokens=32)).tokens
              for p in prompts[:4]]
    sampled = [generate(model, trained["hydra"], TREES["medusa-63"], p, config=hot)
               for p in prompts[:4]]
    assert [s.tokens for s in sampled] != greedy  # the draws are not the argmax
    assert max(x for s in sampled for x in s.stats.accept_lengths) >= 2
    warm = DecodeConfig(max_new_tokens=32, mode="sample", temperature=1.0, seed=1)
    assert max(x for p in prompts[:4] for x in generate(
        model, trained["hydra"], TREES["medusa-63"], p, config=warm).stats.accept_lengths) >= 3
    other_seed = generate(model, trained["hydra"], TREES["medusa-63"], prompts[0],
                          config=DecodeConfig(max_new_tokens=32, mode="sample", temperature=4.0,
                                              seed=2))
    assert other_seed.tokens != sampled[0].tokens


@pytest.mark.parametrize("b", [2, 4, 8])
def test_batched_tree_sampling_equals_each_sequence_alone(peaked, trained, b):
    model, _, prompts = peaked
    rows = ragged(prompts, b)
    cfg = DecodeConfig(max_new_tokens=20, mode="sample", temperature=1.0, top_p=0.9, seed=4)
    run = decode(model, trained["hydra"], TREES["medusa-63"], rows, config=cfg,
                 streams=range(10, 10 + b))
    alone = [decode(model, None, Tree(()), [p], config=cfg, streams=[10 + i]).tokens[0]
             for i, p in enumerate(rows)]
    assert list(run.tokens) == alone


def test_sampling_options_are_checked():
    with pytest.raises(TreeoptError, match=r"^mode sample needs temperature > 0, got 0"):
        DecodeConfig(mode="sample", temperature=0.0)
    with pytest.raises(TreeoptError, match=r"^top_p must be in \(0, 1\], got 1.5"):
        DecodeConfig(mode="sample", top_p=1.5)
    with pytest.raises(TreeoptError, match=r"^top_p must be in \(0, 1\], got 0"):
        DecodeConfig(mode="sample", top_p=0.0)
    with pytest.raises(TreeoptError, match=r"^top_k must be ≥ 0"):
        DecodeConfig(mode="sample", top_k=-1)


# ----- the output distribution, independent of the seeding ------------------------------------
N_SAMPLES = 20_000


@pytest.fixture(scope="module")
def tiny_and_heads():
    """A 16-token model with a flat enough distribution that three tokens have ~4,000 outcomes,
    and untrained Medusa heads (each proposes the LM head's own ranking)."""
    model = tiny_llama(vocab=16, hidden=32, layers=1, seed=5)
    with torch.no_grad():
        model.lm_head.weight.mul_(3)
    cfg = HeadsConfig(kind="medusa", num_heads=2, hidden_size=32, vocab_size=16)
    heads = build_heads(cfg, lm_head=model.get_output_embeddings()).eval()
    return model, heads


def first_tokens(model, heads, tree, cfg, *, seed_streams: int) -> np.ndarray:
    """The first 3 tokens of N_SAMPLES independent samples of one prompt, as joint outcome ids."""
    prompt = [3, 7, 9]
    streams = range(seed_streams, seed_streams + N_SAMPLES)
    run = decode(model, heads if tree.size else None, tree, [prompt] * N_SAMPLES, config=cfg,
                 streams=streams)
    out = np.array([t[:3] for t in run.tokens])
    return out[:, 0] * 256 + out[:, 1] * 16 + out[:, 2]


def two_sample_p(a: np.ndarray, b: np.ndarray) -> float:
    """χ² test of homogeneity of two samples' outcome counts (outcomes with < 10 expected
    pooled into one cell, so the approximation holds)."""
    outcomes, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    counts = np.zeros((2, len(outcomes)))
    np.add.at(counts, (np.repeat([0, 1], [len(a), len(b)]), inverse), 1)
    expected_each = counts.sum(0) / 2
    rare = expected_each < 10
    table = np.concatenate([counts[:, ~rare], counts[:, rare].sum(1, keepdims=True)], axis=1)
    expected = table.sum(0, keepdims=True) * table.sum(1, keepdims=True) / table.sum()
    stat = float(((table - expected) ** 2 / expected).sum())
    return chi2_tail(stat, table.shape[1] - 1)


def test_tree_sampling_is_distributed_as_plain_sampling_and_the_test_has_power(tiny_and_heads):
    model, heads = tiny_and_heads
    tree = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0]])
    cfg = DecodeConfig(max_new_tokens=3, mode="sample", temperature=1.0, seed=21)
    plain = first_tokens(model, heads, Tree(()), cfg, seed_streams=0)
    treed = first_tokens(model, heads, tree, DecodeConfig(**{**cfg.__dict__, "seed": 99}),
                         seed_streams=N_SAMPLES)  # other seed, other streams: independent
    assert len(np.unique(plain)) > 500  # a real distribution, not a few outcomes
    assert two_sample_p(plain, treed) > 0.01
    typical = first_tokens(model, heads, tree,
                           DecodeConfig(max_new_tokens=3, mode="typical", temperature=1.0,
                                        posterior_threshold=0.3, seed=5), seed_streams=0)
    assert two_sample_p(plain, typical) < 1e-6  # a biased rule is seen
