"""What every set of draft heads shares: the :class:`DraftHeads` interface (a
:class:`~treeopt.decoding.drafter.Drafter`), Medusa's residual block, the vocabulary projection
(a per-head copy of the base LM head or the frozen LM head itself), and the table of ranks a
drafter returns; and the drafter of a registered kind, built (:func:`build_heads`) or its class
loaded (:func:`drafter_class`).

Heads read the base model's last hidden state ``h_t`` (after the final norm). Untrained heads
equal the LM head: every block starts at zero. Candidates are ranked by
:mod:`treeopt.decoding.token_order`, the same rule in calibration and in decoding.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.decoding.drafter import Drafter
from treeopt.decoding.token_order import rank_of
from treeopt.drafters.vocabulary import VocabularyView
from treeopt.errors import TreeoptError
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import DrafterKind, drafter_kind

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


def rank_table(per_depth: Iterable[torch.Tensor], *, top_k: int) -> torch.Tensor:
    """Ranks of every depth ``[b, n]`` each, as a trace's int16 ``[b, n, K]``: -1 beyond
    ``top_k`` (and where a drafter cannot propose the token at all, already -1)."""
    return torch.stack([torch.where((r >= 0) & (r < top_k), r, -1) for r in per_depth],
                       dim=-1).to(torch.int16)


class DraftHeads(VocabularyView, Drafter):
    """K draft heads: the interface calibration, training, decoding and profiling use.

    - :meth:`features`: what the heads read at each position (``h_t``; Hydra++: its prefix
      layer), over whole sequences (calibration, training);
    - :meth:`head_logits`: head k's logits, given the path tokens it reads (teacher forcing);
    - :meth:`rank_depths`: every head over features and true paths, one call per depth;
    - :meth:`draft` (each kind): a live step's tree tokens for every row, from its features.
    """

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
        """Vocabulary logits of head k from its final hidden ``z`` ``[..., d]`` → ``[..., V]``
        (``[..., c]`` inside :meth:`~treeopt.drafters.vocabulary.VocabularyView.vocabulary`)."""
        return self.projected(self.base_lm_head if self.proj is None else self.proj[k], z)

    def features(self, hidden: torch.Tensor, cache: PrefixCache = None,
                 ) -> tuple[torch.Tensor, PrefixCache]:
        """What the heads read from base hiddens ``[b, t, d]``, and the updated layer cache."""
        return hidden, None

    def head_logits(self, k: int, hidden: torch.Tensor, prev_tokens: torch.Tensor | None = None,
                    ) -> torch.Tensor:
        """Head k: features ``[b, m, d]`` and the path's tokens ``[b, m, k+1]`` → ``[b, m, V]``."""
        raise NotImplementedError

    def distill_terms(self, hidden: torch.Tensor, ids: torch.Tensor, teacher: torch.Tensor,
                      ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Head k at t against the teacher at t+1+k: a soft cross-entropy."""
        T = ids.shape[1]
        h = self.features(hidden)[0]
        terms = []
        for k in range(self.config.num_heads):
            n = T - 1 - k  # positions t whose target distribution (at t+1+k) exists
            prev = ids[:, 1:].unfold(1, k + 1, 1)[:, :n]  # [b, n, k+1]
            logits = self.head_logits(k, h[:, :n], prev).float()  # [b, n, V]
            target = teacher[:, 1 + k: 1 + k + n]
            terms.append((-(target * F.log_softmax(logits, dim=-1)).sum(-1).mean(), logits,
                          target))
        return terms

    def rank_depths(self, hidden: torch.Tensor, stream: torch.Tensor, *, top_k: int,
                    ) -> torch.Tensor:
        """Head k over the features at t and the true path (see :meth:`Drafter.rank_depths`)."""
        K = self.config.num_heads
        b, T = stream.shape
        n = T - 1 - K  # positions t = 0 … T-2-K have all K targets
        if n <= 0:
            return torch.empty(b, 0, K, dtype=torch.int16, device=stream.device)
        h = self.features(hidden)[0][:, :n]  # [b, n, d]

        def depth(k: int) -> torch.Tensor:
            prev = stream[:, 1:].unfold(1, k + 1, 1)[:, :n]  # [b, n, k+1]: x_{t+1} … x_{t+1+k}
            return rank_of(self.head_logits(k, h, prev), stream[:, 2 + k: 2 + k + n],
                           below=top_k)

        return rank_table((depth(k) for k in range(K)), top_k=top_k)


def drafter_class(kind: DrafterKind) -> type[Drafter]:
    """The torch implementation of ``kind`` (its ``module:Class``), imported on demand.

    >>> from treeopt.registry.kinds import KINDS
    >>> drafter_class(KINDS["hydra"]).__name__
    'HydraHeads'
    """
    module, name = kind.implementation.split(":")
    return getattr(importlib.import_module(module), name)


def build_heads(cfg: HeadsConfig, *, lm_head: Any = None, embeddings: Any = None) -> Drafter:
    """Draft heads for ``cfg``; with ``lm_head`` (and, for path readers, ``embeddings``) from
    the base model. Shapes are checked against the config.

    >>> cfg = HeadsConfig(kind="medusa", num_heads=2, hidden_size=8, vocab_size=16)
    >>> build_heads(cfg)(torch.zeros(1, 3, 8)).shape
    torch.Size([2, 1, 3, 16])
    """
    kind = drafter_kind(cfg.kind)
    if not kind.trained:
        raise TreeoptError(f"a {kind.title.lower()} is loaded from its own directory, not built "
                           f"from a heads config")
    for name, mod in (("lm_head", lm_head), ("embeddings", embeddings)):
        shape = (cfg.vocab_size, cfg.hidden_size)
        if mod is not None and tuple(mod.weight.shape[:2]) != shape:
            raise TreeoptError(
                f"heads config (hidden {cfg.hidden_size}, vocab {cfg.vocab_size}) does not match "
                f"the base model's {name} of shape {list(mod.weight.shape)}")
    return drafter_class(kind).build(cfg, lm_head=lm_head, embeddings=embeddings)
