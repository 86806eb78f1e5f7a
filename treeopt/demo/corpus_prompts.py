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


# characters natural-language text is made of: a passage with fewer of them is code or a table
_PROSE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                         " \n.,;:'\"-()!?/")
_PROSE_SHARE = 0.9
_CODE_MARKS = (" = ", "==", "+=", "):", "()")  # a line holding one is code, not prose


def sample_prose(files: Sequence[SourceFile], tokenizer: Any, *, count: int, min_tokens: int,
                 max_tokens: int, seed: int) -> list[dict[str, Any]]:
    """``count`` prose prompts ``{"prompt", "source", "line", "kind"}`` of ``min_tokens`` …
    ``max_tokens`` tokens: natural-language passages of ``files``, where repeats are rare.

    A passage is a docstring (module, class or function; :mod:`ast`) or a block of whole-line
    comments on consecutive lines (:mod:`tokenize`) with their ``#`` markers removed, each up
    to its first line of code (:func:`_prose_head`); only passages of at least
    ``_PROSE_SHARE`` letters, spaces and punctuation count. A prompt is the longest run of a
    passage's whole lines from its start that fits ``max_tokens`` and reads as prose itself,
    ``line`` the file line of its first character, ``kind`` ``docstring`` or ``comment``. The
    passages are shuffled by ``seed``; files that do not parse give none.
    """
    found = [row for f in files for row in prose_passages(f)]
    out: list[dict[str, Any]] = []
    for i in np.random.default_rng(seed).permutation(len(found)):
        if len(out) == count:
            break
        text = _fitting_lines(found[int(i)]["prompt"], tokenizer, max_tokens)
        if _reads_as_prose(text) and len(tokenizer(text)["input_ids"]) >= min_tokens:
            out.append({**found[int(i)], "prompt": text})
    if len(out) < count:
        raise TreeoptError(f"found only {len(out)} of {count} prose prompts of {min_tokens} … "
                           f"{max_tokens} tokens in {len(files)} files")
    return out


def prose_passages(source: SourceFile) -> list[dict[str, Any]]:
    """The docstrings and comment blocks of ``source`` that read as prose, in line order, each
    ``{"prompt", "source", "line", "kind"}`` (see :func:`sample_prose`).

    >>> text = ("def f():\\n    'Return the answer to the question.'\\n"
    ...         "    # the answer, found by a long computation\\n    # (it took a while)\\n"
    ...         "    return 42  # not prose\\n")
    >>> [(p["line"], p["kind"], p["prompt"]) for p in prose_passages(SourceFile("f.py", text))]
    [(2, 'docstring', 'Return the answer to the question.'), (3, 'comment', 'the answer, found by a long computation\\n(it took a while)')]
    """
    lines = source.text.splitlines()
    found = [*_docstrings(source.text, lines), *_comment_blocks(source.text)]
    return [{"prompt": text, "source": source.path, "line": line, "kind": kind}
            for line, kind, text in sorted(found) if _reads_as_prose(text)]


def _docstrings(text: str, lines: Sequence[str]) -> list[tuple[int, str, str]]:
    """(line, "docstring", text) of every docstring in ``text``, cut at its first doctest,
    literal block or indented line; one whose first line is not found where the syntax tree
    says is left out (escapes such as ``\\n`` inside the string)."""
    import ast

    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef)):
            continue
        doc = ast.get_docstring(node, clean=True)
        if not doc or not node.body:
            continue
        raw = node.body[0].value.value  # type: ignore[attr-defined]
        skipped = next(i for i, part in enumerate(raw.split("\n")) if part.strip())
        line = node.body[0].lineno + skipped
        passage = _prose_head(doc.split("\n"))
        if passage and line <= len(lines) and passage.split("\n")[0] in lines[line - 1]:
            out.append((line, "docstring", passage))
    return out


def _comment_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, "comment", text) of every run of whole-line comments on consecutive lines at one
    column, their ``#`` and one space after it removed (``#!`` and coding lines left out)."""
    import io
    import tokenize

    runs: list[tuple[int, int, list[str]]] = []  # first line, column, texts
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type != tokenize.COMMENT or tok.line[: tok.start[1]].strip():
                continue  # a comment after code is part of the code
            body = tok.string[1:].removeprefix(" ").rstrip()
            if tok.string.startswith("#!") or "coding" in body and "-*-" in body:
                continue
            line, col = tok.start
            if runs and runs[-1][0] + len(runs[-1][2]) == line and runs[-1][1] == col:
                runs[-1][2].append(body)
            else:
                runs.append((line, col, [body]))
    except (tokenize.TokenError, SyntaxError):
        return []
    out = []
    for line, _, texts in runs:
        while texts and not texts[0].strip():
            texts, line = texts[1:], line + 1
        passage = _prose_head(texts)
        if passage:
            out.append((line, "comment", passage))
    return out


def _prose_head(lines: Sequence[str]) -> str:
    """``lines`` up to the first that is code: a doctest, an indented line, a literal block's
    ``::`` line, a line with an assignment or comparison, or a compound statement's header.

    >>> _prose_head(["Read it twice.", "elif done(x):", "    pass"])
    'Read it twice.'
    """
    import keyword

    kept: list[str] = []
    for line in lines:
        words = line.split()
        if (line.startswith((">>>", " ", "\t")) or line.rstrip().endswith("::")
                or any(mark in line for mark in _CODE_MARKS)
                or words and keyword.iskeyword(words[0]) and line.rstrip().endswith(":")):
            break
        kept.append(line)
    return "\n".join(kept).strip()


def _reads_as_prose(text: str) -> bool:
    """Whether ``text`` is words: at least ``_PROSE_SHARE`` of it letters, spaces and
    punctuation, and at least four words."""
    if not text:
        return False
    share = sum(ch in _PROSE_CHARS for ch in text) / len(text)
    return share >= _PROSE_SHARE and len(text.split()) >= 4


def _fitting_lines(text: str, tokenizer: Any, max_tokens: int) -> str:
    """The longest run of ``text``'s lines from its start that fits ``max_tokens`` tokens,
    trailing blank lines dropped ("" when its first line alone is too long)."""
    taken: list[str] = []
    for line in text.split("\n"):
        if len(tokenizer("\n".join([*taken, line]))["input_ids"]) > max_tokens:
            break
        taken.append(line)
    return "\n".join(taken).rstrip()
