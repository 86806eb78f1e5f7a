"""The trees a run's steps verify, one part per source: a static tree (:class:`StaticTree`,
the empty tree being autoregressive decoding), a tree drafted afresh every step
(:class:`DynamicTree`), or a tree chosen step by step (:class:`ChosenTree`, from a
:class:`TreeSource`).

A :class:`TreeSource` is an engine's adaptive step controller
(:class:`treeopt.adaptive.live.ChainSource`): before a step it gets the step's
:class:`~treeopt.adaptive.policies.RoundState` (the step's index in this run, the rows still
running and those of the step before), after it the running rows' accepted draft tokens (the
bonus token excluded). An empty tree in such a run is an autoregressive step that still feeds
the drafter what was accepted (its :meth:`~treeopt.decoding.drafter.Drafter.draft` of the root
alone), so the next step drafts as it would have.

Every tree a run may verify is checked against the drafter (depth, ranks, dynamic drafting)
where the run starts (:func:`step_trees`), once per decode: the one place a tree meets the heads
that draft it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from treeopt.adaptive.policies import RoundState
from treeopt.decoding.plan import TreePlan, tree_plan
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from treeopt.decoding.drafter import Drafter


class TreeSource(Protocol):
    """Each step's tree, chosen as a run goes: :meth:`tree` before the step, :meth:`verified`
    after it with the accepted draft tokens of the rows that ran it (in row order)."""

    @property
    def trees(self) -> tuple[Tree, ...]:
        """Every tree it may choose (checked against the drafter, and the run's cache sized for
        the largest, where a run starts)."""
        ...

    def tree(self, state: RoundState) -> Tree: ...

    def verified(self, state: RoundState, accepted: Sequence[int]) -> None: ...


Shape = Tree | DynamicSettings | TreeSource  # what a run decodes with


class TreeMismatch(TreeoptError):
    """A tree its drafter cannot draft: deeper than its heads, ranks beyond the vocabulary, or
    dynamic drafting without an EAGLE drafter (a caller that read the tree from a file adds
    the file's name)."""


def check_tree_for_heads(tree: Tree | DynamicSettings, heads: Drafter | None) -> None:
    """Raise a :class:`TreeMismatch` unless ``heads`` can draft ``tree`` (an empty tree needs no
    heads), or draft dynamically with ``tree``'s settings."""
    if isinstance(tree, DynamicSettings):
        if heads is None or not heads.kind.dynamic:
            what = heads.kind.title if heads is not None else "no drafter"
            raise TreeMismatch(f"dynamic trees need an EAGLE drafter (EAGLE-1/2 or EAGLE-3), "
                               f"not {what}")
        return
    if tree.size and heads is None:
        raise TreeMismatch("tree decoding needs draft heads")
    if heads is not None and tree.depth > heads.config.num_heads:
        raise TreeMismatch(f"the tree has depth {tree.depth} but there are only "
                           f"{heads.config.num_heads} heads")
    if heads is not None and heads.kind.chain and tree.max_rank > 0:
        raise TreeMismatch(f"{heads.kind.title.lower()} proposes one token per depth (a chain), "
                           f"but the tree uses rank {tree.max_rank}")
    if heads is not None and tree.size and tree.max_rank >= heads.config.vocab_size:
        raise TreeMismatch(f"the tree uses rank {tree.max_rank}, beyond the vocabulary")


class StepTrees(Protocol):
    """A run's source of step trees: ``tokens`` (the most a step verifies) and ``fed`` (the
    cache slots a dynamic drafter fills besides) size the run's cache; ``drafts``: whether its
    steps draft at all."""

    tokens: int
    fed: int
    drafts: bool

    def shape(self, round: int, batch: int) -> TreePlan | DynamicSettings:
        """Step ``round``'s (0-based) tree, ``batch`` rows running."""
        ...

    def verified(self, accepted: Sequence[int]) -> None:
        """The step's accepted tokens per row (root included; 0 for stopped rows)."""
        ...


class StaticTree:
    """One tree, every step (the empty tree: autoregressive decoding)."""

    def __init__(self, tree: Tree, device: str) -> None:
        self.plan = tree_plan(tree, device)
        self.tokens, self.fed, self.drafts = tree.num_tokens, 0, tree.size > 0

    def shape(self, round: int, batch: int) -> TreePlan:
        return self.plan

    def verified(self, accepted: Sequence[int]) -> None:
        pass


class DynamicTree:
    """A tree drafted afresh every step, per row, with ``settings`` (EAGLE-2's dynamic trees)."""

    def __init__(self, settings: DynamicSettings) -> None:
        self.settings = settings
        self.tokens, self.drafts = settings.draft_tokens, True
        self.fed = settings.topk * (settings.steps - 1)

    def shape(self, round: int, batch: int) -> DynamicSettings:
        return self.settings

    def verified(self, accepted: Sequence[int]) -> None:
        pass


class ChosenTree:
    """The tree ``source`` chooses before each step, told after it what the rows accepted; a
    choice outside its ``trees`` is refused. Its largest tree sizes the run."""

    def __init__(self, source: TreeSource, device: str) -> None:
        if not source.trees:
            raise TreeoptError("a tree source with no trees to choose from")
        self.source, self.device = source, device
        self.offered = frozenset(source.trees)
        self.tokens = max(t.num_tokens for t in source.trees)
        self.fed, self.drafts = 0, True  # an empty tree still feeds the drafter
        self.previous: int | None = None  # the rows that ran the step before
        self.chosen = RoundState(0, 0)  # the step under way (set by shape)

    def shape(self, round: int, batch: int) -> TreePlan:
        self.chosen = RoundState(round, batch, self.previous)
        tree = self.source.tree(self.chosen)
        if tree not in self.offered:
            raise TreeoptError(f"round {round}: the tree source chose a tree it does not "
                               f"offer in its trees ({list(map(list, tree.paths))})")
        return tree_plan(tree, self.device)

    def verified(self, accepted: Sequence[int]) -> None:
        """The tokens each row kept of the step (:attr:`~treeopt.decoding.batch_rows.BatchRows.
        kept`: none past its budget or EOS, as a trace recorded to the run's end sees the step;
        0 for a row that did not run it)."""
        self.source.verified(self.chosen, [n - 1 for n in accepted if n])
        self.previous = self.chosen.batch


def step_trees(shape: Shape, heads: Drafter | None, device: str) -> StepTrees:
    """The step trees of a run decoding with ``shape`` on ``device``, every tree it may verify
    checked against ``heads`` (:func:`check_tree_for_heads`)."""
    if isinstance(shape, DynamicSettings):
        check_tree_for_heads(shape, heads)
        return DynamicTree(shape)
    if isinstance(shape, Tree):
        check_tree_for_heads(shape, heads)
        return StaticTree(shape, device)
    chosen = ChosenTree(shape, device)
    for t in shape.trees:
        check_tree_for_heads(t, heads)
    return chosen
