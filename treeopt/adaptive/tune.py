"""Tune SGLang's adaptive config offline: search, per batch size, the slot that a batch of that
size routes to (candidate steps, EMA weight, interval, hysteresis), within the values the engine
takes, for the most predicted tokens/s in :func:`~treeopt.adaptive.replay.replay`.

Each batch size is replayed as its own steady load (a fresh controller; every round runs that
many rows), so only its slot decides there, and the slots are searched one by one:

1. every set of up to ``max_candidates`` of the ``steps`` searched, with the default knobs, from
   each start the set allows (a one-step set is a fixed schedule);
2. the best ``shortlist`` of those, knob by knob (two passes over the knobs, each value tried,
   the best kept).

A slot starts at ``--speculative-num-steps`` (S0) when S0 is among its candidates, else at its
middle candidate, and S0 must be among some slot's candidates; so the slots are joined last,
for the S0 under which the sum of log tokens/s over the batch sizes is the highest while no
batch size falls below the engine default's replay. The engine default's own slot, knobs and
start are among the options searched, so under the default's S0 that always holds.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from treeopt.adaptive.policies import FixedSteps, SGLangPolicy
from treeopt.adaptive.replay import Replay, replay
from treeopt.adaptive.workload import ChainAcceptance
from treeopt.engines.sglang.adaptive import SGLangConfig, SGLangSlot
from treeopt.errors import TreeoptError

KNOB_VALUES: dict[str, tuple[float, ...]] = {
    "ema_alpha": (0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0),
    "update_interval": (1, 2, 3, 5, 10, 20),
    "down_hysteresis": (-0.75, -0.5, -0.25, 0.0, 0.25, 0.5),
    "up_hysteresis": (-0.5, -0.25, 0.0, 0.25, 0.5, 0.75),
}


@dataclass(frozen=True)
class SearchSpace:
    """What :func:`tune_sglang` searches: the step values (None: 0 … the trace's steps), sets
    of up to ``max_candidates`` of them, the knob values, and the shortlist refined."""

    steps: tuple[int, ...] | None = None
    max_candidates: int = 3
    knobs: tuple[tuple[str, tuple[float, ...]], ...] = tuple(KNOB_VALUES.items())
    shortlist: int = 4
    passes: int = 2


DEFAULT_SPACE = SearchSpace()


@dataclass(frozen=True)
class SlotOption:
    """One slot replayed at one batch size from one start: its tokens/s."""

    slot: SGLangSlot
    start: int
    tokens_per_s: float


def start_of(slot: SGLangSlot, num_steps: int) -> int:
    """Where a slot starts under ``--speculative-num-steps`` ``num_steps``.

    >>> start_of(SGLangSlot((1, 3, 5, 7)), 4), start_of(SGLangSlot((1, 3, 5, 7)), 3)
    (5, 3)
    """
    c = slot.candidate_steps
    return num_steps if num_steps in c else c[len(c) // 2]


class _SlotSearch:
    """The options of one batch size, each replayed once (memoised by slot and start)."""

    def __init__(self, acceptance: ChainAcceptance, batch: int, seconds: npt.NDArray[np.float64],
                 base: SGLangConfig) -> None:
        self.acceptance, self.batch, self.seconds, self.base = acceptance, batch, seconds, base
        self.seen: dict[tuple[SGLangSlot, int], SlotOption] = {}

    def score(self, slot: SGLangSlot, start: int) -> SlotOption:
        key = (slot, start)
        if key not in self.seen:
            config = SGLangConfig(((self.batch, slot),), num_steps=start,
                                  cuda_graph_bs=None, overlap=self.base.overlap)
            r = replay(SGLangPolicy(config), self.acceptance, batch=self.batch, costs=self.seconds)
            self.seen[key] = SlotOption(slot, start, r.tokens_per_s)
        return self.seen[key]

    def run(self, space: SearchSpace, extra: Sequence[tuple[SGLangSlot, int]]) -> None:
        values = space.steps or tuple(range(self.acceptance.max_steps + 1))
        for size in range(1, space.max_candidates + 1):
            for steps in itertools.combinations(sorted(set(values)), size):
                slot = SGLangSlot(steps)
                for start in steps:
                    self.score(slot, start)
        for slot, start in extra:
            self.score(slot, start)
        ranked = sorted(self.seen.values(), key=lambda o: -o.tokens_per_s)
        for option in ranked[: space.shortlist]:
            self._refine(option, space)

    def _refine(self, option: SlotOption, space: SearchSpace) -> None:
        best = option
        for _ in range(space.passes):
            for name, values in space.knobs:
                for v in values:
                    slot = replace(best.slot, **{name: type(getattr(best.slot, name))(v)})
                    found = self.score(slot, best.start)
                    if found.tokens_per_s > best.tokens_per_s:
                        best = found


@dataclass(frozen=True)
class SGLangTuning:
    """The tuned config, and per batch size its replay beside the engine default's."""

    default: SGLangConfig
    tuned: SGLangConfig
    # (batch, the default as replayed (capped where the trace is too short), its replay, the
    # tuned config's replay)
    replays: tuple[tuple[int, SGLangConfig, Replay, Replay], ...]


def tune_sglang(acceptance: ChainAcceptance, seconds: dict[int, npt.NDArray[np.float64]], *,
                default: SGLangConfig, space: SearchSpace = DEFAULT_SPACE,
                ) -> SGLangTuning:
    """The tuned config for the batch sizes of ``seconds`` (batch → a chain step's seconds by
    k), keyed by those batch sizes; ``default``: the engine's config it must not fall below."""
    batches = sorted(seconds)
    shared = [(a, b) for a, b in itertools.pairwise(batches)
              if default.cuda_graph_bs and _padded(default, a) == _padded(default, b)]
    if shared:
        a, b = shared[0]
        raise TreeoptError(f"batch sizes {a} and {b} are padded to the same CUDA-graph batch "
                           f"size {_padded(default, a)}, so SGLang gives them one slot; tune one")
    floors = {b: default_replay(default, acceptance, b, seconds[b]) for b in batches}
    searches = {}
    for b in batches:
        used, _ = floors[b]
        slot = dict(used.slots)[used.route(b)]
        searches[b] = _SlotSearch(acceptance, b, seconds[b], default)
        searches[b].run(space, [(slot, start_of(slot, used.start_steps))])
    tuned = _join(searches, {b: r for b, (_, r) in floors.items()}, default)
    return tuning_with(acceptance, seconds, default=default, tuned=tuned, floors=floors)


def tuning_with(acceptance: ChainAcceptance, seconds: dict[int, npt.NDArray[np.float64]], *,
                default: SGLangConfig, tuned: SGLangConfig,
                floors: dict[int, tuple[SGLangConfig, Replay]] | None = None) -> SGLangTuning:
    """:func:`tune_sglang`'s answer for a config tuned already (``tuned``, found by the same
    search on the same workload and costs): the default's and its replays at each batch size,
    no search. ``floors``: the default's replays, where the caller has them."""
    floors = floors or {b: default_replay(default, acceptance, b, seconds[b]) for b in seconds}
    out = tuple((b, floors[b][0], floors[b][1],
                 replay(SGLangPolicy(tuned), acceptance, batch=b, costs=seconds[b]))
                for b in sorted(seconds))
    return SGLangTuning(default, tuned, out)


def _padded(config: SGLangConfig, batch: int) -> int:
    sizes = config.cuda_graph_bs or ()
    return next((s for s in sizes if s >= batch), batch)


def default_replay(default: SGLangConfig, acceptance: ChainAcceptance, batch: int,
                   seconds: npt.NDArray[np.float64]) -> tuple[SGLangConfig, Replay]:
    """The default's replay at ``batch``; where it drafts more steps than the trace records,
    that of the default with those candidate steps dropped (:meth:`SGLangConfig.capped`),
    which the config returned names."""
    try:
        return default, replay(SGLangPolicy(default), acceptance, batch=batch, costs=seconds)
    except TreeoptError:
        capped = default.capped(acceptance.max_steps)
        return capped, replay(SGLangPolicy(capped), acceptance, batch=batch, costs=seconds)


def _join(searches: dict[int, _SlotSearch], defaults: dict[int, Replay],
          default: SGLangConfig) -> SGLangConfig:
    """One config from the slots searched: the S0 of the best total (see the module doc)."""
    best: tuple[float, SGLangConfig] | None = None
    top = max(max(o.slot.candidate_steps) for s in searches.values() for o in s.seen.values())
    for s0 in range(top + 1):
        chosen = {}
        for b, search in searches.items():
            valid = [o for o in search.seen.values() if o.start == start_of(o.slot, s0)]
            chosen[b] = max(valid, key=lambda o: o.tokens_per_s) if valid else None
        if any(o is None for o in chosen.values()):
            continue
        if not any(s0 in o.slot.candidate_steps for o in chosen.values()):
            swaps = [(b, max((o for o in searches[b].seen.values()
                              if s0 in o.slot.candidate_steps and o.start == s0),
                             key=lambda o: o.tokens_per_s, default=None)) for b in searches]
            swaps = [(b, o) for b, o in swaps if o is not None]
            if not swaps:
                continue
            b, o = max(swaps, key=lambda bo: bo[1].tokens_per_s / chosen[bo[0]].tokens_per_s)
            chosen[b] = o
        if any(o.tokens_per_s < defaults[b].tokens_per_s for b, o in chosen.items()):
            continue
        total = sum(math.log(o.tokens_per_s) for o in chosen.values())
        if best is None or total > best[0]:
            config = SGLangConfig(tuple((b, o.slot) for b, o in chosen.items()), num_steps=s0,
                                  cuda_graph_bs=default.cuda_graph_bs, overlap=default.overlap,
                                  label="tuned")
            best = (total, config)
    if best is None:
        raise TreeoptError("no start step (SGLang's num_steps) joins the slots searched; "
                           "widen the steps searched")
    return best[1]


def fixed_replays(acceptance: ChainAcceptance, seconds: npt.NDArray[np.float64], *,
                  batch: int) -> list[Replay]:
    """Every fixed schedule's replay at ``batch``, k = 0 … the trace's steps."""
    return [replay(FixedSteps(k), acceptance, batch=batch, costs=seconds)
            for k in range(acceptance.max_steps + 1)]
