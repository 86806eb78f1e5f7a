"""Medusa heads (Cai et al., 2024): K sequentially independent heads, each fed ``h_t`` only.

Head k: ``h → (h + SiLU(W h)) × num_layers → vocab``; ``heads(hidden)`` returns ``[K, b, t, V]``.
One call per decoding step drafts every depth of the tree at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

from treeopt.decoding.token_order import top_candidates
from treeopt.drafters.heads import DraftHeads, ResBlock
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan


class MedusaHeads(DraftHeads):
    """K independent heads, each fed ``h_t`` only."""

    kind = KINDS["medusa"]

    def __init__(self, cfg: HeadsConfig, *, lm_head: nn.Module | None = None) -> None:
        super().__init__(cfg, lm_head)
        self.blocks = nn.ModuleList(
            nn.Sequential(*(ResBlock(cfg.hidden_size) for _ in range(cfg.num_layers)))
            for _ in range(cfg.num_heads)
        )
        # for drafting: the block parameters, the key their stack was made under, the stack
        self._pack: tuple[tuple[nn.Parameter, ...], tuple[tuple[int, int], ...],
                          tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]] | None = None

    @classmethod
    def build(cls, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
              embeddings: nn.Module | None = None) -> MedusaHeads:
        return cls(cfg, lm_head=lm_head)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of every head: hidden ``[b, t, d]`` → ``[K, b, t, V]``."""
        return torch.stack([self.head_logits(k, hidden) for k in range(self.config.num_heads)])

    def head_logits(self, k: int, hidden: torch.Tensor, prev_tokens: torch.Tensor | None = None,
                    ) -> torch.Tensor:
        """Logits of head k: ``[b, t, d]`` → ``[b, t, V]`` (``prev_tokens`` is ignored)."""
        return self.project(k, self.blocks[k](hidden))

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: None = None) -> torch.Tensor:
        """Every depth from one call of the heads the tree reaches: node i takes its depth's
        head's candidate of its rank."""
        tree = plan.tree
        if not tree.size:  # the root alone
            return root[:, None]
        z = self.blocks_at_once(hidden[:, 0], tree.depth)
        if self.proj is None:  # the shared LM head: one projection for every depth
            logits = self.project(0, z)  # [b, depth, V]
        else:
            logits = torch.stack([self.project(k, z[:, k]) for k in range(tree.depth)], dim=1)
        cand = top_candidates(logits, tree.max_rank + 1)  # [b, depth, R]
        return torch.cat([root[:, None], cand[:, plan.depths, plan.ranks]], dim=1)

    def blocks_at_once(self, hidden: torch.Tensor, depth: int) -> torch.Tensor:
        """The first ``depth`` heads' residual blocks on ``hidden`` ``[b, d]`` → ``[b, depth, d]``,
        one batched product per layer for all those heads: what ``self.blocks[k](hidden)`` gives
        each, to rounding, in ``num_layers`` operations instead of ``depth × num_layers``
        blocks."""
        z = hidden.expand(depth, *hidden.shape)
        if self.config.num_layers == 0:
            return z.transpose(0, 1)
        weights, biases = self._packed_blocks()
        for w, b in zip(weights, biases, strict=True):
            z = z + F.silu(torch.baddbmm(b[:depth], z, w[:depth]))
        return z.transpose(0, 1)

    def _packed_blocks(self) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
        """Per layer, every head's block weight (transposed, ``[K, d, d]``) and bias
        (``[K, 1, d]``), stacked; stacked again whenever a block parameter's storage or
        version changes (an in-place update, ``load_state_dict``, a new layout). The parameters
        themselves are looked up once (walking the modules every call would cost more than the
        products) and again after a conversion (:meth:`_apply`: ``.to()``, ``.float()``, ...)."""
        if self._pack is None:
            params = tuple(p for head in self.blocks for block in head
                           for p in (block.linear.weight, block.linear.bias))
        else:
            params = self._pack[0]
        key = tuple((p.data_ptr(), p._version) for p in params)
        if self._pack is None or self._pack[1] != key:
            weights, biases = params[0::2], params[1::2]  # head by head, block by block
            heads, layers = range(self.config.num_heads), self.config.num_layers
            with torch.no_grad():
                w = tuple(torch.stack([weights[k * layers + i].t() for k in heads]).contiguous()
                          for i in range(layers))
                b = tuple(torch.stack([biases[k * layers + i] for k in heads])[:, None, :]
                          for i in range(layers))
            self._pack = (params, key, w, b)
        return self._pack[2], self._pack[3]

    def _apply(self, fn, recurse=True):  # type: ignore[no-untyped-def]
        self._pack = None  # a conversion may give the blocks new parameter objects
        return super()._apply(fn, recurse)
