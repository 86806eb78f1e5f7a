"""The base model's continuations of prompts, kept in a folder and shared by every drafter
calibrated on them.

A calibration run decodes each prompt with the base model (greedy, or sampled on its stream)
and then ranks the drafter against those tokens, teacher-forced. The decoding is what costs —
one sequential step per new token — and it does not depend on the drafter: the same model,
prompts, decoding settings and sampling streams give the same tokens. A
:class:`ContinuationStore` keeps each batch's continuations under a key of exactly those inputs,
so a demo build that calibrates six drafters on the same prompts decodes them once.

The store belongs to one model in one dtype (its caller's: a demo build's work directory); the
``model`` label passed in is part of the key, so another model's continuations are never
returned. Files are ``np.savez`` of int arrays, read with ``allow_pickle=False``, written
atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np


class ContinuationStore:
    """Prompt + continuation token lists by (model, prompts, decoding settings), in ``root``.

    >>> import tempfile
    >>> store = ContinuationStore(tempfile.mkdtemp())
    >>> made = []
    >>> def decode():
    ...     made.append(1)
    ...     return [[1, 2, 3], [4, 5]]
    >>> store.get("m", [[1], [4]], {"max_new_tokens": 2}, decode)
    [[1, 2, 3], [4, 5]]
    >>> store.get("m", [[1], [4]], {"max_new_tokens": 2}, decode), len(made)
    ([[1, 2, 3], [4, 5]], 1)
    >>> _ = store.get("m", [[1], [4]], {"max_new_tokens": 3}, decode); len(made)
    2
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def key(self, model: str, prompts: Sequence[Sequence[int]], settings: dict[str, Any]) -> str:
        """The key of one batch: a digest of the model label, the settings and the prompts."""
        h = hashlib.sha256(json.dumps([model, settings], sort_keys=True).encode())
        for p in prompts:
            h.update(np.asarray(p, dtype=np.int64).tobytes() + b"|")
        return h.hexdigest()[:24]

    def get(self, model: str, prompts: Sequence[Sequence[int]], settings: dict[str, Any],
            decode: Callable[[], list[list[int]]]) -> list[list[int]]:
        """The stored sequences of this batch, or ``decode()``'s, stored first."""
        path = self.root / f"{self.key(model, prompts, settings)}.npz"
        if path.exists():
            with np.load(path, allow_pickle=False) as f:
                tokens, lengths = f["tokens"], f["lengths"]
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            return [tokens[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        seqs = decode()
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".", suffix=".npz")
        os.close(fd)
        np.savez(tmp, tokens=np.asarray([t for s in seqs for t in s], dtype=np.int64),
                 lengths=np.asarray([len(s) for s in seqs], dtype=np.int64))
        os.replace(tmp, path)
        return seqs


def weights_digest(model: Any) -> str:
    """A short digest of ``model``'s parameters and buffers (names, dtypes, shapes, bytes)."""
    import torch

    h = hashlib.sha256()
    for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


__all__ = ["ContinuationStore", "weights_digest"]
