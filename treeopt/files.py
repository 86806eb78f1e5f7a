"""Versioned files: atomic writes and format-tag checks shared by every reader and writer.

Layer: numpy; may import ``errors``.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from treeopt.errors import TreeoptError


def atomic_write(path: str | os.PathLike[str], write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then rename it into place.

    A reader never sees a half-written file: either the old content or the new. Only a regular
    file is replaced: a symlink to one is kept (the file it names is replaced), and a character
    device or a FIFO (``/dev/null``, a named pipe) is kept and written through, from a temporary
    file filled elsewhere.
    """
    given = Path(path)
    if streamed(given):
        return _write_through(given, write)
    # a symlink to a file: replace the file it names and keep the link (/dev/stdout included)
    target = Path(os.path.realpath(given)) if given.is_symlink() and given.exists() else given
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual mode
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return given


def streamed(path: str | os.PathLike[str], *, flag: str = "") -> bool:
    """Whether an output at ``path`` is written through rather than replaced: True for a
    character device or a FIFO, False for a regular file or a name not taken yet; anything
    else (a directory, a block device, a socket) raises a TreeoptError naming it (after
    ``flag``, the option that gave it, if any).

    >>> streamed("/dev/null"), streamed("no/such/file.json")
    (True, False)
    """
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False  # not there: a new file (or a dangling symlink, replaced like a file)
    except OSError as exc:
        raise TreeoptError(f"{flag} {path}: cannot be written ({exc.strerror or exc})".strip()
                           ) from None
    if stat.S_ISREG(mode):
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    kind = ("a directory" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
    raise TreeoptError(f"{flag} {path} is {kind}, not a file; remove it or write elsewhere"
                       .strip())


def _write_through(target: Path, write: Callable[[Path], None]) -> Path:
    """``write`` into a private temporary file, then its bytes into the device or FIFO."""
    with tempfile.TemporaryDirectory(prefix="treeopt-") as folder:
        tmp = Path(folder) / target.name
        write(tmp)
        with open(tmp, "rb") as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return target


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def dumps(obj: Any, indent: int = 0) -> str:
    """JSON with one key per line, but short lists of numbers (paths, rows) kept on one line.

    >>> print(dumps({"order": [[0], [0, 0]], "caps": {"max_nodes": 2}}))
    {
     "order": [[0], [0, 0]],
     "caps": {
      "max_nodes": 2
     }
    }
    """
    pad = " " * (indent + 1)
    if isinstance(obj, dict) and obj:
        items = [f"{pad}{json.dumps(str(k))}: {dumps(v, indent + 1)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(obj, list) and obj and not _is_flat(obj):
        items = [f"{pad}{dumps(v, indent + 1)}" for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    try:
        return json.dumps(obj, allow_nan=False)
    except ValueError:  # NaN or infinity: not JSON, and no reader of ours would take it back
        raise TreeoptError(f"cannot write {obj!r} as JSON: it holds NaN or infinity") from None


def _is_flat(values: list[Any]) -> bool:
    """Scalars, or lists of scalars: printed on one line."""
    return all(not isinstance(v, (dict, list)) or
               (isinstance(v, list) and all(not isinstance(x, (dict, list)) for x in v))
               for v in values)


def write_json(path: str | os.PathLike[str], obj: Any) -> Path:
    """Write ``obj`` as JSON to ``path`` atomically."""
    return write_text_atomic(path, dumps(obj) + "\n")


def read_text(path: str | os.PathLike[str], *, expected: str = "a text file") -> str:
    """A UTF-8 file's text; a missing, binary or unreadable file raises a TreeoptError naming it
    and saying what was ``expected`` there."""
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8-sig")  # a byte-order mark, if any, is not text
    except FileNotFoundError:
        raise TreeoptError(f"{p}: no such file") from None
    except (IsADirectoryError, UnicodeDecodeError, PermissionError):
        raise TreeoptError(f"{p}: not {expected}") from None


def read_json(path: str | os.PathLike[str]) -> Any:
    """Parse a JSON file; a missing or malformed file raises a TreeoptError naming it."""
    text = read_text(path, expected="a readable JSON text file")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TreeoptError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def check_format(obj: Any, expected: str, source: str) -> dict[str, Any]:
    """Return ``obj`` if it is a dict whose ``format`` tag equals ``expected``.

    >>> check_format({"format": "treeopt.growth/1"}, "treeopt.growth/1", "g.json")
    {'format': 'treeopt.growth/1'}
    """
    if not isinstance(obj, dict):
        raise TreeoptError(f"{source}: expected a JSON object with format {expected!r}")
    tag = obj.get("format")
    if tag is None:
        raise TreeoptError(f"{source}: missing 'format' tag (expected {expected!r})")
    if tag != expected:
        raise TreeoptError(f"{source}: format is {tag!r}, expected {expected!r}")
    return obj


def read_tagged_json(path: str | os.PathLike[str], expected: str) -> dict[str, Any]:
    """Read a JSON file and check its format tag."""
    return check_format(read_json(path), expected, str(path))
