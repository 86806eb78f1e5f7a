"""Importing MTP weights in the published layouts (DeepSeek-V3's extra decoder layer, Qwen3-Next's
``mtp.*``): tiny state dicts in each layout, written here as safetensors, import exactly — the
drafter's logits at every depth equal a hand-written forward of the published module's math on
those weights — and blocks treeopt cannot run are refused naming the key."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from treeopt import TreeoptError  # noqa: E402
from treeopt.drafters.mtp_layouts import import_mtp, map_mtp_weights  # noqa: E402

V, D, HEADS, KV_HEADS, INNER, EPS = 256, 64, 4, 2, 96, 1e-6
L = 2  # the tiny base model's layers: DeepSeek-V3's MTP layers are numbered from here
SEQ = [5, 17, 99, 3, 42, 8, 8, 130, 77, 1, 64, 200]


@pytest.fixture(scope="module")
def base():
    return tiny_llama(vocab=V, hidden=D, layers=L, seed=5)


def block_weights(gen: torch.Generator, *, zero_centred: bool) -> dict[str, torch.Tensor]:
    """A Llama-shaped block's weights under their published names."""
    hd = D // HEADS

    def r(*shape):
        return 0.15 * torch.randn(*shape, generator=gen)

    def norm():
        return r(D) if zero_centred else 1 + r(D)

    return {"self_attn.q_proj.weight": r(HEADS * hd, D),
            "self_attn.k_proj.weight": r(KV_HEADS * hd, D),
            "self_attn.v_proj.weight": r(KV_HEADS * hd, D),
            "self_attn.o_proj.weight": r(D, HEADS * hd),
            "mlp.gate_proj.weight": r(INNER, D), "mlp.up_proj.weight": r(INNER, D),
            "mlp.down_proj.weight": r(D, INNER),
            "input_layernorm.weight": norm(), "post_attention_layernorm.weight": norm()}


def deepseek_state(base, modules: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """DeepSeek-V3's layout: module i is ``model.layers.{L+i}`` with its own norms, projection,
    shared head and copies of the base's embeddings and LM head."""
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for i in range(modules):
        p = f"model.layers.{L + i}."
        state.update({p + k: v for k, v in block_weights(gen, zero_centred=False).items()})
        state[p + "enorm.weight"] = 1 + 0.15 * torch.randn(D, generator=gen)
        state[p + "hnorm.weight"] = 1 + 0.15 * torch.randn(D, generator=gen)
        state[p + "eh_proj.weight"] = 0.15 * torch.randn(D, 2 * D, generator=gen)
        state[p + "shared_head.norm.weight"] = 1 + 0.15 * torch.randn(D, generator=gen)
        state[p + "shared_head.head.weight"] = base.lm_head.weight.detach().clone()
        state[p + "embed_tokens.weight"] = base.model.embed_tokens.weight.detach().clone()
    return state


def qwen3_next_state(modules: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Qwen3-Next's layout: one ``mtp.fc`` and zero-centred norms shared, blocks per module."""
    gen = torch.Generator().manual_seed(seed)
    state = {"mtp.fc.weight": 0.15 * torch.randn(D, 2 * D, generator=gen),
             "mtp.pre_fc_norm_embedding.weight": 0.15 * torch.randn(D, generator=gen),
             "mtp.pre_fc_norm_hidden.weight": 0.15 * torch.randn(D, generator=gen),
             "mtp.norm.weight": 0.15 * torch.randn(D, generator=gen)}
    for i in range(modules):
        state.update({f"mtp.layers.{i}.{k}": v
                      for k, v in block_weights(gen, zero_centred=True).items()})
    return state


# -- the published module's math, written out ---------------------------------------------------

def rms(x, w, *, zero_centred: bool):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return y * (1 + w) if zero_centred else y * w


def rotate(x, positions):
    """Llama's RoPE (rotate-half, base 10000) of ``x`` ``[h, m, hd]`` at ``positions``."""
    half = x.shape[-1] // 2
    freq = 10000.0 ** (-torch.arange(half, dtype=torch.float32) / half)
    ang = torch.tensor(positions, dtype=torch.float32)[:, None] * freq
    cos, sin = ang.cos(), ang.sin()
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


def block(w, x, positions, *, zero_centred: bool):
    """A decoder layer over entries ``x`` ``[m, D]`` (causal): its output ``[m, D]``."""
    hd, m = D // HEADS, x.shape[0]
    y = rms(x, w["input_layernorm.weight"], zero_centred=zero_centred)
    q = (y @ w["self_attn.q_proj.weight"].T).view(m, HEADS, hd).transpose(0, 1)
    k = (y @ w["self_attn.k_proj.weight"].T).view(m, KV_HEADS, hd).transpose(0, 1)
    v = (y @ w["self_attn.v_proj.weight"].T).view(m, KV_HEADS, hd).transpose(0, 1)
    q, k = rotate(q, positions), rotate(k, positions)
    k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=0) for t in (k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(hd)
    scores = scores.masked_fill(~torch.ones(m, m, dtype=torch.bool).tril(), float("-inf"))
    att = (scores.softmax(-1) @ v).transpose(0, 1).reshape(m, D)
    x = x + att @ w["self_attn.o_proj.weight"].T
    y = rms(x, w["post_attention_layernorm.weight"], zero_centred=zero_centred)
    gate = y @ w["mlp.gate_proj.weight"].T
    return x + (torch.nn.functional.silu(gate) * (y @ w["mlp.up_proj.weight"].T)) @ \
        w["mlp.down_proj.weight"].T


def published_logits(state, layout, modules, emb, lm_head, hidden, t, depths, *, first=L,
                     normed_handoff=None):
    """Logits of depths 0 … depths-1 at position t, the published module run as the engines
    run it: depth k through module k mod n, over that module's true entries ``(x_{j+1}, h_j)``,
    j ≤ t, and the chain's own entries it ran; the normed state handed down where
    ``normed_handoff`` (default: Qwen3-Next's layout; SGLang's reading of DeepSeek-V3's)."""
    def module(i):
        if layout == "deepseek-v3":
            p = f"model.layers.{first + i}."
            own = {k[len(p):]: v for k, v in state.items() if k.startswith(p)}
            return (own, own["enorm.weight"], own["hnorm.weight"], own["eh_proj.weight"],
                    own["shared_head.norm.weight"], False)
        p = f"mtp.layers.{i}."
        own = {k[len(p):]: v for k, v in state.items() if k.startswith(p)}
        return (own, state["mtp.pre_fc_norm_embedding.weight"],
                state["mtp.pre_fc_norm_hidden.weight"], state["mtp.fc.weight"],
                state["mtp.norm.weight"], True)

    def entry(i, token, h):
        _, en, hn, proj, _, zc = module(i)
        return torch.cat([rms(emb[token], en, zero_centred=zc),
                          rms(h, hn, zero_centred=zc)]) @ proj.T

    def run(i, entries, positions):
        own, _, _, _, out_norm, zc = module(i)
        g = block(own, torch.stack(entries), positions, zero_centred=zc)[-1]
        normed = rms(g, out_norm, zero_centred=zc)
        handed = normed if (zc if normed_handoff is None else normed_handoff) else g
        return handed, normed @ lm_head.T  # handed down, logits

    true = {i: [entry(i, SEQ[j + 1], hidden[j]) for j in range(t + 1)]
            for i in range(min(modules, depths))}
    chain: dict[int, list] = {i: [] for i in true}
    g, logits = run(0, true[0], list(range(t + 1)))
    out = [logits]
    for k in range(1, depths):
        i = k % modules
        chain[i].append((entry(i, SEQ[t + 1 + k], g), t + k))
        g, logits = run(i, true[i] + [e for e, _ in chain[i]],
                        list(range(t + 1)) + [p for _, p in chain[i]])
        out.append(logits)
    return out


@pytest.mark.parametrize("layout,modules", [("deepseek-v3", 1), ("deepseek-v3", 2),
                                            ("qwen3-next", 1), ("qwen3-next", 2)])
def test_a_published_layout_imports_exactly(base, tmp_path, layout, modules):
    state = deepseek_state(base, modules) if layout == "deepseek-v3" else qwen3_next_state(modules)
    save_file(state, str(tmp_path / "mtp.safetensors"))
    drafter = import_mtp(base, tmp_path / "mtp.safetensors", depth=3)
    assert (drafter.config.num_layers, drafter.config.num_heads) == (modules, 3)
    assert drafter.config.handoff_norm == (layout == "qwen3-next")
    ids = torch.tensor([SEQ])
    with torch.inference_mode():
        hidden = base(input_ids=ids, output_hidden_states=True).hidden_states[-1]
        chains = drafter.chains(hidden, ids, 3)  # the head's inputs [1, n, D] per depth
        emb, head = base.model.embed_tokens.weight, base.lm_head.weight
        for t in (0, 4, len(SEQ) - 5):
            want = published_logits(state, layout, modules, emb, head, hidden[0], t, 3)
            for k in range(3):
                got = drafter.logits(chains[k][0, t])
                torch.testing.assert_close(got, want[k], rtol=1e-5, atol=1e-5)
                assert torch.equal(got.argsort(descending=True)[:5],
                                   want[k].argsort(descending=True)[:5])


def test_deepseek_weights_read_as_sglang_reads_them(base, tmp_path):
    """SGLang's NEXTN: one module from its own checkpoint at model.layers.0, the normed state
    handed down (``first_layer=0``, ``handoff_norm=True``): exact against the published math
    read so, and different from vLLM's reading of the same weights."""
    state = {k.replace(f"model.layers.{L}.", "model.layers.0."): v
             for k, v in deepseek_state(base, 1, seed=3).items()}
    save_file(state, str(tmp_path / "nextn.safetensors"))
    sglang = import_mtp(base, tmp_path / "nextn.safetensors", depth=3, first_layer=0,
                        handoff_norm=True)
    vllm = import_mtp(base, tmp_path / "nextn.safetensors", depth=3, first_layer=0)
    assert sglang.config.handoff_norm and not vllm.config.handoff_norm
    ids = torch.tensor([SEQ])
    with torch.inference_mode():
        hidden = base(input_ids=ids, output_hidden_states=True).hidden_states[-1]
        chains, other = sglang.chains(hidden, ids, 3), vllm.chains(hidden, ids, 3)
        want = published_logits(state, "deepseek-v3", 1, base.model.embed_tokens.weight,
                                base.lm_head.weight, hidden[0], 4, 3, first=0,
                                normed_handoff=True)
        for k in range(3):
            torch.testing.assert_close(sglang.logits(chains[k][0, 4]), want[k], rtol=1e-5,
                                       atol=1e-5)
        torch.testing.assert_close(chains[0], other[0])  # depth 0 reads the base's state
        assert not torch.allclose(chains[1], other[1], atol=1e-3)


def test_a_sharded_checkpoint_opens_only_the_shards_holding_the_mtp_layer(base, tmp_path):
    """A checkpoint directory with an index: the MTP layer's shard is read; a shard without
    MTP keys is never opened (here it is not even a safetensors file)."""
    state = deepseek_state(base, 1)
    save_file(state, str(tmp_path / "model-00002-of-00002.safetensors"))
    (tmp_path / "model-00001-of-00002.safetensors").write_text("not read")
    weight_map = {k: "model-00002-of-00002.safetensors" for k in state}
    weight_map["model.layers.0.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors"
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    drafter = import_mtp(base, tmp_path)
    assert drafter.config.num_layers == drafter.config.num_heads == 1


@pytest.mark.parametrize("key,message", [
    ("model.layers.2.self_attn.kv_a_proj_with_mqa.weight", "multi-head latent attention"),
    ("model.layers.2.mlp.experts.0.up_proj.weight", "mixture-of-experts"),
    ("model.layers.2.self_attn.q_norm.weight", "query/key norms"),
    ("model.layers.2.rotary.inv_freq", "unexpected key 'model.layers.2.rotary.inv_freq'"),
])
def test_a_block_treeopt_cannot_run_is_refused_naming_the_key(base, key, message):
    state = {**deepseek_state(base, 1), key: torch.zeros(4)}
    with pytest.raises(TreeoptError, match=f"^ckpt: .*{message}"):
        map_mtp_weights(state, first_layer=L, source="ckpt")


def test_refusals_name_the_file_and_the_problem(base, tmp_path):
    path = tmp_path / "m.safetensors"
    save_file({"model.layers.0.mlp.up_proj.weight": torch.zeros(2, 2)}, str(path))
    with pytest.raises(TreeoptError, match=f"{path}: no MTP weights .*model.layers.2.eh_proj"):
        import_mtp(base, path)
    state = deepseek_state(base, 1)
    state["model.layers.2.embed_tokens.weight"] = state["model.layers.2.embed_tokens.weight"] + 1
    save_file(state, str(path))
    with pytest.raises(TreeoptError, match="copy of the base model's embeddings differs"):
        import_mtp(base, path)
    gapped = {k.replace("model.layers.2.", "model.layers.3."): v
              for k, v in deepseek_state(base, 1).items()}
    with pytest.raises(TreeoptError, match=r"numbered \[1\]; expected 0 … 0"):
        map_mtp_weights(gapped, first_layer=L, source="x")
    state = qwen3_next_state(1)
    del state["mtp.layers.0.mlp.up_proj.weight"]
    save_file(state, str(path))
    with pytest.raises(TreeoptError, match="weights do not match.*up_proj"):
        import_mtp(base, path)
    path.write_bytes(b"\x00" * 3)
    with pytest.raises(TreeoptError, match="unreadable safetensors file"):
        import_mtp(base, path)


def test_an_imported_drafter_decodes_losslessly(base, tmp_path):
    from treeopt import Tree
    from treeopt.decoding.loop import DecodeConfig, decode

    save_file(qwen3_next_state(2), str(tmp_path / "q.safetensors"))
    drafter = import_mtp(base, tmp_path / "q.safetensors", depth=4)
    cfg = DecodeConfig(max_new_tokens=16)
    prompts = [SEQ[:5], SEQ[3:6]]
    want = decode(base, None, Tree(()), prompts, config=cfg).tokens
    tree = Tree.from_choices([[0], [1], [0, 0], [0, 0, 0], [0, 0, 0, 0]])
    assert decode(base, drafter, tree, prompts, config=cfg).tokens == want
