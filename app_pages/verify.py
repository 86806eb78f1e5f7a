"""Verify: decode held-out prompts live with the chosen tree and compare with autoregressive
decoding and the prediction (or one prompt of the person's own, labelled as such)."""

import html

import streamlit as st

from app_pages.choice import current_choice
from app_pages.state import demo, demo_dataset, demo_model, page_errors
from treeopt.workbench import plots
from treeopt.workbench.demos import emulated_here, timed_elsewhere, weights_missing
from treeopt.workbench.live import live_run, prompts_walk
from treeopt.workbench.numbers import accept_length_text
from treeopt.workbench.style import speedup_delta

HELD_OUT, OWN = "held-out", "one prompt"
DEFAULT_PROMPTS = 4  # held-out prompts a run decodes: several, and quick on the demo's model

st.title("Verify")
st.write("Decode held-out prompts with the tree and without it, through the same loop, a batch "
         "of them at a time — or one prompt of your own. Greedy and lossless sampling "
         "(sample-and-match, the same seed) must give identical outputs; each highlighted piece "
         "is what one step accepted.")
with page_errors():
    bundle = demo()  # the model loads when the button runs a decoding

kinds = list(bundle.traces)
with page_errors():
    picked = current_choice()
c1, c2, c3, c4 = st.columns(4)
kind = c1.selectbox("Demo heads", kinds,
                    index=kinds.index(picked.drafter) if picked.drafter in kinds else 0,
                    key="verify_kind")
mode = c2.radio("Acceptance", ["greedy", "sample", "typical"], horizontal=True,
                key="verify_mode", help="sample: lossless sample-and-match at T; typical: "
                                        "Medusa's typical acceptance, not lossless")
new_tokens = c3.slider("New tokens", 16, 256, 128, step=16, key="verify_tokens")
source = c4.radio("Prompts", [HELD_OUT, OWN], horizontal=True, key="verify_prompts",
                  help="held-out prompts: the ones the other pages predict for; one prompt: "
                       "any text, decoded alone")
temperature, seed = 0.0, 0
t1, t2, t3, t4 = st.columns([1, 1, 1, 1])
if source == HELD_OUT:
    count = t1.slider("Held-out prompts", 1, min(16, len(bundle.prompts)), DEFAULT_PROMPTS,
                      key="verify_count", help="the first held-out prompts, in order")
    batch = t2.select_slider("Batch", [b for b in (1, 2, 4, 8) if b <= count] or [1], 1,
                             key="verify_batch", help="prompts decoded together")
    prompts = bundle.prompts[:count]
else:
    batch = 1
    prompts = [st.text_area("Prompt", bundle.prompts[0], height=160, key="verify_prompt")]
dtype = t4.radio("Precision", ["float32", "bfloat16"], horizontal=True, key="verify_dtype",
                 help="bfloat16: the model and drafter in bfloat16 with treeopt's exact attention "
                      "(a node's logits do not depend on the tree verified with it, so decoding "
                      "stays lossless). On a CPU with AMX a bfloat16 step costs nearly the same "
                      "for 1 and for 16 tokens — the regime speculation is made for — where a "
                      "float32 step grows with every token; on one without bf16 matrix "
                      "instructions (AVX2 alone) bfloat16 is emulated and float32 is faster.")
if mode != "greedy":
    temperature = t3.select_slider("Temperature", [0.3, 0.5, 0.7, 1.0, 1.3], 0.7,
                                   key="verify_temperature")
    seed = int(st.number_input("Seed", 0, 2**31 - 1, 0, key="verify_seed"))
sampled = demo_dataset().sampled.get(kind, {})  # loaded once per server, not per rerun
trace = (bundle.traces[kind] if mode != "sample"
         else sampled[temperature][0] if temperature in sampled else None)
with page_errors():
    chosen = current_choice(kind, batch=batch, demo_drafter=True)
tree = chosen.tree
st.caption(f"Tree: {chosen.description}. Choose another on the Overview or the Trees page.")
if (mode == "sample" and temperature in bundle.temperatures
        and f"sampling at T = {temperature:g}" not in chosen.description):
    st.info(f"This tree was not grown for sampling at T = {temperature:g}; the demo ships one "
            f"that was ({bundle.paths.growth(kind, temperature=temperature).name}): pick "
            f"“sampled, T = {temperature:g}” under Decoding on the Trees page.")
held = (bundle.heldout_traces.get(kind) if mode == "greedy"
        else sampled[temperature][1] if mode == "sample" and temperature in sampled else None)
walked = prompts_walk(held, len(prompts)) if source == HELD_OUT else None
missing = weights_missing(bundle.manifest)
if missing:
    st.info(f"Decoding needs the base model's weights: {missing}.")
if elsewhere := timed_elsewhere(bundle.manifest):
    st.info(elsewhere)
if emulated := emulated_here(dtype):
    st.info(emulated)

if st.button("Run live verification", type="primary", key="verify_run", disabled=bool(missing)):
    with page_errors():
        live = demo_model(dtype)
    with st.spinner(f"Decoding {len(prompts)} prompt{'s' * (len(prompts) > 1)} with the tree "
                    "and autoregressively…"), page_errors():
        run = live_run(live.model, live.tokenizer, live.heads[kind], tree, prompts,
                       max_new_tokens=new_tokens, mode=mode, temperature=temperature or 0.7,
                       seed=seed, trace=trace, batch=batch, walked=walked,
                       drafted=chosen.drafted)
    m = st.columns(4)
    m[0].metric("Measured mean accepted length", accept_length_text(run.mean_accept_length),
                help=f"± {run.stderr:.3f} (standard error over the steps of {run.prompts} "
                     f"prompt{'s' * (run.prompts > 1)})")
    if run.predicted_accept_length is not None:
        predicted = run.predicted_accept_length
        rel = (run.mean_accept_length / predicted - 1) * 100
        m[1].metric("Predicted accepted length", accept_length_text(predicted),
                    delta=f"{rel:+.1f}% measured vs predicted", delta_color="off",
                    help=f"these {run.prompts} held-out prompts' trace walked step by step over "
                         "the tokens each decoded: the walk the Overview and Trees predict "
                         "with (their figure walks the live sweep's prompts)")
    else:
        m[1].metric("Predicted accepted length", "—",
                    help="a prompt of your own has no trace to walk: no prediction")
    if source == OWN:
        st.info("Single prompt: a tree on its own prompt can show any figure — what it accepts "
                "depends on how much this one text repeats. The held-out prompts are what the "
                "other pages predict for.")
    whole = f" (batch of {run.batch})" if run.batch > 1 else ""
    m[2].metric("Tree decoding", f"{run.tree_tokens_per_s:.0f} tokens/s",
                **speedup_delta(run.speedup).metric(),
                help=f"steady-state decode throughput{whole}, prefill excluded")
    m[3].metric("Autoregressive", f"{run.autoregressive_tokens_per_s:.0f} tokens/s",
                help=f"the same loop with no tree{whole}")
    plain = ("plain greedy decoding" if mode == "greedy"
             else f"plain sampling at T = {temperature:g} with seed {seed}")
    rows = "every prompt's output equals" if run.prompts > 1 else "the tree's output equals"
    if run.outputs_match is True and run.generate_match is True:
        st.success(f"Lossless: {rows} the model's own greedy `generate` and treeopt's "
                   f"{plain} token for token.")
    elif run.generate_match is False:
        st.error("The outputs differ from the model's own greedy `generate`: treeopt does not "
                 "decode this model as the model decodes itself — please report it.")
    elif run.outputs_match is True:
        st.success(f"Lossless: {rows} {plain} token for token.")
    elif run.outputs_match is False:
        st.error(f"The outputs differ from {plain}: {mode} tree decoding should be lossless — "
                 "please report it.")
    else:
        st.info("Typical acceptance trades exactness for longer accepted paths; outputs may differ.")
    colours = ["#dbeafe", "#fde68a"]
    spans = "".join(f'<span style="background:{colours[i % 2]}" title="step {i}">'
                    f"{html.escape(piece)}</span>" for i, piece in enumerate(run.segments))
    box = ("white-space:pre-wrap; font-size:0.85rem; background:#f8f9fb; padding:0.75rem; "
           "border-radius:0.5rem; max-height:24rem; overflow-y:auto")
    st.html(f'<pre style="{box}">{html.escape(prompts[0])}{spans}</pre>')  # markdown folds lines
    left, right = st.columns(2)
    left.plotly_chart(plots.accept_histogram({"measured": run.histogram}),
                      width="stretch")
    right.plotly_chart(plots.time_split(run.time_split), width="stretch")
