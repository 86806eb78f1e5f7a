"""The demo's measured pricing, as the app's pages show it: its step profiles priced
(:mod:`treeopt.pricing`) beside its live sweeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from treeopt.costs import StepCosts
from treeopt.pricing import price, profiled_costs
from treeopt.selection import Selection
from treeopt.sweep import Sweep

if TYPE_CHECKING:
    from treeopt.demo.load import Demo


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


__all__ = ["DemoPricing", "demo_pricing"]
