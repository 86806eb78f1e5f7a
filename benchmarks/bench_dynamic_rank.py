"""The ranking pass of EAGLE's dynamic traces (its candidate pool at every position of a
continuation, teacher-forced: ``treeopt.decoding.dynamic_rank_pass.simulate_dynamic``, what the
demo build's dynamic stage and ``treeopt calibrate-dynamic`` run) with treeopt's candidate rule
against the reference way to take the same candidates.

    python benchmarks/bench_dynamic_rank.py [--demo smollm2] [--prompts 4] [--topk 1,2,4,8]
                                            [--steps 6] [--new-tokens 128]

Each level of the pool takes every row's k best tokens in the rule's order (by logit, equal
logits by lower id; ``treeopt.decoding.token_order``). The reference takes them by a top-k of
the rule's sort keys over each row's whole vocabulary (``rank_keys``: exact, and the path the
CPU took whenever a batch held a tie; k = 1 takes the best token either way). treeopt's ``top_candidates`` takes a top-(k+1) and puts
only the rows with a tie in order apart. In bf16 most rows tie somewhere among their best nine.

Prints, per top-k: the pass's seconds with each (one torch thread, the base model's forward
included, the same continuations), the ratio, and whether the two traces are identical. The
continuations are the base model's greedy ones of the first ``--prompts`` calibration prompts
(decoded once, untimed). Nothing is written.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def reference_candidates(logits, k: int):
    """The rule's k best by a top-k of its sort keys over the whole vocabulary (k = 1: the best
    token, as treeopt takes it)."""
    import torch

    from treeopt.decoding.token_order import best_token, rank_keys

    if k == 1:
        return best_token(logits)[..., None]
    return torch.topk(rank_keys(logits), min(k, logits.shape[-1]), dim=-1).indices


def timed_pass(demo, sequences, starts, *, topk: int, steps: int, reference: bool):
    """(seconds, trace) of one ranking pass, with the reference candidates if asked."""
    import treeopt.decoding.dynamic_drafting as drafting
    from treeopt.decoding.dynamic_rank_pass import simulate_dynamic

    ours = drafting.top_candidates
    drafting.top_candidates = reference_candidates if reference else ours
    try:
        start = time.perf_counter()
        trace = simulate_dynamic(demo.model, demo.heads["eagle"], sequences, starts, topk=topk,
                                 steps=steps)
        return time.perf_counter() - start, trace
    finally:
        drafting.top_candidates = ours


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", help="a demo in data/ (smollm2: after `treeopt fetch`) or its "
                                   "directory; default: the shipped data/demo")
    ap.add_argument("--prompts", type=int, default=4, help="calibration prompts ranked")
    ap.add_argument("--topk", default="1,2,4,8", help="top-k values, comma-separated")
    ap.add_argument("--steps", type=int, default=6, help="levels of the pool")
    ap.add_argument("--new-tokens", type=int, default=128, help="continuation length")
    args = ap.parse_args()

    import numpy as np

    from treeopt.decoding.calibrate import CalibrateConfig, continued
    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.documents.prompts import encode, read_texts
    from treeopt.errors import TreeoptError

    try:
        demo = load(demo_root(args.demo), threads=1)
        topks = [int(k) for k in args.topk.split(",")]
    except (TreeoptError, ValueError) as e:
        raise SystemExit(f"bench_dynamic_rank: {e}") from None
    if "eagle" not in demo.heads:
        raise SystemExit(f"bench_dynamic_rank: {demo.paths.root} ships no EAGLE drafter")
    prompts = encode(demo.tokenizer, read_texts([demo.paths.prompts("calibration")]))
    prompts = prompts[: args.prompts]
    sequences = continued(demo.model, prompts, CalibrateConfig(
        max_new_tokens=args.new_tokens, eos_token_id=demo.tokenizer.eos_token_id))
    starts = [len(p) - 1 for p in prompts]
    dtype = next(demo.model.parameters()).dtype
    print(f"{demo.paths.root.name}: EAGLE's dynamic ranking pass over {len(prompts)} calibration "
          f"prompts × {args.new_tokens} tokens ({sum(map(len, sequences))} tokens), "
          f"{args.steps} levels, {dtype}, 1 thread")
    total = {False: 0.0, True: 0.0}
    for k in topks:
        ours, mine = timed_pass(demo, sequences, starts, topk=k, steps=args.steps,
                                reference=False)
        ref, theirs = timed_pass(demo, sequences, starts, topk=k, steps=args.steps,
                                 reference=True)
        same = mine.lengths == theirs.lengths and np.array_equal(np.asarray(mine.places),
                                                                 np.asarray(theirs.places))
        total[False] += ours
        total[True] += ref
        print(f"  top-k {k}: {ours:6.1f} s, reference {ref:6.1f} s: {ref / ours:.2f}× "
              f"({'identical traces' if same else 'TRACES DIFFER'})")
    print(f"  all: {total[False]:.1f} s, reference {total[True]:.1f} s: "
          f"{total[True] / total[False]:.2f}×")


if __name__ == "__main__":
    main()
