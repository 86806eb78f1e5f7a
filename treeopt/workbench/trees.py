"""The trees the app shows: the chosen drafter and tree (:class:`Choice`: select's pick by
default), its per-node view, the growths of the Trees page and a pasted tree evaluated on the
data. Which acceptance model a source supports is decided once, by
:func:`treeopt.model.acceptance.usable_method`."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from treeopt.engines.forms import parse_tree
from treeopt.errors import TreeoptError
from treeopt.model.acceptance import (
    Source,
    expected_accept_length,
    methods_for,
    node_probabilities,
    usable_method,
)
from treeopt.model.growth import Growth, grow
from treeopt.model.simulation import simulate, step_walk
from treeopt.model.step_growth import FAMILIES, GROWTH_ORDER, StepGrowth
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.pricing.selection import SELECTION_FORMAT, Point, Selection
from treeopt.workbench.numbers import accept_length_text, nodes_text, speedup_text

# what the Trees page starts with, and the tree Export and Verify use until one is chosen there
TREE_DEFAULTS = {"max_nodes": 128, "size": 64, "max_rank": 10, "constraint": "none"}
LARGEST = 256  # the largest "largest tree" the Trees page offers, and the largest size chosen
PICKED, GROWN = "select's pick", "grown on the Trees page"  # where a Choice's tree comes from


@dataclass(frozen=True)
class TreeSettings:
    """What grows a tree on the Trees page: the growth's model, caps and temperature, and the
    size taken from it."""

    size: int
    max_depth: int
    max_nodes: int = TREE_DEFAULTS["max_nodes"]
    max_rank: int = TREE_DEFAULTS["max_rank"]
    method: str = "empirical"
    constraint: str = TREE_DEFAULTS["constraint"]
    temperature: float = 0.0
    family: str = GROWTH_ORDER  # or PER_STEP_GREEDY: the trees of treeopt.model.step_growth

    def describe(self, label: str, size: int) -> str:
        """``medusa · empirical · none · greedy · 12 nodes``: the tree these settings grow."""
        decoding = ("greedy" if self.temperature == 0
                    else f"grown for sampling at T = {self.temperature:g}")
        how = self.method if self.family == GROWTH_ORDER else self.family
        return f"{label} · {how} · {self.constraint} · {decoding} · {nodes_text(size)}"


@dataclass(frozen=True)
class Choice:
    """The drafter and tree the app works on, one value kept across pages: by default the tree
    ``select`` picks for the drafter at a batch size (``source`` :data:`PICKED`), else the one
    grown on the Trees page (:data:`GROWN`); ``settings`` grow it again there."""

    drafter: str  # the data source (drafter) it is for
    batch: int | None  # the batch size it is picked for (None: nothing priced)
    tree: Tree
    description: str
    source: str
    settings: TreeSettings
    # a lookup drafter's chain verified only as far as it was drafted (select priced it so)
    drafted: bool = False

    @property
    def is_pick(self) -> bool:
        return self.source == PICKED


def pick_choice(label: str, pick: Point, *, heads: int, hardware: str = "",
                held_out: float | None = None) -> Choice:
    """``select``'s ``pick`` for drafter ``label`` (of ``heads`` heads) as a choice, with the
    Trees page settings that grow it again (a chain verified as drafted: the growth order with
    rank 0 alone); ``held_out``: its speed-up predicted for held-out prompts, the figure the
    description gives (else select's own, on the calibration prompts)."""
    drafted = pick.drafted
    ranks = [r for path in pick.tree.paths for r in path]
    settings = TreeSettings(max(pick.tree.size, 1), pick.max_depth or heads,
                            max_rank=(1 if drafted else
                                      max(TREE_DEFAULTS["max_rank"], max(ranks, default=0) + 1)),
                            family=GROWTH_ORDER if drafted else pick.family)
    figure = (f"{speedup_text(held_out)} predicted on held-out prompts" if held_out is not None
              else f"{speedup_text(pick.speedup)} predicted")
    how = " verified as drafted," if drafted else ""
    return Choice(label, pick.batch, pick.tree,
                  f"{label} · select's pick on {hardware or 'the hardware'} at batch "
                  f"{pick.batch} · {nodes_text(pick.tree.size)}, depth {pick.tree.depth},"
                  f"{how} {figure}",
                  PICKED, settings, drafted)


def default_choice(source: Source, label: str, *, pick: Point | None = None,
                   hardware: str = "", held_out: float | None = None) -> Choice:
    """The choice of drafter ``label`` before one is made: ``select``'s ``pick`` for the
    hardware measured (``held_out``: as :func:`pick_choice` takes it), else the Trees page's
    default size grown on ``source``."""
    if pick is not None:
        return pick_choice(label, pick, heads=source.heads, hardware=hardware,
                           held_out=held_out)
    settings = TreeSettings(TREE_DEFAULTS["size"], source.heads, method=usable_method(source))
    growth = grow(source, method=settings.method, max_nodes=settings.max_nodes,
                  max_rank=settings.max_rank)
    tree = growth.tree(min(settings.size, growth.max_nodes))
    return Choice(label, None, tree, settings.describe(label, tree.size), GROWN, settings)


def grown_choice(label: str, tree: Tree, settings: TreeSettings, *, batch: int | None,
                 pick: Choice | None = None) -> Choice:
    """The tree grown on the Trees page with ``settings``: still ``pick`` (select's, for this
    drafter and batch) when it is the same tree, else a choice of its own."""
    if pick is not None and pick.drafter == label and pick.tree == tree:
        return replace(pick, settings=settings)
    return Choice(label, batch, tree, settings.describe(label, tree.size), GROWN, settings)


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
    """Parse a pasted choices list (any engine form) and evaluate it on ``source``: per step
    where ``source`` is a trace that records its sequences, as the growths' curves are."""
    tree = parse_tree(text, source="pasted tree")
    heads = source.heads
    if tree.depth > heads:
        raise TreeoptError(f"pasted tree is {tree.depth} deep but the data has {heads} heads")
    if isinstance(source, RankTrace) and step_walk(tree, source) is not None:
        return tree, simulate(tree, source, per_step=True).mean_accept_length
    return tree, expected_accept_length(tree, source, method=usable_method(source, method))


def held_out_accept_length(tree: Tree, trace: RankTrace) -> float:
    """E[L] of ``tree`` on held-out ``trace``, per step (the trace walked as decoding steps
    through it) where the trace records its sequences, else position-weighted."""
    if tree.size == 0:
        return 1.0
    per_step = bool(trace.meta.get("sequence_positions"))
    return simulate(tree, trace, per_step=per_step).mean_accept_length


def families_for(source: Source, constraint: str) -> tuple[str, ...]:
    """The families of trees the Trees page can grow on ``source``: the growth order, and the
    per-step greedy growth where ``source`` is a trace recording its sequences and the trees are
    nested (not ``uniform``)."""
    walks = isinstance(source, RankTrace) and bool(source.meta.get("sequence_positions"))
    return FAMILIES if walks and constraint != "uniform" else (GROWTH_ORDER,)


def chosen_accept_length(growth: Growth, size: int, view: TreeView, *,
                         stepped: StepGrowth | None = None) -> tuple[float, str]:
    """E[L] of the tree the Trees page chose (``view``; ``size``: the size asked for) and a note
    on it: per step where the trees were grown by the per-step walk (``stepped``) or the growth
    has it, with the position-weighted figure in the note; else the view's position-weighted
    E[L]."""
    weighted = f"(position-weighted: {accept_length_text(view.expected_accept_length)})"
    if stepped is not None:
        return (float(stepped.accept_length[view.tree.size]),
                f"per step, a tree of the per-step greedy growth {weighted}")
    if growth.per_step_accept_length is None:
        return view.expected_accept_length, "position-weighted: every calibration position alike"
    return (float(growth.per_step_accept_length[min(size, growth.max_nodes)]),
            f"per step: the calibration trace walked as decoding steps through it {weighted}")


__all__ = ["GROWN", "LARGEST", "PICKED", "TREE_DEFAULTS", "Choice", "TreeSettings", "TreeView",
           "chosen_accept_length", "default_choice", "families_for", "grown_choice", "growth_pair",
           "held_out_accept_length", "imported_tree_point", "pick_choice",
           "selection_from_upload", "view_tree"]
