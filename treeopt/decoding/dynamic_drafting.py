"""One step of dynamic drafting, batched (:mod:`treeopt.dynamic` describes the settings): the
candidate pool, the frontier of each level, and the nodes verified, as trees that differ from
row to row. Acceptance over such trees is :func:`treeopt.decoding.accept.accept_rows`.

The pool is laid out level by level (level 1's k candidates, then k² per later level, each
parent's children in rank order), so a parent always precedes its children. Every choice —
the k frontier nodes of a level, the N − 1 nodes verified — takes the best cumulative scores
with a stable sort: equal scores go to the earlier pool entry (the shallower node). The
simulation from calibration (:mod:`treeopt.dynamic.simulate`) uses the same order.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from treeopt.decoding.token_order import top_candidates


def best(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices ``[b, k]`` of the ``k`` best ``scores`` ``[b, m]``, best first; equal scores:
    the lower index first.

    >>> best(torch.tensor([[0.0, -1.0, 0.0, -0.5]]), 3).tolist()
    [[0, 2, 3]]
    """
    return torch.sort(scores, dim=-1, descending=True, stable=True).indices[:, :k]


def scored_children(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best candidate tokens ``[..., k]`` of ``logits`` ``[..., V]`` (the ranking
    rule of :func:`~treeopt.decoding.token_order.top_candidates`) and their log-probabilities."""
    tokens = top_candidates(logits, k).to(logits.device)
    logp = torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens)
    return tokens, logp


@dataclass(frozen=True, eq=False)
class Pool:
    """Every candidate of a step ``[b, P]``: its token, cumulative score, parent (a pool index;
    -1: the root) and depth (1 … S)."""

    tokens: torch.Tensor
    scores: torch.Tensor
    parent: torch.Tensor
    depth: torch.Tensor


@dataclass(frozen=True, eq=False)
class RowPlan:
    """The trees of one step, one per row, as the verify forward and acceptance index them:
    token 0 is each row's root, tokens 1 … N−1 its chosen nodes (parents before children)."""

    parent: torch.Tensor  # [b, N] parent token index (-1 for the root)
    offsets: torch.Tensor  # [b, N] depth of each token (the root's 0): its position offset
    visible: torch.Tensor  # [b, N, N] token i sees token j (itself and its ancestors)
    steps: torch.Tensor  # [S+1] 0 … S: where each accepted token lands after the prefix

    @property
    def num_tokens(self) -> int:
        return self.parent.shape[1]


def choose(pool: Pool, root: torch.Tensor, nodes: int) -> tuple[torch.Tensor, RowPlan]:
    """The ``nodes`` best candidates of every row behind its ``root`` ``[b]``: tree tokens
    ``[b, nodes+1]`` and their :class:`RowPlan`.

    >>> pool = Pool(torch.tensor([[5, 6, 7, 8]]), torch.tensor([[-0.1, -2.0, -0.5, -0.3]]),
    ...             torch.tensor([[-1, -1, 0, 0]]), torch.tensor([[1, 1, 2, 2]]))
    >>> tokens, plan = choose(pool, torch.tensor([9]), 3)
    >>> tokens.tolist(), plan.parent.tolist(), plan.offsets.tolist()
    ([[9, 5, 7, 8]], [[-1, 0, 1, 1]], [[0, 1, 2, 2]])
    """
    b, P = pool.tokens.shape
    picked = best(pool.scores, nodes).sort(dim=-1).values  # [b, n]: pool order
    slot = torch.zeros(b, P + 1, dtype=torch.long, device=root.device)  # pool index + 1 → token
    slot.scatter_(1, picked + 1, torch.arange(1, nodes + 1, device=root.device).expand(b, -1))
    parent = slot.gather(1, pool.parent.gather(1, picked) + 1)  # the root maps to token 0
    tokens = torch.cat([root[:, None], pool.tokens.gather(1, picked)], dim=1)
    parent = torch.cat([parent.new_full((b, 1), -1), parent], dim=1)
    offsets = torch.cat([parent.new_zeros(b, 1), pool.depth.gather(1, picked)], dim=1)
    depth = int(pool.depth.max())
    return tokens, RowPlan(parent, offsets, ancestry(parent, depth),
                           torch.arange(depth + 1, device=root.device))


def ancestry(parent: torch.Tensor, depth: int) -> torch.Tensor:
    """``[b, N, N]``: token i sees token j when j is i or one of its ancestors (``parent``
    ``[b, N]``, -1 at the root; trees at most ``depth`` deep)."""
    b, n = parent.shape
    up = parent.clamp_min(0)  # the root is its own parent
    visible = torch.eye(n, dtype=torch.bool, device=parent.device).expand(b, n, n).clone()
    at = torch.arange(n, device=parent.device).expand(b, n)
    for _ in range(depth):
        at = up.gather(1, at)
        visible.scatter_(2, at[..., None], True)
    return visible
