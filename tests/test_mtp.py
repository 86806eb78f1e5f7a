"""The MTP drafter: its teacher-forced rank trace (one pass per depth, modules in turn) equals a
step-by-step decoding reference, live decoding with it is lossless (greedy and sample-and-match
at T = 0.7, trees and chains, one module or several), the trace's walk reproduces live decoding
step by step (greedy and sampled), training makes it draft, checkpoints round-trip, and the
roofline prices it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from continuous import assert_each_prompt_as_alone  # noqa: E402

from treeopt import Tree, TreeoptError  # noqa: E402
from treeopt.decoding.calibrate import CalibrateConfig, calibrate  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, decode, generate  # noqa: E402
from treeopt.decoding.rank_pass import greedy_continuations, rank_batch  # noqa: E402
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.drafters.mtp import MtpDrafter  # noqa: E402
from treeopt.drafters.training import TrainConfig, train_heads  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig  # noqa: E402

V, D = 256, 64
PROMPTS = [[5, 17, 99, 3, 42], [7, 7, 8], [200, 100, 50, 25, 12, 6, 3], [9]]
TREE = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1],
                          [0, 0, 0, 0]])
SAMPLED = DecodeConfig(max_new_tokens=24, mode="sample", temperature=0.7, seed=3)


def mtp_config(modules: int = 1, **kw):
    return HeadsConfig(kind="mtp", num_heads=4, hidden_size=D, vocab_size=V, num_layers=modules,
                       share_lm_head=True, **kw)


@pytest.fixture(scope="module")
def base(peaked):
    """conftest's sharpened tiny Llama (vocabulary 256, width 64)."""
    return peaked[0]


def random_mtp(base, *, modules: int, seed: int, handoff_norm: bool = False) -> MtpDrafter:
    """An untrained MTP drafter with random weights (kv heads grouped), for exactness."""
    torch.manual_seed(seed)
    drafter = build_heads(mtp_config(modules, kv_heads=2, intermediate_size=96,
                                     handoff_norm=handoff_norm),
                          lm_head=base.lm_head, embeddings=base.model.embed_tokens)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if p.requires_grad:
                p.copy_(1 + 0.1 * torch.randn_like(p) if "norm" in name
                        else 0.2 * torch.randn_like(p))
    return drafter.eval()


@pytest.fixture(scope="module", params=[(1, False), (2, False), (3, True)],
                ids=["one-module", "two-modules", "three-modules-normed"])
def random_drafter(base, request):
    modules, normed = request.param
    return random_mtp(base, modules=modules, seed=modules, handoff_norm=normed)


@pytest.fixture(scope="module")
def trained(base):
    """An MTP drafter of two modules trained briefly on the base model's greedy text."""
    seqs = greedy_continuations(base, PROMPTS * 4, max_new_tokens=40)
    cfg = TrainConfig(kind="mtp", num_heads=4, num_layers=2, steps=60, batch_size=8,
                      seq_len=40, lr=3e-3)
    return train_heads(base, seqs, cfg)[0]


def reference_ranks(base, drafter: MtpDrafter, sequence, start, top_k):
    """Decoding one step at a time: depth k's module runs a plain causal forward over its true
    entries up to t and the chain's entries it ran, at their positions."""
    K, n = drafter.config.num_heads, len(drafter.mtp)
    ids = torch.tensor([sequence])
    hidden = base(input_ids=ids, output_hidden_states=True).hidden_states[-1]

    def run(block, entries, positions):  # the last entry's output, seeing all before it
        q, (k, v) = block.qkv(entries, torch.tensor([positions]))
        causal = torch.ones(len(positions), len(positions), dtype=torch.bool).tril()
        att = torch.nn.functional.scaled_dot_product_attention(
            q, block.expand(k), block.expand(v), attn_mask=causal)
        return block.finish(entries, att)[:, -1]

    out = []
    for t in range(start, len(sequence) - 1 - K):
        true = [drafter.entries(ids[:, 1: t + 2], hidden[:, : t + 1], m) for m in range(n)]
        chain: list[list[tuple[torch.Tensor, int]]] = [[] for _ in range(n)]
        g = run(drafter.mtp[0].block, true[0], list(range(t + 1)))
        row = []
        for k in range(K):
            if k:
                m = k % n
                entry = drafter.entries(ids[:, t + 1 + k: t + 2 + k], g[:, None], k)
                chain[m].append((entry, t + k))
                entries = torch.cat([true[m]] + [e for e, _ in chain[m]], dim=1)
                g = run(drafter.mtp[m].block, entries,
                        list(range(t + 1)) + [p for _, p in chain[m]])
            order = torch.sort(drafter.stage(k).logits(g)[0], descending=True, stable=True).indices
            rank = order.tolist().index(sequence[t + 2 + k])
            row.append(rank if rank < top_k else -1)
        out.append(row)
    return np.array(out, dtype=np.int16).reshape(-1, K)


def test_rank_trace_in_one_pass_per_depth_equals_step_by_step_decoding(base, random_drafter):
    seqs = greedy_continuations(base, PROMPTS[:2], max_new_tokens=12)
    starts = [len(p) - 1 for p in PROMPTS[:2]]
    with torch.inference_mode():
        got = rank_batch(base, random_drafter, seqs, starts, top_k=V)
        for s, st, g in zip(seqs, starts, got, strict=True):
            np.testing.assert_array_equal(g, reference_ranks(base, random_drafter, s, st, V))


@pytest.mark.parametrize("tree", [Tree.chain(4), TREE, Tree.chain(1)], ids=["chain", "tree", "one"])
def test_greedy_decoding_with_mtp_is_lossless(base, random_drafter, trained, tree):
    cfg = DecodeConfig(max_new_tokens=24)
    want = decode(base, None, Tree(()), PROMPTS, config=cfg).tokens
    for drafter in (random_drafter, trained):
        assert decode(base, drafter, tree, PROMPTS, config=cfg).tokens == want


@pytest.mark.parametrize("tree", [Tree.chain(4), TREE], ids=["chain", "tree"])
def test_sample_and_match_with_mtp_emits_the_autoregressive_samples(base, trained, tree):
    for i, prompt in enumerate(PROMPTS[:3]):
        want = decode(base, None, Tree(()), [prompt], config=SAMPLED, streams=[i])
        got = decode(base, trained, tree, [prompt], config=SAMPLED, streams=[i])
        assert got.tokens == want.tokens and got.stats.tokens == 24


@pytest.mark.parametrize("cfg", [DecodeConfig(max_new_tokens=20), SAMPLED],
                         ids=["greedy", "sampled"])
def test_continuous_batching_decodes_each_prompt_as_alone(base, trained, cfg):
    assert_each_prompt_as_alone(base, trained, TREE, PROMPTS, cfg, batch=2)


@pytest.mark.parametrize("tree", [TREE, Tree.chain(4)], ids=["tree", "chain"])
def test_the_greedy_trace_walk_reproduces_live_decoding_step_by_step(base, trained, tree,
                                                                     tmp_path):
    from treeopt.model.simulation import step_lengths

    walks, lives = [], []
    for i, prompt in enumerate(PROMPTS[:3]):
        trace, _ = calibrate(base, trained, [prompt], tmp_path / f"{i}.npz",
                             config=CalibrateConfig(top_k=8, max_new_tokens=32))
        assert trace.head_kind == "mtp" and trace.heads == 4
        walk = step_lengths(tree, trace).tolist()
        live = generate(base, trained, tree, prompt, config=DecodeConfig(max_new_tokens=32))
        assert list(live.stats.accept_lengths[: len(walk)]) == walk
        walks += walk
        lives += list(live.stats.accept_lengths[: len(walk)])
    assert np.mean(walks) == np.mean(lives) > 1.5  # trained, it drafts: deeper nodes accepted


def test_a_sampled_trace_walks_exactly_as_live_sample_and_match(base, trained, tmp_path):
    """Calibrated on continuations sampled at T = 0.7, the trace's walk is live decoding's
    accepted lengths on the same streams, step by step (so E[L] agrees exactly)."""
    from treeopt.model.simulation import step_lengths

    cfg = CalibrateConfig(top_k=8, max_new_tokens=32, temperature=0.7, seed=5,
                          samples_per_prompt=2, batch_size=2)
    trace, _ = calibrate(base, trained, PROMPTS[:3], tmp_path / "s.npz", config=cfg)
    rows = [p for p in PROMPTS[:3] for _ in range(2)]
    live = decode(base, trained, TREE, rows, config=cfg.decoding(), streams=range(len(rows)))
    per_row, at = [], 0
    for _, steps in live.stats.runs:
        per_row.append(live.stats.accept_lengths[at: at + steps])
        at += steps
    walked, walks, lives = 0, [], []
    for j in range(len(rows)):
        walk = step_lengths(TREE, trace.sequences(j + 1)).tolist()[walked:]
        walked += len(walk)
        assert list(per_row[j][: len(walk)]) == walk, j
        walks += walk
        lives += list(per_row[j][: len(walk)])
    assert abs(np.mean(walks) / np.mean(lives) - 1) < 0.002 and np.mean(walks) > 1.2


def test_mtp_checkpoints_round_trip(base, trained, tmp_path):
    from treeopt.drafters.checkpoints import load_heads_for, save_heads

    save_heads(trained, tmp_path / "m")
    back = load_heads_for(base, tmp_path / "m")
    assert isinstance(back, MtpDrafter) and back.config == trained.config
    assert len(back.mtp) == 2
    seqs = greedy_continuations(base, PROMPTS[:1], max_new_tokens=10)
    with torch.inference_mode():
        a = rank_batch(base, trained, seqs, [4], top_k=8)
        b = rank_batch(base, back, seqs, [4], top_k=8)
    np.testing.assert_array_equal(a[0], b[0])


def test_the_modules_run_in_turn_and_share_the_base_head(base):
    """Depth k reads module k mod n: with two modules, depths 0 and 2 score alike and depth 1
    differently; the LM head and the embeddings are the base model's, frozen and not saved."""
    drafter = random_mtp(base, modules=2, seed=7)
    assert drafter.stage(0).module is drafter.stage(2).module is drafter.mtp[0]
    assert drafter.stage(1).module is drafter.mtp[1]
    g = torch.randn(3, D)
    assert torch.equal(drafter.stage(0).logits(g), drafter.stage(2).logits(g))
    assert not torch.equal(drafter.stage(0).logits(g), drafter.stage(1).logits(g))
    assert drafter.base_lm_head is base.lm_head and not base.lm_head.weight.requires_grad
    own = sorted({k.split(".", 2)[2] for k in drafter.state_dict() if k.startswith("mtp.")})
    assert own == ["block.down_proj.weight", "block.gate_proj.weight",
                   "block.input_layernorm.weight", "block.k_proj.weight", "block.o_proj.weight",
                   "block.output_norm.weight", "block.post_attention_layernorm.weight",
                   "block.q_proj.weight", "block.up_proj.weight", "block.v_proj.weight",
                   "eh_proj.weight", "enorm.weight", "hnorm.weight"]
    assert drafter.mtp[0].eh_proj.bias is None


def test_mtp_refuses_a_bad_shape_and_dynamic_trees_of_several_modules(base):
    with pytest.raises(TreeoptError, match="do not divide"):
        build_heads(mtp_config(attention_heads=3))
    with pytest.raises(TreeoptError, match="handoff_norm applies to MTP drafter only, not EAGLE"):
        HeadsConfig(kind="eagle", num_heads=2, hidden_size=D, vocab_size=V, share_lm_head=True,
                    handoff_norm=True)
    with pytest.raises(TreeoptError, match="share_lm_head"):
        HeadsConfig(kind="mtp", num_heads=2, hidden_size=D, vocab_size=V)
    two = random_mtp(base, modules=2, seed=0)
    with pytest.raises(TreeoptError, match="run one module, as SGLang's NEXTN does; this "
                                           "drafter has 2"):
        two.rank_dynamic(torch.zeros(1, 8, D), torch.zeros(1, 8, dtype=torch.long), topk=2,
                         steps=2)


# -- dynamic trees (SGLang's NEXTN: one module, EAGLE's top-k growth) ---------------------------

@pytest.fixture(scope="module")
def trained_one(base):
    """A one-module MTP drafter trained briefly, the normed state handed down (SGLang's
    reading of DeepSeek-V3's module)."""
    seqs = greedy_continuations(base, PROMPTS * 4, max_new_tokens=40)
    cfg = TrainConfig(kind="mtp", num_heads=4, steps=60, batch_size=8, seq_len=40, lr=3e-3)
    drafter = train_heads(base, seqs, cfg)[0]
    normed = build_heads(HeadsConfig(**{**drafter.config.to_dict(), "handoff_norm": True}),
                         lm_head=base.lm_head, embeddings=base.model.embed_tokens)
    normed.load_state_dict(drafter.state_dict())
    return normed.eval()


@pytest.mark.parametrize("topk,steps", [(1, 3), (3, 4)])
def test_the_dynamic_simulation_equals_live_drafting_at_every_position(base, trained_one, topk,
                                                                       steps):
    from test_dynamic import _live_accepted

    from treeopt.decoding.dynamic_rank_pass import simulate_dynamic
    from treeopt.model.dynamic_settings import DynamicSettings

    seqs = greedy_continuations(base, PROMPTS[:2], max_new_tokens=16)
    starts = [len(p) - 1 for p in PROMPTS[:2]]
    trace = simulate_dynamic(base, trained_one, seqs, starts, topk=topk, steps=steps,
                             batch_size=2, to_end=False)  # every depth's token in the text
    for s in (DynamicSettings(topk, steps, topk + 1),
              DynamicSettings(topk, steps, 1 + topk + (steps - 1) * topk * topk)):
        got, at = trace.accepted(s), 0
        for seq, start, n in zip(seqs, starts, trace.lengths, strict=True):
            want = [_live_accepted(base, trained_one, seq, start + i, s) for i in range(n)]
            assert got[at: at + n].tolist() == want, s.label
            at += n
    assert float(np.mean(trace.accepted(s))) > 1.5


def test_dynamic_decoding_with_mtp_is_lossless_greedy_and_sampled(base, trained_one):
    from treeopt.decoding.loop import Decoder
    from treeopt.model.dynamic_settings import DynamicSettings

    dec = Decoder(base, trained_one)
    for cfg in (DecodeConfig(max_new_tokens=20), SAMPLED):
        want = dec.decode(Tree(()), PROMPTS, config=cfg).tokens
        assert dec.decode(DynamicSettings(3, 4, 10), PROMPTS, config=cfg).tokens == want


def test_the_roofline_prices_the_norms_the_projection_and_every_modules_catch_up():
    """The MTP formula against EAGLE's on the same shape: more work (two input norms, the
    output norm, the other modules' catch-up), less the fc bias; exact on a toy machine."""
    from treeopt.roofline.draft import DraftSpec, draft_seconds
    from treeopt.roofline.hardware import Hardware

    hw = Hardware("toy", tflops_bf16=100.0, tflops_fp32=10.0, bandwidth_gbs=1000.0)
    one = draft_seconds(DraftSpec("mtp", num_heads=2, hidden_size=1024, vocab_size=32000), hw,
                        batch=1, expanded=[1, 2])
    eagle = draft_seconds(DraftSpec("eagle", num_heads=2, hidden_size=1024, vocab_size=32000),
                          hw, batch=1, expanded=[1, 2])
    two = draft_seconds(DraftSpec("mtp", num_heads=2, hidden_size=1024, vocab_size=32000,
                                  num_layers=2), hw, batch=1, expanded=[1, 2])
    # per depth (t = 2 tokens each): eh_proj 4.206592 µs, the layer 25.219072 + 0.024576, the
    # gather and the input norms 0.004096 + 0.016384, the output norm 0.008192, the head
    # 65.668096 (weight bytes over 1 TB/s)
    assert round(one * 1e6, 6) == round(2 * 95.147008, 6)
    assert round(eagle * 1e6, 6) == round(2 * 95.12448, 6)  # a bias, no norms
    # a second module catches up one entry per sequence: its weights read once more
    assert round((two - one) * 1e6, 6) == 29.415424


def test_the_cli_trains_calibrates_and_verifies_an_mtp_drafter(tiny_model_dir, prompts_file,
                                                              tmp_path):
    """train-heads --kind mtp with two modules, calibrate, grow, verify: lossless, and the
    heads directory records the modules and the depths."""
    import json

    from test_cli_models import run

    out = tmp_path / "mtp"
    proc = run("train-heads", "--model", tiny_model_dir, "--kind", "mtp", "--data", prompts_file,
               "--generate", "40", "--num-heads", "3", "--num-layers", "2", "--steps", "30",
               "--lr", "0.01", "--seq-len", "40", "--batch-size", "4", "--out", out)
    assert proc.returncode == 0, proc.stderr
    config = json.loads((out / "heads.json").read_text())["config"]
    assert (config["kind"], config["num_heads"], config["num_layers"]) == ("mtp", 3, 2)
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", out, "--prompts",
               prompts_file, "--max-new-tokens", "24", "--top-k", "64", "--out",
               tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    proc = run("grow", "--trace", tmp_path / "t.npz", "--max-nodes", "6", "--out",
               tmp_path / "g.json")
    assert proc.returncode == 0, proc.stderr
    proc = run("verify", "--model", tiny_model_dir, "--drafter", out, "--tree",
               tmp_path / "g.json", "--size", "4", "--prompts", prompts_file,
               "--max-new-tokens", "8")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs_match"] is True
