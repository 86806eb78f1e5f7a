"""``treeopt demo build``: corpus → tokenizer → base model → heads → traces → growths → checks.

Everything is built in a work directory beside the output (``.<name>.building``); each stage
records its result there, so an interrupted build resumes at the stage it stopped in, and the
output directory is replaced only when the whole demo is finished. Nothing half-written is ever
visible under ``--out``.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from treeopt.demo import stages
from treeopt.demo.adaptive_configs import ship_adaptive_configs
from treeopt.demo.command import command_line
from treeopt.demo.config import (
    DYNAMIC_SETTINGS,
    TIMING_FLAGS,
    TIMING_SETTINGS,
    TRAINING_SETTINGS,
    DemoConfig,
)
from treeopt.demo.context import Context
from treeopt.demo.layout import DEMO_FORMAT, DYNAMIC_KIND, KINDS, DemoPaths
from treeopt.demo.prompt_sets import ship_prose_choice
from treeopt.demo.redo import EARLIER, stages_to_redo, start_redo, timed_apart
from treeopt.demo.selections import ship_selections
from treeopt.demo.stage_picks import measure_picks
from treeopt.documents.dtypes import AUTO_DTYPE, DTYPES
from treeopt.errors import FieldError, TreeoptError
from treeopt.files import read_json, write_json
from treeopt.profiling.host import cpu_identity, emulated_bf16
from treeopt.version import __version__

Log = Callable[[str], None]
# a finished demo's stage records that a build no longer keeps there: the prose stage's choice
# per prompt set is priced last now (``prose_choice``)
RETIRED = {"prose": ("choice",)}
# what every build prices last from the finished files, never resumed: select's answer per
# drafter, the fastest drafter per prompt set, the tuned adaptive configs the Live page replays
PRICED_LAST: dict[str, Callable[[DemoPaths, str], dict[str, Any]]] = {
    "selections": ship_selections, "prose_choice": ship_prose_choice,
    "adaptive_configs": ship_adaptive_configs}


def build_demo(out: str | os.PathLike[str], config: DemoConfig, *, log: Log | None = None,
               show_progress: bool = False, redo: tuple[str, ...] = (),
               own_timing: Collection[str] | None = None,
               batches: tuple[int, ...] = ()) -> dict[str, Any]:
    """Build the demo described by ``config`` into ``out``; return its manifest. ``own_timing``:
    the timing settings ``config`` sets on purpose (the command line's flags); given, the others
    are those of a finished demo at ``out`` (:func:`with_finished_timing`). ``redo``: stages
    to run again although a finished demo (or an interrupted build) has them — e.g. ``latency``
    and ``sweep`` — or ``timing``: every speed measurement of the demo (those two stages, the
    drafters' step profiles and sweeps, the dynamic step profile and recommendation), to
    re-measure a demo on this machine without training or tracing anything again; with
    ``timing`` the config may change the finished demo's timing settings
    (:data:`~treeopt.demo.config.TIMING_SETTINGS`: how long and how each figure is measured);
    or ``runs``: every stage that runs the base model over prompts (traces, live checks, sweeps,
    :data:`~treeopt.demo.stages.RUNS_STAGES`), keeping the training and the step profiles
    (:func:`~treeopt.demo.stages.runs_kept`) — what a change in how a run is recorded needs.
    ``batches`` (with ``timing`` alone): only those batch sizes are timed again, the others'
    timings kept, and the measurement settings ``own_timing`` names become theirs alone
    (:attr:`~treeopt.demo.config.DemoConfig.batch_timing`). The same call again after an
    interruption resumes the redo where it stopped."""
    import torch

    asked, (redo, retime, runs) = redo, stages_to_redo(redo)
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    target = Path(out)
    if batches:
        config, own_timing = timed_apart(target, config, batches, own_timing, redo=asked)
    elif retime and own_timing is not None:  # timed whole again: every batch size alike
        own_timing = {*own_timing, "batch_timing"}
    if own_timing is not None:
        config = with_finished_timing(target, config, own_timing, log=say)
    config, probe = _resolved_dtype(target, config, retime=retime, log=say)
    if (why := emulated_bf16(config.dtype, config.device)) is not None:
        say(f"note: {why} (--dtype auto measures both)")
    config = _with_kinds_made(target, config, retime=retime)
    differ = _differ(target, config, retime=retime)
    if redo and differ:
        raise FieldError("redo", f"{','.join(redo)}: the demo in {target} was built with other "
                         f"settings ({', '.join(differ)}); {{redo}} re-runs stages of a demo "
                         "built with the same ones (other settings mean a fresh build: run "
                         "without {redo})")
    _inputs_ready(config)
    work = _workdir(target, config, retime=retime)
    if probe is not None:
        write_json(DemoPaths(work).dtype_probe(config.device), probe)
    if redo:
        start_redo(work, config, redo, retime=retime, runs=runs, batches=batches, log=say)
    paths = DemoPaths(work)
    marker = work / ".stages" / "retime.json"  # until the drafters' speed is measured again
    torch.manual_seed(config.seed)
    ctx = Context(config, paths, work / ".stages", say, show_progress,
                  kinds=tuple(k for k in stages.HEAD_KINDS if k in config.kinds))
    results: dict[str, Any] = {}
    for name, fn in stages.PIPELINE:
        results[name] = _stage(ctx, name, fn)
    if marker.exists():  # an interrupted re-measurement resumes here too, --redo or not
        stages.retime(ctx, results)
        _ran_here(ctx)
        marker.unlink()
    recheck = work / ".stages" / stages.RECHECK_MARKER  # likewise the drafters' quality checks
    if recheck.exists():
        stages.recheck_quality(ctx, results)
        _ran_here(ctx)
        recheck.unlink()
    results["picks"] = measure_picks(ctx, results)  # every sweep marks (and measured) select's picks
    for name, ship in PRICED_LAST.items():  # from what the demo now holds, every build
        start = time.perf_counter()
        results[name] = {**ship(paths, config.device),
                         "seconds": round(time.perf_counter() - start, 2)}
        say(f"[{name}] {', '.join(k for k in results[name] if k != 'seconds') or 'none'}")
    manifest = _manifest(config, paths, results)
    write_json(paths.manifest, manifest)
    _publish(work, target)
    say(f"demo ready in {target} ({manifest['size_bytes'] / 2**20:.1f} MiB)")
    return manifest


def _inputs_ready(config: DemoConfig) -> None:
    """The base model and every prompt set the build reads are there, checked before its first
    stage (each missing one refused in one line that says how to fetch it): the prose set is
    read hours into a build, and a build stopped there for want of it has to be run again."""
    from treeopt.demo.layout import base_dir
    from treeopt.demo.pretrained import prompt_set_dir

    if config.base_model is not None:
        base_dir(config.base_model)
    for name in (config.prompt_set, config.prose_set):
        if name is not None:
            prompt_set_dir(name)


def _resolved_dtype(target: Path, config: DemoConfig, *, retime: bool, log: Log,
                    ) -> tuple[DemoConfig, dict[str, Any] | None]:
    """``config`` with ``--dtype auto`` made a dtype, and the measurement that chose it: the
    dtype the interrupted build beside ``target``, or the finished demo there, was made in with
    otherwise the same settings (a build goes on in the dtype it began in; nothing measured),
    else the faster of bf16 and fp32 on this host's base model step, measured now on the
    timings' threads (:mod:`treeopt.profiling.dtype_probe`)."""
    if config.dtype != AUTO_DTYPE:
        return config, None
    stamp = target.parent / f".{target.name}.building" / ".stages" / "config.json"
    manifest = target / "manifest.json"
    interrupted = read_json(stamp) if stamp.exists() else {}
    finished = read_json(manifest).get("config", {}) if manifest.exists() else {}
    for where, recorded, same in (
            ("the interrupted build", interrupted, lambda c: _same_settings(interrupted, c)),
            ("the finished demo", finished, lambda c: not _differ(target, c, retime=retime))):
        if recorded.get("dtype") not in DTYPES:
            continue
        chosen = replace(config, dtype=recorded["dtype"])
        if same(chosen):
            log(f"[dtype] auto: {chosen.dtype}, as {where} chose")
            return chosen, None
    from treeopt.demo.layout import base_dir
    from treeopt.demo.stage_timing import threads
    from treeopt.profiling.dtype_probe import probe_dtypes
    from treeopt.roofline.config import load_config

    _inputs_ready(config)
    model = base_dir(str(config.base_model))
    with threads(config.live_threads):
        probe = probe_dtypes(load_config(model), str(model), device=config.device)
    log(f"[dtype] auto: {probe.line()}")
    return replace(config, dtype=probe.dtype), probe.to_dict()


def _differ(target: Path, config: DemoConfig, *, retime: bool) -> list[str]:
    """The settings of the finished demo at ``target`` that ``config`` changes, less its timing
    settings when the build measures every speed figure again (``retime``), less the
    drafter kinds (a demo gains the kinds it lacks: :func:`_with_kinds_made`), and less the
    settings it never read: the training settings where it made no trained drafter, the
    dynamic stage's where it made no EAGLE drafter (:data:`~treeopt.demo.config.
    TRAINING_SETTINGS`, :data:`~treeopt.demo.config.DYNAMIC_SETTINGS`)."""
    manifest = target / "manifest.json"
    made = read_json(manifest).get("config", {}).get("kinds", KINDS) if manifest.exists() else ()
    unused = ((TRAINING_SETTINGS if not stages.trained_kinds(tuple(made)) else ())
              + (DYNAMIC_SETTINGS if DYNAMIC_KIND not in made else ()))  # never read by it
    return [k for k in settings_differ(target, config)
            if not (retime and k in TIMING_SETTINGS) and k != "kinds" and k not in unused]


def with_finished_timing(target: Path, config: DemoConfig, own_timing: Collection[str], *,
                         log: Log | None = None) -> DemoConfig:
    """``config`` with the timing settings of the finished demo at ``target``
    (:data:`~treeopt.demo.config.TIMING_FLAGS`) that ``own_timing`` does not name, where that
    demo was built with otherwise the same settings (its kinds aside, and its dtype where
    ``config``'s is auto): a build that adds drafters to a demo, or measures it again, measures
    as the demo was measured unless told otherwise. A demo built otherwise: ``config`` as it is."""
    manifest = target / "manifest.json"
    finished = read_json(manifest).get("config", {}) if manifest.exists() else {}
    default = DemoConfig()  # what a setting the demo does not record (added since) meant
    was = {k: finished.get(k, getattr(default, k)) for k in (*TIMING_FLAGS, "batch_timing")}
    kept = {k: v for k, v in was.items() if k not in own_timing and v != getattr(config, k)}
    if not finished or not kept:
        return config
    inherited = replace(config, **kept)
    alike = (replace(inherited, dtype=finished["dtype"])
             if config.dtype == AUTO_DTYPE and finished.get("dtype") in DTYPES else inherited)
    if _differ(target, alike, retime=True):  # built otherwise: a fresh build, measured as told
        return config
    if log is not None:
        log("[timing] as the finished demo was measured: "
            + ", ".join(f"{k} {v}" for k, v in kept.items()))
    return inherited


def _with_kinds_made(target: Path, config: DemoConfig, *, retime: bool) -> DemoConfig:
    """``config`` with the drafter kinds that the finished demo at ``target``, or the
    interrupted build beside it, already made with otherwise the same settings: a demo only
    gains kinds (the stages make the kinds their records lack, :func:`stages.lacking`)."""
    kinds = set(config.kinds)
    manifest = target / "manifest.json"
    if manifest.exists() and not _differ(target, config, retime=retime):
        kinds.update(read_json(manifest).get("config", {}).get("kinds", KINDS))
    stamp = target.parent / f".{target.name}.building" / ".stages" / "config.json"
    if stamp.exists() and _same_settings(read_json(stamp), config):
        kinds.update(read_json(stamp).get("kinds", KINDS))
    return replace(config, kinds=tuple(k for k in KINDS if k in kinds))


def _workdir(target: Path, config: DemoConfig, *, retime: bool = False) -> Path:
    """The work directory; one left by a different configuration is started afresh. A finished
    demo at ``target`` built with the same settings (stages added since aside; timing settings
    aside when the build measures every speed figure again, ``retime``) seeds it: its files and
    stage records are reused, so only the stages it lacks run."""
    work = target.parent / f".{target.name}.building"
    stamp = work / ".stages" / "config.json"
    if work.exists() and (not stamp.exists() or not _same_settings(read_json(stamp), config)):
        shutil.rmtree(work)
    if not work.exists():
        _seed_from_published(target, work, config, retime=retime)
    write_json(stamp, _jsonable(config))  # the kinds it makes may have grown
    return work


def _same_settings(recorded: dict[str, Any], config: DemoConfig) -> bool:
    """Whether an interrupted build's ``recorded`` settings are ``config``'s (the drafter kinds
    aside: a build gains kinds); a setting added to treeopt since it started counts as its
    default (so an update does not discard the work).

    >>> _same_settings({"seed": 0}, DemoConfig()), _same_settings({"seed": 1}, DemoConfig())
    (True, False)
    >>> _same_settings({"kinds": ["hydra"]}, DemoConfig())
    True
    """
    new, defaults = _jsonable(config), _jsonable(DemoConfig())
    return all(recorded.get(k, defaults.get(k)) == new.get(k, defaults.get(k))
               for k in dict.fromkeys([*recorded, *new]) if k != "kinds")


def settings_differ(target: Path, config: DemoConfig) -> list[str]:
    """The settings of the finished demo at ``target`` that ``config`` changes (settings it does
    not record, added since, take their defaults); ``["config"]`` when it records none, empty
    when there is no finished demo.

    >>> import tempfile
    >>> settings_differ(Path(tempfile.mkdtemp()), DemoConfig())
    []
    """
    manifest_path = target / "manifest.json"
    if not manifest_path.exists():
        return []
    old, new = read_json(manifest_path).get("config", {}), _jsonable(config)
    if not old:
        return ["config"]
    defaults = _jsonable(DemoConfig())  # what a setting the demo does not record meant
    return [k for k in dict.fromkeys([*old, *new])
            if old.get(k, defaults.get(k)) != new.get(k, defaults.get(k))]


def _seed_from_published(target: Path, work: Path, config: DemoConfig, *,
                         retime: bool = False) -> None:
    """Copy a finished demo built with ``config``'s settings into ``work``, with a stage record
    for every stage its manifest holds. Settings the finished demo does not record (added since)
    take their defaults; timing settings may differ when every speed figure is measured again
    (``retime``). When the settings that differ are one head kind's own (such as
    ``medusa_head_layers``), the kind stages keep their records as ``<stage>.kept.json`` and that
    kind's files are removed: the build makes that kind again and keeps the rest. Any other
    difference means a fresh build."""
    manifest_path = target / "manifest.json"
    differ = _differ(target, config, retime=retime)
    scope = stages.kind_scope(differ)
    if not manifest_path.exists() or (differ and scope is None):
        return
    manifest = read_json(manifest_path)
    shutil.copytree(target, work, ignore=shutil.ignore_patterns("manifest.json"))
    paths = DemoPaths(work)
    if "environment" in manifest:
        write_json(work / ".stages" / ENVIRONMENT, manifest["environment"])
    for name, _ in stages.PIPELINE:
        if name in manifest and name in manifest.get("timings_s", {}):
            record = {**manifest[name], "seconds": manifest["timings_s"][name]}
            if scope and name in stages.KIND_STAGES:
                write_json(work / ".stages" / f"{name}.kept.json",
                           {"kinds": list(scope), "record": record})
                for path in stages.kind_outputs(name, scope, paths, config):
                    path.unlink(missing_ok=True)
            else:
                write_json(work / ".stages" / f"{name}.json", record)


def _stage(ctx: Context, name: str, fn: Callable[[Context], dict[str, Any]],
           ) -> dict[str, Any]:
    """Run a stage unless its record exists; the record carries the stage's seconds. A kind
    stage with a kept record (see :func:`_seed_from_published`) runs for the kinds it names
    alone, and their results replace theirs in the kept record."""
    record = ctx.scratch / f"{name}.json"
    if record.exists():
        old = {k: v for k, v in read_json(record).items() if k not in RETIRED.get(name, ())}
        new = stages.lacking(name, old, ctx.config.kinds)
        if not new:
            ctx.log(f"[{name}] done earlier, reusing")
            return old
        ctx.log(f"[{name}] {', '.join(new)} added since the demo was built …")
        start = time.perf_counter()
        if name in stages.KIND_STAGES:  # the kinds it lacks, merged into its record
            made = fn(replace(ctx, kinds=tuple(k for k in new if k in stages.HEAD_KINDS)))
            result = stages.merge_kinds(old, made)  # (its seconds, the kept ones, set below)
            seconds = old["seconds"] + time.perf_counter() - start
        else:
            result = fn(ctx)  # makes what it lacks (the drafters stage: keeps the others)
            own = result.pop("seconds", None)  # a stage that times its parts across runs
            seconds = own if own is not None else old["seconds"] + time.perf_counter() - start
        result["seconds"] = round(seconds, 2)
        write_json(record, result)
        _ran_here(ctx)
        ctx.log(f"[{name}] {', '.join(new)}: {time.perf_counter() - start:.1f} s")
        return result
    kept_path = ctx.scratch / f"{name}.kept.json"
    kept = read_json(kept_path) if kept_path.exists() else None
    if kept is not None:
        ctx = replace(ctx, kinds=tuple(kept["kinds"]))
        ctx.log(f"[{name}] {', '.join(ctx.kinds)} again, the other kinds' work kept …")
    else:
        ctx.log(f"[{name}] …")
    start = time.perf_counter()
    result = fn(ctx)
    own = result.pop("seconds", None)  # a stage that times its parts across runs
    seconds = own if own is not None else time.perf_counter() - start
    earlier = ctx.scratch / f"{name}.{EARLIER}.json"  # run again for some batch sizes
    if earlier.exists():
        seconds += read_json(earlier).get("seconds", 0.0)
    if kept is not None:  # the kept kinds' share of the old time, and this run's
        share = 1 - len(ctx.kinds) / len(stages.HEAD_KINDS)
        seconds += kept["record"]["seconds"] * share
        result = stages.merge_kinds(kept["record"], result)
    result["seconds"] = round(seconds, 2)
    write_json(record, result)
    _ran_here(ctx)
    kept_path.unlink(missing_ok=True)
    earlier.unlink(missing_ok=True)
    ctx.log(f"[{name}] {time.perf_counter() - start:.1f} s")
    return result


ENVIRONMENT = "environment.json"  # in the stage records: where the demo's work last ran


def _environment(threads: int) -> dict[str, Any]:
    """This host and its software, as a manifest records where a demo was made: ``threads``,
    those every timing ran with; ``build_threads``, those of the training and tracing."""
    import tokenizers
    import torch
    import transformers

    return {"treeopt": __version__, "python": platform.python_version(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__, "platform": platform.platform(),
            "threads": threads, "build_threads": torch.get_num_threads(), "cpu": cpu_identity()}


def _ran_here(ctx: stages.Context) -> None:
    """Record that a stage ran (measured, traced or trained) on this host, as it finishes."""
    write_json(ctx.scratch / ENVIRONMENT, _environment(ctx.config.live_threads))


def _measured_on(paths: DemoPaths, config: DemoConfig) -> dict[str, Any]:
    """The host where the demo's stages last ran: a build that reran none of them (it priced
    the finished demo's files again) keeps the finished demo's record, so the app never reads
    its speed figures as measured on a host that measured nothing."""
    path = paths.root / ".stages" / ENVIRONMENT
    return read_json(path) if path.exists() else _environment(config.live_threads)


def _manifest(config: DemoConfig, paths: DemoPaths, results: dict[str, Any]) -> dict[str, Any]:
    files = _files(paths.root)
    return {
        "format": DEMO_FORMAT,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command_line(config),
        "config": _jsonable(config),
        "environment": _measured_on(paths, config),
        **({"dtype_probe": read_json(paths.dtype_probe(config.device))}
           if paths.dtype_probe(config.device).exists() else {}),
        **{name: {k: v for k, v in r.items() if k != "seconds"} for name, r in results.items()},
        "timings_s": {name: r["seconds"] for name, r in results.items()},
        "build_seconds": round(sum(r["seconds"] for r in results.values()), 1),
        "files": files,
        "size_bytes": sum(f["bytes"] for f in files),
    }


def _files(root: Path) -> list[dict[str, Any]]:
    """Every shipped file (hidden scratch excluded): relative path, size and sha256."""
    out = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and not any(part.startswith(".") for part in rel.parts):
            if rel.as_posix() == "manifest.json":
                continue
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            out.append({"path": rel.as_posix(), "bytes": p.stat().st_size, "sha256": digest})
    return out


def _publish(work: Path, target: Path) -> None:
    """Drop the scratch records and swap the finished work directory into place."""
    shutil.rmtree(work / ".stages", ignore_errors=True)
    old = target.parent / f".{target.name}.old-{os.getpid()}"
    if target.exists():
        os.replace(target, old)
    os.replace(work, target)
    shutil.rmtree(old, ignore_errors=True)


def _jsonable(config: DemoConfig) -> Any:
    return json.loads(json.dumps(asdict(config)))


def summary(manifest: dict[str, Any]) -> dict[str, Any]:
    """The headline numbers of a manifest (``treeopt demo info``)."""
    try:
        q = manifest["quality"]
        drafters = manifest.get("drafters", {})  # the drafters beyond heads, when built
        return {
            "base_model": manifest.get("config", {}).get("base_model"),  # None: trained here
            "heldout_loss": manifest["base"].get("heldout", {}).get("loss"),
            "parameters": manifest["base"]["parameters"],
            "expected_accept_length": {
                **manifest["growth"]["expected_accept_length"],
                **{k: r["growth"]["expected_accept_length"] for k, r in drafters.items()}},
            "live": {**q["live"], **{k: r["quality"] for k, r in drafters.items()}},
            "repetition_8gram": q["repetition_8gram"],
            "looping_reference_repetition_8gram": q["looping_reference"].get("repetition_8gram"),
            "build_seconds": manifest["build_seconds"], "size_bytes": manifest["size_bytes"],
        }
    except KeyError as exc:
        raise TreeoptError(f"demo manifest lacks {exc}; rebuild the demo") from None
