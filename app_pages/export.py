"""Export: the chosen tree in every engine format, each engine's constraints checked."""

import streamlit as st

from app_pages.state import chosen_tree, page_errors
from treeopt.formats import FORMATS, engine_problems, export

st.title("Export")
with page_errors():
    chosen = chosen_tree()
tree = chosen.tree
st.caption(f"Tree: {chosen.description} — choose another on the Trees page.")
c1, c2, _ = st.columns([1, 1, 2])
num_heads = c1.number_input("Draft heads the engine serves", min_value=1, max_value=64,
                            value=max(tree.depth, 1), key="export_heads")
draft = c2.radio("TensorRT-LLM decoding type", ["medusa", "eagle"], horizontal=True,
                 key="export_draft")

NAMES = {"medusa": "Medusa reference code", "hydra": "Hydra reference code",
         "trtllm": "TensorRT-LLM run script", "trtllm-yaml": "TensorRT-LLM LLM-API YAML",
         "triton": "TensorRT-LLM Triton backend", "vllm": "vLLM", "growmap": "Sequoia growmap",
         "paths": "leaf paths", "json": "treeopt tree file"}
TABS = {"medusa": "Medusa", "hydra": "Hydra", "trtllm": "TRT-LLM script",
        "trtllm-yaml": "TRT-LLM YAML", "triton": "Triton", "vllm": "vLLM", "growmap": "Sequoia",
        "paths": "Leaf paths", "json": "JSON"}  # short: all nine tabs fit a laptop screen
EXT = {"trtllm-yaml": "yaml", "growmap": "json", "vllm": "json", "json": "json"}
for tab, fmt in zip(st.tabs([TABS[f] for f in FORMATS]), FORMATS, strict=True):
    with tab:
        st.caption(NAMES[fmt])
        problems = engine_problems(tree, fmt, num_heads=int(num_heads))
        if problems:
            st.warning("This engine cannot run this tree: " + "; ".join(problems))
            continue
        text = export(tree, fmt, num_heads=int(num_heads), draft=draft)
        st.success("Constraints checked: the engine can read this tree as it is.")
        st.code(text, language="yaml" if fmt == "trtllm-yaml" else "json", wrap_lines=True)
        st.download_button(f"Download {NAMES[fmt]}", text,
                           file_name=f"tree_{tree.size}_{fmt}.{EXT.get(fmt, 'txt')}",
                           key=f"dl_{fmt}")
