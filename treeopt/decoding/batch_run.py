"""One batch decoding, step by step: its parts wired into the step.

Each step drafts every row's tree (:class:`~treeopt.decoding.drafting.Drafting`, the tree from
the run's :mod:`~treeopt.decoding.tree_sources`), verifies them in one forward
(:func:`~treeopt.decoding.tree_forward.verify_step`), accepts each row's longest passing path
(:mod:`treeopt.decoding.accept`), reads the accepted tokens back in the step's one host sync
(:class:`~treeopt.decoding.batch_rows.BatchRows`), and moves each row's accepted keys and values
down to the end of its prefix (:class:`~treeopt.decoding.prefixes.Prefixes`). Before a step the
run's :mod:`~treeopt.decoding.batching` may give stopped rows new prompts; its
:mod:`~treeopt.decoding.clocks` count its own time and its steady window.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from treeopt.decoding.accept import accept, accept_rows
from treeopt.decoding.batch_rows import BatchRows
from treeopt.decoding.cache import SlotCache
from treeopt.decoding.clocks import BOOKKEEPING, DRAFT, VERIFY, PhaseClock, RunTimer
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.drafter import Drafter
from treeopt.decoding.drafting import Drafting
from treeopt.decoding.dynamic_drafting import RowPlan
from treeopt.decoding.prefill import prefill_rows
from treeopt.decoding.prefixes import Prefixes
from treeopt.decoding.stats import DecodeStats
from treeopt.decoding.tree_forward import Verifier, verify_step
from treeopt.decoding.tree_sources import StepTrees


@dataclass(frozen=True)
class BatchResult:
    """The new tokens of every prompt (prompt excluded) and the batch's statistics."""

    tokens: tuple[tuple[int, ...], ...]
    stats: DecodeStats


class Batching(Protocol):
    """How a run's rows meet its prompts (:mod:`treeopt.decoding.batching`)."""

    @property
    def pending(self) -> bool:
        """Whether a prompt still waits for a row."""
        ...

    def due(self, active: Sequence[bool]) -> bool:
        """Whether rows take new prompts before the next step."""
        ...

    def refill(self, run: BatchRun) -> None:
        """Stopped rows of ``run`` take waiting prompts."""
        ...


class BatchRun:
    """One batch decoding: the device state (roots, sampling streams, and its parts') and the
    host state of its rows. :meth:`begin` prefills, :meth:`step` runs one step while any row
    runs, :meth:`result` reads the outcome: :meth:`loop` does all three, and
    :func:`~treeopt.decoding.loop.decode_alongside` steps several runs in turn.

    ``streams`` ``[n]``: each prompt's sampling stream; ``rows`` of them decode at a time."""

    def __init__(self, verify: Verifier, heads: Drafter | None, trees: StepTrees,
                 batching: Batching, cache: SlotCache, cfg: DecodeConfig, gen: torch.Generator,
                 prompts: Sequence[Sequence[int]], streams: torch.Tensor, *, rows: int,
                 profile: bool, settle: bool = False) -> None:
        self.verify, self.trees, self.batching, self.cfg, self.gen = (
            verify, trees, batching, cfg, gen)
        self.streams, self.device = streams, streams.device
        self.clock = PhaseClock(self.device, profile)
        self.timer = RunTimer(self.device, settle=settle)
        self.rows = BatchRows(prompts, rows, cfg)
        self.keys = streams[:rows].clone()  # [b]: each row's sampling stream
        self.prefixes = Prefixes(cache, scratch=cache.capacity - 1)
        self.drafting = Drafting(heads, drafts=trees.drafts, batch=rows,
                                 capacity=cache.capacity, drafted_only=cfg.drafted_only)
        self.root = torch.zeros(0, dtype=torch.long)  # [b]: each row's next root (begin)
        self.iterations = 0

    def loop(self) -> BatchResult:
        """Decode to the end, step after step."""
        self.begin()
        while self.step():
            pass
        return self.result()

    def begin(self) -> None:
        """The prefill: every prompt's first token and the drafter's first features."""
        entered = self.clock.now()
        first = prefill_rows(self.verify, self.rows.held(), self.prefixes.cache, self.cfg,
                             self.gen, self.keys)
        self.rows.first(first.first.tolist())
        self.drafting.prefilled(first.hidden, first.ids, first.lengths, first.first)
        self.finish([row for row, active in enumerate(self.rows.active) if not active])
        self.root = first.first
        self.clock.restart()
        self.prefixes.start(first.lengths, [len(p) for p in self.rows.held()])
        self.iterations = 0
        self.timer.prefilled(entered)

    @property
    def running(self) -> bool:
        """Whether any row still decodes, or a prompt still waits for a row."""
        return any(self.rows.active) or self.batching.pending

    @property
    def progress(self) -> float:
        """The share of the batch's token budget emitted so far."""
        return self.rows.progress

    def step(self) -> bool:
        """One decode step of every running row; whether any row still runs."""
        if not self.running:
            return False
        if self.batching.due(self.rows.active):  # continuous batching: not a step's time
            entered = self.timer.now()
            self.batching.refill(self)
            self.timer.refilled(entered)
        self.clock.restart()  # (profiled) a step's phases hold nothing that ran between steps
        entered = self.timer.now()
        self.iterations += 1
        running = all(self.rows.active)
        shape = self.trees.shape(self.iterations - 1, sum(self.rows.active))
        tokens, plan = self.drafting.draft(self.root, shape)
        self.clock.lap(DRAFT)
        logits, hidden = verify_step(self.verify, self.drafting.verifiable(tokens), plan,
                                     cache=self.prefixes.cache, lengths=self.prefixes.lengths,
                                     frontier=self.prefixes.frontier)
        self.clock.lap(VERIFY)
        positions = self.prefixes.lengths[:, None] + plan.offsets
        verdict = (accept_rows(plan, tokens, logits, self.cfg, positions=positions,
                               keys=self.keys) if isinstance(plan, RowPlan) else
                   accept(plan, tokens, logits, self.cfg, self.gen, positions=positions,
                          keys=self.keys))
        was = list(self.rows.active)
        accepted, paths = self.rows.read(verdict, tokens)  # host sync
        self.trees.verified(list(self.rows.kept))  # an adaptive policy sees what rows keep
        self.prefixes.extend(verdict, plan.steps, accepted, paths)
        if running:  # a steady step: its time so far (the features below belong to the next)
            self.timer.steady(entered, self.rows.kept)  # the tokens the rows keep
        self.clock.lap(BOOKKEEPING)
        self.clock.end_step(counted=running)
        self.root = verdict.next_root
        if any(self.rows.active):
            count = (verdict.length if running
                     else torch.tensor(accepted, device=self.device))  # stopped rows: 0
            self.drafting.advance(hidden, tokens, verdict.path, count, self.root)
            self.clock.lap(DRAFT)  # the drafter's features for the next step: its drafting
        self.finish([row for row, (a, b) in enumerate(zip(was, self.rows.active, strict=True))
                     if a and not b])
        self.timer.stepped(entered)
        return self.running

    def finish(self, rows: list[int]) -> None:
        """Rows whose requests have just ended: the drafter learns each one's output."""
        for row in rows:
            self.drafting.finish(row, self.rows.output(row))

    def result(self) -> BatchResult:
        """Every prompt's tokens and the run's statistics."""
        self.clock.now()  # on CUDA: what the last step queued is done
        split = self.clock.split()
        tokens_out = self.rows.tokens()
        steps = self.rows.steps
        stats = DecodeStats(
            tokens=sum(len(t) for t in tokens_out),
            accept_lengths=tuple(x for s in steps for x in s), seconds=self.timer.busy,
            decode_tokens=self.timer.steady_tokens, decode_seconds=self.timer.decode_seconds,
            iterations=self.iterations, split=split, decode_row_steps=self.timer.steady_row_steps,
            runs=tuple((sum(s), len(s)) for s in steps) if len(steps) > 1 else ())
        return BatchResult(tokens_out, stats)
