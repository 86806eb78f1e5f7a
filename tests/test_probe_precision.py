"""The support probe sees one key too few: it compares in float32 whatever the model's dtype,
places window and chunk boundaries between the prefix and the tree and inside the tree (the
prefix then in two forwards), and reads the last hidden state, not full-vocabulary logits."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from treeopt import TreeoptError  # noqa: E402
from treeopt.decoding.layers import AttentionLayout, LayerKind  # noqa: E402
from treeopt.decoding.probe import check_tree_support, verifier  # noqa: E402

WINDOW = 1024  # a window as long as real models': one key of it moves a hidden state little


def _tiny(model_type: str, dtype: torch.dtype, **config):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(model_type, vocab_size=64, hidden_size=32, intermediate_size=64,
                               num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, max_position_embeddings=4096,
                               tie_word_embeddings=False, **config)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
    return model.to(dtype)


def _short_by(verify, keys: int):
    """``verify`` whose masks let each windowed layer see ``keys`` keys fewer than it does."""
    return dataclasses.replace(verify, layout=AttentionLayout(tuple(
        LayerKind(k.kind, k.span - keys if k.span else None) for k in verify.layout.layers)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_one_missing_key_in_a_long_window_is_seen(dtype):
    model = _tiny("mistral", dtype, sliding_window=WINDOW)
    verify = verifier(model, tree=False)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.inference_mode():
        probe = check_tree_support(verify)
    assert probe.exact and probe.max_abs_diff <= probe.tolerance
    with pytest.raises(TreeoptError, match="differs from the model's own forward"):
        check_tree_support(_short_by(verify, 1))
    after = model.state_dict()  # the model is left as it was, bit for bit, no inference tensor
    assert all(torch.equal(after[k], v) and after[k].dtype == v.dtype for k, v in before.items())
    assert not any(p.is_inference() for p in model.parameters())


def test_boundaries_fall_between_prefix_and_tree_and_inside_the_tree():
    from treeopt.decoding.probe import probe_cases

    verify = verifier(_chunked(), tree=False)
    cases = probe_cases(verify)
    # past every chunk; then a chunk boundary right after the first row's prefix (its root
    # opens a chunk) and inside the second row's tree, the prefix cached in two forwards
    assert [(c.lengths, c.first) for c in cases] == [((11, 10), None), ((8, 7), 4)]


def _chunked():
    return _tiny("llama4_text", torch.float32, attention_chunk_size=8, head_dim=8,
                 num_local_experts=2, num_experts_per_tok=1, intermediate_size_mlp=64,
                 interleave_moe_layer_step=2, layer_types=["chunked_attention", "full_attention"])


def test_a_chunk_one_key_too_short_is_seen():
    verify = verifier(_chunked(), tree=False)
    assert check_tree_support(verify).exact
    with pytest.raises(TreeoptError, match="differs from the model's own forward"):
        check_tree_support(_short_by(verify, 1))


def test_tree_keys_placed_by_slot_not_position_are_seen(monkeypatch):
    """A step whose masks take a tree token's cache slot for its position: the same chunk
    either way unless a chunk boundary falls at the tree."""
    from treeopt.decoding import tree_forward

    right = tree_forward.step_inputs

    def by_slot(plan, lengths, frontier, *, dtype, width=None, layout=None):
        positions, plain = right(plan, lengths, frontier, dtype=dtype, width=width)
        if layout is None or layout.full_only:
            return positions, plain
        visible = plain[:, 0] == 0  # [b, q, K]
        slots = torch.arange(visible.shape[-1])[None].expand(visible.shape[0], -1)
        return positions, layout.masks(visible, positions, slots, dtype=dtype)

    verify = verifier(_chunked(), tree=False)
    monkeypatch.setattr(tree_forward, "step_inputs", by_slot)
    with pytest.raises(TreeoptError, match="differs from the model's own forward"):
        check_tree_support(verify)


def test_the_reference_reads_no_full_vocabulary_logits(monkeypatch):
    model = _tiny("mistral", torch.float32, sliding_window=8)
    verify = verifier(model, tree=False)
    head = model.get_output_embeddings()
    rows = []
    handle = head.register_forward_hook(lambda mod, args, out: rows.append(out.shape[:-1].numel()))
    try:
        check_tree_support(verify)
    finally:
        handle.remove()
    # the tree steps' own logits only (2 rows × 4 tree tokens), never the reference's prefixes
    assert rows and max(rows) <= 8


def test_a_model_is_probed_once_while_its_attention_stays(monkeypatch):
    """Every decoding starts a verifier; the support probe (every weight cast to float32 and
    back) runs for a model's first, and again only once its attention implementation changed."""
    import treeopt.decoding.probe as probe_module

    model = _tiny("llama", torch.bfloat16)
    probed = []
    real = probe_module.check_tree_support
    monkeypatch.setattr(probe_module, "check_tree_support",
                        lambda verify: probed.append(1) or real(verify))
    first = verifier(model, tree=True).probe
    assert first is not None and first.exact
    assert verifier(model, tree=True).probe == first and len(probed) == 1
    assert verifier(_tiny("llama", torch.bfloat16), tree=True).probe.exact and len(probed) == 2
    model.config._attn_implementation = "sdpa"
    assert verifier(model, tree=True).probe.exact and len(probed) == 3
