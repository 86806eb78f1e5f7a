"""The app's session state and cached loaders: the only place pages keep anything between runs."""

from __future__ import annotations

from typing import Any

import streamlit as st

from treeopt.errors import TreeoptError
from treeopt.workbench.datasets import Dataset

DATASET_KEY = "dataset"
TREE_KEY = "chosen_tree"


@st.cache_resource(show_spinner="Loading the demo…")
def demo() -> Any:
    """The shipped demo (model, heads, traces, growths), loaded once per server."""
    import torch

    from treeopt.demo.load import load

    # the demo model is tiny: one thread decodes faster and does not stall on a busy small machine
    torch.set_num_threads(1)
    return load()


@st.cache_resource(show_spinner=False)
def demo_dataset() -> Dataset:
    from treeopt.demo.load import demo_dataset as build

    return build(demo())


def current_dataset() -> Dataset:
    """The dataset chosen on the Data page; the demo until the user picks another."""
    chosen = st.session_state.get(DATASET_KEY)
    return chosen if chosen is not None else demo_dataset()


def set_dataset(dataset: Dataset | None) -> None:
    st.session_state[DATASET_KEY] = dataset


def show_error(exc: Exception) -> None:
    """A user-facing error in the page, never a traceback."""
    message = str(exc) if isinstance(exc, TreeoptError) else f"{exc.__class__.__name__}: {exc}"
    st.error(message, icon="⚠️")
