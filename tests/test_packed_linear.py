"""CPU linears with oneDNN-packed weights: the products of F.linear (a single float32 row, and every
bfloat16 product where bfloat16 is native, its very bits), parameters and ties untouched, training
unaffected, a changed weight packed again, row rules kept, and lossless decoding by the decoder
that packs."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from conftest import tiny_llama  # noqa: E402
from torch import nn  # noqa: E402

from treeopt import Tree  # noqa: E402
from treeopt.decoding import packed_linear  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, Decoder  # noqa: E402
from treeopt.decoding.packed_linear import (  # noqa: E402
    native_bf16,
    pack_for_cpu,
    packing_available,
    unpack_for_cpu,
)
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig  # noqa: E402

needs_onednn = pytest.mark.skipif(not packing_available(), reason="torch without oneDNN")
needs_bf16 = pytest.mark.skipif(not native_bf16(), reason="no native bfloat16 (AVX512-BF16, AMX)")
V, D = 256, 64


@pytest.fixture(autouse=True)
def _pack_small_weights(monkeypatch):
    """Every weight of these tiny models packs (by default only 1 MiB or more)."""
    monkeypatch.setattr(packed_linear, "MIN_ELEMENTS", 0)


def _linear(bias=True, seed=0):
    torch.manual_seed(seed)
    return nn.Linear(48, 80, bias=bias)


def _packed(module):
    return getattr(module, packed_linear._PACKED, None)


def _used(rows=4):
    """A packed layer whose pack has been made (by a product of ``rows`` rows), and those rows."""
    layer, x = _linear(), torch.randn(rows, 48)
    pack_for_cpu(layer)
    with torch.no_grad():
        layer(x)
    assert _packed(layer).packed is not None
    return layer, x


def _agrees(layer, x):
    """Whether ``layer(x)`` is ``F.linear``'s product of its weight as it is now."""
    return torch.allclose(layer(x), F.linear(x, layer.weight, layer.bias), atol=1e-5)


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 48), (3, 5, 48), (1, 17, 48), (32, 48)])
def test_packed_product_is_f_linear(bias, shape):
    layer = _linear(bias)
    x = torch.randn(*shape)
    want = F.linear(x, layer.weight, layer.bias)
    assert pack_for_cpu(layer) == 1
    with torch.inference_mode():
        got = layer(x)
    assert _packed(layer).packed is not None  # the packed kernel ran
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


@needs_onednn
@pytest.mark.parametrize("rows", [1, packed_linear.MAX_ROWS + 1, 100])
def test_a_single_row_and_many_rows_keep_f_linear_bits(rows):
    layer = _linear()
    pack_for_cpu(layer)
    x = torch.randn(rows, 48)
    with torch.no_grad():
        assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))
    assert _packed(layer).packed is None  # nothing packed for them


@needs_onednn
def test_pack_is_idempotent_and_keeps_parameters_and_ties():
    model = tiny_llama(vocab=V, hidden=D)
    model.lm_head.weight = model.model.embed_tokens.weight  # tied, as SmolLM2's
    keys = list(model.state_dict())
    params = {name: p.detach().clone() for name, p in model.named_parameters()}
    changed = pack_for_cpu(model)
    assert changed == sum(isinstance(m, nn.Linear) for m in model.modules())
    assert pack_for_cpu(model) == 0
    assert list(model.state_dict()) == keys
    for name, p in model.named_parameters():
        assert torch.equal(p, params[name]), name
    assert model.lm_head.weight is model.model.embed_tokens.weight


@needs_onednn
def test_modules_sharing_a_weight_share_its_pack():
    a, b = _linear(), _linear(seed=1)
    b.weight = a.weight
    pack_for_cpu(a, b)
    assert _packed(a) is _packed(b)


@needs_onednn
def test_a_weight_changed_in_place_or_replaced_is_packed_again():
    layer, x = _used()
    with torch.no_grad():
        layer.weight.mul_(-2.0)  # an optimizer's step: in place
        assert _agrees(layer, x)
    layer.weight.data = layer.weight.data.t().contiguous().t() * 0.5  # replaced
    with torch.no_grad():
        assert _agrees(layer, x)


@needs_onednn
def test_training_after_packing_runs_autograd():
    layer = _linear()
    pack_for_cpu(layer)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    x = torch.randn(6, 48)
    before = layer.weight.detach().clone()
    layer(x).pow(2).sum().backward()
    assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0
    opt.step()
    assert not torch.equal(layer.weight, before)
    with torch.no_grad():
        assert _agrees(layer, x)


def test_float16_weights_are_not_packed():
    model = tiny_llama(vocab=V, hidden=D, dtype=torch.float16)
    assert pack_for_cpu(model) == 0
    assert not any(_packed(m) for m in model.modules())


def test_bfloat16_weights_pack_only_where_native(monkeypatch):
    monkeypatch.setattr(packed_linear, "native_bf16", lambda: False)
    model = tiny_llama(vocab=V, hidden=D, dtype=torch.bfloat16)
    assert pack_for_cpu(model) == 0


@needs_bf16
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rows", [1, 2, 9, 33, 100])
def test_bfloat16_products_keep_f_linear_bits_at_every_row_count(monkeypatch, bias, rows):
    monkeypatch.setattr(packed_linear, "MIN_ELEMENTS", 1 << 18)  # no size limit in bfloat16
    layer = _linear(bias).to(torch.bfloat16)
    x = torch.randn(rows, 48).to(torch.bfloat16)
    assert pack_for_cpu(layer) == 1
    with torch.inference_mode():
        got = layer(x)
    assert _packed(layer).packed is not None  # the packed kernel ran, a lone row too
    assert torch.equal(got, F.linear(x, layer.weight, layer.bias))


@needs_bf16
def test_a_row_rule_forward_runs_packed_and_survives_unpacking():
    from treeopt.decoding.row_products import _RULE, RowRule, _agreeing_forward

    layer = _linear(bias=False).to(torch.bfloat16)
    setattr(layer, _RULE, RowRule(pair=True, max_rows=4))
    layer.forward = types.MethodType(_agreeing_forward, layer)
    assert pack_for_cpu(layer) == 1
    assert getattr(layer.forward, "__func__", None) is _agreeing_forward  # kept
    x = torch.randn(9, 48).to(torch.bfloat16)
    with torch.inference_mode():
        got = layer(x)
    assert _packed(layer).packed is not None
    assert torch.equal(got, torch.cat([F.linear(p, layer.weight) for p in x.split([3, 3, 3])]))
    assert unpack_for_cpu(layer) == 1
    assert getattr(layer.forward, "__func__", None) is _agreeing_forward


def test_without_onednn_nothing_is_packed(monkeypatch):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    layer = _linear()
    assert not packing_available()
    assert pack_for_cpu(layer) == 0 and "forward" not in vars(layer)


@needs_onednn
def test_unpack_restores_the_class_forward():
    layer = _linear()
    pack_for_cpu(layer)
    assert unpack_for_cpu(layer) == 1 and unpack_for_cpu(layer) == 0
    assert "forward" not in vars(layer) and _packed(layer) is None
    assert pack_for_cpu(layer) == 1


@needs_onednn
@pytest.mark.parametrize("kind", ["medusa", "hydra"])
def test_decoder_packs_model_and_heads_and_decodes_losslessly(kind):
    model = tiny_llama(vocab=V, hidden=D)
    cfg = HeadsConfig(kind=kind, num_heads=3, hidden_size=D, vocab_size=V, num_layers=2)
    heads = build_heads(cfg, lm_head=model.lm_head, embeddings=model.model.embed_tokens).eval()
    decoder = Decoder(model, heads)
    linears = [m for mod in (model, heads) for m in mod.modules() if isinstance(m, nn.Linear)]
    assert linears and all(_packed(m) is not None for m in linears)
    prompts = [[1, 7, 30, 99, 4], [1, 250, 3], [1, 12, 12, 12, 12, 12, 40]]
    tree = Tree.from_choices([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    config = DecodeConfig(max_new_tokens=24)
    ar = decoder.decode(Tree(()), prompts, config=config).tokens
    assert decoder.decode(tree, prompts, config=config).tokens == ar
    assert any(_packed(m).packed is not None for m in linears)  # the tree's rows ran packed
    for i, p in enumerate(prompts):
        assert decoder.decode(tree, [p], config=config).tokens == (ar[i],)


@needs_onednn
def test_a_packed_model_deep_copies_and_the_copy_packs_its_own_weights():
    import copy

    layer, x = _used(3)
    with torch.no_grad():
        twin = copy.deepcopy(layer)
        twin.weight.mul_(3.0)
        assert _agrees(twin, x)
        assert _agrees(layer, x)
    assert _packed(twin) is not _packed(layer)


def test_small_weights_keep_f_linear_by_default(monkeypatch):
    monkeypatch.setattr(packed_linear, "MIN_ELEMENTS", 1 << 18)
    small, large = nn.Linear(128, 384), nn.Linear(512, 512)
    assert pack_for_cpu(small, large) == (1 if packing_available() else 0)
    assert _packed(small) is None


def test_a_linear_with_its_own_forward_is_left_alone():
    class Router(nn.Linear):  # as Llama 4's: a product and more
        def forward(self, x):
            return super().forward(x), x

    router = Router(48, 4)
    assert pack_for_cpu(router) == 0 and "forward" not in vars(router)
