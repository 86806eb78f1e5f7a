"""The demo's measured pricing, as the app's pages show it: its step profiles priced
(:mod:`treeopt.pricing.sources`) beside its live sweeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from treeopt.demo.selections import priced_selection, shipped_selection
from treeopt.documents.sweep import Sweep, SweepPoint
from treeopt.model.growth import Growth
from treeopt.model.runs import as_runs
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.pricing.costs import StepCosts
from treeopt.pricing.selection import Point, Selection
from treeopt.pricing.sources import profiled_costs
from treeopt.pricing.sweep_prediction import Prediction, predict

if TYPE_CHECKING:
    from treeopt.demo.load import Demo


@dataclass(frozen=True, eq=False)
class SweptPricing:
    """A tree priced as a live sweep ran it: E[L] from the swept prompts' own trace over the
    tokens decoded (at batch > 1 over the steady window the sweep counts), step costs from the
    profile taken alongside the sweep's points, which met the machine as they did. It checks the
    step-cost model itself (``bench_live`` holds every sweep point to 5% of it); the gap between
    it and ``select``'s prediction is the prompts' and the machine's, not the model's."""

    growth: Growth
    costs: StepCosts
    trace: RankTrace
    source: str  # the alongside profile, as the sweep names it
    continuous: bool = False  # the sweep batched continuously (its steady window is another)

    def speedup(self, tree: Tree, batch: int) -> float:
        return predict(tree, self.growth, self.costs, self.trace, batch,
                       continuous=self.continuous).speedup


@dataclass(frozen=True, eq=False)
class HeldOutPricing:
    """A tree priced for held-out prompts: E[L] from the held-out trace walked step by step —
    over the prompts and tokens the live sweep decoded where there is a sweep (at batch > 1
    through the steady window it counts), else over the whole trace — and the step costs
    ``select`` prices with. The app's headline prediction: for prompts like the ones served,
    not the calibration prompts the trees were grown on."""

    growth: Growth
    costs: StepCosts
    trace: RankTrace
    prompts: int  # held-out prompts walked
    tokens: int | None  # new tokens per prompt walked (None: every position the trace holds)
    continuous: bool = False  # the batch window of continuous batching (the sweep's)

    def predict(self, tree: Tree, batch: int, *, drafted: bool = False) -> Prediction:
        """Speed-up, tokens/s and E[L] of ``tree`` at ``batch`` on these held-out prompts
        (``drafted``: a chain verified as far as it was drafted)."""
        return predict(tree, self.growth, self.costs, self.trace, batch,
                       continuous=self.continuous, drafted=drafted)

    @property
    def window(self) -> str:
        """``32 held-out prompts × 128 tokens``: what the walk covers."""
        tokens = f" × {self.tokens} tokens" if self.tokens is not None else ""
        return f"{self.prompts} held-out prompts{tokens}"


@dataclass(frozen=True, eq=False)
class DemoPricing:
    """What the demo's measurements say about its ``kind`` heads on the machine that built it:
    the step costs profiled in the live loop, the selection they predict (E[L] from the
    calibration trace walked step by step; the growth order's trees and the per-step greedy
    growth's) and, when one was recorded, the live sweep."""

    kind: str
    costs: StepCosts
    selection: Selection
    sweep: Sweep | None
    as_swept: SweptPricing | None = None  # the sweep's own run priced (with its alongside profile)
    held_out: HeldOutPricing | None = None  # the step costs with the held-out walk
    drafted_sweep: Sweep | None = None  # a lookup drafter's chains swept verified as drafted


def measures(point: SweepPoint, pick: Point) -> bool:
    """Whether the sweep ``point`` measured ``pick``'s tree (the same paths, whatever its size
    and family are called)."""
    return set(point.choices) == set(pick.tree.paths)


def swept_picks(pricing: DemoPricing, *, drafted: bool) -> dict[int, Point]:
    """Batch → the pick of ``pricing``'s selection (its first context) that a sweep measures:
    with ``drafted``, the chains verified as drafted (the drafted sweep's), else the others."""
    first = pricing.selection.contexts[0]
    return {p.batch: p for p in pricing.selection.points
            if p.context == first and p.drafted == drafted}


def unswept_picks(pricing: DemoPricing, *, drafted: bool) -> list[Point]:
    """The picks of :func:`swept_picks` that their sweep does not mark as select's pick,
    measured. A demo build marks and measures every pick (:mod:`treeopt.demo.stage_picks`),
    except in a sweep measured by an earlier treeopt."""
    sweep = pricing.drafted_sweep if drafted else pricing.sweep
    out = []
    for p in swept_picks(pricing, drafted=drafted).values():
        marked = sweep.selected(p.batch) if sweep is not None else None
        if marked is None or not measures(marked, p):
            out.append(p)
    return out


def demo_pricing(demo: Demo, kind: str) -> DemoPricing | None:
    """The demo's measured pricing of its ``kind`` heads (None without a step profile): the
    selection (the demo's own, :mod:`treeopt.demo.selections`, while its inputs are unchanged;
    else priced here), the live sweep, the sweep priced as it ran, the held-out pricing, and a
    lookup drafter's sweep of its chains verified as drafted."""
    costs = demo.step_costs(kind)
    if costs is None:
        return None
    selection = (shipped_selection(demo.paths, kind, demo.latency.stem)
                 or priced_selection(demo.growths[kind], demo.traces[kind], costs))
    sweep_path = demo.sweep(kind)
    sweep = Sweep.load(sweep_path) if sweep_path is not None else None
    drafted_path = demo.sweep(kind, drafted=True)
    return DemoPricing(kind, costs, selection, sweep,
                       swept_pricing(demo, kind, sweep) if sweep is not None else None,
                       held_out_pricing(demo, kind, costs, sweep),
                       Sweep.load(drafted_path) if drafted_path is not None else None)


def held_out_pricing(demo: Demo, kind: str, costs: StepCosts,
                     sweep: Sweep | None) -> HeldOutPricing | None:
    """``costs`` with the walk of the demo's held-out trace of ``kind``: over the sweep's
    prompts and new tokens when ``sweep`` records them, else the whole trace (None without a
    held-out trace that records its sequences)."""
    trace = demo.heldout_traces.get(kind)
    counts = trace.meta.get("sequence_positions") if trace is not None else None
    if trace is None or not counts:
        return None
    prompts, tokens = (sweep.meta.get("prompts"), sweep.meta.get("max_new_tokens")
                       ) if sweep is not None else (None, None)
    if isinstance(prompts, int) and isinstance(tokens, int) and 1 <= prompts <= len(counts):
        return HeldOutPricing(demo.growths[kind], costs, swept_part(trace, sweep, prompts),
                              prompts, tokens,
                              continuous=bool(sweep and sweep.continuous))
    return HeldOutPricing(demo.growths[kind], costs, trace, len(counts), None)


def swept_pricing(demo: Demo, kind: str, sweep: Sweep) -> SweptPricing | None:
    """The demo's ``sweep`` of ``kind`` priced as it ran (None when it took no step profile
    alongside its points, or that profile is missing)."""
    alongside = sweep.meta.get("alongside")
    prompts, new_tokens = sweep.meta.get("prompts"), sweep.meta.get("max_new_tokens")
    if not (isinstance(alongside, str) and isinstance(prompts, int)
            and isinstance(new_tokens, int)) or kind not in demo.heldout_traces:
        return None
    path = demo.paths.root / alongside
    if not path.is_file():
        return None
    own = swept_part(demo.heldout_traces[kind], sweep, prompts)
    return SweptPricing(demo.growths[kind], profiled_costs(path), own, alongside,
                        continuous=sweep.continuous)


def swept_part(trace: RankTrace, sweep: Sweep, prompts: int) -> RankTrace:
    """The part of the held-out ``trace`` that ``sweep`` decoded: its first ``prompts``
    sequences as runs of the sweep's new tokens keep them (:func:`~treeopt.model.runs.as_runs`),
    for a sweep whose steps count the tokens kept (``step_tokens``); each cut to its first
    ``max_new_tokens`` positions, as such a sweep's steps counted every token accepted, for one
    measured before."""
    tokens = int(sweep.meta["max_new_tokens"])
    if sweep.meta.get("step_tokens") == "kept":
        return as_runs(trace, [tokens] * prompts)
    return trace.sequences(prompts, positions=tokens)


__all__ = ["DemoPricing", "HeldOutPricing", "SweptPricing", "demo_pricing", "held_out_pricing",
           "measures", "swept_part", "swept_picks", "swept_pricing", "unswept_picks"]
