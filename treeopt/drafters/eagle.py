"""EAGLE drafters (Li et al., 2024: EAGLE-1, and EAGLE-2, which drafts with the same network):
one decoder layer that reads the base model's features and predicts the next feature.

The network: ``fc([e(x_{t+1}); f_t])`` (the next token's embedding beside the feature at t,
``2d → d``), then ``num_layers`` Llama-style decoder layers (RoPE attention, SwiGLU MLP; the
first layer has no input norm, as in EAGLE), giving ``g_t``, the predicted feature at t+1; the
base model's LM head turns it into candidates for ``x_{t+2}``. Deeper, the drafter reads its
*own* predicted feature: the entry after ``g_t`` is ``fc([e(x_{t+2}); g_t])`` at position t+1.
Features are the base model's last hidden states (after its final norm), as the heads read.

:class:`EagleDrafter` is the network and the :class:`~treeopt.decoding.drafter.Drafter`
interface; its parts live beside it:

- :mod:`~treeopt.drafters.eagle_layer`: the decoder layer and its rotary embedding;
- :mod:`~treeopt.drafters.eagle_chains`: exact teacher forcing, one pass per depth (ranks and
  training);
- :mod:`~treeopt.drafters.eagle_cache`: the live cache of true entries (:class:`EagleState`),
  fed after each step and read while drafting level by level;
- :mod:`~treeopt.drafters.eagle_growth`: dynamic top-k growth, live and teacher-forced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.decoding.drafter import Drafter, feed_all_but_last
from treeopt.decoding.token_order import rank_of, top_candidates
from treeopt.drafters.eagle_cache import EagleState, cached_forward, catch_up
from treeopt.drafters.eagle_chains import teacher_chains
from treeopt.drafters.eagle_growth import dynamic_ranks, grow_dynamic
from treeopt.drafters.eagle_layer import DecoderLayer
from treeopt.drafters.heads import _projection, rank_table
from treeopt.drafters.vocabulary import VocabularyView
from treeopt.errors import TreeoptError
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS

if TYPE_CHECKING:
    from treeopt.decoding.dynamic_drafting import RowPlan
    from treeopt.decoding.plan import TreePlan
    from treeopt.model.dynamic_settings import DynamicSettings

__all__ = ["DecoderLayer", "EagleDrafter", "EagleState"]


class EagleDrafter(VocabularyView, Drafter):
    """EAGLE-1/2's drafter: fc over [embedding; feature], decoder layers, the base LM head."""

    kind = KINDS["eagle"]

    def __init__(self, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
                 embeddings: nn.Module | None = None) -> None:
        super().__init__()
        if cfg.hidden_size % cfg.attention_heads or (
                cfg.kv_heads and cfg.attention_heads % cfg.kv_heads):
            raise TreeoptError(f"eagle config: hidden_size {cfg.hidden_size}, attention_heads "
                               f"{cfg.attention_heads} and kv_heads {cfg.kv_heads} do not divide")
        self.config = cfg
        d = cfg.hidden_size
        base = lm_head if lm_head is not None else _projection(cfg, None)
        self.base_lm_head = base.requires_grad_(False)  # frozen and never saved
        if embeddings is None:
            embeddings = nn.Embedding(cfg.vocab_size, d)
        self.base_embeddings = embeddings.requires_grad_(False)  # frozen and never saved
        self.fc = nn.Linear(2 * d, d, bias=cfg.bias)
        self.layers = nn.ModuleList(DecoderLayer(cfg, first=i == 0)
                                    for i in range(cfg.num_layers))

    @classmethod
    def build(cls, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
              embeddings: nn.Module | None = None) -> EagleDrafter:
        return cls(cfg, lm_head=lm_head, embeddings=embeddings)

    def logits(self, g: torch.Tensor) -> torch.Tensor:
        """Candidates' logits ``[..., V]`` from predicted features ``[..., d]`` (``[..., c]``
        inside :meth:`~treeopt.drafters.vocabulary.VocabularyView.vocabulary`)."""
        return self.projected(self.base_lm_head, g)

    def entries(self, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Layer inputs ``fc([e(token); feature])`` ``[b, m, d]``."""
        emb = self.base_embeddings(tokens).to(features.dtype)
        return self.fc(torch.cat([emb, features], dim=-1))

    def ranks_of(self, g: torch.Tensor, target: torch.Tensor, *, below: int | None = None,
                 ) -> torch.Tensor:
        """The rank of each ``target`` token among the candidates of features ``g``
        (-1: a token the drafter cannot propose; ``below`` or more: ``below``, given one)."""
        return rank_of(self.logits(g), target, below=below)

    def candidates(self, g: torch.Tensor, k: int) -> torch.Tensor:
        """The ``k`` best candidate tokens ``[..., k]`` (base vocabulary ids) of features ``g``."""
        return top_candidates(self.logits(g), k)

    # -- teacher forcing -----------------------------------------------------------------------

    def chains(self, hidden: torch.Tensor, stream: torch.Tensor, depths: int,
               ) -> list[torch.Tensor]:
        """Predicted features ``[b, n, d]`` of every depth 0 … depths-1 at every position of
        the sequence (n = T-1-depths), teacher-forced exactly
        (:func:`~treeopt.drafters.eagle_chains.teacher_chains`). Differentiable."""
        return teacher_chains(self, hidden, stream, depths)

    def rank_depths(self, hidden: torch.Tensor, stream: torch.Tensor, *, top_k: int,
                    ) -> torch.Tensor:
        """Depth k at t: the rank of ``stream[t+2+k]`` under the chain's k-th predicted feature."""
        K = self.config.num_heads
        b, T = stream.shape
        n = T - 1 - K
        if n <= 0:
            return torch.empty(b, 0, K, dtype=torch.int16, device=stream.device)
        return rank_table((self.ranks_of(g, stream[:, 2 + k: 2 + k + n], below=top_k)
                           for k, g in enumerate(self.chains(hidden, stream, K))), top_k=top_k)

    def rank_dynamic(self, hidden: torch.Tensor, stream: torch.Tensor, *, topk: int,
                     steps: int) -> torch.Tensor:
        """Where the true path stands in the dynamic candidate pool at every position, int16
        ``[b, T-1-S, S, S]`` (:func:`~treeopt.drafters.eagle_growth.dynamic_ranks`)."""
        return dynamic_ranks(self, hidden, stream, topk=topk, steps=steps)

    def distill_terms(self, hidden: torch.Tensor, ids: torch.Tensor, teacher: torch.Tensor,
                      ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """EAGLE's loss at every depth of the teacher-forced chains: the predicted feature's
        smooth-L1 distance to the true one plus 0.1 × the soft cross-entropy of its tokens
        (the EAGLE paper's weighting)."""
        K = self.config.num_heads
        n = ids.shape[1] - 1 - K
        terms = []
        for k, g in enumerate(self.chains(hidden, ids, K)):
            logits = self.logits(g).float()
            target = teacher[:, 1 + k: 1 + k + n]
            cls = -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()
            reg = F.smooth_l1_loss(g.float(), hidden[:, 1 + k: 1 + k + n].float())
            terms.append((reg + 0.1 * cls, logits, target))
        return terms

    # -- live ----------------------------------------------------------------------------------

    def start(self, *, batch: int, capacity: int) -> EagleState:
        p = self.fc.weight
        first = self.layers[0]
        kv = torch.zeros(len(self.layers), 2, batch, first.kv_heads, capacity, first.head_dim,
                         dtype=p.dtype, device=p.device)
        zeros = torch.zeros(batch, dtype=torch.long, device=p.device)
        return EagleState(kv, zeros, [0] * batch, p.new_zeros(batch, 1, self.config.hidden_size),
                          zeros[:, None], zeros)

    def advance(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                count: torch.Tensor, next_root: torch.Tensor, state: EagleState,
                ) -> tuple[torch.Tensor, EagleState]:
        """Queue the accepted tokens' features, each beside the token after it (the last beside
        the next root)."""
        rows = torch.arange(hidden.shape[0], device=hidden.device)[:, None]
        after = torch.cat([tokens.gather(1, index)[:, 1:], next_root[:, None]], dim=1)
        after.scatter_(1, (count - 1).clamp_min(0)[:, None], next_root[:, None])
        state.features, state.tokens, state.count = hidden[rows, index], after, count  # a
        # stopped row (count 0) queues nothing: its cache stays put while the others go on
        return hidden[:, :1], state

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: EagleState | None = None) -> torch.Tensor:
        """Feed the queued true entries, then one forward per depth that has children."""
        if state is None:
            raise TreeoptError("an EAGLE drafter drafts from its live state (start, then advance)")
        b, q = root.shape[0], plan.tree.num_tokens
        g_root = self._catch_up(state)  # [b, d]
        g = g_root.new_zeros(b, q, g_root.shape[-1])  # the predicted feature of each token
        g[:, 0] = g_root
        tokens = root.new_zeros(b, q)
        tokens[:, 0] = root
        if not plan.levels:  # the root alone: the queued entries fed, nothing drafted
            return tokens
        first = plan.levels[0]
        plan.fill(tokens, first.nodes, self.candidates(g_root, first.width)[:, first.ranks])
        fed = 0
        for lv in plan.levels[1:]:
            nodes, visible = lv.prev[:, -1], lv.parents_seen
            x = self.entries(tokens[:, nodes], g[:, plan.parent[nodes]])
            out = self._forward(state, x, fed, visible,
                                positions=state.lengths[:, None] - 1 + lv.depth - 1)
            g[:, nodes] = out
            cand = self.candidates(out, lv.width)  # [b, m, R]
            plan.fill(tokens, lv.nodes, cand[:, lv.row, lv.ranks])
            fed += nodes.shape[0]
        return tokens

    def draft_dynamic(self, settings: DynamicSettings, hidden: torch.Tensor, root: torch.Tensor,
                      state: EagleState | None = None) -> tuple[torch.Tensor, RowPlan]:
        """A dynamic step (:mod:`treeopt.dynamic`,
        :func:`~treeopt.drafters.eagle_growth.grow_dynamic`): tree tokens ``[b, N]`` and the
        rows' trees."""
        if state is None:
            raise TreeoptError("an EAGLE drafter drafts from its live state (start, then advance)")
        return grow_dynamic(self, settings, root, state)

    def prime(self, state: EagleState) -> None:
        """Feed every row's queued entries but its last, which stays queued for the next step."""
        feed_all_but_last(state, self._catch_up, ("features", "tokens"))

    def _catch_up(self, state: EagleState) -> torch.Tensor:
        """Feed the queued entries (:func:`~treeopt.drafters.eagle_cache.catch_up`)."""
        return catch_up(self, state)

    def _forward(self, state: EagleState, x: torch.Tensor, offset: int, visible: torch.Tensor,
                 *, positions: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Entries ``x`` through the live cache
        (:func:`~treeopt.drafters.eagle_cache.cached_forward`)."""
        return cached_forward(self, state, x, offset, visible, positions=positions, valid=valid)
