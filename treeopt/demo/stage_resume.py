"""The resume bookkeeping of a demo build: the files each stage writes (what redoing a stage,
or remaking some kinds, removes first), which kinds a change of settings touches, a kind
stage's record merged from kept and remade kinds, and the re-measurement (``--redo timing``)
and re-check (``--redo quality``) that resume, drafter by drafter, from their markers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from treeopt.demo import stage_dynamic, stage_quality, stage_timing
from treeopt.demo.config import DemoConfig
from treeopt.demo.context import Context
from treeopt.demo.layout import KINDS, DemoPaths
from treeopt.demo.stage_kinds import HEAD_KINDS, NEW_KINDS
from treeopt.files import read_json, write_json
from treeopt.registry.kinds import drafter_kind

# settings that touch one head kind's work alone (a layer setting of one heads-stage kind that no
# other kind of the demo reads, ``DrafterKind.demo_layers``): changing one redoes that kind's part
# of the kind stages and keeps everything else of a finished demo
KIND_SETTINGS: dict[str, tuple[str, ...]] = {
    name: (kind,) for kind in HEAD_KINDS for name in drafter_kind(kind).demo_layers
    if not any(name in drafter_kind(other).demo_layers for other in KINDS if other != kind)}


TIMING = "timing"  # --redo timing: every speed measurement of the demo, nothing trained or traced
TIMING_STAGES = ("latency", "sweep")  # stages that only measure speed, redone whole

RUNS = "runs"  # --redo runs: every run of the base model again, nothing trained or profiled
# the stages that run the base model over prompts: traces, live checks, sweeps (what a change in
# how a run is recorded or counted needs made again); growths follow from the traces
RUNS_STAGES = ("traces", "growth", "quality", "sweep", "sampled", "drafters", "dynamic", "prose")


def timing_outputs(paths: DemoPaths, config: DemoConfig, *,
                   kinds: tuple[str, ...] | None = None) -> list[Path]:
    """The files of the speed measurements inside the drafters and dynamic stages (``kinds``:
    those of these drafters alone)."""
    if kinds is not None:
        return [*(paths.step_profile(k, config.device) for k in kinds),
                *_files_of("sweep", kinds, paths, config)]
    return [*timing_outputs(paths, config, kinds=NEW_KINDS),
            paths.dynamic_step_profile(config.device), paths.dynamic_selection(config.device)]


def without_batches(paths: DemoPaths, config: DemoConfig, batches: tuple[int, ...]) -> None:
    """Remove every speed measurement at ``batches`` from the demo's files (each drafter's step
    profile and sweeps, the dynamic step profile), keeping the other batch sizes': what timing
    those batch sizes again (``--redo timing --batches``) starts from. The verify table, timed
    at batch 1 alone, is kept."""
    from treeopt.documents.step_profile import StepProfile
    from treeopt.documents.sweep import Sweep

    profiles = [*(paths.step_profile(k, config.device) for k in KINDS),
                paths.dynamic_step_profile(config.device)]
    for path in profiles:
        if path.is_file():
            StepProfile.load(path).without_batches(batches).save(path)
    for path in (p for k in KINDS for p in (paths.sweep(k, config.device),
                                             paths.drafted_sweep(k, config.device))):
        if path.is_file():
            Sweep.load(path).without_batches(batches).save(path)


def retime(ctx: Context, results: dict[str, Any]) -> None:
    """Measure the drafters' and dynamic drafting's speed again (their files removed first by
    the caller) and update those stages' results and records in place (the choice per prompt
    set is priced from the new profiles last, as every build's). Each drafter measured is named in the
    re-measurement's marker (``retime.json``) as it finishes: a stopped run measures the rest,
    the one it stopped in resumed from its files (the step profile and the sweep are written as
    they go, so a file on disk may be part of a measurement)."""
    marker = ctx.scratch / "retime.json"
    state = read_json(marker) if marker.exists() else {}
    done = list(state.get("done", []))
    for kind in NEW_KINDS:
        if kind in done or kind not in results["drafters"]:
            continue
        results["drafters"][kind].update(stage_timing.drafter_timing(ctx, kind))
        write_json(ctx.scratch / "drafters.json", results["drafters"])
        done.append(kind)
        write_json(marker, {**state, "done": done})
    ctx.log("[drafters] speed measured again")
    results["dynamic"].update(stage_dynamic.dynamic_timing(ctx))
    write_json(ctx.scratch / "dynamic.json", results["dynamic"])
    ctx.log("[dynamic] speed measured again")


RECHECK_MARKER = "requality.json"  # --redo quality: until the drafters' quality is checked again


def recheck_quality(ctx: Context, results: dict[str, Any]) -> None:
    """Check the drafters' quality again (``--redo quality``: the quality stage checks the
    heads', the drafters stage holds the drafters' own) and update their records in place. Each
    drafter checked is named in the marker (:data:`RECHECK_MARKER`) as it finishes: a stopped
    run checks the rest."""
    marker = ctx.scratch / RECHECK_MARKER
    state = read_json(marker) if marker.exists() else {}
    done = list(state.get("done", []))
    todo = [k for k in NEW_KINDS if k not in done and k in results["drafters"]]
    if todo:
        reference, _ = ctx.reference()
    for kind in todo:
        results["drafters"][kind]["quality"] = stage_quality.kind_quality(ctx, kind, reference)
        write_json(ctx.scratch / "drafters.json", results["drafters"])
        done.append(kind)
        write_json(marker, {**state, "done": done})
    ctx.log("[drafters] quality checked again")


def runs_kept(paths: DemoPaths, config: DemoConfig) -> set[Path]:
    """What ``--redo runs`` keeps of the stages it runs again: the drafters' training and the
    step profiles (a step's cost does not depend on which positions a trace records)."""
    return {*(paths.root / ".stages" / f"train-{k}.json" for k in NEW_KINDS),
            *(paths.step_profile(k, config.device) for k in KINDS),
            paths.dynamic_step_profile(config.device)}


def keep_training(scratch: Path) -> None:
    """Before ``--redo runs`` removes the drafters stage's record: each trained drafter's
    training record kept apart, as an interrupted drafters stage keeps it, so the stage made
    again trains nothing (a build seeded from a finished demo has the stage's record alone)."""
    record = scratch / "drafters.json"
    if not record.exists():
        return
    for kind, made in read_json(record).items():
        path = scratch / f"train-{kind}.json"
        if kind in NEW_KINDS and isinstance(made, dict) and "training" in made \
                and not path.exists():
            write_json(path, made["training"])


def outputs(name: str, paths: DemoPaths, config: DemoConfig) -> list[Path]:
    """The files stage ``name`` writes and would resume from: what running it again removes
    first (so a redone stage measures afresh instead of resuming its own finished work)."""
    kinds = NEW_KINDS if name == "drafters" else KINDS if name == "prose" else HEAD_KINDS
    if name == "drafters":
        return [p for stage in ("traces", "growth", "sweep", "sampled")
                for p in _files_of(stage, kinds, paths, config)] + [
            paths.step_profile(k, config.device) for k in kinds] + [
            paths.root / ".stages" / f"{record}-{k}.json" for k in kinds
            for record in ("drafters", "train")]
    return _files_of(name, kinds, paths, config)


def kind_scope(changed: list[str]) -> tuple[str, ...] | None:
    """The head kinds whose work the ``changed`` settings touch, when each of them is one kind's
    own setting (:data:`KIND_SETTINGS`); None when any touches shared work (a fresh build).

    >>> kind_scope(["medusa_head_layers"]), kind_scope(["medusa_head_layers", "seed"])
    (('medusa',), None)
    """
    if not changed or any(name not in KIND_SETTINGS for name in changed):
        return None
    touched = {kind for name in changed for kind in KIND_SETTINGS[name]}
    return tuple(kind for kind in HEAD_KINDS if kind in touched)


def kind_outputs(name: str, kinds: tuple[str, ...], paths: DemoPaths, config: DemoConfig,
                 ) -> list[Path]:
    """The files kind stage ``name`` writes for ``kinds`` alone (not the files all kinds share,
    such as the model's verify table): what making those kinds again removes first."""
    shared = set(_files_of(name, (), paths, config))
    kind_dirs = [paths.heads(k) for k in kinds] if name == "heads" else []
    return [p for p in _files_of(name, kinds, paths, config) if p not in shared] + [
        p for d in kind_dirs if d.is_dir() for p in sorted(d.iterdir())]


def merge_kinds(kept: dict[str, Any], made: dict[str, Any]) -> dict[str, Any]:
    """A kind stage's record: ``kept`` (all kinds, from a finished demo) with the kinds ``made``
    again replaced wherever they appear (the records nest per kind at different depths).

    >>> merge_kinds({"max_nodes": 8, "ell": {"medusa": 1.5, "hydra": 2.0}},
    ...             {"max_nodes": 8, "ell": {"medusa": 1.7}})
    {'max_nodes': 8, 'ell': {'medusa': 1.7, 'hydra': 2.0}}
    """
    out = dict(kept)
    for key, value in made.items():
        nested = isinstance(value, dict) and isinstance(kept.get(key), dict)
        out[key] = merge_kinds(kept[key], value) if nested and key not in KINDS else value
    return out


def _files_of(name: str, kinds: tuple[str, ...], paths: DemoPaths, config: DemoConfig,
              ) -> list[Path]:
    temps = config.sample_temperatures
    files = {
        "traces": [paths.trace(k, heldout=h) for k in kinds for h in (False, True)],
        "growth": [paths.growth(k, method=m) for k in kinds
                   for m in ("empirical", "independent")],
        "latency": [paths.latency(config.device),
                    *(paths.step_profile(k, config.device) for k in kinds)],
        "sweep": [*(paths.sweep(k, config.device) for k in kinds),
                  *(paths.alongside_profile(k, config.device) for k in kinds
                    if config.sweep_alongside),
                  *(paths.drafted_sweep(k, config.device) for k in kinds
                    if drafter_kind(k).lookup)],
        "dynamic": [*(paths.dynamic_trace(part, k) for part in ("calibration", "heldout")
                      for k in config.dynamic_topk), paths.dynamic_step_profile(config.device),
                    paths.dynamic_selection(config.device)],
        "prose": [paths.prompts("prose"), *(p for k in kinds for p in (
            paths.prose_trace(k), paths.prose_growth(k)))],
        "sampled": [p for k in kinds for t in temps
                    for p in (paths.trace(k, temperature=t),
                              paths.trace(k, heldout=True, temperature=t),
                              paths.growth(k, temperature=t))],
    }
    return files.get(name, [])
