"""Responses served before a run: the history that warms suffix decoding's global tree.

A server running suffix decoding (vLLM's ``method: suffix``) keeps the responses of the requests
it served (up to ``max_cached_requests``) and drafts from them; its acceptance on a new request
depends on that history. A fresh run starts with an empty cache, as a server just started. A
:class:`History` hands a run the cache of a server that has served other requests first, so a
trace and the live decoding it predicts both start from the same warm cache.

Each response is kept with the :func:`~treeopt.model.trace.prompt_digest` of the prompt it
answered, so that a request of the same prompt never meets its own answer: while it is ranked or
decoded, that response is forgotten (suffix decoding's *leave-one-out*). Ranked with the history
of its own prompts, a calibration set then prices a server in its steady state, each problem
meeting every other one's response.

The file is ``np.savez`` of ``tokens`` (int32, the responses one after another), ``lengths``
(int64, each response's tokens) and ``prompts`` (each one's prompt digest), read with
``allow_pickle=False`` and written atomically. A calibration of suffix decoding writes the
responses of the requests it calibrated; :meth:`History.digest` (its count and a hash of its
tokens and prompts) is what a drafter's config records, so that traces of different histories
never mix.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from treeopt.errors import TreeoptError
from treeopt.files import atomic_write

RESPONSES_FILE = "history.npz"  # a drafter directory's copy of its history


@dataclass(frozen=True)
class History:
    """Responses in the order they were served, each with its prompt's digest ("": unknown)."""

    responses: tuple[tuple[int, ...], ...] = ()
    prompts: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "responses", tuple(tuple(int(t) for t in r)
                                                    for r in self.responses))
        prompts = tuple(str(p) for p in self.prompts) or ("",) * len(self.responses)
        if len(prompts) != len(self.responses):
            raise TreeoptError(f"a history of {len(self.responses)} responses has "
                               f"{len(prompts)} prompt digests")
        object.__setattr__(self, "prompts", prompts)

    def __len__(self) -> int:
        return len(self.responses)

    def answered(self, prompt: str) -> list[int]:
        """The indices of the responses to the prompt of digest ``prompt``.

        >>> History(((1,), (2,), (3,)), ("a", "", "a")).answered("a")
        [0, 2]
        """
        return list(self._answers.get(prompt, ())) if prompt else []

    @cached_property
    def _answers(self) -> dict[str, tuple[int, ...]]:
        """Each known prompt digest's response indices, built once (every request that enters
        a cache asks)."""
        out: dict[str, list[int]] = {}
        for i, p in enumerate(self.prompts):
            if p:
                out.setdefault(p, []).append(i)
        return {p: tuple(ids) for p, ids in out.items()}

    def digest(self) -> str:
        """The identity of the history: how many responses, and a hash of their tokens and
        prompts in order ("" for none).

        >>> History().digest(), History(((1, 2), (3,)), ("a", "b")).digest()
        ('', '2 responses, sha256 a79dc588b8ff')
        """
        if not self.responses:
            return ""
        h = hashlib.sha256()
        for r, p in zip(self.responses, self.prompts, strict=True):
            h.update(np.asarray(r, dtype=np.int64).tobytes() + b"|" + p.encode() + b"|")
        return f"{len(self.responses)} responses, sha256 {h.hexdigest()[:12]}"


def write_responses(path: str | os.PathLike[str], history: History) -> Path:
    """Write ``history`` to ``path``."""
    target = Path(path)
    lengths = np.array([len(r) for r in history.responses], dtype=np.int64)
    tokens = (np.concatenate([np.asarray(r, dtype=np.int64) for r in history.responses])
              if len(history) else np.zeros(0, np.int64))
    if tokens.size and (tokens.min() < 0 or tokens.max() > np.iinfo(np.int32).max):
        raise TreeoptError(f"{target}: responses hold tokens outside 0 … 2^31 - 1")

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            np.savez_compressed(f, tokens=tokens.astype(np.int32), lengths=lengths,
                                prompts=np.array(history.prompts, dtype=str))

    return atomic_write(target, write)


def read_responses(path: str | os.PathLike[str], *, vocab_size: int) -> History:
    """The history in ``path``; a file that is missing, unreadable or inconsistent, or holds a
    token outside the vocabulary, is refused naming it.

    >>> import tempfile
    >>> h = History(((5, 6), (), (7,)), ("a", "", "c"))
    >>> read_responses(write_responses(Path(tempfile.mkdtemp()) / "r.npz", h), vocab_size=10) == h
    True
    """
    p = Path(path)
    if not p.is_file():
        raise TreeoptError(f"{p}: no such responses file (a calibration of suffix decoding "
                           f"writes one, given where)")
    try:
        with np.load(p, allow_pickle=False) as z:
            tokens, lengths = np.asarray(z["tokens"]), np.asarray(z["lengths"])
            prompts = np.asarray(z["prompts"]) if "prompts" in z.files else np.array([], str)
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
    if prompts.size and (prompts.shape != lengths.shape or prompts.dtype.kind != "U"):
        raise TreeoptError(f"{p}: prompts must name one prompt digest per response")
    ends = np.cumsum(lengths)
    responses = [tokens[e - n: e].tolist() for n, e in zip(lengths.tolist(), ends.tolist(),
                                                           strict=True)]
    return History(tuple(tuple(r) for r in responses), tuple(prompts.tolist()))
