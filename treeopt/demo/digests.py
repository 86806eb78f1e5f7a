"""The inputs of a document a demo ships derived from its other files (a selection, a tuned
adaptive config): each input's name inside the demo and SHA-256, recorded when the document is
written and compared when it is read, so that a document is used only while it was computed from
the files the demo holds now.

>>> import tempfile
>>> paths = DemoPaths(Path(tempfile.mkdtemp()))
>>> (paths.root / "a.json").write_text("{}")
2
>>> recorded = inputs_record(paths, {"growth": paths.root / "a.json"})
>>> inputs_unchanged(paths, recorded, {"growth": paths.root / "a.json"})
True
>>> (paths.root / "a.json").write_text("{ }")
3
>>> inputs_unchanged(paths, recorded, {"growth": paths.root / "a.json"})
False
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from treeopt.demo.layout import DemoPaths


def inputs_record(paths: DemoPaths, files: dict[str, Path]) -> dict[str, dict[str, str]]:
    """``{role: {"path": its name inside the demo, "sha256": …}}`` of ``files``."""
    return {role: {"path": paths.inside(p), "sha256": sha256(p)} for role, p in files.items()}


def inputs_unchanged(paths: DemoPaths, recorded: Any, files: dict[str, Path]) -> bool:
    """Whether every one of ``files`` is there and as ``recorded`` (False for a record that is
    not one :func:`inputs_record` wrote)."""
    try:
        return all(p.is_file() and recorded[role]["sha256"] == sha256(p)
                   for role, p in files.items())
    except (KeyError, TypeError):
        return False


def remove_stale(folder: Path, pattern: str, kept: set[Path]) -> None:
    """Remove the files of ``folder`` matching ``pattern`` that are not ``kept``: what a build
    shipped before and no longer makes."""
    for stale in folder.glob(pattern):
        if stale not in kept:
            stale.unlink()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


__all__ = ["inputs_record", "inputs_unchanged", "remove_stale", "sha256"]
