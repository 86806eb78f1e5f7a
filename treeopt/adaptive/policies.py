"""The engines' step controllers as policy objects: each decides, round by round, how many draft
steps (a chain of that many draft tokens, top-k 1) the next verification round drafts.

A policy reads a :class:`RoundState` in :meth:`~Policy.decide` before a round is drafted, and
the per-request accepted draft counts of each verified round (the bonus token excluded: 0 …
steps) in :meth:`~Policy.observe`. The table policies (vLLM, TensorRT-LLM) ignore what they
observe; SGLang's adaptive controller (:class:`SGLangPolicy`) keeps, per batch-size slot, an EMA
of the per-round batch mean and walks its candidate steps by thresholds. The engines' rules
(SGLang's slot walk and routing, vLLM's table lookup, TensorRT-LLM's schedule readings) are the
engine modules' (:mod:`treeopt.engines.sglang.adaptive`, :mod:`treeopt.engines.vllm.per_batch`,
:mod:`treeopt.engines.trtllm.schedule`); which versions decide so is
:data:`treeopt.engines.registry.CONTROLLERS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from treeopt.engines.sglang.adaptive import SGLangConfig, SlotState
from treeopt.engines.trtllm.schedule import DraftLenSchedule
from treeopt.engines.vllm.per_batch import BatchTable
from treeopt.errors import FieldError


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
        self.slots = {key: SlotState(slot, start) for key, slot in config.slots}
        self._pending: list[tuple[int, list[int]]] = []

    @property
    def label(self) -> str:
        return f"sglang adaptive ({self.config.label})"

    def slot_for(self, batch: int) -> SlotState:
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


@dataclass(frozen=True)
class VLLMSchedule(BatchTable):
    """vLLM's per-batch-size draft lengths (``num_speculative_tokens_per_batch_size``, 0.24.0+)
    as a policy: the table as vLLM reads it (:class:`treeopt.engines.vllm.per_batch.BatchTable`).
    The drafts verified in a round were proposed in the scheduler step before, so their length
    follows the previous round's batch size (the round's own in the first round). No feedback.

    >>> s = VLLMSchedule(((1, 2, 5), (5, 8, 2)), num_speculative_tokens=4)
    >>> s.decide(RoundState(7, batch=8, previous_batch=2))
    4
    """

    def decide(self, state: RoundState) -> int:
        n = state.previous_batch if state.previous_batch is not None else state.batch
        return self.lookup(n)

    def observe(self, state: RoundState, accepted: Sequence[int]) -> None:
        return None


@dataclass(frozen=True)
class TRTLLMSchedule(DraftLenSchedule):
    """TensorRT-LLM's ``draft_len_schedule`` as a policy, read as its ``reading`` reads it
    (:class:`treeopt.engines.trtllm.schedule.DraftLenSchedule`); the batch size is the round's
    active requests. No feedback.

    >>> TRTLLMSchedule(((1, 4), (4, 2)), max_draft_len=4).decide(RoundState(0, batch=5))
    2
    """

    def decide(self, state: RoundState) -> int:
        return self.lookup(state.batch)

    def observe(self, state: RoundState, accepted: Sequence[int]) -> None:
        return None
