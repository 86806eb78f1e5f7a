"""The types of the engines' registry, and the tree rules more than one engine shares.

A :class:`Rule` is a check (the problem in words, or ``None``) and the ``treeopt grow`` flags
whose trees always keep it. An :class:`Engine` is an export target: the rules, the versions they
were read from, and what a user must know beside them. Each engine module
(:mod:`treeopt.engines.vllm`, :mod:`treeopt.engines.trtllm`, :mod:`treeopt.engines.papers`)
holds its own entries; :mod:`treeopt.engines.registry` lists them all. A :class:`Controller` is
an engine's adaptive step controller (which versions decide the draft length so, read where);
an :class:`EngineFile` is a file an engine reads and the flags that launch it with the file.

>>> contiguous("why").problem(Tree.from_choices([[0], [2]]))
'[2] is there without [1]: why'
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from treeopt.model.tree import Path, Tree


@dataclass(frozen=True)
class Rule:
    """One thing an engine assumes of a tree: ``problem(tree)`` says how a tree breaks it."""

    name: str
    problem: Callable[[Tree], str | None]
    grow_flags: str  # the `treeopt grow` flags whose trees always keep the rule


@dataclass(frozen=True)
class Engine:
    """An export target: which engine reads it, checked against which versions, and its rules."""

    format: str
    draft: str | None  # the draft type the entry is for; None: any
    engine: str
    versions: str  # the engine versions whose source the rules were checked against
    rules: tuple[Rule, ...]
    notes: tuple[str, ...] = ()  # what a user must know beside the rules (deprecations, flags)

    @property
    def label(self) -> str:
        """The export flags that pick this entry."""
        return self.format + (f" --draft {self.draft}" if self.draft else "")

    def problems(self, tree: Tree) -> list[str]:
        """Each broken rule as ``<problem>; grow with <flags>`` (empty when the engine can)."""
        out = []
        for rule in self.rules:
            problem = rule.problem(tree)
            if problem:
                out.append(f"{problem} (grow with {rule.grow_flags})" if rule.grow_flags
                           else problem)
        return out


# ----- the rules ------------------------------------------------------------------------------
def siblings(tree: Tree) -> dict[Path, list[int]]:
    """Parent path → its children's ranks, ascending."""
    groups: dict[Path, list[int]] = {}
    for p in tree.paths:
        groups.setdefault(p[:-1], []).append(p[-1])
    return {parent: sorted(ranks) for parent, ranks in groups.items()}


def first_gap(ranks: list[int]) -> int | None:
    """The smallest rank missing below the largest (``None`` when ranks are 0..m-1)."""
    return next((r for r in range(len(ranks)) if ranks[r] != r), None)


def path_name(path: Path) -> str:
    return str(list(path)) if path else "the root"


def _nonempty(tree: Tree) -> str | None:
    return None if tree.size else "the tree is empty: every engine needs at least one draft node"


def rank_below(k: int, why: str) -> Rule:
    def problem(tree: Tree) -> str | None:
        if tree.size and tree.max_rank >= k:
            worst = next(p for p in tree.paths if p[-1] == tree.max_rank)
            return f"{path_name(worst)} has rank {tree.max_rank}, but {why} (ranks 0..{k - 1})"
        return None

    return Rule(f"ranks below {k}", problem, f"--max-rank {k}")


def depth_at_most(d: int, why: str) -> Rule:
    def problem(tree: Tree) -> str | None:
        return f"the tree is {tree.depth} deep, but {why}" if tree.depth > d else None

    return Rule(f"depth at most {d}", problem, f"--max-depth {d}")


def contiguous(why: str, *, depth_one_only: bool = False) -> Rule:
    """The children of a node (of the root only, with ``depth_one_only``) are ranks 0..m-1."""

    def problem(tree: Tree) -> str | None:
        for parent, ranks in siblings(tree).items():
            if depth_one_only and parent:
                continue
            missing = missing_sibling(parent, ranks, why)
            if missing:
                return missing
        return None

    return Rule("children ranked 0..m-1", problem, "--constraint contiguous")


def missing_sibling(parent: Path, ranks: list[int], why: str) -> str | None:
    """The problem of siblings ``ranks`` (ascending) under ``parent`` that are not 0..m-1."""
    gap = first_gap(ranks)
    if gap is None:
        return None
    return f"{path_name(parent + (ranks[-1],))} is there without {path_name(parent + (gap,))}: {why}"


@dataclass(frozen=True)
class Controller:
    """One engine's step controller as treeopt replays it (:mod:`treeopt.adaptive.policies`)."""

    engine: str
    policy: str  # the class in treeopt.adaptive.policies
    versions: str  # the releases that decide exactly so
    source: str  # where the rule was read
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class EngineFile:
    """The text of an engine's file and the flags that launch the engine with it."""

    engine: str
    text: str
    flags: str


NONEMPTY = Rule("at least one node", _nonempty, "")
