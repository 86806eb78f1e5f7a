"""``treeopt adaptive``: the report, the engine files written atomically with their flags, the
exported SGLang config through the loader's rules (and the released wheel's loader), and bad
input as one line with exit status 2."""

from __future__ import annotations

import json
import os

import pytest

from treeopt.adaptive import SGLangConfig
from treeopt.cli import main
from treeopt.engines.sglang.adaptive import loader_problems
from treeopt.model.trace import RankTrace

PROFILE = "data/demo/latency/step-eagle-cpu.json"
DYNAMIC = "data/demo/dynamic/eagle-heldout-topk1.npz"


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> str:
    """The demo's held-out EAGLE rank trace, its first 12 sequences."""
    path = tmp_path_factory.mktemp("trace") / "eagle12.npz"
    RankTrace.load("data/demo/traces/eagle-heldout.npz").sequences(12).save(path)
    return str(path)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["adaptive", *argv])
    except SystemExit as exc:  # argparse's usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_sglang_config_written_with_flags(capsys, tmp_path, small_trace):
    out = tmp_path / "cfg.json"
    out.write_text("old")
    report = tmp_path / "report.json"
    code, stdout, err = run(capsys, "--trace", small_trace, "--step-profile", PROFILE,
                            "--batch", "1,2", "--out", str(out), "--report", str(report),
                            "--growth", "data/demo/growth/eagle.json")
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert loader_problems(doc) == [] and sorted(doc) == ["1", "2"]
    rep = json.loads(report.read_text())
    assert rep["sglang"]["tuned"] == doc and rep["format"] == "treeopt.adaptive-report/1"
    tuned = SGLangConfig.from_json(doc, num_steps=rep["sglang"]["num_steps"])
    flags = (tmp_path / "cfg.json.flags").read_text().strip()
    assert stdout.strip() == flags
    assert f"--speculative-adaptive-config {out}" in flags
    assert f"--speculative-num-steps {tuned.num_steps}" in flags
    for side in rep["batches"]:
        assert side["tuned"]["tokens_per_s"] >= side["default"]["tokens_per_s"]
        assert side["tuned"]["tokens_per_s"] >= side["best_fixed"]["tokens_per_s"]
        assert side["static_tree"]["size"] >= 1
    assert "workload: eagle12.npz" in err and "batch" in err
    assert sorted(os.listdir(tmp_path)) == ["cfg.json", "cfg.json.flags", "report.json"]


def test_exported_config_loads_in_the_released_loader(capsys, tmp_path, small_trace):
    from test_adaptive_policies import _wheel_module

    wheel = _wheel_module()  # skips, with the reason, without the wheel
    out = tmp_path / "cfg.json"
    code, _, err = run(capsys, "--trace", small_trace, "--step-profile", PROFILE,
                       "--batch", "1,4", "--out", str(out))
    assert code == 0, err
    cfg, slots = wheel._load_adaptive_config(str(out))
    assert sorted(slots) == [1, 4]
    params = wheel.AdaptiveSpeculativeParams.__new__(wheel.AdaptiveSpeculativeParams)
    assert cfg == json.loads(out.read_text()) and params is not None


@pytest.mark.parametrize("engine, needle", [("vllm", "num_speculative_tokens_per_batch_size"),
                                            ("trtllm", "draft_len_schedule:")])
def test_other_engines_files(capsys, tmp_path, small_trace, engine, needle):
    out = tmp_path / f"{engine}.cfg"
    code, stdout, err = run(capsys, "--engine", engine, "--trace", small_trace,
                            "--step-profile", PROFILE, "--batch", "1,8", "--out", str(out))
    assert code == 0, err
    assert needle in out.read_text() and str(out) in stdout


def test_dynamic_trace_and_shifting_workload(capsys, tmp_path):
    from treeopt.adaptive.workload import ChainAcceptance, by_difficulty
    from treeopt.dynamic.simulate import DynamicTrace

    full = DynamicTrace.load(DYNAMIC)
    small = DynamicTrace(1, full.places[: 250 * 10], full.lengths[:10], full.meta)
    path = tmp_path / "dyn.npz"
    small.save(path)
    code, stdout, err = run(capsys, "--trace", str(path), "--step-profile", PROFILE,
                            "--batch", "2", "--workload", "hard-first")
    assert code == 0, err
    doc = json.loads(stdout)
    assert doc["workload"] == "dyn.npz, hardest first"
    order = by_difficulty(ChainAcceptance.from_dynamic(small), easy_first=False).difficulty()
    assert list(order) == sorted(order)


@pytest.mark.parametrize("args, message", [
    (["--trace", "nope.npz"], "nope.npz: no such file"),
    (["--batch", "0"], "--batch: expected positive integers"),
    (["--batch", "64"], "batch 64: the workload has 12 sequences"),
    (["--sglang-version", "0.5.12"], "SGLang 0.5.12: the adaptive rule replayed here"),
    (["--context", "9"], None),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, small_trace, args, message):
    out = tmp_path / "keep.json"
    out.write_text("kept")
    base = {"--trace": small_trace, "--step-profile": PROFILE, "--batch": "1"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = [x for kv in base.items() for x in kv] + ["--out", str(out)]
    code, stdout, err = run(capsys, *argv)
    if message is None:  # the nearest profiled context: not an error
        assert code == 0, err
        return
    assert code == 2 and stdout == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert out.read_text() == "kept"


def test_growth_needs_a_rank_trace(capsys):
    code, _, err = run(capsys, "--trace", DYNAMIC, "--step-profile", PROFILE, "--batch", "1",
                       "--growth", "data/demo/growth/eagle.json")
    assert code == 2 and "--growth needs a rank trace" in err


def test_the_verify_step_shared_with_the_demos_other_profiles_is_what_the_app_tunes_with(
        capsys, tmp_path, small_trace):
    """``--shared-verify``: the tuned config is the one the demo's own pricing gives (the
    verify step shared with its other drafters' profiles, treeopt.demo.step_costs); a profile
    of another setup is refused in one line."""
    from treeopt.adaptive.report import adaptive_report
    from treeopt.adaptive.workload import ChainAcceptance
    from treeopt.demo.load import load

    demo = load(with_model=False)
    others = [str(p) for p in demo.paths.other_step_profiles("eagle")]
    out = tmp_path / "cfg.json"
    code, _, err = run(capsys, "--trace", small_trace, "--step-profile", PROFILE,
                       "--shared-verify", *others, "--batch", "1,2", "--out", str(out))
    assert code == 0, err
    mine = adaptive_report(ChainAcceptance.from_rank_trace(RankTrace.load(small_trace)),
                           demo.step_costs("eagle"), batches=[1, 2])
    assert json.loads(out.read_text()) == mine.tuned.to_json()
    other = json.loads(open(others[0]).read())
    (tmp_path / "two.json").write_text(json.dumps({**other, "threads": 2}))
    code, _, err = run(capsys, "--trace", small_trace, "--step-profile", PROFILE,
                       "--shared-verify", str(tmp_path / "two.json"), "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and "two.json" in err and "threads" in err
