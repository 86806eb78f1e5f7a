"""The demo's selections, shipped: ``treeopt select --demo KIND``'s answer for every drafter with
a step profile, written when a build finishes, beside the SHA-256 of each file it was priced from
(the growth, the calibration trace, the step profile).

Pricing a drafter walks its trace step by step for every candidate tree (the per-step greedy
growth, :mod:`treeopt.model.step_growth`) and, for a lookup drafter whose trace records how far
it drafted, every chain verified only as far as it was drafted (:mod:`treeopt.pricing.drafted`,
what ``verify`` then decodes): about a second per drafter on the build host, which the app's
first view would otherwise pay for every drafter before it shows anything. A shipped selection
is read instead only while its inputs are the files it was priced from, byte for byte, and it
was priced as :data:`PRICING` says; when one changed (a demo edited, re-timed or re-grown by
hand, or a selection shipped by an earlier version), :func:`shipped_selection` says None and
the caller prices afresh. Numpy only: no torch, no model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from treeopt.demo.digests import inputs_record, inputs_unchanged, remove_stale
from treeopt.demo.layout import DemoPaths
from treeopt.demo.step_costs import demo_step_costs
from treeopt.errors import TreeoptError
from treeopt.files import read_tagged_json, write_json
from treeopt.model.growth import Growth
from treeopt.model.trace import RankTrace
from treeopt.pricing.costs import StepCosts
from treeopt.pricing.drafted import prices_drafted
from treeopt.pricing.selection import SELECTION_FORMAT, Selection
from treeopt.pricing.sources import price

COST_BLOCKS = ("latency", "draft", "overhead")  # a selection's cost sources
# how a shipped selection was priced; one priced otherwise is priced afresh
PRICING = ("per-step walk of the trace; per-step greedy trees; drafted chains where traced; "
           "verify falls pooled within their noise; verify shared by the drafters' profiles")


def selection_inputs(paths: DemoPaths, kind: str, device: str) -> dict[str, Path]:
    """The files ``kind``'s selection on ``device`` is priced from, by role: the other
    drafters' step profiles too, which its verify step is priced from
    (:func:`~treeopt.demo.step_costs.demo_step_costs`)."""
    return {"growth": paths.growth(kind), "trace": paths.trace(kind),
            "step_profile": paths.step_profile(kind, device),
            **{f"verify_profile {p.stem}": p for p in paths.other_step_profiles(kind, device)}}


def priced_selection(growth: Growth, trace: RankTrace, costs: StepCosts) -> Selection:
    """The demo's selection of a drafter: ``growth``'s trees priced by its step profile's
    ``costs``, E[L] from ``trace`` walked step by step, at every point the profile has; where
    the trace records how far a lookup drafter drafted, its chains verified only as far as they
    were drafted are priced too, and a point picks whichever is faster — as ``treeopt select
    --demo KIND`` does (:func:`~treeopt.pricing.drafted.prices_drafted`)."""
    return price(growth, costs.verify, draft=costs.draft, overhead=costs.overhead, trace=trace,
                 drafted_only=prices_drafted(trace))


def ship_selection(paths: DemoPaths, kind: str, device: str) -> dict[str, Any]:
    """Price ``kind`` on ``device`` from the demo's files and write the selection with its
    inputs' digests; return what the manifest keeps (the file, each batch size's best size)."""
    inputs = selection_inputs(paths, kind, device)
    selection = priced_selection(Growth.load(inputs["growth"]), RankTrace.load(inputs["trace"]),
                                 demo_step_costs(paths, kind, device))
    out = paths.selection(kind, device)
    doc = _sources(selection.to_json(), str(inputs["step_profile"]),
                   paths.inside(inputs["step_profile"]))
    write_json(out, {**doc, "command": f"treeopt select --demo {kind}",
                     "pricing": PRICING, "inputs": inputs_record(paths, inputs)})
    return {"file": paths.inside(out),
            "best_size": {str(p.batch): p.best_size for p in selection.points
                          if p.context == selection.contexts[0]}}


def ship_selections(paths: DemoPaths, device: str) -> dict[str, Any]:
    """Every drafter's selection with a step profile on ``device``, shipped; selections of
    drafters without one removed (the build's last step: it prices what the demo now holds)."""
    made = {kind: ship_selection(paths, kind, device) for kind in paths.kinds()
            if paths.step_profile(kind, device).is_file()}
    remove_stale(paths.root / "selections", f"*-{device}.json",
                 {paths.selection(kind, device) for kind in made})
    return made


def shipped_selection(paths: DemoPaths, kind: str, device: str) -> Selection | None:
    """``kind``'s shipped selection on ``device``, while every file it was priced from is as it
    was; None where there is none, or an input changed since (then price it afresh)."""
    path = paths.selection(kind, device)
    if not path.is_file():
        return None
    try:
        doc = read_tagged_json(path, SELECTION_FORMAT)
        inputs = selection_inputs(paths, kind, device)
        if doc.get("pricing") != PRICING or not inputs_unchanged(paths, doc.get("inputs"),
                                                                 inputs):
            return None
        profile = inputs["step_profile"]
        return Selection.from_json(_sources(doc, paths.inside(profile), str(profile)),
                                   source=str(path))
    except TreeoptError:  # not a selection file
        return None


def _sources(doc: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """``doc`` with the costs' source ``old`` named ``new``: a shipped selection names its step
    profile inside the demo (it was priced in the build's work directory, and is read wherever
    the demo is), and reads back naming it where the demo is, as pricing here would."""
    return {**doc, **{block: {**doc[block], "source": new} for block in COST_BLOCKS
                      if isinstance(doc.get(block), dict) and doc[block].get("source") == old}}


__all__ = ["PRICING", "priced_selection", "selection_inputs", "ship_selection", "ship_selections",
           "shipped_selection"]
