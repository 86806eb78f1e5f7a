"""What every set of draft heads shares: the :class:`DraftHeads` interface, Medusa's residual
block, the vocabulary projection (a per-head copy of the base LM head or the frozen LM head
itself), and the one ranking rule of candidates.

Heads read the base model's last hidden state ``h_t`` (after the final norm). Untrained heads
equal the LM head: every block starts at zero. Tokens ranked equal are ordered by token id
(:func:`rank_of`, :func:`top_candidates`), the same rule in calibration and in decoding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.drafters import DrafterKind
from treeopt.drafters.config import HeadsConfig

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan

PrefixCache = tuple[torch.Tensor, torch.Tensor] | None


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

    - :meth:`features`: what the heads read at each position (``h_t``; Hydra++: its prefix layer);
    - :meth:`head_logits`: head k's logits, given the path tokens it reads (teacher forcing);
    - :meth:`draft`: a live step's tree tokens from the features at the last accepted token.
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
        return proj(z.to(proj.weight.dtype))

    def features(self, hidden: torch.Tensor, cache: PrefixCache = None,
                 ) -> tuple[torch.Tensor, PrefixCache]:
        """What the heads read from base hiddens ``[b, t, d]``, and the updated layer cache."""
        return hidden, None

    def head_logits(self, k: int, hidden: torch.Tensor, prev_tokens: torch.Tensor | None = None,
                    ) -> torch.Tensor:
        """Head k: features ``[b, m, d]`` and the path's tokens ``[b, m, k+1]`` → ``[b, m, V]``."""
        raise NotImplementedError

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor) -> torch.Tensor:
        """Tree tokens ``[1, n+1]`` (root first) from features ``[1, 1, d]`` at the root."""
        raise NotImplementedError


def rank_of(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Rank of ``target`` among ``logits`` sorted descending, ties by token id ascending.

    ``logits`` ``[..., V]``, ``target`` int64 ``[...]`` → int64 ``[...]``.

    >>> rank_of(torch.tensor([[0.5, 2.0, 0.5, 1.0]]), torch.tensor([2])).tolist()
    [3]
    """
    true = logits.gather(-1, target.unsqueeze(-1))  # [..., 1]
    ids = torch.arange(logits.shape[-1], device=logits.device)
    ahead = (logits > true) | ((logits == true) & (ids < target.unsqueeze(-1)))
    return ahead.sum(-1)


def top_candidates(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Token ids of the ``k`` best candidates ``[..., k]``, in the order :func:`rank_of` uses.

    A top-k and a sort of those k, not a sort of the vocabulary (drafting calls this once per tree
    level); only a tie across the k-th place falls back to the full stable sort.

    >>> top_candidates(torch.tensor([0.5, 2.0, 0.5, 1.0]), 4).tolist()
    [1, 3, 0, 2]
    """
    k = min(k, logits.shape[-1])
    top = torch.topk(logits, k, dim=-1)
    if bool(((logits >= top.values[..., -1:]).sum(-1) > k).any()):  # a tie across the cut
        return torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
    ids = top.indices.sort(dim=-1).values  # the k best, ids ascending: the tie order wanted
    order = torch.sort(logits.gather(-1, ids), dim=-1, descending=True, stable=True).indices
    return ids.gather(-1, order)
