"""``treeopt profile | roofline | select`` through the command line.

Two tests run the real ``python -m treeopt`` in a subprocess; the rest call the same ``main`` in
process (each subprocess pays the package's whole import time).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys

import numpy as np
import pytest

from treeopt.cli import main
from treeopt.model.growth import Growth
from treeopt.profiling.table import LatencyRecord, LatencyTable
from treeopt.roofline import preset


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "treeopt", *args], capture_output=True,
                          text=True, timeout=120)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``treeopt ARGS`` in process, returning what a subprocess would."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def refused(*args: str, runner=cli) -> str:
    """Run a command that must fail as bad input: exit 2 and one line on stderr."""
    res = runner(*args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.fixture()
def growth(tmp_path):
    path = tmp_path / "g.json"
    Growth("empirical", "none", ((0,), (0, 0), (1,)), np.array([1.0, 1.8, 2.4, 2.5]), {}).save(path)
    return str(path)


@pytest.fixture()
def latency(tmp_path):
    path = tmp_path / "lat.json"
    ms = {1: 10.0, 2: 10.0, 3: 11.0, 4: 20.0}
    LatencyTable("cpu", "fp32", preset("tiny"), tuple(
        LatencyRecord(1, 128, q, t, t, t, 5) for q, t in ms.items())).save(path)
    return str(path)


def test_roofline_writes_per_operator_records(tmp_path):
    out = tmp_path / "r.json"
    res = run("roofline", "--preset", "llama-3-8b", "--hardware", "h100-sxm", "--batch", "1,8",
              "--context", "512", "--tokens", "1,16", "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["format"] == "treeopt.roofline/1" and len(doc["records"]) == 4
    op = doc["records"][0]["operators"][1]
    assert set(op) == {"name", "class", "count", "flops", "bytes", "bytes_by_kind", "intensity",
                       "bound", "time_s"}
    assert op["name"] == "q_proj" and op["count"] == 32


def test_unknown_names_list_the_known_ones():
    line = refused("roofline", "--preset", "tiny", "--hardware", "tpu-v9", "--batch", "1",
                   "--context", "8", "--tokens", "1", runner=run)
    assert "unknown hardware 'tpu-v9'" in line and "h100-sxm" in line and "mi300x" in line
    line = refused("roofline", "--preset", "llama-9", "--hardware", "l4", "--batch", "1",
                   "--context", "8", "--tokens", "1")
    assert "unknown model preset 'llama-9'" in line and "qwen2.5-7b" in line


def test_bad_configs_and_sweeps_are_refused(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2}))
    line = refused("roofline", "--config", str(cfg), "--hardware", "l4", "--batch", "1",
                   "--context", "8", "--tokens", "1")
    assert str(cfg) in line and "intermediate_size" in line
    line = refused("roofline", "--preset", "llama-2-7b", "--hardware", "l4", "--batch", "1",
                   "--context", "4096", "--tokens", "64")
    assert "exceeds llama-2-7b's max_position_embeddings 4096" in line
    assert "--tokens" in refused("roofline", "--preset", "tiny", "--hardware", "l4",
                                 "--batch", "1", "--context", "8")


def test_select_from_a_latency_table(tmp_path, growth, latency):
    out = tmp_path / "sel.json"
    res = cli("select", "--growth", growth, "--latency", latency, "--out", str(out))
    assert res.returncode == 0, res.stderr
    sel = json.loads(out.read_text())
    p = sel["points"][0]
    assert (p["batch"], p["context"], p["best_size"]) == (1, 128, 2)
    assert p["tokens_per_s"] == pytest.approx(2.4 / 0.011)
    assert sel["schedules"][0]["vllm"] == {  # vLLM carries a draft length up: off above 1
        "num_speculative_tokens_per_batch_size": [[1, 1, 2], [2, 2, 0]]}


def test_select_prices_per_step_and_says_where_the_greedy_tree_is_picked(tmp_path):
    """One head; rank 0 right at 3 positions, rank 1 at 2, but (1,) steps at 5/3 tokens and the
    growth order's (0,) at 1.5 (tests/test_step_growth.py works it out)."""
    from treeopt.model.growth import grow
    from treeopt.model.trace import RankTrace

    trace = RankTrace(np.array([[1], [0], [0], [1], [0]], np.int16), {"sequence_positions": [5]})
    trace.save(tmp_path / "t.npz")
    grow(trace, method="empirical", max_nodes=2).save(tmp_path / "g.json")
    ms = {1: 10.0, 2: 10.0, 3: 20.0}
    LatencyTable("cpu", "fp32", preset("tiny"), tuple(
        LatencyRecord(1, 128, q, t, t, t, 5) for q, t in ms.items())).save(tmp_path / "lat.json")
    flags = ("select", "--growth", str(tmp_path / "g.json"), "--latency", str(tmp_path / "lat.json"))
    res = cli(*flags, "--trace", str(tmp_path / "t.npz"))
    assert res.returncode == 0, res.stderr
    assert res.stderr == ("note: the per-step greedy growth accepts more per step than the "
                          "growth order at sizes 1; picked at batch 1 (context 128)\n")
    p = json.loads(res.stdout)["points"][0]
    assert (p["choices"], p["family"], p["expected_accept_length"]) == ([[1]], "per-step greedy",
                                                                        5 / 3)
    res = cli(*flags)  # no trace: the per-step E[L] the growth stores, its own trees
    sel = json.loads(res.stdout)
    assert sel["growth"]["acceptance"] == "per-step E[L] of the growth" and res.stderr == ""
    assert (sel["points"][0]["choices"], sel["points"][0]["expected_accept_length"]) == (
        [[0]], 1.5)


def test_select_refuses_a_table_of_another_model_or_dtype(growth, latency):
    line = refused("select", "--growth", growth, "--latency", latency, "--preset", "llama-2-7b")
    assert "measured for model 'tiny'" in line and "not 'llama-2-7b'" in line
    line = refused("select", "--growth", growth, "--latency", latency, "--dtype", "bf16")
    assert "measured in fp32, not bf16" in line
    assert "exactly one of --latency" in refused("select", "--growth", growth)


def test_select_on_predicted_hardware_with_drafting(tmp_path, growth):
    out = tmp_path / "sel.json"
    res = cli("select", "--growth", growth, "--hardware", "a100-80gb-sxm", "--preset",
              "vicuna-7b-v1.3", "--batch", "1,64", "--context", "512", "--draft-kind", "hydra",
              "--draft-heads", "2", "--out", str(out))
    assert res.returncode == 0, res.stderr
    sel = json.loads(out.read_text())
    assert sel["draft"]["kind"] == "hydra" and sel["depth_caps"] == [1, 2]
    small, big = sel["points"]
    assert small["best_size"] >= big["best_size"] and small["draft_ms"] > 0
    assert len(small["curve"]["tokens_per_s"]) == 4


def test_profile_then_fit_then_select_on_cpu(tmp_path, growth):
    lat, hw, roof = tmp_path / "lat.json", tmp_path / "hw.json", tmp_path / "r.json"
    res = cli("profile", "--preset", "tiny", "--device", "cpu", "--batch", "1", "--context",
              "16,32", "--tokens", "1,2,4", "--repeats", "3", "--warmup", "1", "--out", str(lat))
    assert res.returncode == 0, res.stderr
    assert len(LatencyTable.load(lat).records) == 6
    res = cli("profile", "device", "--matmul-size", "128", "--copy-mib", "4", "--repeats", "3",
              "--out", str(hw))
    assert res.returncode == 0, res.stderr
    res = cli("roofline", "--preset", "tiny", "--hardware", str(hw), "--dtype", "fp32",
              "--batch", "1", "--context", "16,32", "--tokens", "1,2,4", "--fit", str(lat),
              "--totals", "--out", str(roof))
    assert res.returncode == 0, res.stderr
    doc = json.loads(roof.read_text())
    assert doc["fit"]["points"] == 6 and "operators" not in doc["records"][0]
    res = cli("select", "--growth", growth, "--roofline", str(roof))
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["points"]) == 2
    line = refused("roofline", "--preset", "tiny", "--hardware", str(hw), "--batch", "1",
                   "--context", "16", "--tokens", "1", "--fit", str(lat))
    assert "measured in fp32, not bf16" in line


def test_profile_needs_a_model_and_an_out():
    assert "--model DIR, --config FILE or --preset NAME" in refused(
        "profile", "--batch", "1", "--context", "8", "--tokens", "1", "--out", "x.json")
    assert "--out is required" in refused("profile", "--preset", "tiny", "--batch", "1",
                                          "--context", "8", "--tokens", "1")


def test_select_refuses_a_latency_table_of_another_device_than_the_step_profile(
        tmp_path, growth, latency):
    """The verify table and the step profile must have been measured on one device."""
    from test_select import profile_records

    profile = tmp_path / "step.json"
    profile.write_text(json.dumps({
        "format": "treeopt.step-profile/1", "device": "cuda:NVIDIA H100", "dtype": "float32",
        "threads": 1, "model": {}, "heads": {"kind": "hydra"}, "prompts": 8,
        "max_new_tokens": 64, "compile": False,
        "records": profile_records("hydra", batch=1)}))
    line = refused("select", "--growth", growth, "--latency", latency, "--step-profile",
                   str(profile))
    assert "measured on 'cpu', not 'cuda:NVIDIA H100'" in line and "--step-profile" in line
    res = cli("select", "--growth", growth, "--step-profile", str(profile))
    assert res.returncode == 0, res.stderr  # alone, the profile prices every term
    assert json.loads(res.stdout)["overhead"]["source"] == str(profile)
