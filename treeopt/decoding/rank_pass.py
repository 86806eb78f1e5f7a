"""Rank traces from a model and its heads in one teacher-forced pass (what each drafter sees: docs/drafters.md).

At position t the sequence is verified up to x_t and the base model's greedy token x_{t+1} is the
tree's root. Head k (0-based) proposes x_{t+2+k}: Medusa heads read h_t only, Hydra head k reads
h_t and x_{t+1} … x_{t+1+k}. ``ranks[t, k]`` is the rank of x_{t+2+k} among head k's logits
(descending, ties by token id), or -1 beyond the recorded top-k. Positions run from the last
prompt token to the last one where every head has a target; the tail of K positions is dropped.

A continuation (``to_end``) is recorded instead at every position a live run of it visits
(:func:`run_positions`): a run ends at the continuation's last token (its EOS, or the last of its
budget) and keeps nothing after it, so a target at or past that token is a miss. A step there
then accepts what the run keeps: the walk over the trace takes every step live decoding takes.

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
    from treeopt.decoding.features import FeatureCache


def positions_range(length: int, start: int, num_heads: int) -> range:
    """Recorded positions t of a sequence of ``length`` tokens whose root is at ``start + 1``.

    >>> positions_range(10, 3, 4)
    range(3, 5)
    """
    return range(start, max(start, length - 1 - num_heads))


def run_positions(length: int, start: int) -> range:
    """Positions t a live run of a continuation of ``length`` tokens visits, its root at
    ``start + 1``: those whose root x[t+1] is not the last token (after which the run stops).

    >>> run_positions(10, 3)
    range(3, 8)
    """
    return range(start, max(start, length - 2))


def cut_to_run(ranks: npt.NDArray[np.int16], length: int, start: int) -> npt.NDArray[np.int16]:
    """``ranks`` ``[≥ n, …, K]`` of positions ``start …``, the last axis the depth (k: the
    target x[t+2+k]), cut to the n :func:`run_positions`, each target at or past the last token
    (index ``length - 1``) a miss: a step that reaches it keeps the last token as its next root,
    as a live run that stops there keeps it. (A dynamic trace's pool places, ``[n, S, S]``,
    are cut alike.)

    >>> cut_to_run(np.zeros((6, 3), np.int16), 7, 1).tolist()
    [[0, 0, 0], [0, 0, -1], [0, -1, -1], [-1, -1, -1]]
    >>> cut_to_run(np.zeros((5, 2, 2), np.int16), 6, 1)[:, 1].tolist()
    [[0, 0], [0, -1], [-1, -1]]
    """
    n, K = len(run_positions(length, start)), ranks.shape[-1]
    out = np.array(ranks[:n], dtype=np.int16)
    target = np.arange(start, start + n)[:, None] + 2 + np.arange(K)[None, :]
    past = (target >= length - 1).reshape(n, *[1] * (out.ndim - 2), K)
    out[np.broadcast_to(past, out.shape)] = -1
    return out


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
               *, top_k: int, targets: str = "tokens", to_end: bool = False,
               features: FeatureCache | None = None) -> list[npt.NDArray[np.int16]]:
    """Ranks ``[positions, K]`` of each sequence, all positions and heads in one batched pass
    (``to_end``: each a continuation, at the positions a live run visits: :func:`cut_to_run`);
    ``features``: where the base model's forward over this batch is kept for other drafters
    ranked on it (:mod:`~treeopt.decoding.features`)."""
    K, device = heads.config.num_heads, model_device(model)
    T = max(len(s) for s in sequences) + (K if to_end else 0)  # to_end: targets past the end
    ids = torch.zeros(len(sequences), T, dtype=torch.long, device=device)  # right-padded
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(list(s), device=device)
    with torch.inference_mode():
        if targets == "tokens" and not heads.kind.reads_features:  # a draft model, a lookup:
            hidden, z = None, ids  # no base forward is needed to rank them
        else:
            layers = tuple(heads.feature_layers)

            def forward() -> tuple[torch.Tensor, torch.Tensor]:
                return _stream(model, ids, targets, layers)  # [b, T, ·d], [b, T]
            hidden, z = forward() if features is None else features.get(ids, layers, targets,
                                                                         forward)
        ranks = heads.rank_depths(hidden, z, top_k=top_k)  # [b, T-1-K, K]
    ranks_np = ranks.cpu().numpy()
    if to_end:
        return [cut_to_run(ranks_np[i, st:], len(s), st)
                for i, (s, st) in enumerate(zip(sequences, starts, strict=True))]
    return [ranks_np[i, positions_range(len(s), st, K)]
            for i, (s, st) in enumerate(zip(sequences, starts, strict=True))]


def reference_ranks(model: PreTrainedModel, heads: Drafter, sequence: Sequence[int], start: int, *,
                    top_k: int, to_end: bool = False) -> npt.NDArray[np.int16]:
    """Slow, readable reference: one position and one head at a time, ranks by a stable sort
    (draft heads: :class:`~treeopt.drafters.heads.DraftHeads`' ``features`` and
    ``head_logits``); ``to_end``: as :func:`rank_batch`'s, a target at or past the last token a
    miss."""
    K, device = heads.config.num_heads, model_device(model)
    ids = torch.tensor([list(sequence)], device=device)
    rows = (run_positions(len(sequence), start) if to_end
            else positions_range(len(sequence), start, K))
    out = np.full((len(rows), K), -1, dtype=np.int16)
    with torch.inference_mode():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states[-1]
        hidden = heads.features(hidden)[0]
        for row, t in enumerate(rows):
            for k in range(K):
                if to_end and t + 2 + k >= len(sequence) - 1:  # no target the run keeps
                    break
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
