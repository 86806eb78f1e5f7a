"""Predicted latency of one verify step: every operator's FLOPs and bytes, bounded by the hardware.

A verify step runs ``b`` sequences, each with ``q`` new tokens (the tree and its root) attending
to an ``s``-token KV cache. With T = b·q tokens, h = hidden size, i = intermediate size,
d_q = heads·head_dim, d_kv = KV heads·head_dim, V = vocabulary, and bytes per element ``w``
(weights), ``a`` (activations) and ``c`` (KV cache), each layer costs:

=============  ===========  =====================  ==========================================
operator       class        FLOPs                  bytes
=============  ===========  =====================  ==========================================
input_norm     elementwise  4·T·h                  w·h + 2·a·T·h
q_proj         matmul       2·T·h·d_q              w·h·d_q + a·T·h + a·T·d_q
k_proj         matmul       2·T·h·d_kv             w·h·d_kv + a·T·h + a·T·d_kv
v_proj         matmul       2·T·h·d_kv             w·h·d_kv + a·T·h + c·T·d_kv (KV written)
qk_norm        elementwise  4·T·(d_q + d_kv)       2·w·head_dim + 2·a·T·(d_q + d_kv)
rope           elementwise  3·r·T·(d_q + d_kv)     a·T·(d_q + d_kv) + a·T·d_q + c·T·d_kv
attn_qk        attention    2·b·H·q·K·head_dim     a·T·d_q + c·b·K·d_kv (KV read)
softmax        attention    5·b·H·q·K              0 fused; eager: a·b·q·K·(2H + 1)
attn_pv        attention    2·b·H·q·K·head_dim     c·b·K·d_kv + a·T·d_q
o_proj         matmul       2·T·d_q·h              w·d_q·h + a·T·d_q + a·T·h
attn_residual  elementwise  T·h                    3·a·T·h
post_norm      elementwise  4·T·h                  w·h + 2·a·T·h
gate_proj      matmul       2·T·h·i                w·h·i + a·T·h + a·T·i
up_proj        matmul       2·T·h·i                w·h·i + a·T·h + a·T·i
act_mul        elementwise  5·T·i                  3·a·T·i
down_proj      matmul       2·T·i·h                w·i·h + a·T·i + a·T·h
mlp_residual   elementwise  T·h                    3·a·T·h
=============  ===========  =====================  ==========================================

K = s + q keys on full-attention layers; a layer of sliding window W (or attention chunk C) reads
at most W (C) cached keys, K = min(s, W) + q, and its attention rows are named by the kind and
window (``attn_qk[sliding_attention 1024]``), one row per kind with the count of its layers (a
chunk's worst case: a query at the end of its chunk). ``qk_norm`` is there for families that norm
queries and keys (Qwen3, Gemma 3, OLMo 3, Llama 4); ``rope`` rotates a share r of each head
(``partial_rotary_factor``; no row and k_proj writes the cache when positions are learned, gpt2).
Sandwich-norm families (Gemma 2/3) add ``pre_mlp_norm`` and ``post_mlp_norm``; a parallel
residual (GPT-NeoX, Cohere 2) has no ``attn_residual`` and a ``mlp_residual`` adding three
tensors (2·T·h FLOPs, 4·a·T·h bytes), and Cohere 2's one norm has no ``post_norm``. A non-gated
MLP (gpt2, GPT-NeoX) is ``up_proj``, ``act`` (8·T·i FLOPs, 2·a·T·i bytes), ``down_proj``, with
biases. MLA layers replace q_proj … attn_pv by :mod:`roofline.mla`'s rows; the MLP of an MoE
layer is :mod:`roofline.moe`'s rows (their counts: MoE layers; the dense rows': the others).

Once per step: ``embedding`` (w·T·h gathered rows + a·T·h), a learned ``position_embedding``
(T·h FLOPs, w·T·h + 2·a·T·h bytes), ``final_norm`` and ``lm_head`` (2·T·h·V FLOPs,
w·h·V + a·T·h + a·T·V bytes: logits for all q tokens; tied embeddings read the same bytes).
A matmul is 2 FLOPs per multiply-add; RMSNorm counts 4 FLOPs per element, RoPE 3, SiLU·up 5,
softmax 5 per score; the projections of ``attention_bias`` configs add their biases. "Fused"
attention (FlashAttention-like) keeps scores on chip; "eager" writes scores, reads the mask and
the scores back, writes probabilities. Each operator takes
``max(FLOPs / peak, bytes / bandwidth) / efficiency`` seconds, where the peak is the dtype's
tensor peak for matmuls and QKᵀ/PV and the FP32 vector peak for element-wise work; the step is
the sum over operators plus a fixed overhead. Operational intensity is FLOPs / bytes; an operator
is compute-bound when FLOPs / peak ≥ bytes / bandwidth.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from treeopt.errors import FieldError, TreeoptError
from treeopt.roofline.config import ModelConfig
from treeopt.roofline.mla import mla_rows
from treeopt.roofline.moe import moe_rows
from treeopt.roofline.rows import Grid, Row, attention_core, elementwise, gated_mlp, linear, norm

ROOFLINE_FORMAT = "treeopt.roofline/1"
OP_CLASSES = ("matmul", "attention", "elementwise")
BYTE_KINDS = ("weights", "act_in", "act_out", "kv_read", "kv_write")
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
ATTENTION_KINDS = ("fused", "eager")
Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Precision:
    """Compute dtype and bytes per element of weights, activations and KV cache.

    >>> Precision.from_dtypes("bf16", kv="fp8")
    Precision(compute='bf16', weight_bytes=2, activation_bytes=2, kv_bytes=1)
    """

    compute: str = "bf16"
    weight_bytes: float = 2
    activation_bytes: float = 2
    kv_bytes: float = 2

    @classmethod
    def from_dtypes(cls, dtype: str = "bf16", *, weight: str | None = None,
                    kv: str | None = None) -> Precision:
        for field, name in (("dtype", dtype), ("weight_dtype", weight), ("kv_dtype", kv)):
            if name is not None and name not in DTYPE_BYTES:
                raise FieldError(field, f"{{{field}}}: unknown dtype {name!r}; choose one of "
                                 f"{', '.join(DTYPE_BYTES)}", inline=True)
        if dtype not in ("bf16", "fp16", "fp32"):
            raise FieldError("dtype", f"must be bf16, fp16 or fp32 to compute in, got {dtype!r}")
        return cls(dtype, DTYPE_BYTES[weight or dtype], DTYPE_BYTES[dtype], DTYPE_BYTES[kv or dtype])


@dataclass(frozen=True)
class Efficiency:
    """Achieved fraction of the roofline per operator class, and a fixed per-step overhead.

    Time of an operator = roofline time / efficiency of its class; 1 is the pure roofline.
    """

    matmul: float = 1.0
    attention: float = 1.0
    elementwise: float = 1.0
    overhead_s: float = 0.0

    def __post_init__(self) -> None:
        for name in OP_CLASSES:
            if not 0 < getattr(self, name) <= 100:
                raise TreeoptError(f"efficiency {name} must be in (0, 100], got {getattr(self, name)}")
        if self.overhead_s < 0:
            raise TreeoptError(f"efficiency overhead_s must be ≥ 0, got {self.overhead_s}")

    def factors(self) -> Array:
        return np.array([getattr(self, c) for c in OP_CLASSES], dtype=np.float64)

    def to_json(self) -> dict[str, float]:
        return asdict(self)


BF16 = Precision()
PURE_ROOFLINE = Efficiency()


@dataclass(frozen=True)
class Operators:
    """FLOPs and bytes of every operator over a (batch, context, tokens) grid (one instance)."""

    names: tuple[str, ...]
    classes: npt.NDArray[np.int64]  # [ops] index into OP_CLASSES
    counts: Array  # [ops] instances per step (layers, or 1)
    tensor: npt.NDArray[np.bool_]  # [ops] runs at the tensor (matmul) peak
    flops: Array  # [ops, B, S, Q]
    bytes: Array  # [ops, kinds, B, S, Q]


def operators(cfg: ModelConfig, precision: Precision, batch: Sequence[int],
              context: Sequence[int], tokens: Sequence[int], *, attention: str = "fused",
              ) -> Operators:
    """Per-operator FLOPs and bytes (per instance) for every (b, s, q) of the grid."""
    if attention not in ATTENTION_KINDS:
        raise FieldError("attention", f"{attention!r} is unknown; choose fused or eager")
    b = np.asarray(batch, dtype=np.float64)[:, None, None]
    s = np.asarray(context, dtype=np.float64)[None, :, None]
    q = np.asarray(tokens, dtype=np.float64)[None, None, :]
    shape = (b.shape[0], s.shape[1], q.shape[2])
    rows = list(_rows(cfg, precision, b, s, q, eager=attention == "eager"))
    zero = np.zeros(shape)
    return Operators(
        names=tuple(r[0] for r in rows),
        classes=np.array([OP_CLASSES.index(r[1]) for r in rows], dtype=np.int64),
        counts=np.array([r[2] for r in rows], dtype=np.float64),
        tensor=np.array([r[3] for r in rows], dtype=bool),
        flops=np.stack([zero + r[4] for r in rows]),
        bytes=np.stack([np.stack([zero + x for x in r[5]]) for r in rows]),
    )


def _rows(cfg: ModelConfig, p: Precision, b: Array, s: Array, q: Array, *,
          eager: bool) -> Iterator[Row]:
    """Every operator row of one step (see the table above)."""
    g = Grid(b, s, q, p.weight_bytes, p.activation_bytes, p.kv_bytes)
    h, v, t, n, a = cfg.hidden_size, cfg.vocab_size, g.t, cfg.num_layers, g.a
    yield norm(g, "input_norm", h, count=n)
    if cfg.mla is not None:
        yield from mla_rows(cfg, g, eager=eager)
    else:
        yield from _attention(cfg, g, eager=eager)
    if not cfg.parallel_residual:
        yield elementwise("attn_residual", n, t * h, 2 * a * t * h, a * t * h)
    if cfg.norms_per_layer > 1:
        yield norm(g, "post_norm", h, count=n)
    if cfg.norms_per_layer > 3:
        yield norm(g, "pre_mlp_norm", h, count=n)
    dense = cfg.dense_layers
    if dense and cfg.gated_mlp:
        yield from gated_mlp(g, "", h, cfg.intermediate_size, count=dense, bias=cfg.mlp_bias)
    elif dense:
        i = cfg.intermediate_size
        yield linear(g, "up_proj", h, i, count=dense, bias=cfg.mlp_bias)
        yield elementwise("act", dense, 8 * t * i, a * t * i, a * t * i)
        yield linear(g, "down_proj", i, h, count=dense, bias=cfg.mlp_bias)
    if cfg.moe is not None:
        yield from moe_rows(cfg.moe, g, h)
    if cfg.norms_per_layer > 3:
        yield norm(g, "post_mlp_norm", h, count=n)
    added = 3 if cfg.parallel_residual else 2
    yield elementwise("mlp_residual", n, (added - 1) * t * h, added * a * t * h, a * t * h)
    yield ("embedding", "elementwise", 1, False, 0 * t, (g.w * t * h, 0, a * t * h, 0, 0))
    if cfg.position_embeddings:
        yield ("position_embedding", "elementwise", 1, False, t * h,
               (g.w * t * h, a * t * h, a * t * h, 0, 0))
    yield norm(g, "final_norm", h, count=1)
    yield linear(g, "lm_head", h, v, count=1)


def _attention(cfg: ModelConfig, g: Grid, *, eager: bool) -> Iterator[Row]:
    """Projections, q/k norms, RoPE and, per attention kind, QKᵀ, softmax and PV."""
    h, dq, dkv, hd, n = cfg.hidden_size, cfg.q_dim, cfg.kv_dim, cfg.head_dim, cfg.num_layers
    t, a, c, bias = g.t, g.a, g.c, cfg.attention_bias
    rope = cfg.rotary_fraction > 0
    yield linear(g, "q_proj", h, dq, count=n, bias=bias)
    yield linear(g, "k_proj", h, dkv, count=n, bias=bias, kv_out=not rope)
    yield linear(g, "v_proj", h, dkv, count=n, bias=bias, kv_out=True)
    if cfg.qk_norm:
        yield ("qk_norm", "elementwise", n, False, 4 * t * (dq + dkv),
               (2 * g.w * hd, a * t * (dq + dkv), a * t * (dq + dkv), 0, 0))
    if rope:
        yield ("rope", "elementwise", n, False, 3 * cfg.rotary_fraction * t * (dq + dkv),
               (0, a * t * (dq + dkv), a * t * dq, 0, c * t * dkv))
    for kind, layers in cfg.attention_groups().items():
        window = cfg.window(kind)
        k = g.s + g.q if window is None else np.minimum(g.s, window) + g.q
        tag = "" if window is None else f"[{kind} {window}]"
        yield from attention_core(g, tag, layers, cfg.num_heads, k, qk_dim=hd, v_dim=hd,
                                  q_width=dq, k_read=dkv, v_read=dkv, eager=eager)
    yield linear(g, "o_proj", dq, h, count=n)

