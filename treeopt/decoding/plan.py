"""A tree's index tensors for drafting and acceptance, built once per tree and device.

Token index 0 is the root (the base model's own next token); node i of the tree's canonical order
is token index i + 1.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import torch

from treeopt.model.tree import Tree


@dataclass(frozen=True, eq=False)
class Level:
    """The nodes of one depth and the expanded parents they hang from."""

    depth: int
    nodes: torch.Tensor  # [m] token indices of this depth's nodes
    row: torch.Tensor  # [m] each node's parent, as a row of ``prev``
    ranks: torch.Tensor  # [m] each node's candidate rank under its parent
    prev: torch.Tensor  # [parents, depth] token indices root … parent of each expanded parent
    width: int  # candidates drafted per parent: the level's largest rank + 1
    # drafters with a cache of their own feed the expanded parents level by level (the root
    # with their catch-up): each parent's visibility over every parent fed since depth 1, up to
    # and including this level's (itself and its fed ancestors); empty on level 1
    parents_seen: torch.Tensor


@dataclass(frozen=True, eq=False)
class TreePlan:
    """Everything a live step indexes with, for one tree on one device."""

    tree: Tree
    levels: tuple[Level, ...]
    parent: torch.Tensor  # [n+1] parent token index of each token (-1 for the root)
    depths: torch.Tensor  # [n] depth − 1 of each node: the head that drafts it
    ranks: torch.Tensor  # [n] candidate rank of each node
    rows: torch.Tensor  # [leaves, depth+1] retrieve indices: tokens along each leaf path (0-padded)
    rows_valid: torch.Tensor  # [leaves, depth+1] bool: where ``rows`` names a token (not -1)
    offsets: torch.Tensor  # [n+1] position offset (depth) of each token, the root's 0
    visible: torch.Tensor  # [n+1, n+1] bool: token i sees token j (itself and its ancestors)
    steps: torch.Tensor  # [depth+1] 0 … depth: where each accepted token lands after the prefix
    # one step's tokens fixed before drafting, [b, n+1] (-1: the drafter's own): a hybrid's
    # n-gram chain (:mod:`treeopt.drafters.hybrid`), which deeper depths then read as the path
    preset: torch.Tensor | None = None

    def fill(self, tokens: torch.Tensor, nodes: torch.Tensor, drafted: torch.Tensor) -> None:
        """Write a level's ``drafted`` tokens ``[b, m]`` at token indices ``nodes`` ``[m]`` of
        ``tokens`` ``[b, n+1]``, less those the step's :attr:`preset` fixes.

        >>> from dataclasses import replace
        >>> p = tree_plan(Tree.from_choices([[0], [1]]), "cpu")
        >>> t = torch.zeros(1, 3, dtype=torch.long)
        >>> replace(p, preset=torch.tensor([[-1, 7, -1]])).fill(t, p.levels[0].nodes,
        ...                                                    torch.tensor([[4, 5]]))
        >>> t.tolist()
        [[0, 7, 5]]
        """
        if self.preset is not None:
            fixed = self.preset[:, nodes]
            drafted = torch.where(fixed >= 0, fixed, drafted)
        tokens[:, nodes] = drafted


def _long(a: npt.ArrayLike, device: str) -> torch.Tensor:
    return torch.tensor(np.asarray(a).tolist(), dtype=torch.long, device=device)


@functools.lru_cache(maxsize=64)
def tree_plan(tree: Tree, device: str) -> TreePlan:
    """The plan of ``tree`` on ``device`` (cached: trees are immutable and hashable).

    >>> p = tree_plan(Tree.from_choices([[0], [1], [0, 0]]), "cpu")
    >>> p.parent.tolist(), [lv.prev.tolist() for lv in p.levels]
    ([-1, 0, 0, 1], [[[0]], [[0, 1]]])
    """
    paths_tok = np.zeros((tree.num_tokens, tree.depth + 1), dtype=np.int64)  # root … self
    for i, p in enumerate(tree.parents.tolist()):
        paths_tok[i + 1] = paths_tok[p + 1]
        paths_tok[i + 1, tree.depths[i]] = i + 1
    rows = tree.retrieve_indices.reshape(-1, tree.depth + 1)
    levels = []
    fed: list[int] = []  # expanded parents below the root, in the order they are fed
    for d in range(1, tree.depth + 1):
        nodes = np.flatnonzero(tree.depths == d)
        parents, row = np.unique(tree.parents[nodes] + 1, return_inverse=True)
        if d > 1:
            fed += parents.tolist()
        seen = tree.attention_mask[np.ix_(parents, fed)] if d > 1 else np.zeros((0, 0), bool)
        levels.append(Level(d, _long(nodes + 1, device), _long(row, device),
                            _long(tree.ranks[nodes], device), _long(paths_tok[parents, :d], device),
                            int(tree.ranks[nodes].max()) + 1,
                            torch.tensor(seen.tolist(), dtype=torch.bool, device=device)))
    return TreePlan(tree, tuple(levels), parent=_long([-1, *(tree.parents + 1).tolist()], device),
                    depths=_long(tree.depths - 1, device), ranks=_long(tree.ranks, device),
                    rows=_long(rows.clip(0), device), rows_valid=_long(rows >= 0, device).bool(),
                    offsets=_long(tree.position_offsets, device),
                    visible=torch.tensor(tree.attention_mask.tolist(), dtype=torch.bool,
                                         device=device),
                    steps=torch.arange(tree.depth + 1, device=device))
