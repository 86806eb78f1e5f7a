"""Responses served before a run: the history that warms suffix decoding's global tree.

A server running suffix decoding (vLLM's ``method: suffix``) keeps the responses of the requests
it served (up to ``max_cached_requests``) and drafts from them; its acceptance on a new request
depends on that history. A fresh run starts with an empty cache, as a server just started. A
*responses file* hands a run the history of a server that has served other requests first, so a
trace and the live decoding it predicts both start from the same warm cache.

The file is ``np.savez`` of ``tokens`` (int32, the responses one after another) and
``lengths`` (int64, each response's tokens), read with ``allow_pickle=False`` and written
atomically. A calibration of suffix decoding writes the responses of the requests it
calibrated; the history's identity is :func:`history_digest` (its count and a hash of its
tokens), which a drafter's config records so that traces of different histories never mix.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from treeopt.errors import TreeoptError
from treeopt.files import atomic_write

RESPONSES_FILE = "history.npz"  # a drafter directory's copy of its history


def write_responses(path: str | os.PathLike[str], responses: Sequence[Sequence[int]]) -> Path:
    """Write ``responses`` (token lists, in the order they were served) to ``path``."""
    target = Path(path)
    lengths = np.array([len(r) for r in responses], dtype=np.int64)
    tokens = (np.concatenate([np.asarray(r, dtype=np.int64) for r in responses])
              if len(responses) else np.zeros(0, np.int64))
    if tokens.size and (tokens.min() < 0 or tokens.max() > np.iinfo(np.int32).max):
        raise TreeoptError(f"{target}: responses hold tokens outside 0 … 2^31 - 1")
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, tokens=tokens.astype(np.int32), lengths=lengths)

    return atomic_write(target, write)


def read_responses(path: str | os.PathLike[str], *, vocab_size: int) -> list[list[int]]:
    """The responses in ``path``; a file that is missing, unreadable or inconsistent, or holds a
    token outside the vocabulary, is refused naming it.

    >>> import tempfile
    >>> p = write_responses(Path(tempfile.mkdtemp()) / "r.npz", [[5, 6], [], [7]])
    >>> read_responses(p, vocab_size=10)
    [[5, 6], [], [7]]
    """
    p = Path(path)
    if not p.is_file():
        raise TreeoptError(f"{p}: no such responses file (a calibration of suffix decoding "
                           f"writes one, given where)")
    try:
        with np.load(p, allow_pickle=False) as z:
            tokens, lengths = np.asarray(z["tokens"]), np.asarray(z["lengths"])
    except (OSError, ValueError, KeyError) as exc:
        raise TreeoptError(f"{p}: not a responses file (np.savez of tokens and lengths): "
                           f"{exc}") from None
    if (tokens.ndim != 1 or lengths.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer)
            or not np.issubdtype(lengths.dtype, np.integer)):
        raise TreeoptError(f"{p}: tokens and lengths must be 1-D integer arrays")
    if (lengths < 0).any() or int(lengths.sum()) != tokens.size:
        raise TreeoptError(f"{p}: lengths sum to {int(lengths.sum())}, but it holds "
                           f"{tokens.size} tokens")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise TreeoptError(f"{p}: tokens must lie in 0 … {vocab_size - 1} (the model's "
                           f"vocabulary), found {int(tokens.min())} … {int(tokens.max())}")
    ends = np.cumsum(lengths)
    return [tokens[e - n: e].tolist() for n, e in zip(lengths.tolist(), ends.tolist(),
                                                      strict=True)]


def history_digest(responses: Sequence[Sequence[int]]) -> str:
    """The identity of a history: how many responses, and a hash of their tokens in order
    ("" for none).

    >>> history_digest([]), history_digest([[1, 2], [3]])
    ('', '2 responses, sha256 08b9fe45c156')
    """
    if not responses:
        return ""
    h = hashlib.sha256()
    for r in responses:
        h.update(np.asarray(r, dtype=np.int64).tobytes() + b"|")
    return f"{len(responses)} responses, sha256 {h.hexdigest()[:12]}"
