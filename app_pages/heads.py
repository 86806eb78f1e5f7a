"""Heads: the accuracy heatmap (head or depth × rank) of every drafter in the data, in one panel on
one colour scale, so a colour reads the same accuracy in every row."""

import streamlit as st

from app_pages.cache import CachedFigures
from app_pages.state import current_dataset, page_errors
from treeopt.workbench import plots as plot_functions

plots = CachedFigures(plot_functions)  # each figure built once per set of inputs

st.title("Heads")
data = current_dataset()
c1, c2 = st.columns(2)
kind = c1.radio("Accuracy", plots.ACCURACY_KINDS, horizontal=True, key="heads_kind",
                help="marginal: P(true token is the head's i-th candidate); cumulative: top-i; "
                     "conditional: given every earlier head ranked it first")
max_rank = c2.slider("Ranks shown", 2, 32, 10, key="heads_ranks")
tables = {}
for label in data.sources:  # a table that cannot be read says so; the others still draw
    with page_errors(stop=False):
        tables[label] = data.table(label)
if tables:
    with page_errors(stop=False):
        st.plotly_chart(plots.accuracy_heatmaps(tables, kind=kind, max_rank=max_rank),
                        width="stretch")
    st.caption("Every drafter's heads or depths in one panel, a white line between drafters, on "
               "one colour scale (the colour bar): a colour is the same accuracy in every row. "
               "Hover a cell for its accuracy and the positions it is measured on.")
