"""Hardware: roofline of a model on a GPU, measured latency, and the fastest tree per batch size."""

import streamlit as st

from app_pages.cache import CachedFigures, grown, roofline_selection
from app_pages.state import (
    current_dataset,
    demo,
    demo_adaptive,
    demo_dynamic_selection,
    demo_pricing,
    page_errors,
)
from treeopt.drafters import KINDS
from treeopt.roofline import hardware_names, load_hardware, preset, preset_names, roofline
from treeopt.workbench import adaptive, plots_dynamic, plots_hardware
from treeopt.workbench.style import format_seconds

dyn_plots = CachedFigures(plots_dynamic)  # each figure built once per set of inputs
hw_plots = CachedFigures(plots_hardware)
ad_plots = CachedFigures(adaptive)

st.title("Hardware")
st.write("`tokens/s = b · E[L](T) / (t_verify(b, s, |T|+1) + t_draft(T, b) + t_overhead)`: a "
         "bigger tree accepts more per step but costs more to draft and verify once the device "
         "stops being memory-bound.")

models, gpus = preset_names(), hardware_names()
c = st.columns(5)
model_name = c[0].selectbox("Model", models, index=models.index("llama-2-7b")
                            if "llama-2-7b" in models else 0, key="hw_model")
gpu_name = c[1].selectbox("Hardware", gpus, index=gpus.index("h100-sxm")
                          if "h100-sxm" in gpus else 0, key="hw_gpu")
with page_errors():
    cfg, gpu = preset(model_name), load_hardware(gpu_name)
room = cfg.max_positions or 1 << 30  # contexts leave room for the largest tree: 128 nodes + root
contexts = [x for x in (128, 512, 1024, 2048, 4096) if x + 129 <= room]
b = c[2].select_slider("Batch b", [1, 2, 4, 8, 16, 32, 64, 128], 1, key="hw_b")
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
data = current_dataset()
h1, _ = st.columns([1, 3])
label = h1.selectbox("Heads (acceptance)", list(data.sources), key="hw_label")
source = data.sources[label]
method = data.methods(label)[0]
draft_kind = label if label in KINDS else None
with page_errors():
    growth = grown(source, method=method, max_nodes=128)
    selection = roofline_selection(growth, model=cfg, hardware=gpu,
                                   batch=(1, 2, 4, 8, 16, 32, 64, 128),
                                   context=tuple(contexts), draft_kind=draft_kind,
                                   draft_heads=source.heads)
left, right = st.columns(2)
left.plotly_chart(hw_plots.throughput_curves(selection, context=s, drafter=label),
                  width="stretch")
right.plotly_chart(hw_plots.best_size_heatmap(selection), width="stretch")
stops = [f"context {x['context']}: from batch {x['batch']}" for x in selection.stops_paying()
         if x["batch"] is not None]
st.info("Speculation stops paying — " + ("; ".join(stops) if stops else
        "not within the swept batch sizes (up to 128)."))
st.caption(f"E[L] from the {label} {method} growth on '{data.name}'; verify latency predicted by "
           f"the roofline of {model_name} on {gpu_name}; drafting cost "
           f"{'of ' + draft_kind + ' heads included' if draft_kind else 'not modelled'}.")

st.header("Live on this machine: the demo")
kinds = list(demo().traces)
live_kind = st.radio("Demo heads", kinds, horizontal=True, key="hw_live_kind")
priced = None
with page_errors(stop=False):
    priced = demo_pricing(live_kind)
if priced is None or priced.sweep is None:
    st.info("The demo holds no step profile and live sweep of these heads: measure them with "
            "`treeopt profile step` and `treeopt tune`, or rebuild the demo.")
else:
    sweep = priced.sweep
    st.plotly_chart(hw_plots.sweep_figure(
        sweep, drafter=live_kind,
        title=f"{live_kind} on {priced.costs.verify.meta.get('device', 'cpu')}: measured "
              "(points, spread over rounds) and predicted (dashed) speed-up"), width="stretch")
    rows = sweep.summary()
    errors = [r["max_abs_error"] for r in rows if r["max_abs_error"] is not None]
    picks = [f"batch {r['batch']}: {r['selected_size']} nodes, "
             f"{r['selected_share_of_best']:.0%} of the measured best" for r in rows
             if "selected_size" in r]
    st.caption(f"Every point decodes {sweep.meta.get('prompts')} held-out prompts × "
               f"{sweep.meta.get('max_new_tokens')} tokens against autoregressive decoding, "
               f"interleaved, {sweep.meta.get('rounds')} rounds; each point's speed-up is over "
               "the autoregressive rate measured with it, so drift between points cancels "
               "(tokens/s on hover). ★ measured best by that speed-up, ◇ the tree select picks "
               "from the step profile (" + "; ".join(picks) + ")"
               + (f"; largest prediction error {max(errors):.1%}." if errors else "."))

st.header("Adaptive speculation (EAGLE): the engines' step controllers replayed")
a1, a2, _ = st.columns([2, 1, 1])
workload = a1.radio("Workload", list(adaptive.WORKLOADS), horizontal=True, key="hw_ad_workload",
                    format_func=lambda w: f"{w}: {adaptive.WORKLOADS[w]}")
replayed = None
with page_errors(stop=False):
    replayed = demo_adaptive(workload)
if replayed is None:
    st.info("The demo holds no step profile of its EAGLE drafter: measure one with "
            "`treeopt profile step`, or rebuild the demo.")
else:
    with page_errors(stop=False):
        ad_batch = a2.selectbox("Batch for the rounds", replayed.batches, key="hw_ad_batch")
        left, right = st.columns(2)
        left.plotly_chart(ad_plots.rounds_figure(replayed, ad_batch), width="stretch")
        right.plotly_chart(ad_plots.strategies_figure(replayed), width="stretch")
        defaults = sorted({s.default_label for s in replayed.report.sides})
        st.caption(
            f"Each controller replayed over the first {replayed.sequences} held-out prompts, "
            f"{replayed.positions} positions each ({adaptive.WORKLOADS[workload]}), a batch "
            "size's rows in lockstep, each finished row taking the next prompt; rounds priced "
            f"by the step profile {replayed.profile}. "
            f"Default: {'; '.join(defaults)}. Tuned: SGLang's config searched per batch-size "
            "slot on this workload (`treeopt adaptive`), never below the default. Best fixed "
            "chain: the fastest steps at that batch size; static tree: `select`'s pick. Live "
            "decoding with the same controller equals its replay round by round "
            "(benchmarks/bench_adaptive.py).")
        with st.expander("The tuned config (SGLang's --speculative-adaptive-config)"):
            st.json(replayed.report.tuned.to_json())

st.header("Dynamic trees (EAGLE): static vs dynamic per batch size")
dynamic = None
with page_errors(stop=False):
    dynamic = demo_dynamic_selection()
if dynamic is None:
    st.info("The demo holds no dynamic selection of its EAGLE drafter: run "
            "`treeopt select --dynamic`, or rebuild the demo.")
else:
    with page_errors(stop=False):
        dyn_contexts = dyn_plots.contexts(dynamic)
        d1, d2, _ = st.columns([1, 1, 2])
        dyn_ctx = (d2.select_slider("Context (dynamic selection)", dyn_contexts, dyn_contexts[0], key="hw_dyn_ctx")
                   if len(dyn_contexts) > 1 else dyn_contexts[0])
        dyn_batches = [p["batch"] for p in dyn_plots.points_at(dynamic, dyn_ctx)]
        dyn_batch = d1.selectbox("Batch for the grid", dyn_batches, key="hw_dyn_batch")
        left, right = st.columns(2)
        left.plotly_chart(dyn_plots.static_vs_dynamic(dynamic, context=dyn_ctx), width="stretch")
        right.plotly_chart(dyn_plots.dynamic_grid(dynamic, dyn_batch, context=dyn_ctx),
                           width="stretch")
        st.dataframe(dyn_plots.recommended_rows(dynamic, context=dyn_ctx), hide_index=True)
        grid = dynamic.get("grid", {})
        st.caption(
            f"Settings scanned: top-k {grid.get('topk')}, steps {grid.get('steps')}, draft "
            f"tokens {grid.get('draft_tokens')}; E[L] of each from the dynamic traces, priced by "
            f"the step profile {dynamic.get('latency', {}).get('source', '?')} on "
            f"{dynamic.get('latency', {}).get('device', '?')}. Each speed-up is over the "
            "autoregressive rate of its own profile (static trees: the static step's), so the "
            "last column, the ratio of the two speed-ups, is free of drift between the profiles.")
        chosen = dyn_plots.point(dynamic, dyn_batch, dyn_ctx)
        with st.expander(f"Engine settings at batch {dyn_batch}: "
                         f"{dyn_plots.settings_label(chosen['best'])}"):
            for engine, entry in chosen.get("engines", {}).items():
                st.markdown(f"**{engine}**")
                st.code(entry["text"].rstrip("\n"),
                        language="yaml" if engine == "trtllm" else
                        "json" if entry["text"].lstrip().startswith("{") else "bash")
                for problem in entry.get("problems", []):
                    st.warning(f"{engine}: {problem}")
