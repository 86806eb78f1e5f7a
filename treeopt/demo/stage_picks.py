"""Select's picks measured: a step every build runs after its stages, before it prices the
selections it ships.

A drafter's sweep measures the tree ``select`` picks at each batch size beside the growth's, and
marks it. It picks with the step costs the demo has when the sweep runs; but the demo prices
each drafter's verify step from every drafter's step profile of the model
(:mod:`treeopt.pricing.shared_verify`), and the drafters profiled after that sweep were not
among them. So a sweep made early in a build may mark a tree that select no longer picks, and
lack the one it does: then the app would show the pick's neighbour's live speed-up, not its own.

This step finds, from the files alone, every sweep whose points, marks or predictions
:func:`~treeopt.decoding.live_sweep.tune` would change with the costs the demo now prices by
(:func:`~treeopt.decoding.live_sweep.sweep_pending`), and sweeps that drafter again over its
finished sweeps (:func:`~treeopt.demo.stage_timing.kind_sweep`): every point kept and priced
anew, the picks marked, and a pick the sweep lacks measured as its other points were. The
drafter's sweep record in the manifest is then the new sweep's; the step's own record says
which drafters it swept again and why. Where no sweep is stale, nothing is loaded or run; run
again after an interruption, it resumes. A sweep measured by an earlier treeopt, whose steps
counted otherwise, is not added to: the record says so (``kept``), and redoing the demo's sweep
stage measures it anew.
"""

from __future__ import annotations

import time
from typing import Any

from treeopt.demo.context import Context
from treeopt.files import write_json


def measure_picks(ctx: Context, results: dict[str, Any]) -> dict[str, Any]:
    """Sweep again every drafter whose sweeps are stale against the demo's step costs, its new
    sweep record put in place of the old in ``results`` (the sweep stage's for the heads, the
    drafters stage's for the others) and in that stage's record; return the manifest's record
    of the step: per drafter swept again or kept, what was stale."""
    from treeopt.decoding.live_sweep import resumable
    from treeopt.demo.stage_timing import kind_sweep, threads
    from treeopt.documents.sweep import Sweep

    c = ctx.config
    start = time.perf_counter()
    stale = {kind: why for kind in ctx.paths.kinds() if (why := stale_sweeps(ctx, kind))}
    record: dict[str, Any] = {"swept_again": {}, "kept": {}}
    for kind, why in stale.items():
        ctx.log(f"[picks] {kind}: {'; '.join(why)}")
        swept = (ctx.paths.sweep(kind, c.device), ctx.paths.drafted_sweep(kind, c.device))
        if not all(resumable(Sweep.load(p)) for p in swept if p.is_file()):
            record["kept"][kind] = why  # its points are not added to: left as it is
            continue
        with threads(c.live_threads):
            _replace_sweep(ctx, results, kind, kind_sweep(ctx, kind))
        record["swept_again"][kind] = why
    return {**record, "seconds": round(time.perf_counter() - start, 1)}


def _replace_sweep(ctx: Context, results: dict[str, Any], kind: str,
                   sweep: dict[str, Any]) -> None:
    """``kind``'s sweep record in ``results`` and in its stage's record on disk: ``sweep``."""
    if kind in results.get("sweep", {}):  # a head kind's: the sweep stage's
        stage = "sweep"
        results[stage][kind] = sweep
    else:  # the other drafters': each in its record of the drafters stage
        stage = "drafters"
        results[stage][kind]["sweep"] = sweep
    write_json(ctx.scratch / f"{stage}.json", results[stage])


def stale_sweeps(ctx: Context, kind: str) -> list[str]:
    """What is stale in the ``kind`` drafter's sweeps (its whole trees', and its chains' verified
    as drafted), in words; empty where it has no sweep or none is."""
    from treeopt.decoding.live_sweep import sweep_pending
    from treeopt.demo.stage_timing import drafted_chain_sizes, sweep_plan

    c = ctx.config
    whole, drafted = ctx.paths.sweep(kind, c.device), ctx.paths.drafted_sweep(kind, c.device)
    if not whole.is_file() or not ctx.paths.step_profile(kind, c.device).is_file():
        return []
    plan = sweep_plan(ctx, kind)
    said = []
    for path, sizes, as_drafted in (
            (whole, plan.sizes, False),
            (drafted, drafted_chain_sizes(plan.growth, plan.sizes, plan.own, c.drafted_sweep),
             True)):
        if path.is_file() and sizes is not None:
            pending = sweep_pending(path, plan.growth, batch=list(c.live_batches), sizes=sizes,
                                    costs=plan.costs, trace=plan.own,
                                    select_trace=plan.select_trace,
                                    max_new_tokens=c.live_new_tokens,
                                    continuous=c.sweep_batching == "continuous",
                                    drafted=as_drafted)
            said += [f"{path.name}: {line}" for line in pending]
    return said


__all__ = ["measure_picks", "stale_sweeps"]
