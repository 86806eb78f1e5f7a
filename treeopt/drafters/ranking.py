"""The one ranking rule of candidate tokens: by logit, descending; equal logits by token id,
ascending. Calibration ranks true tokens by it (:func:`rank_of`), drafting takes the k best by it
(:func:`top_candidates`), and greedy verification takes the best (:func:`best_token`), so a rank
trace and live decoding agree token for token.

On the CPU, :func:`best_token` uses numpy's vectorised argmax: this torch build's CPU argmax is
an order of magnitude slower, and a verify step takes one argmax over ``q × vocab`` logits.
"""

from __future__ import annotations

import numpy as np
import torch


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


def best_token(logits: torch.Tensor) -> torch.Tensor:
    """The rank-0 token of each row: ``[..., V]`` → int64 ``[...]`` (the lowest id among equal
    maxima, as :func:`torch.argmax` and numpy's argmax both return).

    >>> best_token(torch.tensor([[0.5, 2.0, 2.0], [3.0, 0.0, 1.0]])).tolist()
    [1, 0]
    """
    if logits.device.type == "cpu" and logits.dtype in (torch.float32, torch.float64):
        return torch.from_numpy(np.argmax(logits.numpy(), axis=-1))
    return logits.argmax(-1)


def top_candidates(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Token ids of the ``k`` best candidates ``[..., k]``, in the order :func:`rank_of` uses.

    A top-(k+1) and a sort of k, not a sort of the vocabulary (drafting calls this once per tree
    level); only a tie across the k-th place (the k-th and (k+1)-th best logits equal) falls back
    to the full stable sort.

    >>> top_candidates(torch.tensor([0.5, 2.0, 0.5, 1.0]), 4).tolist()
    [1, 3, 0, 2]
    >>> top_candidates(torch.tensor([0.5, 2.0, 0.5, 1.0]), 3).tolist()  # a tie at the cut
    [1, 3, 0]
    """
    vocab = logits.shape[-1]
    k = min(k, vocab)
    if k == 1:  # a chain's level: just the best token
        return best_token(logits)[..., None].to(logits.device)
    top = torch.topk(logits, min(k + 1, vocab), dim=-1)
    if k < vocab and bool((top.values[..., k - 1] == top.values[..., k]).any()):
        return torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
    ids = top.indices[..., :k].sort(dim=-1).values  # the k best, ids ascending: the tie order
    order = torch.sort(logits.gather(-1, ids), dim=-1, descending=True, stable=True).indices
    return ids.gather(-1, order)
