"""The roofline across model families: config.json reading (checked against transformers' own
config classes), presets against their model cards, MoE's distinct experts, windows and MLA."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from treeopt.errors import TreeoptError
from treeopt.roofline import ModelConfig, Precision, load_hardware, operators, preset, roofline
from treeopt.roofline.config import preset_names, preset_row
from treeopt.roofline.moe import expected_experts
from treeopt.roofline.params import kv_bytes_per_token, parameter_count

BASE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 6,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
        "max_position_embeddings": 4096}
TINY = {  # model_type: a small config.json of the family, its own fields spelled as it spells them
    "llama": {}, "mistral": {"sliding_window": 32}, "qwen2": {}, "qwen3": {"head_dim": 16},
    "phi3": {"partial_rotary_factor": 0.5},
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen3_moe": {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                  "mlp_only_layers": [0], "head_dim": 16},
    "gemma2": {"head_dim": 16, "sliding_window": 32},
    "gemma3_text": {"head_dim": 16, "sliding_window": 32},
    "gpt_oss": {"num_local_experts": 8, "num_experts_per_tok": 2, "head_dim": 16,
                "sliding_window": 16},
    "cohere2": {"sliding_window": 32}, "olmo3": {"sliding_window": 32},
    "llama4_text": {"num_local_experts": 4, "num_experts_per_tok": 1, "head_dim": 16,
                    "intermediate_size_mlp": 256, "interleave_moe_layer_step": 2,
                    "attention_chunk_size": 64},
    "deepseek_v3": {"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
                    "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 32,
                    "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
                    "v_head_dim": 16, "num_key_value_heads": 4, "n_group": 1, "topk_group": 1},
    "gpt_neox": {"rotary_pct": 0.25},
}
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 6, "n_head": 4, "vocab_size": 256,
        "n_positions": 1024}


def tiny(family: str) -> dict:
    return {"model_type": family, **BASE, **TINY[family]}


@pytest.mark.parametrize("family", [*TINY, "gpt2", "gemma3"])
def test_every_family_reads_as_transformers_completes_it(family):
    """A file's missing fields take the defaults transformers' config class gives them, and
    ``to_hf`` writes what transformers reads back to the same shape."""
    from transformers import AutoConfig

    doc = GPT2 if family == "gpt2" else (
        {"model_type": "gemma3", "text_config": tiny("gemma3_text")} if family == "gemma3"
        else tiny(family))
    cfg = ModelConfig.from_hf(doc, name="x", source="t")
    done = AutoConfig.for_model(**doc).to_dict()
    assert ModelConfig.from_hf(done, name="x", source="t").same_shape(cfg)
    hf = cfg.to_hf()
    back = AutoConfig.for_model(hf.pop("model_type"), **hf).to_dict()
    assert ModelConfig.from_hf(back, name="x", source="t").same_shape(cfg)
    assert ModelConfig(**cfg.to_json()) == cfg  # saved tables and rooflines read back


def test_what_each_family_adds():
    g2 = ModelConfig.from_hf(tiny("gemma2"), name="g", source="t")
    assert g2.layer_types[:2] == ("sliding_attention", "full_attention") and g2.tie_embeddings
    assert g2.norms_per_layer == 4 and g2.sliding_window == 32
    l4 = ModelConfig.from_hf(tiny("llama4_text"), name="l", source="t")
    assert l4.layer_types == ("chunked_attention",) * 3 + ("full_attention",) + \
        ("chunked_attention",) * 2
    assert (l4.attention_chunk_size, l4.moe.layers, l4.intermediate_size) == (64, (1, 3, 5), 256)
    assert l4.moe.shared_intermediate_size == 128
    ds = ModelConfig.from_hf(tiny("deepseek_v3"), name="d", source="t")
    assert ds.moe.layers == (1, 2, 3, 4, 5) and ds.moe.shared_intermediate_size == 32
    assert ds.mla.kv_lora_rank == 16 and ds.head_dim == 24
    q = ModelConfig.from_hf(tiny("qwen3_moe"), name="q", source="t")
    assert q.moe.layers == (1, 2, 3, 4, 5) and q.dense_layers == 1 and q.qk_norm
    neox = ModelConfig.from_hf(tiny("gpt_neox"), name="n", source="t")
    assert (neox.parallel_residual, neox.gated_mlp, neox.rotary_fraction) == (True, False, 0.25)
    gpt2 = ModelConfig.from_hf(GPT2, name="g", source="t")
    assert (gpt2.intermediate_size, gpt2.position_embeddings, gpt2.rotary_fraction) == (256, 1024, 0)
    names = operators(gpt2, Precision(), [1], [4], [2]).names
    assert "rope" not in names and "position_embedding" in names and "act" in names


@pytest.mark.parametrize("family,layers", [
    ("mamba", "Mamba"), ("falcon_h1", "Mamba-2"), ("lfm2", "short-convolution"),
    ("qwen3_next", "Gated DeltaNet"), ("jamba", "Mamba")])
def test_recurrent_families_are_refused_naming_the_layer(family, layers):
    with pytest.raises(TreeoptError, match=rf"model_type '{family}' has {layers}.*does not model"):
        ModelConfig.from_hf({"model_type": family, **BASE}, name="x", source="config.json")


@pytest.mark.parametrize("name", [n for n in preset_names() if "card" in preset_row(n)])
def test_presets_match_their_model_cards(name):
    """Parameter counts and KV bytes per token within 1% of the card (or of its rounding)."""
    card, cfg = preset_row(name)["card"], preset(name)
    count = parameter_count(cfg)
    tied = cfg.tie_embeddings
    ours = {"total": count.total,
            "active": count.active - (0 if card.get("active_counts_embedding", True)
                                      else count.embedding),
            "non_embedding": count.total - count.embedding * (1 if tied else 2),
            "kv_bytes_per_token_bf16": kv_bytes_per_token(cfg)}
    for key in ("total", "active", "non_embedding", "kv_bytes_per_token_bf16"):
        if key in card:
            slack = max(0.01 * card[key], card.get("rounded_to", 0) / 2)
            if name == "qwen3-30b-a3b" and key == "active":
                slack = 0.1e9  # "3.3B" to one decimal; we count 3.353B
            assert abs(ours[key] - card[key]) <= slack, (key, ours[key], card[key])


@given(e=st.integers(1, 512), k=st.integers(1, 16), t=st.integers(1, 4096))
def test_expected_experts_is_k_at_one_token_grows_and_tends_to_e(e, k, t):
    k = min(k, e)
    assert expected_experts(e, k, 1) == pytest.approx(k, rel=1e-12)
    d = expected_experts(e, k, np.array([t, t + 1]))
    assert d[0] <= d[1] + 1e-9 and d[0] <= min(e, k * t) + 1e-9
    assert expected_experts(e, k, 10**9) == pytest.approx(e)


def test_moe_rows_read_the_distinct_experts_of_the_step():
    cfg = ModelConfig.from_hf({"model_type": "mixtral", **BASE, "num_hidden_layers": 1,
                               "num_local_experts": 4, "num_experts_per_tok": 2},
                              name="m", source="t")
    ops = operators(cfg, Precision(), [1, 2], [3], [1, 2])  # T = 1, 2, 2, 4
    j = ops.names.index("expert_gate_proj")
    weights = ops.bytes[j, 0, :, 0, :]  # [b, q]
    # D(T) = 4·(1 − (1/2)^T): 2, 3, 3, 3.75 experts of 64 × 128 bf16 weights
    assert weights.tolist() == [[2 * 64 * 128 * 2, 3 * 64 * 128 * 2],
                                [3 * 64 * 128 * 2, 3.75 * 64 * 128 * 2]]
    assert ops.flops[j, 0, 0, 0] == 2 * 1 * 2 * 64 * 128  # each token through k = 2 experts
    assert "gate_proj" not in ops.names  # every layer is sparse


def test_trees_cost_more_on_moe_than_on_its_dense_twin():
    moe = preset("qwen3-30b-a3b")
    twin = ModelConfig(**{**moe.to_json(), "name": "twin", "moe": None,
                          "intermediate_size": moe.moe.experts_per_token * moe.moe.intermediate_size})
    assert parameter_count(twin).total == pytest.approx(parameter_count(moe).active, rel=0.01)
    hw = load_hardware("h100-sxm")
    grow = {c.name: roofline(c, hw, batch=[1], context=[1024], tokens=[1, 16]).total_s[0, 0]
            for c in (moe, twin)}
    assert grow["twin"][1] / grow["twin"][0] < 1.1 < 3 < grow["qwen3-30b-a3b"][1] / grow[
        "qwen3-30b-a3b"][0]


def test_sliding_and_chunked_layers_read_at_most_their_window():
    cfg = preset("gemma-3-27b")
    ops = operators(cfg, Precision(), [1], [512, 1024, 65536], [4])
    for j, name in enumerate(ops.names):
        if name.startswith("attn_qk"):
            kv = ops.bytes[j, 3, 0, :, 0]  # KV read
            keys = [512 + 4, 1024 + 4, (1024 if "sliding" in name else 65536) + 4]
            assert kv.tolist() == [2 * k * cfg.kv_dim for k in keys], name
    assert ops.counts[ops.names.index("attn_qk[sliding_attention 1024]")] == 52
    l4 = ModelConfig.from_hf(tiny("llama4_text"), name="l", source="t")
    assert "attn_qk[chunked_attention 64]" in operators(l4, Precision(), [1], [8], [1]).names


def test_mla_reads_the_latent_once_per_key():
    cfg = preset("deepseek-v3")
    ops = operators(cfg, Precision(), [2], [1000], [8])
    kv = {n: ops.bytes[j, 3, 0, 0, 0] for j, n in enumerate(ops.names)}
    assert kv["attn_qk"] == 2 * 2 * 1008 * (512 + 64) and kv["attn_pv"] == 0
    write = ops.bytes[ops.names.index("kv_a_proj"), 4, 0, 0, 0]
    assert write == 2 * 16 * 576  # T = 16 tokens of latent + RoPE key


@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "gpt-oss-120b", "gemma-3-27b", "deepseek-v3",
                                  "mistral-small-24b"])
def test_time_never_decreases_with_batch_context_or_tokens(name):
    r = roofline(preset(name), load_hardware("h100-sxm"), batch=[1, 4, 64],
                 context=[0, 500, 2000, 30000], tokens=[1, 2, 17, 64])
    for axis in range(3):
        assert np.all(np.diff(r.total_s, axis=axis) >= -1e-15)


NEW_PRESETS = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-8b", "qwen3-30b-a3b", "qwen3-235b-a22b",
               "gpt-oss-20b", "gpt-oss-120b", "gemma-3-27b", "mistral-small-24b", "deepseek-v3"]


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_select_and_roofline_work_for_every_preset(name, tmp_path):
    import contextlib
    import io
    import json

    from treeopt.cli import main

    def cli(*args: str) -> dict:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(list(args)) == 0
        return json.loads(out.getvalue())

    doc = cli("select", "--growth", "data/demo/growth/hydra.json", "--hardware", "h100-sxm",
              "--preset", name, "--batch", "1,8,64", "--context", "512")
    assert [p["batch"] for p in doc["points"]] == [1, 8, 64]
    r = cli("roofline", "--preset", name, "--hardware", "h100-sxm", "--batch", "1",
            "--context", "512", "--tokens", "1,8", "--totals")
    assert r["model"]["name"] == name and len(r["records"]) == 2
