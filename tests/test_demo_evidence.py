"""The demo's evidence measured with today's method: ``demo build --redo timing`` with the timing
settings re-measures every drafter's step profile, sweep (to a target standard error, with a race
and a step profile alongside) and the dynamic profile, the sweep measures the tree ``select
--demo`` picks, and the manifest says how."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import demo_copy

from treeopt.demo import KINDS
from treeopt.demo.command import command_line
from treeopt.demo.config import TIMING_FLAGS, TINY, DemoConfig, plan
from treeopt.demo.stages import NEW_KINDS
from treeopt.errors import TreeoptError
from treeopt.model.runs import as_run

TARGET, CAP = 0.05, 4  # loose enough for the tiny demo's millisecond steps, a cap to hit
FLAGS = ["--step-target-se", str(TARGET), "--sweep-target-se", str(TARGET),
         "--timing-max-rounds", str(CAP), "--sweep-race", "--sweep-alongside",
         "--sweep-batching", "continuous", "--drafted-sweep", "sizes"]
TODAY = replace(TINY, step_target_se=TARGET, sweep_target_se=TARGET, timing_max_rounds=CAP,
                sweep_race=True, sweep_alongside=True, sweep_batching="continuous",
                drafted_sweep="sizes")


@pytest.fixture(scope="module")
def remeasured(tiny_demos, tmp_path_factory):
    """A tiny demo built with the old settings (a copy of conftest's, built once for the run),
    then re-measured through the CLI with today's: (the demo directory, the first manifest,
    the second)."""
    import torch

    from treeopt.cli import main

    torch.set_num_threads(1)
    out, first = demo_copy(tiny_demos.after, tmp_path_factory.mktemp("evidence"))
    assert main(["demo", "build", "--out", str(out), "--budget-minutes", "0.1", "--no-progress",
                 "--redo", "timing", *FLAGS]) == 0
    return out, first, json.loads((out / "manifest.json").read_text())


def _picks(out: Path, kind: str, tmp_path: Path, monkeypatch) -> dict[int, tuple]:
    """``treeopt select --demo KIND`` on the demo at ``out``: its tree's paths per batch."""
    from treeopt.cli import main
    from treeopt.pricing.selection import Selection

    monkeypatch.setenv("TREEOPT_DEMO", str(out))
    path = tmp_path / f"select-{kind}.json"
    assert main(["select", "--demo", kind, "--out", str(path)]) == 0
    return {p.batch: p.tree.paths for p in Selection.load(path).points}


def test_every_drafter_is_swept_to_the_target_or_the_cap(remeasured):
    from treeopt.demo.layout import DemoPaths
    from treeopt.documents.sweep import Sweep

    out, _, _ = remeasured
    paths = DemoPaths(out)
    for kind in KINDS:
        sweep = Sweep.load(paths.sweep(kind))
        assert (sweep.meta["target_se"], sweep.meta["max_rounds"]) == (TARGET, CAP), kind
        assert sweep.meta["prompts"] == TINY.sweep_prompts
        assert sweep.batches == list(TINY.live_batches)
        for p in sweep.points:
            assert p.se is not None and p.rounds is not None, (kind, p.key)
            assert p.se <= TARGET or p.rounds == CAP, (kind, p.key, p.se, p.rounds)
            assert p.lossless, (kind, p.key)
        for b in sweep.batches:  # the pick raced where the sweep measured another tree best
            pick = sweep.selected(b)
            assert pick is not None
            if pick.key != sweep.best(b).key:
                assert sweep.race(b) is not None, (kind, b)


def test_drafted_chains_are_swept_at_every_chain_size_and_the_pick(remeasured):
    """Re-measured with ``--drafted-sweep sizes``, a lookup drafter's chains verified as drafted
    are swept at every swept size (TINY's are chains) besides select's pick; the first build,
    TINY's "pick", swept the pick alone."""
    from treeopt.demo.layout import DemoPaths
    from treeopt.documents.sweep import Sweep
    from treeopt.registry.kinds import drafter_kind

    out, first, again = remeasured
    assert (first["config"]["drafted_sweep"], again["config"]["drafted_sweep"]) == (
        "pick", "sizes")
    for kind in (k for k in KINDS if drafter_kind(k).lookup):
        sweep = Sweep.load(DemoPaths(out).drafted_sweep(kind))
        assert again["drafters"][kind]["sweep"]["drafted"]["swept"] == "sizes"
        for b in TINY.live_batches:
            sizes = {p.size for p in sweep.points if p.batch == b}
            assert set(TINY.sweep_sizes) <= sizes <= {*TINY.sweep_sizes, sweep.selected(b).size}


def test_step_profiles_are_fresh_and_measured_to_the_target_or_the_cap(remeasured):
    from treeopt.demo.layout import DemoPaths
    from treeopt.documents.step_profile import StepProfile

    out, first, again = remeasured
    paths = DemoPaths(out)
    profiles = [paths.step_profile(k) for k in KINDS] + [paths.dynamic_step_profile()]
    before = {f["path"]: f["sha256"] for f in first["files"]}
    after = {f["path"]: f["sha256"] for f in again["files"]}
    for path in profiles:
        name = path.relative_to(out).as_posix()
        assert after[name] != before[name], name  # measured again
        records = [r for r in StepProfile.load(path).records if r.size > 0 or r.dynamic]
        assert records, name
        for r in records:  # every record's step over its reference, to the target or the cap
            # (a record whose verify time fell below a smaller tree's gets a few rounds more)
            assert r.se is not None and (r.se <= TARGET or r.rounds >= CAP), (name, r)
    for f in first["files"]:  # what was trained, traced and grown is the first build's (the
        # selections and tuned adaptive configs are priced again from the new profiles)
        if not f["path"].startswith(("latency/", "sweep/", "dynamic/selection", "selections/",
                                     "adaptive/")):
            assert after[f["path"]] == f["sha256"], f["path"]


def test_alongside_profiles_hold_every_swept_tree(remeasured):
    from treeopt.demo.layout import DemoPaths
    from treeopt.documents.step_profile import StepProfile
    from treeopt.documents.sweep import Sweep

    out, _, again = remeasured
    paths = DemoPaths(out)
    for kind in KINDS:
        sweep = Sweep.load(paths.sweep(kind))
        assert sweep.meta["alongside"] == f"sweep/{kind}-alongside-cpu.json"
        profile = StepProfile.load(paths.alongside_profile(kind))
        held = {(r.batch, r.max_depth, r.size) for r in profile.records}
        for p in sweep.points:
            if p.size > 0:
                assert (p.batch, p.max_depth, p.size) in held, (kind, p.key)
        record = (again["sweep"][kind] if kind in ("medusa", "hydra")
                  else again["drafters"][kind]["sweep"])
        errors = record["alongside"]["errors"]
        assert [e["batch"] for e in errors] == sweep.batches
        assert all(0 <= e["mean_abs_error"] <= e["max_abs_error"] for e in errors)


def test_the_sweep_measures_the_tree_select_demo_picks(remeasured, tmp_path, monkeypatch):
    from treeopt.demo.layout import DemoPaths
    from treeopt.documents.sweep import Sweep

    out, _, _ = remeasured
    for kind in KINDS:
        picks = _picks(out, kind, tmp_path, monkeypatch)
        sweep = Sweep.load(DemoPaths(out).sweep(kind))
        assert sorted(picks) == sweep.batches and sweep.continuous, kind
        for b, paths in picks.items():
            assert sweep.selected(b).choices == paths, (kind, b)


def test_the_manifest_records_the_method(remeasured):
    out, first, again = remeasured
    for name in TIMING_FLAGS:
        assert again["config"][name] == getattr(TODAY, name), name
    assert again["command"] == command_line(TODAY)
    assert again["command"].endswith(" ".join(FLAGS))
    sweeps = {**again["sweep"], **{k: again["drafters"][k]["sweep"] for k in NEW_KINDS}}
    for kind in KINDS:
        method = sweeps[kind]["method"]
        assert method["measurement"] == {"rounds": TINY.sweep_rounds, "min_seconds": 0.0,
                                         "target_se": TARGET, "max_rounds": CAP}, kind
        assert method["race"] is True and method["prompts"] == TINY.sweep_prompts
        assert method["batching"] == "continuous"
        assert method["alongside"] == f"sweep/{kind}-alongside-cpu.json"
        assert method["step_profile"] == f"latency/step-{kind}-cpu.json"
    steps = {**again["latency"]["step_profiles"],
             **{k: again["drafters"][k]["step_profile"] for k in ("eagle", "draft-model")},
             "dynamic": again["dynamic"]["step_profile"]}
    for name, record in steps.items():
        assert record["measurement"] == {"rounds": TINY.step_rounds, "min_seconds": 0.0,
                                         "target_se": TARGET, "max_rounds": CAP}, name
    assert again["base"] == first["base"] and again["heads"] == first["heads"]
    assert again["drafters"]["eagle"]["training"] == first["drafters"]["eagle"]["training"]


def test_an_interrupted_redo_resumes_when_run_again(remeasured, tmp_path, monkeypatch):
    """Interrupted in Hydra's sweep, the same redo run again keeps Medusa's sweep measured
    before the interruption (a mark in it survives) and measures the rest; measured without a
    profile alongside, no drafter keeps the one of the earlier measurement."""
    import torch

    from treeopt.demo import build, stage_timing, stages
    from treeopt.demo.layout import DemoPaths
    from treeopt.documents.sweep import Sweep

    torch.set_num_threads(1)
    out = tmp_path / "demo"
    shutil.copytree(remeasured[0], out)
    later = replace(TODAY, sweep_target_se=0.04, sweep_alongside=False)
    sweep_of = stages.kind_sweep

    def interrupted(ctx, kind):
        if kind == "hydra":
            raise KeyboardInterrupt
        return sweep_of(ctx, kind)

    monkeypatch.setattr(stage_timing, "kind_sweep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build.build_demo(out, later, log=lambda s: None, redo=(stages.TIMING,))
    monkeypatch.undo()
    work = DemoPaths(tmp_path / ".demo.building")
    doc = json.loads(work.sweep("medusa").read_text())
    assert doc["meta"]["target_se"] == 0.04
    doc["points"][0]["measured"]["speedup"] = 99.0  # a mark only a kept sweep carries
    work.sweep("medusa").write_text(json.dumps(doc))
    logs: list[str] = []
    manifest = build.build_demo(out, later, log=logs.append, redo=(stages.TIMING,))
    assert "[redo] resuming latency, sweep where it stopped" in logs
    assert "[latency] done earlier, reusing" in logs and "[drafters] speed measured again" in logs
    medusa = Sweep.load(DemoPaths(out).sweep("medusa"))
    assert max(p.speedup for p in medusa.points) == 99.0
    for kind in KINDS:
        sweep = Sweep.load(DemoPaths(out).sweep(kind))
        assert (sweep.meta["target_se"], sweep.meta["alongside"]) == (0.04, None), kind
        assert not DemoPaths(out).alongside_profile(kind).exists(), kind
    assert manifest["config"]["sweep_target_se"] == 0.04
    assert not [f for f in manifest["files"] if "alongside" in f["path"]]


def test_redo_timing_refuses_settings_beyond_timing(remeasured, tmp_path):
    from treeopt.demo import build, stages

    out = remeasured[0]
    other = replace(TODAY, head_steps=TINY.head_steps + 1, sweep_target_se=0.02)
    with pytest.raises(TreeoptError, match=r"^redo latency,sweep: the demo in .* was built with "
                                           r"other settings \(head_steps\); redo re-runs"):
        build.build_demo(out, other, log=lambda s: None, redo=(stages.TIMING,))
    with pytest.raises(TreeoptError, match=r"other settings \(sweep_target_se\)"):
        build.build_demo(out, replace(TODAY, sweep_target_se=0.02), log=lambda s: None,
                         redo=("sweep",))  # a timing setting changes with timing redone only
    assert not (out.parent / f".{out.name}.building").exists()  # nothing started


def test_an_old_demo_records_none_of_the_timing_settings_and_counts_as_their_defaults(
        tmp_path):
    from treeopt.demo.build import _differ, _jsonable, settings_differ

    shipped = plan(budget_minutes=120, base_layers=16, medusa_head_layers=8)
    recorded = _jsonable(shipped)
    for name in ("step_min_seconds", "step_target_se", "sweep_min_seconds", "sweep_target_se",
                 "timing_max_rounds", "sweep_race", "sweep_alongside"):
        del recorded[name]  # a demo built before the settings existed
    (tmp_path / "manifest.json").write_text(json.dumps({"config": recorded}))
    assert settings_differ(tmp_path, shipped) == []
    today = replace(shipped, sweep_prompts=16, sweep_target_se=0.015, sweep_min_seconds=36.0,
                    step_target_se=0.02, sweep_race=True, sweep_alongside=True)
    assert settings_differ(tmp_path, today) == [
        "sweep_prompts", "step_target_se", "sweep_min_seconds", "sweep_target_se",
        "sweep_race", "sweep_alongside"]
    assert _differ(tmp_path, today, retime=True) == []


def test_timing_flags_are_checked_as_the_config_names_them(tmp_path, capsys):
    from treeopt.cli import main

    for flags, said in ((["--sweep-target-se", "1.5"], "--sweep-target-se must be in [0, 1)"),
                        (["--timing-max-rounds", "0"], "--timing-max-rounds must be an integer"),
                        (["--step-rounds", "0"], "--step-rounds must be an integer ≥ 1"),
                        (["--sweep-prompts", "4"], "--sweep-prompts must be from the largest "
                                                   "batch, 8, to the 192 held-out prompts, got 4"),
                        (["--live-new-tokens", "300"], "--live-new-tokens must be from 1 to the "
                                                       "traces' 256 tokens, got 300")):
        assert main(["demo", "build", "--out", str(tmp_path / "d"), *flags]) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and "\n" not in err, err
    assert not (tmp_path / "d").exists()
    assert TINY.measurement("sweep").target_se == 0.0  # the preset's: fixed rounds


def test_a_sweep_measures_what_select_picks_from_the_whole_select_trace(tmp_path):
    """A calibration trace whose heads miss on each sequence's first 4 positions and are right
    after them, given as ``select_trace`` to a sweep of 4 new tokens: the sweep measures the
    tree ``select`` picks from the whole trace (as ``treeopt select --trace`` reads it), a
    tree, where the first 4 positions alone would pick none."""
    import numpy as np
    from conftest import tiny_llama
    from test_select import profile_records, typed
    from test_tune import GROWTH, PROMPTS

    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.live_sweep import tune
    from treeopt.documents.measure import Measurement
    from treeopt.drafters.heads import build_heads
    from treeopt.model.trace import RankTrace
    from treeopt.pricing.costs import step_costs
    from treeopt.pricing.throughput import select
    from treeopt.registry.drafter_configs import HeadsConfig

    model = tiny_llama(vocab=64, hidden=32, layers=1)
    heads = build_heads(HeadsConfig(kind="medusa", num_heads=2, hidden_size=32, vocab_size=64),
                        lm_head=model.lm_head).eval()
    costs = step_costs(typed(profile_records("medusa")), kind="medusa", source="s.json")
    late = np.zeros((40, 2), np.int16)
    late[[0, 1, 2, 3, 20, 21, 22, 23]] = -1
    calibration = RankTrace(late, {"top_k": 4, "sequence_positions": [20, 20]})
    never = RankTrace(np.full((40, 2), -1, np.int16), calibration.meta)
    sweep = tune(model, heads, GROWTH, PROMPTS, batch=[1], sizes=[1], out=tmp_path / "s.json",
                 config=DecodeConfig(max_new_tokens=4), measure=Measurement(rounds=1),
                 costs=costs, trace=never, select_trace=calibration)

    def pick(trace: RankTrace) -> tuple:
        return select(GROWTH, costs.verify, draft=costs.draft, overhead=costs.overhead,
                      batch=[1], context=costs.verify.contexts, trace=trace).points[0].tree.paths

    assert pick(as_run(calibration, 5)) == ()  # the first positions alone: no tree
    assert sweep.selected(1).choices == pick(calibration) != ()


def test_a_build_over_a_finished_demo_measures_as_the_demo_was_measured(tmp_path):
    """Timing flags the command line leaves out take a finished demo's values where the demo
    was built otherwise alike (adding drafters needs no flags restated); flags given, and a
    demo built otherwise, keep the config's; an auto dtype matches the demo's own."""
    from treeopt.demo.build import _differ, _jsonable, with_finished_timing

    shipped = replace(TINY, sweep_rounds=2, step_target_se=0.02, dtype="fp32")
    (tmp_path / "manifest.json").write_text(json.dumps({"config": _jsonable(shipped)}))
    said: list[str] = []
    kept = with_finished_timing(tmp_path, replace(TINY, dtype="fp32"), set(), log=said.append)
    assert (kept.sweep_rounds, kept.step_target_se) == (2, 0.02)
    assert said == ["[timing] as the finished demo was measured: step_target_se 0.02, "
                    "sweep_rounds 2"]
    assert _differ(tmp_path, kept, retime=False) == []  # so the demo gains kinds, not rebuilt
    told = with_finished_timing(tmp_path, replace(TINY, dtype="fp32"), {"sweep_rounds"})
    assert (told.sweep_rounds, told.step_target_se) == (TINY.sweep_rounds, 0.02)
    base = "smollm2-135m-instruct"
    (tmp_path / "manifest.json").write_text(json.dumps(
        {"config": _jsonable(replace(shipped, base_model=base))}))
    auto = with_finished_timing(tmp_path, replace(TINY, base_model=base, dtype="auto"), set())
    assert (auto.sweep_rounds, auto.dtype) == (2, "auto")  # the dtype is resolved later
    other = replace(TINY, base_model=base, dtype="fp32", head_steps=TINY.head_steps + 1)
    assert with_finished_timing(tmp_path, other, set()) == other
    assert with_finished_timing(tmp_path / "none", TINY, set()) == TINY


def test_a_timing_setting_the_finished_demo_does_not_record_is_its_default(tmp_path):
    """A setting added since (``step_shared_reference``, ``sweep_together``) that the finished
    demo's manifest lacks was measured the default way: a build adding drafters to it keeps that
    way, not the preset's, unless told."""
    from treeopt.demo.build import _jsonable, with_finished_timing

    recorded = _jsonable(replace(TINY, dtype="fp32"))
    del recorded["step_shared_reference"], recorded["sweep_together"]
    (tmp_path / "manifest.json").write_text(json.dumps({"config": recorded}))
    preset = replace(TINY, dtype="fp32", step_shared_reference=True)  # TINY times together
    said: list[str] = []
    kept = with_finished_timing(tmp_path, preset, set(), log=said.append)
    assert (kept.step_shared_reference, kept.sweep_together) == (False, False)
    assert said == ["[timing] as the finished demo was measured: step_shared_reference False, "
                    "sweep_together False"]
    told = with_finished_timing(tmp_path, preset, {"step_shared_reference"})
    assert (told.step_shared_reference, told.sweep_together) == (True, False)


def test_the_command_line_names_the_timing_flags_it_was_given(tmp_path, monkeypatch):
    from treeopt.cli import main
    from treeopt.demo import build

    seen = {}
    monkeypatch.setattr(build, "build_demo",
                        lambda out, config, **kw: seen.update(kw) or {"config": {}})
    monkeypatch.setattr(build, "summary", lambda manifest: {})
    assert main(["demo", "build", "--out", str(tmp_path / "d"), "--budget-minutes", "0.5",
                 "--sweep-rounds", "2", "--no-sweep-race"]) == 0
    assert seen["own_timing"] == {"sweep_rounds", "sweep_race"}


@pytest.mark.parametrize(("flags", "name", "preset", "default", "value"), [
    (["--step-shared-reference"], "step_shared_reference", False, False, True),
    (["--drafted-sweep", "sizes"], "drafted_sweep", "pick", "sizes", "sizes"),
])
def test_a_timing_flag_reaches_the_config_and_the_command(tmp_path, monkeypatch, flags, name,
                                                           preset, default, value):
    """The pretrained preset measures each step-profile record beside its own reference and
    sweeps a lookup drafter's chains verified as drafted at select's picks alone;
    ``--step-shared-reference`` has a round's records share one, ``--drafted-sweep sizes`` sweeps
    every chain size so too, and the manifest's command says so."""
    from treeopt.cli import main
    from treeopt.demo import build
    from treeopt.demo.config import pretrained

    assert getattr(pretrained(), name) == preset and getattr(DemoConfig(), name) == default
    seen = {}
    monkeypatch.setattr(build, "build_demo", lambda out, config, **kw: seen.update(
        kw, config=config) or {"config": {}})
    monkeypatch.setattr(build, "summary", lambda manifest: {})
    assert main(["demo", "build", "--out", str(tmp_path / "d"), "--base-model",
                 "smollm2-135m-instruct", *flags]) == 0
    assert seen["own_timing"] == {name}
    assert getattr(seen["config"], name) == value
    assert command_line(seen["config"]).endswith(" ".join(flags))


def test_a_drafted_sweep_other_than_sizes_or_pick_is_refused():
    with pytest.raises(TreeoptError, match="drafted_sweep.*'all': expected sizes or pick"):
        replace(TINY, drafted_sweep="all")
