"""Hardware: what a tree costs per step, and so the fastest tree per batch size. By default
the chosen demo's own model on this machine, priced from the step profile measured in the live
loop (the Overview's pick first); as a choice, the roofline of a preset model on a GPU."""

import streamlit as st

from app_pages.cache import (
    ROOFLINE_BATCHES,
    ROOFLINE_DEFAULT,
    CachedFigures,
    fastest_on_gpu,
    roofline_contexts,
)
from app_pages.choice import current_choice, is_demo_data
from app_pages.state import current_dataset, demo, demo_pricing, page_errors
from treeopt.registry.kinds import KINDS
from treeopt.roofline import hardware_names, load_hardware, preset, preset_names, roofline
from treeopt.workbench import plots_hardware
from treeopt.workbench.demos import base_model_name
from treeopt.workbench.style import format_seconds

hw_plots = CachedFigures(plots_hardware)  # each figure built once per set of inputs
MEASURED, ROOFLINE = "this demo on this machine (measured)", "a model on a GPU (roofline)"

st.title("Hardware")
st.write("`tokens/s = b · E[L](T) / (t_verify(b, s, |T|+1) + t_draft(T, b) + t_overhead)`: a "
         "bigger tree accepts more per step but costs more to draft and verify once the device "
         "stops being memory-bound.")
with page_errors():
    picked = current_choice()
data = current_dataset()
labels = list(data.sources)
where = st.radio("Price", [MEASURED, ROOFLINE] if is_demo_data() else [ROOFLINE],
                 horizontal=True, key="hw_where",
                 help="measured: the step costs profiled on the machine that built the demo, "
                      "as `treeopt select --demo` prices them; roofline: a preset model on a "
                      "GPU's datasheet peaks")
if where == MEASURED:
    kinds = [k for k in labels if k in demo().traces]
    h1, _ = st.columns([1, 3])
    label = h1.selectbox("Drafter", kinds, key="hw_measured_label",
                         index=kinds.index(picked.drafter) if picked.drafter in kinds else 0)
    with page_errors():
        priced = demo_pricing(label)
    if priced is None:
        st.info("The demo holds no step profile of this drafter: measure one with `treeopt "
                "profile step`, or rebuild the demo.")
        st.stop()
    selection, device = priced.selection, priced.costs.verify.meta.get("device", "cpu")
    context = selection.contexts[0]
    mine = picked.drafter == label
    st.caption(f"{'Chosen' if mine else 'Chosen elsewhere'}: {picked.description}. "
               f"Base model: {base_model_name(demo().manifest)}, on {device}.")
    left, right = st.columns(2)
    left.plotly_chart(hw_plots.throughput_curves(selection, context=context, drafter=label),
                      width="stretch")
    right.plotly_chart(hw_plots.best_size_heatmap(selection), width="stretch")
    st.caption(f"E[L] from the {label} growth's calibration trace walked step by step; step "
               f"costs (verify, drafting, the decoder's overhead) measured on {device} in the "
               f"live loop ({priced.costs.verify.meta.get('source', 'the step profile')}), "
               f"context {context}. The Overview's headline prices the same trees with the "
               "held-out E[L].")
    st.page_link("app_pages/live.py", label="Live: the sweeps that check these predictions",
                 icon=":material/speed:")
    st.stop()

models, gpus = preset_names(), hardware_names()
c = st.columns(5)
first_model, first_gpu = ROOFLINE_DEFAULT
model_name = c[0].selectbox("Model", models, index=models.index(first_model)
                            if first_model in models else 0, key="hw_model")
gpu_name = c[1].selectbox("Hardware", gpus, index=gpus.index(first_gpu)
                          if first_gpu in gpus else 0, key="hw_gpu")
with page_errors():
    cfg, gpu = preset(model_name), load_hardware(gpu_name)
contexts = list(roofline_contexts(cfg))
b = c[2].select_slider("Batch b", list(ROOFLINE_BATCHES), 1, key="hw_b")
s = c[3].select_slider("Context s", contexts, 512, key="hw_s",
                       help="the context of the roofline step and of the throughput curves")
q = c[4].select_slider("Tokens q", [1, 2, 4, 8, 16, 32, 64, 128], 64, key="hw_q")
with page_errors():
    record = roofline(cfg, gpu, batch=[b], context=[s], tokens=[q]).records()[0]
st.plotly_chart(hw_plots.roofline_figure(
    record, peak_flops=gpu.matmul_flops("bf16"), vector_flops=gpu.vector_flops,
    bandwidth=gpu.bandwidth, title=f"{model_name} on {gpu_name}, b={b}, s={s}, q={q}: "
                                   f"{format_seconds(record['time_s'])} per verify step (bf16)"),
    width="stretch")
st.caption(f"Peaks from {gpu.source or 'the hardware table'}. Red: memory-bound operators; "
           "blue: compute-bound. Marker size: share of the step's time.")

st.header("Fastest tree per batch size and context")
h1, _ = st.columns([1, 3])
label = h1.selectbox("Heads (acceptance)", labels, key="hw_label",
                     index=labels.index(picked.drafter) if picked.drafter in labels else 0)
method = data.methods(label)[0]
with page_errors():
    selection = fastest_on_gpu(data.sources[label], label, method, model=cfg, hardware=gpu)
left, right = st.columns(2)
left.plotly_chart(hw_plots.throughput_curves(selection, context=s, drafter=label),
                  width="stretch")
right.plotly_chart(hw_plots.best_size_heatmap(selection), width="stretch")
stops = [f"context {x['context']}: from batch {x['batch']}" for x in selection.stops_paying()
         if x["batch"] is not None]
st.info("Speculation stops paying — " + ("; ".join(stops) if stops else
        f"not within the swept batch sizes (up to {ROOFLINE_BATCHES[-1]})."))
st.caption(f"E[L] from the {label} {method} growth on '{data.name}'; verify latency predicted by "
           f"the roofline of {model_name} on {gpu_name}; drafting cost "
           f"{'of ' + label + ' heads included' if label in KINDS else 'not modelled'}.")
st.page_link("app_pages/live.py", label="Live: what the demo measured on this machine — the "
             "sweeps, the engines' adaptive controllers and dynamic trees", icon=":material/speed:")
