"""The EAGLE-3 drafter: three fused base layers, its fused decoder layer and its own vocabulary.
Its one-pass-per-depth rank trace equals step-by-step decoding, live decoding with it is
lossless and walks as its trace predicts, and a checkpoint in the published layout (with a
reduced draft vocabulary) imports exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402
from continuous import assert_each_prompt_as_alone  # noqa: E402

from treeopt import Tree, TreeoptError  # noqa: E402
from treeopt.decoding.calibrate import CalibrateConfig, calibrate  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, decode, generate  # noqa: E402
from treeopt.decoding.rank_pass import greedy_continuations, rank_batch  # noqa: E402
from treeopt.drafters.eagle3 import Eagle3Drafter  # noqa: E402
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.drafters.training import train_heads  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig, TrainConfig  # noqa: E402

V, D, LAYERS = 256, 64, 4
PROMPTS = [[5, 17, 99, 3, 42], [7, 7, 8], [200, 100, 50, 25, 12, 6, 3], [9]]
TREE = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1],
                          [0, 0, 0, 0]])


@pytest.fixture(scope="module")
def base():
    model = tiny_llama(vocab=V, hidden=D, layers=LAYERS, seed=3)
    with torch.no_grad():
        model.lm_head.weight.mul_(25)
    return model


def random_eagle3(base, *, draft_vocab=0, seed=0):
    torch.manual_seed(seed)
    cfg = HeadsConfig(kind="eagle3", num_heads=4, hidden_size=D, vocab_size=V, kv_heads=2,
                      intermediate_size=96, draft_vocab_size=draft_vocab,
                      feature_layers=(2, 2, 1))
    drafter = build_heads(cfg, lm_head=base.lm_head, embeddings=base.model.embed_tokens)
    with torch.no_grad():
        for p in drafter.parameters():
            if p.requires_grad:
                p.normal_(0, 0.2)
        if draft_vocab:  # draft token i is base token 2 i + 1 (the odd tokens)
            drafter.d2t.copy_(torch.arange(draft_vocab) + 1)
            drafter.t2d.zero_()
            drafter.t2d[drafter.draft_ids()] = True
    return drafter.eval()


@pytest.fixture(scope="module")
def trained(base):
    seqs = greedy_continuations(base, PROMPTS * 4, max_new_tokens=40)
    cfg = TrainConfig(kind="eagle3", num_heads=4, steps=60, batch_size=8, seq_len=40, lr=3e-3)
    return train_heads(base, seqs, cfg)[0]


def reference_ranks(base, drafter, sequence, start, top_k):
    """Decoding one step at a time: the drafter's layer over its entries with a plain causal
    forward (true entries up to t, then its own predicted features), ranks by a stable sort over
    its vocabulary, mapped to base ids."""
    K = drafter.config.num_heads
    ids = torch.tensor([sequence])
    states = base(input_ids=ids, output_hidden_states=True).hidden_states
    feats = torch.cat([states[i] for i in drafter.config.feature_layers], dim=-1)
    layer = drafter.layers[0]

    def run(entries):
        pos = torch.arange(entries.shape[1])[None]
        q, (k, v) = layer.qkv(entries, pos)
        causal = torch.ones(entries.shape[1], entries.shape[1], dtype=torch.bool).tril()
        att = torch.nn.functional.scaled_dot_product_attention(
            q, layer.expand(k), layer.expand(v), attn_mask=causal)
        return layer.finish(entries, att)[:, -1]

    base_of = drafter.draft_ids().tolist()
    out = []
    for t in range(start, len(sequence) - 1 - K):
        entries = drafter.entries(ids[:, 1: t + 2], feats[:, : t + 1])
        row = []
        for k in range(K):
            g = run(entries)
            order = torch.sort(drafter.logits(g)[0], descending=True, stable=True).indices
            ranked = [base_of[i] for i in order.tolist()]
            truth = sequence[t + 2 + k]
            rank = ranked.index(truth) if truth in ranked else -1
            row.append(rank if 0 <= rank < top_k else -1)
            nxt = drafter.entries(ids[:, t + 2 + k: t + 3 + k], g[:, None])
            entries = torch.cat([entries, nxt], dim=1)
        out.append(row)
    return np.array(out, dtype=np.int16).reshape(-1, K)


@pytest.mark.parametrize("draft_vocab", [0, 96], ids=["full-vocab", "draft-vocab"])
def test_rank_trace_in_one_pass_per_depth_equals_step_by_step_decoding(base, draft_vocab):
    drafter = random_eagle3(base, draft_vocab=draft_vocab)
    seqs = greedy_continuations(base, PROMPTS[:2], max_new_tokens=12)
    starts = [len(p) - 1 for p in PROMPTS[:2]]
    with torch.inference_mode():
        got = rank_batch(base, drafter, seqs, starts, top_k=V)
        for s, st, g in zip(seqs, starts, got, strict=True):
            want = reference_ranks(base, drafter, s, st, V)
            np.testing.assert_array_equal(g, want)
    if draft_vocab:  # tokens outside the draft vocabulary can never be proposed
        assert (np.concatenate(got) == -1).any()


@pytest.mark.parametrize("draft_vocab", [0, 96], ids=["full-vocab", "draft-vocab"])
def test_greedy_tree_decoding_with_eagle3_is_lossless(base, draft_vocab):
    drafter = random_eagle3(base, draft_vocab=draft_vocab)
    cfg = DecodeConfig(max_new_tokens=24)
    want = decode(base, None, Tree(()), PROMPTS, config=cfg).tokens
    for tree in (TREE, Tree.chain(4)):
        assert decode(base, drafter, tree, PROMPTS, config=cfg).tokens == want


@pytest.mark.parametrize("cfg", [DecodeConfig(max_new_tokens=20), DecodeConfig(max_new_tokens=20, mode="sample", temperature=0.7)],
                         ids=["greedy", "sampled"])
def test_continuous_batching_decodes_each_prompt_as_alone(base, cfg):
    drafter = random_eagle3(base, draft_vocab=96)
    assert_each_prompt_as_alone(base, drafter, TREE, PROMPTS, cfg, batch=2)


def test_trained_eagle3_walks_its_trace_step_by_step_and_drafts(base, trained, tmp_path):
    from treeopt.model.simulation import step_lengths

    assert trained.config.feature_layers == (2, 2, 1)  # EAGLE-3's layers of a 4-layer model
    walks = []
    for i, prompt in enumerate(PROMPTS[:3]):
        trace, _ = calibrate(base, trained, [prompt], tmp_path / f"{i}.npz",
                             config=CalibrateConfig(top_k=8, max_new_tokens=32))
        assert trace.head_kind == "eagle3"
        walk = step_lengths(TREE, trace).tolist()
        live = generate(base, trained, TREE, prompt, config=DecodeConfig(max_new_tokens=32))
        assert list(live.stats.accept_lengths[: len(walk)]) == walk
        walks += walk
    assert np.mean(walks) > 1.5


def public_layout(drafter: Eagle3Drafter, directory):
    """``drafter`` in EAGLE-3's published layout: config.json (with draft_vocab_size) and
    model.safetensors under the names midlayer.*, fc, norm, lm_head, d2t, t2d."""
    from safetensors.torch import save_file

    cfg = drafter.config
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": D, "intermediate_size": cfg.intermediate_size,
        "num_attention_heads": cfg.attention_heads, "num_key_value_heads": cfg.kv_heads,
        "num_hidden_layers": 1, "rms_norm_eps": cfg.rms_norm_eps, "vocab_size": V,
        "draft_vocab_size": cfg.draft_vocab_size or V}))
    names = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj",
             "v_proj": "self_attn.v_proj", "o_proj": "self_attn.o_proj",
             "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "down_proj": "mlp.down_proj",
             "input_layernorm": "input_layernorm", "hidden_norm": "hidden_norm",
             "post_attention_layernorm": "post_attention_layernorm"}
    layer = drafter.layers[0]
    state = {f"midlayer.{theirs}.weight": getattr(layer, ours).weight
             for ours, theirs in names.items()}
    state.update({"fc.weight": drafter.fc.weight, "norm.weight": drafter.norm.weight,
                  "lm_head.weight": drafter.lm_head.weight, "d2t": drafter.d2t,
                  "t2d": drafter.t2d})
    save_file({k: v.detach().clone().contiguous() for k, v in state.items()},
              str(directory / "model.safetensors"))
    return directory


def test_an_eagle3_checkpoint_in_the_public_layout_imports_exactly(base, tmp_path):
    from treeopt.drafters.checkpoints import load_heads_for

    drafter = random_eagle3(base, draft_vocab=96)
    d = public_layout(drafter, tmp_path / "e3")
    back = load_heads_for(base, d, depth=4)
    assert isinstance(back, Eagle3Drafter) and back.config.draft_vocab_size == 96
    assert back.config.feature_layers == (2, 2, 1)  # EAGLE-3's for a 4-layer base
    assert torch.equal(back.draft_ids(), drafter.draft_ids())
    seqs = greedy_continuations(base, PROMPTS[:2], max_new_tokens=10)
    with torch.inference_mode():
        a = rank_batch(base, drafter, seqs, [4, 2], top_k=8)
        b = rank_batch(base, back, seqs, [4, 2], top_k=8)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_eagle3_configs_that_cannot_work_are_refused():
    with pytest.raises(TreeoptError, match="reads 3 base layers"):
        HeadsConfig(kind="eagle3", num_heads=2, hidden_size=D, vocab_size=V)
    with pytest.raises(TreeoptError, match="draft_vocab_size 300"):
        HeadsConfig(kind="eagle3", num_heads=2, hidden_size=D, vocab_size=V,
                    draft_vocab_size=300, feature_layers=(1, 2, 3))
