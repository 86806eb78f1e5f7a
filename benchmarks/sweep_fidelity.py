"""How well a demo's shipped sweep was predicted: every (drafter, batch, tree) point's measured
speed-up beside the step-cost model's, read from the demo's files alone (no model, no timing;
never a test).

Each point is priced as the app's Overview prices it (:class:`treeopt.workbench.demo_pricing.
HeldOutPricing`): the drafter's shipped step profile, E[L] the held-out trace walked step by step
over the prompts and new tokens the sweep decoded (at batch > 1 over its steady window). Printed
per drafter and batch: each tree's measured → predicted speed-up and the error (predicted over
measured, minus one; ``*`` marks the demo's shipped selection's pick, which a drafter's sweep
measures where the build could, ``g`` a tree of the per-step greedy growth rather than the
growth order's) with, where the files record them, its noise
(``±``: the point's standard error and its step profile's at that batch, combined: how far the
two timings alone may set them apart), E[L] measured → predicted (at batch > 1 over the steady
window); then per drafter the points within ``--within``, how many of those beyond it lie
beyond two standard errors of their noise as well (a miss within its noise says the timings
were too short to tell, not that the model is off), and select's picks' errors; last, the
machine the demo was measured on and, where this host is of another CPU class, the warning.

Run: ``python benchmarks/sweep_fidelity.py --demo smollm2 [--within 0.05]``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if TYPE_CHECKING:
    from treeopt.documents.sweep import Sweep
    from treeopt.pricing.selection import Point
    from treeopt.workbench.demo_pricing import HeldOutPricing


def rounds_said(sweep: Sweep) -> str:
    """How many rounds the points took, per way the sweep timed its batch sizes
    (:meth:`~treeopt.documents.sweep.Sweep.timing`): its fixed rounds, or the range its points
    measured to a standard-error target, and the target."""
    ways: dict[tuple, list[int]] = {}
    for b in sweep.batches:
        ways.setdefault(tuple(sorted(sweep.timing(b).items())), []).append(b)
    said = [(batches, _rounds(sweep, batches, dict(way))) for way, batches in ways.items()]
    if len(said) == 1:
        return said[0][1]
    return "; ".join(f"batch {', '.join(map(str, batches))}: {text}" for batches, text in said)


def _rounds(sweep: Sweep, batches: list[int], timing: dict) -> str:
    """The rounds the points at ``batches``, timed as ``timing`` says, took."""
    timed = sorted({p.rounds for p in sweep.points if p.batch in batches and p.rounds})
    target = timing.get("target_se") or 0.0
    if not timed or (len(timed) == 1 and not target):
        return f"{timed[0] if timed else timing.get('rounds')} round(s)"
    span = f"{timed[0]}–{timed[-1]}" if len(timed) > 1 else f"{timed[0]}"
    return f"{span} rounds per point" + (f" (to a {target:.1%} standard error, at most "
                                         f"{timing.get('max_rounds')})" if target else "")


def report(kind: str, sweep: Sweep, held_out: HeldOutPricing, *, drafted: bool,
           within: float, picks: dict[int, Point]) -> list[tuple[float, float]]:
    """Print one sweep's points, measured → predicted, per batch, and its summary line; return
    the points' errors and noises (0 where unrecorded). ``drafted``: the sweep of a lookup
    drafter's chains verified as drafted, each point priced so. ``picks``: the demo's shipped
    selection's pick per batch that this sweep measures (a chain verified as drafted: the
    drafted sweep; else the other), marked ``*`` where a point has its tree."""
    from treeopt.model.tree import Tree
    from treeopt.workbench.demo_pricing import measures

    name = f"{kind} (verified as drafted)" if drafted else kind
    print(f"{name}: sweep of {sweep.meta.get('created', '?')}, {sweep.meta.get('prompts')} "
          f"prompts × {sweep.meta.get('max_new_tokens')} tokens, {rounds_said(sweep)}")
    step_se = held_out.costs.verify.meta.get("step_se", {})
    errors, said = [], []
    for batch in sorted({p.batch for p in sweep.points}):
        cells = []
        pick = picks.get(batch)
        if pick is not None and not any(p.batch == batch and measures(p, pick)
                                        for p in sweep.points):
            said.append(f"b{batch} {pick.tree.size}-node {pick.family} tree not swept")
        for p in (p for p in sweep.points if p.batch == batch):
            picked = pick is not None and measures(p, pick)
            tree = Tree.from_choices([list(c) for c in p.choices])
            predicted = held_out.predict(tree, batch, drafted=drafted and tree.size > 0)
            error = predicted.speedup / p.speedup - 1
            # the two timings' relative errors, joined in quadrature
            noise = math.hypot(p.se or 0.0, step_se.get(str(batch), 0.0) if tree.size else 0.0)
            errors.append((error, noise))
            if picked:
                said.append(f"b{batch} {error:+.1%}")
            live = p.steady_accept_length or p.mean_accept_length  # the window priced
            cells.append(f"{p.size}{'g' if p.family else ''}{'*' if picked else ''}: "
                         f"{p.speedup:.2f}→"
                         f"{predicted.speedup:.2f} ({error:+.1%}"
                         f"{f' ±{noise:.1%}' if noise else ''}; E[L] "
                         f"{live:.2f}→{predicted.accept_length:.2f})")
        print(f"  batch {batch}: " + " · ".join(cells))
    print(f"  {name}: {tally(errors, within)}"
          + (f"; select's picks {', '.join(said)}" if said else ""))
    return errors


def tally(errors: list[tuple[float, float]], within: float) -> str:
    """``12 of 16 points within 5% (4 beyond: 1 beyond two standard errors)``."""
    beyond = [(e, se) for e, se in errors if abs(e) > within]
    beyond_noise = sum(abs(e) > 2 * se for e, se in beyond)
    return (f"{len(errors) - len(beyond)} of {len(errors)} points within {within:.0%}"
            + (f" ({len(beyond)} beyond: {beyond_noise} beyond two standard errors)"
               if beyond else ""))


def main(argv: list[str] | None = None) -> int:
    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.errors import TreeoptError
    from treeopt.workbench.demo_pricing import demo_pricing, swept_picks
    from treeopt.workbench.demos import build_host

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", help="a demo directory or a demo in data/ (default: data/demo)")
    ap.add_argument("--within", type=float, default=0.05, help="the fidelity goal (default 5%%)")
    args = ap.parse_args(argv)
    try:
        demo = load(demo_root(args.demo), with_model=False)
    except TreeoptError as e:
        print(f"--demo: {e}", file=sys.stderr)
        return 2
    print(f"demo {demo.paths.root}: measured on {build_host(demo.manifest)}")
    every: list[tuple[float, float]] = []
    for kind in demo.kinds:
        pricing = demo_pricing(demo, kind)
        if pricing is None or pricing.sweep is None or pricing.held_out is None:
            print(f"{kind}: no step profile, sweep or held-out trace; skipped")
            continue
        for sweep, drafted in ((pricing.sweep, False), (pricing.drafted_sweep, True)):
            if sweep is not None:
                every += report(kind, sweep, pricing.held_out, drafted=drafted,
                                within=args.within, picks=swept_picks(pricing, drafted=drafted))
    print(f"all drafters: {tally(every, args.within)}")
    for line in demo.profiled_elsewhere():
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
