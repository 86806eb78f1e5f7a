"""Data: the shipped demo, an uploaded trace or accuracy table, or a calibration run."""

import streamlit as st

from app_pages.state import current_dataset, demo_dataset, page_errors, set_dataset
from treeopt.workbench.datasets import calibrate_local, dataset_from_upload

st.title("Data")
st.write("Every page works on the acceptance statistics chosen here: rank traces (exact "
         "simulation of greedy verification) or accuracy tables (Medusa's independence model).")
choice = st.radio("Source", ["Shipped demo", "Upload a file", "Calibrate a local model"],
                  horizontal=True, key="data_source")

if choice == "Shipped demo":
    with page_errors(stop=False):
        set_dataset(demo_dataset())
elif choice == "Upload a file":
    upload = st.file_uploader("Rank trace (.npz) or accuracy table (.csv: head,top1,…,topK; "
                              ".json)", type=["npz", "csv", "json"], key="data_upload")
    if upload is not None:
        with page_errors(stop=False):
            set_dataset(dataset_from_upload(upload.name, upload.getvalue()))
            st.success(f"Loaded {upload.name}.")
else:
    with st.form("calibrate"):
        model_dir = st.text_input("Base model directory (Hugging Face format)")
        heads_dir = st.text_input("Drafter: a directory (heads, EAGLE, a draft model), or "
                                  "'prompt-lookup' / 'ngram-trie'")
        prompts = st.text_input("Prompts file (JSONL with a 'prompt' field, or plain text)")
        c1, c2, c3 = st.columns(3)
        top_k = c1.number_input("Recorded top-k", 1, 1000, 16)
        new_tokens = c2.number_input("Greedy tokens per prompt", 8, 4096, 128)
        out = c3.text_input("Write the trace to", "calibration.npz")
        run = st.form_submit_button("Calibrate")
    if run:
        bar = st.progress(0.0, text="Calibrating…")
        with page_errors(stop=False):
            dataset = calibrate_local(model_dir, heads_dir, prompts, out=out, top_k=int(top_k),
                                      max_new_tokens=int(new_tokens),
                                      progress=lambda i, n: bar.progress(i / n,
                                                                         text=f"batch {i}/{n}"))
            set_dataset(dataset)
            st.success(f"Wrote {out}.")

with page_errors():
    data = current_dataset()
st.subheader(data.name)
if data.description:
    st.caption(data.description)
for label, source in data.sources.items():
    held = data.held_out.get(label)
    st.markdown(f"- **{label}**: drafts {source.heads} deep"
                + (f", {source.positions:,} calibration positions" if data.has_trace(label)
                   else ", accuracy table")
                + (f"; held-out trace of {held.positions:,} positions" if held else ""))
