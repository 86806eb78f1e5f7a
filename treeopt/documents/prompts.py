"""Prompts and texts: JSONL files with a ``prompt`` field, plain text files, or folders of them."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from treeopt.errors import TreeoptError


def read_texts(paths: Sequence[str | os.PathLike[str]]) -> list[str]:
    """Texts from each path: ``.jsonl`` → one per line (its ``prompt`` field); a folder → each
    ``.txt``/``.jsonl`` inside, sorted; any other file → the whole file is one text.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "p.jsonl").write_text('{"prompt": "a"}\\n\\n{"prompt": "b"}\\n')
    >>> read_texts([d / "p.jsonl"])
    ['a', 'b']
    """
    texts: list[str] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix in (".txt", ".jsonl"))
            if not files:
                raise TreeoptError(f"{p}: the folder holds no .txt or .jsonl files")
            texts.extend(read_texts(files))
        elif not p.exists():
            raise TreeoptError(f"{p}: no such prompts file")
        elif p.suffix == ".jsonl":
            texts.extend(_read_jsonl(p))
        else:
            texts.append(_read_text(p))
    if not texts:
        raise TreeoptError(f"{', '.join(map(str, paths))}: no prompts found")
    return texts


def _read_text(p: Path) -> str:
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TreeoptError(f"{p}: not UTF-8 text") from None


def _read_jsonl(p: Path) -> list[str]:
    out = []
    for n, line in enumerate(_read_text(p).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TreeoptError(f"{p}:{n}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
            raise TreeoptError(f"{p}:{n}: expected an object with a string 'prompt' field")
        out.append(obj["prompt"])
    return out


def encode(tokenizer: Any, texts: Sequence[str], *, source: str = "prompts",
           max_tokens: int | None = None) -> list[list[int]]:
    """Token ids of each text (with the tokenizer's special tokens, e.g. BOS).

    Texts longer than ``max_tokens`` raise a TreeoptError naming the text and the limit.
    """
    if tokenizer is None:
        raise TreeoptError("the model directory has no tokenizer, so text prompts cannot be "
                           "encoded")
    out = []
    for i, text in enumerate(texts):
        ids = list(tokenizer(text)["input_ids"])
        if not ids:
            raise TreeoptError(f"{source}: text {i} encodes to no tokens")
        if max_tokens is not None and len(ids) > max_tokens:
            raise TreeoptError(f"{source}: text {i} has {len(ids)} tokens, longer than the "
                               f"{max_tokens} the model's context leaves for it")
        out.append(ids)
    return out
