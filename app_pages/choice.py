"""The chosen drafter and tree: one :class:`~treeopt.workbench.trees.Choice` in session state,
kept across pages and reruns — the Overview's recommendation (``choose-drafter``'s drafter,
``select``'s tree) until the person chooses another — and the Trees page's widgets, which are
seeded from it and write it back."""

from __future__ import annotations

from typing import Any

import streamlit as st

from app_pages.state import current_dataset, demo, demo_dataset, demo_overview, demo_pricing
from treeopt.demo.layout import KINDS
from treeopt.model.trace import RankTrace
from treeopt.pricing.selection import Point
from treeopt.workbench.demo_pricing import DemoPricing
from treeopt.workbench.overview import BatchAnswer, Overview
from treeopt.workbench.trees import Choice, default_choice, pick_choice

CHOICE_KEY = "choice"
CONFIRMED_KEY = "choice_confirmed"  # what "Use this tree" last made the choice, said once
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
              demo_drafter: bool | None = None) -> tuple[Point, str, float | None] | None:
    """The tree select picks for the demo's ``label`` drafter at ``batch`` (the smallest batch
    when None or not priced) and smallest context, with the device it was priced on and its
    speed-up predicted for held-out prompts (None where the demo cannot price that)."""
    priced = _priced(label, demo_drafter)
    if priced is None:
        return None
    selection = priced.selection
    batches = selection.batches
    point = selection.point(batch if batch in batches else batches[0], selection.contexts[0])
    held = (priced.held_out.predict(point.tree, point.batch,
                                    drafted=point.drafted).speedup
            if priced.held_out is not None and point.tree.size else None)
    return point, str(priced.costs.verify.meta.get("device") or "this machine"), held


def default_for(label: str, *, batch: int | None = None,
                demo_drafter: bool | None = None) -> Choice:
    """The choice of drafter ``label`` before one is made: select's pick at ``batch`` on the
    demo's measured machine, else the Trees page's default tree."""
    demo_drafter = is_demo_data() if demo_drafter is None else demo_drafter
    source = (demo_dataset() if demo_drafter else current_dataset()).sources[label]
    found = demo_pick(label, batch, demo_drafter=demo_drafter)
    if found is None:
        return default_choice(source, label)
    return default_choice(source, label, pick=found[0], hardware=found[1], held_out=found[2])


def held_out_walk(label: str) -> tuple[RankTrace, str] | None:
    """The held-out trace the demo's headline walks for drafter ``label`` (the sweep's prompts
    and tokens) and what it covers; None for data that is not the demo's or no such trace."""
    priced = _priced(label, None)
    if priced is None or priced.held_out is None:
        return None
    return priced.held_out.trace, priced.held_out.window


def answer_choice(view: Overview, answer: BatchAnswer) -> Choice:
    """The Overview's ``answer`` (a batch size's drafter and tree) as the choice."""
    selection = view.evidence[answer.drafter].selection
    return pick_choice(answer.drafter, selection.point(answer.batch, answer.context),
                       heads=demo().traces[answer.drafter].heads,
                       hardware=str(selection.latency.get("device") or "this machine"),
                       held_out=answer.held_out.speedup if answer.held_out else None)


def recommended(batch: int | None = None) -> Choice | None:
    """The Overview's recommendation at ``batch`` (default: the smallest batch with a tree) on
    the demo's data; None for other data, a demo without step profiles, or no tree paying."""
    if not is_demo_data():
        return None
    view = demo_overview()
    if view is None:
        return None
    answers = [a for a in view.answers if a.tree.size and a.drafter in demo().traces]
    found = [a for a in answers if a.batch == batch] or answers
    return answer_choice(view, found[0]) if found else None


def use_answer(batch: int) -> None:
    """Make the Overview's answer at ``batch`` the choice, and say so on the next run (the
    "Use this tree" button's callback)."""
    choice = recommended(batch)
    if choice is not None:
        set_choice(choice)
        st.session_state[CONFIRMED_KEY] = (batch, choice.description)


def confirmed(batch: int) -> str | None:
    """What "Use this tree" at ``batch`` just chose, once (None on other runs)."""
    said = st.session_state.get(CONFIRMED_KEY)
    if said is None or said[0] != batch:
        return None
    del st.session_state[CONFIRMED_KEY]
    return str(said[1])


def current_choice(label: str | None = None, *, batch: int | None = None,
                   demo_drafter: bool | None = None) -> Choice:
    """The choice in session state — for drafter ``label`` when given — else that drafter's
    default at ``batch``; without ``label``, the Overview's recommendation (on data that is not
    the demo's: the first drafter's default)."""
    chosen: Choice | None = st.session_state.get(CHOICE_KEY)
    if label is None:
        sources = current_dataset().sources
        if chosen is not None and chosen.drafter in sources:
            return chosen
        pick = recommended(batch)
        if pick is not None:
            return pick
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
