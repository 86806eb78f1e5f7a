"""Statistics of a decoding run: accepted lengths (histogram, mean, standard error), time split."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class DecodeStats:
    """Steps, tokens, accepted length per step, and seconds (total, drafting, verify, bookkeeping).

    >>> s = DecodeStats(steps=3, tokens=7, accept_lengths=(1, 3, 2), seconds=2.0,
    ...                 draft_s=0.5, verify_s=1.0, bookkeeping_s=0.25)
    >>> s.mean_accept_length, s.histogram, s.tokens_per_s
    (2.0, [0, 1, 1, 1], 3.5)
    """

    steps: int
    tokens: int
    accept_lengths: tuple[int, ...]
    seconds: float
    draft_s: float
    verify_s: float
    bookkeeping_s: float

    @property
    def mean_accept_length(self) -> float:
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0

    @property
    def stderr(self) -> float:
        """Standard error of the mean accepted length."""
        n = len(self.accept_lengths)
        if n < 2:
            return 0.0
        m = self.mean_accept_length
        var = sum((x - m) ** 2 for x in self.accept_lengths) / (n - 1)
        return math.sqrt(var / n)

    @property
    def histogram(self) -> list[int]:
        """``histogram[L]`` = number of steps that accepted L tokens."""
        top = max(self.accept_lengths, default=0)
        hist = [0] * (top + 1)
        for x in self.accept_lengths:
            hist[x] += 1
        return hist

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": self.steps, "tokens": self.tokens,
            "mean_accept_length": self.mean_accept_length, "stderr": self.stderr,
            "accept_length_histogram": self.histogram, "tokens_per_s": self.tokens_per_s,
            "seconds": self.seconds,
            "seconds_split": {"draft": self.draft_s, "verify": self.verify_s,
                              "bookkeeping": self.bookkeeping_s},
        }


def combine(stats: Sequence[DecodeStats]) -> DecodeStats:
    """Pool several runs (for example one per prompt) into one.

    >>> a = DecodeStats(1, 2, (2,), 1.0, 0.1, 0.8, 0.1)
    >>> combine([a, a]).accept_lengths, combine([a, a]).tokens_per_s
    ((2, 2), 2.0)
    """
    return DecodeStats(
        steps=sum(s.steps for s in stats), tokens=sum(s.tokens for s in stats),
        accept_lengths=tuple(x for s in stats for x in s.accept_lengths),
        seconds=sum(s.seconds for s in stats), draft_s=sum(s.draft_s for s in stats),
        verify_s=sum(s.verify_s for s in stats),
        bookkeeping_s=sum(s.bookkeeping_s for s in stats))


@dataclass(frozen=True)
class DecodeResult:
    """The new tokens (prompt excluded) and the run's statistics."""

    tokens: tuple[int, ...]
    stats: DecodeStats
