"""fp32 against bf16 on the CPU (AMX-BF16): which dtype decodes a demo's model fastest, with
and without its pick (never a test).

The demo's base model is loaded twice, in float32 and in bfloat16 (treeopt's exact attention and
paired lone rows, so the bf16 tree decodes losslessly). On the same held-out prompts, four runs
decode side by side, their steps interleaved (:func:`treeopt.decoding.loop.decode_alongside`,
one torch thread): autoregressive and the drafter's pick (the tree ``select`` priced from the
demo's step profile at batch 1) in each dtype. Printed per run: tokens/s over its own steps,
its speed-up over autoregressive decoding in the same dtype, and over float32 autoregressive
decoding; whether each tree's output equals its dtype's autoregressive output; the step of one
token in each dtype; and the fastest run (where the pick loses to autoregressive decoding, a
user decodes without it), beside the dtype whose pick decodes most tokens per second.
(The two dtypes' greedy texts part where bf16 rounds a logit otherwise: each run is compared with
autoregressive decoding in its own dtype.)

Run: ``python benchmarks/bench_dtype.py --demo smollm2 [--kind prompt-lookup] [--prompts 8]
[--new-tokens 128]`` on a quiet machine, after ``treeopt fetch smollm2-135m-instruct``.
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", help="a demo in data/ or its directory (default the shipped one)")
    ap.add_argument("--kind", help="the drafter (default: the demo's first with a step profile)")
    ap.add_argument("--prompts", type=int, default=8, help="held-out prompts (default 8)")
    ap.add_argument("--new-tokens", type=int, default=128, help="new tokens each (default 128)")
    args = ap.parse_args(argv)

    import torch
    from transformers.utils import logging

    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder, decode_alongside
    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import attach_model, load
    from treeopt.documents.prompts import encode
    from treeopt.model.tree import Tree
    from treeopt.workbench.demo_pricing import demo_pricing

    logging.set_verbosity_error()
    torch.set_num_threads(1)
    files = load(demo_root(args.demo), with_model=False)
    kind = args.kind or next((k for k in files.kinds if files.step_profile(k) is not None), None)
    priced = demo_pricing(files, kind) if kind is not None else None
    if priced is None:
        print(f"the demo has no step profile for {kind or 'any drafter'}")
        return 2
    tree = priced.selection.tree_at(1)
    demos = {dtype: attach_model(files, dtype=dtype, threads=1) for dtype in ("fp32", "bf16")}
    prompts = encode(demos["fp32"].tokenizer, files.prompts[: args.prompts])
    eos = demos["fp32"].tokenizer.eos_token_id
    config = DecodeConfig(max_new_tokens=args.new_tokens, eos_token_id=eos)
    runs = [(dtype, name, Decoder(d.model, d.heads[kind] if shape.size else None), shape)
            for dtype, d in demos.items()
            for name, shape in (("autoregressive", Tree(())), (f"{kind} pick", tree))]
    print(f"demo {files.paths.root.name}, {kind}'s pick at batch 1: {tree.size} nodes; "
          f"{len(prompts)} held-out prompts × {args.new_tokens} new tokens, one thread, steps "
          f"interleaved")
    started = time.perf_counter()
    speed, tokens = {}, {}
    for ids in prompts:  # one prompt at a time: batch 1
        results = decode_alongside([(dec, shape) for _, _, dec, shape in runs], [ids],
                                   config=config)
        for (dtype, name, _, _), r in zip(runs, results, strict=True):
            t, s = speed.get((dtype, name), (0, 0.0))
            speed[(dtype, name)] = (t + r.stats.decode_tokens, s + r.stats.decode_seconds)
            tokens.setdefault((dtype, name), []).append(r.tokens)
    rate = {k: t / s for k, (t, s) in speed.items()}
    print(f"{'dtype':6} {'run':24} {'tokens/s':>9} {'× own AR':>9} {'× fp32 AR':>10}  output")
    for dtype, name, _, _ in runs:
        own = rate[(dtype, "autoregressive")]
        same = tokens[(dtype, name)] == tokens[(dtype, "autoregressive")]
        print(f"{dtype:6} {name:24} {rate[(dtype, name)]:9.1f} {rate[(dtype, name)] / own:8.2f}× "
              f"{rate[(dtype, name)] / rate[('fp32', 'autoregressive')]:9.2f}×  "
              f"{'equal to AR' if same else 'DIFFERS from AR'}")
    for dtype in demos:
        print(f"{dtype} autoregressive step: {1000 / rate[(dtype, 'autoregressive')]:.1f} ms")
    best = max(rate, key=rate.get)  # the fastest run: with the pick, or without where it loses
    pick = max(demos, key=lambda d: rate[(d, f"{kind} pick")])
    print(f"fastest: {best[0]} {best[1]} ({rate[best]:.1f} tokens/s); with the pick, "
          f"{pick} ({rate[(pick, f'{kind} pick')]:.1f}); the demo was built in "
          f"{files.manifest.get('config', {}).get('dtype', 'fp32')} "
          f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
