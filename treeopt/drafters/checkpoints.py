"""Head checkpoints: treeopt's own (safetensors + JSON config) and Medusa's published layout.

treeopt layout, a directory: ``heads.json`` (``"format": "treeopt.heads/1"``, the
:class:`~treeopt.heads.HeadsConfig`, provenance) and ``heads.safetensors`` (trainable weights only;
the shared base LM head and embeddings are never saved).

Medusa layout, a directory: ``config.json`` with ``medusa_num_heads`` and ``medusa_num_layers``, and
``medusa_lm_head.safetensors`` or ``medusa_lm_head.pt`` holding ``{i}.{j}.linear.weight|bias`` for the
residual blocks and ``{i}.{num_layers}.weight`` for the vocabulary projection of head i. ``.pt`` files
load only through ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from treeopt.drafters import build_heads, drafter_kind
from treeopt.drafters.base import DraftHeads
from treeopt.drafters.config import HeadsConfig
from treeopt.errors import TreeoptError
from treeopt.files import atomic_write, read_json, read_tagged_json, write_json

if TYPE_CHECKING:
    from transformers import PreTrainedModel

HEADS_FORMAT = "treeopt.heads/1"
_BASE_PREFIXES = ("base_lm_head.", "base_embeddings.")


def save_heads(heads: DraftHeads, directory: str | os.PathLike[str], *,
               meta: dict[str, Any] | None = None) -> Path:
    """Write ``heads.safetensors`` then ``heads.json`` (each atomically) into ``directory``."""
    from safetensors.torch import save_file

    out = Path(directory)
    state = {k: v.detach().cpu().contiguous() for k, v in heads.state_dict().items()
             if not k.startswith(_BASE_PREFIXES)}
    atomic_write(out / "heads.safetensors", lambda tmp: save_file(state, str(tmp)))
    write_json(out / "heads.json",
               {"format": HEADS_FORMAT, "config": heads.config.to_dict(), **(meta or {})})
    return out


def load_heads(directory: str | os.PathLike[str], *, lm_head: nn.Module | None = None,
               embeddings: nn.Module | None = None) -> DraftHeads:
    """Load heads from a treeopt or a Medusa checkpoint directory (float32, on the CPU)."""
    d = Path(directory)
    if (d / "heads.json").exists():
        return _load_native(d, lm_head=lm_head, embeddings=embeddings)
    if (d / "config.json").exists():
        raw = read_json(d / "config.json")
        if isinstance(raw, dict) and "medusa_num_heads" in raw:
            return import_medusa(d)
    if not d.is_dir():
        raise TreeoptError(f"{d}: no such heads directory")
    raise TreeoptError(
        f"{d}: not a heads checkpoint (expected heads.json, or a Medusa config.json with "
        f"medusa_num_heads)")


def read_heads_config(directory: str | os.PathLike[str]) -> HeadsConfig:
    """The :class:`HeadsConfig` stored in a treeopt heads directory."""
    doc = read_tagged_json(Path(directory) / "heads.json", HEADS_FORMAT)
    try:
        return HeadsConfig(**doc["config"])
    except (KeyError, TypeError) as exc:
        raise TreeoptError(f"{directory}/heads.json: bad 'config' ({exc})") from None


def _load_native(d: Path, *, lm_head: nn.Module | None, embeddings: nn.Module | None) -> DraftHeads:
    cfg = read_heads_config(d)
    if cfg.share_lm_head and lm_head is None:
        raise TreeoptError(f"{d}: these heads share the base model's LM head; load them with "
                           f"the base model")
    if drafter_kind(cfg.kind).reads_path and embeddings is None:
        raise TreeoptError(f"{d}: {drafter_kind(cfg.kind).title} read the base model's input "
                           f"embeddings; load them with the base model")
    path = d / "heads.safetensors"
    if not path.exists():
        raise TreeoptError(f"{path}: no such file")
    heads = build_heads(cfg, lm_head=lm_head if cfg.share_lm_head else None,
                        embeddings=embeddings)
    _load_state(heads, _read_safetensors(path), str(path))
    return heads


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; a truncated or foreign file raises a TreeoptError."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise TreeoptError(f"{path}: unreadable safetensors file ({exc}; truncated?)") from None


def _load_state(heads: DraftHeads, state: dict[str, torch.Tensor], source: str) -> None:
    own = {k: v for k, v in heads.state_dict().items() if not k.startswith(_BASE_PREFIXES)}
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if missing or unexpected:
        raise TreeoptError(f"{source}: weights do not match the config (missing "
                           f"{missing[:3]}, unexpected {unexpected[:3]})")
    for key, value in state.items():
        if tuple(value.shape) != tuple(own[key].shape):
            raise TreeoptError(f"{source}: {key} has shape {list(value.shape)}, the config "
                               f"expects {list(own[key].shape)}")
    heads.load_state_dict(state, strict=False)


def import_medusa(directory: str | os.PathLike[str]) -> DraftHeads:
    """Medusa heads from the published layout (``medusa_lm_head.{safetensors,pt}`` + config)."""
    d = Path(directory)
    raw = read_json(d / "config.json")
    try:
        num_heads, num_layers = int(raw["medusa_num_heads"]), int(raw["medusa_num_layers"])
    except (KeyError, TypeError, ValueError):
        raise TreeoptError(f"{d}/config.json: needs integer medusa_num_heads and "
                           f"medusa_num_layers") from None
    state = _read_medusa_weights(d)
    proj_key = f"0.{num_layers}.weight"
    if proj_key not in state:
        raise TreeoptError(f"{d}: no {proj_key!r} in the Medusa weights (keys such as "
                           f"{sorted(state)[:3]})")
    vocab, hidden = state[proj_key].shape
    cfg = HeadsConfig(kind="medusa", num_heads=num_heads, hidden_size=int(hidden),
                      vocab_size=int(vocab), num_layers=num_layers)
    mapped: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        m = re.fullmatch(r"(\d+)\.(\d+)\.(linear\.weight|linear\.bias|weight)", key)
        if m is None:
            raise TreeoptError(f"{d}: unexpected key {key!r} in the Medusa weights")
        head, layer, name = int(m[1]), int(m[2]), m[3]
        if layer == num_layers and name == "weight":
            mapped[f"proj.{head}.weight"] = value
        else:
            mapped[f"blocks.{head}.{layer}.{name}"] = value
    heads = build_heads(cfg)
    _load_state(heads, {k: v.float() for k, v in mapped.items()}, str(d))
    return heads


def _read_medusa_weights(d: Path) -> dict[str, torch.Tensor]:
    st, pt = d / "medusa_lm_head.safetensors", d / "medusa_lm_head.pt"
    if st.exists():
        state = _read_safetensors(st)
    elif pt.exists():
        try:
            state = torch.load(pt, map_location="cpu", weights_only=True)
        except Exception as exc:  # an unsafe or corrupt pickle: name the file and refuse
            raise TreeoptError(f"{pt}: not loadable with weights_only=True ({exc})") from None
    else:
        raise TreeoptError(f"{d}: no medusa_lm_head.safetensors or medusa_lm_head.pt")
    if not isinstance(state, dict):
        raise TreeoptError(f"{d}: the Medusa weights are not a state dict")
    return {k.removeprefix("medusa_head."): v for k, v in state.items()}


def check_heads_match(cfg: HeadsConfig, *, hidden_size: int, vocab_size: int, source: str) -> None:
    """Raise unless the heads' hidden size and vocabulary match the base model's."""
    if (cfg.hidden_size, cfg.vocab_size) != (hidden_size, vocab_size):
        raise TreeoptError(
            f"{source}: heads have hidden size {cfg.hidden_size} and vocabulary {cfg.vocab_size}, "
            f"the model has hidden size {hidden_size} and vocabulary {vocab_size}")


def load_heads_for(model: PreTrainedModel, directory: str | os.PathLike[str]) -> DraftHeads:
    """Heads from ``directory`` wired to ``model``'s LM head and embeddings, on its device/dtype."""
    from treeopt.decoding.models import model_dims

    hidden, vocab = model_dims(model)
    if (Path(directory) / "heads.json").exists():  # check before building anything
        check_heads_match(read_heads_config(directory), hidden_size=hidden, vocab_size=vocab,
                          source=str(directory))
    heads = load_heads(directory, lm_head=model.get_output_embeddings(),
                       embeddings=model.get_input_embeddings())
    check_heads_match(heads.config, hidden_size=hidden, vocab_size=vocab, source=str(directory))
    weight = model.get_output_embeddings().weight
    return heads.to(device=weight.device, dtype=weight.dtype).eval().requires_grad_(False)
