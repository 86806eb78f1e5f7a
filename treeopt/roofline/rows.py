"""The operator rows the roofline tables are written in: FLOPs and bytes of one instance.

A row is ``(name, class, count, tensor peak?, flops, (weights, act_in, act_out, kv_read,
kv_write))``; flops and bytes broadcast over the swept grid ``b [B,1,1] × s [1,S,1] × q [1,1,Q]``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]
Row = tuple[str, str, float, bool, Any, tuple[Any, Any, Any, Any, Any]]


@dataclass(frozen=True, eq=False)
class Grid:
    """The swept batch ``b``, context ``s`` and tree tokens ``q``, and bytes per element."""

    b: Array  # [B, 1, 1]
    s: Array  # [1, S, 1]
    q: Array  # [1, 1, Q]
    w: float  # weights
    a: float  # activations
    c: float  # KV cache

    @property
    def t(self) -> Array:
        """Tokens in the step: b·q."""
        return self.b * self.q


def linear(g: Grid, name: str, n_in: int, n_out: int, *, count: float, bias: bool = False,
           kv_out: bool = False, tokens: Any = None, copies: Any = 1) -> Row:
    """A matmul of ``tokens`` rows (default b·q) by ``copies`` weight matrices n_in × n_out
    (copies > 1: the distinct experts the rows route to); its output goes to the KV cache when
    ``kv_out``."""
    t = g.t if tokens is None else tokens
    out = (0, g.c * t * n_out) if kv_out else (g.a * t * n_out, 0)
    return (name, "matmul", count, True, 2 * t * n_in * n_out + (t * n_out if bias else 0),
            (g.w * copies * (n_in * n_out + (n_out if bias else 0)), g.a * t * n_in, out[0], 0,
             out[1]))


def norm(g: Grid, name: str, width: int, *, count: float, tokens: Any = None) -> Row:
    """RMSNorm/LayerNorm over ``width``: 4 FLOPs an element, the weight read once."""
    t = g.t if tokens is None else tokens
    return (name, "elementwise", count, False, 4 * t * width,
            (g.w * width, g.a * t * width, g.a * t * width, 0, 0))


def elementwise(name: str, count: float, flops: Any, read: Any, written: Any) -> Row:
    """Vector work on activations: ``read`` and ``written`` bytes."""
    return (name, "elementwise", count, False, flops, (0, read, written, 0, 0))


def gated_mlp(g: Grid, prefix: str, h: int, i: int, *, count: float, bias: bool = False,
              tokens: Any = None, copies: Any = 1) -> list[Row]:
    """gate_proj, up_proj (h → i), act_mul (SiLU or GELU times up: 5 FLOPs an element),
    down_proj (i → h)."""
    t = g.t if tokens is None else tokens
    kw = {"count": count, "bias": bias, "tokens": tokens, "copies": copies}
    return [linear(g, f"{prefix}gate_proj", h, i, **kw), linear(g, f"{prefix}up_proj", h, i, **kw),
            elementwise(f"{prefix}act_mul", count, 5 * t * i, 2 * g.a * t * i, g.a * t * i),
            linear(g, f"{prefix}down_proj", i, h, **kw)]


def attention_core(g: Grid, tag: str, count: int, heads: int, k: Any, *, qk_dim: int,
                   v_dim: int, q_width: int, k_read: int, v_read: int, eager: bool
                   ) -> Iterator[Row]:
    """QKᵀ, softmax and PV of ``heads`` heads over K keys (``k_read`` and ``v_read`` cached
    elements per key; queries of ``q_width`` in, outputs of heads·v_dim out)."""
    b, q, t, a, c = g.b, g.q, g.t, g.a, g.c
    scores = b * heads * q * k
    yield (f"attn_qk{tag}", "attention", count, True, 2 * scores * qk_dim,
           (0, a * t * q_width, a * scores if eager else 0, c * b * k * k_read, 0))
    yield (f"softmax{tag}", "attention", count, False, 5 * scores,
           (0, a * (scores + b * q * k) if eager else 0, a * scores if eager else 0, 0, 0))
    yield (f"attn_pv{tag}", "attention", count, True, 2 * scores * v_dim,
           (0, a * scores if eager else 0, a * t * heads * v_dim, c * b * k * v_read, 0))
