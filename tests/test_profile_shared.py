"""A step profile whose records share one autoregressive reference a round
(``profile_steps(shared=True)``, ``treeopt profile step --shared-reference``): the same records,
fewer autoregressive decodes, recorded so and resumed only so."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_profiling import tiny_medusa  # noqa: E402

import treeopt.profiling.step as step  # noqa: E402
from treeopt.documents.measure import Measurement  # noqa: E402
from treeopt.errors import TreeoptError  # noqa: E402
from treeopt.model.growth import Growth  # noqa: E402

GROWTH = Growth("empirical", "none", ((0,), (0, 0), (1,)), np.array([1.0, 1.8, 2.4, 2.5]), {})
PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13]]


def profiled(out, *, shared, monkeypatch, rounds=2, batch=(1, 2)):
    """The profile of the growth's trees of 1–3 nodes, and each decode's shapes, in order."""
    calls: list[tuple[int, ...]] = []
    real = step._phases

    def spy(decoder, shapes, group, config):
        calls.append(tuple(s.size for s in shapes))
        return real(decoder, shapes, group, config)

    monkeypatch.setattr(step, "_phases", spy)
    model, heads = tiny_medusa()
    doc = step.profile_steps(model, heads, GROWTH, PROMPTS, batch=list(batch), sizes=[1, 2, 3],
                             out=out, max_new_tokens=6, measure=Measurement(rounds=rounds),
                             shared=shared, log=lambda _: None)
    return doc, calls


def test_a_round_decodes_every_record_beside_one_reference(tmp_path, monkeypatch):
    """Shared: each round is one decode of the autoregressive reference and every tree, in
    place of one decode alone and one pair a tree; the records are the same ones, each of
    its rounds, and the meta says how."""
    own, own_calls = profiled(tmp_path / "own.json", shared=False, monkeypatch=monkeypatch,
                              batch=[1])
    shared, calls = profiled(tmp_path / "shared.json", shared=True, monkeypatch=monkeypatch,
                             batch=[1])
    assert own_calls[:4] == [(0,), (0, 1), (0, 2), (0, 3)]  # a round, each beside its own
    assert calls[:2] == [(0, 1, 2, 3)] * 2  # the measurement's 2 rounds, each one decode
    assert [r.size for r in shared.records] == [r.size for r in own.records] == [0, 1, 2, 3]
    assert all(r.rounds >= 2 for r in shared.records)
    assert shared.meta["references"] == "shared" and own.meta["references"] == "own"
    assert all(r.ms_verify > 0 for r in shared.records)


def test_a_profile_resumes_only_with_its_own_references(tmp_path, monkeypatch):
    """Extending a profile the other way is refused in one line naming both; one written
    before profiles said (no ``references``) was profiled each record beside its own."""
    out = tmp_path / "p.json"
    profiled(out, shared=True, monkeypatch=monkeypatch, batch=[1])
    with pytest.raises(TreeoptError, match=r"p.json: profiled with other references \(shared, "
                                           r"not own\); write to another path"):
        profiled(out, shared=False, monkeypatch=monkeypatch, batch=[1, 2])
    older = tmp_path / "older.json"
    doc, _ = profiled(older, shared=False, monkeypatch=monkeypatch, batch=[1])
    text = older.read_text().replace('"references": "own",', "")
    older.write_text(text)
    assert "references" not in text
    again, _ = profiled(older, shared=False, monkeypatch=monkeypatch, batch=[1, 2])
    assert [r.batch for r in again.records].count(2) == 4  # resumed, batch 2 added
    with pytest.raises(TreeoptError, match=r"other references \(own, not shared\)"):
        profiled(older, shared=True, monkeypatch=monkeypatch, batch=[1, 2, 3])
