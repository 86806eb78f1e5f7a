"""Price grown trees on hardware: join a Growth with a verify-latency source (a measured table,
a saved roofline, a roofline computed here, or a step profile) and a drafting cost, and select.
``treeopt select``, the demo and the Hardware page all come through here (numpy only: the
roofline, the latency tables and the step profiles need no torch).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from treeopt.documents.step_profile import StepProfile
from treeopt.errors import TreeoptError
from treeopt.model.growth import Growth
from treeopt.model.trace import RankTrace
from treeopt.pricing.costs import (
    NO_DRAFT,
    NO_OVERHEAD,
    DraftCost,
    OverheadCost,
    StepCosts,
    StepLatency,
    step_costs,
)
from treeopt.pricing.selection import Selection
from treeopt.pricing.throughput import select

if TYPE_CHECKING:
    from treeopt.roofline import Hardware, ModelConfig, Precision


def price(growth: Growth, verify: StepLatency, *, draft: DraftCost = NO_DRAFT,
          overhead: OverheadCost = NO_OVERHEAD, batch: Sequence[int] | None = None,
          context: Sequence[int] | None = None, depth_caps: Sequence[int] | None = None,
          trace: RankTrace | None = None, search_per_step: bool = True,
          drafted_only: bool = False) -> Selection:
    """Best tree per (batch, context) — by default every point the latency source has
    (:func:`~treeopt.pricing.throughput.select`)."""
    return select(growth, verify, batch=batch or verify.batches, context=context or
                  verify.contexts, draft=draft, overhead=overhead, depth_caps=depth_caps,
                  trace=trace, search_per_step=search_per_step, drafted_only=drafted_only)


def saved_roofline_latency(path: str | os.PathLike[str], *, model: ModelConfig | None = None,
                           dtype: str | None = None) -> StepLatency:
    """Verify latency from a saved ``treeopt roofline`` file, checked against the model/dtype."""
    from treeopt.files import read_json
    from treeopt.roofline.config import ModelConfig
    from treeopt.roofline.step_times import read_roofline_points

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
                                   device=hardware.name, dtype=precision.compute,
                                   model=model.name)


def profiled_costs(path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *,
                   source: str | None = None) -> StepCosts:
    """Verify, drafting and overhead costs from a ``treeopt profile step`` file, or from
    several of one setup pooled (:meth:`StepProfile.pool`: profiles taken before and after a
    sweep describe a drifting host better than either); ``source``: how what is priced names
    the files (default their paths, joined by " + ")."""
    paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
    return costs_of_profile(StepProfile.pool(paths), source=source)


def costs_of_profile(profile: StepProfile, *, source: str | None = None) -> StepCosts:
    """The step costs of a step profile already read (or pooled), named ``source`` (default:
    the files it was read from, joined by " + ")."""
    return step_costs(profile.records, kind=profile.kind,
                      source=source or " + ".join(profile.sources),
                      device=profile.device or "")


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


def model_heads(growth: Growth) -> int:
    """Heads a growth needs: its depth cap."""
    return int(growth.caps.get("max_depth", 1))


__all__ = ["costs_of_profile", "model_heads", "price", "profiled_costs", "roofline_draft",
           "roofline_latency", "roofline_selection", "saved_roofline_latency"]
