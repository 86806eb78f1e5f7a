"""Price grown trees on hardware: the one place that joins a Growth with a verify-latency source
(a measured table, a saved roofline, or a roofline computed here) and a drafting cost, and
selects. ``treeopt select`` and the Hardware page both come through here (numpy only: the roofline
and the latency tables need no torch).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from treeopt.costs import NO_DRAFT, DraftCost, StepLatency, draft_from_measurements
from treeopt.errors import TreeoptError
from treeopt.grow import Growth
from treeopt.select import select
from treeopt.selection import Selection

if TYPE_CHECKING:
    from profiling.table import LatencyTable
    from roofline import Hardware, ModelConfig, Precision
    from treeopt.demo.load import Demo


def price(growth: Growth, verify: StepLatency, *, draft: DraftCost = NO_DRAFT,
          batch: Sequence[int] | None = None, context: Sequence[int] | None = None,
          depth_caps: Sequence[int] | None = None) -> Selection:
    """Best tree per (batch, context) — by default every point the latency source has."""
    return select(growth, verify, batch=batch or verify.batches, context=context or
                  verify.contexts, draft=draft, depth_caps=depth_caps)


def table_latency(table: LatencyTable, *, source: str) -> StepLatency:
    """Verify latency measured by the profiler (:class:`profiling.LatencyTable`)."""
    return StepLatency.from_points(table.points(), source, device=table.device,
                                   dtype=table.dtype, model=table.model.name)


def saved_roofline_latency(path: str | os.PathLike[str], *, model: ModelConfig | None = None,
                           dtype: str | None = None) -> StepLatency:
    """Verify latency from a saved ``treeopt roofline`` file, checked against the model/dtype."""
    from roofline.config import ModelConfig
    from roofline.sweep import read_roofline_points
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
    from roofline import roofline

    r = roofline(model, hardware, batch=batch, context=context,
                 tokens=list(range(1, growth.max_nodes + 2)), precision=precision,
                 attention=attention)
    return StepLatency.from_points(r.points(), f"roofline on {hardware.name}",
                                   dtype=precision.compute, model=model.name)


def measured_draft(path: str | os.PathLike[str]) -> DraftCost:
    """Drafting cost from a ``treeopt profile draft`` file."""
    from profiling.table import load_draft_latency

    return draft_from_measurements(load_draft_latency(path), source=str(path))


def roofline_draft(kind: str | None, *, num_heads: int, model: ModelConfig, hardware: Hardware,
                   precision: Precision, num_layers: int = 1) -> DraftCost:
    """Predicted cost of ``num_heads`` draft heads of ``kind`` on ``hardware`` (none if no kind)."""
    if not kind:
        return NO_DRAFT
    from roofline.draft import DraftSpec, draft_seconds

    spec = DraftSpec(kind, num_heads, model.hidden_size, model.vocab_size, num_layers)
    return DraftCost(kind, f"roofline on {hardware.name}",
                     lambda b, e: draft_seconds(spec, hardware, batch=b, expanded=e,
                                                precision=precision))


def roofline_selection(growth: Growth, *, model: ModelConfig, hardware: Hardware,
                       batch: Sequence[int], context: Sequence[int],
                       precision: Precision | None = None, draft_kind: str | None = None,
                       draft_heads: int = 0) -> Selection:
    """Best tree per (b, s) with the verify step predicted by the roofline of ``model``."""
    from roofline.model import BF16

    precision = precision or BF16
    verify = roofline_latency(growth, model=model, hardware=hardware, batch=batch,
                              context=context, precision=precision)
    draft = roofline_draft(draft_kind, num_heads=draft_heads or model_heads(growth),
                           model=model, hardware=hardware, precision=precision)
    return price(growth, verify, draft=draft, batch=batch, context=context)


def demo_latency_selection(demo: Demo) -> tuple[LatencyTable, Selection] | None:
    """The demo's measured latency table and, on it, the best tree of its first head kind."""
    if demo.latency is None:
        return None
    from profiling.table import LatencyTable

    table = LatencyTable.load(demo.latency)
    kind = next(iter(demo.traces))
    draft_path = demo.draft_latency(kind)
    draft = measured_draft(draft_path) if draft_path is not None else NO_DRAFT
    largest = max(r.tokens for r in table.records if r.ok) - 1  # q = nodes + root
    growth = demo.growths[kind]
    if growth.max_nodes > largest:
        from treeopt.grow import grow

        growth = grow(demo.traces[kind], method="empirical", max_nodes=largest)
    verify = table_latency(table, source=f"demo latency table ({table.device})")
    return table, price(growth, verify, draft=draft)


def model_heads(growth: Growth) -> int:
    """Heads a growth needs: its depth cap."""
    return int(growth.caps.get("max_depth", 1))


__all__ = ["demo_latency_selection", "measured_draft", "price", "roofline_draft",
           "roofline_latency", "roofline_selection", "saved_roofline_latency", "table_latency"]
