"""The demo's two prompt sets — the held-out code prompts and the prose ones, where repeats are
rare — and each drafter's selection on each: the growth made for the set, E[L] the per-step walk
of the set's trace, priced by the drafter's step profile as the demo's selections are
(:func:`~treeopt.demo.selections.priced_selection`: a lookup drafter's chains verified as drafted
too). What ``choose-drafter --prompt-set`` compares: every build prices the choice last, from
the finished files (:func:`ship_prose_choice`), and ``benchmarks/bench_choose.py`` races it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from treeopt.demo.layout import DemoPaths

if TYPE_CHECKING:
    from treeopt.pricing.selection import Selection

PROMPT_SETS = ("code", "prose")


def prompt_set_selections(paths: DemoPaths, kinds: Sequence[str], *, device: str = "cpu",
                          ) -> dict[str, dict[str, Selection]]:
    """Prompt set → drafter → its selection, for each of ``kinds`` (every one needs its step
    profile on ``device`` and its prose trace and growth). Profiles are named by their path
    inside the demo."""
    from treeopt.demo.selections import priced_selection
    from treeopt.demo.step_costs import demo_step_costs
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace

    sets: dict[str, dict[str, Selection]] = {name: {} for name in PROMPT_SETS}
    for kind in kinds:
        costs = demo_step_costs(paths, kind, device,
                                source=paths.inside(paths.step_profile(kind, device)))
        for name, growth, trace in (
                ("code", paths.growth(kind), paths.trace(kind, heldout=True)),
                ("prose", paths.prose_growth(kind), paths.prose_trace(kind))):
            sets[name][kind] = priced_selection(Growth.load(growth), RankTrace.load(trace), costs)
    return sets


def ship_prose_choice(paths: DemoPaths, device: str) -> dict[str, Any]:
    """The fastest drafter per batch size on the held-out code prompts and on the prose ones,
    and the robust pick across both (:func:`treeopt.pricing.selection.choose_drafter_per_set`),
    for the manifest's ``prose_choice``: priced from the demo's finished files as every build's
    last step. Nothing without a prose set, or where a drafter has no step profile on
    ``device``."""
    from treeopt.pricing.selection import choose_drafter_per_set

    kinds = paths.kinds()
    if not kinds or not paths.prompts("prose").is_file() or not all(
            paths.step_profile(k, device).is_file() and paths.prose_trace(k).is_file()
            for k in kinds):
        return {}
    points = [c.to_json() for c in choose_drafter_per_set(
        prompt_set_selections(paths, kinds, device=device))]
    return {"acceptance": "per-step walk of each set's trace (held-out code, prose)",
            "points": points}


__all__ = ["PROMPT_SETS", "prompt_set_selections", "ship_prose_choice"]
