"""RankTrace: construction, .npz round trip, shard merging and readers that name file and problem."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from treeopt import RankTrace, Tree, TreeoptError, merge_traces
from treeopt.model.simulation import simulate

ROWS = [[0, 0, 0], [0, 0, 1], [0, 1, 0], [1, 0, -1], [0, -1, 0], [2, 0, 0], [-1, 0, 0], [0, 0, 0]]


def trace(rows=ROWS, **meta) -> RankTrace:
    return RankTrace(np.array(rows, dtype=np.int16), meta)


def write_npz(path, **arrays) -> str:
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)
    return str(path)


def good_meta(**extra) -> np.ndarray:
    return np.array(json.dumps({"format": "treeopt.trace/1", **extra}))


# ----- construction -------------------------------------------------------------------------------
def test_shape_top_k_and_head_kind():
    tr = trace(top_k=10, head_kind="medusa")
    assert (tr.positions, tr.heads, tr.top_k, tr.head_kind) == (8, 3, 10, "medusa")
    assert trace().top_k == 3  # no meta: one more than the largest rank seen
    assert trace().head_kind is None
    assert RankTrace(np.zeros((0, 2), np.int16)).top_k == 0
    assert tr.ranks.dtype == np.int16 and not tr.ranks.flags.writeable


def test_construction_converts_integer_dtypes():
    tr = RankTrace(np.array([[1, -1]], dtype=np.int64))
    assert tr.ranks.dtype == np.int16 and tr.ranks.tolist() == [[1, -1]]


@pytest.mark.parametrize("ranks, meta, fragment", [
    (np.zeros(3, np.int16), {}, "must be 2-D [positions, heads], got shape (3,)"),
    (np.zeros((2, 2, 2), np.int16), {}, "got shape (2, 2, 2)"),
    (np.zeros((2, 2), np.float32), {}, "must be integers, got dtype float32"),
    (np.array([[0, -2]]), {}, "rank -2 is below -1"),
    (np.array([[40000]], np.int32), {}, "exceed the int16 range"),
    (np.zeros((1, 1), np.int16), {"bad": {1, 2}}, "meta is not JSON-serialisable"),
    (np.zeros((1, 1), np.int16), ["top_k"], "meta must be a dict"),
])
def test_construction_rejects(ranks, meta, fragment):
    with pytest.raises(TreeoptError) as err:
        RankTrace(ranks, meta)
    assert fragment in str(err.value)


def test_require():
    tr = trace()
    tr.require(heads=3)
    with pytest.raises(TreeoptError, match="t.npz: the trace has 3 heads but the tree needs depth 4"):
        tr.require(heads=4, source="t.npz")
    with pytest.raises(TreeoptError, match=r"the trace is empty \(0 positions\)"):
        RankTrace(np.zeros((0, 3), np.int16)).require(heads=1)


def test_split_is_a_partition():
    tr = trace(top_k=3)
    a, b = tr.split(0.25, seed=3)
    assert (a.positions, b.positions) == (2, 6)
    rows = sorted(map(tuple, a.ranks.tolist() + b.ranks.tolist()))
    assert rows == sorted(map(tuple, ROWS))
    assert a.meta == b.meta == {"top_k": 3}
    again = tr.split(0.25, seed=3)
    assert again[0].ranks.tolist() == a.ranks.tolist()
    for bad in (0.0, 1.0, -0.5, 2):
        with pytest.raises(TreeoptError, match="split fraction must be in"):
            tr.split(bad)


# ----- files --------------------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path):
    tr = trace(top_k=4, head_kind="hydra", model="tiny", sequences=2)
    path = tmp_path / "sub" / "t.npz"
    assert tr.save(path) == path
    assert sorted(os.listdir(path.parent)) == ["t.npz"]  # no temporary file left behind
    back = RankTrace.load(path)
    assert back.ranks.tolist() == ROWS and back.ranks.dtype == np.int16
    created = back.meta.pop("created")
    assert back.meta == {"top_k": 4, "head_kind": "hydra", "model": "tiny", "sequences": 2}
    assert len(created) == 25 and created.endswith("+00:00")
    # the file is plain arrays: readable without pickling, with a format tag in meta
    with np.load(path, allow_pickle=False) as z:
        assert sorted(z.files) == ["meta", "ranks"]
        assert json.loads(str(z["meta"]))["format"] == "treeopt.trace/1"
    # saving a loaded trace keeps its creation time
    back.meta["created"] = created
    back.save(tmp_path / "u.npz")
    assert RankTrace.load(tmp_path / "u.npz").meta["created"] == created


def test_empty_trace_round_trips_but_cannot_be_simulated(tmp_path):
    path = tmp_path / "empty.npz"
    RankTrace(np.zeros((0, 2), np.int16), {"top_k": 2}).save(path)
    empty = RankTrace.load(path)
    assert (empty.positions, empty.heads) == (0, 2)
    with pytest.raises(TreeoptError, match=r"simulate: the trace is empty \(0 positions\)"):
        simulate(Tree.chain(1), empty)


def test_simulate_rejects_a_trace_with_too_few_heads():
    with pytest.raises(TreeoptError, match="the trace has 3 heads but the tree needs depth 4"):
        simulate(Tree.chain(4), trace())


@pytest.mark.parametrize("arrays, fragment", [
    ({"ranks": np.zeros((2, 2), np.int16), "meta": np.array(json.dumps({"format": "treeopt.trace/9"}))},
     "format is 'treeopt.trace/9', expected 'treeopt.trace/1'"),
    ({"ranks": np.zeros((2, 2), np.int16), "meta": np.array(json.dumps({"top_k": 2}))},
     "format is None, expected 'treeopt.trace/1'"),
    ({"ranks": np.zeros((2, 2), np.int16), "meta": np.array("[1, 2]")},
     "format is None, expected 'treeopt.trace/1'"),
    ({"ranks": np.zeros((2, 2), np.int16), "meta": np.array("{not json")},
     "'meta' is not a JSON string"),
    ({"ranks": np.zeros((2, 2), np.int32), "meta": good_meta()},
     "'ranks' has dtype int32, expected int16"),
    ({"ranks": np.zeros((2, 2), np.float64), "meta": good_meta()},
     "'ranks' has dtype float64, expected int16"),
    ({"ranks": np.zeros(4, np.int16), "meta": good_meta()},
     "'ranks' has shape (4,), expected [positions, heads]"),
    ({"ranks": np.zeros((1, 2, 2), np.int16), "meta": good_meta()},
     "'ranks' has shape (1, 2, 2)"),
    ({"ranks": np.full((2, 2), -3, np.int16), "meta": good_meta()},
     "rank -3 is below -1"),
    ({"ranks": np.zeros((2, 2), np.int16)},
     "not a rank trace (needs arrays 'ranks' and 'meta', has ['ranks'])"),
    ({"positions": np.zeros((2, 2), np.int16), "meta": good_meta()},
     "has ['meta', 'positions']"),
])
def test_load_rejects_bad_npz(tmp_path, arrays, fragment):
    path = write_npz(tmp_path / "bad.npz", **arrays)
    with pytest.raises(TreeoptError) as err:
        RankTrace.load(path)
    assert str(err.value).startswith(f"{path}: ")
    assert fragment in str(err.value)


def test_load_never_unpickles(tmp_path):
    path = write_npz(tmp_path / "obj.npz", ranks=np.array([[0], [1]], dtype=object), meta=good_meta())
    with pytest.raises(TreeoptError) as err:
        RankTrace.load(path)
    assert str(err.value).startswith(f"{path}: not a readable .npz rank trace")


@pytest.mark.parametrize("name, content, fragment", [
    ("text.npz", b"hello, not an archive\n", "not a .npz archive"),
    ("empty.npz", b"", "not a .npz archive"),
    ("broken.npz", b"PK\x03\x04 truncated zip", "not a readable .npz rank trace"),
])
def test_load_rejects_files_that_are_not_npz(tmp_path, name, content, fragment):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TreeoptError) as err:
        RankTrace.load(path)
    assert str(err.value).startswith(f"{path}: {fragment}")


def test_load_rejects_a_single_npy_array(tmp_path):
    path = tmp_path / "ranks.npy"
    np.save(path, np.zeros((2, 2), np.int16))
    with pytest.raises(TreeoptError) as err:
        RankTrace.load(path)
    assert str(err.value).startswith(f"{path}: a single .npy array, not a .npz rank trace")


def test_load_missing_file_and_directory(tmp_path):
    with pytest.raises(TreeoptError) as err:
        RankTrace.load(tmp_path / "nope.npz")
    assert str(err.value) == f"{tmp_path / 'nope.npz'}: no such file"
    with pytest.raises(TreeoptError) as err:
        RankTrace.load(tmp_path)
    assert str(err.value).startswith(f"{tmp_path}: ")


# ----- merging shards -----------------------------------------------------------------------------
def test_merge_adds_positions_and_counts():
    a = trace(ROWS[:3], top_k=3, head_kind="medusa", sequences=2, tokens=30, shard="0/2",
              created="x")
    b = trace(ROWS[3:], top_k=3, head_kind="medusa", sequences=5, tokens=70, shard="1/2",
              created="y")
    m = merge_traces([a, b])
    assert m.ranks.tolist() == ROWS
    assert m.meta == {"top_k": 3, "head_kind": "medusa", "sequences": 7, "tokens": 100,
                      "merged_shards": 2}


def test_merge_sums_counts_only_when_every_shard_has_them():
    a, b = trace(ROWS[:1], sequences=1), trace(ROWS[1:], tokens=4)
    assert merge_traces([a, b]).meta == {"sequences": 1, "merged_shards": 2}
    assert merge_traces([a]).meta == {"sequences": 1, "merged_shards": 1}


def test_merge_round_trips_through_files(tmp_path):
    for i, rows in enumerate((ROWS[:5], ROWS[5:])):
        trace(rows, top_k=3, sequences=1).save(tmp_path / f"s{i}.npz")
    m = merge_traces([RankTrace.load(tmp_path / f"s{i}.npz") for i in range(2)])
    assert m.positions == 8 and m.meta["sequences"] == 2 and "created" not in m.meta


@pytest.mark.parametrize("other, fragment", [
    (RankTrace(np.zeros((2, 2), np.int16), {"top_k": 3}), "merge: shard 1 has 2 heads, shard 0 has 3"),
    (RankTrace(np.zeros((2, 3), np.int16), {"top_k": 5}),
     "merge: shard 1 recorded top-5, shard 0 top-3"),
    (RankTrace(np.zeros((2, 3), np.int16), {"top_k": 3, "head_kind": "hydra"}),
     "merge: shards come from different head kinds"),
])
def test_merge_rejects_mismatched_shards(other, fragment):
    with pytest.raises(TreeoptError) as err:
        merge_traces([trace(top_k=3), other])
    assert fragment in str(err.value)


def test_merge_of_nothing():
    with pytest.raises(TreeoptError, match="merge: no traces given"):
        merge_traces([])
