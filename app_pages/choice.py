"""The chosen drafter and tree: one :class:`~treeopt.workbench.trees.Choice` in session state,
kept across pages and reruns — select's pick for the drafter and batch size by default — and the
Trees page's widgets, which are seeded from it and write it back."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app_pages.state import current_dataset, demo_dataset, demo_pricing
from treeopt.demo.layout import KINDS
from treeopt.pricing.selection import Point
from treeopt.workbench.pricing import DemoPricing
from treeopt.workbench.trees import Choice, default_choice, pick_choice

CHOICE_KEY = "choice"
LABEL_KEY, BATCH_KEY = "trees_label", "trees_batch"
# the Trees page's widget keys → the TreeSettings field each one holds
SETTING_KEYS = {"trees_temperature": "temperature", "trees_method": "method",
                "trees_max": "max_nodes", "trees_size": "size", "trees_depth": "max_depth",
                "trees_rank": "max_rank", "trees_constraint": "constraint",
                "trees_family": "family"}


def is_demo_data() -> bool:
    """Whether the pages work on the shipped demo's traces (the Data page's default)."""
    return current_dataset() is demo_dataset()


def _priced(label: str, demo_drafter: bool | None) -> DemoPricing | None:
    """The demo's pricing of drafter ``label`` (None for data that is not the demo's — unless
    ``demo_drafter`` says the drafter is the demo's —, or a demo without a step profile)."""
    if label not in KINDS or not (is_demo_data() if demo_drafter is None else demo_drafter):
        return None
    return demo_pricing(label)


def pick_batches(label: str, *, demo_drafter: bool | None = None) -> list[int]:
    """The batch sizes select priced for the demo's ``label`` drafter (none without pricing)."""
    priced = _priced(label, demo_drafter)
    return priced.selection.batches if priced is not None else []


def demo_pick(label: str, batch: int | None = None, *,
              demo_drafter: bool | None = None) -> tuple[Point, str] | None:
    """The tree select picks for the demo's ``label`` drafter at ``batch`` (the smallest batch
    when None or not priced) and smallest context, with the device it was priced on."""
    priced = _priced(label, demo_drafter)
    if priced is None:
        return None
    selection = priced.selection
    batches = selection.batches
    point = selection.point(batch if batch in batches else batches[0], selection.contexts[0])
    return point, str(priced.costs.verify.meta.get("device") or "this machine")


def default_for(label: str, *, batch: int | None = None,
                demo_drafter: bool | None = None) -> Choice:
    """The choice of drafter ``label`` before one is made: select's pick at ``batch`` on the
    demo's measured machine, else the Trees page's default tree."""
    demo_drafter = is_demo_data() if demo_drafter is None else demo_drafter
    source = (demo_dataset() if demo_drafter else current_dataset()).sources[label]
    found = demo_pick(label, batch, demo_drafter=demo_drafter)
    if found is None:
        return default_choice(source, label)
    return default_choice(source, label, pick=found[0], hardware=found[1])


def current_choice(label: str | None = None, *, batch: int | None = None,
                   demo_drafter: bool | None = None) -> Choice:
    """The choice in session state — for drafter ``label`` when given — else that drafter's
    default (by default: the first drafter of the data) at ``batch``."""
    chosen: Choice | None = st.session_state.get(CHOICE_KEY)
    if label is None:
        sources = current_dataset().sources
        if chosen is not None and chosen.drafter in sources:
            return chosen
        label = next(iter(sources))
    elif chosen is not None and chosen.drafter == label:
        return chosen
    return default_for(label, batch=batch, demo_drafter=demo_drafter)


def chosen_label() -> str | None:
    """The drafter of the choice in session state, if one was made."""
    chosen: Choice | None = st.session_state.get(CHOICE_KEY)
    return chosen.drafter if chosen is not None else None


def set_choice(choice: Choice) -> None:
    st.session_state[CHOICE_KEY] = choice


def choose_pick(label: str, point: Point, *, heads: int, hardware: str) -> None:
    """Make select's ``point`` for drafter ``label`` the choice (a button's callback)."""
    set_choice(pick_choice(label, point, heads=heads, hardware=hardware))


def seed_trees_widgets(choice: Choice, *, overwrite: bool = False) -> None:
    """Give the Trees page's widgets the values that grow ``choice`` again: those not on the page
    yet (a first visit, or a return from another page), or all of them (``overwrite``)."""
    values: dict[str, Any] = {LABEL_KEY: choice.drafter, BATCH_KEY: choice.batch}
    values |= {key: getattr(choice.settings, name) for key, name in SETTING_KEYS.items()}
    for key, value in values.items():
        if value is not None and (overwrite or key not in st.session_state):
            st.session_state[key] = value


def trees_drafter_changed() -> None:
    """The Trees page's drafter or batch changed: move to select's pick for them (the
    widgets' callback)."""
    label = st.session_state[LABEL_KEY]
    choice = default_for(label, batch=st.session_state.get(BATCH_KEY))
    set_choice(choice)
    seed_trees_widgets(choice, overwrite=True)
