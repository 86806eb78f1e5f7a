"""The architecture matrix: every family decodes as it decodes itself, or is refused in one line.

Each family of ``architectures.FAMILIES`` is built tiny from a config (windows and chunks of 8
tokens, prompts of 11-17, 20 new tokens, a batch of three rows of different lengths) and held,
with a Medusa, a Hydra and an EAGLE drafter each, to: treeopt's autoregressive loop and its tree
decoding equal the model's own greedy ``generate``; calibration's batched ranks equal a
step-by-step reference; the calibrated trace, walked step by step, gives live decoding's every
accepted length; sample-and-match equals plain sampling seed for seed.
``benchmarks/architecture_matrix.py`` prints the same rows as the table in docs/byo-model.md.
"""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import architectures as arch  # noqa: E402

from treeopt import TreeoptError  # noqa: E402
from treeopt.decoding.layers import FULL, AttentionLayout, LayerKind  # noqa: E402
from treeopt.decoding.probe import check_tree_support, verifier  # noqa: E402

DECODED = [f for f in arch.FAMILIES if f.refused is None]
REFUSED = [f for f in arch.FAMILIES if f.refused is not None]


@pytest.mark.parametrize("family", DECODED, ids=lambda f: f.name)
def test_family_decodes_exactly_as_itself(family, tmp_path):
    row = arch.matrix_row(family, tmp_path)
    for kind in arch.DRAFTERS:
        checks = {c: row[kind][c] for c in arch.CHECKS}
        assert checks == dict.fromkeys(arch.CHECKS, True), kind
    assert max(row[k]["E[L]"] for k in arch.DRAFTERS) > 1.05  # paths were accepted and moved


@pytest.mark.parametrize("family", REFUSED, ids=lambda f: f.name)
def test_recurrent_families_are_refused_in_one_line_before_any_work(family):
    line = arch.refusal(family)
    assert family.refused in line and "\n" not in line
    assert "layer" in line and family.build().__class__.__name__ in line


@pytest.mark.parametrize("name", ["mistral", "gemma2", "llama4_text"])
def test_the_probe_fails_when_a_window_or_chunk_is_ignored(name):
    family = next(f for f in arch.FAMILIES if f.name == name)
    verify = verifier(family.build(), tree=False)
    assert not verify.layout.full_only and check_tree_support(verify).exact
    blind = dataclasses.replace(verify, layout=AttentionLayout(
        tuple(LayerKind(FULL) for _ in verify.layout.layers)))
    with pytest.raises(TreeoptError, match="differs from the model's own forward"):
        check_tree_support(blind)


def test_layouts_read_from_transformers():
    layouts = {f.name: verifier(f.build(), tree=False).layout for f in DECODED}
    assert layouts["llama"].full_only and layouts["deepseek_v3"].full_only
    assert [k.kind for k in layouts["gemma2"].layers] == arch.ALTERNATING
    assert {k.span for k in layouts["mistral"].layers} == {arch.WINDOW}
    assert [k.kind for k in layouts["qwen2"].layers] == ["full_attention"] * 2 + [
        "sliding_attention"] * 2  # sliding from max_window_layers on
    assert layouts["llama4_text"].reach == arch.WINDOW


def test_mla_cache_holds_the_models_own_key_and_value_widths():
    family = next(f for f in arch.FAMILIES if f.name == "deepseek_v3")
    shape = verifier(family.build(), tree=False).shape
    # transformers caches MLA's latent: the compressed KV (kv_lora_rank) and the shared rotary
    # key (qk_rope_head_dim), one head of each — not the expanded keys and values
    assert (shape.kv_heads, shape.key_dim, shape.value_dim) == (1, 16, 8)


@pytest.mark.parametrize("name", ["gemma2", "gpt_oss"])
def test_exact_attention_applies_soft_capping_and_sinks_as_the_model_does(name):
    from treeopt.decoding.attention import register

    family = next(f for f in arch.FAMILIES if f.name == name)
    model = family.build()
    ids = torch.tensor([arch.prompts()[1]])
    with torch.no_grad():
        want = model(input_ids=ids).logits  # the model's own eager attention
        model.set_attn_implementation(register())
        got = model(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    if name == "gemma2":  # the cap binds: without it the logits differ
        assert model.config.attn_logit_softcapping is not None


def test_a_refused_family_fails_before_decoding_anything():
    falcon = next(f for f in REFUSED if f.name == "falcon_h1")
    from treeopt.decoding.loop import autoregressive

    with pytest.raises(TreeoptError, match="layer 0 is of type 'hybrid'.*recurrent state"):
        autoregressive(falcon.build(), [5, 6, 7])
    with pytest.raises(TreeoptError, match="recurrent state"):
        verifier(falcon.build(), tree=False)


def test_the_cli_refuses_a_recurrent_model_in_one_line_before_training(tmp_path, prompts_file):
    import os

    from conftest import tiny_tokenizer
    from in_process import treeopt

    lfm2 = next(f for f in REFUSED if f.name == "lfm2")
    model_dir = tmp_path / "lfm2"
    lfm2.build().save_pretrained(model_dir)
    tiny_tokenizer(arch.VOCAB).save_pretrained(model_dir)
    proc = treeopt("train-heads", "--kind", "medusa", "--model", model_dir, "--data", prompts_file,
                   "--steps", "1", "--out", tmp_path / "heads",
                   env={**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"})
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "Lfm2ForCausalLM" in line and "'conv'" in line and "recurrent state" in line
    assert not (tmp_path / "heads").exists()  # refused before any work


@pytest.mark.parametrize("family", DECODED, ids=lambda f: f.name)
def test_the_rule_for_older_transformers_reads_what_transformers_reads(family):
    from transformers.cache_utils import get_layer_types_and_kwargs

    from treeopt.decoding.layers import config_layer_types

    config = family.build().config.get_text_config(decoder=True)
    types, kwargs = get_layer_types_and_kwargs(config)
    assert config_layer_types(config) == (list(types), list(kwargs))


@pytest.mark.parametrize("name", ["gemma2", "gpt_oss", "llama4_text", "deepseek_v3"])
def test_bfloat16_with_exact_attention_decodes_as_the_model_does(name):
    """16-bit decoding runs treeopt's exact attention (soft-capping, sinks, windows, MLA): the
    loop and the tree still equal the model's own generate (with the same attention)."""
    from treeopt.decoding.attention import register
    from treeopt.decoding.hf_generate import own_greedy
    from treeopt.drafters.heads import build_heads
    from treeopt.registry.drafter_configs import HeadsConfig

    model = next(f for f in arch.FAMILIES if f.name == name).build().to(torch.bfloat16)
    model.set_attn_implementation(register())
    hidden = model.get_input_embeddings().weight.shape[1]
    heads = build_heads(HeadsConfig(kind="hydra", num_heads=3, hidden_size=hidden,
                                    vocab_size=arch.VOCAB),
                        lm_head=model.get_output_embeddings(),
                        embeddings=model.get_input_embeddings()).eval().to(torch.bfloat16)
    batch = arch.prompts()
    want = own_greedy(model, batch, max_new_tokens=arch.NEW_TOKENS, eos_token_id=2)
    assert arch.greedy_matches(model, heads, batch, want) == (len(batch), len(batch))
