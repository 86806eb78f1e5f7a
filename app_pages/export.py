"""Export: a tree in every engine's format, each engine's rules checked as its own code applies
them. The tree is the one chosen on the Trees page, or the pick of a selection file at a batch
size (``treeopt select --out selection.json``)."""

import streamlit as st

from app_pages.choice import current_choice
from app_pages.state import demo_drafter, page_errors
from treeopt.drafters.kinds import engine_draft
from treeopt.engines.formats import EXTENSIONS, export
from treeopt.engines.lookup_export import FORMS, export_lookup, recorded_lookup
from treeopt.engines.rules import ENGINES, engine_problems
from treeopt.errors import TreeoptError
from treeopt.workbench.trees import selection_from_upload

TABS = {"medusa": "Medusa", "hydra": "Hydra", "trtllm": "TRT-LLM script",
        "trtllm-yaml": "TRT-LLM YAML", "triton": "Triton", "vllm": "vLLM", "growmap": "Sequoia",
        "paths": "Leaf paths", "json": "JSON"}  # short: all nine tabs fit a laptop screen
LOOKUP_TABS = {"vllm": "vLLM", "sglang": "SGLang", "trtllm-yaml": "TRT-LLM YAML",
               "hf": "Hugging Face"}  # prompt lookup's settings, one tab per engine

st.title("Export")
source = st.radio("Tree", ["Chosen on the Trees page", "A selection file"], horizontal=True,
                  key="export_source")
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
                   f"{tree.size} nodes, {point.speedup:.2f}× predicted")
    drafter = selection.growth.get("drafter", {})
else:
    with page_errors():
        chosen = current_choice()
    tree = chosen.tree
    description = f"{chosen.description} — choose another on the Trees page."
    drafter = demo_drafter(chosen.drafter)
st.caption(f"Tree: {description}")
if tree.size == 0:
    st.info("Speculation does not pay here: the pick is no tree (decode autoregressively).")
    st.stop()
with page_errors():
    lookup = recorded_lookup(drafter)  # an n-gram drafter: engine settings, not a tree
if lookup is not None:
    st.caption(f"Prompt lookup drafts a chain of {tree.size} tokens after the longest match of "
               f"the context's last {lookup[0]}…{lookup[1]} tokens: each engine's n-gram "
               "settings for it.")
    for tab, form in zip(st.tabs([LOOKUP_TABS[f.format] for f in FORMS]), FORMS, strict=True):
        with tab, page_errors():
            st.caption(f"{form.engine} — read from {form.versions}")
            text = export_lookup(tree, form.format, min_n=lookup[0], max_n=lookup[1])
            for note in form.notes(lookup[0]):
                st.caption(f"Note: {note}")
            st.code(text, language=None if form.extension == "txt" else form.extension,
                    wrap_lines=True)
            st.download_button(f"Download for {form.format}", text,
                               file_name=f"ngram_{tree.size}_{form.format}.{form.extension}",
                               key=f"dl_ngram_{form.format}")
    st.stop()

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
                            placeholder="a local directory or hub name", key="export_eagle_model")
method = typed if eagle else "eagle"

targets = [e for e in ENGINES if e.draft in (None, draft)]
for tab, target in zip(st.tabs([TABS[e.format] for e in targets]), targets, strict=True):
    with tab:
        st.caption(f"{target.engine} — rules checked against {target.versions}")
        problems = engine_problems(tree, target.format, num_heads=int(num_heads), draft=draft)
        if problems:
            st.warning("This engine would build a different tree: " + "; ".join(problems))
            continue
        try:
            text = export(tree, target.format, num_heads=int(num_heads), draft=draft,
                          speculative_model=eagle_model or None, method=method)
        except TreeoptError as exc:  # a value the format needs is missing
            st.warning(str(exc).replace("--speculative-model", "the EAGLE checkpoint"))
            continue
        st.success("Rules checked: the engine builds exactly this tree.")
        for note in target.notes:
            st.caption(f"Note: {note}")
        st.code(text, language="yaml" if target.format == "trtllm-yaml" else "json",
                wrap_lines=True)
        st.download_button(f"Download for {target.engine}", text,
                           file_name=f"tree_{tree.size}_{target.format}."
                                     f"{EXTENSIONS.get(target.format, 'txt')}",
                           key=f"dl_{target.format}")
