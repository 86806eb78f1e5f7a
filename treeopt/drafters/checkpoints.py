"""Drafter checkpoints: treeopt's heads (safetensors + JSON config), Medusa's published layout,
and a draft model (a local Hugging Face causal LM directory).

treeopt layout, a directory: ``heads.json`` (``"format": "treeopt.heads/1"``, the
:class:`~treeopt.registry.drafter_configs.HeadsConfig`, provenance) and ``heads.safetensors`` (trainable weights only;
the shared base LM head and embeddings are never saved).

Medusa layout, a directory: ``config.json`` with ``medusa_num_heads`` and ``medusa_num_layers``, and
``medusa_lm_head.safetensors`` or ``medusa_lm_head.pt`` holding ``{i}.{j}.linear.weight|bias`` for the
residual blocks and ``{i}.{num_layers}.weight`` for the vocabulary projection of head i. ``.pt`` files
load only through ``torch.load(weights_only=True)``.

EAGLE-1/2 layout, a directory: a Llama ``config.json`` (hidden, intermediate and vocabulary sizes,
attention and key/value heads, ``rope_theta``, ``rms_norm_eps``, optional ``bias``) and
``model.safetensors`` or ``pytorch_model.bin`` holding ``fc.weight`` (``fc.bias``),
``layers.{i}.self_attn.{q,k,v,o}_proj.weight``, ``layers.{i}.mlp.{gate,up,down}_proj.weight`` and
``layers.{i}.{input,post_attention}_layernorm.weight`` (layer 0 has no input norm; one saved is
ignored), and optionally ``embed_tokens.weight`` (the base model's copy; the base's are used).
EAGLE-3's layout differs in the weights: ``fc.weight`` (3d → d), ``midlayer.*`` (its one layer,
with ``hidden_norm``), ``norm.weight``, ``lm_head.weight`` (its own vocabulary), ``d2t`` and
``t2d``; ``config.json`` adds ``draft_vocab_size``. Its three feature layers follow from the base
model's depth (EAGLE-3's layers 2, L/2 and L-3), so it loads with the base model.

Draft model, a directory: a Hugging Face ``config.json`` (with ``model_type``) and its weights;
it must share the base model's tokenizer (:func:`check_same_tokenizer`).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from treeopt.decoding.drafter import Drafter
from treeopt.drafters.heads import DraftHeads, build_heads
from treeopt.errors import TreeoptError
from treeopt.files import atomic_write, read_json, read_tagged_json, write_json
from treeopt.registry.drafter_configs import HeadsConfig, default_feature_layers
from treeopt.registry.kinds import drafter_kind

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
               embeddings: nn.Module | None = None, depth: int | None = None,
               base_layers: int | None = None) -> Drafter:
    """Load a drafter from a treeopt heads, a Medusa or a draft-model directory (on the CPU;
    ``depth``: the depths a draft model drafts, default ``DEFAULT_DEPTH``)."""
    d = Path(directory)
    if (d / "heads.json").exists():
        return _finite(_load_native(d, lm_head=lm_head, embeddings=embeddings), d)
    if (d / "config.json").exists():
        raw = read_json(d / "config.json")
        if isinstance(raw, dict) and "medusa_num_heads" in raw:
            return _finite(import_medusa(d), d)
        found = _eagle_weights(d) if isinstance(raw, dict) else None
        if found is not None:
            return _finite(import_eagle(d, lm_head=lm_head, embeddings=embeddings, depth=depth,
                                        base_layers=base_layers, weights=found), d)
        if isinstance(raw, dict) and "model_type" in raw:
            from treeopt.drafters.draft_model import DraftModel

            return _finite(DraftModel.load(d, depth=depth), d)
    if not d.is_dir():
        raise TreeoptError(f"{d}: no such drafter directory")
    raise TreeoptError(
        f"{d}: not a drafter checkpoint (expected heads.json, a Medusa config.json with "
        f"medusa_num_heads, or a Hugging Face draft model's config.json)")


def read_heads_config(directory: str | os.PathLike[str]) -> HeadsConfig:
    """The :class:`HeadsConfig` stored in a treeopt heads directory; a field of the wrong kind
    (a count that is not an integer, a number that is NaN or infinite) raises a TreeoptError."""
    source = f"{directory}/heads.json"
    doc = read_tagged_json(Path(directory) / "heads.json", HEADS_FORMAT)
    config = doc.get("config")
    if not isinstance(config, dict):
        raise TreeoptError(f"{source}: 'config' must be an object, got {config!r}")
    for f in fields(HeadsConfig):
        if f.name in config and not _CONFIG_KINDS[str(f.type)](config[f.name]):
            raise TreeoptError(f"{source}: config {f.name} is {config[f.name]!r}; expected "
                               f"{_CONFIG_NAMES[str(f.type)]}")
    try:
        return HeadsConfig(**config)
    except TypeError as exc:
        raise TreeoptError(f"{source}: bad 'config' ({exc})") from None


def _integer(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_CONFIG_KINDS = {  # HeadsConfig's field types -> the JSON values they take
    "str": lambda v: isinstance(v, str),
    "int": _integer,
    "bool": lambda v: isinstance(v, bool),
    "float": lambda v: (_integer(v) or isinstance(v, float)) and math.isfinite(v),
    "tuple[int, ...]": lambda v: isinstance(v, list) and all(_integer(x) for x in v),
}
_CONFIG_NAMES = {"str": "a string", "int": "an integer", "bool": "true or false",
                 "float": "a finite number", "tuple[int, ...]": "a list of integers"}


_EAGLE_FILES = ("model.safetensors", "pytorch_model.bin")


def _eagle_weights(d: Path) -> tuple[Path, dict[str, torch.Tensor]] | None:
    """The EAGLE weights file of ``d`` and its tensors (read once), or None when ``d`` holds no
    EAGLE layout (its weights have no ``fc.weight``; a safetensors file is told by its keys)."""
    for name in _EAGLE_FILES:
        path = d / name
        if not path.exists():
            continue
        if path.suffix == ".safetensors":
            from safetensors import SafetensorError, safe_open

            try:
                with safe_open(str(path), framework="pt") as f:
                    keys = set(f.keys())
            except (SafetensorError, OSError):
                return None  # not readable here: left to the draft-model loader to report
            if not {"fc.weight", "model.fc.weight"} & keys:
                return None
            return path, _read_safetensors(path)
        state = _read_pickled(path)
        return (path, state) if {"fc.weight", "model.fc.weight"} & set(state) else None
    return None


def _read_pickled(path: Path) -> dict[str, torch.Tensor]:
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # an unsafe or corrupt pickle: name the file and refuse
        raise TreeoptError(f"{path}: not loadable with weights_only=True ({exc})") from None
    if not isinstance(state, dict):
        raise TreeoptError(f"{path}: not a state dict")
    return state


_EAGLE_KEYS = {  # public name (after layers.{i}.) → treeopt's
    "self_attn.q_proj.weight": "q_proj.weight", "self_attn.k_proj.weight": "k_proj.weight",
    "self_attn.v_proj.weight": "v_proj.weight", "self_attn.o_proj.weight": "o_proj.weight",
    "mlp.gate_proj.weight": "gate_proj.weight", "mlp.up_proj.weight": "up_proj.weight",
    "mlp.down_proj.weight": "down_proj.weight", "input_layernorm.weight": "input_layernorm.weight",
    "post_attention_layernorm.weight": "post_attention_layernorm.weight",
    "hidden_norm.weight": "hidden_norm.weight",  # EAGLE-3's midlayer only
}
_EAGLE3_OWN = ("norm.weight", "lm_head.weight", "d2t", "t2d")


def import_eagle(directory: str | os.PathLike[str], *, lm_head: nn.Module | None = None,
                 embeddings: nn.Module | None = None, depth: int | None = None,
                 base_layers: int | None = None,
                 weights: tuple[Path, dict[str, torch.Tensor]] | None = None) -> Drafter:
    """An EAGLE-1/2 or EAGLE-3 drafter from the public layout (see the module notes), drafting
    ``depth`` depths (default 4), wired to the base model's LM head and embeddings. EAGLE-3
    reads three base layers chosen by the base model's depth (``base_layers``); ``weights``: the
    weights file and its tensors, when the caller has read them already."""
    d = Path(directory)
    raw = read_json(d / "config.json")
    weights = weights or _eagle_weights(d)
    if weights is None:
        raise TreeoptError(f"{d}: no EAGLE weights (model.safetensors or pytorch_model.bin with "
                           f"fc.weight)")
    path, state = weights
    state = {k.removeprefix("model."): v for k, v in state.items()}
    eagle3 = any(k.startswith("midlayer.") for k in state)
    if eagle3 and base_layers is None:
        raise TreeoptError(f"{d}: an EAGLE-3 checkpoint reads three layers of its base model; "
                           f"load it with the base model")
    try:
        hidden, vocab = int(raw["hidden_size"]), int(raw["vocab_size"])
        heads = int(raw["num_attention_heads"])
        cfg = HeadsConfig(
            kind="eagle3" if eagle3 else "eagle", num_heads=depth or 4, hidden_size=hidden,
            vocab_size=vocab, num_layers=int(raw.get("num_hidden_layers", 1)),
            share_lm_head=not eagle3, attention_heads=heads,
            kv_heads=int(raw.get("num_key_value_heads") or heads),
            intermediate_size=int(raw["intermediate_size"]),
            rope_theta=float(raw.get("rope_theta", 10000.0)),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)), bias="fc.bias" in state,
            draft_vocab_size=int(raw.get("draft_vocab_size") or 0) if eagle3 else 0,
            feature_layers=default_feature_layers(base_layers or 0) if eagle3 else ())
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise TreeoptError(f"{d}/config.json: not an EAGLE config (missing or bad {exc})") from None
    for name in ("rope_theta", "rms_norm_eps"):
        if not 0 < getattr(cfg, name) < math.inf:  # NaN fails too
            raise TreeoptError(f"{d}/config.json: {name} is {getattr(cfg, name)}; expected a "
                               "finite number > 0")
    if cfg.kv_heads == cfg.attention_heads:
        cfg = replace(cfg, kv_heads=0)
    if cfg.draft_vocab_size == cfg.vocab_size:
        cfg = replace(cfg, draft_vocab_size=0)
    mapped: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        m = re.fullmatch(r"(?:layers\.(\d+)|midlayer)\.(.+)", key)
        if key.startswith("fc.") or key in _EAGLE3_OWN:
            mapped[key] = value
        elif key == "embed_tokens.weight":
            if tuple(value.shape) != (vocab, hidden):
                raise TreeoptError(f"{path}: embed_tokens.weight has shape {list(value.shape)}, "
                                   f"the config says [{vocab}, {hidden}]")
        elif m is not None and m[2] in _EAGLE_KEYS and (eagle3 or m[1] is not None):
            layer = int(m[1] or 0)
            if eagle3 or not (layer == 0 and m[2] == "input_layernorm.weight"):
                mapped[f"layers.{layer}.{_EAGLE_KEYS[m[2]]}"] = value
        else:
            raise TreeoptError(f"{path}: unexpected key {key!r} in the EAGLE weights")
    try:
        drafter = build_heads(cfg, lm_head=lm_head, embeddings=embeddings)
    except TreeoptError as exc:  # a shape that does not fit the base model: name the file
        raise TreeoptError(f"{d}: {exc}") from None
    _load_state(drafter, {k: v.float() for k, v in mapped.items()}, str(path))
    return drafter


def check_same_tokenizer(base: str | os.PathLike[str], draft: str | os.PathLike[str]) -> None:
    """Raise when both directories hold a tokenizer and they map tokens differently (a draft
    model must read and write the base model's token ids). Directories without one pass: the
    vocabulary sizes were compared already."""
    from transformers import AutoTokenizer

    vocabs = []
    for d in (base, draft):
        if not d or not Path(d).is_dir():
            return
        try:
            tok = AutoTokenizer.from_pretrained(str(d), local_files_only=True,
                                                trust_remote_code=False)
        except (OSError, ValueError, KeyError, TypeError):
            return
        vocabs.append(tok.get_vocab())
    if vocabs[0] != vocabs[1]:
        differ = sum(vocabs[1].get(t) != i for t, i in vocabs[0].items())
        raise TreeoptError(f"{draft}: the draft model's tokenizer differs from the base "
                           f"model's ({differ} of {len(vocabs[0])} tokens map to other ids); a "
                           f"draft model must share the base model's tokenizer")


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


def _finite(drafter: Drafter, source: Path) -> Drafter:
    """``drafter``, once every weight of its own (the base model's shared ones aside) is a
    finite number."""
    for name, value in drafter.state_dict().items():
        if (not name.startswith(_BASE_PREFIXES) and value.is_floating_point()
                and not bool(torch.isfinite(value).all())):
            raise TreeoptError(f"{source}: weight {name} holds NaN or infinity; the drafter's "
                               "weights must be finite numbers")
    return drafter


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
    except (KeyError, TypeError, ValueError, OverflowError):
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
    """Raise unless the drafter's vocabulary (and, where it reads them, hidden states) match the
    base model's."""
    if not drafter_kind(cfg.kind).reads_features:
        if cfg.vocab_size != vocab_size:
            raise TreeoptError(f"{source}: the draft model has a vocabulary of {cfg.vocab_size} "
                               f"tokens, the base model {vocab_size}: they must share a tokenizer")
        return
    if (cfg.hidden_size, cfg.vocab_size) != (hidden_size, vocab_size):
        raise TreeoptError(
            f"{source}: heads have hidden size {cfg.hidden_size} and vocabulary {cfg.vocab_size}, "
            f"the model has hidden size {hidden_size} and vocabulary {vocab_size}")


def load_heads_for(model: PreTrainedModel, directory: str | os.PathLike[str], *,
                   depth: int | None = None) -> Drafter:
    """The drafter in ``directory`` wired to ``model`` (its LM head and embeddings, for heads),
    on its device and dtype; a draft model must share its tokenizer. ``directory`` may also be a
    prompt-lookup spec (``prompt-lookup:depth=10,max-n=3``) or an n-gram trie spec
    (``ngram-trie:depth=10,max-trie-depth=18,match=bfs``) or a suffix decoding spec
    (``suffix:depth=16,min-token-prob=0.1``), or hold one in ``drafter.json``;
    ``DIR+prompt-lookup[:…]`` joins the drafter in DIR and prompt lookup in one tree
    (:class:`~treeopt.drafters.hybrid.HybridDrafter`; ``depth``: the lookup's chain)."""
    from treeopt.decoding.models import model_dims
    from treeopt.drafters.prompt_lookup import SPEC_NAME, load_lookup, parse_lookup_spec
    from treeopt.drafters.suffix import load_suffix, parse_suffix_spec
    from treeopt.drafters.trie_drafter import load_trie, parse_trie_spec

    hidden, vocab = model_dims(model)
    base, joined, spec = str(directory).rpartition("+" + SPEC_NAME)
    if joined and base and spec[:1] in ("", ":"):  # a hybrid: DIR+prompt-lookup[:settings]
        from treeopt.drafters.hybrid import HybridDrafter

        chain = parse_lookup_spec(SPEC_NAME + spec, vocab_size=vocab)
        if chain is not None and depth is not None:
            chain = type(chain).from_config(replace(chain.config, num_heads=depth))
        return HybridDrafter(load_heads_for(model, base), chain).to(model.device)
    lookup = (parse_lookup_spec(str(directory), vocab_size=vocab)
              or parse_trie_spec(str(directory), vocab_size=vocab)
              or load_lookup(directory, vocab_size=vocab)
              or parse_suffix_spec(str(directory), vocab_size=vocab)
              or load_trie(directory, vocab_size=vocab)
              or load_suffix(directory, vocab_size=vocab))
    if lookup is not None:  # n-gram drafting: settings only, nothing to load
        return lookup if depth is None else lookup.at_depth(depth)
    if (Path(directory) / "heads.json").exists():  # check before building anything
        check_heads_match(read_heads_config(directory), hidden_size=hidden, vocab_size=vocab,
                          source=str(directory))
    heads = load_heads(directory, lm_head=model.get_output_embeddings(),
                       embeddings=model.get_input_embeddings(), depth=depth,
                       base_layers=getattr(model.config, "num_hidden_layers", None))
    check_heads_match(heads.config, hidden_size=hidden, vocab_size=vocab, source=str(directory))
    if not heads.kind.reads_features:
        check_same_tokenizer(getattr(model, "name_or_path", ""), directory)
    weight = model.get_output_embeddings().weight
    return heads.to(device=weight.device, dtype=weight.dtype).eval().requires_grad_(False)
