"""Multi-token prediction (MTP) drafters: the module DeepSeek-V3 trains beside its base model
(DeepSeek-AI, arXiv 2412.19437, §2.2) and Qwen3-Next, GLM-4.5 and MiMo ship, chained for K depths.

One module: the next token's embedding and the hidden state handed down, each RMS-normalised
(``enorm``, ``hnorm``), concatenated ``[e; h]`` and projected (``eh_proj``, 2h → h, no bias),
then one transformer block (a Llama decoder layer with its input norm), then the shared output
head: the module's output norm and the base model's LM head. At depth 0 the hidden state is
the base model's last hidden state (after its final norm: what vLLM and SGLang hand their MTP
module); deeper, the module's own output at the depth above. A drafter holds
``num_layers`` modules (``num_nextn_predict_layers``) and runs depth k through module
``k mod num_layers``, as vLLM's ``DeepSeekMultiTokenPredictor`` does (``spec_step_idx %
num_mtp_layers``; ``vllm/model_executor/models/deepseek_mtp.py`` at 03356f8c).

Where the norm sits differs between the published layouts (``handoff_norm`` of the config):

- DeepSeek-V3: the block's output is handed to the next depth and ``shared_head.norm`` applies
  only before the LM head (``DeepSeekMultiTokenPredictorLayer.forward`` returns the block output;
  ``compute_logits`` normalises);
- Qwen3-Next: ``mtp.norm`` applies to the block's output and the normed state is both handed
  down and read by the LM head (``Qwen3NextMultiTokenPredictor.forward``,
  ``vllm/model_executor/models/qwen3_next_mtp.py`` at 055e47c2).

Each module keeps its own cache of the true entries: every step's catch-up feeds the accepted
tokens' entries (base feature beside the token after it) through every module, and depth k
attends to module ``k mod n``'s true entries and to the chain's own entries at the depths that
module ran. With one module (DeepSeek-V3, Qwen3-Next, GLM-4.5) that is exactly EAGLE's scheme,
and everything but the entry and the head is EAGLE's (:mod:`~treeopt.drafters.eagle_cache`,
:mod:`~treeopt.drafters.eagle_chains`); :mod:`~treeopt.drafters.mtp_chains` runs the depths
through the modules in turn. vLLM zeroes the embedding of the entry at position 0; treeopt does
not (only the first prompt token's entry differs). Training: the soft cross-entropy to the base
model's next-token distribution at every depth of the teacher-forced chains. A drafter of one
module also grows EAGLE-2's dynamic top-k trees through it (:mod:`~treeopt.drafters.eagle_growth`),
as SGLang's NEXTN runs its one MTP layer through its EAGLE loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.drafters.eagle import EagleDrafter
from treeopt.drafters.eagle_cache import EagleState
from treeopt.drafters.eagle_growth import dynamic_ranks, grow_dynamic
from treeopt.drafters.eagle_layer import DecoderLayer
from treeopt.drafters.heads import _projection
from treeopt.drafters.mtp_chains import cyclic_catch_up, cyclic_chains, draft_cyclic
from treeopt.errors import TreeoptError
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS

if TYPE_CHECKING:
    from treeopt.decoding.dynamic_drafting import RowPlan
    from treeopt.decoding.plan import TreePlan
    from treeopt.model.dynamic_settings import DynamicSettings

__all__ = ["MtpBlock", "MtpDrafter", "MtpModule", "MtpStage"]


class MtpBlock(DecoderLayer):
    """The module's transformer block (a Llama decoder layer, input norm included) and its
    output norm, applied inside the block where the normed state is handed down
    (``handoff_norm``: Qwen3-Next)."""

    def __init__(self, cfg: HeadsConfig) -> None:
        super().__init__(cfg, first=False)
        self.output_norm = nn.RMSNorm(cfg.hidden_size, eps=cfg.rms_norm_eps)
        self.handoff_norm = cfg.handoff_norm

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        y = super().finish(x, attended)
        return self.output_norm(y) if self.handoff_norm else y

    def head_input(self, g: torch.Tensor) -> torch.Tensor:
        """What the LM head reads of the block's output ``g``: normed once."""
        return g if self.handoff_norm else self.output_norm(g)


class MtpModule(nn.Module):
    """One MTP module: ``enorm``, ``hnorm``, ``eh_proj`` (2h → h, no bias) and its block.

    >>> cfg = HeadsConfig(kind="mtp", num_heads=2, hidden_size=8, vocab_size=16,
    ...                   share_lm_head=True, attention_heads=2)
    >>> sorted(k for k in MtpModule(cfg).state_dict() if not k.startswith("block."))
    ['eh_proj.weight', 'enorm.weight', 'hnorm.weight']
    """

    def __init__(self, cfg: HeadsConfig) -> None:
        super().__init__()
        d = cfg.hidden_size
        self.enorm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.hnorm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * d, d, bias=False)
        self.block = MtpBlock(cfg)


@dataclass(frozen=True, eq=False)
class MtpStage:
    """One module seen as an EAGLE network (:class:`~treeopt.drafters.eagle_layer.EagleNetwork`:
    ``fc``, one layer, entries and logits), with the drafter's frozen embeddings and LM head."""

    drafter: MtpDrafter
    module: MtpModule

    @property
    def fc(self) -> nn.Linear:
        return self.module.eh_proj

    @property
    def layers(self) -> list[MtpBlock]:
        return [self.module.block]

    def entries(self, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Block inputs ``eh_proj([enorm(e(token)); hnorm(h)])`` ``[b, m, d]``."""
        m = self.module
        emb = self.drafter.base_embeddings(tokens).to(features.dtype)
        return m.eh_proj(torch.cat([m.enorm(emb), m.hnorm(features)], dim=-1))

    def logits(self, g: torch.Tensor) -> torch.Tensor:
        """Logits ``[..., V]`` of block outputs ``g`` (``[..., c]`` inside a vocabulary view)."""
        return self.drafter.projected(self.drafter.base_lm_head,
                                      self.module.block.head_input(g))


class MtpDrafter(EagleDrafter):
    """An MTP drafter: ``num_layers`` modules run in turn over K depths, the base's LM head."""

    kind = KINDS["mtp"]

    def __init__(self, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
                 embeddings: nn.Module | None = None) -> None:
        nn.Module.__init__(self)
        if cfg.hidden_size % cfg.attention_heads or (
                cfg.kv_heads and cfg.attention_heads % cfg.kv_heads):
            raise TreeoptError(f"mtp config: hidden_size {cfg.hidden_size}, attention_heads "
                               f"{cfg.attention_heads} and kv_heads {cfg.kv_heads} do not divide")
        self.config = cfg
        base = lm_head if lm_head is not None else _projection(cfg, None)
        self.base_lm_head = base.requires_grad_(False)  # frozen and never saved
        if embeddings is None:
            embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.base_embeddings = embeddings.requires_grad_(False)  # frozen and never saved
        self.mtp = nn.ModuleList(MtpModule(cfg) for _ in range(cfg.num_layers))

    @classmethod
    def build(cls, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
              embeddings: nn.Module | None = None) -> MtpDrafter:
        return cls(cfg, lm_head=lm_head, embeddings=embeddings)

    def stage(self, depth: int) -> MtpStage:
        """The module that runs ``depth`` (0: the first, from the base model's features): module
        ``depth mod num_layers``.

        >>> d = MtpDrafter(HeadsConfig(kind="mtp", num_heads=4, hidden_size=8, vocab_size=16,
        ...                            num_layers=2, share_lm_head=True, attention_heads=2))
        >>> [next(i for i, m in enumerate(d.mtp) if m is d.stage(k).module) for k in range(4)]
        [0, 1, 0, 1]
        """
        return MtpStage(self, self.mtp[depth % len(self.mtp)])

    def stages(self) -> list[MtpStage]:
        """Every module, in the order of the depths they run."""
        return [self.stage(i) for i in range(len(self.mtp))]

    def entries(self, tokens: torch.Tensor, features: torch.Tensor, depth: int = 0,
                ) -> torch.Tensor:
        """Block inputs of ``depth``'s module: tokens ``[b, m]`` beside features ``[b, m, d]``."""
        return self.stage(depth).entries(tokens, features)

    # -- teacher forcing -----------------------------------------------------------------------

    def chains(self, hidden: torch.Tensor, stream: torch.Tensor, depths: int,
               ) -> list[torch.Tensor]:
        """What the LM head reads ``[b, n, d]`` (each depth's block output through its
        module's output norm) at every depth and position, teacher-forced exactly
        (:func:`~treeopt.drafters.mtp_chains.cyclic_chains`), so that :meth:`logits` (the base
        model's head) scores them and EAGLE's :meth:`rank_depths` ranks them. Differentiable."""
        outputs = cyclic_chains(self.stages(), hidden, stream, depths)
        return [self.stage(k).module.block.head_input(g) for k, g in enumerate(outputs)]

    def distill_terms(self, hidden: torch.Tensor, ids: torch.Tensor, teacher: torch.Tensor,
                      ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The soft cross-entropy to the base model's next-token distribution at every depth
        of the teacher-forced chains (DeepSeek-V3 trains its modules on cross-entropy alone)."""
        K = self.config.num_heads
        n = ids.shape[1] - 1 - K
        terms = []
        for k, z in enumerate(self.chains(hidden, ids, K)):
            logits = self.logits(z).float()
            target = teacher[:, 1 + k: 1 + k + n]
            terms.append((-(target * F.log_softmax(logits, dim=-1)).sum(-1).mean(), logits,
                          target))
        return terms

    # -- live ----------------------------------------------------------------------------------

    def start(self, *, batch: int, capacity: int) -> EagleState:
        """Every module's cache ``[modules, 2, b, kvh, capacity, hd]`` and the queue."""
        p = self.mtp[0].eh_proj.weight
        block = self.mtp[0].block
        kv = torch.zeros(len(self.mtp), 2, batch, block.kv_heads, capacity, block.head_dim,
                         dtype=p.dtype, device=p.device)
        zeros = torch.zeros(batch, dtype=torch.long, device=p.device)
        return EagleState(kv, zeros, [0] * batch, p.new_zeros(batch, 1, self.config.hidden_size),
                          zeros[:, None], zeros)

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: EagleState | None = None) -> torch.Tensor:
        """Feed the queued true entries through every module, then one forward per depth that
        has children, through that depth's module
        (:func:`~treeopt.drafters.mtp_chains.draft_cyclic`)."""
        if state is None:
            raise TreeoptError("an MTP drafter drafts from its live state (start, then advance)")
        return draft_cyclic(self.stages(), plan, root, state)

    def draft_dynamic(self, settings: DynamicSettings, hidden: torch.Tensor, root: torch.Tensor,
                      state: EagleState | None = None) -> tuple[torch.Tensor, RowPlan]:
        """A dynamic step through the one module, as EAGLE grows it
        (:func:`~treeopt.drafters.eagle_growth.grow_dynamic`): SGLang's NEXTN."""
        if state is None:
            raise TreeoptError("an MTP drafter drafts from its live state (start, then advance)")
        return grow_dynamic(self._one_module("dynamic trees"), settings, root, state)

    def rank_dynamic(self, hidden: torch.Tensor, stream: torch.Tensor, *, topk: int,
                     steps: int) -> torch.Tensor:
        """Where the true path stands in the dynamic candidate pool at every position
        (:func:`~treeopt.drafters.eagle_growth.dynamic_ranks`), through the one module."""
        return dynamic_ranks(self._one_module("dynamic trees"), hidden, stream, topk=topk,
                             steps=steps)

    def _one_module(self, what: str) -> MtpStage:
        """The drafter's one module; a drafter of several is refused ``what``, naming why."""
        if len(self.mtp) != 1:
            raise TreeoptError(f"{what} of an MTP drafter run one module, as SGLang's NEXTN "
                               f"does; this drafter has {len(self.mtp)} (num_layers)")
        return self.stage(0)

    def _catch_up(self, state: EagleState) -> torch.Tensor:
        """Feed the queued entries through every module; depth 0's output at each row's last."""
        return cyclic_catch_up(self.stages(), state)
