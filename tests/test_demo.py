"""The demo pipeline: a tiny build end to end (seconds), resumption, loading, and the shipped demo."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import demo_copy, unswept_drafters

from treeopt.demo import DEMO_FORMAT, KINDS, demo_paths
from treeopt.demo.command import command_line
from treeopt.demo.config import TINY, plan
from treeopt.demo.corpus import load_corpus, part_of
from treeopt.errors import TreeoptError

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "demo"


@pytest.fixture(scope="module")
def tiny_demo(tiny_demos):
    """The tiny demo, the whole pipeline in seconds (built once for the run: conftest's
    ``tiny_demos``; read only), its manifest and the log of its last build."""
    out = tiny_demos.after
    return out, json.loads((out / "manifest.json").read_text()), tiny_demos.resume_logs


CHECKPOINT = {"draft-model": ("config.json", "model.safetensors", "tokenizer.json"),
              "prompt-lookup": ("drafter.json",),  # n-gram drafters: settings, no weights
              "ngram-trie": ("drafter.json",),
              "suffix": ("drafter.json", "history.npz")}  # its cache warmed by responses


def depth_of(kind: str) -> int:
    """The depths the tiny demo's ``kind`` drafter drafts."""
    return {"prompt-lookup": TINY.lookup_depth, "ngram-trie": TINY.trie_depth,
            "suffix": TINY.trie_depth}.get(
        kind, TINY.num_heads)


def test_tiny_build_writes_every_artifact(tiny_demo):
    out, manifest, _ = tiny_demo
    paths = demo_paths(out)
    for p in (paths.manifest, paths.model / "config.json", paths.model / "model.safetensors",
              paths.model / "tokenizer.json", paths.prompts("heldout"),
              paths.prompts("calibration"), paths.latency("cpu")):
        assert p.is_file(), p
    for kind in KINDS:
        checkpoint = CHECKPOINT.get(kind, ("heads.json", "heads.safetensors"))
        for p in (*(paths.heads(kind) / name for name in checkpoint), paths.trace(kind), paths.trace(kind, heldout=True), paths.growth(kind),
                  paths.growth(kind, method="independent"), paths.step_profile(kind),
                  paths.sweep(kind), paths.trace(kind, temperature=1.0),
                  paths.trace(kind, heldout=True, temperature=1.0),
                  paths.growth(kind, temperature=1.0)):
            assert p.is_file(), p
    for part in ("calibration", "heldout"):
        for k in (1, 2):
            assert paths.dynamic_trace(part, k).is_file()
    assert paths.dynamic_selection("cpu").is_file()
    assert all(row["lossless"] for row in manifest["dynamic"]["live"]["settings"])
    assert not any(p.name.startswith(".") for p in out.parent.iterdir())  # no work dir left
    listed = {f["path"] for f in manifest["files"]}
    assert "model/model.safetensors" in listed and "traces/hydra.npz" in listed


def test_tiny_manifest_is_valid(tiny_demo):
    out, manifest, _ = tiny_demo
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk["format"] == DEMO_FORMAT == manifest["format"]
    assert on_disk["config"]["seed"] == 0 and on_disk["config"]["vocab_size"] == 320
    assert set(on_disk["timings_s"]) == {"tokenizer", "prompts", "base", "head_data", "heads",
                                         "traces", "growth", "quality", "latency", "sweep",
                                         "sampled", "drafters", "dynamic", "prose", "picks",
                                         "selections", "prose_choice", "adaptive_configs"}
    assert on_disk["head_data"]["sequences"] == TINY.head_data_prompts
    assert on_disk["base"]["heldout"]["loss"] > 0
    assert on_disk["tokenizer"]["corpus"]["train"]["files"] > 0
    for kind in KINDS:
        live = (on_disk["quality"]["live"][kind] if kind in ("medusa", "hydra")
                else on_disk["drafters"][kind]["quality"])
        run = live["4"]
        assert run["lossless"] is True
        assert run["mean_accept_length"] >= 1
        for run in live.values():  # the held-out trace holds every step the live check takes
            inside = run["inside_trace"]
            assert inside["positions_per_prompt"] == TINY.max_new_tokens - 1
            assert inside["steps"] == run["steps"] > 0
            assert inside["mean_accept_length"] == pytest.approx(
                run["predicted"]["heldout_trace_step_walk"], rel=1e-9), kind
            assert run["mean_accept_length"] == pytest.approx(inside["mean_accept_length"],
                                                              rel=1e-9), kind
    for row in on_disk["dynamic"]["live"]["settings"]:  # likewise the dynamic traces, to the end
        assert row["lossless"] is True
        assert row["heldout_walk"] == pytest.approx(row["live_expected_accept_length"], rel=1e-9)
    environment = on_disk["environment"]  # the threads the figures were timed on, and the build's
    assert environment["threads"] == TINY.live_threads == 1
    assert environment["build_threads"] == 1  # conftest builds on one


def test_timing_runs_on_its_threads_and_gives_the_build_its_own_back():
    import torch

    from treeopt.demo.stage_timing import threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with threads(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(KeyboardInterrupt), threads(1):  # a stopped timing too
            raise KeyboardInterrupt
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_tiny_artifacts_load_with_their_own_readers(tiny_demo):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace

    out, _, _ = tiny_demo
    paths = demo_paths(out)
    model = AutoModelForCausalLM.from_pretrained(paths.model, local_files_only=True)
    assert model.config.architectures == ["LlamaForCausalLM"]
    assert model.get_input_embeddings().weight.dtype in (torch.float16, torch.float32)
    assert len(AutoTokenizer.from_pretrained(paths.model, local_files_only=True)) == 320
    for kind in KINDS:
        trace = RankTrace.load(paths.trace(kind))
        assert trace.head_kind == kind and trace.heads == depth_of(kind)
        # the positions where a run of the budget starts its steps (no prompt ends at EOS)
        assert trace.positions == 4 * (TINY.max_new_tokens - 1)
        assert Growth.load(paths.growth(kind)).max_nodes <= TINY.max_nodes


def test_load_returns_everything(tiny_demo):
    from treeopt.demo import load
    from treeopt.workbench.datasets import demo_dataset

    out, _, _ = tiny_demo
    demo = load(out)
    assert set(demo.heads) == set(demo.traces) == set(demo.growths) == set(KINDS)
    assert len(demo.prompts) == TINY.heldout_prompts
    assert demo.tokenizer(demo.prompts[0])["input_ids"]
    assert demo.latency is not None and demo.latency.name == "cpu.json"
    assert set(demo_dataset(demo).sources) == set(KINDS)
    from treeopt.documents.sweep import Sweep
    from treeopt.registry.kinds import drafter_kind
    from treeopt.workbench.demo_pricing import demo_pricing

    for kind in KINDS:
        sweep = Sweep.load(demo.sweep(kind))
        assert sweep.batches == list(TINY.live_batches)
        assert all(p.lossless for p in sweep.points)
        # the held-out trace's window walk is each point's steady window, live (EOS, kept tokens)
        assert sweep.meta["step_tokens"] == "kept"
        for p in sweep.points:
            assert p.steady_accept_length == pytest.approx(p.predicted_accept_length, rel=1e-9)
        assert all(sweep.selected(b) is not None for b in sweep.batches)  # select's pick, measured
        # the profile it was priced from, named inside the demo, not in the build's work dir
        assert sweep.meta["predicted"] == f"latency/step-{kind}-cpu.json"
        priced = demo_pricing(demo, kind)
        assert priced is not None and priced.selection.batches == list(TINY.live_batches)
        if drafter_kind(kind).lookup:  # its chains swept again, verified as drafted
            drafted = Sweep.load(demo.sweep(kind, drafted=True))
            assert drafted.meta["verified"] == "as drafted" and drafted.points
            assert {k: drafted.meta[k] for k in ("prompts", "max_new_tokens", "batching")} == {
                k: sweep.meta[k] for k in ("prompts", "max_new_tokens", "batching")}
            assert all(p.lossless for p in drafted.points)
            # TINY sweeps them as the presets do: select's pick alone per batch size
            assert drafted.batches == list(TINY.live_batches)
            assert len(drafted.points) == len(drafted.batches)
            assert all(drafted.selected(b) is not None for b in drafted.batches)
            assert priced.drafted_sweep is not None
            assert priced.drafted_sweep.points == drafted.points
        else:
            assert demo.sweep(kind, drafted=True) is None and priced.drafted_sweep is None
    dynamic = json.loads(demo.paths.dynamic_selection("cpu").read_text())
    assert ".building" not in json.dumps(dynamic)
    light = load(out, with_model=False)
    assert light.model is None and light.heads == {}


def test_tiny_tree_decoding_is_lossless(tiny_demo):
    from treeopt.decoding.loop import DecodeConfig, autoregressive, generate
    from treeopt.demo import load

    demo = load(tiny_demo[0])
    prompt = demo.tokenizer(demo.prompts[0])["input_ids"]
    cfg = DecodeConfig(max_new_tokens=20)
    want = autoregressive(demo.model, prompt, config=cfg).tokens
    for kind in KINDS:
        tree = demo.growths[kind].tree(demo.growths[kind].max_nodes)
        assert generate(demo.model, demo.heads[kind], tree, prompt, config=cfg).tokens == want


def _interrupted_at(stage, out, cfg, monkeypatch):
    """Build ``cfg`` into ``out`` with ``stage`` interrupted (Ctrl-C), then restore the
    pipeline."""
    from treeopt.demo import build, stages

    def interrupted(ctx):
        raise KeyboardInterrupt

    monkeypatch.setattr(stages, "PIPELINE", tuple(
        (n, interrupted if n == stage else f) for n, f in stages.PIPELINE))
    with pytest.raises(KeyboardInterrupt):
        build.build_demo(out, cfg, log=lambda s: None)
    monkeypatch.undo()


def test_interrupted_build_resumes_and_never_publishes_half(tmp_path, monkeypatch):
    import torch

    from treeopt.demo import build

    torch.set_num_threads(1)
    cfg = replace(TINY, seed=3)
    out = tmp_path / "demo"
    _interrupted_at("heads", out, cfg, monkeypatch)
    assert not out.exists()
    assert (tmp_path / ".demo.building" / ".stages" / "base.json").exists()
    logs: list[str] = []
    manifest = build.build_demo(out, cfg, log=logs.append)
    assert "[base] done earlier, reusing" in logs and "[heads] …" in logs
    assert manifest["config"]["seed"] == 3 and (out / "manifest.json").exists()


def test_tiny_sampled_traces_record_their_sampling(tiny_demo):
    from treeopt.model.trace import RankTrace

    out, manifest, _ = tiny_demo
    paths = demo_paths(out)
    for kind in KINDS:
        trace = RankTrace.load(paths.trace(kind, temperature=1.0))
        assert trace.sampling == {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "seed": 0,
                                  "samples_per_prompt": 1}
        assert RankTrace.load(paths.trace(kind)).sampling is None
        record = (manifest["sampled"]["1"][kind] if kind in ("medusa", "hydra")
                  else manifest["drafters"][kind]["sampled"]["1"])
        assert set(record) == {"positions", "expected_accept_length",
                               "heldout_expected_accept_length",
                               "greedy_grown_expected_accept_length"}
        # the tree grown for T is at least as good at T as the greedy-grown one, at every size
        for n, ell in record["expected_accept_length"].items():
            greedy = record["greedy_grown_expected_accept_length"]
            assert n not in greedy or ell >= greedy[n] - 1e-12


def test_a_finished_demo_gains_a_new_stage_without_a_rebuild(tiny_demos, tmp_path):
    """conftest's ``tiny_demos`` finished a build without the prose stage, then built again with
    it: the second build reused every stage and ran prose alone. A ``--redo`` then re-runs the
    stage named, and refuses an unknown stage and changed settings before any work."""
    import torch

    from treeopt.demo import build

    torch.set_num_threads(1)
    first = json.loads((tiny_demos.before / "manifest.json").read_text())
    logs = tiny_demos.resume_logs
    assert "[base] done earlier, reusing" in logs and "[prose] …" in logs
    assert not [line for line in logs if line.endswith(" …") and line != "[prose] …"]
    out, manifest = demo_copy(tiny_demos.after, tmp_path)
    assert "prose" not in first and "prose" in manifest and manifest["base"] == first["base"]
    assert manifest["timings_s"]["base"] == first["timings_s"]["base"]
    cfg, logs = TINY, []
    sweep_file = demo_paths(out).sweep(KINDS[0])
    doc = json.loads(sweep_file.read_text())
    doc["points"][0]["measured"]["speedup"] = 99.0  # a mark a resumed sweep would keep
    sweep_file.write_text(json.dumps(doc))
    again = build.build_demo(out, cfg, log=logs.append, redo=("sweep",))
    assert "[sweep] …" in logs and "[latency] done earlier, reusing" in logs
    assert again["base"] == first["base"]
    assert json.loads(sweep_file.read_text())["points"][0]["measured"]["speedup"] != 99.0
    with pytest.raises(TreeoptError, match="^redo speed: no such stage; the stages are "
                                           "tokenizer, prompts.*, timing .* and runs "):
        build.build_demo(out, cfg, log=logs.append, redo=("speed",))
    other = replace(cfg, step_rounds=cfg.step_rounds + 1)
    with pytest.raises(TreeoptError, match=r"^redo dynamic: the demo in .* was built with other "
                                           r"settings \(step_rounds\); redo re-runs"):
        build.build_demo(out, other, log=logs.append, redo=("dynamic",))
    assert not (out.parent / f".{out.name}.building").exists()  # nothing started


def test_redo_timing_measures_every_speed_figure_again_and_nothing_else(tiny_demos, tmp_path,
                                                                         monkeypatch):
    import torch

    from treeopt.demo import build, stage_dynamic, stages
    from treeopt.demo.layout import DemoPaths

    torch.set_num_threads(1)
    cfg = TINY
    out, first = demo_copy(tiny_demos.after, tmp_path)
    paths = DemoPaths(out)
    timed = [*stages.outputs("latency", paths, cfg), *stages.outputs("sweep", paths, cfg),
             *stages.timing_outputs(paths, cfg)]
    assert {paths.step_profile("eagle"), paths.dynamic_step_profile("cpu")} <= set(timed)
    digest = {f["path"]: f["sha256"] for f in first["files"]}
    timed_names = {p.relative_to(out).as_posix() for p in timed}
    for p in timed:  # marks a re-measurement must replace
        doc = json.loads(p.read_text())
        doc["mark"] = "old"
        p.write_text(json.dumps(doc))

    def interrupted(ctx, traces=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(stage_dynamic, "dynamic_timing", interrupted)
    with pytest.raises(KeyboardInterrupt):
        build.build_demo(out, cfg, log=lambda s: None, redo=(stages.TIMING,))
    monkeypatch.undo()
    logs: list[str] = []
    again = build.build_demo(out, cfg, log=logs.append)  # resumes the re-measurement, no --redo
    assert "[dynamic] speed measured again" in logs and "[base] done earlier, reusing" in logs
    for p in timed:
        assert "mark" not in json.loads(p.read_text()), p
    priced = {f["path"] for f in again["files"]
              if f["path"].startswith(("selections/", "adaptive/"))}  # priced by the timing
    for f in again["files"]:  # weights, traces, growths: untouched (selections: priced anew)
        if f["path"] not in timed_names | priced:
            assert digest[f["path"]] == f["sha256"], f["path"]
    assert again["drafters"]["eagle"]["training"] == first["drafters"]["eagle"]["training"]
    assert again["dynamic"]["selection"]["file"] == first["dynamic"]["selection"]["file"]
    assert again["dynamic"]["live"] == first["dynamic"]["live"]
    assert "[prose_choice] acceptance, points" in logs  # priced last, from the new profiles
    assert again["prose_choice"]["points"]


def test_redo_timing_of_some_batch_sizes_keeps_the_others_and_records_their_own_settings(
        tiny_demos, tmp_path):
    """``--redo timing --batches 2 --sweep-rounds 2 --step-rounds 2``: every step profile and
    sweep is measured again at batch 2 alone, its records and points timed as those flags say
    and the others kept as they were; the config records batch 2's own settings, the sweeps
    theirs, and the manifest's command says how to make it again."""
    import torch

    from treeopt.demo import build, stages
    from treeopt.demo.layout import DemoPaths
    from treeopt.documents.step_profile import StepProfile
    from treeopt.documents.sweep import BY_BATCH, Sweep

    torch.set_num_threads(1)
    cfg = TINY
    out, first = demo_copy(tiny_demos.after, tmp_path)
    paths = DemoPaths(out)
    kinds = first["config"]["kinds"]
    profiles = [paths.step_profile(k, "cpu") for k in kinds]
    sweeps = [p for k in kinds for p in (paths.sweep(k, "cpu"), paths.drafted_sweep(k, "cpu"))
              if p.is_file()]
    before = {p: StepProfile.load(p) for p in profiles} | {p: Sweep.load(p) for p in sweeps}
    apart = replace(cfg, sweep_rounds=2, step_rounds=2)
    logs: list[str] = []
    manifest = build.build_demo(out, apart, log=logs.append, redo=(stages.TIMING,),
                                own_timing={"sweep_rounds", "step_rounds"}, batches=(2,))
    assert manifest["config"]["batch_timing"] == {"2": {"step_rounds": 2, "sweep_rounds": 2}}
    assert manifest["config"]["sweep_rounds"] == cfg.sweep_rounds  # the rest: as they were
    assert "--redo timing --batches 2 --step-rounds 2 --sweep-rounds 2" in manifest["command"]
    for stage in stages.TIMING_STAGES:  # the time spent on their figures in all
        assert manifest["timings_s"][stage] > first["timings_s"][stage]
    for p in profiles:
        old, new = before[p], StepProfile.load(p)
        assert [r for r in new.records if r.batch == 1] == [r for r in old.records
                                                            if r.batch == 1], p
        assert min(r.rounds for r in new.records if r.batch == 2) >= 2, p
    for p in sweeps:
        old, new = before[p], Sweep.load(p)
        assert [q.key for q in new.points if q.batch == 1] == [q.key for q in old.points
                                                               if q.batch == 1], p
        assert ([q.tree_tokens_per_s for q in new.points if q.batch == 1]
                == [q.tree_tokens_per_s for q in old.points if q.batch == 1]), p
        assert {q.rounds for q in new.points if q.batch == 2} == {2}, p
        assert new.meta[BY_BATCH]["2"]["rounds"] == 2 and new.timing(1)["rounds"] == 1
    digest = {f["path"]: f["sha256"] for f in first["files"]}
    timed = {p.relative_to(out).as_posix() for p in [*profiles, *sweeps]}
    for f in manifest["files"]:  # weights, traces, growths, the verify table: untouched
        if f["path"] not in timed and not f["path"].startswith(
                ("selections/", "adaptive/", "latency/step-eagle-dynamic",
                 "dynamic/selection")):
            assert digest[f["path"]] == f["sha256"], f["path"]
    with pytest.raises(TreeoptError, match="^batches goes with redo timing alone, not redo "
                                           "sweep$"):
        build.build_demo(out, cfg, redo=("sweep",), batches=(2,), own_timing=set())
    with pytest.raises(TreeoptError, match=r"^batches must be among the batch sizes the demo "
                                           r"times \(1,2\), got 4$"):
        build.build_demo(out, cfg, redo=(stages.TIMING,), batches=(4,), own_timing=set())
    with pytest.raises(TreeoptError, match=r"^batches times a batch size apart by its "
                                           r"measurement settings alone \(step_rounds, .*\), "
                                           r"not by sweep_prompts$"):
        build.build_demo(out, cfg, redo=(stages.TIMING,), batches=(2,),
                         own_timing={"sweep_prompts"})
    whole = build.build_demo(out, cfg, log=logs.append, redo=(stages.TIMING,),
                             own_timing=set())  # timed whole again: every batch size alike
    assert whole["config"]["batch_timing"] == {} and "--batches" not in whole["command"]
    assert all(BY_BATCH not in Sweep.load(p).meta for p in sweeps)


def test_a_stopped_re_measurement_resumes_the_drafter_it_stopped_in(tiny_demos, tmp_path,
                                                                    monkeypatch):
    """The step profile and the sweep are written as they go: a re-measurement stopped inside
    a drafter's sweep leaves part of it on disk. The resumed run finishes that sweep (every
    batch size) and measures no drafter it had finished again."""
    import torch

    from treeopt.demo import build, stage_timing, stages
    from treeopt.demo.layout import DemoPaths

    torch.set_num_threads(1)
    cfg = TINY
    out, _ = demo_copy(tiny_demos.after, tmp_path)
    first, second = stages.NEW_KINDS[:2]
    measured: list[str] = []
    real = stages.drafter_timing

    def stopped_inside(ctx, kind):
        measured.append(kind)
        if kind != second:
            return real(ctx, kind)
        stages.kind_step_profile(ctx, kind)
        sweep = ctx.paths.sweep(kind, cfg.device)
        doc = json.loads((out / sweep.relative_to(ctx.paths.root)).read_text())
        doc["points"] = [p for p in doc["points"] if p["batch"] == cfg.live_batches[0]]
        doc["summary"] = [r for r in doc["summary"] if r["batch"] == cfg.live_batches[0]]
        sweep.write_text(json.dumps(doc))  # the first batch size measured, then the stop
        raise KeyboardInterrupt

    monkeypatch.setattr(stage_timing, "drafter_timing", stopped_inside)
    with pytest.raises(KeyboardInterrupt):
        build.build_demo(out, cfg, log=lambda s: None, redo=(stages.TIMING,))
    assert measured == [first, second]
    monkeypatch.setattr(stage_timing, "drafter_timing",
                        lambda ctx, kind: measured.append(kind) or real(ctx, kind))
    manifest = build.build_demo(out, cfg, log=lambda s: None)
    monkeypatch.undo()
    assert measured.count(first) == 1 and measured.count(second) == 2
    sweep = json.loads(DemoPaths(out).sweep(second, cfg.device).read_text())
    assert sorted({p["batch"] for p in sweep["points"]}) == sorted(cfg.live_batches)
    # the manifest's record of that sweep is its last: the drafters stage's, or the picks
    # step's where it priced the sweep again with the drafters profiled after it
    assert manifest["drafters"][second]["sweep"]["summary"] == sweep["summary"]


def test_redo_quality_checks_the_heads_and_every_drafter_again(tiny_demos, tmp_path, monkeypatch):
    """``--redo quality`` decodes every kind's trees again — the heads' in the quality stage,
    the drafters' inside the drafters stage — and a stopped run checks only the drafters it had
    not; nothing else is made again."""
    import torch

    from treeopt.demo import build, stage_quality, stages

    torch.set_num_threads(1)
    cfg = TINY
    out, first = demo_copy(tiny_demos.after, tmp_path)
    checked: list[str] = []
    real = stages.kind_quality

    def stopped_at_second(ctx, kind, reference):
        checked.append(kind)
        if kind == stages.NEW_KINDS[1]:
            raise KeyboardInterrupt
        return real(ctx, kind, reference)

    monkeypatch.setattr(stage_quality, "kind_quality", stopped_at_second)
    with pytest.raises(KeyboardInterrupt):
        build.build_demo(out, cfg, log=lambda s: None, redo=("quality",))
    assert checked == [*stages.HEAD_KINDS, *stages.NEW_KINDS[:2]]
    checked.clear()
    monkeypatch.setattr(stage_quality, "kind_quality",
                        lambda ctx, kind, reference: checked.append(kind) or real(ctx, kind,
                                                                                  reference))
    logs: list[str] = []
    again = build.build_demo(out, cfg, log=logs.append)  # resumes the redo, no --redo
    monkeypatch.undo()
    assert checked == list(stages.NEW_KINDS[1:]) and "[drafters] quality checked again" in logs
    assert again["drafters"]["eagle"]["training"] == first["drafters"]["eagle"]["training"]
    digest = {f["path"]: f["sha256"] for f in first["files"]}
    assert all(digest[f["path"]] == f["sha256"] for f in again["files"])  # no file made again
    for kind in stages.NEW_KINDS:
        assert "inside_trace" in again["drafters"][kind]["quality"]["4"]


def test_corpus_split_is_deterministic_and_disjoint():
    a, b = load_corpus(max_files=40), load_corpus(max_files=40)
    assert a.fingerprint() == b.fingerprint()
    names = [{f.path for f in a.part(p)} for p in ("train", "calibration", "heldout")]
    assert not (names[0] & names[1] or names[0] & names[2] or names[1] & names[2])
    for path in names[1]:
        assert part_of(path, calibration=0.08, heldout=0.08) == "calibration"
    with pytest.raises(TreeoptError, match="unknown"):
        a.part("test")


def test_plan_sizes_to_the_budget():
    small, large = plan(budget_minutes=10), plan(budget_minutes=40)
    assert large.base.steps > small.base.steps and large.head_steps > small.head_steps
    assert plan(budget_minutes=1).base == TINY.base
    with pytest.raises(TreeoptError, match="^device 'tpu': expected one of"):
        plan(device="tpu")


def test_plan_of_a_deeper_base_keeps_the_steps_in_a_longer_budget():
    preset, deep = plan(budget_minutes=30), plan(budget_minutes=60, base_layers=16)
    assert (preset.base.num_layers, deep.base.num_layers) == (8, 16)
    assert (deep.base.steps, deep.head_steps) == (preset.base.steps, preset.head_steps)
    assert replace(deep.base, num_layers=8) == preset.base
    with pytest.raises(TreeoptError, match="^base_layers must be at least 1, got 0"):
        plan(base_layers=0)


def test_medusa_heads_get_their_own_depth_and_the_command_says_so():
    deep = plan(budget_minutes=120, base_layers=16, medusa_head_layers=8)
    assert [deep.layers_of(k) for k in ("medusa", "hydra", "eagle", "draft-model")] == [8, 2, 1, 1]
    assert plan(budget_minutes=120).layers_of("medusa") == 2
    assert plan(budget_minutes=120, medusa_head_layers=2) == plan(budget_minutes=120)
    assert plan(budget_minutes=1, medusa_head_layers=3).layers_of("medusa") == 3  # tiny build
    assert command_line(deep).endswith("--base-layers 16 --medusa-head-layers 8 --device cpu "
                                       "--seed 0")
    with pytest.raises(TreeoptError, match="^medusa_head_layers must be at least 1, got 0"):
        plan(medusa_head_layers=0)


def test_a_setting_the_finished_demo_does_not_record_counts_as_its_default(tmp_path):
    from treeopt.demo.build import _jsonable, settings_differ

    recorded = _jsonable(plan(budget_minutes=120, base_layers=16))
    del recorded["medusa_head_layers"]  # a demo built before the setting existed
    (tmp_path / "manifest.json").write_text(json.dumps({"config": recorded}))
    assert settings_differ(tmp_path, plan(budget_minutes=120, base_layers=16)) == []
    deeper = plan(budget_minutes=120, base_layers=16, medusa_head_layers=8)
    assert settings_differ(tmp_path, deeper) == ["medusa_head_layers"]


def test_a_tiny_build_trains_medusa_heads_of_the_depth_asked(tmp_path):
    import torch

    from treeopt.demo import build
    from treeopt.drafters.checkpoints import read_heads_config

    torch.set_num_threads(1)
    manifest = build.build_demo(  # the heads alone: no other drafter reads the setting
        tmp_path / "demo", replace(TINY, medusa_head_layers=3, kinds=("medusa", "hydra")),
        log=lambda s: None)
    paths = demo_paths(tmp_path / "demo")
    assert read_heads_config(paths.heads("medusa")).num_layers == 3
    assert read_heads_config(paths.heads("hydra")).num_layers == TINY.head_layers
    assert manifest["heads"]["medusa"]["layers"] == 3
    assert manifest["config"]["medusa_head_layers"] == 3


def test_a_medusa_only_setting_makes_medusa_again_and_keeps_the_rest(tiny_demos, tmp_path,
                                                                     monkeypatch):
    import torch

    from treeopt.demo import build, stages
    from treeopt.documents.sweep import Sweep
    from treeopt.drafters.checkpoints import read_heads_config

    torch.set_num_threads(1)
    cfg = TINY
    out, first = demo_copy(tiny_demos.after, tmp_path)  # as read back (string keys)
    deeper = replace(cfg, medusa_head_layers=3)
    _interrupted_at("sweep", out, deeper, monkeypatch)
    assert (tmp_path / ".demo.building" / ".stages" / "sweep.kept.json").exists()
    logs: list[str] = []
    again = build.build_demo(out, deeper, log=logs.append)  # resumes at the sweep
    assert "[base] done earlier, reusing" in logs and "[heads] done earlier, reusing" in logs
    assert "[sweep] medusa again, the other kinds' work kept …" in logs
    assert "[drafters] done earlier, reusing" in logs
    paths = demo_paths(out)
    assert read_heads_config(paths.heads("medusa")).num_layers == 3
    assert again["config"]["medusa_head_layers"] == 3 and again["heads"]["medusa"]["layers"] == 3
    before = {f["path"]: f["sha256"] for f in first["files"]}
    after = {f["path"]: f["sha256"] for f in again["files"]}
    assert set(before) == set(after)
    changed = {p for p in after if after[p] != before[p]}
    assert "heads/medusa/heads.safetensors" in changed
    medusa = {p.relative_to(out).as_posix() for name in stages.KIND_STAGES
              for p in stages.kind_outputs(name, ("medusa",), paths, cfg)}
    # priced from Medusa's new files: every drafter's selection and the adaptive configs price
    # their verify step with Medusa's step profile too (treeopt.demo.step_costs)
    shipped = {p for p in after if p.startswith(("selections/", "adaptive/sglang-"))}
    # the other drafters' sweeps are priced again with it and their picks marked anew (the build's
    # picks step, treeopt.demo.stage_picks): every point they measured is kept as measured
    swept = {p for p in changed - medusa if p.startswith("sweep/") and "alongside" not in p}
    assert changed <= medusa | shipped | swept | {"heads/medusa/heads.json"}, changed - medusa
    for path in swept:
        measured = {(p.key, p.choices, p.speedup) for p in Sweep.load(out / path).points}
        assert {(p.key, p.choices, p.speedup)
                for p in Sweep.load(tiny_demos.after / path).points} <= measured, path
    assert paths.trace("medusa").relative_to(out).as_posix() in changed
    for name in stages.KIND_STAGES:  # Hydra's records are the finished demo's, Medusa's new
        made, kept = (r[name] for r in (again, first))
        assert json.dumps(made).count('"hydra"') == json.dumps(kept).count('"hydra"')
    assert json.loads(json.dumps(again["prose"]["hydra"])) == first["prose"]["hydra"]
    assert again["heads"]["hydra"] == first["heads"]["hydra"]
    assert again["quality"]["live"]["hydra"] == first["quality"]["live"]["hydra"]
    assert again["quality"]["live"]["medusa"] != first["quality"]["live"]["medusa"]
    # Hydra's sweep record: the finished demo's, unless Medusa's new profile priced Hydra's
    # sweep again (the picks step; its points kept as measured, checked above), then the new one
    assert again["sweep"]["hydra"]["summary"] == json.loads(
        paths.sweep("hydra", cfg.device).read_text())["summary"]
    if "hydra" not in again["picks"]["swept_again"]:
        assert again["sweep"]["hydra"] == first["sweep"]["hydra"]
    assert again["latency"]["file"] == first["latency"]["file"]
    assert again["latency"]["step_profiles"]["hydra"] == first["latency"]["step_profiles"]["hydra"]
    assert again["sampled"]["1"]["hydra"] == first["sampled"]["1"]["hydra"]
    assert unswept_drafters(again, again["picks"]["swept_again"]) == unswept_drafters(
        first, again["picks"]["swept_again"])  # but a sweep priced again
    assert again["dynamic"] == first["dynamic"]
    assert again["base"] == first["base"]
    assert "--medusa-head-layers 3" in again["command"]


def test_cli_build_rejects_a_bad_depth(tmp_path, capsys):
    from treeopt.cli import main

    assert main(["demo", "build", "--out", str(tmp_path / "d"), "--base-layers", "0"]) == 2
    assert capsys.readouterr().err.strip().endswith("--base-layers must be at least 1, got 0")
    assert main(["demo", "build", "--out", str(tmp_path / "d"), "--medusa-head-layers", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--medusa-head-layers must be at least 1, got 0") and "\n" not in err
    assert not (tmp_path / "d").exists()


def test_cli_info_and_missing_demo(tiny_demo, tmp_path, capsys):
    from treeopt.cli import main

    assert main(["demo", "info", "--demo-dir", str(tiny_demo[0])]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["paths"]["hydra_trace"].endswith("traces/hydra.npz")
    assert main(["demo", "info", "--demo-dir", str(tmp_path)]) == 2
    assert "no demo here" in capsys.readouterr().err


def test_import_needs_no_torch():
    code = "import treeopt.demo, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ----- the shipped demo ---------------------------------------------------------------------
shipped = pytest.mark.skipif(not (SHIPPED / "manifest.json").exists(),
                             reason="no shipped demo in data/demo")


@shipped
def test_shipped_demo_loads_and_meets_the_quality_bar():
    from treeopt.demo import load

    demo = load()
    m = demo.manifest
    ell = m["growth"]["expected_accept_length"]
    for n in ("4", "16", "64"):
        assert ell["hydra"][n] > ell["medusa"][n]
    assert set(KINDS) - set(demo.kinds) <= {"prompt-lookup", "ngram-trie", "suffix"}  # added since
    for kind in demo.kinds:
        runs = demo.live_quality(kind)
        assert set(runs) == {"16", "64"}
        for run in runs.values():
            assert run["lossless"] is True
            # the held-out trace's walk is exact over the steps inside that trace (up to
            # numerics: the trace was calibrated in other batches than the live check ran)
            assert run["inside_trace"]["mean_accept_length"] == pytest.approx(
                run["predicted"]["heldout_trace_step_walk"], rel=0.005), kind
            if "fidelity_stderr" in run:  # the calibration trace predicts the live mean
                assert abs(run["fidelity"]) < 0.03 and run["fidelity_stderr"] > 0
    looping = m["quality"]["looping_reference"]["repetition_8gram"]
    assert m["quality"]["repetition_8gram"] < looping  # below a model that repeats one token
    assert m["size_bytes"] < 20 * 2**20
    assert min(t.positions for t in demo.traces.values()) >= 20_000


@shipped
def test_shipped_greedy_tree_decoding_is_lossless():
    from treeopt.decoding.loop import DecodeConfig, autoregressive, generate
    from treeopt.demo import load

    demo = load()
    cfg = DecodeConfig(max_new_tokens=48)
    for prompt in demo.prompts[:2]:
        ids = demo.tokenizer(prompt)["input_ids"]
        want = autoregressive(demo.model, ids, config=cfg).tokens
        for kind in demo.kinds:
            got = generate(demo.model, demo.heads[kind], demo.growths[kind].tree(16), ids,
                           config=cfg)
            assert got.tokens == want
            assert got.stats.mean_accept_length > 1.0


