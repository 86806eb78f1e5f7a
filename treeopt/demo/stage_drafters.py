"""The drafters stage of a demo build: each drafter beyond the heads (EAGLE, a draft model, the
n-gram drafters) made end to end — trained, traced, grown, checked live, timed and sampled —
with a record kept per drafter, so an interrupted stage resumes and a finished demo gains the
kinds it lacks."""

from __future__ import annotations

import json
import time
from typing import Any

from treeopt.demo.context import Context
from treeopt.demo.stage_kinds import lacking
from treeopt.demo.stage_quality import kind_quality
from treeopt.demo.stage_timing import drafter_timing
from treeopt.demo.stage_traces import kind_growths, kind_sampled, kind_traces
from treeopt.demo.stage_training import train_drafter
from treeopt.files import read_json, write_json


def drafters(ctx: Context) -> dict[str, Any]:
    """The drafters beyond heads — an EAGLE drafter, a one-layer draft model and prompt lookup —
    trained on the same data (prompt lookup: nothing to train), then calibrated, grown, decoded
    live, profiled, swept and sampled exactly as the heads' stages do for Medusa and Hydra (their
    records, per kind). A finished demo's record keeps its kinds: only those it lacks are made
    (a drafter added to treeopt since the demo was built, or to the config's kinds). Each kind's
    record carries the seconds its run took, so a stage interrupted and resumed reports the
    sum (the stage's ``seconds``) rather than its last run's alone."""
    c = ctx.config
    out = dict(_record(ctx, "drafters"))  # the kinds a finished demo has (one added since runs)
    todo = lacking("drafters", out, c.kinds)
    if not todo:
        return out
    reference, _ = ctx.reference()
    for kind in todo:
        done = ctx.scratch / f"drafters-{kind}.json"
        if done.exists():  # finished before an interruption
            out[kind] = json.loads(done.read_text())
            continue
        start = time.perf_counter()
        trained = ctx.scratch / f"train-{kind}.json"  # training is the long part: kept apart
        if not trained.exists():
            write_json(trained, train_drafter(ctx, kind))
        record: dict[str, Any] = {"training": json.loads(trained.read_text())}
        record["traces"] = kind_traces(ctx, kind)
        ell, held = kind_growths(ctx, kind)
        record["growth"] = {"expected_accept_length": ell, "heldout_expected_accept_length": held}
        record["quality"] = kind_quality(ctx, kind, reference)
        record.update(drafter_timing(ctx, kind))
        record["sampled"] = {f"{t:g}": kind_sampled(ctx, kind, t) for t in c.sample_temperatures}
        record["seconds"] = round(time.perf_counter() - start, 2)  # this kind's, in its own run
        write_json(done, record)
        out[kind] = json.loads(done.read_text())
    if all("seconds" in out[k] for k in c.kinds if k in out):  # across interrupted runs
        out["seconds"] = round(sum(out[k]["seconds"] for k in c.kinds if k in out), 2)
    return out


def _record(ctx: Context, name: str) -> dict[str, Any]:
    """Stage ``name``'s record from an earlier run ({} when there is none)."""
    path = ctx.scratch / f"{name}.json"
    return {k: v for k, v in read_json(path).items() if k != "seconds"} if path.exists() else {}
