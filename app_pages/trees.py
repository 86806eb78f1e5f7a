"""Trees: grow, compare E[L]-vs-size curves, draw the chosen tree, see the held-out gap."""

import streamlit as st

from app_pages.cache import CachedFigures, growth_pair, held_out_curve
from app_pages.state import current_dataset, demo_pick, page_errors, set_chosen_tree
from treeopt.grow import CONSTRAINTS
from treeopt.workbench import plots as plot_functions
from treeopt.workbench.trees import (
    TREE_DEFAULTS,
    ChosenTree,
    imported_tree_point,
    page_defaults,
    view_tree,
)

plots = CachedFigures(plot_functions)  # each figure built once per set of inputs
st.title("Trees")
data = current_dataset()
left, right = st.columns([1, 3])
with left:
    label = st.selectbox("Heads", list(data.sources), key="trees_label")
    temperature = 0.0
    if data.temperatures(label):
        temperature = st.radio(
            "Decoding", [0.0, *data.temperatures(label)], horizontal=True, key="trees_temperature",
            format_func=lambda t: "greedy" if t == 0 else f"sampled, T = {t:g}",
            help="the trace of greedy continuations, or of continuations sampled at T: the "
                 "tree grown on it is the best for lossless sampling at T")
    source, held = data.at_temperature(label, temperature)
    with page_errors():
        pick = demo_pick(label, data.sources[label]) if temperature == 0 else None
    start = page_defaults(source, pick)
    method = st.radio("Acceptance model", data.methods(label), horizontal=True, key="trees_method",
                      help="empirical: exact under greedy verification, from the rank trace; "
                           "independent: Medusa's product of per-head accuracies")
    max_nodes = st.slider("Largest tree (nodes)", 8, 256, TREE_DEFAULTS["max_nodes"], step=8,
                          key="trees_max")
    size = st.slider("Chosen tree size", 1, max_nodes, min(start["size"], max_nodes),
                     key="trees_size", help="starts at the size select picks for the demo's "
                                           "measured machine, where there is one")
    max_depth = st.slider("Max depth", 1, source.heads, start["max_depth"], key="trees_depth")
    max_rank = st.slider("Max rank", 1, 32, TREE_DEFAULTS["max_rank"], key="trees_rank")
    constraint = st.selectbox("Engine constraint", CONSTRAINTS, key="trees_constraint",
                              help="contiguous: Hydra reference code; uniform: vLLM")
    pasted = st.text_area("Compare a tree (paste a choices list in any engine form)",
                          key="trees_pasted", placeholder="[[0], [0, 0], [1], [0, 1]]")

with page_errors():
    growths = growth_pair(source, max_nodes=max_nodes, max_depth=max_depth, max_rank=max_rank,
                          constraint=constraint)
    others = {f"{other} · {m}": g.expected_accept_length
              for other in data.sources if other != label and data.has_trace(other)
              for m, g in growth_pair(data.sources[other], max_nodes=max_nodes,
                                      max_depth=max_depth, max_rank=max_rank,
                                      constraint=constraint).items() if m == "empirical"}
    if temperature:  # what the greedy-grown tree gives up when sampling at T
        greedy_growth = growth_pair(data.sources[label], max_nodes=max_nodes,
                                    max_depth=max_depth, max_rank=max_rank,
                                    constraint=constraint)["empirical"]
        others[f"{label} · greedy-grown, at T = {temperature:g}"] = held_out_curve(greedy_growth,
                                                                                  source)
    growth = growths[method]
    size = min(size, growth.max_nodes)
    tree = growth.tree(size)
    view = view_tree(tree, source, method=method)
    points = {f"chosen ({tree.size} nodes)": (tree.size, view.expected_accept_length)}
    if pasted.strip():
        pasted_tree, pasted_ell = imported_tree_point(pasted, source, method=method)
        points[f"pasted ({pasted_tree.size} nodes)"] = (pasted_tree.size, pasted_ell)

decoding = "greedy" if temperature == 0 else f"grown for sampling at T = {temperature:g}"
set_chosen_tree(ChosenTree(tree, f"{label} · {method} · {constraint} · {decoding} · "
                                 f"{tree.size} nodes", label))
with right:
    c1, c2, c3 = st.columns(3)
    c1.metric("E[L] of the chosen tree", f"{view.expected_accept_length:.4f}")
    c2.metric("Nodes / depth", f"{tree.size} / {tree.depth}")
    c3.metric("Tokens verified per step", f"{tree.num_tokens}")
    curves = {f"{label} · {m}": g.expected_accept_length for m, g in growths.items()}
    st.plotly_chart(plots.growth_curves({**curves, **others}, points=points),
                    width="stretch")
    st.plotly_chart(plots.tree_figure(tree, view.probabilities,
                                      title=f"{label}: {method} tree of {tree.size} nodes "
                                            f"(E[L] = {view.expected_accept_length:.3f})"),
                    width="stretch")
    w1, w2 = st.columns(2)
    w1.plotly_chart(plots.widths_figure({f"{tree.size} nodes": tree.widths}),
                    width="stretch")
    if held is not None:
        w2.plotly_chart(plots.gap_curve(growth.expected_accept_length,
                                        held_out_curve(growth, held)),
                        width="stretch")
    else:
        w2.info("No held-out trace for these heads: the gap between calibration and held-out "
                "E[L] cannot be shown. Trees grown on few positions overfit them.")
    st.caption("E[L] weights every calibration position equally; real decoding starts steps at "
               "only some positions, and typical acceptance or sampling accept more than one "
               "path — measure those on the Verify page.")
