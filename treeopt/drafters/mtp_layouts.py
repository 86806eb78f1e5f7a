"""The published layouts of MTP weights, mapped onto treeopt's MTP drafter
(:mod:`treeopt.drafters.mtp`) for the base model they ship with.

- **DeepSeek-V3** (and GLM-4.5, which reuses it: ``Glm4MoeMTP``,
  ``vllm/model_executor/models/glm4_moe_mtp.py`` at 028aedf6): module i is the extra decoder layer
  ``model.layers.{L+i}`` (L = ``num_hidden_layers``) holding ``enorm``, ``hnorm``, ``eh_proj``,
  ``shared_head.norm``, ``shared_head.head`` and ``embed_tokens`` (copies of the base model's LM
  head and embeddings) beside the block's own keys (``self_attn.*``, ``mlp.*``,
  ``input_layernorm``, ``post_attention_layernorm``). Read from vLLM's
  ``DeepSeekMTP._rewrite_spec_layer_name`` (``vllm/model_executor/models/deepseek_mtp.py`` at
  03356f8c): ``embed_tokens`` and ``shared_head`` are the module's, every other key the block's.
- **Qwen3-Next**: ``mtp.fc`` (2h → h, no bias), ``mtp.pre_fc_norm_embedding``,
  ``mtp.pre_fc_norm_hidden`` and ``mtp.norm``, shared by every module, and the blocks
  ``mtp.layers.{i}.*``; the normed output is handed to the next depth (``handoff_norm``). Its
  RMS norms scale by ``1 + weight`` (``Qwen3NextRMSNorm``, transformers 5.23
  ``models/qwen3_next/modeling_qwen3_next.py``), so their weights are imported plus one.
  Read from ``Qwen3NextMultiTokenPredictor`` (``vllm/model_executor/models/qwen3_next_mtp.py``
  at 055e47c2).

The engines read DeepSeek-V3's weights two ways. vLLM hands the block's output down and applies
``shared_head.norm`` only before the LM head; SGLang's NEXTN (``DeepseekModelNextN.forward``,
``python/sglang/srt/models/deepseek_nextn.py`` at 0114f9c9) returns the normed state, which its
EAGLE loop hands to the next depth — ``handoff_norm=True`` imports it so. SGLang also loads one
module from a checkpoint of its own at ``model.layers.0`` (``first_layer=0``).

treeopt's block is a Llama decoder layer (q/k/v/o projections, RoPE, a SwiGLU MLP): a block
with multi-head latent attention, a mixture-of-experts MLP, query/key norms or a gated
attention output (DeepSeek-V3's and Qwen3-Next's own) is refused with the key that shows it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from treeopt.drafters.checkpoints import _load_state
from treeopt.drafters.heads import build_heads
from treeopt.errors import TreeoptError
from treeopt.registry.drafter_configs import HeadsConfig

if TYPE_CHECKING:
    from treeopt.drafters.mtp import MtpDrafter

_BLOCK_KEYS = {  # the block's keys (after the module's prefix) → treeopt's, under ``block.``
    **{f"self_attn.{p}.weight": f"{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "o_proj")},
    **{f"mlp.{p}.weight": f"{p}.weight" for p in ("gate_proj", "up_proj", "down_proj")},
    "input_layernorm.weight": "input_layernorm.weight",
    "post_attention_layernorm.weight": "post_attention_layernorm.weight",
}
_UNSUPPORTED = (  # what a block key shows that treeopt's Llama block has not
    (re.compile(r"self_attn\.(q_a_proj|q_b_proj|kv_a_proj_with_mqa|kv_b_proj|q_a_layernorm|"
                r"kv_a_layernorm)\."), "multi-head latent attention (MLA)"),
    (re.compile(r"mlp\.(experts|gate|shared_experts?|shared_expert_gate)\."),
     "a mixture-of-experts MLP"),
    (re.compile(r"self_attn\.[qk]_norm\."), "query/key norms"),
)
_DEEPSEEK_OWN = {"enorm.weight": "enorm.weight", "hnorm.weight": "hnorm.weight",
                 "eh_proj.weight": "eh_proj.weight",
                 "shared_head.norm.weight": "block.output_norm.weight"}
_QWEN_SHARED = {"mtp.fc.weight": "eh_proj.weight",
                "mtp.pre_fc_norm_embedding.weight": "enorm.weight",
                "mtp.pre_fc_norm_hidden.weight": "hnorm.weight",
                "mtp.norm.weight": "block.output_norm.weight"}
_BASE_COPIES = {"embed_tokens.weight": "embeddings", "shared_head.head.weight": "lm_head"}


@dataclass(frozen=True)
class MtpWeights:
    """MTP weights under treeopt's names (``mtp.{i}.…``), from a published layout."""

    layout: str  # "deepseek-v3" or "qwen3-next"
    modules: int  # num_nextn_predict_layers
    state: dict[str, torch.Tensor]
    handoff_norm: bool  # the normed output is handed down (Qwen3-Next)
    copies: dict[str, torch.Tensor]  # the base model's tensors the layout repeats, by role


def is_mtp_key(key: str, first_layer: int) -> bool:
    """Whether ``key`` belongs to the MTP modules, DeepSeek-V3's numbered from ``first_layer``
    (the base model's ``num_hidden_layers``).

    >>> is_mtp_key("model.layers.61.eh_proj.weight", 61), is_mtp_key("model.layers.60.x", 61)
    (True, False)
    >>> is_mtp_key("mtp.fc.weight", 48)
    True
    """
    m = re.match(r"model\.layers\.(\d+)\.", key)
    return key.startswith("mtp.") or (m is not None and int(m[1]) >= first_layer)


def map_mtp_weights(state: Mapping[str, torch.Tensor], *, first_layer: int,
                    source: str) -> MtpWeights:
    """``state``'s MTP weights (either layout; other keys are ignored) under treeopt's names.

    >>> w = map_mtp_weights({"mtp.fc.weight": torch.zeros(2, 4),
    ...                      "mtp.norm.weight": torch.zeros(2)}, first_layer=1, source="x")
    >>> w.layout, w.modules, sorted(w.state), w.state["mtp.0.block.output_norm.weight"].tolist()
    ('qwen3-next', 1, ['mtp.0.block.output_norm.weight', 'mtp.0.eh_proj.weight'], [1.0, 1.0])
    """
    keys = [k for k in state if is_mtp_key(k, first_layer)]
    if any(k.startswith("mtp.") for k in keys):
        return _qwen3_next(state, [k for k in keys if k.startswith("mtp.")], source)
    if keys:
        return _deepseek_v3(state, keys, first_layer, source)
    raise TreeoptError(f"{source}: no MTP weights (DeepSeek-V3's model.layers."
                       f"{first_layer}.eh_proj.weight or Qwen3-Next's mtp.fc.weight)")


def _deepseek_v3(state: Mapping[str, torch.Tensor], keys: list[str], first: int,
                 source: str) -> MtpWeights:
    out: dict[str, torch.Tensor] = {}
    copies: dict[str, torch.Tensor] = {}
    layers = set()
    for key in keys:
        m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)", key)
        if m is None:
            raise TreeoptError(f"{source}: unexpected key {key!r} in the MTP weights")
        i, rest = int(m[1]) - first, m[2]
        layers.add(i)
        if rest in _DEEPSEEK_OWN:
            out[f"mtp.{i}.{_DEEPSEEK_OWN[rest]}"] = state[key]
        elif rest in _BASE_COPIES:
            copies.setdefault(_BASE_COPIES[rest], state[key])
        else:
            out[f"mtp.{i}.block.{_block_key(rest, key, source)}"] = state[key]
    _contiguous(layers, source, f"model.layers.{first}")
    return MtpWeights("deepseek-v3", len(layers), out, False, copies)


def _qwen3_next(state: Mapping[str, torch.Tensor], keys: list[str], source: str) -> MtpWeights:
    blocks: dict[int, dict[str, torch.Tensor]] = {}
    shared: dict[str, torch.Tensor] = {}
    for key in keys:
        m = re.fullmatch(r"mtp\.layers\.(\d+)\.(.+)", key)
        if key in _QWEN_SHARED:
            shared[_QWEN_SHARED[key]] = _plus_one(key, state[key])
        elif m is not None:
            blocks.setdefault(int(m[1]), {})[_block_key(m[2], key, source)] = _plus_one(
                m[2], state[key])
        else:
            raise TreeoptError(f"{source}: unexpected key {key!r} in the MTP weights")
    _contiguous(set(blocks) or {0}, source, "mtp.layers")
    out = {f"mtp.{i}.block.{k}": v for i, block in blocks.items() for k, v in block.items()}
    out.update({f"mtp.{i}.{k}": v for i in (set(blocks) or {0}) for k, v in shared.items()})
    return MtpWeights("qwen3-next", len(blocks) or 1, out, True, {})


def _plus_one(key: str, value: torch.Tensor) -> torch.Tensor:
    """A Qwen3-Next norm's weight as a plain RMS norm's (it scales by ``1 + weight``)."""
    return value.float() + 1.0 if re.search(r"norm[^.]*\.weight$", key) else value


def _block_key(rest: str, key: str, source: str) -> str:
    """treeopt's name of a block key, or a refusal naming what the block has that treeopt's
    Llama block has not."""
    if rest in _BLOCK_KEYS:
        return _BLOCK_KEYS[rest]
    for pattern, what in _UNSUPPORTED:
        if pattern.match(rest):
            raise TreeoptError(f"{source}: {key} shows {what}; treeopt's MTP block is a Llama "
                               f"decoder layer (q/k/v/o projections, a SwiGLU MLP)")
    raise TreeoptError(f"{source}: unexpected key {key!r} in the MTP weights")


def _contiguous(indices: set[int], source: str, where: str) -> None:
    if sorted(indices) != list(range(len(indices))):
        raise TreeoptError(f"{source}: the MTP modules under {where}… are numbered "
                           f"{sorted(indices)}; expected 0 … {len(indices) - 1} from there")


def read_mtp_tensors(path: str | os.PathLike[str], first_layer: int,
                     ) -> dict[str, torch.Tensor]:
    """The MTP tensors of a safetensors file, or of a directory of them (its
    ``model.safetensors.index.json`` names the shards to open), read without unpickling and
    only the MTP keys."""
    from safetensors import SafetensorError, safe_open

    p = Path(path)
    if p.is_dir():
        index = p / "model.safetensors.index.json"
        if index.exists():
            weight_map = _weight_map(index)
            files = sorted({p / f for k, f in weight_map.items() if is_mtp_key(k, first_layer)})
        else:
            files = sorted(p.glob("*.safetensors"))
        if not files:
            raise TreeoptError(f"{p}: no safetensors file holds MTP weights")
    else:
        files = [p]
    out: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 (a safe_open handle is not a mapping)
                    if is_mtp_key(key, first_layer):
                        out[key] = f.get_tensor(key)
        except (SafetensorError, OSError) as exc:
            raise TreeoptError(f"{file}: unreadable safetensors file ({exc})") from None
    return out


def _weight_map(index: Path) -> dict[str, str]:
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TreeoptError(f"{index}: not a safetensors index ({exc})") from None
    if not isinstance(weight_map, dict):
        raise TreeoptError(f"{index}: weight_map must be an object")
    return {str(k): str(v) for k, v in weight_map.items()}


def import_mtp(model: Any, path: str | os.PathLike[str], *, depth: int | None = None,
               first_layer: int | None = None, handoff_norm: bool | None = None,
               ) -> MtpDrafter:
    """The MTP drafter of a published layout in ``path`` (a safetensors file or a checkpoint
    directory) for the Hugging Face base model ``model``, drafting ``depth`` depths (default:
    one per module, as TensorRT-LLM runs MTP), wired to the model's LM head and embeddings.
    ``first_layer``: where DeepSeek-V3's MTP layers start (default the model's
    ``num_hidden_layers``); ``handoff_norm``: hand the normed state down (default: the layout's
    own reading, vLLM's for DeepSeek-V3; true reads DeepSeek-V3's weights as SGLang does)."""
    cfg = model.config
    source = str(path)
    first = cfg.num_hidden_layers if first_layer is None else first_layer
    weights = map_mtp_weights(read_mtp_tensors(path, first), first_layer=first, source=source)
    lm_head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    bases = {"lm_head": lm_head.weight, "embeddings": embeddings.weight}
    for role, copy in weights.copies.items():
        if not torch.equal(copy.to(bases[role].dtype).cpu(), bases[role].detach().cpu()):
            raise TreeoptError(f"{source}: the MTP layer's copy of the base model's {role} "
                               f"differs from the model's; treeopt drafts through the model's own")
    heads = cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    gate = weights.state.get("mtp.0.block.gate_proj.weight")
    drafter_cfg = HeadsConfig(
        kind="mtp", num_heads=depth or weights.modules, hidden_size=cfg.hidden_size,
        vocab_size=cfg.vocab_size, num_layers=weights.modules, share_lm_head=True,
        attention_heads=heads, kv_heads=0 if kv == heads else kv,
        intermediate_size=int(gate.shape[0]) if gate is not None else 0,
        rope_theta=_rope_theta(cfg, source), rms_norm_eps=float(cfg.rms_norm_eps),
        handoff_norm=weights.handoff_norm if handoff_norm is None else handoff_norm)
    drafter = build_heads(drafter_cfg, lm_head=lm_head, embeddings=embeddings)
    dtype = lm_head.weight.dtype
    _load_state(drafter, {k: v.to(dtype) for k, v in weights.state.items()}, source)
    return drafter.to(dtype).eval()


def _rope_theta(config: Any, source: str) -> float:
    """The base model's plain RoPE base; scaled RoPE (YaRN, Llama 3's) is refused."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise TreeoptError(f"{source}: the base model scales RoPE ({rope.get('rope_type')}); "
                           f"treeopt's MTP block applies plain RoPE")
    return float(rope.get("rope_theta") or getattr(config, "rope_theta", 10000.0))


__all__ = ["MtpWeights", "import_mtp", "is_mtp_key", "map_mtp_weights", "read_mtp_tensors"]
