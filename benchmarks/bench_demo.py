"""The demo's quality numbers, measured again on this machine.

Prints E[L] per tree size for Medusa and Hydra heads (calibration trace and held-out trace), then
decodes the held-out prompts live: measured mean accepted length against the trace's prediction,
the lossless check, the time of a 256-token verification, and the 8-gram repetition share of the
base model's greedy text beside the looping reference recorded at build time.
Run: ``python benchmarks/bench_demo.py [--demo-dir DIR] [--sizes 16,64] [--prompts 16]``.
"""

from __future__ import annotations

import argparse

import torch

from treeopt.decoding.loop import Decoder
from treeopt.demo import KINDS, load
from treeopt.demo.quality import acceptance_run, autoregressive_run, prediction

SIZES = (1, 4, 16, 64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--demo-dir", help="default: the shipped data/demo")
    ap.add_argument("--sizes", default="16,64", help="tree sizes decoded live")
    ap.add_argument("--prompts", type=int, default=16, help="held-out prompts decoded")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    demo = load(args.demo_dir)
    m = demo.manifest
    print(f"demo: {m['base']['parameters']:,} parameters, held-out loss "
          f"{m['base']['heldout']['loss']:.3f} nats/token, built in {m['build_seconds']:.0f} s "
          f"({m['size_bytes'] / 2**20:.1f} MiB)\n")
    print("E[L] of the growth's tree of n nodes (per step where the growth has it, else "
          "position-weighted): calibration trace / held-out trace")
    print("kind     " + "".join(f"{f'n={n}':>18}" for n in SIZES))
    for kind in KINDS:
        g = demo.growths[kind]
        held = g.evaluate_headline(demo.heldout_traces[kind])
        cells = [f"{g.headline_accept_length[n]:8.3f} / {held[n]:.3f}" for n in SIZES
                 if n <= g.max_nodes]
        print(f"{kind:8} {g.acceptance:18} " + "".join(f"{c:>18}" for c in cells))
    prompts = [demo.tokenizer(p)["input_ids"] for p in demo.prompts[: args.prompts]]
    reference, ar = autoregressive_run(Decoder(demo.model), prompts,
                                       max_new_tokens=args.new_tokens)
    print("kind     n  measured E[L]   predicted (walk / position)  fidelity ± se  lossless  "
          "s/verify (median, max)")
    for kind in KINDS:
        cal = demo.traces[kind]
        decoder = Decoder(demo.model, demo.heads[kind])
        for n in (int(s) for s in args.sizes.split(",")):
            tree = demo.growths[kind].tree(min(n, demo.growths[kind].max_nodes))
            run = acceptance_run(decoder, tree, prompts, max_new_tokens=args.new_tokens,
                                 reference=reference)
            position = demo.growths[kind].expected_accept_length[tree.size]
            run.update(prediction(run, tree, calibration=cal, heldout=demo.heldout_traces[kind],
                                  position_mean=position))
            walk = run["predicted"]["step_walk"]
            print(f"{kind:8} {tree.size:<3}{run['mean_accept_length']:6.3f} ± {run['stderr']:.3f}   "
                  f"{walk:8.3f} / {position:.3f}       "
                  f"{run['fidelity']:+7.2%} ± {run['fidelity_stderr']:.2%}  "
                  f"{run['lossless_prompts']:>8}  "
                  f"{run['seconds_median']:8.2f}, {run['seconds_max']:.2f}")
    print(f"\nautoregressive: {ar['seconds_median']:.2f} s per {args.new_tokens} tokens "
          f"(median), {ar['tokens_per_s']:.0f} tokens/s")
    q = m["quality"]
    print(f"\n8-gram repetition in greedy {args.new_tokens}-token continuations: "
          f"{ar['repetition_8gram']:.3f} (held-out text itself "
          f"{q['heldout_text_repetition_8gram']:.3f}; looping reference, "
          f"{q['looping_reference']['model']}: "
          f"{q['looping_reference']['repetition_8gram']:.3f})")


if __name__ == "__main__":
    main()
