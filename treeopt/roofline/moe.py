"""Mixture-of-experts layers (their shape: :class:`MoE`): a step reads the weights of every
distinct expert its tokens route to.

With E routed experts, top-k routing and T = b·q tokens in the step, routing each token to k
experts uniformly at random touches on average D(T) = E·(1 − (1 − k/E)^T) distinct experts
(:func:`expected_experts`): k at T = 1, tending to E as T grows. A dense model reads its MLP
weights once whatever T is; an MoE layer reads D(T)/k times its single-token share, so the
weight bytes of a verify step grow with the tree as they do on a real MoE model, and trees that
pay on a dense model of the same active size pay less, or not at all, on a sparse one. With
m = the expert width, S = the shared experts' total width, each MoE layer costs:

================  ===========  ====================  =======================================
operator          class        FLOPs                 bytes
================  ===========  ====================  =======================================
router            matmul       2·T·h·E               w·h·E + a·T·h + a·T·E
expert_gate_proj  matmul       2·T·k·h·m             w·D(T)·h·m + a·T·k·h + a·T·k·m
expert_up_proj    matmul       2·T·k·h·m             w·D(T)·h·m + a·T·k·h + a·T·k·m
expert_act_mul    elementwise  5·T·k·m               3·a·T·k·m
expert_down_proj  matmul       2·T·k·m·h             w·D(T)·m·h + a·T·k·m + a·T·k·h
expert_combine    elementwise  2·T·k·h               a·T·k·h + a·T·h
shared_*          (as the dense gate/up/act/down rows, of width S; only when S > 0)
================  ===========  ====================  =======================================

The router and experts of ``bias`` configs (GPT-OSS) add their biases (read for the D(T)
experts). Routing is taken as uniform and independent per token: real routers are skewed and
tokens of one sequence share experts more often, so D(T) is an upper bound on the experts read
(group-limited routing, as DeepSeek-V3's, does not change each expert's marginal k/E).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from treeopt.errors import TreeoptError
from treeopt.roofline.rows import Grid, Row, elementwise, gated_mlp, linear


@dataclass(frozen=True)
class MoE:
    """Routed experts: ``experts_per_token`` of ``num_experts`` gated MLPs of width
    ``intermediate_size`` per token, plus always-on shared experts of total width
    ``shared_intermediate_size``, in the layers listed in ``layers``."""

    num_experts: int
    experts_per_token: int
    intermediate_size: int
    layers: tuple[int, ...]
    shared_intermediate_size: int = 0
    bias: bool = False  # the router and the experts' linears have biases (gpt_oss)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(self.layers))
        if not 1 <= self.experts_per_token <= self.num_experts or self.intermediate_size < 1:
            raise TreeoptError(f"MoE: need 1 ≤ experts per token ({self.experts_per_token}) ≤ "
                               f"experts ({self.num_experts}) and a positive expert width")


def expected_experts(experts: int, top_k: int, tokens: Any) -> Any:
    """Expected distinct experts that ``tokens`` tokens routed top-``top_k`` of ``experts`` touch.

    >>> expected_experts(8, 2, 1), expected_experts(8, 2, 2), expected_experts(8, 2, 3)
    (2.0, 3.5, 4.625)
    >>> round(expected_experts(128, 8, 64), 2)  # Qwen3-30B-A3B: 64 tokens read 126 of 128
    125.94
    """
    value = experts * (1.0 - (1.0 - top_k / experts) ** np.asarray(tokens, dtype=np.float64))
    return float(value) if np.ndim(value) == 0 else value


def moe_rows(moe: MoE, g: Grid, h: int) -> Iterator[Row]:
    """The rows of one MoE layer's MLP (count: the MoE layers)."""
    n, e, k, m = len(moe.layers), moe.num_experts, moe.experts_per_token, moe.intermediate_size
    t, a = g.t, g.a
    routed = t * k
    yield linear(g, "router", h, e, count=n, bias=moe.bias)
    yield from gated_mlp(g, "expert_", h, m, count=n, bias=moe.bias, tokens=routed,
                         copies=expected_experts(e, k, t))
    yield elementwise("expert_combine", n, 2 * routed * h, a * routed * h, a * t * h)
    if moe.shared_intermediate_size:
        yield from gated_mlp(g, "shared_", h, moe.shared_intermediate_size, count=n)
