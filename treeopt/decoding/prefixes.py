"""Each row's prefix in a run's cache, and the KV moves that extend it.

A step writes every row's tree at the frontier (the longest prefix's end); rows accept different
lengths, so their prefixes are ragged, and the mask keeps each row to its own. After the step
each row's accepted keys and values move down to the end of its prefix (:meth:`Prefixes.
extend`), unless every accepted path already sits there. A row's slots past its length hold
stale entries the mask hides, so a row that takes a new prompt overwrites its slots in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from treeopt.decoding.accept import Verdict
from treeopt.decoding.cache import SlotCache

CAPACITY_BUCKET = 256  # a compiled run's cache capacity is a multiple of this


def run_capacity(*, longest: int, new_tokens: int, tokens: int, fed: int, static: bool) -> int:
    """Cache slots for a run: the longest prompt, its new tokens, room for two steps of
    ``tokens`` and the ``fed`` slots a dynamic drafter fills, and one scratch slot (where moves
    of unaccepted nodes go); compiled (``static``) runs round up to :data:`CAPACITY_BUCKET`, so
    one graph serves every prompt length in a bucket.

    >>> run_capacity(longest=10, new_tokens=20, tokens=4, fed=0, static=False)
    39
    >>> run_capacity(longest=10, new_tokens=20, tokens=4, fed=0, static=True)
    256
    """
    capacity = longest + new_tokens + 2 * tokens + fed + 1
    if static:  # compiled steps: one graph per bucket of capacity, not per prompt
        capacity = -(-capacity // CAPACITY_BUCKET) * CAPACITY_BUCKET
    return capacity


def in_place(accepted: Sequence[int], paths: Sequence[Sequence[int]], lens: Sequence[int],
             frontier: int) -> bool:
    """Whether every row's accepted path already sits at its prefix's end: its prefix reaches
    the frontier and it accepted the tree's first nodes in order (a row that accepted nothing
    has nothing to move).

    >>> in_place([2, 0], [[0, 1], [0, 2]], [7, 5], 7)
    True
    >>> in_place([2, 1], [[0, 2], [0]], [7, 7], 7)
    False
    """
    return all(lens[i] == frontier and list(paths[i][:n]) == list(range(n))
               for i, n in enumerate(accepted) if n)


class Prefixes:
    """The rows' prefixes in ``cache``: their lengths on the device (``lengths`` ``[b]``, what
    a step's mask and positions read) and on the host (``lens``), and the ``frontier``."""

    def __init__(self, cache: SlotCache, *, scratch: int) -> None:
        self.cache, self.scratch = cache, scratch
        self.lengths = torch.zeros(0, dtype=torch.long)
        self.lens: list[int] = []
        self.frontier = 0

    def start(self, lengths: torch.Tensor, lens: list[int]) -> None:
        """The prompts' lengths after the prefill."""
        self.lengths, self.lens = lengths, lens
        self.frontier = max(lens)

    def extend(self, verdict: Verdict, steps: torch.Tensor, accepted: list[int],
               paths: Sequence[Sequence[int]]) -> None:
        """Move each row's ``accepted`` keys and values (its ``paths``, root first) from the
        frontier to the end of its prefix, and lengthen the prefixes."""
        if not in_place(accepted, paths, self.lens, self.frontier):
            n = torch.tensor(accepted, device=self.lengths.device)
            valid = steps[None] < n[:, None]  # [b, depth+1]
            source = torch.where(valid, self.frontier + verdict.path, self.scratch)
            target = torch.where(valid, self.lengths[:, None] + steps, self.scratch)
            self.cache.move(source, target)
            self.lengths = self.lengths + n
        elif any(accepted):
            self.lengths = self.lengths + torch.tensor(accepted, device=self.lengths.device)
        self.lens = [a + b for a, b in zip(self.lens, accepted, strict=True)]
        self.frontier = max(self.lens)

    def row_cache(self, row: int) -> SlotCache:
        """A view of ``row``'s slots alone, for its new prompt's prefill."""
        return SlotCache(self.cache.kv[:, :, row: row + 1], widths=self.cache.widths)

    def own_lengths(self) -> None:
        """The device lengths become this run's own copy, safe to write row by row."""
        self.lengths = self.lengths.clone()

    def restart(self, row: int, length: int) -> None:
        """``row`` holds a new prompt of ``length`` tokens (:meth:`reframe` once all are in)."""
        self.lengths[row], self.lens[row] = length, length

    def reframe(self) -> None:
        """The frontier after rows restarted."""
        self.frontier = max(self.lens)
