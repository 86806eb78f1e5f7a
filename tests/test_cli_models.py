"""The model sub-commands end to end, through ``python -m treeopt`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("torch")


def run(*args, cwd=None):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    return subprocess.run([sys.executable, "-m", "treeopt", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=300)


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
        assert z["ranks"].shape == (6 * (16 - 3), 3)
    assert (meta["head_kind"], meta["top_k"], meta["sequences"]) == ("hydra", 8, 6)

    (workdir / "tree.json").write_text("[[0], [1], [0, 0], [0, 1], [0, 0, 0]]")
    proc = run("verify", "--model", tiny_model_dir, "--heads", workdir / "heads", "--tree",
               workdir / "tree.json", "--prompts", prompts_file, "--max-new-tokens", "12",
               "--trace", workdir / "t.npz", "--out", workdir / "report.json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((workdir / "report.json").read_text())
    assert report["outputs_match"] is True
    assert report["tree_decoding"]["tokens"] == report["autoregressive"]["tokens"]
    assert report["tree"]["size"] == 5
    pred = report["predicted"]
    assert pred["measured"] == report["tree_decoding"]["mean_accept_length"]
    assert pred["relative_difference"] == pytest.approx(
        (pred["measured"] - pred["mean_accept_length"]) / pred["mean_accept_length"])


def test_rerun_of_a_finished_shard_is_skipped(workdir, tiny_model_dir, prompts_file):
    target = workdir / "t.shard-0-of-2.npz"
    before = target.stat().st_mtime_ns
    env_shard = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "treeopt", "calibrate", "--model", str(tiny_model_dir), "--heads",
         str(workdir / "heads"), "--prompts", str(prompts_file), "--max-new-tokens", "16",
         "--top-k", "8", "--batch-size", "2", "--out", str(workdir / "t.npz")],
        capture_output=True, text=True, env=env_shard, timeout=300)
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
    proc = run("calibrate", "--model", tmp_path, "--heads", workdir / "heads",
               "--prompts", prompts_file, "--out", tmp_path / "t.npz")
    assert_user_error(proc, "no config.json")


def test_merge_of_mismatched_shards(workdir, tmp_path):
    from treeopt import RankTrace

    other = tmp_path / "o.npz"
    RankTrace(np.zeros((3, 2), np.int16), {"top_k": 8, "head_kind": "hydra"}).save(other)
    proc = run("trace", "merge", workdir / "t.shard-0-of-2.npz", other, "--out", tmp_path / "m.npz")
    assert_user_error(proc, "treeopt trace: error:", "2 heads")
    assert not (tmp_path / "m.npz").exists()
