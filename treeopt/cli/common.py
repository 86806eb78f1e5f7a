"""Helpers shared by the sub-command modules: output, list flags, progress."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from treeopt.errors import TreeoptError
from treeopt.files import dumps, write_json


def emit(obj: Any, out: str | None) -> int:
    """Write ``obj`` as JSON to ``out`` (atomically) or to stdout; return exit status 0."""
    if out:
        write_json(out, obj)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(dumps(obj) + "\n")
    return 0


def add_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="FILE", help="write the JSON here instead of stdout")


def int_list(flag: str):
    """An argparse ``type`` for comma-separated positive integers, naming ``flag`` on error.

    >>> int_list("--batch")("1,2,8")
    [1, 2, 8]
    """

    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag}: expected comma-separated integers such as 1,2,4, got {text!r}") from None
        if not values or any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError(f"{flag}: expected positive integers, got {text!r}")
        return values

    return parse


def progress(iterable: Any = None, **kwargs: Any) -> Any:
    """A tqdm progress bar on stderr (disabled when stderr is not a terminal unless forced)."""
    from tqdm.auto import tqdm

    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("leave", False)
    return tqdm(iterable, **kwargs)


def require(condition: bool, message: str) -> None:
    """Raise a TreeoptError with ``message`` unless ``condition``."""
    if not condition:
        raise TreeoptError(message)
