"""The trees the app shows: the chosen tree (and its default), its per-node view, the growths of
the Trees page and a pasted tree evaluated on the data. Which acceptance model a source supports
is decided once, by :func:`treeopt.value.usable_method`."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError
from treeopt.formats import parse_tree
from treeopt.grow import Growth, grow
from treeopt.selection import SELECTION_FORMAT, Point, Selection
from treeopt.tree import Tree
from treeopt.value import (
    Source,
    expected_accept_length,
    methods_for,
    node_probabilities,
    usable_method,
)

# what the Trees page starts with, and the tree Export and Verify use until one is chosen there
TREE_DEFAULTS = {"max_nodes": 128, "size": 64, "max_rank": 10, "constraint": "none"}


@dataclass(frozen=True)
class ChosenTree:
    """The tree the Export and Verify pages work on, where it came from, and for which heads."""

    tree: Tree
    description: str
    label: str  # the data source (head kind) it was grown for


def default_tree(source: Source, label: str, *, pick: Point | None = None,
                 hardware: str = "") -> ChosenTree:
    """The default tree of ``source``: the one ``select`` picks for the hardware measured
    (``pick``, the first batch size's point), else the Trees page's default size."""
    if pick is not None:
        return ChosenTree(pick.tree, f"{label} · select's pick on {hardware or 'the hardware'} "
                                     f"at batch {pick.batch} · {pick.tree.size} nodes, "
                                     f"{pick.speedup:.2f}× predicted", label)
    method = usable_method(source)
    growth = grow(source, method=method, max_nodes=TREE_DEFAULTS["max_nodes"],
                  max_rank=TREE_DEFAULTS["max_rank"])
    tree = growth.tree(min(TREE_DEFAULTS["size"], growth.max_nodes))
    return ChosenTree(tree, f"{label} · {method} · none · {tree.size} nodes", label)


def page_defaults(source: Source, pick: Point | None) -> dict[str, int]:
    """The Trees page's starting widget values: the picked tree's size and depth cap when
    ``select`` picked one, else :data:`TREE_DEFAULTS` (depth: every head)."""
    if pick is None:
        return {"size": TREE_DEFAULTS["size"], "max_depth": source.heads}
    return {"size": max(pick.tree.size, 1), "max_depth": pick.max_depth or source.heads}


@dataclass(frozen=True)
class TreeView:
    """A tree with what the Trees page shows about it."""

    tree: Tree
    probabilities: npt.NDArray[np.float64]
    expected_accept_length: float


def view_tree(tree: Tree, source: Source, *, method: str) -> TreeView:
    """Per-node acceptance probabilities and E[L] of ``tree`` under ``method``."""
    if tree.size == 0:
        return TreeView(tree, np.zeros(0), 1.0)
    prob = node_probabilities(tree, source, method=usable_method(source, method))
    return TreeView(tree, prob, 1.0 + float(prob.sum()))


def growth_pair(source: Source, *, max_nodes: int, max_depth: int | None, max_rank: int | None,
                constraint: str) -> dict[str, Growth]:
    """Growths under every model the source allows (a table has the independent one only)."""
    return {m: grow(source, method=m, max_nodes=max_nodes, max_depth=max_depth,
                    max_rank=max_rank, constraint=constraint)  # type: ignore[arg-type]
            for m in methods_for(source)}


def selection_from_upload(data: bytes, name: str) -> Selection:
    """A selection file uploaded to the app; anything else is refused, naming the file."""
    try:
        doc = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TreeoptError(f"{name}: not a JSON file ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != SELECTION_FORMAT:
        raise TreeoptError(f"{name}: not a selection (expected \"format\": "
                           f"\"{SELECTION_FORMAT}\", from treeopt select --out)")
    return Selection.from_json(doc, source=name)


def imported_tree_point(text: str, source: Source, *, method: str) -> tuple[Tree, float]:
    """Parse a pasted choices list (any engine form) and evaluate it on ``source``."""
    tree = parse_tree(text, source="pasted tree")
    heads = source.heads
    if tree.depth > heads:
        raise TreeoptError(f"pasted tree is {tree.depth} deep but the data has {heads} heads")
    return tree, expected_accept_length(tree, source, method=usable_method(source, method))


__all__ = ["TREE_DEFAULTS", "ChosenTree", "TreeView", "default_tree", "growth_pair",
           "imported_tree_point", "page_defaults", "selection_from_upload", "view_tree"]
