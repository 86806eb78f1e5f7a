"""CPU products of a few rows: ``F.linear`` against oneDNN's packed weights (never a test).

The decoder multiplies a step's 2 to 32 rows by weights packed for oneDNN
(:mod:`treeopt.decoding.packed_linear`); before, every product ran ``F.linear`` (MKL in float32,
oneDNN with the weight as stored in bfloat16). Both run here on one model in ``--dtype``,
switched round by round (the order alternating), so that both meet the host alike:

1. **the verify forward**: q tokens per sequence (1, 2, 3, 5, 9, 17) at each ``--batches`` size
   over a ``--context``-token cache, the median of ``--rounds`` rounds of 5 forwards each;
2. **live decoding**: the demo drafter's trees of ``--sizes`` nodes (0: autoregressive) decode
   ``--prompts`` held-out prompts × ``--new-tokens`` at each batch size; printed: tokens/s, the
   speed-up over the same kernel's autoregressive decoding and over ``F.linear``'s
   autoregressive decoding (the decoder before the change), and whether every output equals
   ``F.linear``'s autoregressive decoding's.

Run: ``taskset -c 0 python benchmarks/bench_cpu_linear.py --demo smollm2 --kind prompt-lookup``
(the real model's demo needs its weights: ``treeopt fetch smollm2-135m-instruct``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KERNELS = ("linear", "packed")  # F.linear; oneDNN-packed weights
QS = (1, 2, 3, 5, 9, 17)


def use(kernel: str, *modules) -> None:
    """Run ``modules``' products that pack (:mod:`treeopt.decoding.packed_linear`) on
    ``kernel``."""
    from treeopt.decoding.packed_linear import pack_for_cpu, unpack_for_cpu

    (pack_for_cpu if kernel == "packed" else unpack_for_cpu)(*modules)


def forward_times(model, *, batch: int, context: int, rounds: int) -> dict[tuple[str, int], float]:
    """Median seconds of one verify forward of q tokens per sequence, per (kernel, q)."""
    import torch
    from transformers import DynamicCache

    from treeopt.decoding.weight_layout import lay_out_for_cpu

    lay_out_for_cpu(model)  # as the decoder runs it: a single row's product column-major
    ids = torch.randint(0, model.config.vocab_size, (batch, context + max(QS)),
                        generator=torch.Generator().manual_seed(0))
    times: dict[tuple[str, int], list[float]] = {}
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(ids[:, :context], past_key_values=cache, use_cache=True)
        for r in range(rounds):
            for kernel in KERNELS if r % 2 == 0 else KERNELS[::-1]:
                use(kernel, model)
                for q in QS:
                    step = []
                    for _ in range(6):  # the first: a warm-up (a new pack, a new shape)
                        start = time.perf_counter()
                        model(ids[:, context:context + q], past_key_values=cache, use_cache=True)
                        step.append(time.perf_counter() - start)
                        cache.crop(-q)
                    times.setdefault((kernel, q), []).append(statistics.median(step[1:]))
    return {key: statistics.median(v) for key, v in times.items()}


def live(demo, kind: str, *, sizes, batch: int, prompts, new_tokens: int, rounds: int):
    """Per (kernel, size): median seconds to decode ``prompts`` in batches of ``batch``, and the
    outputs."""
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder

    decoder = Decoder(demo.model, demo.heads[kind])
    growth = demo.growths[kind]
    trees = {n: growth.tree(min(n, growth.max_nodes)) for n in sizes}
    config = DecodeConfig(max_new_tokens=new_tokens,
                          eos_token_id=getattr(demo.tokenizer, "eos_token_id", None))
    groups = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]
    seconds: dict[tuple[str, int], list[float]] = {}
    outputs: dict[tuple[str, int], list] = {}
    for r in range(rounds):
        for kernel in KERNELS if r % 2 == 0 else KERNELS[::-1]:
            use(kernel, demo.model, demo.heads[kind])
            decoder.decode(trees[sizes[-1]], groups[0], config=DecodeConfig(max_new_tokens=4))
            for n in sizes:
                start = time.perf_counter()
                out = [t for g in groups for t in decoder.decode(trees[n], g, config=config).tokens]
                seconds.setdefault((kernel, n), []).append(time.perf_counter() - start)
                outputs[kernel, n] = out
    return {k: statistics.median(v) for k, v in seconds.items()}, outputs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", default="smollm2", help="a demo under data/ or a demo directory")
    ap.add_argument("--kind", default="prompt-lookup", help="the drafter (default prompt-lookup)")
    ap.add_argument("--sizes", default="0,1,2,4,8", help="tree nodes (0: autoregressive)")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--prompts", type=int, default=8, help="held-out prompts (default 8)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--context", type=int, default=256, help="the forwards' cache (default 256)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--skip-live", action="store_true", help="only the verify forwards")
    args = ap.parse_args(argv)

    import torch

    from treeopt.demo import load
    from treeopt.demo.layout import demo_root
    from treeopt.documents.prompts import encode
    from treeopt.profiling.host import cpu_identity

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    demo = load(demo_root(args.demo), threads=args.threads, dtype=args.dtype)
    batches = [int(b) for b in args.batches.split(",")]
    sizes = sorted({0, *(int(n) for n in args.sizes.split(","))})
    cpu = cpu_identity()
    print(f"demo {args.demo}, {args.dtype}, {args.threads} thread(s); CPU {cpu.get('name')} "
          f"({cpu.get('matmul')}); torch {torch.__version__}")
    print(f"\n1. verify forward, ms (packed over F.linear), context {args.context}, median of "
          f"{args.rounds} rounds")
    for b in batches:
        t = forward_times(demo.model, batch=b, context=args.context, rounds=args.rounds)
        print(f"  batch {b}: " + "  ".join(
            f"q{q} {t['linear', q] * 1e3:.1f}→{t['packed', q] * 1e3:.1f} "
            f"({t['packed', q] / t['linear', q] - 1:+.0%})" for q in QS), flush=True)
    if args.skip_live:
        return 0
    prompts = encode(demo.tokenizer, demo.prompts)[: args.prompts]
    print(f"\n2. live decoding, {args.kind}, {len(prompts)} held-out prompts × "
          f"{args.new_tokens} tokens, median of {args.rounds} rounds")
    for b in batches:
        secs, outs = live(demo, args.kind, sizes=sizes, batch=b, prompts=prompts,
                          new_tokens=args.new_tokens, rounds=args.rounds)
        reference = outs["linear", 0]
        tokens = sum(len(o) for o in reference)
        for n in sizes:
            row = []
            for kernel in KERNELS:
                s = secs[kernel, n]
                same = sum(a == r for a, r in zip(outs[kernel, n], reference, strict=True))
                row.append(f"{kernel} {tokens / s:5.1f} tok/s ×{secs[kernel, 0] / s:.2f} own AR "
                           f"×{secs['linear', 0] / s:.2f} F.linear AR, equal {same}/{len(reference)}")
            print(f"  batch {b}, {n:2d} nodes: " + " | ".join(row), flush=True)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
