"""What this checkout's decoder costs on the shipped demo against another checkout's, measured
in the same run: tree and autoregressive tokens/s of the same prompts, the two checkouts
alternating round by round in fresh processes (one torch thread each).

The goal it checks: the per-layer window
masks, the cache's key/value widths and the support probe cost the Llama path nothing
measurable — the ratios this prints are within their spread of 1.

    git worktree add /tmp/base <commit>
    python benchmarks/bench_mask_cost.py --baseline /tmp/base [--kind hydra] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def child(args: argparse.Namespace) -> None:
    """One round in this process: the demo's tree of ``--size`` nodes no deeper than
    ``--max-depth`` and autoregressive decoding of the first prompts, interleaved step by step;
    prints tokens/s of each as JSON."""
    import torch

    import treeopt
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder, decode_alongside
    from treeopt.demo import load
    from treeopt.documents.prompts import encode
    from treeopt.model.tree import Tree

    torch.set_num_threads(1)
    demo = load(HERE / "data" / "demo")
    growth = demo.growths[args.kind]
    paths = [p for p in growth.order if args.max_depth is None or len(p) <= args.max_depth]
    tree = Tree.from_choices(paths[: args.size])
    prompts = encode(demo.tokenizer, demo.prompts[: args.prompts])
    runs = [(Decoder(demo.model, demo.heads[args.kind]), tree), (Decoder(demo.model), Tree(()))]
    config = DecodeConfig(max_new_tokens=args.new_tokens)
    decode_alongside(runs, prompts[:1], config=DecodeConfig(max_new_tokens=8))  # warm-up
    spec = plain = 0.0
    tokens = [0, 0]
    for prompt in prompts:
        a, b = decode_alongside(runs, [prompt], config=config)
        spec += a.stats.decode_seconds
        plain += b.stats.decode_seconds
        tokens[0] += a.stats.decode_tokens
        tokens[1] += b.stats.decode_tokens
    print(json.dumps({"code": str(Path(treeopt.__file__).parents[1]),
                      "tree": tokens[0] / spec, "autoregressive": tokens[1] / plain}))


def run_round(code: Path, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, __file__, "--child", "--kind", args.kind, "--size", str(args.size),
           "--prompts", str(args.prompts), "--new-tokens", str(args.new_tokens)]
    if args.max_depth is not None:
        cmd += ["--max-depth", str(args.max_depth)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=code)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(got["code"]).resolve() != code.resolve():
        raise SystemExit(f"the child imported treeopt from {got['code']}, not {code}")
    return got


def mean_se(values: list[float]) -> str:
    """"1.003 ± 0.004": the mean and its standard error."""
    se = statistics.stdev(values) / len(values) ** 0.5 if len(values) > 1 else float("nan")
    return f"{statistics.fmean(values):.3f} ± {se:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", type=Path, help="another checkout of treeopt")
    ap.add_argument("--kind", default="hydra")
    ap.add_argument("--size", type=int, default=11, help="nodes of the demo's growth order")
    ap.add_argument("--max-depth", type=int, default=3,
                    help="only nodes this deep (default 3: select's batch-1 Hydra pick)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return 0
    if args.baseline is None:
        ap.error("--baseline DIR is required")
    codes = {"this": HERE, "baseline": args.baseline}
    seen: dict[str, list[dict[str, float]]] = {k: [] for k in codes}
    for r in range(args.rounds):
        for name in (codes if r % 2 == 0 else reversed(list(codes))):
            seen[name].append(run_round(codes[name], args))
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(
            f"{k} tree {v[-1]['tree']:.1f} / AR {v[-1]['autoregressive']:.1f} tokens/s"
            for k, v in seen.items()), flush=True)
    print(f"\n{args.kind} T_{args.size} (depth ≤ {args.max_depth}), {args.prompts} prompts × "
          f"{args.new_tokens} tokens, batch 1, {args.rounds} alternating rounds: mean of the "
          f"per-round ratios ± its standard error")
    for what in ("tree", "autoregressive"):
        ratios = [a[what] / b[what] for a, b in zip(seen["this"], seen["baseline"], strict=True)]
        print(f"- {what}: this {statistics.median(x[what] for x in seen['this']):.1f} tokens/s, "
              f"baseline {statistics.median(x[what] for x in seen['baseline']):.1f} (medians): "
              f"ratio {mean_se(ratios)}")
    speed = {k: [x["tree"] / x["autoregressive"] for x in v] for k, v in seen.items()}
    paired = [a / b for a, b in zip(speed["this"], speed["baseline"], strict=True)]
    print(f"- speed-up over autoregressive (each run's own, interleaved): this "
          f"{statistics.median(speed['this']):.3f}×, baseline "
          f"{statistics.median(speed['baseline']):.3f}× (medians); ratio {mean_se(paired)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
