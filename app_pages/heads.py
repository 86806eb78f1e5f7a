"""Heads: accuracy heatmaps (head or depth × rank), side by side for every drafter in the data."""

import streamlit as st

from app_pages.cache import CachedFigures
from app_pages.state import current_dataset, page_errors
from treeopt.workbench import plots as plot_functions
from treeopt.workbench import style

plots = CachedFigures(plot_functions)  # each figure built once per set of inputs

st.title("Heads")
data = current_dataset()
c1, c2 = st.columns(2)
kind = c1.radio("Accuracy", plots.ACCURACY_KINDS, horizontal=True, key="heads_kind",
                help="marginal: P(true token is the head's i-th candidate); cumulative: top-i; "
                     "conditional: given every earlier head ranked it first")
max_rank = c2.slider("Ranks shown", 2, 32, 10, key="heads_ranks")
columns = st.columns(len(data.sources))
for column, (label, _) in zip(columns, data.sources.items(), strict=True):
    with column, page_errors(stop=False):
        table = data.table(label)
        st.subheader(label)
        st.plotly_chart(plots.accuracy_heatmap(table, kind=kind, max_rank=max_rank,
                                               title=f"{label}: {kind} accuracy (%)",
                                               drafter=label),
                        width="stretch")
        if table.counts is not None:
            st.caption(f"{int(table.counts[0]):,} positions per {style.position_noun(label)}")
