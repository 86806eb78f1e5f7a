"""One batch size of a demo's shipped sweeps timed again, step profile and points, to a standard
error target: whether the shipped sweep's misses there are the step-cost model's or the timing's.

    python benchmarks/retime_batch.py --demo smollm2 --kinds eagle,ngram-trie --out DIR
        [--batch 8] [--target-se 0.025] [--max-rounds 8] [--within 0.05]

For each drafter, as the demo build times it (the same prompts, new tokens, tree sizes and end
of sequence; `treeopt.demo.stage_timing`): its step profile at ``--batch`` on the calibration
prompts, then each of its shipped sweeps at that batch (its trees; a lookup drafter's also
verified as drafted) on the held-out prompts, each record and point timed to ``--target-se``.
Printed per point: the shipped sweep's speed-up and this run's (each ± its standard error), and
the prediction as the demo prices it (the drafter's profile, the verify step shared with the
demo's other profiles: :func:`treeopt.demo.step_costs.demo_step_costs`) from the shipped
profile and from this run's, each as predicted over measured, minus one; then the points within
``--within`` each way. One torch thread; pin it (``taskset -c 0``) with the other core idle.
Written under ``--out`` only, and resumed from there; the demo is not changed (``treeopt demo
build --redo timing --batches B`` times a batch size of the demo itself again).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if TYPE_CHECKING:
    from treeopt.documents.sweep import Sweep


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", default="smollm2", help="a demo in data/ or its directory")
    ap.add_argument("--kinds", required=True, help="comma-separated drafter kinds")
    ap.add_argument("--out", type=Path, required=True, help="where the new timings go")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--target-se", type=float, default=0.025)
    ap.add_argument("--max-rounds", type=int, default=8)
    ap.add_argument("--within", type=float, default=0.05)
    args = ap.parse_args()

    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.documents.measure import Measurement
    from treeopt.documents.prompts import encode, read_texts
    from treeopt.documents.sweep import Sweep
    from treeopt.errors import TreeoptError

    measure = Measurement(rounds=2, target_se=args.target_se, max_rounds=args.max_rounds)
    demo = load(demo_root(args.demo), threads=1)
    kinds = [k for k in args.kinds.split(",") if k]
    if unknown := [k for k in kinds if k not in demo.kinds]:
        raise TreeoptError(f"--kinds: {', '.join(unknown)} not in the demo "
                           f"({', '.join(demo.kinds)})")
    args.out.mkdir(parents=True, exist_ok=True)
    prompts = {part: encode(demo.tokenizer, read_texts([demo.paths.prompts(part)]))
               for part in ("calibration", "heldout")}
    counts = {"shipped": [0, 0], "again": [0, 0]}  # within, of
    for kind in kinds:
        profile = _profile(demo, kind, prompts["calibration"], args, measure)
        for drafted in (False, True):
            path = demo.sweep(kind, drafted=drafted)
            if path is None:  # a lookup drafter's chains verified as drafted, where shipped
                continue
            shipped = Sweep.load(path)
            again = _sweep(demo, kind, shipped, prompts["heldout"], args, measure,
                           drafted=drafted)
            _report(demo, kind, shipped, again, profile, args, drafted=drafted, counts=counts)
    for name, (within, of) in counts.items():
        said = ("the shipped sweeps, priced with the shipped profiles" if name == "shipped"
                else "timed again, priced with this run's profiles")
        print(f"batch {args.batch}, {said}: {within} of {of} points within {args.within:.0%}")
    return 0


def _profile(demo: Any, kind: str, calibration: list[list[int]], args: argparse.Namespace,
             measure: Any) -> Path:
    """The drafter's step profile at the batch, as the build takes it (its calibration prompts,
    tokens and tree sizes), in ``--out``."""
    from treeopt.profiling.step import profile_steps

    config = demo.manifest["config"]
    out = args.out / f"step-{kind}.json"
    profile_steps(demo.model, demo.heads[kind], demo.growths[kind],
                  calibration[: max(config["live_batches"])], batch=[args.batch],
                  sizes=config["step_sizes"], out=out, max_new_tokens=config["live_new_tokens"],
                  measure=measure, log=lambda line: None)
    return out


def _sweep(demo: Any, kind: str, shipped: Sweep, heldout: list[list[int]],
           args: argparse.Namespace, measure: Any, *, drafted: bool) -> Sweep:
    """The ``shipped`` sweep's growth-order trees at the batch measured again, as the build
    sweeps them (its held-out prompts and new tokens, rows stopping at EOS), in ``--out``."""
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.live_sweep import tune

    config = demo.manifest["config"]
    sizes = sorted({p.size for p in shipped.points
                    if p.batch == args.batch and p.family is None and p.size > 0})
    name = f"sweep-{kind}{'-drafted' if drafted else ''}.json"
    return tune(demo.model, demo.heads[kind], demo.growths[kind],
                heldout[: config["sweep_prompts"]], batch=[args.batch], sizes=sizes,
                out=args.out / name, measure=measure, drafted=drafted,
                config=DecodeConfig(max_new_tokens=config["live_new_tokens"],
                                    eos_token_id=demo.tokenizer.eos_token_id))


def _report(demo: Any, kind: str, shipped: Sweep, again: Sweep, profile: Path,
            args: argparse.Namespace, *, drafted: bool, counts: dict[str, list[int]]) -> None:
    """One sweep's points, shipped and measured again, each priced as the demo prices its
    sweep (:func:`~treeopt.workbench.demo_pricing.held_out_pricing`): the shipped points with
    the demo's step costs, the new ones with this run's profile in place of the drafter's."""
    from treeopt.demo.step_costs import demo_step_costs
    from treeopt.documents.step_profile import StepProfile
    from treeopt.model.tree import Tree
    from treeopt.workbench.demo_pricing import held_out_pricing

    pricing = {"shipped": held_out_pricing(demo, kind, demo.step_costs(kind), shipped),
               "again": held_out_pricing(demo, kind, demo_step_costs(
                   demo.paths, kind, demo.latency.stem, own=StepProfile.load(profile)), shipped)}
    old = {p.size: p for p in shipped.points if p.batch == args.batch and p.family is None}
    print(f"{kind}{' (verified as drafted)' if drafted else ''}, batch {args.batch}:")
    for point in again.points:
        cells = []
        for label, p in (("shipped", old.get(point.size)), ("again", point)):
            if p is None:
                continue
            tree = Tree.from_choices([list(c) for c in p.choices])
            error = pricing[label].predict(tree, args.batch, drafted=drafted).speedup \
                / p.speedup - 1
            counts[label][0] += abs(error) <= args.within
            counts[label][1] += 1
            cells.append(f"{label} {p.speedup:.3f} ±{(p.se or 0):.1%} ({error:+.1%})")
        print(f"  {point.size} nodes: " + " · ".join(cells))


if __name__ == "__main__":
    from entry import run

    run(main)
