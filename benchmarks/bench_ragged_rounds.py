"""A sweep's points timed together to a target standard error, two ways in one run: ragged
(a point whose speed-up met the target sits out the rounds the others need, the way
``tune(together=True)`` times them) against lockstep (every point decodes every round until
all are measured): the seconds each way, the rounds each point took, and whether the points
land on the step-cost model's prediction either way.

    python benchmarks/bench_ragged_rounds.py --demo smollm2 [--kinds K,K] [--batches 8]
        [--target-se 0.02] [--rounds 2] [--max-rounds 8] [--within 0.05]

For each drafter of ``--kinds`` (default: every one the demo has) and each batch size: the
shipped sweep's whole trees at that batch size (sizes above 0) against autoregressive decoding
(:func:`~treeopt.decoding.compare.compare_together`), on the sweep's held-out prompts and new
tokens, timed to ``--target-se`` in ``--rounds`` to ``--max-rounds`` rounds (the presets'
timing by default); the two ways in turn, alternating which goes first. Printed per point: each
way's speed-up ± its standard error, its rounds, and the demo's prediction over it minus one
(:func:`~treeopt.workbench.demo_pricing.held_out_pricing`); per batch size the seconds each way;
at the end the totals. One torch thread; pin it (``taskset -c 0``) with the other core idle.
Writes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing_ways import add_flags, demo_and_kinds  # noqa: E402

WAYS = ("ragged", "lockstep")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_flags(ap, batches="8")
    args = ap.parse_args()

    from treeopt.documents.prompts import encode, read_texts

    demo, kinds, measure = demo_and_kinds(args)
    heldout = encode(demo.tokenizer, read_texts([demo.paths.prompts("heldout")]))
    totals = {way: [0.0, 0, 0, 0] for way in WAYS}  # seconds, tree rounds, within, points
    turn = 0
    for kind in kinds:
        for b in (int(b) for b in args.batches.split(",") if b):
            for way, row in _batch(demo, kind, b, heldout, measure, args.within,
                                   first=WAYS[turn % 2]).items():
                totals[way] = [t + r for t, r in zip(totals[way], row, strict=True)]
            turn += 1
    for way, (seconds, rounds, within, points) in totals.items():
        print(f"{way}: {seconds:.0f} s, {rounds} tree rounds, {within} of {points} points "
              f"within {args.within:.0%} of the prediction")
    ragged, lockstep = totals["ragged"][0], totals["lockstep"][0]
    if ragged:
        print(f"lockstep over ragged: {lockstep / ragged:.2f}× the seconds")
    return 0


def _batch(demo: Any, kind: str, batch: int, heldout: list[list[int]], measure: Any,
           within: float, *, first: str) -> dict[str, list[float]]:
    """One drafter's shipped trees at ``batch`` timed both ways (``first`` first), printed;
    per way [seconds, tree rounds, points within, points]."""
    from treeopt.decoding.compare import compare_together
    from treeopt.decoding.config import DecodeConfig
    from treeopt.documents.sweep import Sweep
    from treeopt.model.tree import Tree
    from treeopt.workbench.demo_pricing import held_out_pricing

    shipped = Sweep.load(demo.sweep(kind, drafted=False))
    pricing = held_out_pricing(demo, kind, demo.step_costs(kind), shipped)
    points = [p for p in shipped.points if p.batch == batch and p.family is None and p.size > 0]
    trees = [Tree.from_choices([list(c) for c in p.choices]) for p in points]
    config = demo.manifest["config"]
    decode = DecodeConfig(max_new_tokens=config["live_new_tokens"],
                          eos_token_id=demo.tokenizer.eos_token_id)
    out: dict[str, list[float]] = {}
    cells: dict[str, list[str]] = {}
    for way in (first, *(w for w in WAYS if w != first)):
        begin = time.perf_counter()
        measured = compare_together(demo.model, demo.heads[kind], trees,
                                    heldout[: config["sweep_prompts"]], config=decode,
                                    batch=batch, measure=measure, ragged=way == "ragged")
        seconds = time.perf_counter() - begin
        errors = [pricing.predict(c.tree, batch).speedup / c.speedup - 1 for c in measured]
        out[way] = [seconds, sum(len(c.tree_rounds) for c in measured),
                    sum(abs(e) <= within for e in errors), len(measured)]
        cells[way] = [f"{way} {c.speedup:.3f} ±{(c.speedup_se or 0):.1%} in "
                      f"{len(c.tree_rounds)} ({e:+.1%})" for c, e in zip(measured, errors,
                                                                     strict=True)]
    print(f"{kind}, batch {batch}: " + ", ".join(f"{w} {out[w][0]:.0f} s" for w in WAYS))
    for i, p in enumerate(points):
        print(f"  {p.size} nodes: " + " · ".join(cells[w][i] for w in WAYS))
    return out


if __name__ == "__main__":
    from entry import run

    run(main)
