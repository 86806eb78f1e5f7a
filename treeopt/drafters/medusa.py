"""Medusa heads (Cai et al., 2024): K sequentially independent heads, each fed ``h_t`` only.

Head k: ``h → (h + SiLU(W h)) × num_layers → vocab``; ``heads(hidden)`` returns ``[K, b, t, V]``.
One call per decoding step drafts every depth of the tree at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from treeopt.drafters import KINDS
from treeopt.drafters.base import DraftHeads, ResBlock
from treeopt.drafters.config import HeadsConfig
from treeopt.drafters.ranking import top_candidates

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
        z = torch.stack([self.blocks[k](hidden[:, 0]) for k in range(tree.depth)], dim=1)
        if self.proj is None:  # the shared LM head: one projection for every depth
            logits = self.project(0, z)  # [b, depth, V]
        else:
            logits = torch.stack([self.project(k, z[:, k]) for k in range(tree.depth)], dim=1)
        cand = top_candidates(logits, tree.max_rank + 1)  # [b, depth, R]
        return torch.cat([root[:, None], cand[:, plan.depths, plan.ranks]], dim=1)
