"""Statistics of a decoding run: tokens, time, accepted lengths, and (when profiled) where a
step's time goes. Accepted lengths are summarised by the one
:class:`treeopt.model.accept_stats.AcceptStats`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from treeopt.model.accept_stats import AcceptStats


@dataclass(frozen=True)
class StepSplit:
    """Seconds spent drafting, verifying and on the loop's own bookkeeping over ``steps`` decode
    steps: those during which every row of the batch ran (the steady state that throughput
    counts; at batch 1, every step).

    >>> StepSplit(0.5, 3.0, 0.5, steps=10).per_step()
    {'draft': 0.05, 'verify': 0.3, 'bookkeeping': 0.05}
    """

    draft_s: float
    verify_s: float
    bookkeeping_s: float
    steps: int = 0

    def to_dict(self) -> dict[str, float]:
        return {"draft": self.draft_s, "verify": self.verify_s, "bookkeeping": self.bookkeeping_s}

    def per_step(self) -> dict[str, float]:
        """Seconds per step of each phase."""
        return {k: v / max(self.steps, 1) for k, v in self.to_dict().items()}


@dataclass(frozen=True)
class DecodeStats:
    """New tokens, accepted length of every step, seconds end to end; ``decode_tokens`` and
    ``decode_seconds``: the tokens and time of the decode steps during which every sequence of a
    batch was running (the steady state); ``runs``: (accepted tokens, steps) of each sequence
    pooled here (one sequence: empty); ``split``: the phase times of those steady steps, when
    profiled.

    >>> s = DecodeStats(tokens=7, accept_lengths=(1, 3, 2), seconds=2.0, decode_tokens=6,
    ...                 decode_seconds=1.5, decode_row_steps=3)
    >>> s.steps, s.mean_accept_length, s.histogram, s.tokens_per_s, s.decode_tokens_per_s
    (3, 2.0, (0, 1, 1, 1), 3.5, 4.0)
    >>> s.decode_accept_length
    2.0
    """

    tokens: int
    accept_lengths: tuple[int, ...]
    seconds: float
    decode_tokens: int = 0
    decode_seconds: float = 0.0
    iterations: int = 0  # steps of the decoding loop (each advances every running row)
    split: StepSplit | None = None
    runs: tuple[tuple[int, int], ...] = ()
    decode_row_steps: int = 0  # rows × steps of the steady state (decode_tokens' denominator)

    @property
    def accept(self) -> AcceptStats:
        runs = self.runs or ((sum(self.accept_lengths), len(self.accept_lengths)),)
        return AcceptStats.of(self.accept_lengths, sequences=runs)

    @property
    def steps(self) -> int:
        return len(self.accept_lengths)

    @property
    def mean_accept_length(self) -> float:
        return self.accept.mean_accept_length

    @property
    def stderr(self) -> float:
        """Standard error of the mean accepted length (over runs when several are pooled)."""
        return self.accept.stderr

    @property
    def histogram(self) -> tuple[int, ...]:
        return self.accept.histogram

    @property
    def sequence_accept_lengths(self) -> tuple[tuple[int, ...], ...]:
        """The accepted lengths of each sequence's steps, in the order of :attr:`runs` (one
        sequence: every step).

        >>> DecodeStats(6, (2, 1, 3), 1.0, runs=((3, 2), (3, 1))).sequence_accept_lengths
        ((2, 1), (3,))
        """
        out, start = [], 0
        for _, steps in self.runs or ((sum(self.accept_lengths), self.steps),):
            out.append(self.accept_lengths[start: start + steps])
            start += steps
        return tuple(out)

    @property
    def tokens_per_s(self) -> float:
        """End to end: every new token over the whole time, prefill included."""
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def decode_accept_length(self) -> float:
        """Steady state: accepted tokens per row and step while every sequence ran — the E[L]
        that the steady tokens/s counts (at batch > 1 it weighs every row alike over the window,
        not each sequence by its steps as :attr:`mean_accept_length` does)."""
        return self.decode_tokens / self.decode_row_steps if self.decode_row_steps else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        """Steady state: tokens of the decode steps while every sequence ran, over their time."""
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        doc = {"steps": self.steps, "tokens": self.tokens, **self.accept.to_json(),
               "tokens_per_s": self.tokens_per_s, "seconds": self.seconds,
               "decode_tokens_per_s": self.decode_tokens_per_s,
               "decode_tokens": self.decode_tokens, "decode_seconds": self.decode_seconds,
               "decode_accept_length": self.decode_accept_length}
        if self.split is not None:
            doc["seconds_split"] = self.split.to_dict()
        return doc


def combine(stats: Sequence[DecodeStats]) -> DecodeStats:
    """Pool several runs (for example one per prompt) into one; each stays a unit of the error.

    >>> a = DecodeStats(2, (2,), 1.0)
    >>> combine([a, a]).accept_lengths, combine([a, a]).tokens_per_s, combine([a, a]).runs
    ((2, 2), 2.0, ((2, 1), (2, 1)))
    """
    splits = [s.split for s in stats]
    split = None
    if splits and all(s is not None for s in splits):
        split = StepSplit(*(sum(getattr(s, f) for s in splits)  # type: ignore[misc]
                            for f in ("draft_s", "verify_s", "bookkeeping_s")),
                          steps=sum(s.steps for s in splits))  # type: ignore[union-attr]
    runs = tuple(r for s in stats for r in (s.runs or ((sum(s.accept_lengths), s.steps),)))
    return DecodeStats(tokens=sum(s.tokens for s in stats),
                       accept_lengths=tuple(x for s in stats for x in s.accept_lengths),
                       seconds=sum(s.seconds for s in stats),
                       decode_tokens=sum(s.decode_tokens for s in stats),
                       decode_seconds=sum(s.decode_seconds for s in stats),
                       iterations=sum(s.iterations for s in stats), split=split, runs=runs,
                       decode_row_steps=sum(s.decode_row_steps for s in stats))


@dataclass(frozen=True)
class DecodeResult:
    """The new tokens (prompt excluded) and the run's statistics."""

    tokens: tuple[int, ...]
    stats: DecodeStats
