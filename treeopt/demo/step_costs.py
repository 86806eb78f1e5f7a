"""A demo drafter's step costs: its own step profile, with the verify step priced from every
profile the demo holds on that device (:mod:`treeopt.pricing.shared_verify`: the verify forward
is the base model's, whichever drafter proposed the tree). What the demo's selections, its
prompt-set choice and the app's pages price with. Numpy only."""

from __future__ import annotations

from treeopt.demo.layout import DemoPaths
from treeopt.documents.step_profile import StepProfile
from treeopt.pricing.costs import StepCosts
from treeopt.pricing.shared_verify import shared_verify_costs, unlike


def demo_step_costs(paths: DemoPaths, kind: str, device: str = "cpu", *,
                    source: str | None = None, own: StepProfile | None = None) -> StepCosts:
    """``kind``'s step costs on ``device``: the demo's step profile of ``kind`` with the verify
    step shared with the other drafters' profiles of the same setup (one of another setup — a
    drafter re-timed with other threads — is left out); ``source``: how what is priced names
    the profile (default its path); ``own``: a profile of ``kind`` in place of the demo's (one
    taken again)."""
    if own is None:
        own = StepProfile.load(paths.step_profile(kind, device))
    others = [p for p in (StepProfile.load(f) for f in paths.other_step_profiles(kind, device))
              if unlike(own, p) is None]
    return shared_verify_costs(own, others, source=source)


__all__ = ["demo_step_costs"]
