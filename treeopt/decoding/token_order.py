"""The one ranking rule of candidate tokens: by logit, descending; equal logits by token id,
ascending. Calibration ranks true tokens by it (:func:`rank_of`), drafting takes the k best by it
(:func:`top_candidates`), and greedy verification takes the best (:func:`best_token`), so a rank
trace and live decoding agree token for token.

On the CPU, :func:`best_token` uses numpy's vectorised argmax (16-bit logits widened to float32
first, which is exact), which is faster than torch's CPU argmax on 16-bit logits; a verify step
takes one argmax over ``q × vocab`` logits.
"""

from __future__ import annotations

import numpy as np
import torch


def rank_of(logits: torch.Tensor, target: torch.Tensor, *, below: int | None = None,
            ) -> torch.Tensor:
    """Rank of ``target`` among ``logits`` sorted descending, ties by token id ascending.

    ``logits`` ``[..., V]``, ``target`` int64 ``[...]`` → int64 ``[...]``. With ``below``, a
    rank of ``below`` or more is returned as ``below`` (a trace keeps only the top-k), found
    from a top-(below+1) of each row rather than by comparing the whole vocabulary: ranks below
    it are the same, and only a row whose true logit ties at the cut is ranked in full.

    >>> rank_of(torch.tensor([[0.5, 2.0, 0.5, 1.0]]), torch.tensor([2])).tolist()
    [3]
    >>> rank_of(torch.tensor([[0.5, 2.0, 0.5, 1.0]]), torch.tensor([2]), below=2).tolist()
    [2]
    """
    vocab = logits.shape[-1]
    if below is not None and 0 < below < vocab - 1 and logits.numel():
        return _rank_below(logits, target, below)
    true = logits.gather(-1, target.unsqueeze(-1))  # [..., 1]
    ids = torch.arange(vocab, device=logits.device)
    ahead = (logits > true) | ((logits == true) & (ids < target.unsqueeze(-1)))
    rank = ahead.sum(-1)
    return rank if below is None else rank.clamp(max=below)


def _rank_below(logits: torch.Tensor, target: torch.Tensor, below: int) -> torch.Tensor:
    """:func:`rank_of` capped at ``below`` from the best ``below + 1`` of each row (v, in
    descending order, their ids beside). A true logit x under v[below-1] has ``below`` logits
    above it. Otherwise, where x > v[below], every logit not listed is under x, so the list
    alone ranks it exactly, ties included. Where x = v[below], equal logits may lie past the
    list: those rows (few, and only at the cut) are ranked over the whole vocabulary."""
    top = torch.topk(logits, below + 1, dim=-1)
    values, ids = top.values, top.indices
    true = logits.gather(-1, target.unsqueeze(-1))  # [..., 1]
    ahead = (values > true) | ((values == true) & (ids < target.unsqueeze(-1)))
    x = true.squeeze(-1)
    rank = torch.where(x < values[..., below - 1], below, ahead.sum(-1))
    cut = (x == values[..., below]) & (x >= values[..., below - 1])
    if bool(cut.any()):
        rank[cut] = rank_of(logits[cut], target[cut]).clamp(max=below)
    return rank


def best_token(logits: torch.Tensor) -> torch.Tensor:
    """The rank-0 token of each row: ``[..., V]`` → int64 ``[...]`` (the lowest id among equal
    maxima, as :func:`torch.argmax` and numpy's argmax both return).

    >>> best_token(torch.tensor([[0.5, 2.0, 2.0], [3.0, 0.0, 1.0]])).tolist()
    [1, 0]
    """
    if logits.device.type != "cpu" or not logits.dtype.is_floating_point:
        return logits.argmax(-1)
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()  # exact for 16-bit floats: the same order, the same ties
    return torch.from_numpy(np.argmax(logits.numpy(), axis=-1))


def top_candidates(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Token ids of the ``k`` best candidates ``[..., k]``, in the order :func:`rank_of` uses.

    A top-k, not a sort of the vocabulary (drafting calls this once per tree level). On the CPU:
    a top-(k+1), whose order is the rank order in every row where no two of its values are
    equal. 16-bit logits tie often (a dynamic trace ranks thousands of rows at once, most with
    a tie among their best nine), so the rows with a tie are put in order apart
    (:func:`_untie`). Elsewhere (a GPU), without reading anything back to the host, always a
    top-k of :func:`rank_keys`, which order the vocabulary exactly as the rule does.

    >>> top_candidates(torch.tensor([0.5, 2.0, 0.5, 1.0]), 4).tolist()
    [1, 3, 0, 2]
    >>> top_candidates(torch.tensor([0.5, 2.0, 0.5, 1.0]), 3).tolist()  # a tie at the cut
    [1, 3, 0]
    """
    vocab = logits.shape[-1]
    k = min(k, vocab)
    if k == 1:  # a chain's level: just the best token
        return best_token(logits)[..., None].to(logits.device)
    if logits.device.type == "cpu" and k < vocab:
        top = torch.topk(logits, k + 1, dim=-1)  # values descending
        values = top.values.float()
        v = values.numpy()  # numpy: a tiny array's checks cost a tenth
        tied = (v[..., 1:] == v[..., :-1]).any(-1)
        if not tied.any():
            return top.indices[..., :k]
        at_cut = v[..., k] == v[..., k - 1]
        return _untie(logits, values, top.indices, k, torch.from_numpy(np.asarray(tied)),
                      torch.from_numpy(np.asarray(at_cut)))
    return torch.topk(rank_keys(logits), k, dim=-1).indices


def _untie(logits: torch.Tensor, values: torch.Tensor, indices: torch.Tensor, k: int,
           tied: torch.Tensor, at_cut: torch.Tensor) -> torch.Tensor:
    """The top-k of each row in the rule's order, from its top-(k+1) ``values`` (float32,
    descending) and their ``indices``, in the rows ``tied``, where two of those values are
    equal. The tokens above the k-th value are all listed. Where the (k+1)-th value is below
    the k-th, so are the tokens of the k-th value, and the list sorted by (value, lower id
    first) is the answer. Where the two are equal (``at_cut``), tokens of the k-th value past
    the list may have lower ids: those rows take the lowest ids of that value from the whole
    row, one comparison over the vocabulary rather than a sort of it."""
    picked = indices[..., :k].clone()
    inside = tied & ~at_cut
    if inside.any():
        ids = indices[inside][..., :k]
        keys = _keys(values[inside][..., :k], ids, logits.shape[-1])
        picked[inside] = ids.gather(-1, keys.argsort(dim=-1, descending=True))
    if at_cut.any():
        picked[at_cut] = _cut_ties(logits[at_cut], values[at_cut], indices[at_cut], k)
    return picked


def _cut_ties(logits: torch.Tensor, values: torch.Tensor, indices: torch.Tensor,
              k: int) -> torch.Tensor:
    """:func:`_untie`'s rows ``[m, V]`` whose k-th and (k+1)-th values are equal: the tokens
    listed above that value, then the lowest ids of it, in the rule's order."""
    cut = values[:, k - 1]
    above = (values[:, :k] > cut[:, None]).sum(-1)  # the first `above` listed: over the cut
    equal = logits == cut[:, None].to(logits.dtype)  # exact: the cut is one of these logits
    row, token = equal.nonzero(as_tuple=True)  # by row, ids ascending
    counts = equal.sum(-1)
    place = torch.arange(len(row)) - (counts.cumsum(0) - counts)[row]  # within its row
    slot = above[row] + place
    keep = slot < k
    out = indices[:, :k].clone()
    out[row[keep], slot[keep]] = token[keep]
    keys = _keys(values[:, :k], out, logits.shape[-1])  # the listed values from `above` on:
    return out.gather(-1, keys.argsort(dim=-1, descending=True))  # the cut's, as the tokens


def rank_keys(logits: torch.Tensor) -> torch.Tensor:
    """int64 keys that order the vocabulary exactly as :func:`rank_of` ranks it, best largest:
    the float32 logit's bits made order-preserving in the high half, the token id reversed in
    the low half (so equal logits put the lower id first).

    >>> rank_keys(torch.tensor([0.5, 2.0, 0.5, -1.0])).argsort(descending=True).tolist()
    [1, 0, 2, 3]
    """
    ids = torch.arange(logits.shape[-1], device=logits.device)
    return _keys(logits.float(), ids, logits.shape[-1])


def _keys(values: torch.Tensor, ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """:func:`rank_keys` of float32 ``values`` whose token ids are ``ids``."""
    bits = (values + 0.0).view(torch.int32)  # + 0.0: −0.0 becomes +0.0, equal to it
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # negatives: larger magnitude, smaller key
    return ordered.long() * (1 << 32) + (vocab - 1 - ids)
