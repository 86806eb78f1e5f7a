"""What every set of draft heads shares: the :class:`DraftHeads` interface, Medusa's residual
block, the vocabulary projection (a per-head copy of the base LM head or the frozen LM head
itself), and the one ranking rule of candidates.

Heads read the base model's last hidden state ``h_t`` (after the final norm). Untrained heads
equal the LM head: every block starts at zero. Candidates are ranked by
:mod:`treeopt.drafters.ranking`, the same rule in calibration and in decoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.drafters import DrafterKind
from treeopt.drafters.config import HeadsConfig

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan

PrefixCache = tuple[torch.Tensor, torch.Tensor] | None
LiveState = Any  # a kind's own state across live steps (Hydra++: its prefix layer's cache)


class ResBlock(nn.Module):
    """``x + SiLU(W x + b)``, zero-initialised (Medusa's block)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


def _projection(cfg: HeadsConfig, lm_head: nn.Module | None) -> nn.Linear:
    proj = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
    if lm_head is not None:
        proj.weight.data.copy_(lm_head.weight.data)
    return proj


class DraftHeads(nn.Module):
    """K draft heads: the interface calibration, training, decoding and profiling use.

    - :meth:`features`: what the heads read at each position (``h_t``; Hydra++: its prefix
      layer), over whole sequences (calibration, training);
    - :meth:`head_logits`: head k's logits, given the path tokens it reads (teacher forcing);
    - :meth:`start`, :meth:`live_features`: the same features during live decoding, step by
      step, for a batch of rows that accept ragged numbers of tokens;
    - :meth:`draft`: a live step's tree tokens for every row, from its features.
    """

    kind: ClassVar[DrafterKind]

    def __init__(self, cfg: HeadsConfig, lm_head: nn.Module | None) -> None:
        super().__init__()
        self.config = cfg
        if cfg.share_lm_head:
            base = lm_head if lm_head is not None else _projection(cfg, None)
            base.requires_grad_(False)
            self.base_lm_head = base  # frozen and never saved (see checkpoints)
            self.proj = None
        else:
            self.base_lm_head = None
            self.proj = nn.ModuleList(_projection(cfg, lm_head) for _ in range(cfg.num_heads))

    @classmethod
    def build(cls, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
              embeddings: nn.Module | None = None) -> DraftHeads:
        """Heads of this kind for ``cfg`` (``embeddings`` only where the kind reads the path)."""
        raise NotImplementedError

    def project(self, k: int, z: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits of head k from its final hidden ``z`` ``[..., d]`` → ``[..., V]``."""
        proj = self.base_lm_head if self.proj is None else self.proj[k]
        return proj(z if z.dtype == proj.weight.dtype else z.to(proj.weight.dtype))

    def features(self, hidden: torch.Tensor, cache: PrefixCache = None,
                 ) -> tuple[torch.Tensor, PrefixCache]:
        """What the heads read from base hiddens ``[b, t, d]``, and the updated layer cache."""
        return hidden, None

    def head_logits(self, k: int, hidden: torch.Tensor, prev_tokens: torch.Tensor | None = None,
                    ) -> torch.Tensor:
        """Head k: features ``[b, m, d]`` and the path's tokens ``[b, m, k+1]`` → ``[b, m, V]``."""
        raise NotImplementedError

    def start(self, *, batch: int, capacity: int) -> LiveState:
        """The live state of a batch of ``batch`` rows of up to ``capacity`` tokens."""
        return None

    def live_features(self, hidden: torch.Tensor, index: torch.Tensor, count: torch.Tensor,
                      state: LiveState) -> tuple[torch.Tensor, LiveState]:
        """The features ``[b, 1, d]`` the heads read after a step: the tokens each row just
        accepted are ``hidden[row, index[row, :count[row]]]`` (``hidden`` ``[b, t, d]``; a row
        that accepted nothing, having stopped, gets features it never uses)."""
        last = index.gather(1, (count - 1).clamp_min(0)[:, None])  # [b, 1]
        rows = torch.arange(hidden.shape[0], device=hidden.device)[:, None]
        return hidden[rows, last], state

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor) -> torch.Tensor:
        """Tree tokens ``[b, n+1]`` (root first) from features ``[b, 1, d]`` and roots ``[b]``."""
        raise NotImplementedError
