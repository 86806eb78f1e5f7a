"""EAGLE's decoder layer: a Llama decoder layer (RoPE attention, SwiGLU MLP) whose keys and
values are arguments, never state, and the rotary embedding it applies; and
:class:`EagleNetwork`, what the teacher-forced chains (:mod:`~treeopt.drafters.eagle_chains`),
the live cache (:mod:`~treeopt.drafters.eagle_cache`) and dynamic growth
(:mod:`~treeopt.drafters.eagle_growth`) read of an EAGLE drafter."""

from __future__ import annotations

import functools
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.registry.drafter_configs import HeadsConfig

KV = tuple[torch.Tensor, torch.Tensor]


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding (the rotate-half form Llama uses) of ``x`` ``[b, h, m, hd]``
    at ``positions`` ``[b, m]``."""
    half = x.shape[-1] // 2
    angle = positions[:, None, :, None].float() * _frequencies(half, theta, str(x.device))
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


@functools.lru_cache(maxsize=16)
def _frequencies(half: int, theta: float, device: str) -> torch.Tensor:
    """RoPE's inverse frequencies ``[half]`` in float32, made once per shape and device."""
    return theta ** (-torch.arange(half, device=device, dtype=torch.float32) / half)


class DecoderLayer(nn.Module):
    """A Llama decoder layer whose keys and values are arguments, never state."""

    def __init__(self, cfg: HeadsConfig, *, first: bool, width: int = 1) -> None:
        """``first``: no input norm (EAGLE's first layer); ``width``: entries are ``width``
        hidden sizes wide (EAGLE-3's layer reads two)."""
        super().__init__()
        d, h, kvh = cfg.hidden_size, cfg.attention_heads, cfg.kv_heads or cfg.attention_heads
        self.d, self.heads, self.kv_heads, self.head_dim = d, h, kvh, d // h
        self.theta = cfg.rope_theta
        self.input_layernorm = None if first else nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.q_proj = nn.Linear(width * d, h * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width * d, kvh * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width * d, kvh * self.head_dim, bias=False)
        self.o_proj = nn.Linear(h * self.head_dim, d, bias=False)
        self.post_attention_layernorm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        inner = cfg.intermediate_size or 2 * d
        self.gate_proj = nn.Linear(d, inner, bias=False)
        self.up_proj = nn.Linear(d, inner, bias=False)
        self.down_proj = nn.Linear(inner, d, bias=False)

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        """What attention reads of entries ``x``."""
        return x if self.input_layernorm is None else self.input_layernorm(x)

    def qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, KV]:
        """Queries ``[b, h, m, hd]`` and keys/values ``[b, kvh, m, hd]`` of entries ``x``."""
        b, m, _ = x.shape
        y = self.normed(x)
        q = self.q_proj(y).view(b, m, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(y).view(b, m, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(y).view(b, m, self.kv_heads, self.head_dim).transpose(1, 2)
        return rope(q, positions, self.theta), (rope(k, positions, self.theta), v)

    def residual(self, x: torch.Tensor) -> torch.Tensor:
        """What the attention output is added to."""
        return x

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The layer's output from its input ``x`` and the attention output ``[b, h, m, hd]``."""
        b, _, m, _ = attended.shape
        x = self.residual(x) + self.o_proj(attended.transpose(1, 2).reshape(b, m, -1))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))

    def expand(self, kv: torch.Tensor) -> torch.Tensor:
        """Grouped keys or values ``[b, kvh, …]`` repeated for every query head."""
        return kv.repeat_interleave(self.heads // self.kv_heads, dim=1)


class EagleNetwork(Protocol):
    """What the chains, the cache and dynamic growth read of an EAGLE drafter: ``fc`` (whose
    weight sets the cache's dtype and device), its :class:`DecoderLayer` s, what an entry is
    and how predicted features are scored."""

    fc: nn.Linear
    layers: nn.ModuleList

    def entries(self, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Layer inputs ``[b, m, ·]`` of tokens ``[b, m]`` beside features ``[b, m, ·]``."""
        ...

    def logits(self, g: torch.Tensor) -> torch.Tensor:
        """Candidates' logits ``[..., V]`` of predicted features ``g`` ``[..., d]``."""
        ...
