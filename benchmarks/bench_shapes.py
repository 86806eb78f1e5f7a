"""Which model shapes speculation pays on, here: one verify forward at q tokens, per dtype.

Speculation pays where a step costs nearly the same for 1 and for q tokens (t(q)/t(1) near 1)
*and* where that dtype is the fastest way to run the model at all — a tree that beats a slow
autoregressive baseline is no gain. For Llama shapes with random weights (what a step costs does
not depend on the values), this times the bare Hugging Face forward after ``--context`` cached
tokens at q ∈ ``--tokens`` in float32 (the model's own SDPA) and in bfloat16 with treeopt's exact
attention (what lossless 16-bit tree decoding runs, :mod:`treeopt.decoding.attention`), every
configuration interleaved round by round so host drift falls on all alike. It prints, per shape:
ms per step, t(q)/t(1) per dtype, and the zero-overhead bound of a tree of expected accepted
length ``--accept`` at q tokens against the *fastest* autoregressive step of either dtype.

Run: ``python benchmarks/bench_shapes.py [--shapes 128x8x384,384x4x1152] [--accept 2.5 --q 9]``
(1 torch thread by default, as the demo decodes; a few minutes).
"""

from __future__ import annotations

import argparse

import torch

from treeopt.decoding.attention import register
from treeopt.profiling.timing import Call, interleaved, summarize

SHAPES = "128x8x384,256x4x768,384x4x1152,512x4x1536,512x2x1536"


def build(shape: str, dtype: torch.dtype, attention: str):
    """A random Llama of ``hidden x layers x mlp`` (64-wide attention heads, vocabulary 4096)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, mlp = (int(x) for x in shape.split("x"))
    config = LlamaConfig(vocab_size=4096, hidden_size=hidden, num_hidden_layers=layers,
                         intermediate_size=mlp, num_attention_heads=hidden // 64,
                         num_key_value_heads=hidden // 64, max_position_embeddings=1024,
                         tie_word_embeddings=True, attn_implementation=attention)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(dtype).eval()


def step_calls(model, *, context: int, tokens: list[int]) -> dict[int, Call]:
    """One forward of q new tokens after ``context`` cached ones; the cache cropped back after."""
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.inference_mode():
        model(torch.randint(0, 4096, (1, context)), past_key_values=cache, use_cache=True)

    def run(q: int):
        ids = torch.randint(0, 4096, (1, q))
        with torch.inference_mode():
            return model(ids, past_key_values=cache, use_cache=True)

    return {q: Call(run=lambda q=q: run(q), reset=lambda q=q: cache.crop(-q)) for q in tokens}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help="hidden x layers x mlp, comma-separated")
    ap.add_argument("--tokens", default="1,5,9,17", help="q values timed")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--accept", type=float, default=2.5, help="E[L] of the tree for the bound")
    ap.add_argument("--q", type=int, default=9, help="tree tokens of that tree (one of --tokens)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tokens = [int(x) for x in args.tokens.split(",")]
    exact = register()
    print(f"ms per forward after {args.context} cached tokens, {args.threads} thread(s) (median of "
          f"{args.repeats} interleaved rounds); bound = E[L] {args.accept} · fastest AR step / "
          f"t(q={args.q}) of that dtype")
    print(f"{'shape':>12} {'params':>7} {'dtype':>14} " + " ".join(f"{'q=' + str(q):>7}"
          for q in tokens) + f" {'t(q)/t(1)':>9} {'bound':>6}")
    for shape in args.shapes.split(","):
        models = {"fp32 sdpa": build(shape, torch.float32, "sdpa"),
                  "bf16 exact": build(shape, torch.bfloat16, exact)}
        params = sum(p.numel() for p in models["fp32 sdpa"].parameters())
        calls = {(name, q): call for name, model in models.items()
                 for q, call in step_calls(model, context=args.context, tokens=tokens).items()}
        ms = interleaved(calls, repeats=args.repeats, warmup=3, device="cpu")
        med = {key: summarize(times)[0] for key, times in ms.items()}
        fastest_ar = min(med[(name, 1)] for name in models)
        for name in models:
            ratio = med[(name, args.q)] / med[(name, 1)]
            bound = args.accept * fastest_ar / med[(name, args.q)]
            print(f"{shape:>12} {params / 1e6:6.1f}M {name:>14} "
                  + " ".join(f"{med[(name, q)]:7.2f}" for q in tokens)
                  + f" {ratio:9.2f} {bound:5.2f}×", flush=True)


if __name__ == "__main__":
    main()
