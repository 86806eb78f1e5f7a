"""The drafter at work in one run: its live state and the features it reads next, per row; each
step's tree tokens; a new prompt's state taking a row's place.

A run without heads, or with an empty static tree, drafts nothing: its step is the root alone
(autoregressive decoding). A lookup drafter (prompt lookup, an n-gram trie) leaves a node it has
no candidate for as token -1, a hole: the verifier reads it as token 0 (:func:`fill_holes`),
and acceptance never accepts it, since no model token is -1. With ``drafted_only``
(:attr:`~treeopt.decoding.config.DecodeConfig.drafted_only`), a lookup drafter's chain is
verified only as deep as some row drafted it (:func:`drafted_chain`), as Hugging Face's prompt
lookup and vLLM's ``ngram`` and ``suffix`` methods verify their drafts.
"""

from __future__ import annotations

import functools

import torch

from treeopt.decoding.drafter import Drafter, LiveState
from treeopt.decoding.dynamic_drafting import RowPlan
from treeopt.decoding.plan import TreePlan, tree_plan
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.model.tree import Tree


def fill_holes(tokens: torch.Tensor) -> torch.Tensor:
    """The tree tokens the verifier reads: each hole (-1) as token 0.

    >>> fill_holes(torch.tensor([[5, -1, 7]])).tolist()
    [[5, 0, 7]]
    """
    return tokens.clamp_min(0)


def drafted_lengths(tokens: torch.Tensor) -> torch.Tensor:
    """Each row's drafted chain length: the tokens after the root before its first hole.

    >>> drafted_lengths(torch.tensor([[5, 3, 4, -1], [5, -1, -1, -1], [5, 3, 4, 2]])).tolist()
    [2, 0, 3]
    """
    return (tokens[:, 1:] >= 0).long().cumprod(dim=1).sum(dim=1)


def drafted_chain(tokens: torch.Tensor, plan: TreePlan) -> tuple[torch.Tensor, TreePlan]:
    """A chain step cut below its holes: the root and the first m chain tokens, m the longest
    any row drafted, and the plan of that chain (``plan`` itself where no row left a hole).

    >>> p = tree_plan(Tree.chain(3), "cpu")
    >>> t, q = drafted_chain(torch.tensor([[9, 3, -1, -1], [9, -1, -1, -1]]), p)
    >>> t.tolist(), q.tree.size
    ([[9, 3], [9, -1]], 1)
    """
    m = int(drafted_lengths(tokens).max()) if tokens.shape[0] else 0
    if m == plan.tree.size:
        return tokens, plan
    return tokens[:, : m + 1], _chain_plan(m, str(tokens.device))


@functools.lru_cache(maxsize=64)
def _chain_plan(depth: int, device: str) -> TreePlan:
    """The plan of the chain of ``depth`` (the trees a cut step verifies, built once each)."""
    return tree_plan(Tree.chain(depth), device)


class Drafting:
    """``heads`` drafting a run of ``batch`` rows (``drafts``: whether its steps draft at all);
    ``h`` the features they read next (set by :meth:`prefilled`), ``state`` their live state."""

    def __init__(self, heads: Drafter | None, *, drafts: bool, batch: int,
                 capacity: int, drafted_only: bool = False) -> None:
        self.heads, self.capacity = heads, capacity
        self.drafts = drafts and heads is not None
        self.holes = self.drafts and heads.kind.lookup  # a lookup drafter leaves holes
        # chains cut below their holes: a lookup drafter's own (a hybrid's chain sits in a tree)
        self.cut = drafted_only and self.holes and not heads.kind.hybrid
        self.state: LiveState = (heads.start(batch=batch, capacity=capacity)
                                 if heads is not None else None)
        self.h = torch.zeros(0)

    def prefilled(self, hidden: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor,
                  first: torch.Tensor) -> None:
        """The features after the prompts (``ids`` ``[b, longest]``, right-padded to
        ``lengths``) and their first tokens."""
        order = torch.arange(ids.shape[1], device=ids.device)[None].expand(ids.shape[0], -1)
        self.advance(hidden, ids, order, lengths, first)

    def draft(self, root: torch.Tensor, shape: TreePlan | DynamicSettings,
              ) -> tuple[torch.Tensor, TreePlan | RowPlan]:
        """The step's tree tokens ``[b, q]`` (root first, holes -1) and the plan they are
        verified by: ``shape``'s, or, drafted dynamically, each row's own."""
        if not self.drafts:
            return root[:, None], shape
        if isinstance(shape, DynamicSettings):
            return self.heads.draft_dynamic(shape, self.h, root, self.state)
        tokens = self.heads.draft(shape, self.h, root, self.state)
        if self.cut and shape.tree.is_chain:
            return drafted_chain(tokens, shape)
        return tokens, shape

    def verifiable(self, tokens: torch.Tensor) -> torch.Tensor:
        """``tokens`` as the verifier reads them (holes filled, for a lookup drafter)."""
        return fill_holes(tokens) if self.holes else tokens

    def advance(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                count: torch.Tensor, next_root: torch.Tensor) -> None:
        """Read the tokens just accepted (``tokens[:, index]``, ``count`` of them per row, then
        ``next_root``): the features and state for the next step."""
        if not self.drafts:
            self.h, self.state = hidden[:, -1:], None
            return
        self.h, self.state = self.heads.advance(hidden, tokens, index, count, next_root,
                                                self.state)

    def finish(self, row: int, output: list[int]) -> None:
        """Row ``row``'s request has ended with ``output`` (its cut new tokens):
        :meth:`~treeopt.decoding.drafter.Drafter.finish`."""
        if self.drafts:
            self.heads.finish(self.state, row, output)

    def own_features(self) -> None:
        """The features become this run's own copy, safe to write row by row."""
        if self.drafts:
            self.h = self.h.clone()

    def take_row(self, row: int, hidden: torch.Tensor, ids: torch.Tensor, lengths: torch.Tensor,
                 first: torch.Tensor) -> None:
        """A new prompt (``ids`` ``[1, n]``, prefilled to ``hidden``, first token ``first``)
        in ``row``: its drafter state, fed up to what a step's catch-up feeds
        (:meth:`~treeopt.decoding.drafter.Drafter.prime`), takes the row's place."""
        if not self.drafts:
            return
        new = self.heads.start_row(capacity=self.capacity)
        order = torch.arange(ids.shape[1], device=ids.device)[None]
        h, new = self.heads.advance(hidden, ids, order, lengths, first, new)
        self.heads.prime(new)
        self.state = self.heads.take_row(self.state, row, new)
        self.h[row] = h[0]
