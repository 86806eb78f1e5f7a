"""Where two greedy outputs part, and the model's own logits there: exact on a tiny model; a
verify report keeps them and reads back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402

from treeopt.decoding.divergence import Divergence, first_divergence, resolution  # noqa: E402
from treeopt.documents.verify_report import VerifyReport  # noqa: E402
from treeopt.model.tree import Tree  # noqa: E402


def test_the_first_divergence_carries_the_models_own_logits_there():
    model = tiny_llama()
    prompt, a = [1, 5, 9, 17], [30, 31, 32, 33, 34]
    b = [30, 31, 32, 77, 34]
    d = first_divergence(model, prompt, a, b, index=7)
    with torch.no_grad():
        want = model(input_ids=torch.tensor([prompt + a[:3]])).logits[0, -1]
    assert (d.prompt, d.position, d.tokens) == (7, 3, (33, 77))
    assert d.logits == (float(want[33]), float(want[77]))
    assert d.resolution == resolution(max(d.logits, key=abs), torch.float32)
    assert first_divergence(model, prompt, a, a[:3]) is None  # a prefix: no divergence


def test_resolution_is_one_step_of_the_dtype():
    assert resolution(37.25, torch.bfloat16) == 0.25
    assert resolution(-23.5, torch.bfloat16) == 0.125
    assert resolution(1.0, torch.float32) == 2.0 ** -23


def test_a_report_keeps_its_divergences_and_says_lossless_up_to_ties():
    ties = (Divergence(3, 27, (1468, 923), (37.25, 37.25), 0.25).to_json(),
            Divergence(8, 65, (198, 378), (23.5, 23.625), 0.125).to_json())
    report = VerifyReport(Tree.chain(3), "prompt-lookup", "greedy", 16, 128, 1, 2, {}, {}, 1.5,
                          0.01, 0.02, (1.5, 1.5), 1.4, {"prefix_tokens": 3,
                                                        "max_abs_hidden_diff": 0.0,
                                                        "tolerance": 1.0},
                          False, (3, 8), divergences=ties)
    assert report.lossless_up_to_ties is True
    doc = report.to_json()
    assert doc["lossless"] is False and doc["lossless_up_to_ties"] is True
    again = VerifyReport.from_json(doc)
    assert again.divergences == ties and again.lossless_up_to_ties is True
    apart = Divergence(4, 7, (79, 24), (38.25, 37.75), 0.25).to_json()  # two steps apart
    assert VerifyReport.from_json({**doc, "divergences": [apart]}).lossless_up_to_ties is False
    del doc["divergences"]  # a report from before divergences were recorded
    assert VerifyReport.from_json(doc).lossless_up_to_ties is None
