"""Trees: grow, compare E[L]-vs-size curves, draw the chosen tree, see the held-out gap."""

import streamlit as st

from app_pages.cache import (
    CachedFigures,
    grown,
    growth_pair,
    held_out_curve,
    per_step_growth,
)
from app_pages.choice import (
    BATCH_KEY,
    LABEL_KEY,
    current_choice,
    demo_pick,
    held_out_walk,
    pick_batches,
    seed_trees_widgets,
    set_choice,
    trees_drafter_changed,
)
from app_pages.state import current_dataset, page_errors
from treeopt.model.growth import CONSTRAINTS
from treeopt.model.step_growth import FAMILIES, GROWTH_ORDER, PER_STEP_GREEDY
from treeopt.workbench import plots as plot_functions
from treeopt.workbench.numbers import accept_length_text, nodes_text
from treeopt.workbench.trees import (
    LARGEST,
    TreeSettings,
    chosen_accept_length,
    families_for,
    grown_choice,
    held_out_accept_length,
    imported_tree_point,
    pick_choice,
    view_tree,
)

plots = CachedFigures(plot_functions)  # each figure built once per set of inputs
st.title("Trees")
data = current_dataset()
with page_errors():
    seed_trees_widgets(current_choice())  # the widgets a visit has not set yet
deepest = max(s.heads for s in data.sources.values())
left, right = st.columns([1, 3])
with left:
    label = st.selectbox("Heads", list(data.sources), key=LABEL_KEY,
                         on_change=trees_drafter_changed,
                         help="switching the heads starts from select's pick for them")
    batches = pick_batches(label)
    batch = None
    if batches:
        batch = st.select_slider("Batch size (select's pick)", batches, key=BATCH_KEY,
                                 on_change=trees_drafter_changed,
                                 help="start from the tree select picks for this batch size "
                                      "on the demo's measured machine")
    temperature = 0.0
    if data.temperatures(label):
        temperature = st.radio(
            "Decoding", [0.0, *data.temperatures(label)], horizontal=True, key="trees_temperature",
            format_func=lambda t: "greedy" if t == 0 else f"sampled, T = {t:g}",
            help="the trace of greedy continuations, or of continuations sampled at T: the "
                 "tree grown on it is the best for lossless sampling at T")
    source, held = data.at_temperature(label, temperature)
    method = st.radio("Acceptance model", data.methods(label), horizontal=True, key="trees_method",
                      help="empirical: exact under greedy verification, from the rank trace; "
                           "independent: Medusa's product of per-head accuracies")
    max_nodes = st.slider("Largest tree (nodes)", 8, LARGEST, step=8, key="trees_max",
                          help="the growth's size: the curves end here")
    size = st.slider("Chosen tree size", 1, LARGEST, key="trees_size",
                     help="starts at the size select picks for the demo's measured machine, "
                          "where there is one")
    max_depth = st.slider("Max depth", 1, deepest, key="trees_depth")
    max_rank = st.slider("Max rank", 1, 32, key="trees_rank")
    constraint = st.selectbox("Engine constraint", CONSTRAINTS, key="trees_constraint",
                              help="contiguous: Hydra reference code; uniform: vLLM")
    families = families_for(source, constraint)
    family = st.radio("Trees", FAMILIES, horizontal=True, key="trees_family",
                      disabled=len(families) == 1,
                      help="the growth order (the best E[L] with every position weighted "
                           "alike), or the per-step greedy growth (each size adds the node that "
                           "raises the per-step mean most); select prices both and picks the "
                           "faster tree. Per-step needs a trace of sequences, nested trees")
    family = family if family in families else GROWTH_ORDER
    pasted = st.text_area("Compare a tree (paste a choices list in any engine form)",
                          key="trees_pasted", placeholder="[[0], [0, 0], [1], [0, 1]]")
    pasted_point = None
    if pasted.strip():  # a bad paste errors here, under its own widget; the plots still draw
        with page_errors(stop=False):
            pasted_point = imported_tree_point(pasted, source, method=method)
    clamp = st.empty()

with page_errors():
    depth = min(max_depth, source.heads)
    growths = growth_pair(source, max_nodes=max_nodes, max_depth=depth, max_rank=max_rank,
                          constraint=constraint)
    # every other drafter grown under its own depth and ranks (never this drafter's caps), to
    # the same largest size under the same engine
    others = {f"{other} · empirical": grown(data.sources[other], method="empirical",
                                            max_nodes=max_nodes,
                                            constraint=constraint).headline_accept_length
              for other in data.sources if other != label and data.has_trace(other)}
    if temperature:  # what the greedy-grown tree gives up when sampling at T
        greedy_growth = growth_pair(data.sources[label], max_nodes=max_nodes,
                                    max_depth=depth, max_rank=max_rank,
                                    constraint=constraint)["empirical"]
        others[f"{label} · greedy-grown, at T = {temperature:g}"] = held_out_curve(greedy_growth,
                                                                                  source)
    growth = growths[method]
    stepped = (per_step_growth(source, max_nodes=max_nodes, max_depth=depth, max_rank=max_rank,
                               constraint=constraint) if family == PER_STEP_GREEDY else None)
    tree = (stepped.tree(min(size, len(stepped.order))) if stepped is not None
            else growth.tree(min(size, growth.max_nodes)))
    view = view_tree(tree, source, method=method)
    chosen, how = chosen_accept_length(growth, size, view, stepped=stepped)
    points = {f"chosen ({nodes_text(tree.size)})": (tree.size, chosen)}
    if pasted_point is not None:
        pasted_tree, pasted_ell = pasted_point
        points[f"pasted ({nodes_text(pasted_tree.size)})"] = (pasted_tree.size, pasted_ell)
    found = demo_pick(label, batch) if temperature == 0 else None

if tree.size < size:  # the size stays where the user put it; the tree shown says why it differs
    largest = len(stepped.order) if stepped is not None else growth.max_nodes
    clamp.warning(f"The chosen size, {nodes_text(size)}, is above the largest tree grown "
                  f"({nodes_text(largest)}): the tree shown has {tree.size}. Raise “Largest "
                  "tree” to see the chosen size.")
settings = TreeSettings(size, max_depth, max_nodes, max_rank, method, constraint, temperature,
                        family)
pick = (pick_choice(label, found[0], heads=source.heads, hardware=found[1], held_out=found[2])
        if found is not None else None)
choice = grown_choice(label, tree, settings, batch=batch, pick=pick)
set_choice(choice)
held_walk = held_out_walk(label) if temperature == 0 else None
with right:
    st.caption(f"Chosen: {choice.description}")
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("E[L] of the chosen tree", accept_length_text(chosen), help=how)
    if held_walk is not None:
        c2.metric("E[L] held out, per step",
                  accept_length_text(held_out_accept_length(tree, held_walk[0])),
                  help=f"the held-out trace walked as decoding steps over {held_walk[1]}: the "
                       "E[L] the Overview prices its headline with")
    c3.metric("Nodes / depth", f"{tree.size} / {tree.depth}")
    c4.metric("Tokens verified per step", f"{tree.num_tokens}")
    curves = {f"{label} · {m}": g.headline_accept_length for m, g in growths.items()}
    if stepped is not None:
        curves[f"{label} · {PER_STEP_GREEDY}"] = stepped.accept_length
    st.plotly_chart(plots.growth_curves({**curves, **others}, points=points),
                    width="stretch")
    st.plotly_chart(plots.tree_figure(tree, view.probabilities,
                                      title=f"{label}: {method} tree, "
                                            f"{nodes_text(tree.size)}, E[L] "
                                            f"{accept_length_text(chosen)}"),
                    width="stretch")
    w1, w2 = st.columns(2)
    w1.plotly_chart(plots.widths_figure({nodes_text(tree.size): tree.widths}),
                    width="stretch")
    if held is not None:
        w2.plotly_chart(plots.gap_curve(growth.headline_accept_length,
                                        held_out_curve(growth, held)),
                        width="stretch")
    else:
        w2.info("No held-out trace for these heads: the gap between calibration and held-out "
                "E[L] cannot be shown. Trees grown on few positions overfit them.")
    st.caption("E[L] is per step where the trace records its sequences: the trace walked as "
               "decoding steps through it, each step starting where the last one ended, what a "
               "live run measures (node probabilities weight every position alike). Typical "
               "acceptance accepts more than one path — measure it on the Verify page. "
               "Every other drafter's curve is grown under its own depth and ranks, to the "
               "same largest tree and engine constraint: Max depth and Max rank cap this "
               "drafter only.")
