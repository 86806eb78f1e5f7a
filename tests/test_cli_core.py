"""The core sub-commands end to end, through ``treeopt ARGS`` run as its subprocess would be
(:mod:`in_process`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import in_process
import numpy as np
import pytest

from treeopt import RankTrace, Tree
from treeopt.engines.forms import export
from treeopt.model.simulation import simulate

ROWS = [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, -1], [0, -1, 0], [2, 0, 0], [-1, 0, 0], [0, 0, 0]]
TRACE = RankTrace(np.array(ROWS, np.int16), {"top_k": 3})
T7 = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
T7_LIST = "[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]"
EMPIRICAL_ORDER = [[0], [0, 0], [0, 0, 0], [1], [2], [0, 1], [1, 0], [2, 0], [0, 0, 1], [0, 1, 0],
                   [2, 0, 0]]
EMPIRICAL_ELL = [1, 1.625, 2.0, 2.25, 2.375, 2.5, 2.625, 2.75, 2.875, 3.0, 3.125, 3.25]


def treeopt(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return in_process.treeopt(*args, cwd=cwd)


def ok(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = treeopt(*args, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def fails(*args: object, cwd: Path) -> str:
    """Exit status 2 and exactly one line on stderr, no traceback: return that line."""
    proc = treeopt(*args, cwd=cwd)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert proc.stdout == ""
    return lines[0]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    TRACE.save(tmp_path / "t.npz")
    RankTrace(np.array([[0, 0, 0], [1, 1, 1]], np.int16), {"top_k": 3}).save(tmp_path / "h.npz")
    RankTrace(np.zeros((4, 2), np.int16), {"top_k": 3}).save(tmp_path / "two_heads.npz")
    (tmp_path / "acc.csv").write_text("head,top1,top2\n1,0.5,0.75\n2,0.5,0.75\n")
    (tmp_path / "t7.json").write_text(export(T7, "json"))
    return {p.stem: p for p in tmp_path.iterdir()}


# ----- successful runs ----------------------------------------------------------------------------
def test_accuracies_of_a_trace(files, tmp_path):
    doc = json.loads(ok("accuracies", "--trace", files["t"], cwd=tmp_path).stdout)
    assert doc["format"] == "treeopt.accuracies/1"
    assert doc["marginal"] == [[0.625, 0.125, 0.125], [0.75, 0.125, 0.0], [0.75, 0.125, 0.0]]
    assert doc["counts"] == [8, 8, 8] and doc["conditional_counts"] == [8, 5, 3]


def test_accuracies_of_a_csv_to_a_file(files, tmp_path):
    proc = ok("accuracies", "--accuracies", files["acc"], "--out", "a.json", cwd=tmp_path)
    assert proc.stdout == "" and proc.stderr == "wrote a.json\n"
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["marginal"] == [[0.5, 0.25], [0.5, 0.25]] and doc["counts"] is None


def test_grow_writes_a_growth_file_atomically(files, tmp_path):
    out = tmp_path / "out" / "g.json"
    proc = ok("grow", "--trace", files["t"], "--max-nodes", 20, "--out", out, cwd=tmp_path)
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "grew empirical trees of 1 … 11 nodes; E[L] of the 11-node tree 3.25 position-weighted",
        "note: only 11 nodes have a non-zero acceptance probability under the caps; larger trees "
        "cannot raise E[L]",
        f"wrote {out}"]
    assert os.listdir(out.parent) == ["g.json"]  # no temporary file left behind
    doc = json.loads(out.read_text())
    assert doc["format"] == "treeopt.growth/1" and doc["method"] == "empirical"
    assert doc["order"] == EMPIRICAL_ORDER and doc["expected_accept_length"] == EMPIRICAL_ELL
    assert doc["caps"] == {"max_nodes": 20, "max_depth": 3, "max_rank": 3}
    assert "held_out" not in doc
    # overwriting an existing file replaces it whole
    ok("grow", "--trace", files["t"], "--max-nodes", 2, "--out", out, cwd=tmp_path)
    assert json.loads(out.read_text())["order"] == [[0], [0, 0]]
    assert os.listdir(out.parent) == ["g.json"]


def test_grow_with_held_out(files, tmp_path):
    doc = json.loads(ok("grow", "--trace", files["t"], "--max-nodes", 4, "--held-out", files["h"],
                        cwd=tmp_path).stdout)
    # held-out positions 000 and 111 accept (0) (0,0) (0,0,0) and (1): 1 + k/2
    assert doc["held_out"] == {"trace": str(files["h"]),
                               "expected_accept_length": [1.0, 1.5, 2.0, 2.5, 3.0],
                               "gap": [0.0, 0.125, 0.0, -0.25, -0.625]}


# Six positions where the chain of 3 accepts everything, then four where it accepts nothing:
# positions weigh the 3-node chain at (6·4 + 4) / 10 = 2.8; decoding steps at 0 and 4 (4 tokens
# each), then 8 and 9: 10 tokens in 4 steps, 2.5 (tests/test_simulate.py has the 5-deep case).
BURSTY = RankTrace(np.array([[0] * 3] * 6 + [[-1] * 3] * 4, np.int16),
                   {"top_k": 3, "sequence_positions": [10]})


def test_grow_leads_with_the_per_step_e_l(tmp_path):
    BURSTY.save(tmp_path / "b.npz")
    RankTrace(np.array([[0] * 3] * 4, np.int16), {"top_k": 3, "sequence_positions": [4]}).save(
        tmp_path / "good.npz")  # every position accepts the chain: 4 tokens in one step
    proc = ok("grow", "--trace", "b.npz", "--max-nodes", 3, "--held-out", "good.npz",
              cwd=tmp_path)
    assert proc.stderr.splitlines()[0] == ("grew empirical trees of 1 … 3 nodes; E[L] of the "
                                           "3-node tree 2.5 per step (2.8 position-weighted)")
    doc = json.loads(proc.stdout)
    # 1 node: 2 a step at 0, 2, 4, then 4 of 1 — 10 / 7; 2 nodes: 3 at 0 and 3, then 6 … 9 — 10 / 6
    assert doc["per_step_accept_length"] == [1.0, 1.428571428571, 1.666666666667, 2.5]
    assert doc["expected_accept_length"] == [1.0, 1.6, 2.2, 2.8]
    assert list(doc).index("per_step_accept_length") < list(doc).index("expected_accept_length")
    held = doc["held_out"]
    assert list(held) == ["trace", "per_step_accept_length", "per_step_gap",
                          "expected_accept_length", "gap"]
    assert held["per_step_accept_length"] == [1.0, 2.0, 3.0, 4.0]  # 2+2; 3+3 (past the end); 4
    assert held["per_step_gap"] == [0.0, -0.571428571429, -1.333333333333, -1.5]
    assert held["expected_accept_length"] == [1.0, 2.0, 3.0, 4.0]


def test_simulate_and_show_lead_with_the_per_step_e_l(tmp_path):
    BURSTY.save(tmp_path / "b.npz")
    (tmp_path / "chain.json").write_text("[[0], [0, 0], [0, 0, 0]]")
    doc = json.loads(ok("simulate", "--tree", "chain.json", "--trace", "b.npz",
                        cwd=tmp_path).stdout)
    assert doc == {"acceptance": "per step", "mean_accept_length": 2.5, "stderr": doc["stderr"],
                   "histogram": [0, 2, 0, 0, 2], "steps": 4, "sequences": 1, "positions": 10,
                   "position_weighted": {"mean_accept_length": 2.8,
                                         "stderr": doc["position_weighted"]["stderr"],
                                         "histogram": [0, 4, 0, 0, 6], "positions": 10}}
    ok("grow", "--trace", "b.npz", "--max-nodes", 3, "--out", "g.json", cwd=tmp_path)
    shown = ok("show", "g.json", "--size", 3, cwd=tmp_path).stdout.splitlines()
    assert shown[6] == "E[L] of the 3-node tree 2.5 per step (2.8 position-weighted)"


def test_grow_independent_uniform_from_a_csv(files, tmp_path):
    doc = json.loads(ok("grow", "--accuracies", files["acc"], "--method", "independent",
                        "--constraint", "uniform", "--max-nodes", 3, cwd=tmp_path).stdout)
    # (1) 1.5; (1,1) 1.75 beats (2) 1.75 (found first); (1,2) 1 + .5 + .5 * .75 = 1.875
    assert doc["branching"] == [[1], [1, 1], [1, 2]]
    assert doc["expected_accept_length"] == [1.0, 1.5, 1.75, 1.875]
    assert doc["meta"]["source"] == str(files["acc"])


def test_simulate_a_growth_size_and_a_tree_file(files, tmp_path):
    ok("grow", "--trace", files["t"], "--max-nodes", 5, "--out", "g.json", cwd=tmp_path)
    doc = json.loads(ok("simulate", "--tree", "g.json", "--size", 3, "--trace", files["t"],
                        cwd=tmp_path).stdout)
    assert doc == {"acceptance": "position-weighted", **simulate(Tree.chain(3), TRACE).to_json()}
    assert (doc["mean_accept_length"], doc["histogram"]) == (2.25, [0, 3, 2, 1, 2])
    ok("simulate", "--tree", files["t7"], "--trace", files["t"], "--out", "s.json", cwd=tmp_path)
    doc = json.loads((tmp_path / "s.json").read_text())
    assert (doc["mean_accept_length"], doc["histogram"], doc["positions"]) == (
        2.75, [0, 1, 2, 3, 2], 8)


EXPORTS = [
    ("medusa", [], T7_LIST),
    ("hydra", [], T7_LIST),
    ("trtllm", [], f'--medusa_choices="{T7_LIST}"'),
    ("trtllm", ["--draft", "eagle"], f'--eagle_choices="{T7_LIST}"'),
    ("trtllm-yaml", ["--num-heads", 5], "speculative_config:\n  decoding_type: Medusa\n"
     f"  max_draft_len: 7\n  num_medusa_heads: 5\n  medusa_choices: {T7_LIST}"),
    ("trtllm-yaml", ["--draft", "eagle", "--speculative-model", "eagle-ckpt"],
     'speculative_config:\n  decoding_type: Eagle\n  speculative_model: "eagle-ckpt"\n'
     "  max_draft_len: 3\n  max_total_draft_tokens: 7\n"
     f"  max_non_leaves_per_layer: 2\n  eagle_choices: {T7_LIST}"),
    ("triton", [], "{0}, {1}, {2}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}"),
    ("growmap", [], export(T7, "growmap")),
    ("paths", [], "[[2], [0, 1], [1, 0], [0, 0, 0]]"),
    ("json", [], f'{{"format": "treeopt.tree/1", "choices": {T7_LIST}}}'),
]


@pytest.mark.parametrize("fmt, extra, text", EXPORTS, ids=[f"{e[0]}-{i}" for i, e in enumerate(EXPORTS)])
def test_export_every_format(files, tmp_path, fmt, extra, text):
    proc = ok("export", "--tree", files["t7"], "--format", fmt, *extra, cwd=tmp_path)
    assert proc.stdout == text + "\n"


def test_export_vllm_from_a_uniform_growth_to_a_file(files, tmp_path):
    ok("grow", "--trace", files["t"], "--max-nodes", 4, "--constraint", "uniform",
       "--out", "u.json", cwd=tmp_path)
    proc = ok("export", "--tree", "u.json", "--size", 4, "--format", "vllm", "--out", "v.json",
              cwd=tmp_path)
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[0] == "wrote v.json"
    assert proc.stderr.splitlines()[1].startswith("note: only vLLM 0.10.1 – 0.20.2 take a fixed "
                                                  "tree, for method eagle, eagle3 or mtp")
    assert (tmp_path / "v.json").read_text() == (
        '{"num_speculative_tokens": 4, '
        '"speculative_token_tree": "[(0,), (0, 0), (0, 0, 0), (0, 0, 1)]"}\n')


def test_show(files, tmp_path):
    proc = ok("show", files["t7"], cwd=tmp_path)
    assert proc.stdout.splitlines() == [
        "● root",
        "├── 0",
        "│   ├── 0",
        "│   │   └── 0",
        "│   └── 1",
        "├── 1",
        "│   └── 0",
        "└── 2",
        "",
        "nodes 7 (+ root), depth 3, widths per depth [3, 3, 1], leaves 4, max rank 2",
        "",
        "engines (export --format …):",
        "  medusa                     runs it",
        "  hydra                      runs it",
        "  trtllm --draft medusa      runs it",
        "  trtllm --draft eagle       runs it",
        "  trtllm-yaml --draft medusa runs it",
        "  trtllm-yaml --draft eagle  runs it",
        "  triton --draft medusa      runs it",
        "  triton --draft eagle       runs it",
        "  vllm                       no: vLLM's tree drafter needs a level-uniform tree (every "
        "node of a level with the same children 0..c-1), but depth 2 has children counts "
        "[0, 1, 2] under its 3 parents (grow with --constraint uniform)",
        "  growmap                    runs it",
        "  paths                      runs it",
        "  json                       runs it",
    ]


def test_show_a_leaves_only_file(tmp_path):
    (tmp_path / "leaves.txt").write_text("[[1], [0, 0]]\n")
    proc = ok("show", "leaves.txt", "--tree-format", "paths", cwd=tmp_path)
    assert proc.stdout.splitlines()[:4] == ["● root", "├── 0", "│   └── 0", "└── 1"]


# ----- bad input: exit 2, one line, no traceback --------------------------------------------------
def test_missing_trace_file(tmp_path):
    line = fails("accuracies", "--trace", "missing.npz", cwd=tmp_path)
    assert line == "treeopt accuracies: error: missing.npz: no such file"


def test_wrong_trace_format_tag(files, tmp_path):
    with open(tmp_path / "old.npz", "wb") as fh:
        np.savez(fh, ranks=np.zeros((2, 2), np.int16),
                 meta=np.array(json.dumps({"format": "treeopt.trace/0"})))
    line = fails("simulate", "--tree", files["t7"], "--trace", "old.npz", cwd=tmp_path)
    assert line == ("treeopt simulate: error: old.npz: format is 'treeopt.trace/0', expected "
                    "'treeopt.trace/1'")


def test_tree_given_inline_is_not_a_file(files, tmp_path):
    line = fails("simulate", "--tree", "[[0]]", "--trace", files["t"], cwd=tmp_path)
    assert line == "treeopt simulate: error: [[0]]: no such file"


@pytest.mark.parametrize("flags, message", [
    (["--max-nodes", 0], "treeopt grow: error: --max-nodes must be at least 1, got 0"),
    (["--max-nodes", 3, "--max-depth", 0], "treeopt grow: error: --max-depth and --max-rank must be "
                                           "at least 1, got {'max_nodes': 3, 'max_depth': 0, "
                                           "'max_rank': 3}"),
])
def test_grow_bad_flag_values(files, tmp_path, flags, message):
    assert fails("grow", "--trace", files["t"], *flags, cwd=tmp_path) == message


def test_grow_empirical_needs_a_trace(files, tmp_path):
    line = fails("grow", "--accuracies", files["acc"], "--max-nodes", 3, cwd=tmp_path)
    assert line.startswith("treeopt grow: error: the empirical method needs a rank trace")


def test_bad_csv_names_the_file(tmp_path):
    (tmp_path / "bad.csv").write_text("head,top1,top2\n1,0.7,0.6\n")
    line = fails("accuracies", "--accuracies", "bad.csv", cwd=tmp_path)
    assert line == ("treeopt accuracies: error: bad.csv: head 1's cumulative accuracy decreases "
                    "from top1 (0.7000) to top2 (0.6000)")


def test_growth_file_without_size(files, tmp_path):
    ok("grow", "--trace", files["t"], "--max-nodes", 3, "--out", "g.json", cwd=tmp_path)
    line = fails("show", "g.json", cwd=tmp_path)
    assert line == ("treeopt show: error: g.json: a growth file holds trees of 1..3 nodes; "
                    "pick one with --size N")


def test_trace_with_too_few_heads(files, tmp_path):
    line = fails("simulate", "--tree", files["t7"], "--trace", "two_heads.npz", cwd=tmp_path)
    assert line == ("treeopt simulate: error: two_heads.npz: the trace has 2 heads but the tree "
                    "needs depth 3")


def test_export_an_engine_cannot_run(files, tmp_path):
    line = fails("export", "--tree", files["t7"], "--format", "hydra", "--num-heads", 2,
                 cwd=tmp_path)
    assert line == ("treeopt export: error: cannot export to hydra: Hydra reference code, grounded "
                    "heads (hydra_choices) would not build this tree: the tree is 3 deep but "
                    "there are only 2 heads (grow with --max-depth 2)")


def test_show_an_empty_tree(tmp_path):
    (tmp_path / "empty.txt").write_text("[]")
    assert fails("show", "empty.txt", cwd=tmp_path) == (
        "treeopt show: error: empty.txt: the tree has no nodes")


def test_usage_errors_exit_2_without_traceback(tmp_path):
    proc = treeopt("grow", "--max-nodes", "three", "--trace", "t.npz", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [  # one line, no usage dump
        "treeopt grow: error: argument --max-nodes: invalid int value: 'three' "
        "(see treeopt grow --help)"]


# ----- a selection is a tree source ---------------------------------------------------------------
@pytest.fixture
def selection(tmp_path: Path) -> Path:
    """Batch 1 picks the depth-2 chain, batch 4 the 3-node tree, batch 8 turns speculation off."""
    from treeopt.files import write_json
    from treeopt.model.growth import Growth
    from treeopt.pricing.costs import StepLatency
    from treeopt.pricing.throughput import select

    growth = Growth("empirical", "none", ((0,), (0, 0), (1,)), np.array([1.0, 1.8, 2.4, 2.5]), {})
    ms = {1: [10, 10, 11, 20], 4: [10, 10, 10, 10], 8: [10, 20, 30, 40]}
    latency = StepLatency.from_points([(b, 64, q + 1, row[q] / 1e3) for b, row in ms.items()
                                       for q in range(4)], "hand-made")
    path = tmp_path / "selection.json"
    write_json(path, select(growth, latency, batch=[1, 4, 8], context=[64]).to_json())
    return path


def test_export_show_simulate_take_a_selection(files, selection, tmp_path):
    assert ok("export", "--tree", selection, "--batch", 1, "--format", "medusa",
              cwd=tmp_path).stdout == "[[0], [0, 0]]\n"
    assert ok("export", "--tree", selection, "--batch", 4, "--context", 64, "--format", "medusa",
              cwd=tmp_path).stdout == "[[0], [1], [0, 0]]\n"
    shown = ok("show", selection, "--batch", 1, cwd=tmp_path).stdout
    assert "nodes 2 (+ root), depth 2" in shown
    assert ("E[L] 2.4 as priced (position-weighted E[L] of the growth), a tree of the growth "
            "order family") in shown
    doc = json.loads(ok("simulate", "--tree", selection, "--batch", 1, "--trace", files["t"],
                        cwd=tmp_path).stdout)
    assert doc["mean_accept_length"] == simulate(Tree.from_choices([[0], [0, 0]]),
                                                 TRACE).mean_accept_length


def test_export_a_selection_schedule_one_file_per_batch_range(selection, tmp_path):
    proc = ok("export", "--tree", selection, "--format", "trtllm", "--schedule-dir", "out",
              cwd=tmp_path)
    assert proc.stdout == ""
    assert proc.stderr.splitlines()[:4] == [
        "batch 1-1: 2 nodes → trtllm.batch1-1.txt", "batch 2-4: 3 nodes → trtllm.batch2-4.txt",
        "batch 5-8: 0 nodes → speculation off", "wrote 2 file(s) and schedule.json to out"]
    out = tmp_path / "out"
    assert (out / "trtllm.batch1-1.txt").read_text() == '--medusa_choices="[[0], [0, 0]]"\n'
    assert (out / "trtllm.batch2-4.txt").read_text() == '--medusa_choices="[[0], [1], [0, 0]]"\n'
    plan = json.loads((out / "schedule.json").read_text())
    assert [r.get("file") for r in plan["ranges"]] == ["trtllm.batch1-1.txt",
                                                       "trtllm.batch2-4.txt", None]
    assert plan["tensorrt_llm"] == {  # a longer draft at batch 2-4 than at 1: no schedule
        "reading": "release-1.2",
        "refused": "TensorRT-LLM's draft_len_schedule needs its longest draft at its smallest "
                   "batch size (max_draft_len), but batch sizes 2-4 draft 3, more than batch "
                   "size 1's 2"}


@pytest.mark.parametrize("args, message", [
    (["--format", "medusa"], "selection.json: the selection holds a tree per batch size "
                             "[1, 4, 8]; pick one with --batch B"),
    (["--format", "medusa", "--batch", 2], "selection.json: the selection has no point at batch "
                                           "2, context 64; it has batches [1, 4, 8] and contexts "
                                           "[64]"),
    (["--format", "medusa", "--size", 2], "--size applies to growth files only, and "
                                          "selection.json is not one"),
    (["--format", "medusa", "--batch", 1, "--schedule-dir", "d"],
     "--schedule-dir writes every batch range; leave out --batch"),
])
def test_selection_flags_are_checked(selection, tmp_path, args, message):
    assert fails("export", "--tree", "selection.json", *args, cwd=tmp_path) == (
        f"treeopt export: error: {message}")
    assert not (tmp_path / "d").exists()


def test_batch_is_refused_for_a_plain_tree(files, tmp_path):
    assert fails("export", "--tree", "t7.json", "--batch", 1, "--format", "medusa",
                 cwd=tmp_path) == ("treeopt export: error: --batch picks a point of a selection "
                                   "file, and t7.json is not one")
    assert fails("export", "--tree", "t7.json", "--schedule-dir", "d", "--format", "medusa",
                 cwd=tmp_path) == ("treeopt export: error: --schedule-dir exports a selection's "
                                   "per-batch schedule, and t7.json is not a selection (pass "
                                   "--out instead)")


def test_export_names_the_grow_flags_that_make_a_valid_tree(tmp_path):
    (tmp_path / "t.txt").write_text("[[0], [1], [1, 0]]")
    assert fails("export", "--tree", "t.txt", "--format", "hydra", cwd=tmp_path) == (
        "treeopt export: error: cannot export to hydra: Hydra reference code, grounded heads "
        "(hydra_choices) would not build this tree: [1] has children but [0] has none: Hydra "
        "extends the first e children of a node, so they would be drafted below [0] (grow with "
        "--constraint grounded)")
    assert fails("export", "--tree", "t.txt", "--format", "trtllm-yaml", cwd=tmp_path) == (
        "treeopt export: error: --num-heads is required for TensorRT-LLM's Medusa YAML: its "
        "num_medusa_heads overrides the checkpoint's head count")


def test_schedule_dir_is_checked_before_any_work(selection, tmp_path):
    (tmp_path / "afile").write_text("x")
    assert fails("export", "--tree", selection, "--format", "medusa", "--schedule-dir", "afile",
                 cwd=tmp_path) == ("treeopt export: error: --schedule-dir afile is a file; give "
                                   "a directory")
    assert fails("export", "--tree", selection, "--format", "medusa", "--schedule-dir",
                 "afile/sub", cwd=tmp_path) == ("treeopt export: error: --schedule-dir "
                                                "afile/sub: afile is not a directory")
    (tmp_path / "schedule.json").write_text(selection.read_text())
    before = (tmp_path / "schedule.json").read_text()
    assert fails("export", "--tree", "schedule.json", "--format", "medusa", "--schedule-dir", ".",
                 cwd=tmp_path) == ("treeopt export: error: --schedule-dir .: writing "
                                   "schedule.json would overwrite the --tree input; choose "
                                   "another --schedule-dir")
    assert (tmp_path / "schedule.json").read_text() == before
    ok("export", "--tree", selection, "--format", "medusa", "--schedule-dir", ".", cwd=tmp_path)
    assert (tmp_path / "medusa.batch1-1.json").read_text() == "[[0], [0, 0]]\n"
