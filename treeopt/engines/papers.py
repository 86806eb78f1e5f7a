"""The papers' reference code as an engine: Medusa's ``medusa_choices``, Hydra's
``hydra_choices`` (grounded heads), Sequoia's growmap and EAGLE-2's ``EaModel`` keywords.

| code                      | reads                                   | read from                    |
|---------------------------|-----------------------------------------|------------------------------|
| Medusa (FasterDecoding)   | ``medusa_choices``, top-10 per head     | medusa/model/utils.py,       |
|                           |                                         | last commit 2024-04-18       |
| Hydra (zankner)           | ``hydra_choices``, grounded heads       | hydra/model/utils.py,        |
|                           |                                         | last commit 2024-02-18       |
| Sequoia (Infini-AI-Lab)   | growmap JSON                            | main                         |
| EAGLE-2 (SafeAILab)       | ``top_k``, ``depth``, ``total_token``   | eagle/model/cnets.py         |
|                           |                                         | (``Model.topK_genrate``)     |

>>> choices_text(Tree.from_choices([[0], [1], [0, 0]]))
'[[0], [1], [0, 0]]'
"""

from __future__ import annotations

import json
from typing import Any

from treeopt.engines.rules import (
    NONEMPTY,
    Engine,
    Rule,
    contiguous,
    first_gap,
    missing_sibling,
    path_name,
    rank_below,
    siblings,
)
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.model.tree import Tree

MEDUSA_TOPK = 10  # Medusa's reference code drafts the top-10 candidates of every head


def _grounded(tree: Tree) -> str | None:
    """Hydra's grounded heads: children 0..m-1, and the siblings that have children come first."""
    has_children = {p[:-1] for p in tree.paths}
    for parent, ranks in siblings(tree).items():
        missing = missing_sibling(parent, ranks, "Hydra drafts the children of a node as the "
                                                 "top-m of its head")
        if missing:
            return missing
        expanded = [r for r in ranks if parent + (r,) in has_children]
        gap = first_gap(expanded)
        if gap is not None:
            return (f"{path_name(parent + (expanded[-1],))} has children but "
                    f"{path_name(parent + (gap,))} has none: Hydra extends the first e children "
                    f"of a node, so they would be drafted below {path_name(parent + (gap,))}")
    return None


MEDUSA_RANKS = rank_below(MEDUSA_TOPK, f"the reference code keeps only the top-{MEDUSA_TOPK} "
                                       "candidates of each head")
GROUNDED = Rule("Hydra grounded heads", _grounded, "--constraint grounded")
SEQUOIA_TOPK = contiguous("a growmap expands the children of every node as ranks 0..m-1")

ENGINES: tuple[Engine, ...] = (
    Engine("medusa", None, "Medusa reference code (medusa_choices)",
           "FasterDecoding/Medusa, last commit 2024-04-18 (medusa/model/utils.py)",
           (NONEMPTY, MEDUSA_RANKS)),
    Engine("hydra", None, "Hydra reference code, grounded heads (hydra_choices)",
           "zankner/Hydra, last commit 2024-02-18 (hydra/model/utils.py, grounded proposal)",
           (NONEMPTY, GROUNDED)),
    Engine("growmap", None, "Sequoia growmap", "Infini-AI-Lab/Sequoia main",
           (NONEMPTY, SEQUOIA_TOPK)),
)


def choices_text(tree: Tree) -> str:
    """The choices list Medusa's ``medusa_choices`` and Hydra's ``hydra_choices`` hold."""
    return json.dumps(tree.as_choices())


def growmap(tree: Tree) -> dict[str, Any]:
    """Sequoia-style growmap: node 0 is the root, nodes in canonical (breadth-first) order.

    >>> g = growmap(Tree.from_choices([[0], [1], [0, 0]]))
    >>> g["roots"], g["branches"], g["Successors"], g["depth"], g["size"]
    ([[0], [1, 2], [3]], [[2], [1, 0], [0]], [[1, 2], [3], [], []], [0, 1, 1, 2], 4)
    """
    succ: list[list[int]] = [[] for _ in range(tree.num_tokens)]
    for i, parent in enumerate(tree.parents.tolist()):
        succ[parent + 1].append(i + 1)
    depth = tree.position_offsets.tolist()
    roots = [[i for i in range(tree.num_tokens) if depth[i] == d] for d in range(tree.depth + 1)]
    return {"roots": roots,
            "branches": [[len(succ[i]) for i in level] for level in roots],
            "Successors": succ,
            "mask": tree.attention_mask.astype(int).tolist(),
            "depth": depth,
            "size": tree.num_tokens}


def growmap_parents(successors: list[list[int]]) -> list[int]:
    """The parent of every draft node of a growmap's ``Successors`` (-1: the root); anything
    but each node 1..size-1 named exactly once is refused."""
    parent = {int(c): i for i, kids in enumerate(successors) for c in kids}
    if sorted(parent) != list(range(1, len(successors))):
        raise TreeoptError("growmap Successors must name every node 1..size-1 exactly once")
    return [parent[i] - 1 for i in range(1, len(successors))]


def eagle2_kwargs(s: DynamicSettings) -> dict[str, int]:
    """EAGLE-2's ``EaModel.from_pretrained`` keywords for dynamic settings ``s``: ``top_k``,
    ``depth`` (expansions after the first level: steps − 1) and ``total_token`` (the verified
    tokens, the root included: its drafter keeps ``total_token − 1`` nodes of the pool by
    cumulative log-probability). Read from ``Model.topK_genrate`` in ``eagle/model/cnets.py``,
    not checked against a run of it.

    >>> eagle2_kwargs(DynamicSettings(4, 3, 16))
    {'top_k': 4, 'depth': 2, 'total_token': 16}
    """
    return {"top_k": s.topk, "depth": s.steps - 1, "total_token": s.draft_tokens}
