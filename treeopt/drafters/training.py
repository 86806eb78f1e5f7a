"""Head training by self-distillation with the base model frozen.

Depth k at position t learns the base model's own next-token distribution at position t+1+k
(the teacher loss the Hydra++ recipe found best): a soft cross-entropy, weighted λ_k = decay^k
(0.8^k by default), summed over depths; each drafter gives its terms
(:meth:`~treeopt.drafters.heads.DraftHeads.distill_terms`; EAGLE adds its feature regression).
AdamW, linear warm-up then a cosine schedule. :func:`distill_draft_model` makes a draft model
the same way: a shallower copy of the base model trained on its next-token distributions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from treeopt.decoding.drafter import pick_features
from treeopt.decoding.models import model_device, model_dims
from treeopt.drafters.heads import build_heads
from treeopt.drafters.resume import due, restore_training, save_training
from treeopt.errors import FieldError, TreeoptError
from treeopt.registry.drafter_configs import TrainConfig

if TYPE_CHECKING:
    from pathlib import Path

    from transformers import PreTrainedModel

    from treeopt.drafters.heads import DraftHeads


def windows(sequences: Sequence[Sequence[int]], seq_len: int) -> torch.Tensor:
    """The sequences concatenated and cut into rows of ``seq_len`` tokens ``[rows, seq_len]``.

    >>> windows([[1, 2, 3], [4, 5, 6, 7]], 3).tolist()
    [[1, 2, 3], [4, 5, 6]]
    """
    flat = [t for s in sequences for t in s]
    if len(flat) < seq_len:
        raise FieldError("seq_len", f"{seq_len} is more than the {len(flat)} tokens of the "
                         "training data (lower it, add text, or extend the texts with greedy "
                         "continuations)")
    rows = len(flat) // seq_len
    return torch.tensor(flat[: rows * seq_len]).view(rows, seq_len)


def fit_to_data(config: TrainConfig, sequences: Sequence[Sequence[int]], *,
                context: int | None = None) -> TrainConfig:
    """``config`` with ``seq_len`` cut to the tokens the data hold and to the model's
    ``context``, so the defaults work on a few short texts; data too short to give every head a
    target raise a TreeoptError that says how much is needed.

    >>> fit_to_data(TrainConfig(num_heads=2), [[1, 2, 3], [4, 5, 6, 7]]).seq_len
    7
    >>> fit_to_data(TrainConfig(num_heads=2, seq_len=4), [[1, 2, 3], [4, 5, 6, 7]]).seq_len
    4
    """
    tokens = sum(len(s) for s in sequences)
    need = config.num_heads + 2  # a window must hold a position and the targets of every head
    if tokens < need:
        raise TreeoptError(f"the training data has {tokens} tokens; {config.num_heads} heads "
                           f"need at least {need} (add text, or extend the texts with greedy "
                           "continuations)")
    seq_len = min(config.seq_len, tokens, context or config.seq_len)
    return config if seq_len == config.seq_len else replace(config, seq_len=seq_len)


def distill_loss(model: PreTrainedModel, heads: DraftHeads, ids: torch.Tensor, *, decay: float = 0.8,
                 ) -> tuple[torch.Tensor, list[float], list[float]]:
    """Weighted teacher loss on a batch ``[b, T]``; also each head's loss and top-1 agreement."""
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False, output_hidden_states=True)
        teacher = torch.softmax(out.logits.float(), dim=-1)  # [b, T, V]
        hidden = pick_features(out.hidden_states, heads.feature_layers).float()  # [b, T, ·d]
    return _weighted(heads.distill_terms(hidden, ids, teacher), decay)


@dataclass(frozen=True)
class TeacherCache:
    """The base model's view of every training row, computed once before training (the base is
    frozen, so every step would compute it again): the features the drafter reads and, at each
    position, the teacher's ``k`` most probable next tokens with their probabilities,
    renormalised over the ``k`` (:mod:`~treeopt.drafters.vocabulary`)."""

    features: torch.Tensor  # [rows, T, ·d] in the model's dtype
    top_ids: torch.Tensor  # [rows, T, k]
    top_probs: torch.Tensor  # [rows, T, k] float32, summing to 1 at each position

    @classmethod
    def of(cls, model: PreTrainedModel, rows: torch.Tensor, feature_layers: Sequence[int], *,
           top_k: int, batch: int = 8,
           progress: Callable[[int, int], None] | None = None) -> TeacherCache:
        """One no-grad pass of ``model`` over ``rows`` ``[R, T]``, ``batch`` rows at a time."""
        feats, ids, probs = [], [], []
        with torch.no_grad():
            for i in range(0, len(rows), batch):
                out = model(input_ids=rows[i: i + batch], use_cache=False,
                            output_hidden_states=True)
                feats.append(pick_features(out.hidden_states, feature_layers))
                p, t = torch.softmax(out.logits.float(), dim=-1).topk(top_k, dim=-1)
                ids.append(t)
                probs.append(p / p.sum(-1, keepdim=True))
                if progress is not None:
                    progress(min(i + batch, len(rows)), len(rows))
        return cls(torch.cat(feats), torch.cat(ids), torch.cat(probs))


def sparse_teacher(top_ids: torch.Tensor, top_probs: torch.Tensor,
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch's candidate tokens (every position's ``k`` best, deduplicated, ascending) and
    the teacher over them ``[b, T, c]`` (each position's mass on its own ``k``).

    >>> ids = torch.tensor([[[5, 2], [2, 9]]])
    >>> vocab, teacher = sparse_teacher(ids, torch.tensor([[[0.75, 0.25], [0.5, 0.5]]]))
    >>> vocab.tolist(), teacher.tolist()
    ([2, 5, 9], [[[0.25, 0.75, 0.0], [0.5, 0.0, 0.5]]])
    """
    vocab, where = torch.unique(top_ids, return_inverse=True)
    teacher = top_probs.new_zeros(*top_ids.shape[:-1], len(vocab))
    return vocab, teacher.scatter_(-1, where, top_probs)


def cached_distill_loss(heads: DraftHeads, ids: torch.Tensor, features: torch.Tensor,
                        top_ids: torch.Tensor, top_probs: torch.Tensor, *, decay: float = 0.8,
                        ) -> tuple[torch.Tensor, list[float], list[float]]:
    """:func:`distill_loss` from a :class:`TeacherCache`'s rows: the drafter scored over the
    batch's candidate tokens against the teacher's ``k`` best (agreement within them)."""
    vocab, teacher = sparse_teacher(top_ids, top_probs)
    with heads.vocabulary(vocab):
        return _weighted(heads.distill_terms(features.float(), ids, teacher), decay)


def _weighted(terms: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], decay: float,
              ) -> tuple[torch.Tensor, list[float], list[float]]:
    """The depths' losses weighted decay^k and summed; each depth's loss and top-1 agreement."""
    total = terms[0][0].new_zeros(())
    losses, agree = [], []
    for k, (loss, logits, target) in enumerate(terms):
        total = total + decay**k * loss
        losses.append(float(loss.detach()))
        agree.append(float((logits.argmax(-1) == target.argmax(-1)).float().mean()))
    return total, losses, agree


def _schedule(cfg: TrainConfig) -> Callable[[int], float]:
    def factor(step: int) -> float:
        if step < cfg.warmup:
            return (step + 1) / cfg.warmup
        span = max(1, cfg.steps - cfg.warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - cfg.warmup) / span)))

    return factor


def _optimise(module: torch.nn.Module, data: torch.Tensor, config: TrainConfig,
              step: Callable[[torch.Tensor], tuple[torch.Tensor, dict[str, Any]]],
              progress: Callable[[int, int, float], None] | None,
              checkpoint: Path | None = None) -> list[dict[str, Any]]:
    """``config.steps`` AdamW steps on ``module``'s trainable weights, each on a random batch of
    ``data``'s rows (seeded) whose loss ``step`` gives; gradients clipped to norm 1, learning
    rate warmed up then cosine-decayed. Returns the history of every step. ``checkpoint``: the
    whole state is written there every tenth of the steps, and a run that finds it continues
    from it (:mod:`treeopt.drafters.resume`)."""
    params = [p for p in module.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(config))
    gen = torch.Generator().manual_seed(config.seed)
    history: list[dict[str, Any]] = []
    loop = {"settings": json.dumps({**config.__dict__, "rows": list(data.shape)},
                                   sort_keys=True, default=str),
            "module": module, "optimizer": opt, "schedule": sched, "generator": gen}
    if checkpoint is not None and checkpoint.exists():
        history = restore_training(checkpoint, **loop, what=f"{config.kind} training")
    module.train()
    for i in range(len(history), config.steps):
        rows = torch.randint(len(data), (min(config.batch_size, len(data)),), generator=gen)
        loss, extra = step(data[rows.to(data.device)])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        history.append({"step": i + 1, "loss": float(loss.detach()), **extra,
                        "lr": sched.get_last_lr()[0]})
        if progress is not None:
            progress(i + 1, config.steps, float(loss.detach()))
        if checkpoint is not None and due(i + 1, config.steps):
            save_training(checkpoint, **loop, history=history)
    return history


def train_heads(model: PreTrainedModel, sequences: Sequence[Sequence[int]], config: TrainConfig, *,
                heads: DraftHeads | None = None,
                progress: Callable[[int, int, float], None] | None = None,
                checkpoint: Path | None = None,
                teacher_progress: Callable[[int, int], None] | None = None,
                ) -> tuple[DraftHeads, list[dict[str, Any]]]:
    """Train (new or given) heads on ``sequences`` of token ids; return them and a loss history
    (``checkpoint``: resumable, see :func:`_optimise`). With ``config.teacher_top_k``, the
    base model's features and top-k distribution are computed once (:class:`TeacherCache`,
    ``teacher_progress`` counts its rows) and each step scores the heads over the batch's
    candidate tokens (:func:`cached_distill_loss`); else every step runs the base model and
    scores the full vocabulary."""
    torch.manual_seed(config.seed)
    device = model_device(model)
    if heads is None:
        hidden, vocab = model_dims(model)
        heads = build_heads(config.heads_config(
                                hidden, vocab, base_layers=model.config.num_hidden_layers),
                            lm_head=model.get_output_embeddings(),
                            embeddings=model.get_input_embeddings())
        heads.to(device=device)  # own weights stay float32; shared base modules are untouched
    model.requires_grad_(False)
    data = windows(sequences, config.seq_len).to(device)
    if config.teacher_top_k and getattr(heads, "takes_vocabulary", False):
        cache = TeacherCache.of(model, data, heads.feature_layers, top_k=config.teacher_top_k,
                                progress=teacher_progress)

        def step(rows: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
            loss, per_head, agree = cached_distill_loss(
                heads, data[rows], cache.features[rows], cache.top_ids[rows],
                cache.top_probs[rows], decay=config.decay)
            return loss, {"head_loss": per_head, "top1_agreement": agree}

        history = _optimise(heads, torch.arange(len(data), device=device), config, step,
                            progress, checkpoint)
        return heads.eval(), history

    def full_step(ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        loss, per_head, agree = distill_loss(model, heads, ids, decay=config.decay)
        return loss, {"head_loss": per_head, "top1_agreement": agree}

    history = _optimise(heads, data, config, full_step, progress, checkpoint)
    return heads.eval(), history


def distill_draft_model(model: PreTrainedModel, sequences: Sequence[Sequence[int]],
                        config: TrainConfig, *, layers: int = 1,
                        progress: Callable[[int, int, float], None] | None = None,
                        checkpoint: Path | None = None,
                        ) -> tuple[PreTrainedModel, list[dict[str, Any]]]:
    """A draft model for ``model``: the same architecture with ``layers`` decoder layers,
    started from the base model's embeddings, first layers, final norm and LM head (so it
    shares the tokenizer and starts close), then trained on ``sequences`` to match the base
    model's next-token distribution at every position (soft cross-entropy; the schedule and
    optimiser of :func:`train_heads`)."""
    import copy

    torch.manual_seed(config.seed)
    device = model_device(model)
    cfg = copy.deepcopy(model.config)
    if layers < 1 or layers > cfg.num_hidden_layers:
        raise TreeoptError(f"a draft model needs 1 … {cfg.num_hidden_layers} layers (the base "
                           f"model's), got {layers}")
    cfg.num_hidden_layers = layers
    draft = type(model)(cfg).to(device=device, dtype=torch.float32)
    own = {k: v for k, v in model.state_dict().items()}
    state = draft.state_dict()
    draft.load_state_dict({k: own[k].float() if k in own else v for k, v in state.items()})
    model.requires_grad_(False)

    def step(ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
        with torch.no_grad():
            teacher = torch.softmax(model(input_ids=ids, use_cache=False).logits.float(), -1)
        logits = draft(input_ids=ids, use_cache=False).logits.float()
        loss = -(teacher * torch.log_softmax(logits, dim=-1)).sum(-1).mean()
        agree = float((logits.argmax(-1) == teacher.argmax(-1)).float().mean())
        return loss, {"top1_agreement": [agree]}

    history = _optimise(draft, windows(sequences, config.seq_len).to(device), config, step,
                        progress, checkpoint)
    return draft.eval().requires_grad_(False), history
