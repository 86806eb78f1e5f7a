"""The model sub-commands end to end, through ``treeopt ARGS`` run as its subprocess would be
(:mod:`in_process`: the test process has torch imported already)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from in_process import treeopt

pytest.importorskip("torch")

from treeopt.documents.step_profile import StepProfile  # noqa: E402
from treeopt.documents.sweep import Sweep  # noqa: E402
from treeopt.documents.verify_report import VerifyReport  # noqa: E402
from treeopt.model.trace import RankTrace  # noqa: E402


def run(*args, cwd=None):
    return treeopt(*args, cwd=cwd, env={**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"})


def assert_user_error(proc, *fragments):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, tiny_model_dir, prompts_file):
    """train-heads, then calibrate: the files later tests read."""
    d = tmp_path_factory.mktemp("cli")
    heads = d / "heads"
    proc = run("train-heads", "--model", tiny_model_dir, "--kind", "hydra", "--data",
               prompts_file, "--generate", "24", "--num-heads", "3", "--steps", "8",
               "--seq-len", "24", "--batch-size", "4", "--out", heads)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["kind"] == "hydra" and summary["steps"] == 8
    assert (heads / "heads.json").exists() and (heads / "heads.safetensors").exists()
    for i in range(2):
        proc = run("calibrate", "--model", tiny_model_dir, "--heads", heads, "--prompts",
                   prompts_file, "--max-new-tokens", "16", "--top-k", "8", "--batch-size", "2",
                   "--shard", f"{i}/2", "--out", d / "t.npz")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["shard"] == f"{i}/2"
        assert not list(d.glob(".*parts"))  # finished: the resume folder is gone
    return d


def test_trace_merge_and_verify(workdir, tiny_model_dir, prompts_file):
    shards = [workdir / f"t.shard-{i}-of-2.npz" for i in range(2)]
    proc = run("trace", "merge", *shards, "--out", workdir / "t.npz")
    assert proc.returncode == 0, proc.stderr
    with np.load(workdir / "t.npz", allow_pickle=False) as z:
        meta = json.loads(str(z["meta"]))
        assert z["ranks"].shape == (6 * (16 - 1), 3)  # the positions a 16-token run visits
    assert (meta["head_kind"], meta["top_k"], meta["sequences"]) == ("hydra", 8, 6)

    (workdir / "tree.json").write_text("[[0], [1], [0, 0], [0, 1], [0, 0, 0]]")
    proc = run("verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
               workdir / "tree.json", "--prompts", prompts_file, "--max-new-tokens", "12",
               "--trace", workdir / "t.npz", "--out", workdir / "report.json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((workdir / "report.json").read_text())
    assert report["outputs_match"] is True and report["lossless"] is True
    verdict = [ln for ln in proc.stderr.splitlines() if ln.startswith("verify: ")]
    assert len(verdict) == 1  # the figures a person reads first, in one line
    live, want = (report["tree_decoding"]["mean_accept_length"],
                  report["predicted"]["mean_accept_length"])
    assert (f"{report['speedup']:.3f}× over autoregressive decoding" in verdict[0]
            and f"E[L] {live:.2f} live, {want:.2f} predicted per step" in verdict[0]
            and verdict[0].endswith("outputs equal on all 6 prompts: lossless"))
    reference = report["model_generate"]
    assert (reference["tree_equals_generate"], reference["autoregressive_equals_generate"],
            reference["prompts"]) == (True, True, 6)
    probe = report["support_probe"]
    assert probe["prefix_tokens"] == 3 and probe["max_abs_hidden_diff"] <= probe["tolerance"]
    assert report["tree_decoding"]["tokens"] == report["autoregressive"]["tokens"]
    assert report["tree"]["size"] == 5
    pred = report["predicted"]
    assert pred["acceptance"] == "per step"  # calibrate records the trace's sequences
    assert pred["measured"] == report["tree_decoding"]["mean_accept_length"]
    assert pred["relative_difference"] == pytest.approx(
        (pred["measured"] - pred["mean_accept_length"]) / pred["mean_accept_length"])
    # the live steps that start inside the trace's positions are the steps its walk takes:
    # the same prompts, teacher forced on the same greedy continuations, so equal exactly
    inside = pred["inside_trace"]
    assert inside["prompts_match"] is True  # calibrate recorded these prompts' digests
    assert (inside["sequences"], inside["measured_steps"]) == (6, inside["steps"])
    assert inside["steps"] == report["tree_decoding"]["steps"]  # every live step: the trace
    # (16 tokens) holds each position a 12-token run starts a step at
    assert inside["measured"] == pytest.approx(inside["mean_accept_length"], rel=1e-12)
    assert inside["relative_difference"] == pytest.approx(0.0, abs=1e-12)
    # by default a sample, at least 16 prompts' worth: all 6 here, each decoded once
    assert (report["prompts"], report["rounds"], report["sampled_batches"]) == (6, 1, 6)
    assert len(report["round_speedups"]) == 6 and report["speedup_se"] is not None
    typed = VerifyReport.load(workdir / "report.json")  # the file is the typed report's JSON
    assert typed.to_json() == report and typed.outputs_match is True
    assert typed.run == {k: report[k] for k in ("model", "heads_dir", "device", "dtype",
                                                "attention")}


def test_rerun_of_a_finished_shard_is_skipped(workdir, tiny_model_dir, prompts_file):
    target = workdir / "t.shard-0-of-2.npz"
    before = target.stat().st_mtime_ns
    env_shard = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}
    proc = treeopt("calibrate", "--model", tiny_model_dir, "--heads", workdir / "heads",
                   "--prompts", prompts_file, "--max-new-tokens", "16", "--top-k", "8",
                   "--batch-size", "2", "--out", workdir / "t.npz", env=env_shard)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["shard"] == "0/2"  # taken from torchrun's RANK/WORLD_SIZE
    assert target.stat().st_mtime_ns == before


def test_tree_deeper_than_the_trace_or_beyond_its_top_k(workdir, tiny_model_dir, prompts_file):
    (workdir / "deep.json").write_text("[[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]]")
    proc = run("verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
               workdir / "deep.json", "--prompts", prompts_file,
               "--trace", workdir / "t.shard-0-of-2.npz")
    assert_user_error(proc, "treeopt verify: error:", "depth 4", "only 3 heads")
    (workdir / "wide.json").write_text("[[0], [9]]")
    proc = run("verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
               workdir / "wide.json", "--prompts", prompts_file,
               "--trace", workdir / "t.shard-0-of-2.npz")
    assert_user_error(proc, "rank 9", "top-8")


def test_heads_of_another_model(workdir, tmp_path, prompts_file):
    from conftest import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer(320)
    other = tmp_path / "other"
    tiny_llama(vocab=len(tok), hidden=32).save_pretrained(other)
    tok.save_pretrained(other)
    proc = run("calibrate", "--model", other, "--heads", workdir / "heads", "--prompts",
               prompts_file, "--out", tmp_path / "t.npz")
    assert_user_error(proc, "heads have hidden size 64", "the model has hidden size 32")
    assert not (tmp_path / "t.npz").exists()


def test_bad_prompts_and_missing_model(workdir, tiny_model_dir, tmp_path, prompts_file):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "no prompt field"}\n')
    proc = run("calibrate", "--model", tiny_model_dir, "--heads", workdir / "heads",
               "--prompts", bad, "--out", tmp_path / "t.npz")
    assert_user_error(proc, "bad.jsonl:1", "'prompt' field")
    (tmp_path / "empty").mkdir()
    proc = run("calibrate", "--model", tmp_path / "empty", "--heads", workdir / "heads",
               "--prompts", prompts_file, "--out", tmp_path / "t.npz")
    assert_user_error(proc, "no config.json")


def test_merge_of_mismatched_shards(workdir, tmp_path):
    from treeopt import RankTrace

    other = tmp_path / "o.npz"
    RankTrace(np.zeros((3, 2), np.int16), {"top_k": 8, "head_kind": "hydra"}).save(other)
    proc = run("trace", "merge", workdir / "t.shard-0-of-2.npz", other, "--out", tmp_path / "m.npz")
    assert_user_error(proc, "treeopt trace: error:", "2 heads")
    assert not (tmp_path / "m.npz").exists()


def test_verify_a_batch_in_rounds(workdir, tiny_model_dir, prompts_file):
    (workdir / "tree.json").write_text("[[0], [1], [0, 0], [0, 1], [0, 0, 0]]")
    proc = run("verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
               workdir / "tree.json", "--prompts", prompts_file, "--max-new-tokens", "10",
               "--batch", "3", "--rounds", "2", "--prompt-count", "all")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["batch"], report["rounds"], report["outputs_match"]) == (3, 2, True)
    assert "sampled_batches" not in report and report["prompts"] == 6
    assert len(report["round_speedups"]) == 2 and report["speedup_spread"] >= 0
    assert report["tree_decoding"]["tokens"] == 6 * 10  # every prompt, two batches of three
    assert report["batching"] == "static"
    proc = run("verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
               workdir / "tree.json", "--prompts", prompts_file, "--max-new-tokens", "10",
               "--batch", "4", "--rounds", "1", "--prompt-count", "all", "--batching",
               "continuous")  # 4 rows; the two that finish first take the last two prompts
    assert proc.returncode == 0, proc.stderr
    continuous = json.loads(proc.stdout)
    assert (continuous["batching"], continuous["batch"], continuous["outputs_match"]) == (
        "continuous", 4, True)
    assert continuous["tree_decoding"]["tokens"] == 6 * 10
    proc = run("verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
               workdir / "tree.json", "--prompts", prompts_file, "--batch", "7")
    assert_user_error(proc, "--batch 7 is larger than the 6 prompts")
    proc = run("verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
               workdir / "tree.json", "--prompts", prompts_file, "--min-seconds", "-2")
    assert_user_error(proc, "--min-seconds must be ≥ 0, got -2.0")
    proc = run("verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
               workdir / "tree.json", "--prompts", prompts_file, "--target-se", "1.5")
    assert_user_error(proc, "--target-se must be in [0, 1), got 1.5")
    proc = run("verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
               workdir / "tree.json", "--prompts", prompts_file, "--max-new-tokens", "4",
               "--rounds", "1", "--min-seconds", "0.2", "--prompt-count", "4")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["rounds"] >= 1 and report["prompts"] == 4
    assert report["tree_decoding"]["seconds"] + report["autoregressive"]["seconds"] > 0


@pytest.fixture(scope="module")
def profiled(workdir, tiny_model_dir, prompts_file):
    """A growth of the calibrated trace and the live step profiled on it (batch 1 and 2)."""
    from treeopt import RankTrace, grow

    grow(RankTrace.load(workdir / "t.shard-0-of-2.npz"), method="empirical",
         max_nodes=6).save(workdir / "growth.json")
    proc = run("profile", "step", "--model", tiny_model_dir, "--heads", workdir / "heads",
               "--growth", workdir / "growth.json", "--prompts", prompts_file, "--batch", "1,2",
               "--sizes", "1,2,4", "--max-new-tokens", "8", "--rounds", "1", "--out",
               workdir / "step.json")
    assert proc.returncode == 0, proc.stderr
    return workdir / "step.json"


def test_profile_step_refuses_bad_input_before_loading_a_model(workdir, tiny_model_dir,
                                                               prompts_file, profiled):
    base = ["profile", "step", "--model", tiny_model_dir, "--heads", workdir / "heads",
            "--growth", workdir / "growth.json", "--prompts", prompts_file, "--out",
            workdir / "other-step.json"]
    assert_user_error(run(*base, "--batch", "1", "--sequences", "0"),
                      "--sequences must be ≥ 1, got 0")
    assert_user_error(run(*base, "--batch", "99"), "--batch 99 is larger than the")
    assert_user_error(run(*base, "--batch", "1", "--target-se", "-0.01"),
                      "--target-se must be in [0, 1), got -0.01")
    assert not (workdir / "other-step.json").exists()


def test_profile_step_with_one_shared_reference(workdir, tiny_model_dir, prompts_file, profiled):
    """``--shared-reference``: recorded in the profile, and a resume without it refused in one
    line naming both ways, the file kept."""
    out = workdir / "shared-step.json"
    base = ["profile", "step", "--model", tiny_model_dir, "--heads", workdir / "heads",
            "--growth", workdir / "growth.json", "--prompts", prompts_file, "--sizes", "1,2",
            "--max-new-tokens", "8", "--rounds", "1", "--out", out]
    proc = run(*base, "--batch", "1", "--shared-reference")
    assert proc.returncode == 0, proc.stderr
    first = out.read_text()
    assert StepProfile.load(out).meta["references"] == "shared"
    assert StepProfile.load(profiled).meta["references"] == "own"
    assert_user_error(run(*base, "--batch", "1,2"),
                      f"{out}: profiled with other references (shared, not own); write to "
                      "another path")
    assert out.read_text() == first


def test_tune_measures_every_point_beside_its_prediction(workdir, tiny_model_dir, prompts_file,
                                                         profiled):
    out = workdir / "sweep.json"
    args = ["tune", "--model", tiny_model_dir, "--heads", workdir / "heads", "--growth",
            workdir / "growth.json", "--prompts", prompts_file, "--batch", "1,2", "--sizes",
            "1,2", "--prompt-count", "2", "--max-new-tokens", "8", "--rounds", "2",
            "--min-seconds", "0.05", "--target-se", "0.2", "--race-best", "--step-profile", profiled, "--trace", workdir / "t.shard-0-of-2.npz", "--out", out,
            "--profile-alongside", alongside := workdir / "alongside.json"]
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["format"] == "treeopt.sweep/1"
    assert doc["meta"]["rounds"] == 2 and doc["meta"]["min_seconds"] == 0.05
    assert doc["meta"]["target_se"] == 0.2
    assert doc["meta"]["points_timed"] == "together"  # the default for a new sweep
    assert all(2 <= p["measured"]["rounds"] <= 64 for p in doc["points"])
    assert all(p["measured"]["speedup_se"] <= 0.2 or p["measured"]["rounds"] == 64
               for p in doc["points"])
    # the growth's tree of each size (no depth cap), measured once: marked selected when it is
    # also select's pick, which depends on the step profile measured on this (busy) host
    grid = {(p["batch"], p["size"]) for p in doc["points"] if p["max_depth"] is None}
    assert {(1, 1), (1, 2), (2, 1), (2, 2)} <= grid
    assert sorted(p["batch"] for p in doc["points"] if p["selected"]) == [1, 2]
    for p in doc["points"]:
        assert p["measured"]["lossless"] is True and p["measured"]["speedup"] > 0
        assert p["error"] == pytest.approx(p["predicted"]["speedup"]
                                           / p["measured"]["speedup"] - 1)
    assert [r["batch"] for r in doc["summary"]] == [1, 2]
    for row in doc["summary"]:  # raced where the pick is not the measured best
        raced = row["selected_size"] != row["best_size"] or (
            row["selected_max_depth"] != row["best_max_depth"])
        assert ("selected_share_of_best_raced" in row) == raced
    assert "batch 1: best measured" in proc.stderr
    keys = [(r.batch, r.size, r.max_depth)  # each measured point's tree, once
            for r in StepProfile.load(alongside).records]
    assert [k for k in keys if k[1] == 0] == [(1, 0, None), (2, 0, None)]  # a reference each
    assert sorted(keys, key=str) == sorted([(1, 0, None), (2, 0, None)] + [
        (p["batch"], p["size"], p["max_depth"]) for p in doc["points"] if p["size"]], key=str)
    before, profiled_before = out.read_text(), alongside.read_text()
    assert run(*args).returncode == 0  # everything is there: resumed, nothing measured again
    assert out.read_text().count('"tree_tokens_per_s"') == before.count('"tree_tokens_per_s"')
    assert json.loads(out.read_text())["points"] == doc["points"]
    assert alongside.read_text() == profiled_before
    # a profile taken after the points (its verify step slower), pooled with the one before:
    # the sweep is predicted again, nothing measured again but a pick that changed
    prof = json.loads(profiled.read_text())
    after = workdir / "step-after.json"
    after.write_text(json.dumps({**prof, "records": [{**r, "ms_verify": 2 * r["ms_verify"]}
                                                      for r in prof["records"]]}))
    pooled = [a for x in args for a in ([x, after] if x is profiled else [x])]
    assert run(*pooled).returncode == 0
    again = json.loads(out.read_text())
    assert again["meta"]["predicted"] == f"{profiled} + {after}"
    old = {(p["batch"], p["size"], p["max_depth"]): p for p in doc["points"]}
    for p in again["points"]:
        if (kept := old.get((p["batch"], p["size"], p["max_depth"]))) is not None:
            assert p["measured"] == kept["measured"]
            assert p["predicted"]["tokens_per_s"] < kept["predicted"]["tokens_per_s"]


def test_tune_refuses_bad_input_before_loading_a_model(workdir, tiny_model_dir, prompts_file,
                                                       profiled):
    base = ["tune", "--model", tiny_model_dir, "--heads", workdir / "heads", "--growth",
            workdir / "growth.json", "--prompts", prompts_file, "--out", workdir / "x.json"]
    assert_user_error(run(*base, "--sizes", "99"), "--sizes 99 is beyond the growth's 6 nodes")
    assert_user_error(run(*base, "--batch", "8", "--prompt-count", "4"),
                      "--prompt-count 4 is smaller than --batch 8")
    assert_user_error(run(*base, "--prompt-count", "9"), "6 prompts, fewer than --prompt-count 9")
    assert_user_error(run(*base, "--min-seconds", "-1"), "--min-seconds must be ≥ 0, got -1.0")
    assert_user_error(run(*base, "--target-se", "1"), "--target-se must be in [0, 1), got 1.0")
    assert_user_error(run(*base, "--race-best"), "--race-best needs --step-profile")
    assert_user_error(run(*base, "--batching", "continuous", "--compile"),
                      "--batching continuous runs eager steps")
    assert_user_error(run(*base, "--step-profile", profiled, "--profile-alongside", profiled),
                      f"--profile-alongside {profiled}: the file of --out or --step-profile; "
                      "name a file of its own")
    sampled = workdir / "sampled-for-tune.npz"
    RankTrace(np.zeros((4, 3), np.int16), {"top_k": 8, "sampling": {"temperature": 1.0}}).save(
        sampled)
    assert_user_error(run(*base, "--trace", sampled), "calibrated on sampled continuations "
                      "(temperature 1.0); tune decodes greedily and needs a greedy trace")
    assert not (workdir / "x.json").exists()


def test_tune_retime_measures_a_batch_size_again_timed_its_own_way(workdir, tiny_model_dir,
                                                                   prompts_file, profiled):
    """``--retime``: the --batch sizes' points are measured again, timed as this run's flags
    say and recorded so, the others kept; without it, another timing of a batch size that has
    points is refused in one line. A sweep timed ``--apart`` goes on apart without the flag."""
    out = workdir / "retimed.json"
    base = ["tune", "--model", tiny_model_dir, "--heads", workdir / "heads", "--growth",
            workdir / "growth.json", "--prompts", prompts_file, "--sizes", "1",
            "--prompt-count", "2", "--max-new-tokens", "4", "--out", out]
    assert run(*base, "--batch", "1,2", "--rounds", "1", "--apart").returncode == 0
    first = Sweep.load(out)
    assert_user_error(run(*base, "--batch", "2", "--rounds", "3"),
                      f"{out}: a sweep measured with other rounds at batch 2 (1, not 3); write to "
                      "another path")
    assert_user_error(run(*base, "--batch", "2", "--retime", "--profile-alongside",
                          workdir / "along.json"), "--retime measures points again beside")
    assert Sweep.load(out) == first  # nothing lost
    assert run(*base, "--batch", "2", "--rounds", "3", "--retime").returncode == 0
    again = Sweep.load(out)
    assert [p for p in again.points if p.batch == 1] == [p for p in first.points if p.batch == 1]
    assert [p.rounds for p in again.points if p.batch == 2] == [3]
    assert again.timing(1)["rounds"] == 1 and again.timing(2)["rounds"] == 3
    assert again.timing(2)["points_timed"] == again.meta["points_timed"] == "apart"
    assert_user_error(run(*base, "--batch", "2", "--rounds", "3", "--together"),
                      f"{out}: a sweep measured with other points_timed at batch 2 (apart, not "
                      "together); write to another path")


def test_tune_refuses_a_step_profile_of_another_device_or_dtype(workdir, tiny_model_dir,
                                                               prompts_file, profiled):
    """Predictions from a profile measured elsewhere would not hold: one line, exit 2."""
    base = ["tune", "--model", tiny_model_dir, "--heads", workdir / "heads", "--growth",
            workdir / "growth.json", "--prompts", prompts_file, "--sizes", "1",
            "--prompt-count", "2", "--out", workdir / "y.json"]
    doc = json.loads(profiled.read_text())
    for key, value, said in (("device", "cuda:NVIDIA H200", "another device ('cuda:NVIDIA H200', "
                                                            "not 'cpu' as loaded here)"),
                             ("dtype", "bfloat16", "another dtype ('bf16', not 'fp32'")):
        other = workdir / f"step-other-{key}.json"
        other.write_text(json.dumps({**doc, key: value}))
        assert_user_error(run(*base, "--step-profile", other),
                          f"--step-profile {other}: profiled with {said}")
        assert_user_error(run(*base, "--step-profile", profiled, other),
                          f"{other}: profiled with other {key} than {profiled}; only profiles "
                          "of one setup can be pooled")
    assert not (workdir / "y.json").exists()


def test_select_prices_with_the_step_profile(workdir, profiled):
    proc = run("select", "--growth", workdir / "growth.json", "--step-profile", profiled,
               "--trace", workdir / "t.shard-0-of-2.npz")
    assert proc.returncode == 0, proc.stderr
    sel = json.loads(proc.stdout)
    assert [p["batch"] for p in sel["points"]] == [1, 2]
    assert all(p["overhead_ms"] > 0 for p in sel["points"])
    assert sel["growth"]["acceptance"].startswith("per-step walk")
    twice = run("select", "--growth", workdir / "growth.json", "--step-profile", profiled,
                profiled, "--trace", workdir / "t.shard-0-of-2.npz")
    assert twice.returncode == 0, twice.stderr  # the same records twice: the same fit
    assert ([p["tokens_per_s"] for p in json.loads(twice.stdout)["points"]]
            == pytest.approx([p["tokens_per_s"] for p in sel["points"]], rel=1e-12))


def test_sampled_calibration_and_lossless_sampling_verify(workdir, tiny_model_dir, prompts_file):
    sampled = workdir / "sampled.npz"
    proc = run("calibrate", "--model", tiny_model_dir, "--heads", workdir / "heads", "--prompts",
               prompts_file, "--max-new-tokens", "16", "--top-k", "8", "--temperature", "1.0",
               "--top-p", "0.9", "--samples-per-prompt", "2", "--seed", "3", "--out", sampled)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["sampling"] == {"temperature": 1.0, "top_p": 0.9, "top_k": 0, "seed": 3,
                               "samples_per_prompt": 2}
    assert out["sequences"] == 12
    (workdir / "tree.json").write_text("[[0], [1], [0, 0], [0, 1], [0, 0, 0]]")
    verify = ["verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
              workdir / "tree.json", "--prompts", prompts_file, "--max-new-tokens", "12"]
    proc = run(*verify, "--mode", "sample", "--temperature", "1.0", "--top-p", "0.9",
               "--seed", "3", "--trace", sampled, "--rounds", "1")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["mode"] == "sample" and report["outputs_match"] is True
    assert report["predicted"]["mean_accept_length"] >= 1.0
    # a trace predicts the decoding it was calibrated for, nothing else
    assert_user_error(run(*verify, "--trace", sampled), str(sampled),
                      "calibrated on sampled continuations (temperature 1.0); greedy decoding "
                      "needs a greedy trace")
    assert_user_error(run(*verify, "--mode", "sample", "--temperature", "0.7", "--trace",
                          sampled), "other sampling settings", "temperature 1.0 vs 0.7",
                      "top_p 0.9 vs 1.0")
    assert_user_error(run(*verify, "--mode", "sample", "--temperature", "1.0", "--trace",
                          workdir / "t.npz"), "calibrated on greedy continuations")


@pytest.mark.parametrize("flags, fragment", [
    (["--mode", "sample", "--temperature", "0"], "--mode sample needs --temperature > 0, got 0.0"),
    (["--mode", "sample", "--top-p", "1.5"], "--top-p must be in (0, 1], got 1.5"),
    (["--mode", "sample", "--sample-top-k", "-2"], "--sample-top-k must be ≥ 0"),
])
def test_bad_sampling_flags_fail_before_a_model_loads(workdir, prompts_file, flags, fragment):
    (workdir / "tree.json").write_text("[[0], [1], [0, 0], [0, 1], [0, 0, 0]]")
    proc = run("verify", "--model", workdir / "no-model", "--heads", workdir / "heads", "--tree",
               workdir / "tree.json", "--prompts", prompts_file, *flags)
    assert_user_error(proc, fragment)


def test_calibrate_sampling_flags_need_a_temperature(workdir, prompts_file):
    proc = run("calibrate", "--model", workdir / "no-model", "--heads", workdir / "heads",
               "--prompts", prompts_file, "--samples-per-prompt", "4", "--out",
               workdir / "x.npz")
    assert_user_error(proc, "--samples-per-prompt, --top-p and --sample-top-k need "
                            "--temperature > 0")
