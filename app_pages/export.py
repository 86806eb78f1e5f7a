"""Export: a tree in the forms each engine reads for the drafter it was grown for — tree formats
for a model drafter, n-gram settings for prompt lookup and the n-gram trie, dynamic and adaptive
settings for EAGLE, chain configs for MTP and suffix decoding — each engine's rules checked as its own code applies them. The tree is the
chosen one (the Overview's pick until another is chosen), or the pick of a selection file at a
batch size (``treeopt select --out selection.json``)."""

import streamlit as st

from app_pages.choice import current_choice
from app_pages.state import (
    demo_adaptive,
    demo_drafter,
    demo_dynamic_selection,
    page_errors,
)
from treeopt.registry.kinds import KINDS, engine_draft
from treeopt.workbench.adaptive import WORKLOADS
from treeopt.workbench.export_tabs import (
    ExportTab,
    chain_tabs,
    describe,
    dynamic_tabs,
    lookup_tabs,
    tree_tabs,
)
from treeopt.workbench.numbers import nodes_text, speedup_text
from treeopt.workbench.trees import selection_from_upload

st.title("Export")
source = st.radio("Tree", ["The chosen tree", "A selection file"], horizontal=True,
                  key="export_source")
batch = None
if source == "A selection file":
    upload = st.file_uploader("selection.json, from `treeopt select --out`", type=["json"],
                              key="export_selection")
    if upload is None:
        st.info("Upload a selection to export the tree it picks at a batch size.")
        st.stop()
    with page_errors():
        selection = selection_from_upload(upload.getvalue(), upload.name)
    c1, c2, _ = st.columns([1, 1, 2])
    batch = c1.selectbox("Batch size", selection.batches, key="export_batch")
    context = c2.selectbox("Context length", selection.contexts, key="export_context")
    point = selection.point(batch, context)
    tree = point.tree
    description = (f"{upload.name} · select's pick at batch {batch}, context {context} · "
                   f"{nodes_text(tree.size)}, {speedup_text(point.speedup)} predicted")
    drafter = selection.growth.get("drafter", {})
else:
    with page_errors():
        chosen = current_choice()
    tree, batch = chosen.tree, chosen.batch
    description = f"{chosen.description} — choose another on the Overview or the Trees page."
    drafter = demo_drafter(chosen.drafter)
st.caption(f"Tree: {description}")
if tree.size == 0:
    st.info("Speculation does not pay here: the pick is no tree (decode autoregressively).")
    st.stop()
kind = KINDS.get(str(drafter.get("kind") or ""))
if kind is not None and kind.hybrid:
    st.info(f"This tree was grown for a hybrid ({kind.title}): no engine verifies one tree of "
            "a drafter's and n-gram candidates; export the drafter's own tree.")
    st.stop()
with page_errors():
    st.write(describe(tree, drafter))
    tabs: list[ExportTab] = lookup_tabs(tree, drafter) or chain_tabs(tree, drafter)
if not tabs:
    c1, c2, c3 = st.columns([1, 1, 2])
    heads_needed = max(tree.depth, drafter.get("depth") or 1, 1)
    num_heads = c1.number_input("Draft heads the engine serves", min_value=1, max_value=64,
                                value=heads_needed,  # another tree or drafter that needs
                                key=f"export_heads_{heads_needed}")  # another count resets it
    typed = engine_draft(drafter.get("kind"))  # grown for an EAGLE drafter: its defaults
    eagle = typed in ("eagle", "eagle3")
    draft = c2.radio("TensorRT-LLM decoding type", ["medusa", "eagle"], horizontal=True,
                     index=1 if eagle else 0, key="export_draft")
    eagle_model = c3.text_input("EAGLE checkpoint, for TensorRT-LLM's EAGLE YAML and vLLM",
                                value=drafter.get("checkpoint", "") if eagle else "",
                                placeholder="a local directory or hub name",
                                key="export_eagle_model")
    tabs = tree_tabs(tree, num_heads=int(num_heads), draft=draft,
                     speculative_model=eagle_model or None, method=typed if eagle else "eagle")
    if kind is not None and kind.dynamic and source == "The chosen tree":
        with page_errors(stop=False):
            doc = demo_dynamic_selection()
            points = [p for p in (doc or {}).get("points", []) if p["batch"] == batch]
            replayed = demo_adaptive(next(iter(WORKLOADS)))  # the Live page's first
            tabs += dynamic_tabs(batch, dynamic_point=points[0] if points else None,
                                 adaptive_config=replayed.report.tuned.to_json()
                                 if replayed is not None else None)

for tab, shown in zip(st.tabs([t.title for t in tabs]), tabs, strict=True):
    with tab:
        st.caption(shown.engine)
        if shown.text is None:
            st.warning(shown.problem or "This engine cannot run this tree.")
            continue
        if shown.checked:
            st.success("Rules checked: the engine builds exactly this tree.")
        for note in shown.notes:
            st.caption(f"Note: {note}")
        st.code(shown.text, language=shown.language, wrap_lines=True)
        st.download_button(f"Download {shown.file_name}", shown.text, file_name=shown.file_name,
                           key=f"dl_{shown.title}")
