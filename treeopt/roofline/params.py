"""Parameter counts and KV-cache bytes of a model config, to check presets against model cards.

Counted: embeddings (once when tied), every linear's weights and the biases the family has,
norm weights (q/k norms as one head_dim vector each), routers and experts, MLA's projections and
norms, a learned position table. Not counted: norm biases, GPT-OSS's attention sinks and o_proj
biases, DeepSeek-V3's expert-bias correction and MTP module — each under 0.01% of any preset.
"""

from __future__ import annotations

from dataclasses import dataclass

from treeopt.roofline.config import ModelConfig
from treeopt.roofline.model import BF16, Precision


@dataclass(frozen=True)
class ParameterCount:
    """Total parameters, those one token uses (``active``: the routed experts it picks, the
    shared ones, everything else), and the input embedding's share of both."""

    total: int
    active: int
    embedding: int


def parameter_count(cfg: ModelConfig) -> ParameterCount:
    """Parameters of ``cfg``.

    >>> from treeopt.roofline import preset
    >>> preset_count = parameter_count(preset("llama-3.1-8b"))
    >>> preset_count.total, preset_count.active == preset_count.total
    (8030261248, True)
    """
    h, n, v = cfg.hidden_size, cfg.num_layers, cfg.vocab_size
    embedding = v * h
    once = embedding + (0 if cfg.tie_embeddings else v * h) + h + cfg.position_embeddings * h
    per_layer = _attention(cfg) + cfg.norms_per_layer * h
    dense = cfg.dense_layers * _mlp(h, cfg.intermediate_size, gated=cfg.gated_mlp,
                                    bias=cfg.mlp_bias)
    total = active = once + n * per_layer + dense
    if cfg.moe is not None:
        moe, layers = cfg.moe, len(cfg.moe.layers)
        expert = _mlp(h, moe.intermediate_size, gated=True, bias=moe.bias)
        always = h * moe.num_experts + (moe.num_experts if moe.bias else 0) + _mlp(
            h, moe.shared_intermediate_size, gated=True, bias=False)
        total += layers * (always + moe.num_experts * expert)
        active += layers * (always + moe.experts_per_token * expert)
    return ParameterCount(total, active, embedding)


def _attention(cfg: ModelConfig) -> int:
    h, heads = cfg.hidden_size, cfg.num_heads
    if cfg.mla is not None:
        m = cfg.mla
        q_out = heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        q = (h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * q_out if m.q_lora_rank
             else h * q_out)
        kv = (h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
              + m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim))
        return q + kv + heads * m.v_head_dim * h
    dq, dkv = cfg.q_dim, cfg.kv_dim
    bias = dq + 2 * dkv if cfg.attention_bias else 0
    return h * (dq + 2 * dkv) + bias + dq * h + (2 * cfg.head_dim if cfg.qk_norm else 0)


def _mlp(h: int, i: int, *, gated: bool, bias: bool) -> int:
    if i == 0:
        return 0
    mats = 3 if gated else 2
    return mats * h * i + ((mats - 1) * i + h if bias else 0)


def kv_bytes_per_token(cfg: ModelConfig, precision: Precision = BF16) -> float:
    """KV-cache bytes one token adds at every layer (MLA: the latent and the RoPE key).

    >>> from treeopt.roofline import preset
    >>> kv_bytes_per_token(preset("llama-3.1-8b")), kv_bytes_per_token(preset("deepseek-v3"))
    (131072, 70272)
    """
    return cfg.num_layers * _per_layer(cfg) * precision.kv_bytes


def _per_layer(cfg: ModelConfig) -> int:
    if cfg.mla is not None:
        return cfg.mla.kv_lora_rank + cfg.mla.qk_rope_head_dim
    return 2 * cfg.kv_dim
