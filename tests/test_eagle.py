"""The EAGLE drafter: its teacher-forced rank trace (one pass per depth) equals a step-by-step
decoding reference, live tree decoding with it is lossless (batched, ragged), walking its trace
reproduces live decoding step by step, and training makes it draft."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402
from continuous import assert_each_prompt_as_alone  # noqa: E402

from treeopt import Tree, TreeoptError  # noqa: E402
from treeopt.decoding.calibrate import CalibrateConfig, calibrate  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, decode, generate  # noqa: E402
from treeopt.decoding.rank_pass import greedy_continuations, rank_batch  # noqa: E402
from treeopt.drafters.eagle import EagleDrafter  # noqa: E402
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.drafters.training import TrainConfig, train_heads  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig  # noqa: E402

V, D = 256, 64
PROMPTS = [[5, 17, 99, 3, 42], [7, 7, 8], [200, 100, 50, 25, 12, 6, 3], [9]]
TREE = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 1],
                          [0, 0, 0, 0]])


def eagle_config(**kw):
    return HeadsConfig(kind="eagle", num_heads=4, hidden_size=D, vocab_size=V,
                       share_lm_head=True, **kw)


@pytest.fixture(scope="module")
def base(peaked):
    """conftest's sharpened tiny Llama (vocabulary 256, width 64)."""
    return peaked[0]


def random_eagle_drafter(base, *, seed: int):
    """An untrained EAGLE drafter with random layers (kv heads grouped), for exactness."""
    torch.manual_seed(seed)
    drafter = build_heads(eagle_config(kv_heads=2, intermediate_size=96),
                          lm_head=base.lm_head, embeddings=base.model.embed_tokens)
    with torch.no_grad():
        for p in drafter.parameters():
            if p.requires_grad:
                p.normal_(0, 0.2)
    return drafter.eval()


def trained_eagle_drafter(base):
    """An EAGLE drafter trained briefly on the base model's own greedy continuations."""
    seqs = greedy_continuations(base, PROMPTS * 4, max_new_tokens=40)
    cfg = TrainConfig(kind="eagle", num_heads=4, steps=60, batch_size=8, seq_len=40, lr=3e-3)
    return train_heads(base, seqs, cfg)[0]


@pytest.fixture(scope="module")
def random_eagle(base):
    return random_eagle_drafter(base, seed=0)


@pytest.fixture(scope="module")
def trained_eagle(base):
    return trained_eagle_drafter(base)


def reference_ranks(base, drafter: EagleDrafter, sequence, start, top_k):
    """Decoding, one step at a time: the drafter runs over its entries with a plain causal
    forward — true entries up to t, then its own predicted features along the true path."""
    K = drafter.config.num_heads
    ids = torch.tensor([sequence])
    hidden = base(input_ids=ids, output_hidden_states=True).hidden_states[-1]

    def run(entries):  # entries [1, m, d] at positions 0 … m-1 → the last output
        x = entries
        pos = torch.arange(x.shape[1])[None]
        causal = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        for layer in drafter.layers:
            q, (k, v) = layer.qkv(x, pos)
            att = torch.nn.functional.scaled_dot_product_attention(
                q, layer.expand(k), layer.expand(v), attn_mask=causal)
            x = layer.finish(x, att)
        return x[:, -1]

    out = []
    for t in range(start, len(sequence) - 1 - K):
        entries = drafter.entries(ids[:, 1: t + 2], hidden[:, : t + 1])
        row = []
        for k in range(K):
            g = run(entries)
            logits = drafter.logits(g)[0]
            order = torch.sort(logits, descending=True, stable=True).indices.tolist()
            rank = order.index(sequence[t + 2 + k])
            row.append(rank if rank < top_k else -1)
            nxt = drafter.entries(ids[:, t + 2 + k: t + 3 + k], g[:, None])
            entries = torch.cat([entries, nxt], dim=1)
        out.append(row)
    return np.array(out, dtype=np.int16).reshape(-1, K)


def test_rank_trace_in_one_pass_per_depth_equals_step_by_step_decoding(base, random_eagle):
    seqs = greedy_continuations(base, PROMPTS[:2], max_new_tokens=12)
    starts = [len(p) - 1 for p in PROMPTS[:2]]
    with torch.inference_mode():
        got = rank_batch(base, random_eagle, seqs, starts, top_k=V)
        for s, st, g in zip(seqs, starts, got, strict=True):
            np.testing.assert_array_equal(g, reference_ranks(base, random_eagle, s, st, V))


@pytest.mark.parametrize("tree", [Tree.chain(4), TREE, Tree.chain(1)], ids=["chain", "tree", "one"])
def test_greedy_tree_decoding_with_eagle_is_lossless(base, random_eagle, trained_eagle, tree):
    cfg = DecodeConfig(max_new_tokens=24)
    want = decode(base, None, Tree(()), PROMPTS, config=cfg).tokens
    for drafter in (random_eagle, trained_eagle):
        assert decode(base, drafter, tree, PROMPTS, config=cfg).tokens == want


def test_every_row_of_a_batch_equals_that_row_decoded_alone(base, trained_eagle):
    cfg = DecodeConfig(max_new_tokens=20)
    batch = decode(base, trained_eagle, TREE, PROMPTS, config=cfg)
    for i, prompt in enumerate(PROMPTS):
        assert batch.tokens[i] == generate(base, trained_eagle, TREE, prompt, config=cfg).tokens


@pytest.mark.parametrize("cfg", [DecodeConfig(max_new_tokens=20),
                                 DecodeConfig(max_new_tokens=20, mode="sample", temperature=0.7)],
                         ids=["greedy", "sampled"])
def test_continuous_batching_decodes_each_prompt_as_alone(base, trained_eagle, cfg):
    assert_each_prompt_as_alone(base, trained_eagle, TREE, PROMPTS, cfg, batch=2)

def test_the_trace_walk_reproduces_live_decoding_step_by_step(base, trained_eagle, tmp_path):
    from treeopt.model.simulation import step_lengths

    walks = []
    for i, prompt in enumerate(PROMPTS[:3]):
        trace, _ = calibrate(base, trained_eagle, [prompt], tmp_path / f"{i}.npz",
                             config=CalibrateConfig(top_k=8, max_new_tokens=32))
        assert trace.head_kind == "eagle" and trace.heads == 4
        walk = step_lengths(TREE, trace).tolist()
        live = generate(base, trained_eagle, TREE, prompt, config=DecodeConfig(max_new_tokens=32))
        assert list(live.stats.accept_lengths[: len(walk)]) == walk
        walks += walk
    assert np.mean(walks) > 1.5  # trained, it drafts: deeper nodes are accepted


def test_eagle_checkpoints_round_trip(base, trained_eagle, tmp_path):
    from treeopt.drafters.checkpoints import load_heads_for, save_heads

    save_heads(trained_eagle, tmp_path / "e")
    back = load_heads_for(base, tmp_path / "e")
    assert isinstance(back, EagleDrafter) and back.config == trained_eagle.config
    seqs = greedy_continuations(base, PROMPTS[:1], max_new_tokens=10)
    with torch.inference_mode():
        a = rank_batch(base, trained_eagle, seqs, [4], top_k=8)
        b = rank_batch(base, back, seqs, [4], top_k=8)
    np.testing.assert_array_equal(a[0], b[0])


def test_eagle_needs_the_base_lm_head_and_a_divisible_shape():
    with pytest.raises(TreeoptError, match="share_lm_head"):
        HeadsConfig(kind="eagle", num_heads=2, hidden_size=D, vocab_size=V)
    with pytest.raises(TreeoptError, match="do not divide"):
        build_heads(eagle_config(attention_heads=3))


def public_layout(drafter: EagleDrafter, directory, *, fmt="safetensors", drop=(), base=None):
    """Write ``drafter`` in EAGLE's published layout: a Llama config.json and the weights under
    their public names (layer 0 with an unused input norm, and the base's embeddings)."""
    import json

    from safetensors.torch import save_file

    cfg = drafter.config
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "bias": cfg.bias,
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size or 2 * D,
        "num_attention_heads": cfg.attention_heads,
        "num_key_value_heads": cfg.kv_heads or cfg.attention_heads, "num_hidden_layers": 1,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
        "vocab_size": cfg.vocab_size}))
    names = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj",
             "v_proj": "self_attn.v_proj", "o_proj": "self_attn.o_proj",
             "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj", "down_proj": "mlp.down_proj",
             "post_attention_layernorm": "post_attention_layernorm"}
    state = {"fc.weight": drafter.fc.weight, "fc.bias": drafter.fc.bias,
             "layers.0.input_layernorm.weight": torch.ones(cfg.hidden_size),
             "embed_tokens.weight": drafter.base_embeddings.weight}
    for ours, theirs in names.items():
        state[f"layers.0.{theirs}.weight"] = getattr(drafter.layers[0], ours).weight
    state = {k: v.detach().clone().contiguous() for k, v in state.items() if k not in drop}
    if fmt == "safetensors":
        save_file(state, str(directory / "model.safetensors"))
    else:
        torch.save(state, directory / "pytorch_model.bin")
    return directory


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_an_eagle_checkpoint_in_the_public_layout_imports_exactly(base, trained_eagle, tmp_path,
                                                                   fmt):
    from treeopt.drafters.checkpoints import load_heads_for

    d = public_layout(trained_eagle, tmp_path / "eagle", fmt=fmt)
    back = load_heads_for(base, d, depth=4)
    assert isinstance(back, EagleDrafter) and back.config.num_heads == 4
    seqs = greedy_continuations(base, PROMPTS[:2], max_new_tokens=10)
    with torch.inference_mode():
        a = rank_batch(base, trained_eagle, seqs, [4, 2], top_k=8)
        b = rank_batch(base, back, seqs, [4, 2], top_k=8)
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def test_an_eagle_checkpoint_that_does_not_fit_is_refused(base, trained_eagle, tmp_path):
    from treeopt.drafters.checkpoints import load_heads_for

    small = tiny_llama(vocab=V, hidden=32, seed=1)
    d = public_layout(trained_eagle, tmp_path / "e1")
    with pytest.raises(TreeoptError, match=f"{d}: .*hidden 64.*lm_head of shape \\[256, 32\\]"):
        load_heads_for(small, d)
    d = public_layout(trained_eagle, tmp_path / "e2", drop=("layers.0.mlp.up_proj.weight",))
    with pytest.raises(TreeoptError, match=r"model.safetensors: weights do not match.*up_proj"):
        load_heads_for(base, d)


def test_the_cli_trains_calibrates_and_exports_an_eagle_tree_with_its_checkpoint(
        tiny_model_dir, prompts_file, tmp_path):
    """train-heads --kind eagle, calibrate, grow, then export: the EAGLE formats get the
    drafter's directory and depth from the growth, without flags."""
    import json

    from test_cli_models import run

    eagle = tmp_path / "eagle"
    proc = run("train-heads", "--model", tiny_model_dir, "--kind", "eagle", "--data",
               prompts_file, "--generate", "40", "--num-heads", "3", "--steps", "40",
               "--lr", "0.01", "--seq-len", "40", "--batch-size", "4", "--out", eagle)
    assert proc.returncode == 0, proc.stderr
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", eagle, "--prompts",
               prompts_file, "--max-new-tokens", "24", "--top-k", "64", "--out",
               tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    proc = run("grow", "--trace", tmp_path / "t.npz", "--max-nodes", "6", "--constraint",
               "contiguous", "--out", tmp_path / "g.json")
    assert proc.returncode == 0, proc.stderr
    proc = run("export", "--tree", tmp_path / "g.json", "--size", "4", "--format", "trtllm-yaml")
    assert proc.returncode == 0, proc.stderr
    assert "decoding_type: Eagle" in proc.stdout
    assert f"speculative_model: {json.dumps(str(eagle))}" in proc.stdout
    proc = run("grow", "--trace", tmp_path / "t.npz", "--max-nodes", "6", "--constraint",
               "uniform", "--out", tmp_path / "u.json")
    assert proc.returncode == 0, proc.stderr
    proc = run("export", "--tree", tmp_path / "u.json", "--size", "4", "--format", "vllm")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["method"], doc["model"]) == ("eagle", str(eagle))
    assert 1 <= doc["num_speculative_tokens"] <= 4
    proc = run("verify", "--model", tiny_model_dir, "--drafter", eagle, "--tree",
               tmp_path / "g.json", "--size", "4", "--prompts", prompts_file,
               "--max-new-tokens", "8")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs_match"] is True


def test_a_stopped_row_queues_nothing_and_its_cache_stays_put(random_eagle):
    """A row that has stopped (0 accepted) while others run must not grow its cache: over a long
    run it would pass the capacity the loop allocated for its own budget."""
    from treeopt.decoding.plan import tree_plan

    plan = tree_plan(TREE, "cpu")
    state = random_eagle.start(batch=2, capacity=32)
    hidden, tokens = torch.randn(2, 3, D), torch.randint(0, V, (2, 3))
    index, roots = torch.arange(3).expand(2, 3), torch.tensor([1, 2])
    with torch.inference_mode():
        random_eagle.advance(hidden, tokens, index, torch.tensor([3, 3]), roots, state)
        random_eagle.draft(plan, hidden[:, :1], roots, state)
        assert state.lens == [3, 3]
        for _ in range(3):
            random_eagle.advance(hidden, tokens, index, torch.tensor([0, 2]), roots, state)
            random_eagle.draft(plan, hidden[:, :1], roots, state)
    assert state.lens == [3, 9]


def test_bad_drafters_are_refused_in_one_line_naming_the_file(tiny_model_dir, prompts_file,
                                                              tmp_path):
    """An EAGLE checkpoint of another width, one missing a weight, and a tree deeper than the
    drafter drafts: exit status 2, one line, the file named."""
    from conftest import tiny_tokenizer
    from test_cli_models import assert_user_error, run
    from transformers import AutoModelForCausalLM

    from treeopt.drafters.checkpoints import save_heads

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, local_files_only=True)
    vocab = model.config.vocab_size
    drafter = build_heads(HeadsConfig(kind="eagle", num_heads=4, hidden_size=D, vocab_size=vocab,
                                      share_lm_head=True),
                          lm_head=model.lm_head, embeddings=model.model.embed_tokens)
    narrow = tmp_path / "narrow-base"  # the same tokenizer, half the width
    tiny_llama(vocab=vocab, hidden=32, seed=1).save_pretrained(narrow)
    tiny_tokenizer(vocab).save_pretrained(narrow)
    wide = public_layout(drafter, tmp_path / "wide")
    proc = run("calibrate", "--model", narrow, "--drafter", wide, "--prompts", prompts_file,
               "--out", tmp_path / "t.npz")
    assert_user_error(proc, str(wide), "does not match")
    holed = public_layout(drafter, tmp_path / "holed", drop=("layers.0.mlp.up_proj.weight",))
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", holed,
               "--prompts", prompts_file, "--out", tmp_path / "t2.npz")
    assert_user_error(proc, str(holed), "up_proj")
    save_heads(drafter, tmp_path / "ok")
    (tmp_path / "deep.json").write_text("[[0], [0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 0]]")
    proc = run("verify", "--model", tiny_model_dir, "--drafter", tmp_path / "ok",
               "--tree", tmp_path / "deep.json", "--prompts", prompts_file)
    assert_user_error(proc, str(tmp_path / "deep.json"), "depth 5", "only 4")
