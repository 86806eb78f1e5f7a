"""Column-major linear weights on the CPU: the same values, shapes and ties, in another memory
order, applied by the decoder before it runs anything, and lossless decoding with them."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402

from treeopt import Tree  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, Decoder  # noqa: E402
from treeopt.decoding.weight_layout import column_major, lay_out_for_cpu  # noqa: E402
from treeopt.drafters.checkpoints import load_heads_for, save_heads  # noqa: E402
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig  # noqa: E402

V, D = 256, 64


def _linears(*modules):
    return [m for mod in modules for m in mod.modules() if isinstance(m, torch.nn.Linear)]


def _heads(model, kind="medusa", **options):
    cfg = HeadsConfig(kind=kind, num_heads=3, hidden_size=D, vocab_size=V, num_layers=2,
                      **options)
    heads = build_heads(cfg, lm_head=model.lm_head, embeddings=model.model.embed_tokens)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in heads.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    return heads.eval()


def test_column_major_keeps_values_and_shape():
    w = torch.randn(5, 3)
    c = column_major(w)
    assert torch.equal(c, w) and c.shape == (5, 3) and c.stride() == (1, 5)
    assert c.t().is_contiguous() and not c.is_contiguous()


def test_lay_out_moves_every_float32_linear_once_and_keeps_ties():
    model = tiny_llama(vocab=V, hidden=D)
    model.lm_head.weight = model.model.embed_tokens.weight  # tied, as the demo's
    heads = _heads(model, share_lm_head=True)  # its projection is the base LM head itself
    before = {id(m.weight): m.weight.detach().clone() for m in _linears(model, heads)}
    ids = torch.tensor([[1, 5, 9, 200, 17]])
    with torch.no_grad():
        logits = model(ids).logits
    moved = lay_out_for_cpu(model, heads)
    weights = {id(m.weight): m.weight for m in _linears(model, heads)}
    assert moved == len(weights) == len(before)  # the shared LM head counted once
    for key, w in weights.items():
        assert torch.equal(w, before[key]) and w.t().is_contiguous()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert heads.base_lm_head is model.lm_head
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, logits, atol=1e-5, rtol=1e-5)
    assert lay_out_for_cpu(model, heads) == 0  # idempotent


def test_lay_out_leaves_16_bit_weights_alone():
    model = tiny_llama(vocab=V, hidden=D, dtype=torch.float16)
    assert lay_out_for_cpu(model, None) == 0
    assert all(m.weight.is_contiguous() for m in _linears(model))


def test_heads_saved_after_lay_out_load_back_equal(tmp_path):
    model = tiny_llama(vocab=V, hidden=D)
    heads = _heads(model, kind="hydra")
    assert lay_out_for_cpu(heads) > 0
    save_heads(heads, tmp_path / "h")
    back = load_heads_for(model, tmp_path / "h")
    for (name, a), (_, b) in zip(heads.state_dict().items(), back.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
def test_decoder_lays_out_then_decodes_losslessly(kind):
    model = tiny_llama(vocab=V, hidden=D)
    heads = _heads(model, kind=kind)
    decoder = Decoder(model, heads)
    assert all(m.weight.t().is_contiguous() for m in _linears(model, heads))
    prompts = [[1, 7, 30, 99, 4], [1, 250, 3], [1, 12, 12, 12, 12, 12, 40]]
    tree = Tree.from_choices([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    cfg = DecodeConfig(max_new_tokens=24)
    ar = decoder.decode(Tree(()), prompts, config=cfg).tokens
    assert decoder.decode(tree, prompts, config=cfg).tokens == ar
    for i, p in enumerate(prompts):  # each row as it decodes alone
        assert decoder.decode(tree, [p], config=cfg).tokens == (ar[i],)


def test_weights_laid_out_in_inference_mode_still_train():
    model = tiny_llama(vocab=V, hidden=D)
    with torch.inference_mode():
        assert lay_out_for_cpu(model) > 0
    assert not model.lm_head.weight.is_inference()
    loss = model(torch.tensor([[1, 2, 3]])).logits.sum()
    loss.backward()  # inference tensors would refuse to be saved for backward
    assert model.lm_head.weight.grad is not None
