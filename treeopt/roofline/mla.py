"""Multi-head latent attention (DeepSeek-V2/V3; :class:`MLA`: its shape) as engines that cache the
latent run it.

vLLM and SGLang cache, per token and layer, the normed latent of r = ``kv_lora_rank`` elements
and one shared RoPE key of ρ = ``qk_rope_head_dim``: r + ρ elements, against 2·H·head_dim for
plain attention. A verify step of few tokens runs the "absorbed" form: each head's no-RoPE query
(n = ``qk_nope_head_dim``) is taken into latent space through W_UK, attention runs over the
latent like multi-query attention with heads of r + ρ (scores) and r (values), and W_UV takes
each head's output back to v = ``v_head_dim``. With H heads, r' = ``q_lora_rank`` and the
notation of :mod:`roofline.model`, each layer costs:

=========  ===========  ===================  ==============================================
operator   class        FLOPs                bytes
=========  ===========  ===================  ==============================================
q_a_proj   matmul       2·T·h·r'             w·h·r' + a·T·h + a·T·r'
q_a_norm   elementwise  4·T·r'               w·r' + 2·a·T·r'
q_b_proj   matmul       2·T·r'·H(n + ρ)      w·r'·H(n + ρ) + a·T·r' + a·T·H(n + ρ)
kv_a_proj  matmul       2·T·h·(r + ρ)        w·h·(r + ρ) + a·T·h + c·T·(r + ρ) (KV written)
kv_a_norm  elementwise  4·T·r                w·r + 2·a·T·r
rope       elementwise  3·T·ρ·(H + 1)        2·a·T·ρ·(H + 1)
q_absorb   matmul       2·T·H·n·r            w·H·n·r + a·T·H·n + a·T·H·r
attn_qk    attention    2·b·H·q·K·(r + ρ)    a·T·H(r + ρ) + c·b·K·(r + ρ) (KV read)
softmax    attention    5·b·H·q·K            as plain attention
attn_pv    attention    2·b·H·q·K·r          a·T·H·r (the latent is read once, by attn_qk)
v_absorb   matmul       2·T·H·r·v            w·H·r·v + a·T·H·r + a·T·H·v
o_proj     matmul       2·T·H·v·h            w·H·v·h + a·T·H·v + a·T·h
=========  ===========  ===================  ==============================================

Without ``q_lora_rank`` the three query rows are one ``q_proj`` (h → H(n + ρ)). q_absorb and
v_absorb together read W_UK and W_UV, the two halves of ``kv_b_proj``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from treeopt.roofline.rows import Grid, Row, attention_core, elementwise, linear, norm


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3): the KV cache holds one latent of
    ``kv_lora_rank`` plus one RoPE key of ``qk_rope_head_dim`` per token and layer."""

    kv_lora_rank: int
    q_lora_rank: int | None
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int


def mla_rows(cfg: Any, g: Grid, *, eager: bool) -> Iterator[Row]:
    """The attention rows of every layer of an MLA model (``cfg.mla`` set)."""
    mla, h, heads, n = cfg.mla, cfg.hidden_size, cfg.num_heads, cfg.num_layers
    r, rope, nope, v = mla.kv_lora_rank, mla.qk_rope_head_dim, mla.qk_nope_head_dim, mla.v_head_dim
    t, a = g.t, g.a
    q_out = heads * (nope + rope)
    if mla.q_lora_rank:
        yield linear(g, "q_a_proj", h, mla.q_lora_rank, count=n)
        yield norm(g, "q_a_norm", mla.q_lora_rank, count=n)
        yield linear(g, "q_b_proj", mla.q_lora_rank, q_out, count=n)
    else:
        yield linear(g, "q_proj", h, q_out, count=n)
    yield linear(g, "kv_a_proj", h, r + rope, count=n, kv_out=True)
    yield norm(g, "kv_a_norm", r, count=n)
    yield elementwise("rope", n, 3 * t * rope * (heads + 1), a * t * rope * (heads + 1),
                      a * t * rope * (heads + 1))
    yield _per_head(g, "q_absorb", heads, nope, r, count=n)
    yield from attention_core(g, "", n, heads, g.s + g.q, qk_dim=r + rope, v_dim=r,
                              q_width=heads * (r + rope), k_read=r + rope, v_read=0, eager=eager)
    yield _per_head(g, "v_absorb", heads, r, v, count=n)
    yield linear(g, "o_proj", heads * v, h, count=n)


def _per_head(g: Grid, name: str, heads: int, n_in: int, n_out: int, *, count: int) -> Row:
    """A batched matmul: each head's n_in → n_out matrix on its own slice."""
    t = g.t
    return (name, "matmul", count, True, 2 * t * heads * n_in * n_out,
            (g.w * heads * n_in * n_out, g.a * t * heads * n_in, g.a * t * heads * n_out, 0, 0))
