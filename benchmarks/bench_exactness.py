"""Is every drafter of a demo lossless, greedy and sampled? (never a test)

For each drafter the demo ships and each mode (greedy; sample-and-match at every temperature the
demo has sampled traces for), the drafter's tree of ``--size`` nodes (the growth for that mode)
decodes the demo's held-out prompts in batches, each stopped at the tokenizer's EOS, and plain
decoding (no tree) decodes them in the same batches with the same sampling streams. Sampling draws
a row's tokens from (seed, stream, position) alone, so a lossless tree emits exactly plain
sampling's tokens, in any batch.

Suffix decoding, whose drafts read the requests served before, decodes the prompts in order in
one row, as its held-out trace ranked them.

Printed per drafter and mode: the prompts whose output equals plain decoding's, live E[L] per
step, and, in the dtype the demo's traces were made in, the held-out trace's walk over the steps
inside it beside live E[L] over the same steps (a lossless run takes exactly the walk's steps
where it continues the prompts as the trace did; in another dtype the continuations differ, so
the walk is not printed, and on another CPU class bf16 may round differently and continue some
prompts otherwise: the walk then misses by what those prompts differ).

Run: ``python benchmarks/bench_exactness.py --demo smollm2 [--dtype fp32] [--prompts 64]``
(the real model's demo needs its weights: ``treeopt fetch smollm2-135m-instruct``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def modes(demo, asked: str | None) -> list[float]:
    """``asked`` (``greedy`` and temperatures, comma-separated) as temperatures, 0 for greedy;
    default greedy, then every temperature the demo has sampled traces for."""
    if asked is None:
        return [0.0, *demo.temperatures]
    out = [0.0 if m == "greedy" else float(m) for m in asked.split(",")]
    missing = [t for t in out if t and t not in demo.temperatures]
    if missing:
        raise SystemExit(f"--modes: the demo has no sampled traces at T = {missing[0]:g} "
                         f"(it has {', '.join(f'{t:g}' for t in demo.temperatures) or 'none'})")
    return out


def held_trace(demo, kind: str, t: float):
    """The ``kind`` drafter's held-out trace for mode ``t`` (None where the demo has none)."""
    if not t:
        return demo.heldout_traces.get(kind)
    return demo.sampled_traces(kind)[t][1]


def tree_for(demo, kind: str, t: float, size: int):
    """The growth's tree of ``size`` nodes for mode ``t`` (greedy: the demo's growth)."""
    from treeopt.model.growth import Growth

    growth = (demo.growths[kind] if not t
              else Growth.load(demo.paths.growth(kind, temperature=t)))
    return growth.tree(min(size, growth.max_nodes))


def decode_all(decoder, tree, prompts, config, batch: int):
    """Every prompt decoded in consecutive batches, prompt i on sampling stream i. A drafter
    that reads earlier requests (suffix decoding) serves them one after another in one row
    instead, as its trace ranks them (and as the build's live check decodes them)."""
    if decoder.heads is not None and decoder.heads.kind.request_cache:
        runs = [decoder.decode(tree, prompts, config=config, streams=range(len(prompts)),
                               batch=1)]
    else:
        runs = [decoder.decode(tree, prompts[lo: lo + batch], config=config,
                               streams=range(lo, lo + len(prompts[lo: lo + batch])))
                for lo in range(0, len(prompts), batch)]
    return [t for r in runs for t in r.tokens], [a for r in runs
                                                 for a in r.stats.sequence_accept_lengths]


def walk_line(tree, held, per_prompt: list[list[int]], emitted: list[int]) -> str:
    """The held-out trace's walk, each sequence cut to the ``emitted`` tokens of its live run,
    beside live E[L] over the steps inside the trace."""
    from treeopt.model.runs import as_runs
    from treeopt.model.simulation import simulate, steps_inside

    cut = as_runs(held, emitted)
    inside = steps_inside(per_prompt, cut.meta["sequence_positions"])
    walk = simulate(tree, cut, per_step=True).mean_accept_length
    live = statistics.fmean(inside) if inside else 0.0
    return (f"held-out walk {walk:.4f}, live inside the trace {live:.4f} over {len(inside)} "
            f"steps ({live / walk - 1:+.2%})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", default="smollm2", help="a demo under data/ (default smollm2)")
    ap.add_argument("--dtype", help="the model's dtype (fp32, bf16; default the demo build's)")
    ap.add_argument("--kinds", help="drafters, comma-separated (default every one it ships)")
    ap.add_argument("--modes", help="greedy and temperatures, comma-separated (default greedy "
                    "and every temperature the demo has sampled traces for)")
    ap.add_argument("--prompts", type=int, default=64, help="held-out prompts (default 64)")
    ap.add_argument("--new-tokens", type=int, help="default the demo's continuation length")
    ap.add_argument("--size", type=int, default=8, help="tree nodes (default 8, the build's "
                    "live check)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--threads", type=int, help="torch threads (default torch's choice)")
    args = ap.parse_args(argv)

    import torch

    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder
    from treeopt.demo import load
    from treeopt.demo.layout import demo_root
    from treeopt.documents.prompts import encode
    from treeopt.model.tree import Tree

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    demo = load(demo_root(args.demo), threads=args.threads, dtype=args.dtype)
    traced_dtype = demo.manifest["config"].get("dtype", "fp32")
    dtype = args.dtype or traced_dtype
    kinds = args.kinds.split(",") if args.kinds else list(demo.kinds)
    prompts = encode(demo.tokenizer, demo.prompts)[: args.prompts]
    new_tokens = args.new_tokens or int(demo.manifest["config"]["max_new_tokens"])
    eos = getattr(demo.tokenizer, "eos_token_id", None)
    print(f"demo {args.demo} in {dtype} (traces in {traced_dtype}); {len(prompts)} held-out "
          f"prompts × {new_tokens} tokens, stopped at EOS, batches of {args.batch}; "
          f"{torch.get_num_threads()} threads")
    plain = Decoder(demo.model, None)
    equal_all = True
    for t in modes(demo, args.modes):
        seed = 0 if not t else int(demo.sampled_traces(kinds[0])[t][0].sampling["seed"])
        config = DecodeConfig(max_new_tokens=new_tokens, eos_token_id=eos,
                              **({"mode": "sample", "temperature": t, "seed": seed} if t
                                 else {}))
        reference, _ = decode_all(plain, Tree(()), prompts, config, args.batch)
        label = "greedy" if not t else f"sample-and-match, T = {t:g} (seed {seed})"
        print(f"\n{label}")
        for kind in kinds:
            tree = tree_for(demo, kind, t, args.size)
            outputs, per_prompt = decode_all(Decoder(demo.model, demo.heads[kind]), tree,
                                             prompts, config, args.batch)
            same = sum(list(a) == list(b) for a, b in zip(outputs, reference, strict=True))
            equal_all &= same == len(prompts)
            steps = [a for p in per_prompt for a in p]
            held = held_trace(demo, kind, t)
            walk = (walk_line(tree, held, per_prompt, [len(o) for o in outputs])
                    if held is not None and dtype == traced_dtype
                    else f"(the traces are {traced_dtype}: no walk in {dtype})")
            print(f"  {kind:>14} {tree.size:2d} nodes: equal to plain decoding {same}/"
                  f"{len(prompts)}; live E[L] {statistics.fmean(steps):.4f} over {len(steps)} "
                  f"steps; {walk}", flush=True)
    print(f"\nevery drafter lossless in every mode: {'met' if equal_all else 'NOT met'} "
          f"({time.perf_counter() - started:.0f} s)")
    return 0 if equal_all else 1


if __name__ == "__main__":
    from entry import run

    run(main)
