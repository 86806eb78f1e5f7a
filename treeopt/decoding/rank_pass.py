"""Rank traces from a model and its heads in one teacher-forced pass (what each drafter sees: docs/drafters.md).

At position t the sequence is verified up to x_t and the base model's greedy token x_{t+1} is the
tree's root. Head k (0-based) proposes x_{t+2+k}: Medusa heads read h_t only, Hydra head k reads
h_t and x_{t+1} … x_{t+1+k}. ``ranks[t, k]`` is the rank of x_{t+2+k} among head k's logits
(descending, ties by token id), or -1 beyond the recorded top-k. Positions run from the last
prompt token to the last one where every head has a target; the tail of K positions is dropped.

With ``targets="argmax"`` (a user's own texts) the stream x is replaced by the base model's
argmax at each position, an approximation of the greedy continuation: h_t still reads the text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from treeopt.decoding.drafter import pick_features
from treeopt.decoding.models import model_device

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.drafter import Drafter


def positions_range(length: int, start: int, num_heads: int) -> range:
    """Recorded positions t of a sequence of ``length`` tokens whose root is at ``start + 1``.

    >>> positions_range(10, 3, 4)
    range(3, 5)
    """
    return range(start, max(start, length - 1 - num_heads))


def _stream(model: PreTrainedModel, ids: torch.Tensor, targets: str, layers: tuple[int, ...] = (),
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The drafter's features ``[b, T, ·d]`` (the base hidden states ``layers``; empty: the last)
    and the token stream it is ranked against ``[b, T]``."""
    keep = 0 if targets == "argmax" else 1  # skip the LM head over positions when unused
    out = model(input_ids=ids, use_cache=False, output_hidden_states=True, logits_to_keep=keep)
    hidden = pick_features(out.hidden_states, layers)
    if targets == "tokens":
        return hidden, ids
    greedy = out.logits.argmax(-1)  # [b, T]: the base model's next token after each position
    return hidden, torch.cat([ids[:, :1], greedy[:, :-1]], dim=1)


def rank_batch(model: PreTrainedModel, heads: Drafter, sequences: Sequence[Sequence[int]], starts: Sequence[int],
               *, top_k: int, targets: str = "tokens") -> list[npt.NDArray[np.int16]]:
    """Ranks ``[positions, K]`` of each sequence, all positions and heads in one batched pass."""
    K, device = heads.config.num_heads, model_device(model)
    T = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), T, dtype=torch.long, device=device)  # right-padded
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(list(s), device=device)
    with torch.inference_mode():
        if targets == "tokens" and not heads.kind.reads_features:  # a draft model, a lookup:
            hidden, z = None, ids  # no base forward is needed to rank them
        else:
            hidden, z = _stream(model, ids, targets, heads.feature_layers)  # [b, T, ·d], [b, T]
        ranks = heads.rank_depths(hidden, z, top_k=top_k)  # [b, T-1-K, K]
    ranks_np = ranks.cpu().numpy()
    return [ranks_np[i, positions_range(len(s), st, K)]
            for i, (s, st) in enumerate(zip(sequences, starts, strict=True))]


def reference_ranks(model: PreTrainedModel, heads: Drafter, sequence: Sequence[int], start: int, *,
                    top_k: int) -> npt.NDArray[np.int16]:
    """Slow, readable reference: one position and one head at a time, ranks by a stable sort
    (draft heads: :class:`~treeopt.drafters.heads.DraftHeads`' ``features`` and
    ``head_logits``)."""
    K, device = heads.config.num_heads, model_device(model)
    ids = torch.tensor([list(sequence)], device=device)
    out = np.full((len(positions_range(len(sequence), start, K)), K), -1, dtype=np.int16)
    with torch.inference_mode():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[-1]
        hidden = heads.features(hidden)[0]
        for row, t in enumerate(positions_range(len(sequence), start, K)):
            for k in range(K):
                prev = ids[:, t + 1: t + 2 + k][None]  # [1, 1, k+1]
                logits = heads.head_logits(k, hidden[:, t: t + 1], prev)[0, 0]  # [V]
                order = torch.sort(logits, descending=True, stable=True).indices.tolist()
                rank = order.index(int(sequence[t + 2 + k]))
                out[row, k] = rank if rank < top_k else -1
    return out


def greedy_continuations(model: PreTrainedModel, prompts: Sequence[Sequence[int]], *,
                         max_new_tokens: int, eos_token_id: int | None = None,
                         ) -> list[list[int]]:
    """Prompt + greedy continuation of each prompt, all decoded in one batch by the live loop
    with an empty tree. A sequence stops after its first EOS; the others run to
    ``max_new_tokens``."""
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import decode
    from treeopt.model.tree import Tree

    run = decode(model, None, Tree(()), prompts,
                 config=DecodeConfig(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id))
    return [[*p, *t] for p, t in zip(prompts, run.tokens, strict=True)]


def sampled_continuations(model: PreTrainedModel, prompts: Sequence[Sequence[int]], *,
                          config: DecodeConfig, streams: Sequence[int]) -> list[list[int]]:
    """Prompt + sampled continuation of each prompt (mode ``sample`` of ``config``), drawn by the
    live loop with an empty tree on sampling stream ``streams[i]``: exactly the tokens live
    sample-and-match decoding of that prompt with that stream emits."""
    from treeopt.decoding.loop import decode
    from treeopt.model.tree import Tree

    run = decode(model, None, Tree(()), prompts, config=config, streams=streams)
    return [[*p, *t] for p, t in zip(prompts, run.tokens, strict=True)]
