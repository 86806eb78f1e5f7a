"""The app's session state, cached loaders and error display: the only place pages keep
anything between runs."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import streamlit as st

from app_pages.cache import Document
from treeopt.demo.load import Demo
from treeopt.errors import TreeoptError
from treeopt.workbench.datasets import Dataset
from treeopt.workbench.pricing import DemoPricing

if TYPE_CHECKING:
    from treeopt.demo.load import Demo
    from treeopt.workbench.adaptive import AdaptiveReplay
    from treeopt.workbench.overview import Overview

DATASET_KEY = "dataset"


@st.cache_resource(show_spinner=False)
def demo() -> Demo:
    """The shipped demo's files — traces, growths, prompts, manifest — loaded once per server,
    without the model (no torch): what every page that does not decode reads."""
    from treeopt.demo.load import load

    return load(with_model=False)


@st.cache_resource(show_spinner="Loading the demo's model…")
def demo_model(dtype: str = "float32") -> Demo:
    """:func:`demo` with its model, tokenizer and drafters, loaded once per server and dtype the
    first time a page decodes (bfloat16 runs with treeopt's exact attention, so tree decoding
    stays lossless); its traces and growths are :func:`demo`'s own objects."""
    from treeopt.demo.load import attach_model

    # the demo model is tiny: one thread decodes faster and does not stall on a busy small machine
    return attach_model(demo(), threads=1, dtype=dtype)


@st.cache_resource(show_spinner=False)
def demo_dataset() -> Dataset:
    """The demo's traces as the app's dataset (greedy, held-out and sampled), once per server."""
    from treeopt.workbench.datasets import demo_dataset as build

    return build(demo())


_WARMING = threading.Event()


def warm_up() -> None:
    """Start computing, in the background and once per server, what the pages read from the
    demo (its dataset's accuracy tables, every drafter's pricing, the dynamic selection, the
    adaptive replay of each of the Live page's workloads):
    called once a page has run, so the next page a person opens finds them ready. A failure
    here is left for the page to show. (It imports no third-party module: plotly reads pandas
    off sys.modules, and would find one half imported.)

    The pages' runs come first: the warm-up's thread runs at the lowest CPU priority, and while
    it runs the interpreter hands its lock (the GIL) over every 0.5 ms instead of every 5 ms,
    so that a page's run, which gives the lock up at each message it sends, does not wait 5 ms
    behind the warm-up's pure-Python replays each time it takes it back. On the 2-core host
    either alone left a page opened during the warm-up at 1.7–2.3 s; both, at most 1.2 s
    (benchmarks/bench_app.py)."""
    if _WARMING.is_set():
        return
    _WARMING.set()
    threading.Thread(target=_warm, name="treeopt-warm-up", daemon=True).start()


WARM_UP_SWITCH_INTERVAL = 0.0005  # seconds; CPython's default is 0.005


def _warm() -> None:
    _lowest_priority()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, WARM_UP_SWITCH_INTERVAL))
    try:
        _warmed()
    except Exception:  # noqa: BLE001, S110 — the page that needs the value raises it again
        pass
    finally:
        sys.setswitchinterval(interval)


def _lowest_priority() -> None:
    """Give the calling thread the lowest CPU priority (nice 19) on Linux, where a thread has
    its own (its native id names it to setpriority); elsewhere that id may name a process, so
    the thread is left as it is."""
    if not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except OSError:  # not permitted here: the warm-up runs at the server's priority
        pass


@st.cache_resource(show_spinner=False)
def _warmed() -> bool:
    """The warm-up's work (inside a cached function, the loaders show no spinner)."""
    data = demo_dataset()
    for label in data.sources:
        data.table(label)
    for kind in demo().traces:
        demo_pricing(kind)
    demo_dynamic_selection()
    from treeopt.workbench.adaptive import WORKLOADS

    for workload in WORKLOADS:  # the Live page's replay, the workload shown first first
        demo_adaptive(workload)
    return True


def current_dataset() -> Dataset:
    """The dataset chosen on the Data page; the demo until the user picks another."""
    chosen = st.session_state.get(DATASET_KEY)
    return chosen if chosen is not None else demo_dataset()


def set_dataset(dataset: Dataset | None) -> None:
    st.session_state[DATASET_KEY] = dataset


@st.cache_resource(show_spinner="Pricing the demo's trees…")
def demo_pricing(kind: str) -> DemoPricing | None:
    """The demo's step profile, the selection it predicts and its live sweep, for ``kind``;
    computed once per server and kind."""
    from treeopt.workbench.pricing import demo_pricing as build

    return build(demo(), kind)


@st.cache_resource(show_spinner="Replaying the engines' adaptive controllers…")
def demo_adaptive(workload: str) -> AdaptiveReplay | None:
    """The adaptive replay of the demo's EAGLE drafter on ``workload``, once per server and
    workload (:func:`treeopt.workbench.adaptive.demo_adaptive`)."""
    from treeopt.workbench.adaptive import demo_adaptive as build

    return build(demo(), workload=workload)


def demo_dynamic_selection() -> Document | None:
    """``select --dynamic``'s document for the demo's EAGLE drafter, on the latency table's
    device (None when the demo ships none); read once per server and file version."""
    bundle = demo()
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


@st.cache_resource(show_spinner="Pricing every drafter of the demo…")
def demo_overview() -> Overview | None:
    """The Overview page's answer on the demo (None without a step profile), model-free."""
    from treeopt.workbench.overview import demo_overview as build

    return build(demo(), price=demo_pricing)  # the pricing every page shares, once
