"""The engines' step controllers as policy objects: each decides, round by round, how many draft
steps (a chain of that many draft tokens, top-k 1) the next verification round drafts.

A policy reads a :class:`RoundState` in :meth:`~Policy.decide` before a round is drafted, and
the per-request accepted draft counts of each verified round (the bonus token excluded: 0 …
steps) in :meth:`~Policy.observe`. The table policies (vLLM, TensorRT-LLM) ignore what they
observe; SGLang's adaptive controller (:class:`SGLangPolicy`) keeps, per batch-size slot, an EMA
of the per-round batch mean and walks its candidate steps by thresholds. Which engine versions
decide so is in :mod:`treeopt.adaptive.versions`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from treeopt.adaptive.sglang import SGLangConfig, SGLangSlot
from treeopt.errors import FieldError, TreeoptError


@dataclass(frozen=True)
class RoundState:
    """What a controller may read before round ``round`` (0-based) is drafted: the requests in
    it (``batch``) and in the round before (``previous_batch``, None for the first round)."""

    round: int
    batch: int
    previous_batch: int | None = None


class Policy(Protocol):
    """A step controller: ``decide`` the steps of a round, ``observe`` its verified result."""

    @property
    def label(self) -> str: ...

    def decide(self, state: RoundState) -> int: ...

    def observe(self, state: RoundState, accepted: Sequence[int]) -> None: ...


@dataclass(frozen=True)
class FixedSteps:
    """The same steps every round (``--speculative-num-steps`` without adaptation).

    >>> FixedSteps(3).decide(RoundState(0, 4))
    3
    """

    steps: int

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise FieldError("steps", f"must be ≥ 0, got {self.steps}")

    @property
    def label(self) -> str:
        return f"fixed {self.steps} steps"

    def decide(self, state: RoundState) -> int:
        return self.steps

    def observe(self, state: RoundState, accepted: Sequence[int]) -> None:
        return None


class _SlotState:
    """One slot's running state, as SGLang's ``AdaptiveStepSlot`` keeps it: the current steps,
    the EMA of per-round batch-mean accepted drafts, and the rounds counted."""

    __slots__ = ("slot", "current", "ema", "count")

    def __init__(self, slot: SGLangSlot, start: int) -> None:
        self.slot = slot
        steps = slot.candidate_steps
        self.current = start if start in steps else steps[len(steps) // 2]
        self.ema = float(self.current - 1)
        self.count = 0

    def update(self, accepted: Sequence[int]) -> None:
        """Feed one verified round; decide at rounds warm-up + k · interval."""
        if not accepted:
            return
        s = self.slot
        if self.current > 0:  # the EMA is frozen while speculation is off
            mean = sum(accepted) / len(accepted)
            self.ema = (1 - s.ema_alpha) * self.ema + s.ema_alpha * mean
        self.count += 1
        if self.count <= s.warmup_batches:
            return
        if (self.count - s.warmup_batches) % s.update_interval != 0:
            return
        self.current = self._target()

    def _target(self) -> int:
        """The threshold walk: down while the EMA is at or below the lower neighbour's drop
        threshold; else up while it is above the current step's rise threshold; a zero step
        always probes the next candidate up."""
        s, c = self.slot, self.slot.candidate_steps
        i = i0 = c.index(self.current)
        if self.current == 0:
            i = min(i + 1, len(c) - 1)
            if c[i] > 0 and self.ema < 0:
                self.ema = float(c[i] - 1)
            return c[i]
        while i > 0 and self.ema <= (0.5 if c[i - 1] == 0 else c[i - 1] - 0.5) + s.down_hysteresis:
            i -= 1
        if i == i0:
            while i < len(c) - 1 and self.ema > c[i] - 0.5 + s.up_hysteresis:
                i += 1
        if s.ceiling_coeff > 0:
            cap = max(1, math.ceil(self.ema * s.ceiling_coeff))
            if cap < c[i] <= self.current:  # the cap never blocks a move up
                while i > 0 and c[i] > cap:
                    i -= 1
        return c[i]


class SGLangPolicy:
    """SGLang's adaptive speculation (``--speculative-adaptive``, EMA strategy): one slot per
    batch-size key, each with its own EMA, round count and current steps; a round is routed to
    a slot by :meth:`SGLangConfig.route`. With ``overlap`` (the overlap scheduler, SGLang's
    default) a round's result is fed after the next round is launched, so a decision made from
    round t first drafts round t + 2; without it, round t + 1.

    >>> def steps(config, rounds=18):
    ...     p, out = SGLangPolicy(config), []
    ...     for r in range(rounds):
    ...         out.append(p.decide(RoundState(r, 1)))
    ...         p.observe(RoundState(r, 1), [3])
    ...     return out
    >>> steps(SGLangConfig.default(overlap=False))[13:]  # decided after round 14 (0-based)
    [3, 3, 5, 5, 5]
    >>> steps(SGLangConfig.default())[13:]
    [3, 3, 3, 5, 5]
    """

    def __init__(self, config: SGLangConfig) -> None:
        self.config = config
        start = config.start_steps
        self.slots = {key: _SlotState(slot, start) for key, slot in config.slots}
        self._pending: list[tuple[int, list[int]]] = []

    @property
    def label(self) -> str:
        return f"sglang adaptive ({self.config.label})"

    def slot_for(self, batch: int) -> _SlotState:
        return self.slots[self.config.route(batch)]

    def decide(self, state: RoundState) -> int:
        steps = self.slot_for(state.batch).current
        self._flush()  # overlap: the previous round's result is processed after this launch
        return steps

    def observe(self, state: RoundState, accepted: Sequence[int]) -> None:
        self._pending.append((state.batch, list(accepted)))
        if not self.config.overlap:
            self._flush()

    def _flush(self) -> None:
        for batch, accepted in self._pending:
            self.slot_for(batch).update(accepted)
        self._pending.clear()


def _check_ranges(ranges: Sequence[tuple[int, int, int]]) -> tuple[tuple[int, int, int], ...]:
    """vLLM's ``validate_and_normalize_dynamic_sd_schedule``: sorted by lo, positive and
    non-overlapping ranges starting at 1, draft lengths ≥ 0."""
    if not ranges:
        raise TreeoptError("ranges must be a non-empty list of [lo, hi, k]")
    out = []
    for entry in ranges:
        if len(entry) != 3:
            raise TreeoptError(f"ranges entry {list(entry)} must have exactly 3 items [lo, hi, k]")
        lo, hi, k = (int(x) for x in entry)
        if lo <= 0 or hi <= 0:
            raise TreeoptError(f"ranges batch-size range ({lo}, {hi}) must be positive")
        if lo > hi:
            raise TreeoptError(f"ranges batch-size range ({lo}, {hi}) has lo > hi")
        if k < 0:
            raise TreeoptError(f"ranges draft length {k} of ({lo}, {hi}) must be ≥ 0")
        out.append((lo, hi, k))
    out.sort()
    for (_, hi, _), (lo, _, _) in zip(out[:-1], out[1:], strict=True):
        if lo <= hi:
            raise TreeoptError("ranges batch-size ranges must be non-overlapping and sorted")
    if out[0][0] != 1:
        raise TreeoptError("ranges the first batch-size range must start at 1 so every "
                         "batch size has a draft length")
    return tuple(out)


@dataclass(frozen=True)
class VLLMSchedule:
    """vLLM's per-batch-size draft lengths (``num_speculative_tokens_per_batch_size``, 0.24.0+):
    ``[lo, hi, k]`` ranges, each k capped at ``num_speculative_tokens``; a batch size in a gap
    or after the last range carries the previous range's k. The drafts verified in a round were
    proposed in the scheduler step before, so their length follows the previous round's batch
    size (the round's own in the first round). No feedback.

    >>> s = VLLMSchedule(((1, 2, 5), (5, 8, 2)), num_speculative_tokens=4)
    >>> [s.lookup(n) for n in (1, 2, 3, 4, 5, 8, 9)]
    [4, 4, 4, 4, 2, 2, 2]
    >>> s.decide(RoundState(7, batch=8, previous_batch=2))
    4
    """

    ranges: tuple[tuple[int, int, int], ...]
    num_speculative_tokens: int
    max_num_seqs: int = 256

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranges", _check_ranges(self.ranges))
        if self.num_speculative_tokens <= 0:
            raise TreeoptError(f"num_speculative_tokens must be > 0 (the cap of every k), got {self.num_speculative_tokens}")
        if self.max_num_seqs <= 0:
            raise TreeoptError(f"max_num_seqs must be > 0, got {self.max_num_seqs}")

    @property
    def label(self) -> str:
        return f"vllm per-batch-size {[list(r) for r in self.ranges]}"

    def lookup(self, batch: int) -> int:
        """The dense table's entry at ``batch`` (1 … ``max_num_seqs``)."""
        if not 1 <= batch <= self.max_num_seqs:
            raise TreeoptError(f"batch size {batch} is outside 1 … max_num_seqs "
                               f"({self.max_num_seqs})")
        k = 0
        for lo, _, value in self.ranges:
            if lo > batch:
                break
            k = value
        return min(self.num_speculative_tokens, k)

    def decide(self, state: RoundState) -> int:
        n = state.previous_batch if state.previous_batch is not None else state.batch
        return self.lookup(n)

    def observe(self, state: RoundState, accepted: Sequence[int]) -> None:
        return None


READINGS: tuple[str, ...] = ("drafter", "one-model")


@dataclass(frozen=True)
class TRTLLMSchedule:
    """TensorRT-LLM's ``draft_len_schedule`` (PyTorch backend), read one of two ways:

    - ``drafter``: ``Drafter.get_draft_len_for_batch_size`` (two-model drafters and NGram,
      release 1.2): a key is a lower threshold, the largest key ≤ the batch size applies; the
      schedule must hold key 1, valued ``max_draft_len``;
    - ``one-model``: ``get_draft_len_for_batch_size`` of ``_torch/speculative/utils.py`` (one-model
      path, PR #10860): a key is an upper bound, the smallest key ≥ the batch size applies, and
      above the largest key speculation is off (0); the smallest key is valued ``max_draft_len``.

    Every value lies in 0 … ``max_draft_len``. The batch size is the round's active requests.

    >>> sched = ((1, 4), (4, 2), (8, 0))
    >>> [TRTLLMSchedule(sched, max_draft_len=4).lookup(b) for b in (1, 3, 4, 7, 8, 20)]
    [4, 4, 2, 2, 0, 0]
    >>> up = TRTLLMSchedule(((4, 4), (8, 2), (32, 1)), max_draft_len=4, reading="one-model")
    >>> [up.lookup(b) for b in (1, 4, 5, 8, 9, 32, 33)]
    [4, 4, 2, 2, 1, 1, 0]
    """

    schedule: tuple[tuple[int, int], ...]
    max_draft_len: int
    reading: str = "drafter"

    def __post_init__(self) -> None:
        if self.reading not in READINGS:
            raise TreeoptError(f"reading must be one of {', '.join(READINGS)}, got "
                             f"{self.reading!r}")
        pairs = tuple(sorted((int(k), int(v)) for k, v in self.schedule))
        if not pairs:
            raise TreeoptError("schedule is empty")
        for key, value in pairs:
            if key < 1:
                raise TreeoptError(f"schedule batch size threshold must be ≥ 1, got {key}")
            if not 0 <= value <= self.max_draft_len:
                raise TreeoptError(f"schedule draft length {value} at batch size {key} must be "
                                 f"in 0 … max_draft_len ({self.max_draft_len})")
        if self.reading == "drafter" and pairs[0][0] != 1:
            raise TreeoptError("schedule must include batch_size=1 (read by the drafter path)")
        if pairs[0][1] != self.max_draft_len:
            raise TreeoptError(f"schedule the value at its smallest key {pairs[0][0]} is "
                             f"{pairs[0][1]}; it must equal max_draft_len ({self.max_draft_len})")
        object.__setattr__(self, "schedule", pairs)

    @property
    def label(self) -> str:
        return f"trtllm draft_len_schedule {dict(self.schedule)} ({self.reading})"

    def lookup(self, batch: int) -> int:
        if batch < 1:
            raise TreeoptError(f"batch size {batch}: must be ≥ 1")
        keys = [k for k, _ in self.schedule]
        if self.reading == "drafter":
            return self.schedule[bisect.bisect_right(keys, batch) - 1][1]
        i = bisect.bisect_left(keys, batch)
        return self.schedule[i][1] if i < len(keys) else 0

    def decide(self, state: RoundState) -> int:
        return self.lookup(state.batch)

    def observe(self, state: RoundState, accepted: Sequence[int]) -> None:
        return None
