"""Drafters: Medusa heads, Hydra heads, an EAGLE drafter, a draft model and prompt lookup on the
demo's base model, side by side — acceptance by tree size, drafting cost by depth, and the
throughput each reaches per batch size, with the drafter select would choose."""

import streamlit as st

from app_pages.cache import CachedFigures, step_curve
from app_pages.state import demo, demo_pricing, page_errors
from treeopt.workbench import plots_drafters as drafter_plots

plots_drafters = CachedFigures(drafter_plots)  # each figure built once per set of inputs

st.title("Drafters")
bundle = demo()
kinds = list(bundle.growths)
ROLES = {"medusa": "Medusa heads read the last hidden state only",
         "hydra": "Hydra heads also read the path's tokens",
         "eagle": "the EAGLE drafter predicts the next feature with one decoder layer",
         "draft-model": "the draft model is a one-layer copy of the base model",
         "prompt-lookup": "prompt lookup has no weights: it proposes the tokens that followed "
                          "the context's last n-gram where it occurred before",
         "ngram-trie": "the n-gram trie (SGLang's rule) proposes a tree from a trie of the "
                       "context's earlier paths"}
st.caption("Every drafter the demo ships, calibrated on the same prompts (the trained ones on "
           "the same self-distillation data): " +
           "; ".join(ROLES.get(k, k) for k in kinds) + ".")
with page_errors():
    st.plotly_chart(plots_drafters.acceptance_by_size(
        {k: step_curve(bundle.growths[k], bundle.traces[k]) for k in kinds}), width="stretch")
    priced = {k: p for k in kinds if (p := demo_pricing(k)) is not None}
    if not priced:
        st.info("This demo has no step profiles: build it with the latency stage to compare "
                "drafting costs and throughput.")
        st.stop()
    left, right = st.columns([1, 3])
    with left:
        batches = sorted(set.intersection(*(set(p.selection.batches) for p in priced.values())))
        batch = st.select_slider("Batch size", batches, value=batches[0], key="drafters_batch")
        contexts = sorted(set.intersection(*(set(p.selection.contexts)
                                             for p in priced.values())))
        context = contexts[len(contexts) // 2]
        depth = max(bundle.traces[k].heads for k in priced)
    with right:
        st.plotly_chart(plots_drafters.drafting_cost_by_depth(
            {k: p.costs for k, p in priced.items()}, batch=batch, depth=depth), width="stretch")
    st.plotly_chart(plots_drafters.throughput_by_batch(
        {k: p.selection for k, p in priced.items()}, context=context,
        sweeps={k: p.sweep for k, p in priced.items()}), width="stretch")
    st.caption("Bars: the step-cost model's predicted speed-up of each drafter's best tree over "
               "autoregressive decoding (verify, drafting and the decoder's own overhead, each "
               "profiled in the live loop on the machine that built the demo; tokens/s on "
               "hover). Diamonds: the best tree of the live sweep, measured. Star: the drafter "
               "`treeopt choose-drafter` picks at that batch size (none: no tree pays).")

prose = bundle.manifest.get("prose")
if prose:
    st.subheader("Code against prose")
    sizes = sorted({int(n) for k in kinds if isinstance(prose.get(k), dict)
                    for n in prose[k].get("expected_accept_length", {})})
    with page_errors():
        size = st.select_slider("Tree size (nodes)", sizes, value=sizes[len(sizes) // 2],
                                key="drafters_prose_size")
        st.plotly_chart(plots_drafters.acceptance_by_prompt_set(prose, size=size),
                        width="stretch")
    st.caption(f"The demo's second prompt set: {prose['prompts']['count']} passages of "
               "docstrings and comments, where the text itself rarely repeats. Acceptance "
               "follows the base model's own continuations, which loop as much on prose as on "
               "code with this small model (docs/demo.md). These bars weight every position "
               "alike, as the demo's prose stage records them: above the per-step curves at the "
               "top of the page wherever drafts run long. The fastest drafter per set below is "
               "priced per step.")
    for point in (bundle.manifest.get("prose_choice") or {}).get("points", []):
        fastest = point["fastest"]
        st.caption(f"Batch {point['batch']}: fastest on code **{fastest['code']}**, on prose "
                   f"**{fastest['prose']}**; one drafter for both: **{point['robust']}**.")
