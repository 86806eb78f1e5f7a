"""Typed documents: step profiles, sweeps, selections, growths, dynamic traces and hardware files
are checked when read, so a bad file is one line on stderr with exit status 2 — naming the file
or flag and the problem — and nothing is written; files made from different setups are refused
rather than compared. The shipped demo's files read unchanged."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
from test_select import profile_records

from treeopt import RankTrace
from treeopt.cli import main
from treeopt.documents.step_profile import StepProfile
from treeopt.documents.sweep import Sweep
from treeopt.dynamic.recommend import price_dynamic
from treeopt.dynamic.simulate import DynamicTrace
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.model.growth import grow
from treeopt.model.tree import Tree
from treeopt.pricing.costs import StepLatency, throughput
from treeopt.pricing.throughput import price_tree

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"
RANKS = np.array([[0, 0], [0, 1], [1, 0], [0, 0], [2, -1], [0, 3]], np.int16)
HEADS = {"kind": "eagle", "num_heads": 2, "hidden_size": 64, "vocab_size": 256}


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    """``treeopt ARGS`` in process, returning what a subprocess would."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def refused(res: subprocess.CompletedProcess[str], *fragments: object) -> str:
    """Exit status 2, nothing on stdout and exactly one line on stderr holding every fragment."""
    assert res.returncode == 2, res.stderr
    assert not res.stdout
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    for f in fragments:
        assert str(f) in lines[0], lines[0]
    return lines[0]


def write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))  # json.dumps writes NaN and Infinity as a user's tool may
    return path


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    """An EAGLE drafter's growth, step profile and dynamic trace of top-k 2, all of one model."""
    meta = {"top_k": 4, "head_kind": "eagle", "num_heads": 2, "heads_config": HEADS,
            "sequence_positions": [3, 3]}
    f = {"growth": tmp_path / "g.json", "profile": tmp_path / "step.json",
         "dynamic": tmp_path / "d2.npz", "out": tmp_path / "out.json"}
    grow(RankTrace(RANKS, meta), method="empirical", max_nodes=4).save(f["growth"])
    write(f["profile"], step_profile(HEADS))
    dynamic_trace(np.zeros((6, 3, 3), np.int16)).save(f["dynamic"])
    return f


def step_profile(heads: dict, **changes: object) -> dict:
    return {"format": "treeopt.step-profile/1", "device": "cpu", "dtype": "float32",
            "threads": 1, "model": {"hidden_size": 64, "num_hidden_layers": 2,
                                    "vocab_size": 256},
            "heads": heads, "records": profile_records("hydra", batch=1), **changes}


def dynamic_trace(places: np.ndarray, *, hidden: int = 64) -> DynamicTrace:
    return DynamicTrace(2, places, (places.shape[0],),
                        {"drafter": {**HEADS, "hidden_size": hidden}, "steps": 3})


# ----- the step profile ---------------------------------------------------------------------------
STEP_PROFILES = sorted([*(DEMO / "latency").glob("step-*.json"),  # and those taken alongside
                        *(DEMO / "sweep").glob("*-alongside-*.json")])  # a sweep


@pytest.mark.parametrize("path", STEP_PROFILES, ids=lambda p: p.name)
def test_the_demo_s_step_profiles_read_unchanged(path):
    doc = json.loads(path.read_text())
    profile = StepProfile.load(path)
    assert profile.kind == doc["heads"]["kind"] and len(profile.records) == len(doc["records"])
    back = profile.to_json()
    assert [r for r in back["records"]] == doc["records"]  # every record as it was written
    assert doc["dtype"] in ("float32", "fp32") and back["dtype"] == "fp32"  # torch's: an alias
    assert {k: v for k, v in back.items() if k in doc} == {**doc, "dtype": "fp32"}  # the rest
    assert StepProfile.from_json(back, source="again") == profile


@pytest.mark.parametrize("change, fragment", [
    (lambda r: r.update(context=float("nan")), "records[2]: 'context' must be a finite number, "
                                               "got nan"),
    (lambda r: r.update(ms_verify=float("inf")), "records[2]: 'ms_verify' must be a finite"),
    (lambda r: r.update(ms_verify=0), "records[2]: 'ms_verify' must be positive, got 0"),
    (lambda r: r.update(batch="1"), "records[2]: 'batch' must be an integer, got '1'"),
    (lambda r: r.update(batch=1.5), "records[2]: 'batch' must be an integer, got 1.5"),
    (lambda r: r.pop("ms_draft"), "records[2]: missing 'ms_draft'"),
    (lambda r: r.update(expanded=[1, "x"]), "records[2]: 'expanded[1]' must be an integer"),
    (lambda r: r.update(q=7), "records[2]: a step of 2 nodes verifies 3 tokens and expands "
                              "nodes at each of its 2 depths, not q 7 and expanded [1, 1]"),
    (lambda r: r.update(dynamic={"topk": 0, "steps": 2, "draft_tokens": 3}),
     "records[2]: dynamic settings {'topk': 0, 'steps': 2, 'draft_tokens': 3}: topk must be "
     "≥ 1, got 0"),
])
def test_a_bad_step_profile_record_is_one_line_naming_the_file(files, change, fragment):
    doc = json.loads(files["profile"].read_text())
    change(doc["records"][2])
    write(files["profile"], doc)
    refused(cli("select", "--growth", files["growth"], "--step-profile", files["profile"],
                "--out", files["out"]), f"{files['profile']}: {fragment}")
    assert not files["out"].exists()


@pytest.mark.parametrize("changes, fragment", [
    ({"heads": {"kind": "nope"}}, "'heads' must be an object whose kind is one of"),
    ({"records": {}}, "'records' must be a list, got {}"),
    ({"threads": float("nan")}, "'threads' must be an integer, got nan"),
    ({"model": [1]}, "'model': expected an object, got [1]"),
    ({"design": "static"}, "'design' must be one of ['trees', 'dynamic'], got 'static'"),
])
def test_a_bad_step_profile_setup_is_one_line_naming_the_file(files, changes, fragment):
    write(files["profile"], {**step_profile(HEADS), **changes})
    refused(cli("select", "--growth", files["growth"], "--step-profile", files["profile"]),
            f"{files['profile']}: {fragment}")


def test_profiles_pooled_read_as_one(files, tmp_path):
    other = write(tmp_path / "after.json", step_profile(HEADS))
    pooled = StepProfile.pool([files["profile"], other])
    assert pooled.sources == (str(files["profile"]), str(other))
    assert len(pooled.records) == 2 * len(StepProfile.load(other).records)
    write(other, step_profile(HEADS, compile=True))
    with pytest.raises(TreeoptError, match=f"{other}: profiled with other compile than "):
        StepProfile.pool([files["profile"], other])


# ----- select --dynamic -------------------------------------------------------------------------
def select_dynamic(files: dict[str, Path], *extra: object) -> subprocess.CompletedProcess[str]:
    return cli("select", "--growth", files["growth"], "--step-profile", files["profile"],
               "--dynamic", files["dynamic"], *extra, "--out", files["out"])


def test_select_dynamic_takes_traces_of_its_own_drafter(files):
    res = select_dynamic(files)
    assert res.returncode == 0, res.stderr
    doc = json.loads(files["out"].read_text())
    assert doc["traces"] == {"2": str(files["dynamic"])}
    assert all(p["best"]["expected_accept_length"] > 1 for p in doc["points"])


def test_a_truncated_dynamic_trace_is_one_line(files):
    whole = files["dynamic"].read_bytes()
    files["dynamic"].write_bytes(whole[: len(whole) // 2])
    refused(select_dynamic(files), f"{files['dynamic']}: not a dynamic trace")
    assert not files["out"].exists()


def test_a_dynamic_trace_of_another_model_is_refused(files):
    dynamic_trace(np.zeros((6, 3, 3), np.int16), hidden=128).save(files["dynamic"])
    refused(select_dynamic(files), f"--dynamic {files['dynamic']} has 128", "hidden size 64")
    assert not files["out"].exists()


@pytest.mark.parametrize("places, fragment", [
    (np.zeros((0, 3, 3), np.int16), "no positions"),
    (np.full((6, 3, 3), np.nan), "'places' must hold integers, not float64"),
    (np.full((6, 3, 3), -3, np.int16), "pool places run -3 … -3"),
])
def test_a_dynamic_trace_without_usable_places_is_refused(files, places, fragment):
    with open(files["dynamic"], "wb") as f:
        np.savez(f, places=places, topk=np.asarray(2), lengths=np.asarray([len(places)]),
                 format=np.asarray("treeopt.dynamic-trace/1"), meta=np.asarray("{}"))
    refused(select_dynamic(files), f"{files['dynamic']}: ", fragment)
    assert not files["out"].exists()


def test_a_profile_of_static_trees_is_not_a_dynamic_profile(files, tmp_path):
    hydra = write(tmp_path / "hydra.json", step_profile({**HEADS, "kind": "hydra"}))
    refused(select_dynamic(files, "--dynamic-profile", hydra),
            f"--dynamic-profile {hydra}: a step profile of static trees (hydra heads)")
    dynamic = write(tmp_path / "dyn.json", step_profile({**HEADS, "kind": "hydra"},
                                                        design="dynamic"))
    refused(select_dynamic(files, "--dynamic-profile", dynamic), "head kind eagle",
            f"--dynamic-profile {dynamic} has hydra")
    assert not files["out"].exists()


# ----- selections, growths, grids and hardware -------------------------------------------------
@pytest.fixture()
def selection(files, tmp_path) -> Path:
    path = tmp_path / "sel.json"
    res = cli("select", "--growth", files["growth"], "--step-profile", files["profile"],
              "--out", path)
    assert res.returncode == 0, res.stderr
    return path


@pytest.mark.parametrize("argv", [
    ["export", "--tree", "{sel}", "--format", "medusa", "--out", "{out}/tree.txt"],
    ["export", "--tree", "{sel}", "--format", "medusa", "--schedule-dir", "{out}"],
    ["show", "{sel}"],
])
@pytest.mark.parametrize("change, fragment", [
    (lambda p: p.update(tokens_per_s=float("nan")), "'tokens_per_s' must be a finite number"),
    (lambda p: p.update(expected_accept_length=0.5), "'expected_accept_length' must be ≥ 1.0"),
    (lambda p: p["curve"]["tokens_per_s"].__setitem__(1, float("inf")),
     "points[0]: curve: 'tokens_per_s[1]' must be a finite number"),
    (lambda p: p.update(choices=[[0], [1, 0]]), "tree path [1, 0] has no parent [1]"),
])
def test_a_selection_holding_nan_is_not_exported(selection, tmp_path, argv, change, fragment):
    doc = json.loads(selection.read_text())
    change(doc["points"][0])
    write(selection, doc)
    out = tmp_path / "export"
    refused(cli(*[a.format(sel=selection, out=out) for a in argv]), f"{selection}: ", fragment)
    assert not out.exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.5])
@pytest.mark.parametrize("command", ["simulate", "select", "export"])
def test_a_growth_holding_nan_is_refused(files, tmp_path, value, command):
    doc = json.loads(files["growth"].read_text())
    doc["expected_accept_length"][2] = value
    write(files["growth"], doc)
    trace = tmp_path / "t.npz"
    RankTrace(RANKS, {"top_k": 4}).save(trace)
    argv = {"simulate": ["simulate", "--tree", files["growth"], "--size", "2", "--trace", trace],
            "select": ["select", "--growth", files["growth"], "--step-profile",
                       files["profile"]],
            "export": ["export", "--tree", files["growth"], "--size", "2", "--format", "medusa"]}
    refused(cli(*argv[command], "--out", files["out"]),
            f"{files['growth']}: 'expected_accept_length' of size 2 is {value}")
    assert not files["out"].exists()


@pytest.mark.parametrize("flags, fragment", [
    (["--batch", str(10 ** 20), "--context", "128"],
     f"--batch {10 ** 20} is outside 1 … 1048576"),
    (["--batch", "1", "--context", str(2 ** 30)], f"--context {2 ** 30} is outside 1 … "),
])
def test_select_refuses_a_grid_no_device_decodes(files, flags, fragment):
    refused(cli("select", "--growth", files["growth"], "--hardware", "h100-sxm", "--preset",
                "llama-2-7b", *flags, "--out", files["out"]), fragment)
    assert not files["out"].exists()


@pytest.mark.parametrize("field, value", [("bandwidth_gbs", float("inf")),
                                          ("tflops_bf16", float("nan")),
                                          ("memory_gb", -1), ("tflops_fp32", "10")])
def test_select_refuses_hardware_that_is_not_finite(files, tmp_path, field, value):
    hw = write(tmp_path / "hw.json", {"format": "treeopt.hardware/1", "name": "box",
                                      "tflops_bf16": 100.0, "tflops_fp32": 10.0,
                                      "bandwidth_gbs": 1000.0, field: value})
    refused(cli("select", "--growth", files["growth"], "--hardware", hw, "--preset",
                "llama-2-7b", "--batch", "1", "--context", "128", "--out", files["out"]),
            f"{hw}: hardware 'box': {field} must be a positive finite number")
    assert not files["out"].exists()


def test_choose_drafter_refuses_selections_of_other_hardware(files, selection, tmp_path):
    h100 = tmp_path / "h100.json"
    res = cli("select", "--growth", files["growth"], "--hardware", "h100-sxm", "--preset",
              "llama-2-7b", "--batch", "1", "--context", "100", "--out", h100)
    assert res.returncode == 0, res.stderr
    refused(cli("choose-drafter", selection, h100, "--out", files["out"]),
            f"{selection} was priced on device 'cpu' but {h100} on 'h100-sxm'")
    assert not files["out"].exists()
    other = tmp_path / "other.json"  # the same hardware, another model
    res = cli("select", "--growth", files["growth"], "--hardware", "h100-sxm", "--preset",
              "tiny", "--batch", "1", "--context", "100", "--out", other)
    assert res.returncode == 0, res.stderr
    refused(cli("choose-drafter", h100, other), f"{h100} was priced on model 'llama-2-7b' but "
                                                f"{other} on 'tiny'")


# ----- sweeps -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(p.name for p in (DEMO / "sweep").glob("*.json")
                                         if "-alongside-" not in p.name))
def test_the_demo_s_sweeps_read_unchanged(name):
    doc = json.loads((DEMO / "sweep" / name).read_text())
    assert Sweep.load(DEMO / "sweep" / name).to_json()["points"] == doc["points"]


@pytest.mark.parametrize("change, fragment", [
    (lambda p: p["measured"].update(speedup=float("nan")),
     "points[0]: measured: 'speedup' must be a finite number, got nan"),
    (lambda p: p["measured"].update(lossless="yes"), "'lossless' must be true, false or null"),
    (lambda p: p.update(batch=None), "points[0]: 'batch' must be an integer, got None"),
    (lambda p: p.update(choices=[[0], ["a"]]), "points[0]: choices[1]: 'choices[0]' must be"),
    (lambda p: p.update(predicted={"speedup": -1}), "predicted: 'speedup' must be positive"),
])
def test_a_bad_sweep_point_is_one_line_naming_the_file(tmp_path, change, fragment):
    doc = json.loads((DEMO / "sweep" / "medusa-cpu.json").read_text())
    change(doc["points"][0])
    path = write(tmp_path / "s.json", doc)
    with pytest.raises(TreeoptError) as err:
        Sweep.load(path)
    assert str(err.value).startswith(f"{path}: ") and fragment in str(err.value)


def test_a_bad_race_is_one_line_naming_the_file(tmp_path):
    doc = json.loads((DEMO / "sweep" / "medusa-cpu.json").read_text())
    doc["races"] = [{"batch": 1, "best": [1, 4], "selected": [1, 2, None],
                     "selected_over_best": 0.98}]
    path = write(tmp_path / "s.json", doc)
    with pytest.raises(TreeoptError, match=r"races\[0\]: 'best' must be \[batch, size, depth"):
        Sweep.load(path)


# ----- one step-throughput formula ------------------------------------------------------------
def test_trees_and_dynamic_steps_are_priced_by_the_one_formula():
    """A static tree and a dynamic setting that verify, expand and accept alike price alike,
    and both as the formula prices them."""
    lat = StepLatency({(2, 64): (np.array([1.0, 4.0]), np.array([0.010, 0.016]))}, "toy")
    from treeopt.pricing.costs import DraftCost, OverheadCost

    draft = DraftCost("eagle", "toy", lambda b, e: 1e-3 * b * sum(e))
    over = OverheadCost("toy", lambda b, q, d: 1e-4 * (b + q + d))
    chain = Tree.chain(3)  # expands (1, 1, 1), like top-k 1 over 3 steps
    kw = {"verify": lat, "draft": draft, "overhead": over, "batch": 2, "context": 64}
    formula = throughput([1.0, 2.5], tokens=[1, 4], expanded=[(), (1, 1, 1)], **kw)
    want = [2 * 1.0 / (0.010 + 0.0 + 1e-4 * 3), 2 * 2.5 / (0.016 + 0.006 + 1e-4 * 9)]
    assert formula.tokens_per_s.tolist() == pytest.approx(want, rel=1e-12)
    tree = price_tree(chain, expected_accept_length=2.5, **kw)
    dynamic = price_dynamic(DynamicSettings(1, 3, 4), 2.5, **kw)
    assert tree == (formula.tokens_per_s[1], formula.tokens_per_s[0])
    assert (dynamic.tokens_per_s, dynamic.autoregressive_tokens_per_s) == tree
