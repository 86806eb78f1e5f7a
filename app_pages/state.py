"""The app's session state, cached loaders and error display: the only place pages keep
anything between runs."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import streamlit as st

from app_pages.cache import Document
from treeopt.demo.layout import default_root
from treeopt.demo.load import Demo
from treeopt.errors import TreeoptError
from treeopt.workbench.datasets import Dataset
from treeopt.workbench.demo_pricing import DemoPricing

if TYPE_CHECKING:
    from treeopt.adaptive.report import StaticTree
    from treeopt.demo.load import Demo
    from treeopt.workbench.adaptive import AdaptiveReplay
    from treeopt.workbench.overview import Overview

DATASET_KEY = "dataset"
DEMO_KEY = "demo_root"  # the demo the person chose in the sidebar (its directory)


def current_root() -> str:
    """The directory of the demo the pages work on: the one chosen in the sidebar, else the
    shipped one (``data/demo``, or ``$TREEOPT_DEMO``)."""
    try:
        chosen = st.session_state.get(DEMO_KEY)
    except Exception:  # noqa: BLE001 — no session (a bare script): the shipped demo
        chosen = None
    return str(chosen) if chosen else str(default_root())


CHOOSER_KEY = "demo_chooser"  # the sidebar's widget


def demo_chooser() -> None:
    """The sidebar's choice of demo: the shipped one and every other demo built in ``data/``,
    each named with its base model."""
    from treeopt.workbench.demos import available_demos

    demos = {str(d.root): d.label for d in available_demos()}
    root = current_root()
    if root not in demos:  # $TREEOPT_DEMO elsewhere, or a demo removed since
        demos = {root: Path(root).name, **demos}
    st.sidebar.selectbox("Demo", list(demos), index=list(demos).index(root),
                         format_func=demos.__getitem__, key=CHOOSER_KEY, on_change=_chosen,
                         help="the demo every page works on: its base model, drafters and "
                              "measurements (a demo is built by `treeopt demo build`)")


def _chosen() -> None:
    """The chooser changed: make its demo the one the pages work on, and forget every choice
    made on the last one (its pick, dataset and page widgets name that demo's drafters)."""
    root = st.session_state[CHOOSER_KEY]
    for key in list(st.session_state):
        if key != CHOOSER_KEY:
            del st.session_state[key]
    st.session_state[DEMO_KEY] = root


def demo(root: str | None = None) -> Demo:
    """The chosen demo's files — traces, growths, prompts, manifest — loaded once per server,
    without the model (no torch): what every page that does not decode reads."""
    return _demo(root or current_root())


@st.cache_resource(show_spinner=False)
def _demo(root: str) -> Demo:
    from treeopt.demo.load import load

    return load(root, with_model=False)


def demo_model(dtype: str = "float32") -> Demo:
    """:func:`demo` with its model, tokenizer and drafters, loaded once per server, demo and
    dtype the first time a page decodes (bfloat16 runs with treeopt's exact attention, so tree
    decoding stays lossless); its traces and growths are :func:`demo`'s own objects. A demo on
    a pretrained base that is not fetched raises a one-line TreeoptError naming the command
    that fetches it."""
    return _demo_model(current_root(), dtype)


@st.cache_resource(show_spinner="Loading the demo's model…")
def _demo_model(root: str, dtype: str) -> Demo:
    from treeopt.demo.load import attach_model

    # the demo model is tiny: one thread decodes faster and does not stall on a busy small machine
    return attach_model(demo(root), threads=1, dtype=dtype)


def demo_dataset(root: str | None = None) -> Dataset:
    """The demo's traces as the app's dataset (greedy, held-out and sampled), once per server."""
    return _demo_dataset(root or current_root())


@st.cache_resource(show_spinner=False)
def _demo_dataset(root: str) -> Dataset:
    from treeopt.workbench.datasets import demo_dataset as build

    return build(demo(root))


def current_dataset() -> Dataset:
    """The dataset chosen on the Data page; the demo until the user picks another."""
    chosen = st.session_state.get(DATASET_KEY)
    return chosen if chosen is not None else demo_dataset()


def set_dataset(dataset: Dataset | None) -> None:
    st.session_state[DATASET_KEY] = dataset


def demo_pricing(kind: str, *, root: str | None = None) -> DemoPricing | None:
    """The demo's step profile, the selection it predicts, its live sweep and held-out pricing,
    for ``kind``; computed once per server, demo and kind."""
    return _demo_pricing(root or current_root(), kind)


@st.cache_resource(show_spinner="Pricing the demo's trees…")
def _demo_pricing(root: str, kind: str) -> DemoPricing | None:
    from treeopt.workbench.demo_pricing import demo_pricing as build

    return build(demo(root), kind)


def demo_adaptive(workload: str, *, root: str | None = None) -> AdaptiveReplay | None:
    """The adaptive replay of the demo's EAGLE drafter on ``workload``, once per server, demo
    and workload (:func:`treeopt.workbench.adaptive.demo_adaptive`)."""
    return _demo_adaptive(root or current_root(), workload)


@st.cache_resource(show_spinner="Replaying the engines' adaptive controllers…")
def _demo_adaptive(root: str, workload: str) -> AdaptiveReplay | None:
    from treeopt.workbench.adaptive import demo_adaptive as build

    return build(demo(root), workload=workload, static=_demo_static_trees(root))


@st.cache_resource(show_spinner=False)
def _demo_static_trees(root: str) -> Mapping[int, StaticTree] | None:
    """The adaptive replays' best static trees on the demo at ``root``: one pricing for every
    workload."""
    from treeopt.workbench.adaptive import demo_static_trees

    found = demo_static_trees(demo(root))
    return MappingProxyType(found) if found is not None else None


def demo_dynamic_selection(root: str | None = None) -> Document | None:
    """``select --dynamic``'s document for the demo's EAGLE drafter, on the latency table's
    device (None when the demo ships none); read once per server and file version."""
    bundle = demo(root)
    table = bundle.latency
    path = bundle.paths.dynamic_selection(table.stem if table else "cpu")
    return _read_dynamic_selection(str(path), path.stat().st_mtime) if path.exists() else None


@st.cache_resource(show_spinner=False)
def _read_dynamic_selection(path: str, mtime: float) -> Document:
    """The document at ``path`` (``mtime`` only keys the cache: a rebuilt file is re-read).
    Shared by every session: pages read it, never change it."""
    from treeopt.dynamic.recommend import FORMAT
    from treeopt.files import read_tagged_json

    return Document(read_tagged_json(path, FORMAT))


def demo_drafter(label: str) -> dict[str, Any]:
    """The demo's drafter called ``label`` as its growth records it (kind, depth and, for an
    n-gram drafter, its match lengths), with the checkpoint's path in this checkout; empty for
    data that is not the demo's."""
    bundle = demo()
    if label not in bundle.growths or current_dataset() is not demo_dataset():
        return {}
    return {**bundle.growths[label].drafter, "kind": label,
            "checkpoint": str(bundle.paths.heads(label)), "depth": bundle.traces[label].heads}


def show_error(exc: Exception) -> None:
    """A user-facing error in the page, never a traceback."""
    message = str(exc) if isinstance(exc, TreeoptError) else f"{exc.__class__.__name__}: {exc}"
    st.error(message, icon="⚠️")


@contextmanager
def page_errors(*, stop: bool = True) -> Iterator[None]:
    """Show any error raised inside as a message in the page; then stop the page unless
    ``stop=False`` (st.stop's own exception is not an Exception and passes through)."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 — every failure is shown, never a traceback
        show_error(exc)
        if stop:
            st.stop()


def demo_overview(root: str | None = None) -> Overview | None:
    """The Overview page's answer on the demo (None without a step profile), model-free: the
    pick every page starts from."""
    return _demo_overview(root or current_root())


@st.cache_resource(show_spinner="Pricing every drafter of the demo…")
def _demo_overview(root: str) -> Overview | None:
    from treeopt.workbench.overview import demo_overview as build

    # the pricing every page shares, once
    return build(demo(root), price=lambda kind: demo_pricing(kind, root=root))
