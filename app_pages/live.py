"""Live: what the shipped demo measured and replays on this machine — the live sweep of each
drafter's trees against the step-cost model, the engines' adaptive step controllers replayed
(EAGLE), and static against dynamic trees per batch size (EAGLE)."""

import streamlit as st

from app_pages.cache import CachedFigures
from app_pages.choice import current_choice
from app_pages.state import demo, demo_adaptive, demo_dynamic_selection, demo_pricing, page_errors
from app_pages.tables import show_table
from treeopt.demo.layout import DYNAMIC_KIND
from treeopt.workbench import adaptive, plots_dynamic, plots_hardware
from treeopt.workbench.demo_pricing import unswept_picks
from treeopt.workbench.numbers import nodes_text, percent_text

dyn_plots = CachedFigures(plots_dynamic)  # each figure built once per set of inputs
hw_plots = CachedFigures(plots_hardware)
ad_plots = CachedFigures(adaptive)

st.title("Live")
st.write("The demo's evidence, measured on the machine that built it: each drafter's trees "
         "decoded live against autoregressive decoding beside the step-cost model's prediction; "
         "the step controllers of today's engines replayed over held-out prompts; and the "
         "dynamic-tree settings `select --dynamic` picks per batch size. The Overview's figures "
         "come from here.")


def sweep_section() -> None:
    """Each drafter's live sweep beside the step-cost model's prediction, the chosen drafter
    first."""
    st.header("The live sweep: measured against predicted")
    kinds = list(demo().traces)
    with page_errors():
        picked = current_choice()
    live_kind = st.radio("Demo heads", kinds, horizontal=True, key="live_kind",
                         index=kinds.index(picked.drafter) if picked.drafter in kinds else 0,
                         help="the chosen drafter first")
    st.caption(f"Chosen: {picked.description}.")
    priced = None
    with page_errors(stop=False):
        priced = demo_pricing(live_kind)
    if priced is None or priced.sweep is None:
        st.info("The demo holds no step profile and live sweep of these heads: measure them with "
                "`treeopt profile step` and `treeopt tune`, or rebuild the demo.")
    else:
        sweep, drafted = priced.sweep, False
        if priced.drafted_sweep is not None:  # a lookup drafter's chains, swept both ways
            drafted = st.radio(
                "Chains verified", ["whole", "as drafted"], horizontal=True, key="live_verified",
                index=1 if picked.drafter == live_kind and picked.drafted else 0,
                help="The demo swept this drafter's chains twice: every step verifying the whole "
                     "chain, and only as far as the step drafted, as its selection's picks "
                     "decode.") == "as drafted"
            sweep = priced.drafted_sweep if drafted else sweep
        verified = ", verified as drafted" if drafted else ""
        st.plotly_chart(hw_plots.sweep_figure(
            sweep, drafter=live_kind,
            title=f"{live_kind}{verified} on {priced.costs.verify.meta.get('device', 'cpu')}: "
                  "measured (points, spread over rounds) and predicted (dashed) speed-up"),
            width="stretch")
        rows = sweep.summary()
        errors = [r["max_abs_error"] for r in rows if r["max_abs_error"] is not None]
        picks = [f"batch {r['batch']}: {nodes_text(r['selected_size'])}, "
                 f"{percent_text(r['selected_share_of_best'])} of the measured best" for r in rows
                 if "selected_size" in r]
        batching = ("in one continuous batch of b rows, each taking the next prompt"
                    if sweep.continuous else "b prompts at a time")
        st.caption(f"Every point decodes {sweep.meta.get('prompts')} held-out prompts × "
                   f"{sweep.meta.get('max_new_tokens')} tokens ({batching}{verified}) against "
                   f"autoregressive decoding, interleaved, {sweep.meta.get('rounds')} rounds; "
                   "each point's speed-up is over the autoregressive rate measured with it, so "
                   "drift between points cancels "
                   "(tokens/s on hover). ★ measured best by that speed-up, ◇ the tree select picks "
                   "from the step profile (" + "; ".join(picks) + ")"
                   + (f"; largest prediction error {percent_text(max(errors))}." if errors
                      else "."))
        unswept = unswept_picks(priced, drafted=drafted)
        if unswept:
            st.caption("Not among these points: the demo's pick at " + "; ".join(
                f"batch {p.batch} ({nodes_text(p.tree.size)}, {p.family})" for p in unswept)
                + ": the sweep was measured before select picked so (◇ is its pick then); "
                  "`treeopt demo build --redo sweep` measures it anew, the picks with it.")


def adaptive_section() -> None:
    """The engines' adaptive step controllers replayed over held-out prompts (EAGLE)."""
    st.header("Adaptive speculation (EAGLE): the engines' step controllers replayed")
    a1, a2, _ = st.columns([2, 1, 1])
    workload = a1.radio("Workload", list(adaptive.WORKLOADS), horizontal=True, key="live_ad_workload",
                        format_func=lambda w: f"{w}: {adaptive.WORKLOADS[w]}")
    replayed = None
    with page_errors(stop=False):
        replayed = demo_adaptive(workload)
    if replayed is None and DYNAMIC_KIND not in demo().kinds:
        st.info(f"This demo ships no {DYNAMIC_KIND} drafter, so it has no adaptive controller to "
                "replay; the shipped demo (`data/demo`) has one.")
    elif replayed is None:
        st.info("The demo holds no step profile of its EAGLE drafter: measure one with "
                "`treeopt profile step`, or rebuild the demo.")
    else:
        with page_errors(stop=False):
            ad_batch = a2.selectbox("Batch for the rounds", replayed.batches, key="live_ad_batch")
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


def dynamic_section() -> None:
    """Static against dynamic trees per batch size, and the engines' settings of the best
    (EAGLE)."""
    st.header("Dynamic trees (EAGLE): static vs dynamic per batch size")
    dynamic = None
    with page_errors(stop=False):
        dynamic = demo_dynamic_selection()
    if dynamic is None and DYNAMIC_KIND not in demo().kinds:
        st.info(f"This demo ships no {DYNAMIC_KIND} drafter, so it has no dynamic trees to "
                "compare; the shipped demo (`data/demo`) has them.")
    elif dynamic is None:
        st.info("The demo holds no dynamic selection of its EAGLE drafter: run "
                "`treeopt select --dynamic`, or rebuild the demo.")
    else:
        with page_errors(stop=False):
            dyn_contexts = dyn_plots.contexts(dynamic)
            d1, d2, _ = st.columns([1, 1, 2])
            dyn_ctx = (d2.select_slider("Context (dynamic selection)", dyn_contexts, dyn_contexts[0], key="live_dyn_ctx")
                       if len(dyn_contexts) > 1 else dyn_contexts[0])
            dyn_batches = [p["batch"] for p in dyn_plots.points_at(dynamic, dyn_ctx)]
            dyn_batch = d1.selectbox("Batch for the grid", dyn_batches, key="live_dyn_batch")
            left, right = st.columns(2)
            left.plotly_chart(dyn_plots.static_vs_dynamic(dynamic, context=dyn_ctx), width="stretch")
            right.plotly_chart(dyn_plots.dynamic_grid(dynamic, dyn_batch, context=dyn_ctx),
                               width="stretch")
            dyn_kind = dyn_plots.drafter(dynamic)
            selection = demo_pricing(dyn_kind) if dyn_kind in demo().traces else None
            show_table(dyn_plots.recommended_rows(
                dynamic, context=dyn_ctx, selected=None if selection is None else {
                    q.batch: (q.tree.size, q.speedup) for q in selection.selection.points
                    if q.context == dyn_ctx}))
            grid = dynamic.get("grid", {})
            st.caption(
                f"Settings scanned: top-k {grid.get('topk')}, steps {grid.get('steps')}, draft "
                f"tokens {grid.get('draft_tokens')}; E[L] of each from the dynamic traces, priced by "
                f"the step profile {dynamic.get('latency', {}).get('source', '?')} on "
                f"{dynamic.get('latency', {}).get('device', '?')}. Each speed-up is over the "
                "autoregressive rate of its own profile (static trees: the static step's), so the "
                "ratio of the two speed-ups is free of drift between the profiles. The static tree "
                "here is the growth's best under that profile, its E[L] "
                f"{dynamic.get('static_growth', {}).get('acceptance', 'the growth’s')}, as the "
                "dynamic settings' are: like with like. Select's pick, the static tree the Drafters "
                "page and the Overview show, is priced per step with the drafter's own step "
                "profile, so its speed-up differs; the last column gives it.")
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


SECTIONS = {"The live sweep": sweep_section, "Adaptive speculation": adaptive_section,
            "Dynamic trees": dynamic_section}
# one section at a time: the page's first view draws one figure, not five (its first render in
# a new tab took 1.38 s against the app's 1.2 s target, benchmarks/bench_app.py)
section = st.segmented_control("Section", list(SECTIONS), default="The live sweep",
                               required=True, key="live_section")
SECTIONS[section or "The live sweep"]()
