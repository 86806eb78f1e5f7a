"""Accepted-length statistics: the one type simulation, live decoding and the demo report.

A step (or a trace position) accepts L tokens: the base model's own token plus the tree nodes it
kept. :class:`AcceptStats` holds the histogram of L and, when the steps come from several
sequences, each sequence's accepted tokens and steps. Steps within one sequence are not
independent draws (a stretch the model finds easy gives several long acceptances in a row), so
the standard error is then taken over sequences (:func:`ratio_stderr`); otherwise over steps.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class AcceptStats:
    """Histogram of accepted lengths (``histogram[L]``: steps that accepted L; index 0 unused)
    and, optionally, ``(accepted tokens, steps)`` of each sequence the steps came from.

    >>> s = AcceptStats.of([1, 3, 2])
    >>> s.mean_accept_length, s.histogram, s.count
    (2.0, (0, 1, 1, 1), 3)
    >>> round(AcceptStats.of([2, 2, 4, 4], sequences=[(4, 2), (8, 2)]).stderr, 6)
    1.0
    """

    histogram: tuple[int, ...]
    sequences: tuple[tuple[int, int], ...] = ()

    @classmethod
    def of(cls, lengths: Iterable[int] | npt.NDArray[np.int64], *, min_bins: int = 0,
           sequences: Sequence[tuple[int, int]] = ()) -> AcceptStats:
        """From accepted lengths; the histogram has at least ``min_bins`` entries."""
        arr = np.asarray(list(lengths) if not isinstance(lengths, np.ndarray) else lengths,
                         dtype=np.int64)
        hist = np.bincount(arr, minlength=min_bins) if arr.size else np.zeros(min_bins, np.int64)
        return cls(tuple(int(c) for c in hist), tuple((int(t), int(s)) for t, s in sequences))

    @property
    def count(self) -> int:
        """Steps (or positions) counted."""
        return int(sum(self.histogram))

    @property
    def accepted(self) -> int:
        """Tokens accepted over all steps."""
        return int(sum(length * c for length, c in enumerate(self.histogram)))

    @property
    def mean_accept_length(self) -> float:
        return self.accepted / self.count if self.count else 0.0

    @property
    def stderr(self) -> float:
        """Standard error of the mean: over sequences when there are several, else over steps."""
        if len(self.sequences) >= 2:
            tokens, steps = zip(*self.sequences, strict=True)
            return ratio_stderr(tokens, steps)
        n = self.count
        if n < 2:
            return 0.0
        m = self.mean_accept_length
        ss = sum(c * (length - m) ** 2 for length, c in enumerate(self.histogram))
        return math.sqrt(ss / (n - 1) / n)

    def to_json(self) -> dict[str, Any]:
        return {"mean_accept_length": self.mean_accept_length, "stderr": self.stderr,
                "histogram": list(self.histogram)}


def ratio_stderr(tokens: Sequence[float], steps: Sequence[float]) -> float:
    """Standard error of ``sum(tokens) / sum(steps)`` with whole sequences as the sampled units.

    By the delta method: ``se² = Σ (y_i − R x_i)² / (n (n − 1) x̄²)``.

    >>> ratio_stderr([4, 8], [2, 2])  # sequence means 2 and 4: R = 3, se = 1
    1.0
    """
    y, x = np.asarray(tokens, np.float64), np.asarray(steps, np.float64)
    n = len(y)
    if n < 2:
        return 0.0
    r = y.sum() / x.sum()
    return float(np.sqrt(((y - r * x) ** 2).sum() / (n * (n - 1) * x.mean() ** 2)))
