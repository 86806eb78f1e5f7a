"""Roofline: exact FLOP and byte counts, hardware and presets, monotonicity, the efficiency fit."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.errors import TreeoptError
from treeopt.roofline import (
    Efficiency,
    Hardware,
    ModelConfig,
    Precision,
    fit_efficiency,
    hardware_names,
    load_config,
    load_hardware,
    operators,
    preset,
    preset_names,
    roofline,
)

TINY = ModelConfig(name="hand", model_type="llama", hidden_size=8, intermediate_size=16,
                   num_layers=1, num_heads=2, num_kv_heads=1, head_dim=4, vocab_size=32,
                   max_positions=64)
# 1 MFLOP/s and 1 MB/s: an operator takes max(FLOPs, bytes) microseconds
SLOW = Hardware("slow", tflops_bf16=1e-6, tflops_fp32=1e-6, bandwidth_gbs=1e-3)

# b = 1, s = 3, q = 2: T = 2 tokens, K = 5 keys, h = 8, i = 16, d_q = 8, d_kv = 4, V = 32, 2 bytes
HAND = {  # name: (flops, bytes)
    "input_norm": (4 * 2 * 8, 2 * 8 + 2 * 2 * 2 * 8),
    "q_proj": (2 * 2 * 8 * 8, 2 * (8 * 8 + 2 * 8 + 2 * 8)),
    "k_proj": (2 * 2 * 8 * 4, 2 * (8 * 4 + 2 * 8 + 2 * 4)),
    "v_proj": (2 * 2 * 8 * 4, 2 * (8 * 4 + 2 * 8 + 2 * 4)),
    "rope": (3 * 2 * 12, 2 * (2 * 12 + 2 * 8 + 2 * 4)),
    "attn_qk": (2 * (1 * 2 * 2 * 5) * 4, 2 * (2 * 8 + 5 * 4)),
    "softmax": (5 * (1 * 2 * 2 * 5), 0),
    "attn_pv": (2 * (1 * 2 * 2 * 5) * 4, 2 * (5 * 4 + 2 * 8)),
    "o_proj": (2 * 2 * 8 * 8, 2 * (8 * 8 + 2 * 8 + 2 * 8)),
    "attn_residual": (2 * 8, 3 * 2 * 2 * 8),
    "post_norm": (4 * 2 * 8, 2 * 8 + 2 * 2 * 2 * 8),
    "gate_proj": (2 * 2 * 8 * 16, 2 * (8 * 16 + 2 * 8 + 2 * 16)),
    "up_proj": (2 * 2 * 8 * 16, 2 * (8 * 16 + 2 * 8 + 2 * 16)),
    "act_mul": (5 * 2 * 16, 3 * 2 * 2 * 16),
    "down_proj": (2 * 2 * 16 * 8, 2 * (16 * 8 + 2 * 16 + 2 * 8)),
    "mlp_residual": (2 * 8, 3 * 2 * 2 * 8),
    "embedding": (0, 2 * 2 * 8 + 2 * 2 * 8),
    "final_norm": (4 * 2 * 8, 2 * 8 + 2 * 2 * 2 * 8),
    "lm_head": (2 * 2 * 8 * 32, 2 * (8 * 32 + 2 * 8 + 2 * 32)),
}


def test_exact_flops_and_bytes_of_a_tiny_config():
    ops = operators(TINY, Precision(), [1], [3], [2])
    got = {name: (ops.flops[j, 0, 0, 0], ops.bytes[j, :, 0, 0, 0].sum())
           for j, name in enumerate(ops.names)}
    assert got == HAND
    assert sum(f for f, _ in HAND.values()) == 4204
    assert sum(b for _, b in HAND.values()) == 3264


def test_step_time_is_the_sum_of_per_operator_maxima():
    r = roofline(TINY, SLOW, batch=[1], context=[3], tokens=[2])
    assert r.total_s[0, 0, 0] == pytest.approx(sum(max(f, b) for f, b in HAND.values()) * 1e-6)
    assert sum(max(f, b) for f, b in HAND.values()) == 4532
    rec = r.records()[0]
    assert (rec["flops"], rec["bytes"]) == (4204, 3264)
    lm = next(o for o in rec["operators"] if o["name"] == "lm_head")
    assert lm["bytes_by_kind"] == {"weights": 512, "act_in": 32, "act_out": 128,
                                   "kv_read": 0, "kv_write": 0}
    assert lm["intensity"] == 1024 / 672 and lm["bound"] == "compute"
    assert next(o for o in rec["operators"] if o["name"] == "softmax")["intensity"] is None


def test_layers_multiply_per_layer_operators_only():
    two = ModelConfig(**{**TINY.to_json(), "num_layers": 2})
    r = roofline(two, SLOW, batch=[1], context=[3], tokens=[2])
    once = {"embedding", "final_norm", "lm_head"}
    expected = sum((1 if n in once else 2) * max(f, b) for n, (f, b) in HAND.items())
    assert r.total_s[0, 0, 0] == pytest.approx(expected * 1e-6)


@given(t=st.integers(1, 4096), h=st.integers(1, 8192), i=st.integers(1, 32768))
def test_linear_layer_intensity(t, h, i):
    cfg = ModelConfig(name="x", model_type="llama", hidden_size=h, intermediate_size=i,
                      num_layers=1, num_heads=1, num_kv_heads=1, head_dim=1, vocab_size=1)
    ops = operators(cfg, Precision(), [t], [1], [1])
    j = ops.names.index("gate_proj")
    intensity = ops.flops[j, 0, 0, 0] / ops.bytes[j, :, 0, 0, 0].sum()
    assert intensity == pytest.approx(t * h * i / (t * h + h * i + t * i), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(["llama-2-7b", "llama-3-70b", "qwen2.5-7b", "tiny"]),
       hw=st.sampled_from(["h100-sxm", "l4", "mi300x"]),
       attention=st.sampled_from(["fused", "eager"]),
       b=st.lists(st.integers(1, 256), min_size=2, max_size=4),
       s=st.lists(st.integers(0, 2000), min_size=2, max_size=4),
       q=st.lists(st.integers(1, 256), min_size=2, max_size=4))
def test_time_never_decreases_with_batch_context_or_tokens(name, hw, attention, b, s, q):
    r = roofline(preset(name), load_hardware(hw), batch=sorted(b), context=sorted(s),
                 tokens=sorted(q), attention=attention)
    for axis in range(3):
        assert np.all(np.diff(r.total_s, axis=axis) >= -1e-15)
        assert np.all(np.diff(r.class_raw_s, axis=axis + 1) >= -1e-15)


def test_large_batches_turn_compute_bound_and_small_ones_memory_bound():
    r = roofline(preset("llama-2-7b"), load_hardware("a100-80gb-sxm"), batch=[1, 64],
                 context=[512], tokens=[1, 64])
    bounds = {(rec["batch"], rec["tokens"]): next(o["bound"] for o in rec["operators"]
                                                  if o["name"] == "gate_proj")
              for rec in r.records()}
    assert bounds == {(1, 1): "memory", (1, 64): "memory", (64, 1): "memory",
                      (64, 64): "compute"}  # ridge of the A100: 312e12 / 2039e9 ≈ 153 FLOP/B


def test_presets_cover_the_required_models():
    needed = {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b",
              "vicuna-7b-v1.3", "vicuna-13b-v1.3", "vicuna-33b-v1.3", "qwen2.5-7b"}
    assert needed <= set(preset_names())
    l70 = preset("llama-2-70b")
    assert (l70.num_kv_heads, l70.head_dim, l70.kv_dim, l70.q_dim) == (8, 128, 1024, 8192)
    assert preset("qwen2.5-7b").attention_bias
    with pytest.raises(TreeoptError, match=r"unknown model preset 'gpt-9'.*llama-2-7b"):
        preset("gpt-9")


def test_hardware_table_has_every_required_row_with_a_source():
    needed = {"a100-40gb-sxm", "a100-80gb-sxm", "a100-80gb-pcie", "h100-sxm", "h100-pcie",
              "h200", "l4", "l40s", "a10g", "rtx-4090", "rtx-a6000", "a40", "mi300x"}
    assert needed <= set(hardware_names())
    for name in hardware_names():
        assert load_hardware(name).source
    h100 = load_hardware("H100-SXM")
    assert (h100.tflops_bf16, h100.bandwidth_gbs) == (989, 3350)
    with pytest.raises(TreeoptError, match=r"unknown hardware 'tpu'; known: a100-40gb-sxm"):
        load_hardware("tpu")


def test_hardware_json_round_trip_and_errors(tmp_path):
    path = tmp_path / "hw.json"
    SLOW.save(path)
    assert load_hardware(str(path)) == SLOW
    path.write_text(json.dumps({"format": "treeopt.hardware/1", "name": "x"}))
    with pytest.raises(TreeoptError, match=r"hw.json: missing field\(s\) tflops_bf16"):
        load_hardware(str(path))


def test_config_files_and_their_errors(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "vocab_size": 100}))
    with pytest.raises(TreeoptError, match=r"config.json: missing field\(s\) intermediate_size"):
        load_config(cfg)
    cfg.write_text(json.dumps({**preset("tiny").to_hf(), "model_type": "bert"}))
    with pytest.raises(TreeoptError, match="model_type 'bert' is not supported; the roofline "
                                           "reads llama, mistral"):
        load_config(tmp_path)
    cfg.write_text(json.dumps({**preset("tiny").to_hf(), "model_type": "qwen3_next"}))
    with pytest.raises(TreeoptError, match="'qwen3_next' has Gated DeltaNet linear-attention "
                                           "layers, which the roofline does not model"):
        load_config(tmp_path)
    cfg.write_text(json.dumps({**preset("tiny").to_hf(), "head_dim": None}))
    assert load_config(tmp_path).head_dim == 16  # hidden / heads when absent


def test_sweeps_beyond_the_models_positions_are_refused():
    with pytest.raises(TreeoptError, match="context 4096 \\+ 8 tree tokens exceeds vicuna-7b"):
        roofline(preset("vicuna-7b-v1.3"), SLOW, batch=[1], context=[4096], tokens=[8])


def test_precision_and_dtype_errors():
    assert Precision.from_dtypes("fp32").kv_bytes == 4
    with pytest.raises(TreeoptError, match="^kv_dtype: unknown dtype 'fp7'"):
        Precision.from_dtypes("bf16", kv="fp7")
    with pytest.raises(TreeoptError, match="^dtype must be bf16, fp16 or fp32 to compute in"):
        Precision.from_dtypes("fp8")


def test_fit_recovers_known_efficiencies_exactly():
    cfg, hw = preset("llama-2-7b"), load_hardware("l4")  # matmuls turn compute-bound: identifiable
    truth = Efficiency(matmul=0.5, attention=0.2, elementwise=0.05, overhead_s=1e-4)
    r = roofline(cfg, hw, batch=[1, 4, 16], context=[64, 1024], tokens=[1, 8, 64],
                 efficiency=truth)
    fit = fit_efficiency(cfg, hw, r.points())
    assert fit.points == 18
    for name in ("matmul", "attention", "elementwise", "overhead_s"):
        assert getattr(fit.efficiency, name) == pytest.approx(getattr(truth, name), rel=1e-6)
    assert fit.max_abs_rel_error < 1e-9 < fit.unfitted_max_abs_rel_error


def test_efficiency_bounds():
    with pytest.raises(TreeoptError, match="efficiency matmul must be in"):
        Efficiency(matmul=0.0)


def test_roofline_imports_numpy_only():
    code = "import treeopt.roofline, treeopt.profiling, sys; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_drafter_kind_has_a_drafting_formula_that_grows_with_depth():
    """Every kind has a formula; a model drafter's costs device time and grows with depth
    where it drafts per depth; a lookup drafter (prompt lookup) costs no device time at all
    (a hybrid: its model drafter's)."""
    from treeopt.registry.kinds import KIND_NAMES, drafter_kind
    from treeopt.roofline.draft import _FORMULAS, DraftSpec, draft_seconds
    from treeopt.roofline.hardware import Hardware

    assert {drafter_kind(k).draft_formula for k in KIND_NAMES} == set(_FORMULAS)
    hw = Hardware("toy", tflops_bf16=100.0, tflops_fp32=10.0, bandwidth_gbs=1000.0)
    for kind in KIND_NAMES:
        spec = DraftSpec(kind, num_heads=4, hidden_size=1024, vocab_size=32000)
        one = draft_seconds(spec, hw, batch=1, expanded=[1])
        deep = draft_seconds(spec, hw, batch=1, expanded=[1, 1, 1])
        if drafter_kind(kind).lookup and not drafter_kind(kind).hybrid:
            assert one == deep == 0.0, kind
            continue
        assert one > 0
        assert (deep > one) == drafter_kind(kind).per_depth, kind
