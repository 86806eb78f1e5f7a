"""Price grown trees on hardware: the one place that joins a Growth with a verify-latency source
(a measured table, a saved roofline, or a roofline computed here) and a drafting cost, and
selects. ``treeopt select`` and the Hardware page both come through here (numpy only: the roofline
and the latency tables need no torch).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from treeopt.costs import (
    NO_DRAFT,
    NO_OVERHEAD,
    DraftCost,
    OverheadCost,
    StepCosts,
    StepLatency,
    step_costs,
)
from treeopt.errors import TreeoptError
from treeopt.grow import Growth
from treeopt.select import select
from treeopt.selection import Selection
from treeopt.sweep import Sweep
from treeopt.trace import RankTrace

if TYPE_CHECKING:
    from treeopt.profiling.table import LatencyTable
    from treeopt.roofline import Hardware, ModelConfig, Precision
    from treeopt.demo.load import Demo


def price(growth: Growth, verify: StepLatency, *, draft: DraftCost = NO_DRAFT,
          overhead: OverheadCost = NO_OVERHEAD, batch: Sequence[int] | None = None,
          context: Sequence[int] | None = None, depth_caps: Sequence[int] | None = None,
          trace: RankTrace | None = None) -> Selection:
    """Best tree per (batch, context) — by default every point the latency source has."""
    return select(growth, verify, batch=batch or verify.batches, context=context or
                  verify.contexts, draft=draft, overhead=overhead, depth_caps=depth_caps,
                  trace=trace)


def table_latency(table: LatencyTable, *, source: str) -> StepLatency:
    """Verify latency measured by the profiler (:class:`profiling.LatencyTable`)."""
    return StepLatency.from_points(table.points(), source, device=table.device,
                                   dtype=table.dtype, model=table.model.name)


def saved_roofline_latency(path: str | os.PathLike[str], *, model: ModelConfig | None = None,
                           dtype: str | None = None) -> StepLatency:
    """Verify latency from a saved ``treeopt roofline`` file, checked against the model/dtype."""
    from treeopt.roofline.config import ModelConfig
    from treeopt.roofline.sweep import read_roofline_points
    from treeopt.files import read_json

    doc = read_json(path)
    points = read_roofline_points(doc, source=str(path))
    if model is not None and not ModelConfig(**doc["model"]).same_shape(model):
        raise TreeoptError(f"{path}: a roofline of model {doc['model']['name']!r}, "
                           f"not {model.name!r}")
    if dtype and doc.get("dtype") != dtype:
        raise TreeoptError(f"{path}: a roofline in {doc.get('dtype')}, not {dtype}")
    return StepLatency.from_points(points, str(path), dtype=doc.get("dtype"),
                                   model=doc["model"]["name"])


def roofline_latency(growth: Growth, *, model: ModelConfig, hardware: Hardware,
                     batch: Sequence[int], context: Sequence[int], precision: Precision,
                     attention: str = "fused") -> StepLatency:
    """Verify-step latency predicted for every tree size of ``growth`` (q = 1 … N+1)."""
    from treeopt.roofline import roofline

    r = roofline(model, hardware, batch=batch, context=context,
                 tokens=list(range(1, growth.max_nodes + 2)), precision=precision,
                 attention=attention)
    return StepLatency.from_points(r.points(), f"roofline on {hardware.name}",
                                   dtype=precision.compute, model=model.name)


def profiled_costs(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
                   source: str | None = None) -> StepCosts:
    """Verify, drafting and overhead costs from a ``treeopt profile step`` file, or from
    several of one setup pooled (:func:`profiling.table.pool_step_profiles`: profiles taken
    before and after a sweep describe a drifting host better than either); ``source``: how what
    is priced names the files (default their paths, joined by " + ")."""
    from treeopt.profiling.table import pool_step_profiles

    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    return costs_of_profile(pool_step_profiles(paths), source=source)


def costs_of_profile(profile: dict[str, Any], *, source: str | None = None) -> StepCosts:
    """The step costs of a step profile's files already read and pooled
    (:func:`profiling.table.pool_step_profiles`), named ``source`` (default: the pooled files'
    paths, joined by " + ")."""
    return step_costs(profile["records"], kind=profile["heads"]["kind"],
                      source=source or " + ".join(profile["pooled"]),
                      device=str(profile.get("device", "")))


def roofline_draft(kind: str | None, *, num_heads: int, model: ModelConfig, hardware: Hardware,
                   precision: Precision, num_layers: int = 1) -> DraftCost:
    """Predicted cost of ``num_heads`` draft heads of ``kind`` on ``hardware`` (none if no kind)."""
    if not kind:
        return NO_DRAFT
    from treeopt.roofline.draft import DraftSpec, draft_seconds

    spec = DraftSpec(kind, num_heads, model.hidden_size, model.vocab_size, num_layers)
    return DraftCost(kind, f"roofline on {hardware.name}",
                     lambda b, e: draft_seconds(spec, hardware, batch=b, expanded=e,
                                                precision=precision))


def roofline_selection(growth: Growth, *, model: ModelConfig, hardware: Hardware,
                       batch: Sequence[int], context: Sequence[int],
                       precision: Precision | None = None, draft_kind: str | None = None,
                       draft_heads: int = 0) -> Selection:
    """Best tree per (b, s) with the verify step predicted by the roofline of ``model``."""
    from treeopt.roofline.model import BF16

    precision = precision or BF16
    verify = roofline_latency(growth, model=model, hardware=hardware, batch=batch,
                              context=context, precision=precision)
    draft = roofline_draft(draft_kind, num_heads=draft_heads or model_heads(growth),
                           model=model, hardware=hardware, precision=precision)
    return price(growth, verify, draft=draft, batch=batch, context=context)


@dataclass(frozen=True, eq=False)
class DemoPricing:
    """What the demo's measurements say about its ``kind`` heads on the machine that built it:
    the step costs profiled in the live loop, the selection they predict (E[L] from the
    calibration trace walked step by step) and, when one was recorded, the live sweep."""

    kind: str
    costs: StepCosts
    selection: Selection
    sweep: Sweep | None


def demo_pricing(demo: Demo, kind: str) -> DemoPricing | None:
    """The demo's measured pricing of its ``kind`` heads (None without a step profile)."""
    path = demo.step_profile(kind)
    if path is None:
        return None
    costs = profiled_costs(path)
    selection = price(demo.growths[kind], costs.verify, draft=costs.draft,
                      overhead=costs.overhead, trace=demo.traces[kind])
    sweep_path = demo.sweep(kind)
    return DemoPricing(kind, costs, selection,
                       Sweep.load(sweep_path) if sweep_path is not None else None)


def model_heads(growth: Growth) -> int:
    """Heads a growth needs: its depth cap."""
    return int(growth.caps.get("max_depth", 1))


__all__ = ["DemoPricing", "demo_pricing", "price", "profiled_costs", "roofline_draft",
           "roofline_latency", "roofline_selection", "saved_roofline_latency", "table_latency"]
