"""Tables as a person reads them: every number as it is written (1.5, 2.574, 590), not padded
to the four decimals Streamlit gives a float column, and a dash where there is none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st


def cell(value: Any) -> str:
    """A table cell's text: a float in its shortest form, None as a dash.

    >>> [cell(v) for v in (590.0, 2.574, 0.8, 3, None, "the same")]
    ['590', '2.574', '0.8', '3', '—', 'the same']
    """
    if value is None:
        return "—"
    return f"{value:g}" if isinstance(value, float) else str(value)


def show_table(rows: Sequence[Mapping[str, Any]]) -> None:
    """``rows`` (one dict per row, the keys the header) as a static table without an index."""
    st.table([{k: cell(v) for k, v in row.items()} for row in rows], border="horizontal",
             hide_index=True)
