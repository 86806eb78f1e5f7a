"""A TREE argument read from a file of any kind: a growth (``size`` picks the tree), a selection
(the batch size and context pick it) or any engine's form
(:func:`treeopt.engines.forms.parse_tree`)."""

from __future__ import annotations

import json
import os
from pathlib import Path as FilePath
from typing import Any

from treeopt.engines.forms import parse_tree
from treeopt.errors import FieldError, TreeoptError
from treeopt.files import read_text
from treeopt.model.growth import Growth
from treeopt.model.tree import Tree
from treeopt.pricing.chains import drafter_record
from treeopt.pricing.contexts import pick_context
from treeopt.pricing.selection import Selection


def load_tree_arg(path: str | os.PathLike[str], *, size: int | None = None,
                  fmt: str | None = None, batch: int | None = None,
                  context: int | None = None, decoding_batch: bool = False) -> Tree:
    """Resolve a TREE argument: a growth JSON (``size`` picks T_n), a selection JSON (``batch``
    and ``context`` pick the point's tree, depth cap included), a tree JSON, or any form.

    ``batch``/``context`` given for anything but a selection, or ``size`` for anything but a
    growth, is refused: the flag would silently do nothing — unless ``decoding_batch``: the batch
    is the decoder's (``verify --batch``), which also picks a selection's point.
    """
    p = FilePath(path)
    text = read_text(p, expected="a text file holding a tree")
    kind = file_kind(text)
    if kind != "growth" and size is not None:
        raise FieldError("size", f"applies to growth files only, and {p} is not one")
    if kind != "selection" and decoding_batch:
        batch = None
    if kind != "selection" and (batch is not None or context is not None):
        raise FieldError("batch" if batch is not None else "context",
                         f"picks a point of a selection file, and {p} is not one")
    if kind == "growth":
        growth = Growth.from_json(_json(text, p), source=str(p))
        if size is None:
            raise FieldError("size", f"a growth file holds trees of 1..{growth.max_nodes} nodes; "
                             "pick one with {size} N", inline=True, where=str(p))
        return growth.tree(size)
    if kind == "selection":
        selection = Selection.from_json(_json(text, p), source=str(p))
        try:
            return selection.tree_at(batch, context)
        except FieldError as exc:
            raise exc.at(str(p)) from None
        except TreeoptError as exc:
            raise TreeoptError(f"{p}: {exc}") from None
    return parse_tree(text, fmt=fmt, source=str(p))


def picks_drafted_chain(path: str | os.PathLike[str], *, batch: int,
                        context: int | None = None) -> bool:
    """Whether ``path`` is a selection whose point at ``batch`` (and ``context``) picked a chain
    verified only as far as it was drafted (:data:`~treeopt.pricing.drafted.DRAFTED_CHAIN`)."""
    p = FilePath(path)
    text = read_text(p, expected="a text file holding a tree")
    if file_kind(text) != "selection":
        return False
    selection = Selection.from_json(_json(text, p), source=str(p))
    if batch not in selection.batches:
        return False  # load_tree_arg names the grid
    return selection.point(batch, pick_context(selection.contexts, context)).drafted


def recorded_drafter(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What a growth or selection file records of the drafter its trees were grown for
    (``kind``, ``checkpoint``, ``depth``; see :attr:`treeopt.model.growth.Growth.drafter`, and
    the heads' ``num_layers``: :func:`treeopt.pricing.chains.drafter_record`); empty for any
    other tree file."""
    p = FilePath(path)
    text = read_text(p, expected="a text file holding a tree")
    kind = file_kind(text)
    if kind == "growth":
        return drafter_record(Growth.from_json(_json(text, p), source=str(p)))
    if kind == "selection":
        recorded = _json(text, p).get("growth", {}).get("drafter")
        return dict(recorded) if isinstance(recorded, dict) else {}
    return {}


def is_selection_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a selection (whose tree depends on the batch size)."""
    text = read_text(FilePath(path), expected="a text file holding a tree")
    return file_kind(text) == "selection"


def file_kind(text: str) -> str:
    """``growth``, ``selection`` or ``tree`` (any other form): what a TREE file holds."""
    for kind in ("growth", "selection"):
        if f'"treeopt.{kind}/1"' in text:
            return kind
    return "tree"


def _json(text: str, path: FilePath) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TreeoptError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(doc, dict):
        raise TreeoptError(f"{path}: expected a JSON object")
    return doc
