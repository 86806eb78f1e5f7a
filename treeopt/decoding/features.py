"""The base model's teacher-forced features of a batch, kept for every drafter ranked on it.

A drafter that reads the base model's hidden states (Medusa and Hydra heads, EAGLE) is ranked
over the features of one teacher-forced forward of the sequences
(:mod:`~treeopt.decoding.rank_pass`). That forward does not depend on the drafter: the same
model, token batch, feature layers and target stream give the same tensors. On SmolLM2 it costs more than the ranking (16
continuations of 302 tokens, bf16, one thread: 12.7 s against 7.5 s), and a demo build ranks
three such drafters over the same continuations. A :class:`FeatureCache` keeps each batch's
features in memory under a key of exactly those inputs, so the forward runs once.

The cache belongs to one model (its caller's: a demo build's context, which forgets it with the
model); it holds what it is given until dropped. A chunk of 16 sequences of 300 tokens over a
576-wide model is 5.5 MB in bf16.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch

Features = tuple[torch.Tensor, torch.Tensor]  # the features [b, T, ·d] and the stream [b, T]


class FeatureCache:
    """A batch's features by (token batch, feature layers, targets).

    >>> cache = FeatureCache()
    >>> made = []
    >>> def forward():
    ...     made.append(1)
    ...     return torch.ones(1, 2, 3), torch.zeros(1, 2, dtype=torch.long)
    >>> ids = torch.tensor([[5, 6]])
    >>> hidden, z = cache.get(ids, (), "tokens", forward)
    >>> _ = cache.get(ids.clone(), (), "tokens", forward)  # the same batch: kept
    >>> _ = cache.get(ids, (2,), "tokens", forward)  # other layers: computed
    >>> len(made), len(cache)
    (2, 2)
    """

    def __init__(self) -> None:
        self._kept: dict[str, Features] = {}

    def __len__(self) -> int:
        return len(self._kept)

    def get(self, ids: torch.Tensor, layers: tuple[int, ...], targets: str,
            forward: Callable[[], Features]) -> Features:
        """The features of ``ids`` at ``layers`` against ``targets``: kept, or ``forward()``
        computed and kept."""
        key = _key(ids, layers, targets)
        if key not in self._kept:
            self._kept[key] = forward()
        return self._kept[key]


def _key(ids: torch.Tensor, layers: tuple[int, ...], targets: str) -> str:
    digest = hashlib.sha256(ids.detach().cpu().numpy().tobytes())
    digest.update(repr((tuple(ids.shape), str(ids.dtype), tuple(layers), targets)).encode())
    return digest.hexdigest()


__all__ = ["FeatureCache", "Features"]
