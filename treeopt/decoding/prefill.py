"""A run's prefills: its prompts into the cache, and each prompt's first token.

Every row's prompt at once where a run begins (:func:`prefill_rows`, right-padded), and one
prompt into one row's slots where continuous batching refills a row (:func:`prefill_row`). The
first token is drawn as a step's would be: from the row's own sampling stream at the prompt's
last position, so a prompt's tokens do not depend on the batch it decodes in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from treeopt.decoding.accept import accept
from treeopt.decoding.cache import SlotCache
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.plan import tree_plan
from treeopt.decoding.tree_forward import Verifier
from treeopt.model.tree import Tree


@dataclass(frozen=True)
class Prefilled:
    """Prompts after their prefill: their ids ``[b, longest]`` (right-padded), ``lengths``
    ``[b]``, first tokens ``[b]`` and the hidden states the drafter reads."""

    ids: torch.Tensor
    lengths: torch.Tensor
    first: torch.Tensor
    hidden: torch.Tensor


def prefill_rows(verify: Verifier, prompts: Sequence[Sequence[int]], cache: SlotCache,
                 cfg: DecodeConfig, gen: torch.Generator, keys: torch.Tensor) -> Prefilled:
    """Every prompt at once, row i into row i of ``cache``, its first token from sampling
    stream ``keys[i]``."""
    device = keys.device
    b, longest = len(prompts), max(len(p) for p in prompts)
    ids = torch.zeros(b, longest, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
    ids = ids.to(device)
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    logits, hidden = verify.prefill(ids, lengths, cache=cache)
    rows = torch.arange(b, device=device)
    first = accept(tree_plan(Tree(()), str(device)), ids[:, :1],
                   logits[rows, lengths - 1][:, None], cfg, gen,
                   positions=(lengths - 1)[:, None], keys=keys).next_root
    return Prefilled(ids, lengths, first, hidden)


def prefill_row(verify: Verifier, prompt: Sequence[int], cache: SlotCache, cfg: DecodeConfig,
                gen: torch.Generator, key: torch.Tensor) -> Prefilled:
    """One prompt into ``cache`` (one row's view), its first token from stream ``key``
    ``[1]``."""
    device = key.device
    ids = torch.tensor([list(prompt)], device=device)
    lengths = torch.tensor([len(prompt)], device=device)
    logits, hidden = verify.prefill(ids, lengths, cache=cache)
    first = accept(tree_plan(Tree(()), str(device)), ids[:, :1],
                   logits[:, -1:], cfg, gen, positions=(lengths - 1)[:, None],
                   keys=key).next_root
    return Prefilled(ids, lengths, first, hidden)
