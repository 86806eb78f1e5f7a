"""The fastest dynamic settings per batch size: simulated acceptance priced by the step-cost
model that prices static trees.

A dynamic step verifies N tokens and calls the drafter ``steps`` times: its catch-up (the root),
then k frontier nodes per later level, so it is priced as a tree of N tokens, depth S and
``(1, k, …, k)`` nodes expanded per depth, by the step-throughput formula
(:func:`treeopt.pricing.costs.throughput`):

    tokens/s = b · E[L](k, S, N) / (t_verify(b, s, N) + t_draft(b, (1, k, …)) + t_overhead(b, N, S))

E[L] is the walk of the dynamic trace (the steps live decoding takes). Beside the best of the
whole grid, :func:`recommend` reports the best chain (top-k 1: only the number of steps varies,
the AutoSpec idea) and, where a static selection is given, the best static tree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from treeopt.dynamic.simulate import DynamicTrace
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.pricing.costs import (
    NO_DRAFT,
    NO_OVERHEAD,
    DraftCost,
    OverheadCost,
    StepLatency,
    throughput,
)

FORMAT = "treeopt.dynamic-selection/1"


def expanded(s: DynamicSettings) -> tuple[int, ...]:
    """Nodes the drafter runs on at each depth: the root, then k per level.

    >>> expanded(DynamicSettings(4, 3, 16))
    (1, 4, 4)
    """
    return (1,) + (s.topk,) * (s.steps - 1)


@dataclass(frozen=True)
class DynamicPoint:
    """One setting priced at one (batch, context)."""

    settings: DynamicSettings
    batch: int
    context: int
    expected_accept_length: float
    stderr: float
    verify_ms: float
    draft_ms: float
    overhead_ms: float
    tokens_per_s: float
    autoregressive_tokens_per_s: float

    @property
    def speedup(self) -> float:
        return self.tokens_per_s / self.autoregressive_tokens_per_s

    def to_json(self) -> dict[str, Any]:
        return {**self.settings.to_dict(), "batch": self.batch, "context": self.context,
                "expected_accept_length": self.expected_accept_length, "stderr": self.stderr,
                "verify_ms": self.verify_ms, "draft_ms": self.draft_ms,
                "overhead_ms": self.overhead_ms, "tokens_per_s": self.tokens_per_s,
                "autoregressive_tokens_per_s": self.autoregressive_tokens_per_s,
                "speedup": self.speedup}


def price_dynamic(s: DynamicSettings, expected_accept_length: float, *, verify: StepLatency,
                  draft: DraftCost = NO_DRAFT, overhead: OverheadCost = NO_OVERHEAD,
                  batch: int, context: int, stderr: float = 0.0) -> DynamicPoint:
    """Predicted tokens/s of settings ``s`` and of autoregressive decoding at (batch, context)."""
    t = throughput([1.0, expected_accept_length], tokens=[1, s.draft_tokens],
                   expanded=[(), expanded(s)], verify=verify, draft=draft, overhead=overhead,
                   batch=batch, context=context)
    if np.isnan(t.verify_s).any():
        raise TreeoptError(f"{s.label}: the latency source does not reach {s.draft_tokens} "
                           f"tokens at batch {batch}")
    return DynamicPoint(s, batch, context, expected_accept_length, stderr,
                        1e3 * float(t.verify_s[1]), 1e3 * float(t.draft_s[1]),
                        1e3 * float(t.overhead_s[1]), float(t.tokens_per_s[1]),
                        float(t.tokens_per_s[0]))


@dataclass(frozen=True)
class BatchChoice:
    """At one (batch, context): the best settings, the best chain, and every setting priced."""

    best: DynamicPoint
    best_chain: DynamicPoint | None
    points: tuple[DynamicPoint, ...]

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.best.batch, "context": self.best.context,
                "best": self.best.to_json(),
                "best_chain": self.best_chain.to_json() if self.best_chain else None,
                "chain_gain": (self.best.tokens_per_s / self.best_chain.tokens_per_s
                               if self.best_chain else None)}


def acceptance(traces: Mapping[int, DynamicTrace], s: DynamicSettings) -> tuple[float, float]:
    """E[L] of ``s`` (the walk of its top-k's trace) and its standard error."""
    if s.topk not in traces:
        raise TreeoptError(f"{s.label}: no dynamic trace of top-k {s.topk} (have "
                           f"{sorted(traces)})")
    walk = traces[s.topk].walk(s)
    return walk.mean_accept_length, walk.stderr


def recommend(traces: Mapping[int, DynamicTrace], grid: Sequence[DynamicSettings], *,
              verify: StepLatency, draft: DraftCost = NO_DRAFT,
              overhead: OverheadCost = NO_OVERHEAD, batch: Sequence[int], context: int,
              ) -> list[BatchChoice]:
    """The best of ``grid`` at every batch size (settings beyond the latency source's tokens
    are skipped)."""
    usable = [s for s in grid if s.draft_tokens <= verify.max_tokens
              and s.topk in traces and s.steps <= traces[s.topk].steps]
    if not usable:
        raise TreeoptError("no dynamic setting of the grid is covered by the traces and the "
                           "latency source")
    ells = {s: acceptance(traces, s) for s in usable}
    out = []
    for b in batch:
        points = tuple(price_dynamic(s, ells[s][0], stderr=ells[s][1], verify=verify,
                                     draft=draft, overhead=overhead, batch=b, context=context)
                       for s in usable)
        chains = [p for p in points if p.settings.is_chain]
        out.append(BatchChoice(max(points, key=lambda p: p.tokens_per_s),
                               max(chains, key=lambda p: p.tokens_per_s) if chains else None,
                               points))
    return out
