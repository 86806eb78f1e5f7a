"""Predicted latency of one verify step: every operator's FLOPs and bytes, bounded by the hardware.

A verify step runs ``b`` sequences, each with ``q`` new tokens (the tree and its root) attending
to an ``s``-token KV cache. With T = b·q tokens, K = s + q keys, h = hidden size, i = intermediate
size, d_q = heads·head_dim, d_kv = KV heads·head_dim, V = vocabulary, and bytes per element
``w`` (weights), ``a`` (activations) and ``c`` (KV cache), each layer costs:

=============  ===========  =====================  ==========================================
operator       class        FLOPs                  bytes
=============  ===========  =====================  ==========================================
input_norm     elementwise  4·T·h                  w·h + 2·a·T·h
q_proj         matmul       2·T·h·d_q              w·h·d_q + a·T·h + a·T·d_q
k_proj         matmul       2·T·h·d_kv             w·h·d_kv + a·T·h + a·T·d_kv
v_proj         matmul       2·T·h·d_kv             w·h·d_kv + a·T·h + c·T·d_kv (KV written)
rope           elementwise  3·T·(d_q + d_kv)       a·T·(d_q + d_kv) + a·T·d_q + c·T·d_kv
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

and once per step: ``embedding`` (w·T·h gathered rows + a·T·h), ``final_norm`` and ``lm_head``
(2·T·h·V FLOPs, w·h·V + a·T·h + a·T·V bytes: logits for all q tokens). A matmul is 2 FLOPs per
multiply-add; RMSNorm counts 4 FLOPs per element, RoPE 3, SiLU·up 5, softmax 5 per score; the
projections of ``attention_bias`` configs add their biases. "Fused" attention (FlashAttention-like)
keeps scores on chip; "eager" writes scores, reads the mask and the scores back, writes
probabilities. Each operator takes ``max(FLOPs / peak, bytes / bandwidth) / efficiency`` seconds,
where the peak is the dtype's tensor peak for matmuls and QKᵀ/PV and the FP32 vector peak for
element-wise work; the step is the sum over operators plus a fixed overhead. Operational
intensity is FLOPs / bytes; an operator is compute-bound when FLOPs / peak ≥ bytes / bandwidth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from roofline.config import ModelConfig
from treeopt.errors import TreeoptError

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
        for flag, name in (("--dtype", dtype), ("--weight-dtype", weight), ("--kv-dtype", kv)):
            if name is not None and name not in DTYPE_BYTES:
                raise TreeoptError(f"{flag}: unknown dtype {name!r}; choose one of "
                                   f"{', '.join(DTYPE_BYTES)}")
        if dtype not in ("bf16", "fp16", "fp32"):
            raise TreeoptError(f"--dtype: the compute dtype must be bf16, fp16 or fp32, got {dtype!r}")
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
        raise TreeoptError(f"--attention: unknown kind {attention!r}; choose fused or eager")
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


def _rows(cfg: ModelConfig, p: Precision, b: Array, s: Array, q: Array, *, eager: bool):
    """(name, class, count, tensor peak?, flops, (weights, act_in, act_out, kv_read, kv_write))."""
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    dq, dkv, nh, hd = cfg.q_dim, cfg.kv_dim, cfg.num_heads, cfg.head_dim
    w, a, c = p.weight_bytes, p.activation_bytes, p.kv_bytes
    t, k, layers = b * q, s + q, cfg.num_layers
    bias = 1 if cfg.attention_bias else 0

    def linear(name: str, n_in: int, n_out: int, *, kv_out: bool = False, count: int = layers,
               has_bias: int = 0):
        out = (0, c * t * n_out) if kv_out else (a * t * n_out, 0)
        return (name, "matmul", count, True, 2 * t * n_in * n_out + has_bias * t * n_out,
                (w * (n_in * n_out + has_bias * n_out), a * t * n_in, out[0], 0, out[1]))

    def norm(name: str, count: int = layers):
        return (name, "elementwise", count, False, 4 * t * h, (w * h, a * t * h, a * t * h, 0, 0))

    def residual(name: str):
        return (name, "elementwise", layers, False, t * h, (0, 2 * a * t * h, a * t * h, 0, 0))

    scores = b * nh * q * k
    yield norm("input_norm")
    yield linear("q_proj", h, dq, has_bias=bias)
    yield linear("k_proj", h, dkv, has_bias=bias)
    yield linear("v_proj", h, dkv, kv_out=True, has_bias=bias)
    yield ("rope", "elementwise", layers, False, 3 * t * (dq + dkv),
           (0, a * t * (dq + dkv), a * t * dq, 0, c * t * dkv))
    yield ("attn_qk", "attention", layers, True, 2 * scores * hd,
           (0, a * t * dq, a * scores if eager else 0, c * b * k * dkv, 0))
    yield ("softmax", "attention", layers, False, 5 * scores,
           (0, a * (scores + b * q * k) if eager else 0, a * scores if eager else 0, 0, 0))
    yield ("attn_pv", "attention", layers, True, 2 * scores * hd,
           (0, a * scores if eager else 0, a * t * dq, c * b * k * dkv, 0))
    yield linear("o_proj", dq, h)
    yield residual("attn_residual")
    yield norm("post_norm")
    yield linear("gate_proj", h, i)
    yield linear("up_proj", h, i)
    yield ("act_mul", "elementwise", layers, False, 5 * t * i, (0, 2 * a * t * i, a * t * i, 0, 0))
    yield linear("down_proj", i, h)
    yield residual("mlp_residual")
    yield ("embedding", "elementwise", 1, False, 0 * t, (w * t * h, 0, a * t * h, 0, 0))
    yield norm("final_norm", count=1)
    yield linear("lm_head", h, v, count=1)
