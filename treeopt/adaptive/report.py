"""Side by side, per batch size: SGLang's default adaptive config, the tuned one, the best fixed
chain and the best static tree, each priced by the same step profile; and the per-batch-size
tables vLLM and TensorRT-LLM take for the best fixed chains within their rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from treeopt.adaptive.policies import TRTLLMSchedule, VLLMSchedule
from treeopt.adaptive.replay import Replay, chain_step_seconds, replay
from treeopt.adaptive.tune import (
    DEFAULT_SPACE,
    SearchSpace,
    fixed_replays,
    tune_sglang,
    tuning_with,
)
from treeopt.adaptive.workload import ChainAcceptance
from treeopt.engines.sglang.adaptive import SGLangConfig
from treeopt.engines.trtllm.schedule import READINGS, encode, schedule_json
from treeopt.engines.vllm.per_batch import table_json
from treeopt.errors import TreeoptError
from treeopt.model.growth import Growth
from treeopt.model.trace import RankTrace
from treeopt.pricing.costs import StepCosts

FORMAT = "treeopt.adaptive-report/1"


@dataclass(frozen=True)
class StaticTree:
    """The best static tree of a growth at one batch size (``select``'s pricing: the per-step
    walk of the rank trace)."""

    size: int
    expected_accept_length: float
    tokens_per_s: float
    choices: tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class BatchSide:
    """The four strategies at one batch size."""

    batch: int
    default_label: str
    default: Replay
    tuned: Replay
    best_fixed: Replay
    static: StaticTree | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "batch": self.batch,
            "default": {"config": self.default_label, **self.default.to_json(per_round=False)},
            "tuned": self.tuned.to_json(per_round=False),
            "best_fixed": self.best_fixed.to_json(per_round=False)}
        if self.static is not None:
            s = self.static
            doc["static_tree"] = {"size": s.size, "expected_accept_length":
                                  s.expected_accept_length, "tokens_per_s": s.tokens_per_s,
                                  "choices": [list(p) for p in s.choices]}
        return doc


@dataclass(frozen=True)
class AdaptiveReport:
    """What ``treeopt adaptive`` reports: the workload, the configs and the four strategies
    per batch size."""

    workload: str
    default: SGLangConfig
    tuned: SGLangConfig
    sides: tuple[BatchSide, ...]
    vllm: VLLMSchedule
    trtllm: dict[str, TRTLLMSchedule]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "workload": self.workload,
                "sglang": {"default": self.default.to_json(), "tuned": self.tuned.to_json(),
                           "num_steps": self.tuned.num_steps},
                "vllm": table_json(self.vllm),
                "trtllm": {reading: schedule_json(s) for reading, s in self.trtllm.items()},
                "batches": [s.to_json() for s in self.sides]}

    def table(self) -> str:
        """One line per batch size: tokens/s and the steps of each strategy."""
        lines = [f"workload: {self.workload}",
                 "batch  default tok/s (steps)      tuned tok/s (steps)        "
                 "best fixed      static tree"]
        for s in self.sides:
            static = (f"{s.static.tokens_per_s:7.1f} ({s.static.size} nodes)"
                      if s.static else "-")
            mark = "*" if s.default_label != self.default.label else " "
            lines.append(f"{s.batch:5d} {mark}{s.default.tokens_per_s:7.1f} {_mix(s.default):18s} "
                         f"{s.tuned.tokens_per_s:7.1f} {_mix(s.tuned):18s} "
                         f"{s.best_fixed.tokens_per_s:7.1f} (k={s.best_fixed.steps[0]})  {static}")
        capped = {s.default_label for s in self.sides if s.default_label != self.default.label}
        lines += [f"* {label}: the default drafts more steps than the trace records"
                  for label in sorted(capped)]
        return "\n".join(lines)


def _mix(r: Replay) -> str:
    """The steps drafted, as shares of the rounds: ``3:92% 5:8%``."""
    return " ".join(f"{k}:{100 * n / r.rounds:.0f}%" for k, n in r.step_counts().items()
                    if 100 * n / r.rounds >= 0.5)


def adaptive_report(acceptance: ChainAcceptance, costs: StepCosts, *, batches: Sequence[int],
                    context: int | None = None, default: SGLangConfig | None = None,
                    space: SearchSpace = DEFAULT_SPACE, growth: Growth | None = None,
                    static_trace: RankTrace | None = None,
                    tuned: SGLangConfig | None = None) -> AdaptiveReport:
    """Tune SGLang's config on ``acceptance`` for ``batches`` and set it beside the default, the
    best fixed chain, the tables vLLM and TensorRT-LLM take, and (with ``growth`` and the rank
    trace ``static_trace``) the best static tree. ``tuned``: the config that search found on
    this workload and these costs already (a demo ships it): replayed, not searched again."""
    default = default or SGLangConfig.default()
    crowded = [b for b in batches if not 1 <= b <= acceptance.sequences]
    if crowded:
        raise TreeoptError(f"batch {crowded[0]}: the workload has {acceptance.sequences} "
                           "sequences, and a batch needs one per row")
    seconds = {b: chain_step_seconds(costs, batch=b, context=context,
                                     max_steps=acceptance.max_steps) for b in batches}
    tuning = (tune_sglang(acceptance, seconds, default=default, space=space) if tuned is None
              else tuning_with(acceptance, seconds, default=default, tuned=tuned))
    fixed = {b: fixed_replays(acceptance, seconds[b], batch=b) for b in batches}
    best_k = {b: max(range(len(f)), key=lambda k, f=f: f[k].tokens_per_s)
              for b, f in fixed.items()}
    sides = []
    for b, used, d, t in tuning.replays:
        static = (_static(growth, static_trace, costs, b, context)
                  if growth is not None and static_trace is not None else None)
        sides.append(BatchSide(b, used.label, d, t, fixed[b][best_k[b]], static))
    trt = {r: trtllm_schedule(fixed, reading=r) for r in READINGS}
    return AdaptiveReport(acceptance.source, default, tuning.tuned, tuple(sides),
                          vllm_schedule(best_k), trt)


def _static(growth: Growth, trace: RankTrace, costs: StepCosts, batch: int,
            context: int | None) -> StaticTree:
    from treeopt.pricing.sources import price

    ctx = costs.context(context)
    point = price(growth, costs.verify, draft=costs.draft, overhead=costs.overhead,
                  batch=[batch], context=[ctx], trace=trace).points[0]
    return StaticTree(point.best_size, point.expected_accept_length, point.tokens_per_s,
                      tuple(point.tree.paths))


def vllm_schedule(best_k: dict[int, int]) -> VLLMSchedule:
    """vLLM's ranges for the steps ``best_k`` (batch → k): each batch size's range runs up to
    the next one's, the first from 1, the last carried forward.

    >>> vllm_schedule({1: 4, 4: 3, 8: 2}).ranges
    ((1, 3, 4), (4, 7, 3), (8, 8, 2))
    """
    bs = sorted(best_k)
    ranges = tuple((1 if i == 0 else b, (bs[i + 1] - 1) if i + 1 < len(bs) else b, best_k[b])
                   for i, b in enumerate(bs))
    return VLLMSchedule(ranges, num_speculative_tokens=max(1, *best_k.values()))


def trtllm_schedule(fixed: dict[int, list[Replay]], *, reading: str) -> TRTLLMSchedule:
    """The ``draft_len_schedule`` with the most summed log tokens/s over ``fixed`` (batch →
    replays of k = 0, 1, …) that TensorRT-LLM's validator takes: the smallest batch size drafts
    ``max_draft_len`` M, every other at most M. A batch size's length holds from it up to the
    next one's (``release-1.2``: on past the last) or from the one before up to it (``main``:
    off past the last); :func:`treeopt.engines.trtllm.schedule.encode` writes the keys."""
    bs = sorted(fixed)
    best: tuple[float, TRTLLMSchedule] | None = None
    for m in range(1, len(fixed[bs[0]])):
        ks = {b: m if b == bs[0] else max(range(m + 1), key=lambda k, b=b: fixed[b][k].tokens_per_s)
              for b in bs}
        total = sum(math.log(fixed[b][k].tokens_per_s) for b, k in ks.items())
        if reading == "main":
            ranges = [(1 if i == 0 else bs[i - 1] + 1, b, ks[b]) for i, b in enumerate(bs)]
        else:
            ranges = [(1 if i == 0 else b, bs[i + 1] - 1 if i + 1 < len(bs) else None, ks[b])
                      for i, b in enumerate(bs)]
        s = encode(ranges, reading=reading)
        if best is None or total > best[0]:
            best = (total, TRTLLMSchedule(s.schedule, max_draft_len=s.max_draft_len,
                                          reading=reading))
    assert best is not None
    return best[1]


def replay_table(schedule: VLLMSchedule | TRTLLMSchedule, acceptance: ChainAcceptance,
                 costs: StepCosts, *, batch: int, context: int | None = None) -> Replay:
    """A table policy replayed at ``batch``."""
    return replay(schedule, acceptance, batch=batch, costs=costs, context=context)
