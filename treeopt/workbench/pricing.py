"""Price grown trees on hardware: selection on a roofline or on a measured latency table.

The one place that joins a Growth with a latency source and a drafting cost; the Hardware page
calls it (numpy only: the roofline and the latency table need no torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from treeopt.grow import Growth
from treeopt.select import NO_DRAFT, DraftCost, StepLatency, schedule, select


def roofline_draft(kind: str | None, *, num_heads: int, model: Any, hardware: Any,
                   precision: Any, num_layers: int = 1) -> DraftCost:
    """Predicted cost of ``num_heads`` draft heads of ``kind`` on ``hardware`` (none if no kind)."""
    if not kind:
        return NO_DRAFT
    from roofline.draft import DraftSpec, draft_seconds

    spec = DraftSpec(kind, num_heads, model.hidden_size, model.vocab_size, num_layers)
    return DraftCost(kind, f"roofline on {hardware.name}",
                     lambda b, e: draft_seconds(spec, hardware, batch=b, expanded=e,
                                                precision=precision))


def roofline_selection(growth: Growth, *, model: Any, hardware: Any, batch: Sequence[int],
                       context: Sequence[int], precision: Any = None,
                       draft_kind: str | None = None, draft_heads: int = 0) -> dict[str, Any]:
    """Best tree per (b, s) with the verify step predicted by the roofline of ``model``."""
    from roofline.model import BF16

    precision = precision or BF16
    verify, _ = roofline_latency(growth, model=model, hardware=hardware, batch=batch,
                                 context=context, precision=precision)
    draft = roofline_draft(draft_kind, num_heads=draft_heads or model_heads(growth),
                           model=model, hardware=hardware, precision=precision)
    result = select(growth, verify, batch=batch, context=context, draft=draft)
    result["schedules"] = [schedule(result, context=s) for s in context]
    return result


def roofline_latency(growth: Growth, *, model: Any, hardware: Any, batch: Sequence[int],
                     context: Sequence[int], precision: Any,
                     attention: str = "fused") -> tuple[StepLatency, list[tuple[int, int, int, float]]]:
    """Verify-step latency predicted for every tree size of ``growth`` (q = 1 … N+1), and its points."""
    from roofline import roofline

    r = roofline(model, hardware, batch=batch, context=context,
                 tokens=list(range(1, growth.max_nodes + 2)), precision=precision,
                 attention=attention)
    points = r.points()
    return StepLatency.from_points(points, f"roofline on {hardware.name}",
                                   dtype=precision.compute, model=model.name), points


def table_selection(growth: Growth, table: Any, *, draft: DraftCost = NO_DRAFT,
                    source: str = "latency table") -> dict[str, Any]:
    """Best tree per measured (b, s) of a :class:`profiling.LatencyTable`."""
    points = table.points()
    verify = StepLatency.from_points(points, source, device=table.device, dtype=table.dtype,
                                     model=table.model.name)
    batch = sorted({p[0] for p in points})
    context = sorted({p[1] for p in points})
    result = select(growth, verify, batch=batch, context=context, draft=draft)
    result["schedules"] = [schedule(result, context=s) for s in context]
    return result


def demo_latency_selection(demo: Any) -> tuple[Any, dict[str, Any]] | None:
    """The demo's measured latency table and, on it, the best tree of its first head kind."""
    if demo.latency is None:
        return None
    from profiling.table import LatencyTable

    table = LatencyTable.load(demo.latency)
    kind = next(iter(demo.traces))
    draft = NO_DRAFT
    draft_path = demo.draft_latency(kind)
    if draft_path is not None:
        from profiling.table import load_draft_latency
        from treeopt.select import draft_from_measurements

        draft = draft_from_measurements(load_draft_latency(draft_path), source=str(draft_path))
    largest = max(r.tokens for r in table.records if r.ok) - 1  # q = nodes + root
    growth = demo.growths[kind]
    if growth.max_nodes > largest:
        from treeopt.grow import grow

        growth = grow(demo.traces[kind], method="empirical", max_nodes=largest)
    return table, table_selection(growth, table, draft=draft,
                                  source=f"demo latency table ({table.device})")


def model_heads(growth: Growth) -> int:
    """Heads a growth needs: its depth cap."""
    return int(growth.caps.get("max_depth", 1))
