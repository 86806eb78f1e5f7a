"""Draft heads: shapes, initial equality with the LM head, ranking rule, checkpoints, Medusa import."""

from __future__ import annotations

import json
from contextlib import nullcontext

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402

from treeopt import TreeoptError  # noqa: E402
from treeopt.decoding.token_order import best_token, rank_keys, rank_of, top_candidates  # noqa: E402
from treeopt.drafters.checkpoints import (  # noqa: E402
    import_medusa,
    load_heads,
    load_heads_for,  # noqa: E402
    save_heads,
)
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig  # noqa: E402

D, V = 64, 256


def _perturb(heads, seed=0):
    """Give every trainable weight a random value so that round trips test real numbers."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in heads.parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.05)
    return heads.eval()


@pytest.fixture(scope="module")
def model():
    return tiny_llama(vocab=V, hidden=D)


def test_interface_shapes(model):
    medusa = build_heads(HeadsConfig(kind="medusa", num_heads=3, hidden_size=D, vocab_size=V))
    assert medusa(torch.zeros(2, 5, D)).shape == (3, 2, 5, V)
    hydra = build_heads(HeadsConfig(kind="hydra", num_heads=3, hidden_size=D, vocab_size=V,
                                    num_layers=2))
    prev = torch.zeros(2, 5, 3, dtype=torch.long)
    assert hydra.head_logits(2, torch.zeros(2, 5, D), prev).shape == (2, 5, V)
    with pytest.raises(TreeoptError, match="needs 3 previous tokens"):
        hydra.head_logits(2, torch.zeros(2, 5, D), prev[..., :2])


@pytest.mark.parametrize("layers", [0, 1, 3])
def test_medusa_blocks_at_once_equal_each_head_alone_and_follow_the_weights(layers):
    heads = _perturb(build_heads(HeadsConfig(kind="medusa", num_heads=4, hidden_size=D,
                                             vocab_size=V, num_layers=layers)))
    hidden = torch.randn(3, D, generator=torch.Generator().manual_seed(1))
    for depth in (1, 4):
        alone = torch.stack([heads.blocks[k](hidden) for k in range(depth)], dim=1)
        assert torch.allclose(heads.blocks_at_once(hidden, depth), alone, atol=1e-6)
    if layers:  # the stacked weights are stacked again once a block's weight changes
        with torch.no_grad():
            heads.blocks[2][0].linear.weight.mul_(-3.0)
        alone = torch.stack([heads.blocks[k](hidden) for k in range(4)], dim=1)
        assert torch.allclose(heads.blocks_at_once(hidden, 4), alone, atol=1e-6)
        moved = heads.to(torch.float64)
        assert heads.blocks_at_once(hidden.double(), 4).dtype == torch.float64
        assert moved is heads


@pytest.mark.parametrize("tokens", [None, torch.tensor([7, 3, 200])])
def test_the_vocabulary_product_takes_plain_rows_of_a_transposed_hidden(tokens):
    """A Medusa hidden is a transposed view (``[b, 1, d]`` whose size-1 dimension has a
    stride): the projection must see it as an ``[n, d]`` matrix with unit row stride, where
    PyTorch's bfloat16 CPU kernel is fast, and give the logits it gives the rows one by one."""
    heads = _perturb(build_heads(HeadsConfig(kind="medusa", num_heads=2, hidden_size=D,
                                             vocab_size=V, num_layers=1, share_lm_head=False)))
    seen = []
    heads.proj[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    z = heads.blocks_at_once(torch.randn(3, D, generator=torch.Generator().manual_seed(2)), 1)
    assert z.shape == (3, 1, D) and z.stride(1) != D  # the view that is slow in bfloat16
    with heads.vocabulary(tokens) if tokens is not None else nullcontext():
        logits = heads.project(0, z)
    width = V if tokens is None else len(tokens)
    assert logits.shape == (3, 1, width)
    one_by_one = torch.stack([heads.proj[0](z[i, 0].clone()) for i in range(3)])[:, None]
    expected = one_by_one if tokens is None else one_by_one[..., tokens]
    assert torch.allclose(logits, expected, atol=1e-6)
    if tokens is None:
        assert seen[0].shape == (3, D) and seen[0].stride() == (D, 1)


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
@pytest.mark.parametrize("share", [False, True])
def test_untrained_heads_equal_the_lm_head(model, kind, share):
    cfg = HeadsConfig(kind=kind, num_heads=3, hidden_size=D, vocab_size=V, num_layers=2,
                      share_lm_head=share)
    heads = build_heads(cfg, lm_head=model.lm_head, embeddings=model.model.embed_tokens)
    h = torch.randn(1, 4, D)
    with torch.no_grad():
        want = model.lm_head(h)
        for k in range(3):
            got = heads.head_logits(k, h, torch.randint(0, V, (1, 4, k + 1)))
            assert torch.equal(got, want)


def test_hydra_heads_read_the_path_tokens(model):
    cfg = HeadsConfig(kind="hydra", num_heads=2, hidden_size=D, vocab_size=V)
    heads = _perturb(build_heads(cfg, lm_head=model.lm_head, embeddings=model.model.embed_tokens))
    h = torch.randn(1, 1, D)
    with torch.no_grad():
        a = heads.head_logits(1, h, torch.tensor([[[5, 6]]]))
        b = heads.head_logits(1, h, torch.tensor([[[5, 7]]]))
    assert not torch.equal(a, b)


def test_rank_and_candidates_break_ties_by_token_id():
    logits = torch.tensor([1.0, 3.0, 1.0, 3.0, 0.0, 1.0])
    order = top_candidates(logits, 6).tolist()
    assert order == [1, 3, 0, 2, 5, 4]
    assert [int(rank_of(logits, torch.tensor(t))) for t in order] == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(-3, 3), min_size=12, max_size=12), min_size=1, max_size=5),
       st.data())
def test_a_rank_below_a_cut_is_the_full_rank_capped(dtype, rows, data):
    """Few distinct values: the true logit ties inside the top, at the cut and past it."""
    logits = torch.tensor(rows, dtype=dtype)
    target = torch.tensor(data.draw(st.lists(st.integers(0, 11), min_size=len(rows),
                                             max_size=len(rows))))
    below = data.draw(st.integers(0, 13))
    want = rank_of(logits, target).clamp(max=below)
    assert torch.equal(rank_of(logits, target, below=below), want)
    # a trace's [b, n] layout: the same, row by row
    assert torch.equal(rank_of(logits[None], target[None], below=below), want[None])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(-3, 3), min_size=12, max_size=12), min_size=1, max_size=8),
       st.integers(1, 12), st.data())
def test_top_candidates_equal_the_full_stable_sort(dtype, rows, k, data):
    """Few distinct values, so ties inside the top k and across the k-th place are common (as
    in 16-bit logits, where the tie paths are the ones usually taken), in rows beside rows of
    distinct values (a batch of rows takes each path at once)."""
    distinct = data.draw(st.lists(st.permutations(range(12)), max_size=4))
    rows = [*rows, *distinct]
    order = data.draw(st.permutations(range(len(rows))))
    logits = torch.tensor([rows[i] for i in order], dtype=dtype)
    want = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
    assert torch.equal(top_candidates(logits, k), want)
    assert torch.equal(best_token(logits), want[..., 0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([-2.5, -1.0, -0.0, 0.0, 0.5, 1e-30, -1e-30, 3.0, 1e30]),
                         min_size=9, max_size=9), min_size=1, max_size=3),
       st.integers(1, 9))
def test_rank_keys_order_as_the_full_stable_sort(rows, k):
    """The GPU's sync-free path: a top-k of the keys is the rule's top-k, signs and ties and
    ±0 included."""
    logits = torch.tensor(rows, dtype=torch.float32)
    want = torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
    assert torch.equal(torch.topk(rank_keys(logits), k, dim=-1).indices, want)


def test_base_shape_mismatch_is_rejected(model):
    cfg = HeadsConfig(kind="medusa", num_heads=2, hidden_size=32, vocab_size=V)
    with pytest.raises(TreeoptError, match="does not match the base model's lm_head"):
        build_heads(cfg, lm_head=model.lm_head)


def test_bad_config_is_rejected():
    with pytest.raises(TreeoptError, match="head kind 'lookahead' is unknown"):
        HeadsConfig(kind="lookahead", num_heads=2, hidden_size=8, vocab_size=8)
    with pytest.raises(TreeoptError, match="prefix_attention applies to Hydra"):
        HeadsConfig(kind="medusa", num_heads=2, hidden_size=8, vocab_size=8,
                    prefix_attention=True)


@pytest.mark.parametrize("options", [
    {"kind": "medusa", "num_layers": 1},
    {"kind": "medusa", "num_layers": 2, "share_lm_head": True},
    {"kind": "hydra", "num_layers": 2},
    {"kind": "hydra", "num_layers": 1, "share_lm_head": True, "prefix_attention": True},
])
def test_checkpoint_round_trip(model, tmp_path, options):
    cfg = HeadsConfig(num_heads=3, hidden_size=D, vocab_size=V, **options)
    heads = _perturb(build_heads(cfg, lm_head=model.lm_head, embeddings=model.model.embed_tokens))
    save_heads(heads, tmp_path / "h")
    assert sorted(p.name for p in (tmp_path / "h").iterdir()) == ["heads.json", "heads.safetensors"]
    back = load_heads_for(model, tmp_path / "h")
    assert back.config == cfg
    h, prev = torch.randn(2, 3, D), torch.randint(0, V, (2, 3, 3))
    with torch.no_grad():
        if cfg.prefix_attention:
            assert torch.equal(heads.features(h)[0], back.features(h)[0])
        for k in range(3):
            assert torch.equal(heads.head_logits(k, h, prev[..., : k + 1]),
                               back.head_logits(k, h, prev[..., : k + 1]))


def test_shared_heads_need_the_base_model(model, tmp_path):
    cfg = HeadsConfig(kind="medusa", num_heads=2, hidden_size=D, vocab_size=V, share_lm_head=True)
    save_heads(build_heads(cfg, lm_head=model.lm_head), tmp_path)
    with pytest.raises(TreeoptError, match="share the base model's LM head"):
        load_heads(tmp_path)


def test_heads_for_another_model_are_rejected(tmp_path):
    small = tiny_llama(vocab=128, hidden=32)
    cfg = HeadsConfig(kind="medusa", num_heads=2, hidden_size=32, vocab_size=128)
    save_heads(build_heads(cfg), tmp_path)
    with pytest.raises(TreeoptError, match="heads have hidden size 32 and vocabulary 128, "
                                           "the model has hidden size 64 and vocabulary 256"):
        load_heads_for(tiny_llama(vocab=V, hidden=D), tmp_path)
    assert load_heads_for(small, tmp_path).config == cfg


class _MedusaResBlock(torch.nn.Module):
    """Medusa's published ResBlock, reproduced to fabricate a checkpoint in its layout."""

    def __init__(self, hidden):
        super().__init__()
        self.linear = torch.nn.Linear(hidden, hidden)
        self.act = torch.nn.SiLU()

    def forward(self, x):
        return x + self.act(self.linear(x))


def _medusa_reference(num_heads, num_layers):
    torch.manual_seed(5)
    return torch.nn.ModuleList(
        torch.nn.Sequential(*[_MedusaResBlock(D) for _ in range(num_layers)],
                            torch.nn.Linear(D, V, bias=False))
        for _ in range(num_heads)).eval()


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_import_medusa_published_layout(tmp_path, suffix):
    ref = _medusa_reference(num_heads=3, num_layers=2)
    state = ref.state_dict()
    assert "0.1.linear.weight" in state and "2.2.weight" in state  # the published key names
    if suffix == ".pt":
        torch.save(state, tmp_path / "medusa_lm_head.pt")
    else:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()},
                  str(tmp_path / "medusa_lm_head.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(
        {"medusa_num_heads": 3, "medusa_num_layers": 2, "base_model_name_or_path": "x"}))
    heads = load_heads(tmp_path)
    assert heads.config == HeadsConfig(kind="medusa", num_heads=3, hidden_size=D, vocab_size=V,
                                       num_layers=2)
    h = torch.randn(1, 4, D)
    with torch.no_grad():
        assert torch.equal(heads(h), torch.stack([head(h) for head in ref]))


class Payload:
    """Not a tensor: weights_only loading must refuse it."""


def test_medusa_pt_with_arbitrary_objects_is_refused(tmp_path):
    torch.save({"0.1.weight": Payload()}, tmp_path / "medusa_lm_head.pt")
    (tmp_path / "config.json").write_text('{"medusa_num_heads": 1, "medusa_num_layers": 1}')
    with pytest.raises(TreeoptError, match="not loadable with weights_only=True"):
        import_medusa(tmp_path)


def test_not_a_heads_directory(tmp_path):
    with pytest.raises(TreeoptError, match="not a drafter checkpoint"):
        load_heads(tmp_path)


def test_the_registry_says_what_each_implementation_does():
    """A kind's fields match its implementation: dynamic drafting exactly where the class
    drafts dynamic trees, a roofline formula that exists (EAGLE's with its fc's shape), demo
    settings that exist (none for a lookup drafter, which has no layers)."""
    import dataclasses

    from treeopt.decoding.drafter import Drafter
    from treeopt.demo.config import DemoConfig
    from treeopt.drafters.heads import drafter_class
    from treeopt.registry.kinds import HYBRID_SUFFIX, KINDS
    from treeopt.roofline.draft import _FORMULAS

    demo_settings = {f.name for f in dataclasses.fields(DemoConfig)}
    for kind in KINDS.values():
        cls = drafter_class(kind)
        if kind.hybrid:  # a model kind joined by prompt lookup: the kind of an instance
            model = KINDS[kind.name.removesuffix(HYBRID_SUFFIX)]
            assert cls.__name__ == "HybridDrafter" and kind.title.startswith(model.title)
            assert (kind.per_depth, kind.draft_formula) == (model.per_depth, model.draft_formula)
        else:
            assert cls.kind is kind
        assert kind.dynamic == (cls.draft_dynamic is not Drafter.draft_dynamic) == (
            cls.rank_dynamic is not Drafter.rank_dynamic), kind.name
        assert kind.draft_formula in _FORMULAS
        assert (kind.fc_inputs > 0) == (kind.draft_formula == "eagle"), kind.name
        assert set(kind.demo_layers) <= demo_settings, kind.name
        pure_lookup = kind.lookup and not kind.hybrid  # n-gram drafting alone has no layers
        assert bool(kind.demo_layers) != pure_lookup, kind.name


def test_a_drafter_of_a_kind_without_dynamic_trees_refuses_them():
    heads = build_heads(HeadsConfig(kind="hydra", num_heads=2, hidden_size=D, vocab_size=V))
    assert not heads.kind.dynamic
    with pytest.raises(TreeoptError, match="dynamic trees need an EAGLE drafter, an EAGLE-3 "
                                           "drafter or an MTP drafter, not Hydra heads"):
        heads.draft_dynamic(None, torch.zeros(1, 1, D), torch.zeros(1, dtype=torch.long))
    with pytest.raises(TreeoptError, match="not Hydra heads"):
        heads.rank_dynamic(torch.zeros(1, 8, D), torch.zeros(1, 8, dtype=torch.long), topk=2,
                           steps=2)
