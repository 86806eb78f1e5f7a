"""The demo's two prompt sets — the held-out code prompts and the prose ones, where repeats are
rare — and each drafter's selection on each: the growth made for the set, E[L] the per-step walk
of the set's trace, priced by the drafter's step profile. What ``choose-drafter --prompt-set``
compares (the build's ``prose`` stage and ``benchmarks/bench_choose.py`` call it)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from treeopt.demo.layout import DemoPaths

if TYPE_CHECKING:
    from treeopt.pricing.selection import Selection

PROMPT_SETS = ("code", "prose")


def prompt_set_selections(paths: DemoPaths, kinds: Sequence[str], *, device: str = "cpu",
                          ) -> dict[str, dict[str, Selection]]:
    """Prompt set → drafter → its selection, for each of ``kinds`` (every one needs its step
    profile on ``device`` and its prose trace and growth). Profiles are named by their path
    inside the demo."""
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace
    from treeopt.pricing.sources import profiled_costs
    from treeopt.pricing.throughput import select

    sets: dict[str, dict[str, Selection]] = {name: {} for name in PROMPT_SETS}
    for kind in kinds:
        profile = paths.step_profile(kind, device)
        costs = profiled_costs(profile, source=paths.inside(profile))
        for name, growth, trace in (
                ("code", paths.growth(kind), paths.trace(kind, heldout=True)),
                ("prose", paths.prose_growth(kind), paths.prose_trace(kind))):
            sets[name][kind] = select(Growth.load(growth), costs.verify, draft=costs.draft,
                                      overhead=costs.overhead, batch=costs.verify.batches,
                                      context=costs.verify.contexts, trace=RankTrace.load(trace))
    return sets


__all__ = ["PROMPT_SETS", "prompt_set_selections"]
