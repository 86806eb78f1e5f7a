"""Overview: which drafter and tree to use at each batch size on the demo, how fast — predicted
and measured side by side — and how sure, each figure with its source. Needs no model."""

import streamlit as st

from app_pages.choice import choose_pick
from app_pages.state import demo, demo_overview, page_errors
from app_pages.tables import show_table
from treeopt.workbench.overview import headline, rows
from treeopt.workbench.plots_overview import predicted_vs_measured

st.title("Overview")
with page_errors():
    view = demo_overview()
st.write(f"The shipped demo: one small base model and {len(view.evidence) if view else 0} "
         f"drafters ({', '.join(view.evidence) if view else 'none priced'}), profiled and swept "
         "live on the machine that built it. Per batch size: the drafter `treeopt "
         "choose-drafter` picks, the tree `treeopt select` picks for it, its predicted speed-up "
         "over autoregressive decoding and the speed-up measured in the live sweep.")
if view is None:
    st.info("The demo holds no step profile to price its trees with: rebuild it with the "
            "latency stage (`treeopt demo build`).")
    st.stop()

files = demo()
PER_ROW = 2  # "1.89× predicted" in a metric's large type needs half a laptop screen
columns = [c for i in range(0, len(view.answers), PER_ROW) for c in st.columns(PER_ROW)]
for column, answer in zip(columns, view.answers, strict=False):
    h = headline(answer)
    with column:
        st.metric(h.label, h.value, delta=h.delta, delta_color=h.tone,  # type: ignore[arg-type]
                  delta_arrow="down" if h.tone == "red" else "off", help=h.help, border=True)
        st.markdown(f"**{answer.drafter}** · {answer.tree_label}")
        if answer.tree.size:
            point = view.evidence[answer.drafter].selection.point(answer.batch, answer.context)
            st.button("Use this tree", key=f"overview_use_{answer.batch}", on_click=choose_pick,
                      args=(answer.drafter, point),
                      kwargs={"heads": files.traces[answer.drafter].heads,
                              "hardware": str(view.evidence[answer.drafter].selection
                                              .latency.get("device") or "this machine")},
                      help="make it the tree the Trees, Export and Verify pages work on")

for warning in view.warnings:
    st.warning(warning, icon="⚠️")
st.vega_lite_chart(spec=predicted_vs_measured(view), width="stretch")
show_table(rows(view))
st.caption(f"Context {view.context} tokens. Predicted: the step-cost model (verify, drafting and "
           "the decoder's own overhead, profiled in the live loop) with E[L] from the "
           "calibration trace walked step by step. Measured: the live sweep, tree decoding "
           "against autoregressive decoding interleaved; spread: (largest − smallest round) / "
           "median. Predicted as swept: the same model with the swept prompts' own acceptance "
           "(at batch > 1 over the rounds in which every row runs) and the step profile taken "
           "alongside the sweep's points — it checks the model; the gap between it and the "
           "prediction is the prompts' and the machine's. Dynamic: `select --dynamic`'s best setting for the EAGLE drafter, each "
           "speed-up over its own profile's autoregressive rate. Hover a headline for sources.")
with st.expander("Where each figure comes from"):
    for answer in view.answers:
        st.markdown(f"**Batch {answer.batch}**\n\n" + headline(answer).help)

st.subheader("Go further")
st.page_link("app_pages/trees.py", label="Trees: grow, compare and choose the tree",
             icon=":material/account_tree:")
st.page_link("app_pages/live.py", label="Live: the sweeps, adaptive controllers and dynamic "
             "trees behind these figures", icon=":material/speed:")
st.page_link("app_pages/hardware.py", label="Hardware: the roofline — the fastest tree on another "
             "GPU and model", icon=":material/memory:")
st.page_link("app_pages/export.py", label="Export: the chosen tree in your engine's format",
             icon=":material/download:")
st.page_link("app_pages/verify.py", label="Verify: decode live with it and check it is lossless",
             icon=":material/verified:")
