"""Lossless sampling on the shipped demo, goal by goal.

For each head kind and each temperature the demo ships a sampled trace for (0.7, 1.0):

1. exactness — every held-out prompt decoded by sample-and-match with the tree grown for T
   (``--size`` nodes) emits exactly the tokens of plain autoregressive sampling with the same seed
   and stream, decoded alone (batch 1) and in batches of ``--batch``;
2. prediction — the live mean accepted length against the per-step walk of the sampled
   calibration trace (cut to the tokens decoded live), with standard errors; and against the
   held-out sampled trace, which was drawn with the same seed and streams, so it must agree
   step for step;
3. what the greedy-grown tree gives up at T: E[L] of the greedy-grown and the T-grown tree at 16
   and 64 nodes on the sampled calibration trace;
4. typical acceptance beside it, at the same T: its mean accepted length for ε in the Medusa
   paper's grid (α = √ε), and how far its output is from the base model's — the total-variation
   distance of the first tokens' distribution from plain sampling's over ``--samples`` seeded
   streams of one prompt, beside the same distance between two independent plain samplings (the
   estimate's own noise floor).

Run: ``python benchmarks/bench_sampling.py [--kinds hydra,medusa] [--new-tokens 64]``.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import Counter

import torch

from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.loop import Decoder
from treeopt.demo import load
from treeopt.documents.prompts import encode
from treeopt.model.growth import Growth
from treeopt.model.runs import as_run, as_runs
from treeopt.model.simulation import simulate
from treeopt.model.tree import Tree

EPSILONS = (0.05, 0.1, 0.15, 0.2, 0.25)


def mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def exactness(decoder: Decoder, tree: Tree, prompts: list[list[int]], cfg: DecodeConfig,
              batch: int) -> tuple[int, int, list[int]]:
    """Prompts whose tree samples equal plain samples, alone and batched; the accepted lengths
    of the batch-1 tree runs."""
    equal_alone = equal_batched = 0
    lengths: list[int] = []
    plain = [decoder.decode(Tree(()), [p], config=cfg, streams=[i]).tokens[0]
             for i, p in enumerate(prompts)]
    for i, p in enumerate(prompts):
        run = decoder.decode(tree, [p], config=cfg, streams=[i])
        equal_alone += run.tokens[0] == plain[i]
        lengths.extend(run.stats.accept_lengths)
    for lo in range(0, len(prompts), batch):
        group = prompts[lo: lo + batch]
        run = decoder.decode(tree, group, config=cfg, streams=range(lo, lo + len(group)))
        equal_batched += sum(a == b for a, b in zip(run.tokens, plain[lo: lo + len(group)],
                                                    strict=True))
    return equal_alone, equal_batched, lengths


def total_variation(a: list[int], b: list[int]) -> float:
    ca, cb = Counter(a), Counter(b)
    return 0.5 * sum(abs(ca[k] / len(a) - cb[k] / len(b)) for k in set(ca) | set(cb))


def first_tokens(decoder: Decoder, tree: Tree, prompt: list[int], cfg: DecodeConfig, n: int,
                 first_stream: int, chunk: int = 64) -> list[tuple[int, ...]]:
    """The first 3 tokens of ``n`` samples of ``prompt`` on consecutive streams (decoded
    ``chunk`` rows at a time: a sample depends on its stream only)."""
    cfg = DecodeConfig(**{**cfg.__dict__, "max_new_tokens": 3, "eos_token_id": None})
    out: list[tuple[int, ...]] = []
    for lo in range(0, n, chunk):
        rows = min(chunk, n - lo)
        run = decoder.decode(tree, [prompt] * rows, config=cfg,
                             streams=range(first_stream + lo, first_stream + lo + rows))
        out.extend(tuple(t[:3]) for t in run.tokens)
    return out


def bench(demo, kind: str, t: float, args) -> dict:
    prompts = encode(demo.tokenizer, demo.prompts)[: args.prompts]
    cal, held = demo.sampled_traces(kind)[t]
    growth = Growth.load(demo.paths.growth(kind, temperature=t))
    greedy = demo.growths[kind]
    tree = growth.tree(args.size)
    cfg = DecodeConfig(max_new_tokens=args.new_tokens, mode="sample", temperature=t,
                       seed=int(cal.sampling["seed"]),
                       eos_token_id=getattr(demo.tokenizer, "eos_token_id", None))
    decoder = Decoder(demo.model, demo.heads[kind])
    alone, batched, lengths = exactness(decoder, tree, prompts, cfg, args.batch)
    n = len(prompts)
    live = statistics.fmean(lengths)
    live_se = statistics.stdev(lengths) / math.sqrt(len(lengths))
    cut = as_run(cal, args.new_tokens)
    walk = simulate(tree, cut, per_step=True)
    held_walk = simulate(tree, as_runs(held, [args.new_tokens] * n), per_step=True)
    err = live / walk.mean_accept_length - 1
    se = math.hypot(live_se, walk.stderr) / walk.mean_accept_length
    print(f"\n== {kind}, T = {t:g}: tree grown for T, {tree.size} nodes; {n} held-out prompts × "
          f"{args.new_tokens} tokens")
    print(f"- exactness: {alone}/{n} prompts equal plain sampling at batch 1, {batched}/{n} in "
          f"batches of {args.batch} — {mark(alone == n == batched)}")
    print(f"- prediction: live mean accepted {live:.4f} ± {live_se:.4f}; calibration trace walk "
          f"{walk.mean_accept_length:.4f} ± {walk.stderr:.4f}: {err:+.2%} (± {se:.2%}) — within "
          f"2%: {mark(abs(err) <= 0.02)}; held-out trace walk (same seed and streams) "
          f"{held_walk.mean_accept_length:.4f}")
    ell = growth.headline_accept_length  # per step where the trace records its sequences
    greedy_at_t = greedy.evaluate_headline(cal)
    sizes = [s for s in (16, 64) if s <= min(growth.max_nodes, greedy.max_nodes)]
    print("- E[L] at T of the tree grown greedy vs grown for T: " + "; ".join(
        f"{s} nodes {greedy_at_t[s]:.3f} vs {ell[s]:.3f} ({ell[s] / greedy_at_t[s] - 1:+.1%})"
        for s in sizes))
    typical = {}
    for eps in EPSILONS:
        tcfg = DecodeConfig(max_new_tokens=args.new_tokens, mode="typical", temperature=t,
                            posterior_threshold=eps, seed=0)
        runs = [decoder.decode(tree, prompts[lo: lo + args.batch], config=tcfg)
                for lo in range(0, n, args.batch)]
        typical[eps] = statistics.fmean(x for r in runs for x in r.stats.accept_lengths)
    print("- typical acceptance's mean accepted length (ε: value) beside lossless "
          f"{live:.3f}: " + ", ".join(f"{e:g}: {v:.3f}" for e, v in typical.items()))
    one = prompts[0]
    plain_a = first_tokens(decoder, Tree(()), one, cfg, args.samples, 0)
    plain_b = first_tokens(decoder, Tree(()), one, cfg, args.samples, args.samples)
    tree_s = first_tokens(decoder, tree, one, cfg, args.samples, 2 * args.samples)
    floor = [total_variation([s[k] for s in plain_a], [s[k] for s in plain_b]) for k in range(3)]
    lossless_tv = [total_variation([s[k] for s in plain_a], [s[k] for s in tree_s])
                   for k in range(3)]
    typ_cfg = DecodeConfig(max_new_tokens=3, mode="typical", temperature=t,
                           posterior_threshold=0.09, seed=1)
    typ = first_tokens(decoder, tree, one, typ_cfg, args.samples, 0)
    typ_tv = [total_variation([s[k] for s in plain_a], [s[k] for s in typ]) for k in range(3)]
    print(f"- total variation from plain sampling of tokens 1, 2, 3 ({args.samples} samples "
          f"each): typical (ε 0.09) {', '.join(f'{x:.3f}' for x in typ_tv)}; lossless "
          f"{', '.join(f'{x:.3f}' for x in lossless_tv)}; two plain samplings (noise floor) "
          f"{', '.join(f'{x:.3f}' for x in floor)}")
    return {"exact": alone == n == batched, "error": err}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo-dir", help="default: the shipped data/demo")
    ap.add_argument("--kinds", default="hydra,medusa")
    ap.add_argument("--prompts", type=int, default=192, help="held-out prompts (default all)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--size", type=int, default=16, help="nodes of the tree grown for T")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--samples", type=int, default=2000, help="streams of the TV estimate")
    args = ap.parse_args()
    torch.set_num_threads(1)
    demo = load(args.demo_dir, threads=1)
    if not demo.temperatures:
        print("the demo ships no sampled traces: rebuild it with `treeopt demo build`",
              file=sys.stderr)
        return 2
    print(f"demo: sampled traces at T = {', '.join(f'{t:g}' for t in demo.temperatures)}")
    results = [bench(demo, kind, t, args) for kind in args.kinds.split(",")
               for t in demo.temperatures]
    print(f"\nall exact: {mark(all(r['exact'] for r in results))}; largest prediction error "
          f"{max(abs(r['error']) for r in results):.2%} (goal ≤ 2%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
