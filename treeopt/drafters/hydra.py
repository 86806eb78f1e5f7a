"""Hydra heads (Ankner et al., 2024): K sequentially dependent heads.

Head k reads ``h_t`` and the k+1 tokens on its path:
``z = h + SiLU(W_in [h; e(x_{t+1}); …; e(x_{t+1+k})])``, then ``num_layers - 1`` residual
blocks, then the vocabulary projection (:meth:`HydraHeads.head_logits`). Hydra++ prefix attention
(``prefix_attention``): one extra causal attention block over the base hidden states whose output
replaces ``h_t`` (:meth:`HydraHeads.features`). Drafting runs one call per tree depth, on the nodes
expanded there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.decoding.token_order import top_candidates
from treeopt.drafters.heads import DraftHeads, PrefixCache, ResBlock
from treeopt.errors import TreeoptError
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan


class PrefixAttention(nn.Module):
    """Hydra++'s extra decoder layer: pre-norm causal self-attention and MLP over base hiddens.

    It has no position encoding of its own (the base hiddens carry position); its key/value
    cache is an argument and a return value, never state.
    """

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.norm1 = nn.RMSNorm(hidden_size, eps=1e-6)
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size, bias=False)
        self.out = nn.Linear(hidden_size, hidden_size, bias=False)
        self.norm2 = nn.RMSNorm(hidden_size, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, 2 * hidden_size), nn.SiLU(),
                                 nn.Linear(2 * hidden_size, hidden_size))
        for lin in (self.out, self.mlp[2]):  # start as the identity
            nn.init.zeros_(lin.weight)
        nn.init.zeros_(self.mlp[2].bias)

    def forward(self, x: torch.Tensor, cache: PrefixCache = None,
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``x`` ``[b, t, d]`` follows the cached ``[b, heads, past, d/heads]`` keys and values."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        past = k.shape[2] - t
        visible = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(past)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)  # [b, heads, t, d/heads]
        x = x + self.out(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x)), (k, v)


@dataclass(frozen=True, eq=False)
class PrefixSlots:
    """The prefix layer's live keys and values, ``[2, b, heads, capacity, head_dim]``, and how
    many tokens each row holds; the last slot is scratch (padding of ragged rows writes there)."""

    kv: torch.Tensor
    lengths: torch.Tensor  # [b]

    def take_row(self, row: int, new: PrefixSlots) -> None:
        """Row ``row`` becomes ``new``'s one row (its keys, values and length), in place."""
        self.kv[:, row] = new.kv[:, 0]
        self.lengths[row] = new.lengths[0]


def prefix_advance(layer: PrefixAttention, hidden: torch.Tensor, index: torch.Tensor,
                   count: torch.Tensor, state: PrefixSlots) -> tuple[torch.Tensor, PrefixSlots]:
    """Hydra++ live: append each row's newly accepted tokens (``hidden[row, index[row,
    :count[row]]]``) to the layer's cache and return its output at each row's last one
    ``[b, 1, d]``: the only position the heads read. Equal to :meth:`PrefixAttention.forward`
    over the whole sequence there, since keys and values come from the base hiddens alone."""
    b, t = index.shape
    rows = torch.arange(b, device=hidden.device)[:, None]
    x = hidden[rows, index]  # [b, t, d]: the accepted tokens in order (padded past count)
    q, k, v = layer.qkv(layer.norm1(x)).view(b, t, 3, layer.num_heads, -1).permute(2, 0, 1, 3, 4)
    steps = torch.arange(t, device=hidden.device)
    scratch = state.kv.shape[3] - 1
    slots = torch.where(steps < count[:, None], state.lengths[:, None] + steps, scratch)
    state.kv[0][rows, :, slots] = k  # [b, t, heads, head_dim]
    state.kv[1][rows, :, slots] = v
    lengths = state.lengths + count
    last = (count - 1).clamp_min(0)[:, None]  # a stopped row (count 0) reads garbage, unused
    query = q[rows, last].transpose(1, 2)  # [b, heads, 1, head_dim]
    visible = (torch.arange(state.kv.shape[3], device=hidden.device) < lengths[:, None])
    att = F.scaled_dot_product_attention(query, state.kv[0], state.kv[1],
                                         attn_mask=visible[:, None, None, :])
    out = x[rows, last] + layer.out(att.transpose(1, 2).reshape(b, 1, -1))  # [b, 1, d]
    return out + layer.mlp(layer.norm2(out)), PrefixSlots(state.kv, lengths)


class HydraHeads(DraftHeads):
    """K sequentially dependent heads: head k reads ``h_t`` and the k+1 tokens on its path."""

    kind = KINDS["hydra"]

    def __init__(self, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
                 embeddings: nn.Module | None = None) -> None:
        super().__init__(cfg, lm_head)
        d = cfg.hidden_size
        if embeddings is None:
            embeddings = nn.Embedding(cfg.vocab_size, d)
        embeddings.requires_grad_(False)
        self.base_embeddings = embeddings  # frozen and never saved (see checkpoints)
        self.inputs = nn.ModuleList(nn.Linear(d * (k + 2), d) for k in range(cfg.num_heads))
        for lin in self.inputs:
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.blocks = nn.ModuleList(
            nn.Sequential(*(ResBlock(d) for _ in range(cfg.num_layers - 1)))
            for _ in range(cfg.num_heads)
        )
        self.prefix_layer = (PrefixAttention(d, cfg.attention_heads)
                             if cfg.prefix_attention else None)

    @classmethod
    def build(cls, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
              embeddings: nn.Module | None = None) -> HydraHeads:
        return cls(cfg, lm_head=lm_head, embeddings=embeddings)

    def features(self, hidden: torch.Tensor, cache: PrefixCache = None,
                 ) -> tuple[torch.Tensor, PrefixCache]:
        """Hydra++: hiddens ``[b, t, d]`` through the prefix layer (identity when it is off)."""
        if self.prefix_layer is None:
            return hidden, None
        return self.prefix_layer(hidden, cache)

    def start(self, *, batch: int, capacity: int) -> PrefixSlots | None:
        """Hydra++: an empty prefix-layer cache for the batch (plain Hydra keeps no state)."""
        if self.prefix_layer is None:
            return None
        p = next(self.prefix_layer.parameters())
        heads = self.prefix_layer.num_heads
        kv = torch.zeros(2, batch, heads, capacity, self.config.hidden_size // heads,
                         dtype=p.dtype, device=p.device)
        return PrefixSlots(kv, torch.zeros(batch, dtype=torch.long, device=p.device))

    def advance(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                count: torch.Tensor, next_root: torch.Tensor, state: PrefixSlots | None,
                ) -> tuple[torch.Tensor, PrefixSlots | None]:
        if self.prefix_layer is None or state is None:
            return super().advance(hidden, tokens, index, count, next_root, state)
        return prefix_advance(self.prefix_layer, hidden, index, count, state)

    def head_logits(self, k: int, hidden: torch.Tensor, prev_tokens: torch.Tensor | None = None,
                    ) -> torch.Tensor:
        """Head k: hidden ``[b, m, d]`` and ``prev_tokens`` ``[b, m, k+1]`` → logits ``[b, m, V]``."""
        if prev_tokens is None or prev_tokens.shape[-1] != k + 1:
            got = None if prev_tokens is None else prev_tokens.shape[-1]
            raise TreeoptError(f"hydra head {k} needs {k + 1} previous tokens, got {got}")
        emb = self.base_embeddings(prev_tokens).to(hidden.dtype)  # [b, m, k+1, d]
        x = torch.cat([hidden, emb.flatten(-2)], dim=-1)  # [b, m, (k+2) d]
        z = hidden + F.silu(self.inputs[k](x))
        return self.project(k, self.blocks[k](z))

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: PrefixSlots | None = None) -> torch.Tensor:
        """Level by level: head d-1 runs on every node expanded at depth d-1 of every row,
        fed its path; one call per depth for the whole batch."""
        b = root.shape[0]
        tokens = root.new_zeros(b, plan.tree.num_tokens)
        tokens[:, 0] = root
        for lv in plan.levels:
            prev = tokens[:, lv.prev]  # [b, parents, depth]: root … parent
            logits = self.head_logits(lv.depth - 1, hidden.expand(b, prev.shape[1], -1), prev)
            cand = top_candidates(logits, lv.width)  # [b, parents, R]
            plan.fill(tokens, lv.nodes, cand[:, lv.row, lv.ranks])
        return tokens
