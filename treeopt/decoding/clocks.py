"""A decoding run's clocks: its own time and steady window (:class:`RunTimer`), and where a
profiled step's time goes (:class:`PhaseClock`).

A run counts the time of its own calls, so two runs whose steps alternate
(:func:`~treeopt.decoding.loop.decode_alongside`) each count their own steps alone; run by
itself, the sum is the wall time. Its steady window is the decode steps during which every row
still runs, the steady state a serving engine sees and the cost model predicts. The steps after
a static batch's first row stops are left out of it: in them the frontier sits at the longest
row and every row's accepted keys move, so they cost more than a steady step, and counting them
would price a tree above what its throughput pays. The prefill, and the prefills of rows that
take a new prompt (continuous batching), count end to end but not in the window.

The loop keeps no phase timers: with ``profile=True`` the :class:`PhaseClock` synchronises at
each phase boundary and totals the phases over the same steady steps (timing itself costs time,
so throughput comes from unprofiled runs).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from treeopt.decoding.stats import StepSplit

DRAFT, VERIFY, BOOKKEEPING = 0, 1, 2  # the phases of a step, as StepSplit orders them


class PhaseClock:
    """Phase times when profiling (``on``): a synchronised clock read at each phase boundary,
    each step's laps joining the totals when the step counts (a steady step)."""

    def __init__(self, device: torch.device, on: bool) -> None:
        self.device, self.on = device, on
        self.totals = [0.0, 0.0, 0.0]  # over the steps counted so far
        self.step = [0.0, 0.0, 0.0]  # the step under way
        self.steps = 0
        self.last = self.now()

    def now(self) -> float:
        """The time once the device has finished what was queued (on CUDA)."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def restart(self) -> None:
        """Phases count from here: what came before (setting up, the prefill) is no step's."""
        if self.on:
            self.last = self.now()

    def lap(self, phase: int) -> None:
        """The time since the last boundary goes to ``phase`` (:data:`DRAFT`, :data:`VERIFY`,
        :data:`BOOKKEEPING`)."""
        if self.on:
            t = self.now()
            self.step[phase] += t - self.last
            self.last = t

    def end_step(self, *, counted: bool) -> None:
        """The step's laps join the totals when ``counted`` (a steady step); the next begins."""
        if not self.on:  # unprofiled runs keep no phase times: nothing on their hot path
            return
        if counted:
            self.totals = [a + b for a, b in zip(self.totals, self.step, strict=True)]
            self.steps += 1
        self.step = [0.0, 0.0, 0.0]

    def split(self) -> StepSplit | None:
        """The counted steps' phase totals; None unprofiled."""
        return StepSplit(*self.totals, steps=self.steps) if self.on else None


class RunTimer:
    """A run's own time (``busy``: the seconds of its calls) and its steady window: the tokens,
    row steps and seconds of the steps while every row runs, less the prefill and the refills.

    ``settle`` (runs stepped in turn): each call's time ends once the device has finished what
    the run queued, so none of it runs, unseen, inside another run's step."""

    def __init__(self, device: torch.device, *, settle: bool = False) -> None:
        self.device, self.settle = device, settle
        self.busy = self.prefill_s = self.steady_seconds = 0.0
        self.refill_s = self.steady_refill_s = 0.0  # prefills of rows that took a new prompt
        self.steady_tokens = self.steady_row_steps = 0

    @staticmethod
    def now() -> float:
        """The time a call starts at."""
        return time.perf_counter()

    def settled(self) -> float:
        """The time now; with ``settle``, once the device is done with what was queued."""
        if self.settle and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def prefilled(self, entered: float) -> None:
        """The prefill, begun at ``entered``, is done: the run's first seconds, and the window's
        start."""
        self.busy = self.settled() - entered
        self.prefill_s = self.steady_seconds = self.busy
        self.refill_s = self.steady_refill_s = 0.0
        self.steady_tokens = self.steady_row_steps = 0

    def refilled(self, entered: float) -> None:
        """Rows took new prompts from ``entered`` to now: the run's time, not a step's."""
        spent = self.settled() - entered
        self.busy += spent
        self.refill_s += spent

    def steady(self, entered: float, accepted: Sequence[int]) -> None:
        """A step begun at ``entered``, with every row running, accepted ``accepted`` tokens per
        row: the window extends to now."""
        self.steady_seconds = self.busy + time.perf_counter() - entered
        self.steady_refill_s = self.refill_s
        self.steady_tokens += sum(accepted)
        self.steady_row_steps += len(accepted)

    def stepped(self, entered: float) -> None:
        """A step begun at ``entered`` is done."""
        self.busy += self.settled() - entered

    @property
    def decode_seconds(self) -> float:
        """The steady window's seconds: its decode steps alone."""
        return self.steady_seconds - self.prefill_s - self.steady_refill_s
