"""Every drafter the demo ships — Medusa heads, Hydra heads, an EAGLE drafter, a draft model —
on the same base model, held-out prompts and machine, goal by goal (never a test):

1. E[L] of the growth's trees of 16 and 64 nodes, on the calibration trace and the held-out one;
2. live greedy decoding of the held-out prompts with those trees: lossless on every prompt
   (against autoregressive decoding), and the mean accepted length against the calibration
   trace's prediction (its per-step walk; goal: within 2%) and against the held-out trace's walk
   over the same prompts (equal, up to numerics: the trace is exact);
3. live speed-up at batch 1 of the tree ``select`` picks from the demo's profiled step costs, and
   of the measured best of the demo's sweep, against autoregressive decoding in the same run
   (interleaved rounds), beside the predicted speed-up;
4. the drafter ``choose-drafter`` picks per batch size, from each drafter's selection.

Run: ``python benchmarks/bench_drafters.py [--prompts 192 --new-tokens 256] [--speed-prompts 16
--speed-tokens 128] [--rounds 3]`` on a quiet machine (one torch thread, as the app runs): all
held-out prompts for acceptance, as the goal is stated; a few for the timed comparison. About 6
minutes per drafter on 2 cores.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from treeopt.decoding.compare import compare
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.loop import Decoder
from treeopt.demo import KINDS, load
from treeopt.demo.quality import acceptance_run, autoregressive_run
from treeopt.documents.measure import Measurement
from treeopt.model.runs import as_run, as_runs
from treeopt.model.simulation import step_lengths
from treeopt.pricing.selection import choose_drafter
from treeopt.workbench.demo_pricing import demo_pricing

SIZES = (16, 64)


def mark(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--demo-dir", help="default: the shipped data/demo")
    ap.add_argument("--prompts", type=int, default=192,
                    help="held-out prompts decoded for acceptance (default: all the demo's)")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--speed-prompts", type=int, default=16, help="prompts timed at batch 1")
    ap.add_argument("--speed-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the speed-up")
    args = ap.parse_args()
    torch.set_num_threads(1)
    demo = load(args.demo_dir, threads=1)
    prompts = [demo.tokenizer(p)["input_ids"] for p in demo.prompts[: args.prompts]]
    reference, _ = autoregressive_run(Decoder(demo.model), prompts,
                                       max_new_tokens=args.new_tokens)
    print(f"demo: {demo.manifest['base']['parameters']:,}-parameter base model; {len(prompts)} "
          f"held-out prompts × {args.new_tokens} new tokens; 1 torch thread\n")
    print("drafter       n   position-weighted E[L] cal / held-out   live E[L]   calibration walk"
          "   held-out walk   lossless")
    fidelity_ok, exact_ok, lossless_ok = True, True, True
    # the calibration trace over the tokens a live run decodes (its first --new-tokens of each
    # continuation): acceptance late in a 256-token continuation differs from early on
    calibration = {k: as_run(t, args.new_tokens)
                   for k, t in demo.traces.items()}
    for kind in KINDS:
        growth, held = demo.growths[kind], demo.heldout_traces[kind]
        decoder = Decoder(demo.model, demo.heads[kind])
        own = as_runs(held, [args.new_tokens] * len(prompts))
        for n in SIZES:
            tree = growth.tree(min(n, growth.max_nodes))
            run = acceptance_run(decoder, tree, prompts, max_new_tokens=args.new_tokens,
                                 reference=reference)
            live = run["mean_accept_length"]
            walk = float(np.mean(step_lengths(tree, own)))
            cal = float(np.mean(step_lengths(tree, calibration[kind])))
            fidelity_ok &= abs(live / cal - 1) <= 0.02
            exact_ok &= abs(live / walk - 1) <= 0.002
            lossless_ok &= bool(run["lossless"])
            print(f"{kind:12s} {tree.size:3d}   {growth.expected_accept_length[tree.size]:6.3f} / "
                  f"{growth.evaluate(held)[tree.size]:6.3f}      {live:7.3f}   {cal:7.3f} "
                  f"({live / cal - 1:+6.2%})  {walk:7.3f} ({live / walk - 1:+6.2%})   "
                  f"{run['lossless_prompts']}")
    print(f"\ngoal: lossless on every prompt, every drafter: {mark(lossless_ok)}")
    print(f"goal: live E[L] within 2% of the calibration trace's prediction: {mark(fidelity_ok)}")
    print(f"check: live E[L] equal to the held-out trace's walk (within 0.2%): {mark(exact_ok)}")

    config = DecodeConfig(max_new_tokens=args.speed_tokens)
    timed = prompts[: args.speed_prompts]
    print(f"\nbatch 1, {len(timed)} prompts × {args.speed_tokens} tokens, interleaved with "
          f"autoregressive decoding (best of {args.rounds} rounds):")
    print("drafter       pick (nodes, depth cap)  predicted  live speed-up   sweep best "
          "(nodes: measured)")
    selections = {}
    for kind in KINDS:
        priced = demo_pricing(demo, kind)
        if priced is None:
            print(f"{kind:12s} no step profile in this demo")
            continue
        selections[kind] = priced.selection
        pick = min(priced.selection.points, key=lambda p: p.batch)
        run = compare(demo.model, demo.heads[kind], pick.tree, timed, config=config,
                      measure=Measurement(rounds=args.rounds))
        best = priced.sweep.best(1) if priced.sweep is not None else None
        measured = (f"{best.size}: {best.speedup:.2f}×" if best is not None else "not swept")
        print(f"{kind:12s} {pick.tree.size:4d} ({str(pick.max_depth):>4})            "
              f"{pick.speedup:6.3f}     {run.speedup:6.3f} ± {run.speedup_spread:4.1%}   {measured}")
    if len(selections) > 1:
        print("\nchoose-drafter (predicted, from each drafter's profiled step):")
        for c in choose_drafter(selections):
            others = ", ".join(f"{k} {v:.2f}×" for k, v in c.speedups.items())
            print(f"  batch {c.batch:2d}, context {c.context}: {c.drafter} "
                  f"({c.point.tree.size} nodes) — predicted speed-ups {others}")


if __name__ == "__main__":
    main()
