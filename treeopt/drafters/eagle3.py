"""EAGLE-3 drafters (Li et al., 2025): features fused from three base layers, a decoder layer
that reads the token's embedding and the feature side by side, and a vocabulary of its own.

- Features: the base model's hidden states at three layers (``feature_layers``, indices into
  Hugging Face's ``hidden_states``; EAGLE-3 takes the inputs of layers 2, L/2 and L-3), joined
  ``[f_low; f_mid; f_high]`` and fused ``fc: 3d → d`` (no bias).
- Its layer: ``[norm(e(x_{t+1})); norm(h_t)]`` (2d) feeds attention, whose output is added to
  ``h_t``, then the usual norm and SwiGLU MLP: the output ``g_t`` is the predicted feature at
  t+1, pre-norm. Deeper, the drafter reads its own ``g`` in place of the fused feature (no fc).
- Vocabulary: ``lm_head(norm(g))`` scores the drafter's ``draft_vocab_size`` tokens; draft token
  i is base token ``i + d2t[i]``, and ``t2d[token]`` says whether a base token is in it. A base
  token outside it cannot be proposed (its rank is -1: beyond every recorded top-k).

Everything else — exact teacher-forced chains (one pass per depth), the live cache, drafting
level by level — is the EAGLE drafter's (:mod:`treeopt.drafters.eagle`); only what an entry is,
how candidates are scored and the training loss differ. Training: the soft cross-entropy to the
base model's distribution over the draft vocabulary, at every depth of the chains (EAGLE-3
drops the feature regression and trains on its own predictions, as the chains do).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.decoding.token_order import rank_of, top_candidates
from treeopt.drafters.eagle import DecoderLayer, EagleDrafter
from treeopt.errors import TreeoptError
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS


class FusedLayer(DecoderLayer):
    """EAGLE-3's decoder layer over entries ``[e; h]`` ``[b, m, 2d]``: attention reads both,
    normed apart, and is added to ``h``; the rest is EAGLE's layer. Its output is the new ``h``
    ``[b, m, d]``."""

    def __init__(self, cfg: HeadsConfig) -> None:
        super().__init__(cfg, first=False, width=2)
        self.hidden_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.input_layernorm(x[..., : self.d]),
                          self.hidden_norm(x[..., self.d:])], dim=-1)

    def residual(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., self.d:]


class Eagle3Drafter(EagleDrafter):
    """EAGLE-3's drafter: fused three-layer features, one fused layer, its own vocabulary."""

    kind = KINDS["eagle3"]
    takes_vocabulary = False  # its own draft-vocabulary head: always trained in full

    def __init__(self, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
                 embeddings: nn.Module | None = None) -> None:
        nn.Module.__init__(self)
        if cfg.num_layers != 1:
            raise TreeoptError(f"eagle3 config: one decoder layer, got num_layers "
                               f"{cfg.num_layers}")
        if cfg.hidden_size % cfg.attention_heads or (
                cfg.kv_heads and cfg.attention_heads % cfg.kv_heads):
            raise TreeoptError(f"eagle3 config: hidden_size {cfg.hidden_size}, attention_heads "
                               f"{cfg.attention_heads} and kv_heads {cfg.kv_heads} do not divide")
        self.config = cfg
        d, vocab = cfg.hidden_size, cfg.vocab_size
        draft_vocab = cfg.draft_vocab_size or vocab
        if embeddings is None:
            embeddings = nn.Embedding(vocab, d)
        self.base_embeddings = embeddings.requires_grad_(False)  # frozen and never saved
        self.fc = nn.Linear(3 * d, d, bias=False)
        self.layers = nn.ModuleList([FusedLayer(cfg)])
        self.norm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.lm_head = nn.Linear(d, draft_vocab, bias=False)
        if lm_head is not None and draft_vocab == vocab:  # start from the base model's head
            self.lm_head.weight.data.copy_(lm_head.weight.data)
        self.register_buffer("d2t", torch.zeros(draft_vocab, dtype=torch.long))
        self.register_buffer("t2d", torch.arange(vocab) < draft_vocab)

    @classmethod
    def build(cls, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
              embeddings: nn.Module | None = None) -> Eagle3Drafter:
        return cls(cfg, lm_head=lm_head, embeddings=embeddings)

    def entries(self, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Layer inputs ``[e(token); h]`` ``[b, m, 2d]``: ``h`` the fused base features (3d
        wide, through fc) or the drafter's own predicted feature (d wide)."""
        d = self.config.hidden_size
        h = self.fc(features) if features.shape[-1] == 3 * d else features
        return torch.cat([self.base_embeddings(tokens).to(h.dtype), h], dim=-1)

    def logits(self, g: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits ``[..., draft_vocab_size]`` of predicted features ``g``."""
        return self.lm_head(self.norm(g))

    def draft_ids(self) -> torch.Tensor:
        """The base vocabulary id of every draft token ``[draft_vocab_size]``."""
        return torch.arange(self.d2t.shape[0], device=self.d2t.device) + self.d2t

    def ranks_of(self, g: torch.Tensor, target: torch.Tensor, *, below: int | None = None,
                 ) -> torch.Tensor:
        """Rank of each base token among the draft-vocabulary candidates (-1: not in it;
        ``below`` or more: ``below``, given one)."""
        inside = self.t2d[target]
        lookup = torch.full_like(self.t2d, 0, dtype=torch.long)
        lookup[self.draft_ids()] = torch.arange(self.d2t.shape[0], device=self.d2t.device)
        r = rank_of(self.logits(g), lookup[target], below=below)
        return torch.where(inside, r, -1)

    def candidates(self, g: torch.Tensor, k: int) -> torch.Tensor:
        return self.draft_ids()[top_candidates(self.logits(g), k)]

    def distill_terms(self, hidden: torch.Tensor, ids: torch.Tensor, teacher: torch.Tensor,
                      ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Soft cross-entropy to the base model's distribution over the draft vocabulary
        (renormalised), at every depth of the teacher-forced chains."""
        K = self.config.num_heads
        n = ids.shape[1] - 1 - K
        keep = self.draft_ids()
        terms = []
        for k, g in enumerate(self.chains(hidden, ids, K)):
            logits = self.logits(g).float()
            target = teacher[:, 1 + k: 1 + k + n].index_select(-1, keep)
            target = target / target.sum(-1, keepdim=True).clamp_min(1e-12)
            terms.append((-(target * F.log_softmax(logits, dim=-1)).sum(-1).mean(), logits,
                          target))
        return terms
