"""treeopt's exact attention: the same attention as SDPA, a node's result independent of the tree
verified with it (bit for bit, in bfloat16), and so 16-bit tree decoding that is lossless."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from conftest import tiny_llama  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from treeopt import Tree, TreeoptError  # noqa: E402
from treeopt.decoding.attention import EXACT, attention_for, exact_attention, register  # noqa: E402
from treeopt.decoding.loading import ModelSpec, load_model  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, autoregressive, decode  # noqa: E402
from treeopt.decoding.models import attention_of  # noqa: E402
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig  # noqa: E402

MEDUSA_63 = Tree.from_choices([[i] for i in range(4)] + [[i, j] for i in range(4)
                                                          for j in range(4)]
                              + [[0, j, k] for j in range(3) for k in range(3)])
CFG = DecodeConfig(max_new_tokens=64)


def sdpa(q, k, v, visible):
    """PyTorch's attention with grouped-query heads repeated, as ``[b, q, h, d]``."""
    groups = q.shape[1] // k.shape[1]
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), attn_mask=visible)
    return out.transpose(1, 2)


def test_exact_attention_is_sdpa_for_every_mask_form():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 3, 16, generator=gen)
    k, v = torch.randn(2, 2, 7, 16, generator=gen), torch.randn(2, 2, 7, 16, generator=gen)
    visible = torch.rand(2, 1, 3, 7, generator=gen) < 0.6
    visible[..., 0] = True  # every query sees at least one key
    additive = torch.where(visible, 0.0, torch.finfo(torch.float32).min)
    want = sdpa(q, k, v, visible)
    for mask in (visible, additive):
        got, weights = exact_attention(None, q, k, v, mask, scaling=16 ** -0.5)
        assert weights is None and got.shape == (2, 3, 4, 16)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)
    causal, _ = exact_attention(None, q, k, v, None)  # the last 3 of 7 keys are the queries
    torch.testing.assert_close(causal, sdpa(q, k, v, torch.ones(3, 7, dtype=torch.bool).tril(4)),
                               atol=1e-6, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.lists(st.integers(0, 10**6), min_size=1, max_size=12),
       st.integers(0, 2**31 - 1))
def test_a_nodes_attention_does_not_depend_on_the_tree_verified_with_it(prefix, picks, seed):
    """Each node of a random tree, verified with all the others (siblings masked, ancestors in
    tree order among them), gets bit for bit what autoregressive decoding computes for it: one
    query after the prefix and its ancestors in order."""
    parents = [-1 if i == 0 else pick % i for i, pick in enumerate(picks)]  # node 0 is the root
    n = len(parents)
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 4, n, 32, generator=gen).bfloat16()
    k = torch.randn(1, 2, prefix + n, 32, generator=gen).bfloat16()
    v = torch.randn(1, 2, prefix + n, 32, generator=gen).bfloat16()
    path = []
    for i in range(n):
        path.append((path[parents[i]] if parents[i] >= 0 else []) + [i])
    visible = torch.zeros(1, 1, n, prefix + n, dtype=torch.bool)
    visible[..., :prefix] = True
    for i, nodes in enumerate(path):
        visible[0, 0, i, [prefix + j for j in nodes]] = True
    tree, _ = exact_attention(None, q, k, v, visible)
    for i, nodes in enumerate(path):
        keys = list(range(prefix)) + [prefix + j for j in nodes]  # the sequence as decoded
        alone, _ = exact_attention(None, q[:, :, i:i + 1], k[:, :, keys], v[:, :, keys], None)
        assert torch.equal(tree[:, i], alone[:, 0])


def flat_bf16(kind: str, attention: str):
    """A random tiny Llama in bfloat16 — flat logits, so 16-bit ties and near-ties are common —
    with untrained heads of ``kind`` (each a copy of the LM head: they propose the model's own
    ranking, and some of it is accepted), and 16 random prompts."""
    model = tiny_llama(vocab=256, seed=3)
    cfg = HeadsConfig(kind=kind, num_heads=4, hidden_size=64, vocab_size=256)
    heads = build_heads(cfg, lm_head=model.lm_head, embeddings=model.model.embed_tokens)
    model.to(torch.bfloat16).set_attn_implementation(attention)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 256, (5,), generator=gen).tolist() for _ in range(16)]
    return model, heads.to(torch.bfloat16).eval(), prompts


def tree_decoded(model, heads, prompts, b):
    """Every prompt's tree decoding, ``b`` at a time, and the runs of the groups."""
    runs = [decode(model, heads, MEDUSA_63, prompts[i:i + b], config=CFG)
            for i in range(0, len(prompts), b)]
    return [t for run in runs for t in run.tokens], runs


@pytest.fixture(scope="module")
def exact_reference():
    """``flat_bf16``'s prompts decoded autoregressively, each alone, by its model with exact
    attention (one model for either kind of heads: decoded once for the module)."""
    model, _, prompts = flat_bf16("medusa", register())
    return [autoregressive(model, p, config=CFG).tokens for p in prompts]


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
@pytest.mark.parametrize("b", [1, 8])
def test_bfloat16_tree_decoding_is_lossless_with_exact_attention(kind, b, exact_reference):
    model, heads, prompts = flat_bf16(kind, register())
    got, runs = tree_decoded(model, heads, prompts, b)
    assert sum(g != w for g, w in zip(got, exact_reference, strict=True)) == 0
    assert max(runs[0].stats.accept_lengths) >= 2  # heads' tokens were accepted, not the root only


def test_bfloat16_tree_decoding_with_sdpa_is_not():
    """Why exact attention exists: the same check with PyTorch's SDPA (torch 2.13, CPU) finds
    prompts that decode differently — this test is one that can fail."""
    model, heads, prompts = flat_bf16("medusa", "sdpa")
    got, _ = tree_decoded(model, heads, prompts, 8)
    assert any(g != autoregressive(model, p, config=CFG).tokens  # stops at the first found
               for g, p in zip(got, prompts, strict=True))


def test_auto_attention_is_exact_in_16_bits_only(tiny_model_dir):
    def loaded(**kw):
        return attention_of(load_model(ModelSpec(path=str(tiny_model_dir), **kw))[0])

    assert loaded(dtype="bfloat16") == EXACT == loaded(dtype="float16")
    assert loaded(dtype="float32") == "sdpa"
    assert loaded(dtype="float32", attention="exact") == EXACT
    assert loaded(dtype="bfloat16", attention="eager") == "eager"
    with pytest.raises(TreeoptError, match="^attention 'flash' is unknown"):
        attention_for("flash", torch.float32)


def test_exact_attention_refuses_dropout():
    x = torch.zeros(1, 1, 1, 4)
    with pytest.raises(ValueError, match="dropout must be 0"):
        exact_attention(None, x, x, x, None, dropout=0.1)
