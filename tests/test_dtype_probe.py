"""``--dtype auto``: the base model's steps timed in bf16 and fp32 on this host, the faster
kept (:mod:`treeopt.profiling.dtype_probe`), and the rule it picks by."""

from __future__ import annotations

import pytest
from conftest import tiny_llama

from treeopt.errors import TreeoptError
from treeopt.profiling.dtype_probe import FORMAT, DtypeProbe, probe_dtypes
from treeopt.roofline.config import load_config


def test_the_faster_dtype_is_the_smaller_geometric_mean_of_its_steps():
    avx2 = DtypeProbe({"bf16": {1: 49.0, 8: 293.0}, "fp32": {1: 52.0, 8: 105.0}})
    amx = DtypeProbe({"bf16": {1: 74.0, 8: 76.0}, "fp32": {1: 66.0, 8: 130.0}})
    assert avx2.dtype == "fp32" and amx.dtype == "bf16"  # one token a little dearer: still bf16
    assert avx2.score("fp32") == pytest.approx((52.0 * 105.0) ** 0.5)
    assert DtypeProbe({"bf16": {1: 10.0}, "fp32": {1: 10.0}}).dtype == "bf16"  # a tie: the first
    doc = avx2.to_dict()
    assert doc["format"] == FORMAT and doc["dtype"] == "fp32"
    assert doc["step_ms"] == {"bf16": {"1": 49.0, "8": 293.0}, "fp32": {"1": 52.0, "8": 105.0}}
    assert DtypeProbe.from_dict(doc) == avx2
    with pytest.raises(TreeoptError, match="not a dtype probe"):
        DtypeProbe.from_dict({"format": "treeopt.latency/1"})


def test_the_probe_times_every_candidate_on_the_models_own_weights(tmp_path):
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tiny_llama(vocab=256, seed=0).save_pretrained(tmp_path)
        probe = probe_dtypes(load_config(tmp_path), str(tmp_path), tokens=(1, 4), context=16,
                             repeats=2)
    finally:
        torch.set_num_threads(before)
    assert set(probe.step_ms) == {"bf16", "fp32"}
    for steps in probe.step_ms.values():
        assert set(steps) == {1, 4} and all(ms > 0 for ms in steps.values())
    assert probe.dtype == min(("bf16", "fp32"), key=probe.score)
    assert probe.line().endswith(f"→ {probe.dtype}") and "bf16" in probe.line()
