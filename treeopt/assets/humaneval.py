"""HumanEval's problems as treeopt prompt files, split into calibration and held-out problems.

The split is deterministic and independent of the file's order: the problems sorted by the
SHA-256 of their ``task_id``; the first :data:`HELDOUT` are held out, the rest calibrate. Each
line keeps the problem's ``task_id`` beside its ``prompt`` (the function signature and docstring a
model completes).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

from treeopt.errors import TreeoptError
from treeopt.files import write_text_atomic

HELDOUT = 64  # of 164 problems: 100 calibrate


def split(tasks: list[dict[str, str]], *, heldout: int = HELDOUT
          ) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(calibration, held-out) problems, each in ``task_id`` order.

    >>> tasks = [{"task_id": f"T/{i}", "prompt": str(i)} for i in range(5)]
    >>> cal, held = split(tasks, heldout=2)
    >>> [t["task_id"] for t in held], len(cal)
    (['T/0', 'T/1'], 3)
    """
    ranked = sorted(tasks, key=lambda t: hashlib.sha256(t["task_id"].encode()).hexdigest())

    def by_id(ts: list[dict[str, str]]) -> list[dict[str, str]]:
        return sorted(ts, key=lambda t: (t["task_id"].split("/")[0],
                                         int(t["task_id"].split("/")[-1])))

    return by_id(ranked[heldout:]), by_id(ranked[:heldout])


def read_problems(path: Path) -> list[dict[str, str]]:
    """The problems of ``HumanEval.jsonl.gz``: ``task_id`` and ``prompt`` of each."""
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if not line.strip():
                continue
            doc = json.loads(line)
            if not isinstance(doc.get("task_id"), str) or not isinstance(doc.get("prompt"), str):
                raise TreeoptError(f"{path}:{n}: expected a task_id and a prompt")
            out.append({"task_id": doc["task_id"], "prompt": doc["prompt"]})
    return out


def write_humaneval(source: Path, out: Path) -> None:
    """``calibration.jsonl`` and ``heldout.jsonl`` of the problems in ``source``, into ``out``."""
    calibration, heldout = split(read_problems(source))
    for name, tasks in (("calibration", calibration), ("heldout", heldout)):
        write_text_atomic(out / f"{name}.jsonl", "".join(json.dumps(t) + "\n" for t in tasks))
