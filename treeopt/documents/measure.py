"""How long a live figure is measured: one stopping rule for every timing in rounds.

A figure timed in rounds (a tree's speed-up over autoregressive decoding, a step's cost over its
reference) takes at least ``rounds`` rounds, and more, up to ``max_rounds``, while the rounds
together took less than ``min_seconds`` or while the relative standard error of the figure's
per-round values is above ``target_se``. Every figure timed in rounds is reported as the median
of its rounds (a round a burst disturbed drops out), so the rule reads the standard error of the
median (:func:`median_relative_se`), and every reported figure meets its target or took
``max_rounds`` rounds. Where figures are timed alike and share a machine's noise, a caller may
floor each one's standard error by their pooled round spread (:func:`pooled_spread`): the step
profiler does, over a batch size's records, and a sweep over a batch size's points measured
before each one.

>>> m = Measurement(rounds=2, target_se=0.05, max_rounds=8)
>>> m.wants(1, seconds=1.0), m.wants(2, 2.0, [[1.0, 1.02]]), m.wants(2, 2.0, [[1.0, 1.3]])
(True, False, True)
>>> m.planned(2, 2.0, [[1.0, 1.3]])  # rounds the figure's spread needs at the target
8
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from treeopt.errors import FieldError

MAX_ROUNDS = 64  # rounds at most, however noisy the figure and however short a round


class MeasurementError(FieldError):
    """A measurement setting out of range; ``field`` names it, ``rule`` says what is valid."""


def relative_se(values: Sequence[float]) -> float:
    """The standard error of the mean of ``values``, relative to that mean: how closely repeated
    rounds of a timing pin its figure down (infinite with fewer than two).

    >>> round(relative_se([1.0, 1.1, 0.9, 1.0]), 6)  # stdev 0.0816 over √4, of a mean of 1
    0.040825
    >>> relative_se([1.3])
    inf
    """
    if len(values) < 2:
        return math.inf
    return statistics.stdev(values) / math.sqrt(len(values)) / abs(statistics.fmean(values))


# the standard error of a median over that of a mean, √(π/2): the median's asymptotic relative
# efficiency for normally distributed rounds (its variance is π σ² / 2n)
MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)


def median_relative_se(values: Sequence[float]) -> float:
    """The standard error of the median of ``values``, relative to that median: √(π/2) times the
    mean's (:func:`relative_se`) for normally spread rounds, as the reported figures are medians
    (infinite with fewer than two).

    >>> round(median_relative_se([1.0, 1.1, 0.9, 1.0]), 6)  # 1.2533 × 0.0408 over a median of 1
    0.051166
    >>> median_relative_se([1.3])
    inf
    """
    if len(values) < 2:
        return math.inf
    return (MEDIAN_SE_FACTOR * statistics.stdev(values) / math.sqrt(len(values))
            / abs(statistics.median(values)))


def pooled_spread(figures: Iterable[Sequence[float]]) -> float:
    """The relative standard deviation of one round, pooled over figures measured alike (each
    round's value over its figure's mean, the degrees of freedom summed): 0 with no figure of
    two rounds or more.

    Two rounds pin a figure's own spread down poorly: they may agree by chance, and a standard
    error from them alone stops the rounds while the figure is still off. Records timed in the
    same loop, on the same prompts, minutes apart, share one machine's noise; pooled, their
    rounds estimate it far better than any one record's.

    >>> round(pooled_spread([[1.0, 1.0], [2.0, 2.4, 2.2]]), 6)  # (0 + 2 × 0.0909² …) / (1 + 2)
    0.074227
    >>> pooled_spread([[1.3]])
    0.0
    """
    squares, freedom = 0.0, 0
    for values in figures:
        if len(values) < 2:
            continue
        mean = statistics.fmean(values)
        squares += sum((v / mean - 1.0) ** 2 for v in values)
        freedom += len(values) - 1
    return math.sqrt(squares / freedom) if freedom else 0.0


def floored_se(values: Sequence[float], spread: float = 0.0) -> float:
    """The relative standard error of the median of ``values`` (:func:`median_relative_se`), at
    least what a round's pooled ``spread`` (:func:`pooled_spread`) gives over as many rounds.

    >>> round(floored_se([1.0, 1.0], spread=0.05), 6)  # two rounds that agree by chance
    0.044311
    """
    own = median_relative_se(values)
    if len(values) < 2 or spread <= 0:
        return own
    return max(own, MEDIAN_SE_FACTOR * spread / math.sqrt(len(values)))


@dataclass(frozen=True)
class Measurement:
    """At least ``rounds`` rounds; more, up to ``max_rounds``, until the rounds took
    ``min_seconds`` together and the reported figure's relative standard error is at most
    ``target_se`` (0: no target). Checked at construction."""

    rounds: int = 3
    min_seconds: float = 0.0
    target_se: float = 0.0
    max_rounds: int = MAX_ROUNDS

    def __post_init__(self) -> None:
        for field in ("rounds", "max_rounds"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise MeasurementError(field, f"must be an integer ≥ 1, got {value!r}")
        if not math.isfinite(self.min_seconds) or self.min_seconds < 0:
            raise MeasurementError("min_seconds", f"must be ≥ 0, got {self.min_seconds}")
        if not 0 <= self.target_se < 1:
            raise MeasurementError("target_se", f"must be in [0, 1), got {self.target_se}")

    @property
    def cap(self) -> int:
        """Rounds at most (``rounds`` when more are asked for than ``max_rounds``)."""
        return max(self.rounds, self.max_rounds)

    def planned(self, done: int, seconds: float,
                figures: Iterable[Sequence[float]] = (), *, spread: float = 0.0) -> int:
        """Rounds this measurement takes, as far as known after ``done`` rounds that took
        ``seconds``; ``figures``: each reported figure's per-round values so far (``spread``: a
        round's relative spread pooled over like figures, which floors each one's standard
        error, :func:`floored_se`). More than ``done`` exactly when another round is wanted; the
        rest is an estimate (time scales with rounds, a standard error with one over their
        square root), for a progress bar.

        >>> Measurement(rounds=1, min_seconds=10.0).planned(2, seconds=4.0)  # 2 s a round
        5
        >>> Measurement(rounds=2, target_se=0.02).planned(2, 1.0, [[1.0, 1.0]], spread=0.04)
        7
        """
        if done >= self.cap:
            return done
        need = max(done, self.rounds)
        if seconds < self.min_seconds:
            more = math.ceil(done * self.min_seconds / seconds) if seconds > 0 else 0
            need = max(need, done + 1, more)
        for values in figures if self.target_se > 0 else ():
            se = floored_se(values, spread)
            if se > self.target_se:
                more = math.ceil(len(values) * (se / self.target_se) ** 2) if se < math.inf else 0
                need = max(need, done + 1, more)
        return min(need, self.cap)

    def wants(self, done: int, seconds: float, figures: Iterable[Sequence[float]] = (), *,
              spread: float = 0.0) -> bool:
        """Whether round ``done + 1`` is wanted (see :meth:`planned`)."""
        return self.planned(done, seconds, figures, spread=spread) > done

    def capped(self, rounds: int) -> Measurement:
        """The same rule with at most ``rounds`` rounds (when only that many samples exist)."""
        return replace(self, rounds=min(self.rounds, rounds),
                       max_rounds=min(self.max_rounds, rounds))


ONCE = Measurement(rounds=1)  # one round, no more: a quick look
