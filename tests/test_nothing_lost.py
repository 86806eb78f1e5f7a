"""Nothing lost: an ``--out`` never overwrites an input and is checked before any work, bad input
is one line on stderr with exit status 2 (never a traceback), and what the user asked for is not
silently cut.

Commands that fail before loading a model run in process (``main``); those that load one run as
their subprocess would, progress bars off (:mod:`in_process`); those that show progress bars run
in a subprocess, as a user's script would.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import in_process
import numpy as np
import pytest

from treeopt import RankTrace, TreeoptError
from treeopt.cli import main
from treeopt.files import dumps
from treeopt.model.growth import grow
from treeopt.profiling.table import LatencyRecord, LatencyTable
from treeopt.roofline import preset


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    """``treeopt ARGS`` in process, returning what a subprocess would."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def run(*args: object, progress: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m treeopt ARGS``: progress bars off, run as its subprocess would be; with
    ``progress``, in a subprocess, its bars on."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("TQDM_DISABLE", None)
    if not progress:
        return in_process.treeopt(*args, env={**env, "TQDM_DISABLE": "1"})
    return subprocess.run([sys.executable, "-m", "treeopt", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=300)


def refused(res: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit status 2 and exactly one line on stderr holding every fragment."""
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def digest(*paths: Path) -> dict[str, str]:
    """Content hashes of files and of every file under folders: inputs must not change."""
    files = [f for p in paths for f in ([p] if p.is_file() else sorted(p.rglob("*")))
             if f.is_file()]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


# ----- small inputs --------------------------------------------------------------------------------
RANKS = np.array([[0, 0], [0, 1], [1, 0], [0, 0], [2, -1], [0, 3]], np.int16)
TRACE_META = {"top_k": 4, "head_kind": "medusa", "num_heads": 2, "model": "m",
              "sequence_positions": [3, 3]}


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    f = {"trace": tmp_path / "t.npz", "growth": tmp_path / "g.json", "csv": tmp_path / "a.csv",
         "tree": tmp_path / "tree.json", "latency": tmp_path / "lat.json",
         "heads": tmp_path / "heads", "model": tmp_path / "model", "prompts": tmp_path / "p.jsonl"}
    trace = RankTrace(RANKS, TRACE_META)
    trace.save(f["trace"])
    grow(trace, method="empirical", max_nodes=4).save(f["growth"])
    f["csv"].write_text("head,top1,top2\n1,0.6,0.7\n2,0.4,0.5\n")
    f["tree"].write_text("[[0], [0, 0]]\n")
    LatencyTable("cpu", "fp32", preset("tiny"), tuple(
        LatencyRecord(1, 128, q, 10.0 + q, 10.0 + q, 10.0 + q, 5) for q in (1, 2, 3, 5))
    ).save(f["latency"])
    for d in ("heads", "model"):
        f[d].mkdir()
        (f[d] / "config.json").write_text("{}")
    f["prompts"].write_text('{"prompt": "x"}\n')
    return f


# ----- --out onto an input -------------------------------------------------------------------------
@pytest.mark.parametrize("argv, flag", [
    (["grow", "--trace", "{trace}", "--max-nodes", "3", "--out", "{trace}"], "--trace"),
    (["grow", "--trace", "{trace}", "--max-nodes", "3", "--held-out", "{csv}", "--out", "{csv}"],
     "--held-out"),
    (["accuracies", "--accuracies", "{csv}", "--out", "{csv}"], "--accuracies"),
    (["simulate", "--tree", "{tree}", "--trace", "{trace}", "--out", "{tree}"], "--tree"),
    (["export", "--tree", "{growth}", "--size", "2", "--format", "medusa", "--out", "{growth}"],
     "--tree"),
    (["select", "--growth", "{growth}", "--latency", "{latency}", "--out", "{latency}"],
     "--latency"),
    (["select", "--growth", "{growth}", "--latency", "{latency}", "--out", "{growth}"],
     "--growth"),
    (["roofline", "--preset", "tiny", "--hardware", "l4", "--batch", "1", "--context", "128",
      "--tokens", "1,2", "--dtype", "fp32", "--fit", "{latency}", "--out", "{latency}"], "--fit"),
    (["trace", "merge", "{trace}", "{trace}", "--out", "{trace}"], "SHARD.npz"),
    (["verify", "--model", "{model}", "--heads", "{heads}", "--tree", "{tree}", "--prompts",
      "{prompts}", "--out", "{prompts}"], "--prompts"),
    (["calibrate", "--model", "{model}", "--heads", "{heads}", "--prompts", "{prompts}",
      "--out", "{heads}/config.json"], "--heads"),
    (["verify", "--model", "{model}", "--heads", "{heads}", "--tree", "{tree}", "--prompts",
      "{prompts}", "--out", "{model}/config.json"], "--model"),
])
def test_out_onto_an_input_is_refused_and_the_input_kept(files, argv, flag):
    before = digest(*files.values())
    line = refused(cli(*[a.format(**files) for a in argv]), "--out", flag)
    assert "choose another --out" in line
    assert digest(*files.values()) == before


def test_out_through_a_symlink_to_an_input_is_refused(files, tmp_path):
    link = tmp_path / "link.npz"
    link.symlink_to(files["trace"])
    before = digest(files["trace"])
    refused(cli("grow", "--trace", files["trace"], "--max-nodes", 3, "--out", link),
            "--out", "--trace")
    assert digest(files["trace"]) == before


# ----- --out that cannot be written: refused before the work -------------------------------------
@pytest.mark.parametrize("out, fragment", [
    ("{dir}", "is a directory"),
    ("/proc/treeopt-out.json", "cannot write in /proc"),
    ("{file}/x.json", "is not a directory"),
])
@pytest.mark.parametrize("argv", [
    ["grow", "--trace", "{trace}", "--max-nodes", "3"],
    ["select", "--growth", "{growth}", "--latency", "{latency}"],
    ["profile", "--preset", "tiny", "--batch", "1", "--context", "8", "--tokens", "1"],
    ["profile", "device", "--matmul-size", "64", "--copy-mib", "1"],
    ["verify", "--model", "{model}", "--heads", "{heads}", "--tree", "{tree}", "--prompts",
     "{prompts}"],
])
def test_an_unwritable_out_is_refused_before_any_work(files, tmp_path, argv, out, fragment):
    target = out.format(dir=tmp_path, file=files["csv"])
    res = cli(*[a.format(**files) for a in argv], "--out", target)
    refused(res, "--out", fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in files.values())


def test_missing_folders_of_out_are_created(files, tmp_path):
    out = tmp_path / "new" / "deeper" / "g.json"
    res = cli("grow", "--trace", files["trace"], "--max-nodes", 3, "--out", out)
    assert res.returncode == 0, res.stderr
    assert json.loads(out.read_text())["format"] == "treeopt.growth/1"


def test_a_directory_out_must_not_be_a_file(files):
    before = digest(files["csv"])
    refused(cli("train-heads", "--model", files["model"], "--kind", "medusa", "--data",
                files["prompts"], "--out", files["csv"]), "--out", "is a file")
    refused(cli("demo", "build", "--out", files["csv"]), "--out", "is a file")
    assert digest(files["csv"]) == before


def test_train_heads_onto_existing_heads_needs_force(files):
    before = digest(files["heads"])
    refused(cli("train-heads", "--model", files["model"], "--kind", "medusa", "--data",
                files["prompts"], "--out", files["heads"]), "--out", "--force")
    assert digest(files["heads"]) == before


@pytest.mark.parametrize("lr", ["0", "-0.1", "nan", "inf"])
def test_train_heads_refuses_a_learning_rate_that_is_not_positive(files, tmp_path, lr):
    refused(cli("train-heads", "--model", files["model"], "--kind", "medusa", "--data",
                files["prompts"], "--lr", lr, "--out", tmp_path / "h"), "--lr")
    assert not (tmp_path / "h").exists()


def test_train_heads_force_replaces_the_heads(tiny_model_dir, prompts_file, tmp_path):
    heads = tmp_path / "heads"
    heads.mkdir()
    (heads / "old.txt").write_text("x")
    res = run("train-heads", "--model", tiny_model_dir, "--kind", "medusa", "--data",
              prompts_file, "--num-heads", 2, "--steps", 2, "--batch-size", 2, "--seq-len", 16,
              "--out", heads, "--force")
    assert res.returncode == 0, res.stderr
    assert (heads / "heads.json").exists() and (heads / "heads.safetensors").exists()


# ----- bad traces, trees, tables: one line -------------------------------------------------------
def _trace_file(path: Path, ranks: np.ndarray, meta: dict) -> Path:
    """A trace file written without the checks a RankTrace makes (as another tool might)."""
    with open(path, "wb") as fh:
        np.savez_compressed(fh, ranks=ranks.astype(np.int16),
                            meta=np.array(json.dumps({"format": "treeopt.trace/1", **meta})))
    return path


@pytest.mark.parametrize("ranks, meta, fragment", [
    (np.zeros((4, 0)), {"top_k": 4}, "0 heads"),
    (RANKS, {"top_k": "four"}, "meta 'top_k' is 'four'"),
    (RANKS, {"top_k": 2.5}, "meta 'top_k' is 2.5"),
    (RANKS, {"top_k": 3}, "rank 3 at position 5, head 2 is not below the recorded top_k 3"),
])
@pytest.mark.parametrize("command", [["accuracies"], ["grow", "--max-nodes", "3"]])
def test_a_bad_trace_is_one_line(tmp_path, ranks, meta, fragment, command):
    path = _trace_file(tmp_path / "bad.npz", ranks, meta)
    refused(cli(command[0], "--trace", path, *command[1:]), str(path), fragment)


def test_ranks_at_or_above_top_k_are_refused_when_made():
    with pytest.raises(TreeoptError, match="not below the recorded top_k 2"):
        RankTrace(np.array([[0], [2]], np.int16), {"top_k": 2})


@pytest.mark.parametrize("tree", ["[[99999999999999999999]]", "[[0], [0, 40000]]"])
def test_huge_ranks_in_a_tree_are_one_line(files, tmp_path, tree):
    path = tmp_path / "huge.json"
    path.write_text(tree)
    refused(cli("simulate", "--tree", path, "--trace", files["trace"]), str(path),
            "ranks go up to 32766")


def _latency_with(path: Path, records: list[dict]) -> Path:
    doc = LatencyTable("cpu", "fp32", preset("tiny")).to_json()
    doc["records"] = records
    path.write_text(json.dumps(doc))  # json.dumps writes NaN, as other tools do
    return path


def test_nan_in_a_latency_table_is_one_line(files, tmp_path):
    lat = _latency_with(tmp_path / "nan.json", [
        {"batch": 1, "context": 128, "tokens": 1, "ms_median": 10.0},
        {"batch": 1, "context": 128, "tokens": 2, "ms_median": float("nan")}])
    out = tmp_path / "sel.json"
    refused(cli("select", "--growth", files["growth"], "--latency", lat, "--out", out),
            str(lat), "ms_median nan")
    refused(cli("roofline", "--preset", "tiny", "--hardware", "l4", "--dtype", "fp32",
                "--batch", "1", "--context", "128", "--tokens", "1,2", "--fit", lat),
            str(lat), "ms_median nan")
    assert not out.exists()


def test_json_is_never_written_with_nan():
    assert dumps({"x": [1.5, None]}) == '{\n "x": [1.5, null]\n}'
    for bad in (float("nan"), float("inf"), [1.0, float("-inf")], {"a": {"b": float("nan")}}):
        with pytest.raises(TreeoptError, match="NaN or infinity"):
            dumps(bad)


@pytest.mark.parametrize("records", [
    [],
    [{"batch": 1, "context": 128, "tokens": q, "error": "out of memory"} for q in (1, 2)],
])
def test_select_refuses_a_latency_table_with_nothing_measured(files, tmp_path, records):
    lat = _latency_with(tmp_path / "empty.json", records)
    refused(cli("select", "--growth", files["growth"], "--latency", lat), str(lat),
            "no measured points")


def test_roofline_fit_refuses_a_table_with_nothing_measured(tmp_path):
    lat = _latency_with(tmp_path / "empty.json", [])
    refused(cli("roofline", "--preset", "tiny", "--hardware", "l4", "--dtype", "fp32",
                "--batch", "1", "--context", "128", "--tokens", "1,2", "--fit", lat),
            f"--fit {lat}", "at least 2 measured points")


# ----- select: inputs that do not belong together -------------------------------------------------
def test_select_refuses_too_few_draft_heads(files):
    line = refused(cli("select", "--growth", files["growth"], "--hardware", "l4", "--preset",
                       "tiny", "--batch", "1", "--context", "128", "--draft-kind", "medusa",
                       "--draft-heads", "1"), "--draft-heads 1", "depth 2", str(files["growth"]))
    assert "at least 2" in line
    res = cli("select", "--growth", files["growth"], "--hardware", "l4", "--preset", "tiny",
              "--batch", "1", "--context", "128", "--draft-kind", "medusa", "--draft-heads", "1",
              "--max-depths", "1")
    assert res.returncode == 0, res.stderr  # trees capped at depth 1 need one head


def test_select_refuses_a_trace_of_other_heads_than_the_growth(files, tmp_path):
    other = tmp_path / "other.npz"
    RankTrace(np.zeros((4, 3), np.int16), {**TRACE_META, "num_heads": 3,
                                            "sequence_positions": [4]}).save(other)
    refused(cli("select", "--growth", files["growth"], "--latency", files["latency"],
                "--trace", other), "head count", str(files["growth"]), str(other))
    hydra = tmp_path / "hydra.npz"
    RankTrace(RANKS, {**TRACE_META, "head_kind": "hydra"}).save(hydra)
    refused(cli("select", "--growth", files["growth"], "--latency", files["latency"],
                "--trace", hydra), "head kind medusa", "hydra", str(hydra))


def _step_profile(path: Path, *, kind: str, num_heads: int, hidden: int = 64) -> Path:
    from test_select import profile_records

    path.write_text(json.dumps({
        "format": "treeopt.step-profile/1", "device": "cpu", "dtype": "float32", "threads": 1,
        "model": {"hidden_size": hidden, "num_hidden_layers": 2, "vocab_size": 256},
        "heads": {"kind": kind, "num_heads": num_heads, "hidden_size": hidden,
                  "vocab_size": 256},
        "prompts": 8, "max_new_tokens": 64, "compile": False,
        "records": profile_records(kind, batch=1)}))
    return path


@pytest.mark.parametrize("kind, num_heads, fragment", [
    ("hydra", 2, "head kind medusa"),
    ("medusa", 3, "head count 2"),
])
def test_select_refuses_a_step_profile_of_other_heads(files, tmp_path, kind, num_heads,
                                                      fragment):
    prof = _step_profile(tmp_path / "step.json", kind=kind, num_heads=num_heads)
    refused(cli("select", "--growth", files["growth"], "--step-profile", prof), fragment,
            str(prof))
    good = _step_profile(tmp_path / "good.json", kind="medusa", num_heads=2)
    res = cli("select", "--growth", files["growth"], "--step-profile", good)
    assert res.returncode == 0, res.stderr


def test_select_refuses_a_latency_table_of_another_model_than_the_step_profile(files, tmp_path):
    prof = _step_profile(tmp_path / "step.json", kind="medusa", num_heads=2, hidden=128)
    refused(cli("select", "--growth", files["growth"], "--latency", files["latency"],
                "--step-profile", prof), "hidden size", str(files["latency"]))


# ----- grow --constraint uniform is capped by the caps -------------------------------------------
def test_uniform_growth_is_capped_by_the_largest_tree(files, tmp_path):
    out = tmp_path / "u.json"
    res = cli("grow", "--trace", files["trace"], "--constraint", "uniform", "--max-nodes",
              10**7, "--out", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    largest = 4 + 16  # top-4 at two depths
    assert len(doc["branching"]) == largest and len(doc["expected_accept_length"]) == largest + 1
    assert "note: --max-nodes 10000000 is more than the largest uniform tree" in res.stderr
    assert f"({largest} nodes)" in doc["meta"]["exhausted"]


# ----- CSV accuracy tables -------------------------------------------------------------------------
@pytest.mark.parametrize("text, fragment", [
    ("head,top1\n2,0.4\n1,0.6\n", "line 2 is head 2, expected head 1"),
    ("head,top1\n1,0.6\n3,0.4\n", "line 3 is head 3, expected head 2"),
    ("head,top1\n1,0.6\n1,0.4\n", "line 3 is head 1, expected head 2"),
    ("head,top1\nfirst,0.6\n", "line 2 has head 'first'"),
    ("head,top1\n0,0.6\n2,0.4\n", "line 3 is head 2, expected head 1 (rows must list heads 0, "
                                  "1, …"),  # numbered from 0, as the first row says
])
def test_csv_heads_must_be_in_order(tmp_path, text, fragment):
    path = tmp_path / "a.csv"
    path.write_text(text)
    refused(cli("accuracies", "--accuracies", path), str(path), fragment)


def test_csv_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "a.csv"
    path.write_bytes(b"\xef\xbb\xbfhead,top1,top2\n1,0.6,0.7\n2,0.4,0.5\n")
    res = cli("accuracies", "--accuracies", path)
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["cumulative"] == [[0.6, 0.7], [0.4, 0.5]]


# ----- trace merge names what differs -------------------------------------------------------------
def test_merge_of_two_separate_runs_names_the_difference(tmp_path):
    a, b, c = tmp_path / "a.npz", tmp_path / "b.npz", tmp_path / "c.npz"
    RankTrace(RANKS, {**TRACE_META, "shard": "0/2", "prompts": "x.jsonl"}).save(a)
    RankTrace(RANKS, {**TRACE_META, "shard": "1/2", "prompts": "y.jsonl"}).save(b)
    refused(cli("trace", "merge", a, b, "--out", tmp_path / "m.npz"), str(a), str(b),
            "separate calibration runs", "prompts 'x.jsonl' vs 'y.jsonl'")
    RankTrace(RANKS, {**TRACE_META, "shard": "0/2", "prompts": "x.jsonl",
                      "fingerprint": "other"}).save(c)
    refused(cli("trace", "merge", a, c, "--out", tmp_path / "m.npz"), "both shard 0/2",
            "two separate runs")
    assert not (tmp_path / "m.npz").exists()


# ----- models: unreadable weights, absent devices -------------------------------------------------
@pytest.fixture(scope="module")
def heads_dir(tiny_model_dir, tmp_path_factory):
    """Random medusa heads for the tiny model, saved without training."""
    from treeopt.drafters.checkpoints import save_heads
    from treeopt.drafters.heads import build_heads
    from treeopt.registry.drafter_configs import HeadsConfig

    cfg = json.loads((tiny_model_dir / "config.json").read_text())
    heads = build_heads(HeadsConfig(kind="medusa", num_heads=2, hidden_size=cfg["hidden_size"],
                                    vocab_size=cfg["vocab_size"]))
    return save_heads(heads, tmp_path_factory.mktemp("heads") / "heads")


def _copy_model(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for f in src.iterdir():
        if f.suffix != ".safetensors":
            (dst / f.name).write_bytes(f.read_bytes())
    return dst


def test_truncated_heads_weights_are_one_line(tiny_model_dir, heads_dir, prompts_file, tmp_path):
    bad = tmp_path / "heads"
    bad.mkdir()
    (bad / "heads.json").write_bytes((heads_dir / "heads.json").read_bytes())
    (bad / "heads.safetensors").write_bytes((heads_dir / "heads.safetensors").read_bytes()[:300])
    refused(run("calibrate", "--model", tiny_model_dir, "--heads", bad, "--prompts",
                prompts_file, "--out", tmp_path / "t.npz"), "heads.safetensors", "unreadable")
    assert not (tmp_path / "t.npz").exists()


def test_truncated_model_weights_are_one_line(tiny_model_dir, heads_dir, prompts_file, tmp_path):
    model = _copy_model(tiny_model_dir, tmp_path / "model")
    (model / "model.safetensors").write_bytes(
        (tiny_model_dir / "model.safetensors").read_bytes()[:1000])
    refused(run("calibrate", "--model", model, "--heads", heads_dir, "--prompts", prompts_file,
                "--out", tmp_path / "t.npz"), f"--model {model}", "unreadable safetensors")


class _Payload:
    """A pickle that would create a folder when unpickled."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (str(self.marker),))


def test_a_pickle_that_runs_code_is_refused_in_one_line(tiny_model_dir, heads_dir, prompts_file,
                                                        tmp_path):
    torch = pytest.importorskip("torch")
    model = _copy_model(tiny_model_dir, tmp_path / "model")
    marker = tmp_path / "pwned"
    torch.save({"x": _Payload(marker)}, model / "pytorch_model.bin")
    refused(run("calibrate", "--model", model, "--heads", heads_dir, "--prompts", prompts_file,
                "--out", tmp_path / "t.npz"), f"--model {model}", "refused to unpickle")
    assert not marker.exists()


def test_cuda_without_cuda_is_one_line(tiny_model_dir, heads_dir, prompts_file, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    refused(run("calibrate", "--model", tiny_model_dir, "--heads", heads_dir, "--prompts",
                prompts_file, "--device", "cuda", "--out", tmp_path / "t.npz"),
            "--device cuda", "CUDA is not available")
    refused(cli("demo", "build", "--device", "cuda", "--out", tmp_path / "demo"),
            "--device cuda", "CUDA is not available")
    assert not any(tmp_path.iterdir())


# ----- progress, and errors after it --------------------------------------------------------------
def test_profile_shows_progress(tmp_path):
    res = cli("profile", "--preset", "tiny", "--batch", "1,2", "--context", "8", "--tokens", "1",
              "--repeats", "1", "--warmup", "0", "--out", tmp_path / "lat.json")
    assert res.returncode == 0, res.stderr
    assert "profile:   0%" in res.stderr and "0/2 [" in res.stderr  # the bar, total known


def test_an_error_after_a_progress_bar_starts_its_own_line_and_leaves_no_parts(
        tiny_model_dir, heads_dir, prompts_file, tmp_path):
    res = run("calibrate", "--model", tiny_model_dir, "--heads", heads_dir, "--prompts",
              prompts_file, "--max-new-tokens", 600, "--out", tmp_path / "t.npz", progress=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "calibrate 0/1:" in res.stderr  # the bar had started
    errors = [x for x in res.stderr.splitlines() if "error" in x]
    assert len(errors) == 1 and errors[0].startswith("treeopt calibrate: error: a prompt of")
    assert list(tmp_path.iterdir()) == []  # no .t.npz.parts left for nothing


# ----- --out onto a device, a FIFO, a socket, a dangling symlink ----------------------------------
def _undated(growth: dict) -> dict:
    """The growth file without its creation time, which two runs a second apart differ in."""
    growth["meta"].pop("created")
    return growth


def test_out_onto_a_fifo_writes_through_it_and_keeps_it(files, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    res = cli("grow", "--trace", files["trace"], "--max-nodes", 3, "--out", fifo)
    reader.join(timeout=30)
    assert res.returncode == 0, res.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still the pipe, not a file put in its place
    plain = tmp_path / "g3.json"
    assert cli("grow", "--trace", files["trace"], "--max-nodes", 3, "--out", plain).returncode == 0
    assert len(received) == 1
    assert _undated(json.loads(received[0])) == _undated(json.loads(plain.read_text()))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [*(p.name for p in files.values()), "pipe", "g3.json"])  # no temporary file left


def test_out_onto_dev_null_keeps_the_device(files):
    before = os.stat("/dev/null")
    res = cli("grow", "--trace", files["trace"], "--max-nodes", 3, "--out", "/dev/null")
    assert res.returncode == 0, res.stderr
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino


def test_out_onto_a_socket_is_refused_before_any_work(files, tmp_path):
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        refused(cli("grow", "--trace", files["trace"], "--max-nodes", 3, "--out", path),
                f"--out {path} is a socket")
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        server.close()


def test_a_dangling_symlink_as_a_directory_out_is_refused_before_any_work(files, tmp_path):
    link = tmp_path / "heads-link"
    link.symlink_to(tmp_path / "gone")
    refused(cli("train-heads", "--model", files["model"], "--kind", "medusa", "--data",
                files["prompts"], "--out", link), f"--out {link}", "does not exist")
    assert link.is_symlink() and not link.exists()


def test_a_schedule_file_name_taken_by_a_directory_is_one_line(files, tmp_path):
    selection = tmp_path / "sel.json"
    assert cli("select", "--growth", files["growth"], "--latency", files["latency"], "--out",
               selection).returncode == 0
    first = tmp_path / "first"
    assert cli("export", "--tree", selection, "--format", "medusa", "--schedule-dir",
               first).returncode == 0
    name = next(p.name for p in first.iterdir() if p.name != "schedule.json")
    folder = tmp_path / "second"
    (folder / name).mkdir(parents=True)
    (folder / name / "keep.txt").write_text("mine")
    refused(cli("export", "--tree", selection, "--format", "medusa", "--schedule-dir", folder),
            str(folder / name), "is a directory")
    assert (folder / name / "keep.txt").read_text() == "mine"


# ----- calibrate-dynamic: flags, and an earlier run's traces ------------------------------------
def _dynamic_trace(path: Path, **meta: object) -> Path:
    from treeopt.dynamic.simulate import DynamicTrace

    places = np.zeros((3, 2, 2), np.int16)
    DynamicTrace(1, places, (3,), {"steps": 2, **meta}).save(path)
    return path


def test_calibrate_dynamic_refuses_to_replace_another_runs_traces(files, tmp_path):
    out = tmp_path / "dyn"
    out.mkdir()
    old = _dynamic_trace(out / "dynamic-topk1.npz", model="another-model", heads="h")
    before = digest(old)
    line = refused(cli("calibrate-dynamic", "--model", files["model"], "--heads",
                       files["heads"], "--prompts", files["prompts"], "--topk", "1,2",
                       "--steps", 2, "--out", out), str(old), "another run", "--force")
    assert "model 'another-model'" in line
    assert digest(old) == before


def test_calibrate_dynamic_refuses_a_topk_whose_pool_does_not_fit(files, tmp_path):
    refused(cli("calibrate-dynamic", "--model", files["model"], "--heads", files["heads"],
                "--prompts", files["prompts"], "--topk", "4,5000", "--out", tmp_path / "dyn"),
            "--topk 5000", "--steps 6")
    assert not (tmp_path / "dyn").exists()


@pytest.fixture(scope="module")
def eagle_dir(tiny_model_dir, tmp_path_factory):
    """A random EAGLE drafter for the tiny model, saved without training."""
    from transformers import AutoModelForCausalLM

    from treeopt.drafters.checkpoints import save_heads
    from treeopt.drafters.heads import build_heads
    from treeopt.registry.drafter_configs import HeadsConfig

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    vocab, hidden = model.get_output_embeddings().weight.shape
    cfg = HeadsConfig(kind="eagle", num_heads=2, hidden_size=hidden, vocab_size=vocab,
                      share_lm_head=True)
    heads = build_heads(cfg, lm_head=model.get_output_embeddings(),
                        embeddings=model.get_input_embeddings())
    return save_heads(heads, tmp_path_factory.mktemp("eagle") / "eagle")


def test_calibrate_dynamic_topk_beyond_the_vocabulary_and_a_rerun(
        tiny_model_dir, eagle_dir, prompts_file, tmp_path):
    out = tmp_path / "dyn"
    common = ["--model", tiny_model_dir, "--drafter", eagle_dir, "--prompts", prompts_file,
              "--steps", 1, "--max-new-tokens", 4, "--out", out]
    vocab = json.loads((eagle_dir / "heads.json").read_text())["config"]["vocab_size"]
    refused(run("calibrate-dynamic", "--topk", vocab + 1, *common), f"--topk {vocab + 1}",
            f"vocabulary of {vocab}")
    assert not out.exists()
    first = run("calibrate-dynamic", "--topk", 2, *common)
    assert first.returncode == 0, first.stderr
    trace = out / "dynamic-topk2.npz"
    before = digest(trace)
    again = run("calibrate-dynamic", "--topk", 2, *common)  # this run's own trace: kept
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == json.loads(first.stdout)
    assert f"kept {trace}" in again.stderr and digest(trace) == before
    other = run("calibrate-dynamic", "--topk", 2, *common[:-2], "--max-new-tokens", 6,
                "--out", out)
    refused(other, str(trace), "another run", "max_new_tokens 4")
    forced = run("calibrate-dynamic", "--topk", 2, *common[:-2], "--max-new-tokens", 6,
                 "--out", out, "--force")
    assert forced.returncode == 0, forced.stderr
    from treeopt.dynamic.simulate import DynamicTrace

    assert DynamicTrace.load(trace).meta["max_new_tokens"] == 6


# ----- drafters: configs and weights that are not numbers ---------------------------------------
def _edited_heads(src: Path, dst: Path, **config: object) -> Path:
    dst.mkdir()
    doc = json.loads((src / "heads.json").read_text())
    doc["config"].update(config)
    (dst / "heads.json").write_text(json.dumps(doc))  # json.dumps writes NaN and Infinity
    (dst / "heads.safetensors").write_bytes((src / "heads.safetensors").read_bytes())
    return dst


@pytest.mark.parametrize("field, value", [("num_heads", float("nan")),
                                          ("hidden_size", float("inf")),
                                          ("num_heads", 2.5), ("share_lm_head", "yes")])
def test_a_heads_config_that_is_not_numbers_is_one_line(heads_dir, tmp_path, field, value):
    from treeopt.drafters.checkpoints import read_heads_config

    bad = _edited_heads(heads_dir, tmp_path / "heads", **{field: value})
    with pytest.raises(TreeoptError, match=f"heads.json: config {field} is {value!r}"):
        read_heads_config(bad)


def test_a_written_heads_config_reads_back(heads_dir, eagle_dir):
    from treeopt.drafters.checkpoints import read_heads_config

    for d in (heads_dir, eagle_dir):  # every field of the config checked, none refused
        doc = json.loads((d / "heads.json").read_text())["config"]
        assert read_heads_config(d).to_dict() == doc


def test_calibrate_refuses_nan_in_a_heads_config(tiny_model_dir, heads_dir, prompts_file,
                                                 tmp_path):
    bad = _edited_heads(heads_dir, tmp_path / "heads", num_heads=float("nan"))
    refused(run("calibrate", "--model", tiny_model_dir, "--heads", bad, "--prompts",
                prompts_file, "--out", tmp_path / "t.npz"), "heads.json", "num_heads is nan")
    assert not (tmp_path / "t.npz").exists()


def test_calibrate_refuses_an_eagle_config_with_infinity(tiny_model_dir, eagle_dir,
                                                         prompts_file, tmp_path):
    bad = _edited_heads(eagle_dir, tmp_path / "eagle", rope_theta=float("inf"))
    refused(run("calibrate", "--model", tiny_model_dir, "--drafter", bad, "--prompts",
                prompts_file, "--out", tmp_path / "t.npz"), "heads.json", "rope_theta is inf")


@pytest.mark.parametrize("field, value, fragment", [
    ("rope_theta", float("inf"), "rope_theta is inf"),
    ("rms_norm_eps", float("nan"), "rms_norm_eps is nan"),
    ("hidden_size", float("inf"), "not an EAGLE config"),
])
def test_an_eagle_checkpoints_config_that_is_not_numbers_is_refused(tiny_model_dir, eagle_dir,
                                                                    tmp_path, field, value,
                                                                    fragment):
    from test_eagle import public_layout
    from transformers import AutoModelForCausalLM

    from treeopt.drafters.checkpoints import load_heads_for

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    public = public_layout(load_heads_for(model, eagle_dir), tmp_path / "eagle")
    assert load_heads_for(model, public).kind.name == "eagle"  # as written, it loads
    config = json.loads((public / "config.json").read_text())
    (public / "config.json").write_text(json.dumps({**config, field: value}))
    with pytest.raises(TreeoptError, match=f"config.json: {fragment}"):
        load_heads_for(model, public)


def test_calibrate_refuses_heads_with_nan_weights(tiny_model_dir, heads_dir, prompts_file,
                                                  tmp_path):
    from safetensors.torch import load_file, save_file

    bad = _edited_heads(heads_dir, tmp_path / "heads")
    state = load_file(str(bad / "heads.safetensors"))
    name = sorted(state)[0]
    state[name].view(-1)[0] = float("nan")
    save_file(state, str(bad / "heads.safetensors"))
    refused(run("calibrate", "--model", tiny_model_dir, "--heads", bad, "--prompts",
                prompts_file, "--out", tmp_path / "t.npz"), str(bad), name, "NaN or infinity")
    assert not (tmp_path / "t.npz").exists()


# ----- calibrate: a resume folder that is not ours -----------------------------------------------
@pytest.mark.parametrize("stamp", ["{not json", '["a list"]', None])
def test_calibrate_refuses_a_parts_folder_it_cannot_read(tiny_model_dir, heads_dir, prompts_file,
                                                         tmp_path, stamp):
    parts = tmp_path / ".t.npz.parts"
    parts.mkdir()
    (parts / "chunk-000000.npz").write_bytes(b"someone's work")
    if stamp is not None:
        (parts / "run.json").write_text(stamp)
    before = digest(parts)
    refused(run("calibrate", "--model", tiny_model_dir, "--heads", heads_dir, "--prompts",
                prompts_file, "--max-new-tokens", 4, "--out", tmp_path / "t.npz"),
            f"{parts}", "remove it to start over")
    assert digest(parts) == before and not (tmp_path / "t.npz").exists()


# ----- train-heads --generate ---------------------------------------------------------------------
def test_train_heads_refuses_a_negative_generate(files, tmp_path):
    refused(cli("train-heads", "--model", files["model"], "--kind", "medusa", "--data",
                files["prompts"], "--generate=-5", "--out", tmp_path / "h"),
            "--generate -5", "≥ 0")
    assert not (tmp_path / "h").exists()
