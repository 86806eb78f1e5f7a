"""Accuracy tables: exact values from a hand-made trace; CSV and JSON readers and their errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from treeopt import AccuracyTable, RankTrace, TreeoptError, read_accuracies

# 8 positions x 3 heads; top_k = 3 (largest rank 2)
ROWS = [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, -1], [0, -1, 0], [2, 0, 0], [-1, 0, 0], [0, 0, 0]]


@pytest.fixture
def table() -> AccuracyTable:
    return AccuracyTable.from_trace(RankTrace(np.array(ROWS, np.int16)))


def test_from_trace_marginal_and_cumulative(table):
    # head 1 ranks 0,0,0,1,0,2,-1,0 -> rank 0: 5/8, rank 1: 1/8, rank 2: 1/8 (the -1 is a miss)
    # head 2 ranks 0,0,1,0,-1,0,0,0 -> 6/8, 1/8, 0
    # head 3 ranks 0,1,0,-1,0,0,0,0 -> 6/8, 1/8, 0
    assert (table.heads, table.top_k) == (3, 3)
    assert table.marginal.tolist() == [[5 / 8, 1 / 8, 1 / 8], [6 / 8, 1 / 8, 0.0],
                                       [6 / 8, 1 / 8, 0.0]]
    assert table.cumulative.tolist() == [[5 / 8, 6 / 8, 7 / 8], [6 / 8, 7 / 8, 7 / 8],
                                         [6 / 8, 7 / 8, 7 / 8]]
    assert table.counts.tolist() == [8, 8, 8]
    assert table.source == "rank trace"


def test_from_trace_conditional(table):
    # head 1: no condition, all 8 positions
    # head 2 given head 1 ranked 0: positions 0,1,2,4,7 -> head 2 ranks 0,0,1,-1,0 -> 3/5, 1/5, 0
    # head 3 given heads 1,2 ranked 0: positions 0,1,7 -> head 3 ranks 0,1,0 -> 2/3, 1/3, 0
    assert table.conditional.tolist() == [[5 / 8, 1 / 8, 1 / 8], [3 / 5, 1 / 5, 0.0],
                                          [2 / 3, 1 / 3, 0.0]]
    assert table.conditional_counts.tolist() == [8, 5, 3]


def test_from_trace_top_k_override_and_no_conditioning_rows():
    tr = RankTrace(np.array([[1, 0], [3, 0]], np.int16), {"top_k": 8})
    t = AccuracyTable.from_trace(tr, top_k=2)
    assert t.marginal.tolist() == [[0.0, 0.5], [1.0, 0.0]]  # rank 3 lies beyond top-2: a miss
    assert t.conditional.tolist() == [[0.0, 0.5], [0.0, 0.0]]  # nobody conditions head 2
    assert t.conditional_counts.tolist() == [2, 0]
    assert AccuracyTable.from_trace(tr).top_k == 8


def test_from_trace_rejects_an_empty_trace():
    with pytest.raises(TreeoptError, match=r"the rank trace is empty \(0 positions\)"):
        AccuracyTable.from_trace(RankTrace(np.zeros((0, 2), np.int16)))


def test_to_json(table):
    doc = table.to_json()
    assert doc == {
        "format": "treeopt.accuracies/1", "heads": 3, "top_k": 3,
        "marginal": [[0.625, 0.125, 0.125], [0.75, 0.125, 0.0], [0.75, 0.125, 0.0]],
        "cumulative": [[0.625, 0.75, 0.875], [0.75, 0.875, 0.875], [0.75, 0.875, 0.875]],
        "counts": [8, 8, 8],
        "conditional": [[0.625, 0.125, 0.125], [0.6, 0.2, 0.0], [0.666667, 0.333333, 0.0]],
        "conditional_counts": [8, 5, 3],
    }


def test_from_cumulative():
    t = AccuracyTable.from_cumulative([[0.6, 0.7, 0.75], [0.4, 0.4, 0.5]], counts=[100, 100])
    np.testing.assert_allclose(t.marginal, [[0.6, 0.1, 0.05], [0.4, 0.0, 0.1]], atol=1e-15)
    np.testing.assert_allclose(t.cumulative, [[0.6, 0.7, 0.75], [0.4, 0.4, 0.5]], atol=1e-15)
    assert t.counts.tolist() == [100, 100] and t.conditional is None


@pytest.mark.parametrize("marginal, fragment", [
    ([[0.6, 0.5]], "head 1's top-i accuracies add up to 1.1000 > 1"),
    ([[0.5, float("nan")]], "head 1 top2 accuracy is NaN"),
    ([[0.5], [-0.1]], "head 2 top1 accuracy -0.1 is outside [0, 1]"),
    ([], "must be a non-empty [heads, top_k] table"),
    ([0.5, 0.2], "got shape (2,)"),
])
def test_marginal_validation(marginal, fragment):
    with pytest.raises(TreeoptError) as err:
        AccuracyTable(np.asarray(marginal, dtype=np.float64))
    assert fragment in str(err.value)


# ----- CSV and JSON files -------------------------------------------------------------------------
def test_read_csv(tmp_path):
    path = tmp_path / "acc.csv"
    path.write_text("Head, Top1, top2 ,top3\n1,0.6,0.7,0.75\n\n2,0.4,0.5,0.55\n")
    t = read_accuracies(path)
    assert (t.heads, t.top_k, t.source, t.counts) == (2, 3, str(path), None)
    np.testing.assert_allclose(t.marginal, [[0.6, 0.1, 0.05], [0.4, 0.1, 0.05]], atol=1e-15)
    np.testing.assert_allclose(t.cumulative, [[0.6, 0.7, 0.75], [0.4, 0.5, 0.55]], atol=1e-15)


def test_read_json_marginal_cumulative_and_round_trip(tmp_path, table):
    p = tmp_path / "m.json"
    p.write_text(json.dumps({"format": "treeopt.accuracies/1", "marginal": [[0.5, 0.25]],
                             "counts": [40]}))
    t = read_accuracies(p)
    assert t.marginal.tolist() == [[0.5, 0.25]] and t.counts.tolist() == [40]
    p = tmp_path / "c.JSON"
    p.write_text(json.dumps({"format": "treeopt.accuracies/1", "cumulative": [[0.5, 0.75]]}))
    assert read_accuracies(p).marginal.tolist() == [[0.5, 0.25]]
    p = tmp_path / "table.json"
    p.write_text(json.dumps(table.to_json()))
    back = read_accuracies(p)
    assert back.marginal.tolist() == table.marginal.tolist()  # eighths survive the rounding
    assert back.counts.tolist() == [8, 8, 8]


@pytest.mark.parametrize("text, fragment", [
    ("head,top1,top2\n1,0.5,nan\n", "head 1 top2 accuracy is NaN"),
    ("head,top1,top2\n1,0.5,0.6\n2,1.2,1.3\n", "head 2 top1 accuracy 1.2 is outside [0, 1]"),
    ("head,top1\n1,-0.1\n", "head 1 top1 accuracy -0.1 is outside [0, 1]"),
    ("head,top1\n1,inf\n", "head 1 top1 accuracy inf is outside [0, 1]"),
    ("head,top1,top2,top3\n1,0.6,0.7,0.65\n",
     "head 1's cumulative accuracy decreases from top2 (0.7000) to top3 (0.6500)"),
    ("head,top2,top3\n1,0.5,0.6\n", "header is 'head,top2,top3', expected head,top1,top2,…"),
    ("model,top1\n1,0.5\n", "header is 'model,top1', expected head,top1,…"),
    ("head\n1\n", "header is 'head', expected head,…"),
    ("head,top1,top2\n1,0.5,0.6\n2,0.5\n", "line 3 has 2 fields, expected 3"),
    ("head,top1,top2\n1,0.5,0.6,0.7\n", "line 2 has 4 fields, expected 3"),
    ("head,top1\n1,high\n", "line 2 has a non-numeric accuracy: ['1', 'high']"),
    ("head,top1,top2\n", "no head rows after the header"),
    ("\n\n", "empty CSV; expected a header 'head,top1,…,topK'"),
])
def test_read_csv_errors_name_the_file(tmp_path, text, fragment):
    path = tmp_path / "acc.csv"
    path.write_text(text)
    with pytest.raises(TreeoptError) as err:
        read_accuracies(path)
    assert str(err.value).startswith(f"{path}: ")
    assert fragment in str(err.value)


@pytest.mark.parametrize("doc, fragment", [
    ({"format": "treeopt.growth/1", "marginal": [[0.5]]},
     "format is 'treeopt.growth/1', expected 'treeopt.accuracies/1'"),
    ({"marginal": [[0.5]]}, "missing 'format' tag"),
    ([[0.5]], "expected a JSON object"),
    ({"format": "treeopt.accuracies/1"}, "needs a 'marginal' or 'cumulative' array"),
    ({"format": "treeopt.accuracies/1", "marginal": [[0.5], [0.2, 0.1]]},
     "'marginal' is not a [heads, top_k] number array"),
    ({"format": "treeopt.accuracies/1", "cumulative": [["a"]]},
     "'cumulative' is not a [heads, top_k] number array"),
    ({"format": "treeopt.accuracies/1", "cumulative": [[0.5, 0.4]]},
     "head 1's cumulative accuracy decreases"),
])
def test_read_json_errors_name_the_file(tmp_path, doc, fragment):
    path = tmp_path / "acc.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TreeoptError) as err:
        read_accuracies(path)
    assert str(err.value).startswith(f"{path}: ")
    assert fragment in str(err.value)


def test_read_missing_or_unreadable_files(tmp_path):
    for name in ("nope.csv", "nope.json"):
        with pytest.raises(TreeoptError) as err:
            read_accuracies(tmp_path / name)
        assert str(err.value) == f"{tmp_path / name}: no such file"
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"\xff\xfe\x00\x80")
    with pytest.raises(TreeoptError, match="not a text CSV file"):
        read_accuracies(binary)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(TreeoptError, match="not valid JSON"):
        read_accuracies(broken)
