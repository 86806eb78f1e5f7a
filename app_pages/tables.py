"""Tables as a person reads them: every number as it is written (1.5, 2.574, 590), not padded
to the four decimals Streamlit gives a float column, and a dash where there is none."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import streamlit as st


def show_table(rows: Sequence[Mapping[str, Any]]) -> None:
    """``rows`` (one dict per row, the keys the header) as a static table without an index."""
    frame = pd.DataFrame(list(rows))
    floats = list(frame.select_dtypes("float").columns)
    st.table(frame.style.format("{:g}", subset=floats, na_rep="—"), border="horizontal",
             hide_index=True)
