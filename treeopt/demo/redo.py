"""Redoing stages of a finished demo: what a redo removes before its stages run again (or, for
some batch sizes timed again, removes from the timing files), and how those batch sizes' own
measurement settings join the config (``treeopt demo build --redo timing --batches``)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace
from pathlib import Path

from treeopt.demo import stages
from treeopt.demo.config import MEASURE_SETTINGS, DemoConfig
from treeopt.demo.layout import DemoPaths
from treeopt.errors import FieldError
from treeopt.files import read_json, write_json

Log = Callable[[str], None]
# a stage's record before it ran again for some batch sizes: the seconds its figures took
# before, which the new record adds to its own (the build's time spent on them in all)
EARLIER = "earlier"


def stages_to_redo(redo: tuple[str, ...]) -> tuple[tuple[str, ...], bool, bool]:
    """The stages ``redo`` names, its groups (``timing``, ``runs``) spelt out, and whether it
    names each of those two; a stage that does not exist, or both groups, refused."""
    names = [name for name, _ in stages.PIPELINE]
    unknown = [r for r in redo if r not in (*names, stages.TIMING, stages.RUNS)]
    if unknown:
        raise FieldError("redo", f"{','.join(unknown)}: no such stage; the stages are "
                         f"{', '.join(names)}, {stages.TIMING} (every speed measurement) and "
                         f"{stages.RUNS} (every trace, live check and sweep)")
    retime, runs = stages.TIMING in redo, stages.RUNS in redo
    if retime and runs:
        raise FieldError("redo", f"{stages.TIMING} and {stages.RUNS}: one at a time (runs keeps "
                         "the step profiles that timing measures again)")
    groups = {stages.TIMING: stages.TIMING_STAGES, stages.RUNS: stages.RUNS_STAGES}
    return tuple(dict.fromkeys(s for r in redo for s in groups.get(r, (r,)))), retime, runs


def start_redo(work: Path, config: DemoConfig, redo: tuple[str, ...], *, retime: bool,
               runs: bool, log: Log, batches: tuple[int, ...] = ()) -> None:
    """Remove what the ``redo`` stages (and, when ``retime``, the speed measurements inside the
    drafters and dynamic stages) made, so they are measured afresh — unless an interrupted run
    of the same redo already did: then its fresh work is kept and the redo resumes. ``runs``
    keeps the training and the step profiles of the stages it redoes; ``batches`` removes only
    those batch sizes' timings (:func:`~treeopt.demo.stages.without_batches`)."""
    record = work / ".stages" / "redo.json"
    said = {"redo": list(redo), "timing": retime, **({"batches": list(batches)} if batches else {})}
    if record.exists() and read_json(record) == said:
        log(f"[redo] resuming {', '.join(redo)} where it stopped")
        return
    if batches:  # the stages run again, resuming from their files less those batch sizes
        for name in redo:  # (their records' seconds kept, to add this run's to: EARLIER)
            record_of = work / ".stages" / f"{name}.json"
            if record_of.exists():
                record_of.replace(work / ".stages" / f"{name}.{EARLIER}.json")
        stages.without_batches(DemoPaths(work), config, batches)
        write_json(work / ".stages" / "retime.json", {"redo": stages.TIMING})
        write_json(record, said)
        return
    kept = stages.runs_kept(DemoPaths(work), config) if runs else set()
    if runs:
        stages.keep_training(work / ".stages")
    for name in redo:  # measured afresh: the stage's record and the files it would resume from
        (work / ".stages" / f"{name}.json").unlink(missing_ok=True)
        for path in stages.outputs(name, DemoPaths(work), config):
            if path not in kept:
                path.unlink(missing_ok=True)
    if retime:  # and the speed measured inside the drafters and dynamic stages
        for path in stages.timing_outputs(DemoPaths(work), config):
            path.unlink(missing_ok=True)
        write_json(work / ".stages" / "retime.json", {"redo": stages.TIMING})
    if "quality" in redo and "drafters" not in redo:  # and the drafters' checks, inside it
        write_json(work / ".stages" / stages.RECHECK_MARKER, {"redo": "quality"})
    write_json(record, said)


def timed_apart(target: Path, config: DemoConfig, batches: tuple[int, ...],
                own_timing: Collection[str] | None, *, redo: tuple[str, ...],
                ) -> tuple[DemoConfig, set[str]]:
    """``config`` with the measurement settings ``own_timing`` names made those of ``batches``
    alone (:attr:`~treeopt.demo.config.DemoConfig.batch_timing`, beside the finished demo's
    other batch sizes timed apart), and what ``own_timing`` then names: ``batch_timing`` alone,
    the finished demo's values of the rest kept (:func:`with_finished_timing`)."""
    if tuple(redo) != (stages.TIMING,):
        raise FieldError("batches", f"goes with {{redo}} {stages.TIMING} alone, not {{redo}} "
                         f"{','.join(redo) or 'unset'}")
    if unknown := [b for b in batches if b not in config.live_batches]:
        raise FieldError("batches", f"must be among the batch sizes the demo times "
                         f"({','.join(map(str, config.live_batches))}), got "
                         f"{','.join(map(str, unknown))}")
    own = set(own_timing or ())
    if other := sorted(own - set(MEASURE_SETTINGS)):
        named = ", ".join(f"{{{k}}}" for k in MEASURE_SETTINGS)
        raise FieldError("batches", f"times a batch size apart by its measurement settings "
                         f"alone ({named}), not by {', '.join(f'{{{k}}}' for k in other)}")
    if config.sweep_alongside:
        raise FieldError("batches", "cannot time apart a sweep profiled alongside "
                         "({sweep_alongside}): redo its timing whole")
    manifest = target / "manifest.json"
    finished = read_json(manifest).get("config", {}) if manifest.exists() else {}
    settings = {k: getattr(config, k) for k in sorted(own)}
    timing = {**finished.get("batch_timing", {}), **{str(b): settings for b in batches}}
    return replace(config, batch_timing=timing), {"batch_timing"}


__all__ = ["EARLIER", "stages_to_redo", "start_redo", "timed_apart"]
