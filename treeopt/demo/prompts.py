"""Demo prompts: real code prefixes, a run of lines cut from a corpus part.

Each prompt starts at a line start and stops just before a line's newline. The byte-level
pre-tokenizer always starts a new piece at whitespace, so the prompt's tokens are exactly the
tokens the file has there, and the next token (newline plus the next line's indentation, one
token) is one the model saw in training; a prompt ending in a bare newline would not be.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from treeopt.demo.corpus import SourceFile
from treeopt.errors import TreeoptError
from treeopt.files import write_text_atomic


def sample_prompts(files: Sequence[SourceFile], tokenizer: Any, *, count: int, min_tokens: int,
                   max_tokens: int, seed: int) -> list[dict[str, Any]]:
    """``count`` prompts ``{"prompt", "source", "line"}`` of ``min_tokens`` … ``max_tokens``."""
    rng = np.random.default_rng(seed)
    lines = [f.text.splitlines(keepends=True) for f in files]
    out: list[dict[str, Any]] = []
    seen: set[tuple[int, int]] = set()
    for _ in range(count * 50):
        if len(out) == count:
            break
        i = int(rng.integers(len(files)))
        if len(lines[i]) < 8:
            continue
        start = int(rng.integers(len(lines[i]) - 4))  # leave text after the prompt
        if (i, start) in seen or not lines[i][start].strip():
            continue
        text = _whole_lines(lines[i][start:], tokenizer, max_tokens)
        if text is None or len(tokenizer(text)["input_ids"]) < min_tokens:
            continue
        seen.add((i, start))
        out.append({"prompt": text, "source": files[i].path, "line": start + 1})
    if len(out) < count:
        raise TreeoptError(f"found only {len(out)} of {count} prompts of {min_tokens} … "
                           f"{max_tokens} tokens in {len(files)} files")
    return out


def _whole_lines(lines: Sequence[str], tokenizer: Any, max_tokens: int) -> str | None:
    """The longest run of lines from the start, its final newline dropped, that fits
    ``max_tokens`` and ends inside code: its last line and the next are not blank."""
    taken: list[str] = []
    for line in lines:
        if not line.endswith("\n") or len(tokenizer("".join(taken) + line)["input_ids"]) > max_tokens:
            break
        taken.append(line)
    while taken and (not taken[-1].strip() or len(lines) <= len(taken)
                     or not lines[len(taken)].strip()):
        taken.pop()
    return "".join(taken)[:-1] or None


def write_prompts(path: str | os.PathLike[str], prompts: Sequence[dict[str, Any]]) -> Path:
    """One JSON object per line (``prompt`` plus provenance), written atomically."""
    text = "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in prompts)
    return write_text_atomic(path, text)
