"""The demo's base model: a small Llama trained from scratch on the train part.

AdamW, linear warm-up then cosine decay to a tenth of the peak rate; random windows of the token
stream drawn from a seeded generator, so a run is reproducible on the same machine and thread count.

Small models trained by maximum likelihood alone fall into loops under greedy decoding: once a
span repeats, its probability of repeating again rises (Xu et al., 2022, "Learning to Break the
Loop", NeurIPS). In the last ``ditto_phase`` of the steps, a share of every batch (``ditto_share``)
is therefore a span of the corpus repeated to the window length, and on it the model is trained so
that the probability of each token in repetition n is ``ditto_lambda`` times its probability in
repetition n − 1 (their DITTO objective). The rest of the batch is plain next-token prediction.

The phase comes last, as Xu et al. apply DITTO to a trained model: a model that has not yet
learned to copy has no loops to break, and in our runs the demo's loops (``#`` lines,
``'w', 'w', …``, ``of the name of the name``) repeat every 1–6 tokens, so span lengths are drawn
log-uniformly from ``ditto_span`` to give short periods their share. Set ``ditto_share=0`` for
pure MLE.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch

from treeopt.demo.tokenizer import BOS_ID, EOS_ID, PAD_ID
from treeopt.drafters.resume import due, restore_training, save_training
from treeopt.errors import TreeoptError

if TYPE_CHECKING:
    from pathlib import Path

    from transformers import PreTrainedModel


@dataclass(frozen=True)
class BaseConfig:
    """Shape of the base model and its training schedule."""

    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 2
    num_kv_heads: int = 2
    intermediate_size: int = 384
    max_positions: int = 512
    seq_len: int = 384
    batch_size: int = 8
    steps: int = 400
    lr: float = 5e-3
    warmup: int = 20
    weight_decay: float = 0.1
    ditto_share: float = 0.0  # share of each batch given to repeated spans in the DITTO phase
    ditto_phase: float = 0.2  # the final share of the steps that is the DITTO phase
    ditto_lambda: float = 0.5  # wanted ratio of a repeated token's probability to its last one
    ditto_span: tuple[int, int] = (1, 48)  # span lengths, log-uniform in [low, high) tokens

    def __post_init__(self) -> None:
        if not 0.0 <= self.ditto_share < 1.0:
            raise TreeoptError(f"base model: ditto_share {self.ditto_share} is not in [0, 1)")
        if not 0.0 <= self.ditto_phase <= 1.0:
            raise TreeoptError(f"base model: ditto_phase {self.ditto_phase} is not in [0, 1]")
        if not 1 <= self.ditto_span[0] < self.ditto_span[1]:
            raise TreeoptError(f"base model: ditto_span {self.ditto_span} is not 1 <= low < high")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise TreeoptError(f"base model: hidden {self.hidden_size}, heads {self.num_heads}, "
                               f"kv heads {self.num_kv_heads} do not divide")
        if self.seq_len > self.max_positions:
            raise TreeoptError(f"base model: seq_len {self.seq_len} exceeds max_positions "
                               f"{self.max_positions}")

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.batch_size

    @property
    def ditto_rows(self) -> int:
        """Rows of each batch that are repeated spans, in the DITTO phase."""
        return int(round(self.ditto_share * self.batch_size))

    @property
    def ditto_start(self) -> int:
        """The first step of the DITTO phase (``steps`` when there is none).

        >>> BaseConfig(steps=100, ditto_share=0.5).ditto_start
        80
        """
        if not self.ditto_rows:
            return self.steps
        return self.steps - int(round(self.ditto_phase * self.steps))

    @property
    def train_tokens(self) -> int:
        """Tokens of ordinary next-token windows over the whole run.

        >>> BaseConfig(steps=100, seq_len=10, batch_size=8, ditto_share=0.5).train_tokens
        7200
        """
        ditto_steps = self.steps - self.ditto_start
        return self.seq_len * (self.batch_size * self.steps - self.ditto_rows * ditto_steps)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def llama_config(self, vocab_size: int) -> Any:
        from transformers import LlamaConfig

        return LlamaConfig(
            vocab_size=vocab_size, hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size, num_hidden_layers=self.num_layers,
            num_attention_heads=self.num_heads, num_key_value_heads=self.num_kv_heads,
            max_position_embeddings=self.max_positions, rms_norm_eps=1e-5, rope_theta=10000.0,
            tie_word_embeddings=True, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
            pad_token_id=PAD_ID, architectures=["LlamaForCausalLM"])


def new_model(cfg: BaseConfig, vocab_size: int, *, seed: int) -> Any:
    """A freshly initialised ``LlamaForCausalLM`` (float32, train mode)."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(cfg.llama_config(vocab_size)).train()


def windows(stream: npt.NDArray[np.int32], *, seq_len: int, count: int,
            generator: torch.Generator) -> torch.Tensor:
    """``count`` random windows of ``seq_len`` tokens from ``stream`` ``[count, seq_len]``."""
    if len(stream) <= seq_len:
        raise TreeoptError(f"the token stream has {len(stream)} tokens, not more than the "
                           f"window of {seq_len}")
    starts = torch.randint(len(stream) - seq_len, (count,), generator=generator)
    data = torch.from_numpy(stream.astype(np.int64))
    return torch.stack([data[s: s + seq_len] for s in starts.tolist()])


def repetition_loss(model: PreTrainedModel, spans: torch.Tensor, *, seq_len: int, lam: float) -> torch.Tensor:
    """DITTO's loss on ``spans`` ``[b, L]`` each repeated to ``seq_len`` tokens.

    With p_n the model's probability of a token in repetition n and p*_{n-1} that of the same token
    one repetition earlier (no gradient), the loss is mean(−log(1 − |p_n − λ·p*_{n-1}|)).
    """
    span = spans.shape[1]
    ids = spans.repeat(1, -(-seq_len // span))[:, :seq_len]
    logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1].float(), dim=-1)
    p = logp.gather(-1, ids[:, 1:, None])[..., 0].exp()  # [b, T-1]: p of token t+1
    now, before = p[:, span:], p[:, :-span].detach()  # the same token, one repetition apart
    return -torch.log((1.0 - (now - lam * before).abs()).clamp_min(1e-6)).mean()


def span_length(span: tuple[int, int], generator: torch.Generator) -> int:
    """A span length drawn log-uniformly from ``[low, high)``.

    >>> g = torch.Generator().manual_seed(0)
    >>> lengths = [span_length((1, 48), g) for _ in range(1000)]
    >>> min(lengths), max(lengths), sum(n < 7 for n in lengths) > 400
    (1, 47, True)
    """
    low, high = math.log(span[0]), math.log(span[1])
    u = float(torch.rand(1, generator=generator))
    return min(span[1] - 1, int(math.exp(low + (high - low) * u)))  # min: exp rounding at high


def lr_factor(step: int, cfg: BaseConfig) -> float:
    """Warm-up then cosine decay to 0.1 of the peak.

    >>> [round(lr_factor(s, BaseConfig(steps=10, warmup=2)), 3) for s in (0, 1, 2, 10)]
    [0.5, 1.0, 1.0, 0.1]
    """
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    done = min(1.0, (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup))
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * done))


def train_base(model: PreTrainedModel, stream: npt.NDArray[np.int32], cfg: BaseConfig, *, seed: int,
               device: str = "cpu", progress: Callable[[int, float], None] | None = None,
               checkpoint: Path | None = None, every: int | None = None) -> list[float]:
    """Train in place; return the loss of every step.

    ``checkpoint``: every ``every`` steps (default a tenth of them) the whole training state —
    weights, optimiser, schedule, the data generator, the losses so far — is written there
    atomically, and a run that finds one continues from it, taking exactly the steps an
    uninterrupted run would have taken.
    """
    model.to(device).train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.95), fused=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, cfg))
    gen = torch.Generator().manual_seed(seed)
    losses: list[float] = []
    loop = {"settings": json.dumps(cfg.to_dict(), sort_keys=True), "module": model,
            "optimizer": opt, "schedule": sched, "generator": gen}
    if checkpoint is not None and checkpoint.exists():
        losses = restore_training(checkpoint, **loop, what="base-model training")
    for step in range(len(losses), cfg.steps):
        ditto = cfg.ditto_rows if step >= cfg.ditto_start else 0
        plain = cfg.batch_size - ditto  # rows of ordinary next-token windows
        ids = windows(stream, seq_len=cfg.seq_len, count=plain, generator=gen).to(device)
        loss = model(input_ids=ids, labels=ids).loss
        if ditto:
            span = span_length(cfg.ditto_span, gen)
            spans = windows(stream, seq_len=span, count=ditto, generator=gen).to(device)
            rep = repetition_loss(model, spans, seq_len=cfg.seq_len, lam=cfg.ditto_lambda)
            loss = (plain * loss + ditto * rep) / cfg.batch_size
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if progress is not None:  # first: what it records at this step is in the checkpoint
            progress(step + 1, losses[-1])
        if checkpoint is not None and due(step + 1, cfg.steps, every):
            save_training(checkpoint, **loop, history=losses)
    model.eval().requires_grad_(False)
    return losses


def heldout_loss(model: PreTrainedModel, stream: npt.NDArray[np.int32], *, seq_len: int,
                 max_windows: int = 64) -> dict[str, float]:
    """Mean next-token cross-entropy (nats) over consecutive windows of the held-out stream."""
    device = model.get_input_embeddings().weight.device
    rows = min(max_windows, len(stream) // seq_len)
    if rows < 1:
        raise TreeoptError(f"the held-out stream has {len(stream)} tokens, fewer than one window")
    data = torch.from_numpy(stream[: rows * seq_len].astype(np.int64)).view(rows, seq_len)
    total, count = 0.0, 0
    with torch.inference_mode():
        for batch in data.split(8):
            batch = batch.to(device)
            logits = model(input_ids=batch).logits[:, :-1].float()  # [b, T-1, V]
            nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten(),
                                                    reduction="sum")
            total, count = total + float(nll), count + batch[:, 1:].numel()
    return {"loss": total / count, "perplexity": math.exp(total / count), "tokens": count}
