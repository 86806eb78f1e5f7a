"""The app's session state, cached loaders and error display: the only place pages keep
anything between runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import streamlit as st

from treeopt.errors import TreeoptError
from treeopt.workbench.datasets import Dataset
from treeopt.workbench.pricing import DemoPricing

if TYPE_CHECKING:
    from treeopt.demo.load import Demo
    from treeopt.workbench.overview import Overview

DATASET_KEY = "dataset"


@st.cache_resource(show_spinner="Loading the demo…")
def demo(dtype: str = "float32") -> Any:
    """The shipped demo (model, heads, traces, growths), loaded once per server and dtype
    (bfloat16 runs with treeopt's exact attention, so tree decoding stays lossless)."""
    from treeopt.demo.load import load

    # the demo model is tiny: one thread decodes faster and does not stall on a busy small machine
    return load(threads=1, dtype=dtype)


@st.cache_resource(show_spinner=False)
def demo_dataset() -> Dataset:
    from treeopt.workbench.datasets import demo_dataset as build

    return build(demo())


def current_dataset() -> Dataset:
    """The dataset chosen on the Data page; the demo until the user picks another."""
    chosen = st.session_state.get(DATASET_KEY)
    return chosen if chosen is not None else demo_dataset()


def set_dataset(dataset: Dataset | None) -> None:
    st.session_state[DATASET_KEY] = dataset


@st.cache_resource(show_spinner="Pricing the demo's trees…")
def demo_pricing(kind: str) -> DemoPricing | None:
    """The demo's step profile, the selection it predicts and its live sweep, for ``kind``."""
    from treeopt.workbench.pricing import demo_pricing as build

    return build(demo(), kind)


def demo_dynamic_selection() -> dict[str, Any] | None:
    """``select --dynamic``'s document for the demo's EAGLE drafter, on the latency table's
    device (None when the demo ships none)."""
    bundle = demo()
    table = bundle.latency
    path = bundle.paths.dynamic_selection(table.stem if table else "cpu")
    return _read_dynamic_selection(str(path), path.stat().st_mtime) if path.exists() else None


@st.cache_data(show_spinner=False)
def _read_dynamic_selection(path: str, mtime: float) -> dict[str, Any]:
    """The document at ``path`` (``mtime`` only keys the cache: a rebuilt file is re-read)."""
    from treeopt.dynamic.recommend import FORMAT
    from treeopt.files import read_tagged_json

    return read_tagged_json(path, FORMAT)


def demo_drafter(label: str) -> dict[str, Any]:
    """The demo's drafter called ``label`` as a growth records one (kind, checkpoint, depth);
    empty for data that is not the demo's."""
    bundle = demo()
    if label not in bundle.growths or current_dataset() is not demo_dataset():
        return {}
    return {"kind": label, "checkpoint": str(bundle.paths.heads(label)),
            "depth": bundle.traces[label].heads}


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


@st.cache_resource(show_spinner="Loading the demo's files…")
def demo_files() -> Demo:
    """The shipped demo without its model (traces, growths, prompts, measurements): what the
    pages that do not decode read."""
    from treeopt.demo.load import load

    return load(with_model=False)


@st.cache_resource(show_spinner="Pricing every drafter of the demo…")
def demo_overview() -> Overview | None:
    """The Overview page's answer on the demo (None without a step profile), model-free."""
    from treeopt.workbench.overview import demo_overview as build

    return build(demo_files())
