"""The core sub-commands end to end, through ``python -m treeopt`` in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from treeopt import RankTrace, Tree
from treeopt.formats import export
from treeopt.simulate import simulate

ROWS = [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, -1], [0, -1, 0], [2, 0, 0], [-1, 0, 0], [0, 0, 0]]
TRACE = RankTrace(np.array(ROWS, np.int16), {"top_k": 3})
T7 = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
T7_LIST = "[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]"
EMPIRICAL_ORDER = [[0], [0, 0], [0, 0, 0], [1], [2], [0, 1], [1, 0], [2, 0], [0, 0, 1], [0, 1, 0],
                   [2, 0, 0]]
EMPIRICAL_ELL = [1, 1.625, 2.0, 2.25, 2.375, 2.5, 2.625, 2.75, 2.875, 3.0, 3.125, 3.25]


def treeopt(*args: object, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "treeopt", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


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
        "grew empirical trees of 1 … 11 nodes",
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
    assert doc == simulate(Tree.chain(3), TRACE).to_json()
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
    ("trtllm-yaml", ["--draft", "eagle"], "speculative_config:\n  decoding_type: Eagle\n"
     "  max_draft_len: 3\n  max_total_draft_tokens: 7\n  num_eagle_layers: 3\n"
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
    assert proc.stdout == "" and proc.stderr == "wrote v.json\n"
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
        "medusa   ok",
        "hydra    ok",
        "vllm     no: vLLM's tree drafter needs a level-uniform tree (every node of a level with "
        "the same children 0..c-1), but depth 2 has children counts [0, 1, 2] under its 3 "
        "parents; grow with --constraint uniform",
        "growmap  ok",
    ]


def test_show_a_leaves_only_file(tmp_path):
    (tmp_path / "leaves.txt").write_text("[[1], [0, 0]]\n")
    proc = ok("show", "leaves.txt", "--format", "paths", cwd=tmp_path)
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
    assert line == ("treeopt export: error: cannot export to hydra: the tree is 3 deep but there "
                    "are only 2 heads")


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
