"""Overview: which drafter and tree to use at each batch size on the chosen demo, how fast —
predicted for held-out prompts and measured side by side — and how sure, each figure with its
source. Needs no model."""

import streamlit as st

from app_pages.choice import confirmed, use_answer
from app_pages.state import demo, demo_overview, page_errors
from app_pages.tables import show_table
from treeopt.workbench.demos import base_model_name, build_host
from treeopt.workbench.headline import detail, headline
from treeopt.workbench.overview import rows
from treeopt.workbench.plots_overview import predicted_vs_measured

st.title("Overview")
with page_errors():
    files = demo()
    view = demo_overview()
drafters = ", ".join(view.evidence) if view else "none priced"
st.write(f"Demo `{files.paths.root.name}` — base model: **{base_model_name(files.manifest)}**; "
         f"{len(view.evidence) if view else 0} drafters ({drafters}), profiled and swept live "
         f"on {build_host(files.manifest)}. Per batch size: the drafter `treeopt choose-drafter` "
         "picks, the tree `treeopt select` picks for it, its speed-up over autoregressive "
         "decoding predicted for held-out prompts, and the speed-up measured live.")
if view is None:
    st.info("The demo holds no step profile to price its trees with: rebuild it with the "
            "latency stage (`treeopt demo build`).")
    st.stop()

PER_ROW = 2  # "1.89× predicted" in a metric's large type needs half a laptop screen
columns = [c for i in range(0, len(view.answers), PER_ROW) for c in st.columns(PER_ROW)]
for column, answer in zip(columns, view.answers, strict=False):
    h = headline(answer)
    with column:
        st.metric(h.label, h.value, delta=h.delta, delta_color=h.tone,  # type: ignore[arg-type]
                  delta_arrow=h.arrow, help=h.help, border=True)  # type: ignore[arg-type]
        st.markdown(f"**{answer.drafter}** · {answer.tree_label}")
        if h.gap:
            st.caption(h.gap)
        if answer.tree.size:
            st.button("Use this tree", key=f"overview_use_{answer.batch}", on_click=use_answer,
                      args=(answer.batch,),
                      help="make it the tree the Trees, Hardware, Live, Export and Verify "
                           "pages work on")
            said = confirmed(answer.batch)
            if said is not None:
                st.success(f"Chosen: {said}. Trees, Hardware, Live, Export and Verify now "
                           "work on it.", icon="✅")
                st.toast(f"Chosen: {answer.drafter}, {answer.tree_label}", icon="✅")

st.vega_lite_chart(spec=predicted_vs_measured(view), width="stretch")
DETAIL_KEY = "overview_detail"  # its content is sent only once opened: the first view is lighter
sources = st.expander("Detail: every figure's source, the calibration prompts' prediction and the "
                      "sweep priced as it ran", key=DETAIL_KEY, on_change="rerun")
if sources.open:
    with sources:
        show_table(rows(view))
        st.caption(f"Context {view.context} tokens. Predicted, held out: the step-cost "
                   "model (verify, drafting and the decoder's own overhead, profiled in the "
                   "live loop) with E[L] from the held-out trace walked step by step over the "
                   "prompts and tokens the live sweep decoded (at batch > 1 over the rounds in "
                   "which every row runs). Predicted, calibration: the same step costs with the "
                   "calibration trace's E[L], what `select` ranks trees by. Measured: the live "
                   "sweep, tree decoding against autoregressive decoding interleaved; spread: "
                   "(largest − smallest round) / median. Predicted as swept: the held-out E[L] "
                   "with the step profile taken alongside the sweep's points — it checks the "
                   "step-cost model. Dynamic: `select --dynamic`'s best setting for the EAGLE "
                   "drafter.")
        for paragraph in detail(view):
            st.markdown(paragraph)

st.subheader("Go further")
st.page_link("app_pages/trees.py", label="Trees: grow, compare and choose the tree",
             icon=":material/account_tree:")
st.page_link("app_pages/live.py", label="Live: the sweeps, adaptive controllers and dynamic "
             "trees behind these figures", icon=":material/speed:")
st.page_link("app_pages/hardware.py", label="Hardware: the pick priced on this machine, or the "
             "fastest tree on another GPU and model", icon=":material/memory:")
st.page_link("app_pages/export.py", label="Export: the chosen tree in your engine's format",
             icon=":material/download:")
st.page_link("app_pages/verify.py", label="Verify: decode live with it and check it is lossless",
             icon=":material/verified:")
