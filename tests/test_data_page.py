"""The Data page's words match the demo it shows: its base model and its drafters, whatever
they are, and a calibration that takes an n-gram drafter as well as a directory."""

from __future__ import annotations

import pytest

from treeopt.demo.load import load
from treeopt.errors import TreeoptError
from treeopt.workbench.datasets import calibrate_local, demo_dataset


def test_the_real_models_demo_is_described_by_its_model_and_drafters():
    data = demo_dataset(load("data/smollm2", with_model=False))
    assert data.name == "smollm2"
    assert set(data.sources) == {"medusa", "hydra", "eagle", "prompt-lookup", "ngram-trie",
                                 "suffix"}
    assert "smollm2-135m-instruct (pretrained)" in data.description
    assert "trained for the demo" not in data.description
    for kind in data.sources:
        assert f"{kind} " in data.description


def test_calibrating_with_no_drafter_says_what_a_drafter_may_be(tmp_path):
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n")
    with pytest.raises(TreeoptError, match="'prompt-lookup'"):
        calibrate_local(str(tmp_path), "", str(prompts), out=str(tmp_path / "t.npz"))
