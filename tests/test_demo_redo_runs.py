"""``demo build --redo runs``: every trace, live check and sweep of a finished demo made again
(what a change in how treeopt records or counts a run needs), with nothing trained and no step
profile measured again."""

from __future__ import annotations

import pytest
from conftest import demo_copy

from treeopt.demo.config import TINY


def _mtimes(root):
    return {p.relative_to(root).as_posix(): p.stat().st_mtime_ns
            for p in root.rglob("*") if p.is_file() and p.name != "manifest.json"}


def test_redo_runs_makes_every_run_again_and_keeps_training_and_profiles(tiny_demos, tmp_path,
                                                                         monkeypatch):
    import torch

    from treeopt.demo import build, stage_drafters, stages
    from treeopt.demo.layout import DemoPaths
    from treeopt.errors import FieldError

    torch.set_num_threads(1)
    cfg = TINY
    out, first = demo_copy(tiny_demos.after, tmp_path)
    paths = DemoPaths(out)
    before = _mtimes(out)
    remade = {p.relative_to(out).as_posix() for name in stages.RUNS_STAGES
              for p in stages.outputs(name, paths, cfg) if p.exists()}
    kept = {p.relative_to(out).as_posix() for p in stages.runs_kept(paths, cfg) if p.exists()}
    assert {paths.trace("eagle").name, paths.sweep("medusa", "cpu").name} <= {
        r.rsplit("/", 1)[-1] for r in remade - kept}
    assert paths.step_profile("eagle").relative_to(out).as_posix() in kept

    def trains(*args, **kwargs):
        raise AssertionError("--redo runs trains nothing")

    monkeypatch.setattr(stage_drafters, "train_drafter", trains)
    logs: list[str] = []
    again = build.build_demo(out, cfg, log=logs.append, redo=(stages.RUNS,))
    after = _mtimes(out)
    for name in remade - kept:
        assert after[name] > before[name], f"{name} was not made again"
    for name in set(before) - (remade - kept) - {n for n in before if n.startswith(
            ("selections/", "adaptive/"))}:  # (those two are priced last by every build)
        assert after.get(name) == before[name], f"{name} was made again"
    assert again["drafters"]["eagle"]["training"] == first["drafters"]["eagle"]["training"]
    assert "[heads] done earlier, reusing" in logs
    with pytest.raises(FieldError, match="one at a time"):
        build.build_demo(out, cfg, log=lambda s: None, redo=(stages.RUNS, stages.TIMING))


def test_a_build_that_runs_no_stage_keeps_where_the_demo_was_measured(tiny_demos, tmp_path):
    """Pricing a finished demo again (every build prices its selections and adaptive configs
    last) measures nothing: its manifest keeps the host its figures came from. A stage run
    again records this host."""
    import json

    from treeopt.demo import build
    from treeopt.profiling.host import cpu_identity

    out, first = demo_copy(tiny_demos.after, tmp_path)
    elsewhere = {**first["environment"], "cpu": {"name": "Elsewhere", "matmul": "amx_bf16"},
                 "platform": "another host"}
    (out / "manifest.json").write_text(json.dumps({**first, "environment": elsewhere}))
    again = build.build_demo(out, TINY, log=lambda s: None)
    assert again["environment"] == elsewhere
    again = build.build_demo(out, TINY, log=lambda s: None, redo=("growth",))
    assert again["environment"]["cpu"] == cpu_identity()
    assert again["environment"]["platform"] != "another host"


def test_a_drafters_stage_stopped_and_resumed_counts_every_run(tiny_demos, tmp_path,
                                                               monkeypatch):
    """The drafters stage keeps each finished drafter's record: stopped in its second drafter
    and resumed, the stage's seconds in the manifest are the drafters' own seconds summed — the
    first drafter's from the stopped run included (the resumed run does not make it again) —
    not the resumed run's alone."""
    import torch

    from treeopt.demo import build, stage_drafters, stages

    torch.set_num_threads(1)
    out, _ = demo_copy(tiny_demos.after, tmp_path)
    first, second = stages.NEW_KINDS[:2]
    real = stage_drafters.kind_sampled

    def stopped_in_second(ctx, kind, temperature):
        if kind == second:
            raise KeyboardInterrupt
        return real(ctx, kind, temperature)

    monkeypatch.setattr(stage_drafters, "kind_sampled", stopped_in_second)
    with pytest.raises(KeyboardInterrupt):
        build.build_demo(out, TINY, log=lambda s: None, redo=(stages.RUNS,))
    ran: list[str] = []

    def counted(ctx, kind, temperature):
        ran.append(kind)
        return real(ctx, kind, temperature)

    monkeypatch.setattr(stage_drafters, "kind_sampled", counted)
    manifest = build.build_demo(out, TINY, log=lambda s: None)
    made = manifest["drafters"]
    assert first not in ran and second in ran  # the first drafter's record kept, not made again
    assert all(made[k]["seconds"] > 0 for k in stages.NEW_KINDS if k in made)
    assert manifest["timings_s"]["drafters"] == pytest.approx(
        sum(made[k]["seconds"] for k in stages.NEW_KINDS if k in made), abs=0.02)
