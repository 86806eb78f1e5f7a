"""How a run's rows meet its prompts: static batching (:class:`StaticBatch`) or continuous
batching (:class:`ContinuousBatch`).

Static: every prompt has its own row from the start, and the run ends when every row has
stopped. Continuous (fewer rows than prompts): before a step, a row that has stopped takes the
next waiting prompt, as a serving engine refills a finished request's slot. The prompt is
prefilled alone into the row's slots of the cache (the row's old entries lie past its new
length, where the mask hides them), its first token drawn from its own sampling stream, and its
drafter state takes the row's place (:meth:`~treeopt.decoding.drafter.Drafter.take_row`), fed up
to what a step's catch-up feeds (:meth:`~treeopt.decoding.drafter.Drafter.prime`). Every prompt
decodes exactly as it does alone.

The steady window (:mod:`treeopt.decoding.clocks`) then runs until a row stops with no prompt
left to take; the refills' time counts end to end but not in it (a step profile prices decode
steps alone), so a batch-b throughput does not end where the first of b static rows finishes,
and does not leave out the ends of continuations.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from treeopt.decoding.prefill import prefill_row

if TYPE_CHECKING:
    from treeopt.decoding.batch_run import BatchRun


class StaticBatch:
    """One row per prompt, from the start to the last row's stop: no prompt waits."""

    pending = False

    def due(self, active: Sequence[bool]) -> bool:
        return False

    def refill(self, run: BatchRun) -> None:
        pass


class ContinuousBatch:
    """Rows that stop take the ``waiting`` prompts (indices, taken in order)."""

    def __init__(self, waiting: Iterable[int]) -> None:
        self.waiting = list(waiting)

    @property
    def pending(self) -> bool:
        return bool(self.waiting)

    def due(self, active: Sequence[bool]) -> bool:
        """A prompt waits and a row has stopped."""
        return bool(self.waiting) and not all(active)

    def refill(self, run: BatchRun) -> None:
        """Each stopped row of ``run`` takes the next waiting prompt (another, if that one
        stops at its first token)."""
        run.root = run.root.clone()  # the step's own, written row by row
        run.prefixes.own_lengths()
        run.drafting.own_features()
        for row, active in enumerate(run.rows.active):
            while not active and self.waiting:
                active = self._take(run, row, self.waiting.pop(0))
        run.prefixes.reframe()

    def _take(self, run: BatchRun, row: int, p: int) -> bool:
        """Prompt ``p`` into stopped row ``row``: its prefill into the row's slots of the cache,
        its first token, and its drafter state in place of the row's. Whether the row runs."""
        prompt = run.rows.prompts[p]
        key = run.streams[p: p + 1]
        new = prefill_row(run.verify, prompt, run.prefixes.row_cache(row), run.cfg, run.gen, key)
        run.keys[row], run.root[row] = key[0], new.first[0]
        run.prefixes.restart(row, len(prompt))
        run.drafting.take_row(row, new.hidden, new.ids, new.lengths, new.first)
        runs = run.rows.take(row, p, int(new.first[0]))
        if not runs:  # it ended at its first token
            run.finish([row])
        return runs
