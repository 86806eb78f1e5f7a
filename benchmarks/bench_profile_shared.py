"""A demo drafter's step profile taken two ways in one run: each record beside its own
autoregressive reference (the way every shipped profile was taken) and the records of a round
sharing one (``profile_steps(shared=True)``, ``treeopt profile step --shared-reference``): the
seconds each way, each record's step both ways, and the shipped sweep priced with each.

    python benchmarks/bench_profile_shared.py --demo smollm2 [--kinds K,K] [--batches 1,8]
        [--target-se 0.02] [--rounds 2] [--max-rounds 8] [--within 0.05] [--ways shared,own]

Each profile is taken as the build takes it (the calibration prompts, new tokens and tree sizes
of the demo's config), timed to ``--target-se`` in ``--rounds`` to ``--max-rounds`` rounds, the
two ways in turn, alternating which goes first (``--ways shared``: only the shared way, for a
whole demo in about half the time). The shipped sweep's whole trees at those batch sizes are
priced with each (its other drafters' profiles sharing the verify step, as the demo
prices: :func:`~treeopt.demo.step_costs.demo_step_costs`) against their shipped speed-ups.
One torch thread; pin it (``taskset -c 0``) with the other core idle. Writes under ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing_ways import add_flags, demo_and_kinds  # noqa: E402

WAYS = ("shared", "own")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_flags(ap, batches="1,8")
    ap.add_argument("--out", type=Path, required=True, help="where the profiles go")
    ap.add_argument("--ways", default=",".join(WAYS),
                    help="comma-separated: shared, own or both (default both)")
    args = ap.parse_args()
    ways = tuple(w for w in args.ways.split(",") if w)
    if not ways or set(ways) - set(WAYS):
        ap.error(f"--ways: {args.ways!r}: name shared, own or both")

    from treeopt.documents.prompts import encode, read_texts

    demo, kinds, measure = demo_and_kinds(args)
    args.out.mkdir(parents=True, exist_ok=True)
    calibration = encode(demo.tokenizer, read_texts([demo.paths.prompts("calibration")]))
    batches = [int(b) for b in args.batches.split(",") if b]
    totals = {way: [0.0, 0, 0] for way in ways}  # seconds, within, points
    for i, kind in enumerate(kinds):
        order = ways if i % 2 == 0 else ways[::-1]
        for way, row in _kind(demo, kind, calibration, batches, measure, args,
                              order=order).items():
            totals[way] = [t + r for t, r in zip(totals[way], row, strict=True)]
    for way, (seconds, within, points) in totals.items():
        print(f"{way} references: {seconds:.0f} s, the shipped sweep priced with them: "
              f"{within} of {points} points within {args.within:.0%}")
    if len(totals) == 2 and totals["shared"][0]:
        print(f"own over shared: {totals['own'][0] / totals['shared'][0]:.2f}× the seconds")
    return 0


def _kind(demo: Any, kind: str, calibration: list[list[int]], batches: list[int], measure: Any,
          args: argparse.Namespace, *, order: tuple[str, ...]) -> dict[str, list[float]]:
    """One drafter profiled each way of ``order`` in turn, printed; per way [seconds, points
    within, points]."""
    from treeopt.demo.step_costs import demo_step_costs
    from treeopt.documents.step_profile import StepProfile
    from treeopt.documents.sweep import Sweep
    from treeopt.model.tree import Tree
    from treeopt.profiling.step import profile_steps
    from treeopt.workbench.demo_pricing import held_out_pricing

    config = demo.manifest["config"]
    shipped = Sweep.load(demo.sweep(kind, drafted=False))
    out: dict[str, list[float]] = {}
    profiles: dict[str, StepProfile] = {}
    for way in order:
        path = args.out / f"step-{kind}-{way}.json"
        path.unlink(missing_ok=True)
        begin = time.perf_counter()
        profiles[way] = profile_steps(
            demo.model, demo.heads[kind], demo.growths[kind],
            calibration[: max(config["live_batches"])], batch=batches,
            sizes=config["step_sizes"], out=path, max_new_tokens=config["live_new_tokens"],
            measure=measure, shared=way == "shared", log=lambda line: None)
        out[way] = [time.perf_counter() - begin, 0, 0]
    print(f"{kind}: " + ", ".join(f"{w} {out[w][0]:.0f} s" for w in order))
    steps = {w: {(r.batch, r.size, r.max_depth): r for r in p.records}
             for w, p in profiles.items()}
    for key, record in steps.get("own", {}).items():
        other = steps.get("shared", {}).get(key)
        if other is not None:
            cap = f", depth cap {key[2]}" if key[2] is not None else ""
            print(f"  batch {key[0]}, {key[1]} nodes{cap}: step {_ms(other):.2f} ms shared, "
                  f"{_ms(record):.2f} own ({_ms(other) / _ms(record) - 1:+.1%}); "
                  f"rounds {other.rounds} and {record.rounds}")
    for way, profile in profiles.items():
        pricing = held_out_pricing(demo, kind, demo_step_costs(
            demo.paths, kind, demo.latency.stem, own=profile), shipped)
        for p in (p for p in shipped.points if p.batch in batches and p.family is None
                  and p.size > 0):
            tree = Tree.from_choices([list(c) for c in p.choices])
            error = pricing.predict(tree, p.batch).speedup / p.speedup - 1
            out[way][1] += abs(error) <= args.within
            out[way][2] += 1
            cap = f", depth cap {p.max_depth}" if p.max_depth is not None else ""
            print(f"  {way}: batch {p.batch}, {p.size} nodes{cap}: shipped {p.speedup:.3f}, "
                  f"predicted {error:+.1%}")
    return out


def _ms(record: Any) -> float:
    """A record's whole step, milliseconds."""
    return record.ms_draft + record.ms_verify + record.ms_bookkeeping


if __name__ == "__main__":
    from entry import run

    run(main)
