"""One rule for the context a price or a tree is read at: the only one held, else the one named,
and an ambiguous choice refused in one line that names the field (the CLI's --context)."""

from __future__ import annotations

import json

import pytest

from treeopt.errors import FieldError
from treeopt.pricing.costs import NO_DRAFT, NO_OVERHEAD, StepCosts, StepLatency
from treeopt.pricing.selection import Selection

RULE = "contexts [128, 1024] to choose from; pick one with context S"


def _costs() -> StepCosts:
    points = [(1, s, q, 0.01 * q + 1e-5 * s) for s in (128, 1024) for q in range(1, 9)]
    return StepCosts(StepLatency.from_points(points, "lat.json"), NO_DRAFT, NO_OVERHEAD, {}, {})


def _selection() -> Selection:
    point = {"batch": 1, "choices": [[0]], "expected_accept_length": 1.5, "verify_ms": 10.0,
             "draft_ms": 1.0, "overhead_ms": 0.0, "tokens_per_s": 136.0,
             "autoregressive_tokens_per_s": 100.0, "max_paying_size": 1}
    return Selection.from_json({"growth": {}, "latency": {}, "draft": {}, "depth_caps": [None],
                                "points": [{**point, "context": s} for s in (128, 1024)]})


def test_a_profile_of_several_contexts_names_the_field_to_give():
    with pytest.raises(FieldError) as caught:
        _costs().context()
    assert caught.value.field == "context" and str(caught.value) == f"lat.json: {RULE}"
    assert caught.value.named(lambda f: "--" + f).endswith("pick one with --context S")
    assert _costs().context(900) == 1024


def test_a_selection_of_several_contexts_is_refused_by_the_same_rule():
    with pytest.raises(FieldError) as caught:
        _selection().tree_at(batch=1)
    assert caught.value.field == "context" and str(caught.value) == RULE
    assert _selection().tree_at(batch=1, context=1024).paths == ((0,),)


def test_export_schedule_refuses_through_the_same_rule(tmp_path, capsys):
    from treeopt.cli import main

    path = tmp_path / "selection.json"
    path.write_text(json.dumps(_selection().to_json()))
    code = main(["export", "--tree", str(path), "--format", "medusa",
                 "--schedule-dir", str(tmp_path / "d")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"treeopt export: error: {path}: contexts [128, 1024] to choose from; "
                   "pick one with --context S")
