"""The demo corpus: the Python standard library sources of the running interpreter.

The sources are present wherever Python is, so nothing is downloaded and nothing is committed.
Files are split deterministically by a hash of their path relative to the standard library:
the same interpreter always yields the same train, calibration and held-out parts.
"""

from __future__ import annotations

import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from treeopt.errors import TreeoptError

PARTS = ("train", "calibration", "heldout")
# Skipped: third-party packages, the test suites, byte caches, machine-specific or generated
# files, and data tables dressed as code (codec maps, the pydoc topic dump).
_SKIP_DIRS = {"site-packages", "dist-packages", "__pycache__", "test", "tests", "idle_test",
              "encodings", "pydoc_data"}
_SKIP_PREFIXES = ("_sysconfigdata", "config-")


@dataclass(frozen=True)
class SourceFile:
    """One source file: its path relative to the standard library and its text."""

    path: str
    text: str


@dataclass(frozen=True)
class Corpus:
    """The three parts, each a tuple of files in path order, and where they came from."""

    root: str
    train: tuple[SourceFile, ...]
    calibration: tuple[SourceFile, ...]
    heldout: tuple[SourceFile, ...]

    def part(self, name: str) -> tuple[SourceFile, ...]:
        if name not in PARTS:
            raise TreeoptError(f"corpus part {name!r} is unknown; expected one of {PARTS}")
        return getattr(self, name)

    def fingerprint(self) -> str:
        """sha256 over every part's paths and texts (16 hex digits)."""
        h = hashlib.sha256()
        for name in PARTS:
            for f in self.part(name):
                h.update(f"{name}\0{f.path}\0".encode() + f.text.encode() + b"\0")
        return h.hexdigest()[:16]

    def summary(self) -> dict[str, object]:
        return {"root": self.root, "fingerprint": self.fingerprint(),
                **{name: {"files": len(self.part(name)),
                          "bytes": sum(len(f.text.encode()) for f in self.part(name))}
                   for name in PARTS}}


def stdlib_root() -> Path:
    """The standard library directory of the running interpreter."""
    return Path(sysconfig.get_paths()["stdlib"])


def part_of(path: str, *, calibration: float, heldout: float) -> str:
    """The part a file belongs to, from the sha256 of its relative path.

    >>> part_of("json/decoder.py", calibration=0.08, heldout=0.08)
    'train'
    """
    u = int.from_bytes(hashlib.sha256(path.encode()).digest()[:8], "big") / 2**64
    if u < calibration:
        return "calibration"
    if u < calibration + heldout:
        return "heldout"
    return "train"


def source_paths(root: Path) -> list[str]:
    """Relative paths of the ``.py`` files kept from ``root``, sorted."""
    out = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root)
        if any(part in _SKIP_DIRS or part.startswith(_SKIP_PREFIXES) for part in rel.parts):
            continue
        out.append(rel.as_posix())
    return sorted(out)


def load_corpus(root: str | Path | None = None, *, calibration: float = 0.08,
                heldout: float = 0.08, max_files: int | None = None,
                max_file_bytes: int = 200_000) -> Corpus:
    """Read and split the sources; ``max_files`` keeps a deterministic subset (for tests)."""
    base = stdlib_root() if root is None else Path(root)
    paths = source_paths(base)
    if not paths:
        raise TreeoptError(f"{base}: no Python sources found (is this a standard library?)")
    if max_files is not None:  # every k-th file, so each part keeps members
        paths = paths[:: max(1, len(paths) // max_files)][:max_files]
    parts: dict[str, list[SourceFile]] = {name: [] for name in PARTS}
    for rel in paths:
        try:
            text = (base / rel).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip() or len(text.encode()) > max_file_bytes:
            continue
        parts[part_of(rel, calibration=calibration, heldout=heldout)].append(
            SourceFile(rel, text))
    for name, files in parts.items():
        if not files:
            raise TreeoptError(f"{base}: the {name} part of the corpus is empty "
                               f"({len(paths)} files considered)")
    return Corpus(str(base), *(tuple(parts[name]) for name in PARTS))
