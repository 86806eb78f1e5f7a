"""A model drafter and prompt lookup in one verified tree: the hybrid drafter ``<kind>+lookup``.

The candidates at a node are prompt lookup's token first, then the model drafter's candidates in
its own order:

- rank 0 is the lookup's token where the node lies on the lookup's chain — the root, or a node
  whose path below the root is the chain's first j tokens — namely the chain's next token; any
  other rank-0 node has no candidate (a hole, token -1: verified, never accepted);
- rank r ≥ 1 is the model drafter's candidate of rank r − 1 there, except that the model's copy
  of the lookup's token is a hole (so one token is never accepted down two branches).

So the tree's all-zero spine is prompt lookup's chain (:mod:`treeopt.drafters.prompt_lookup`,
the Hugging Face and vLLM rule), and every other branch is the model drafter's tree, read by the
model with the chain's tokens as its path. The lookup's chain may run deeper than the model
drafts: below the model's depth the tree holds the spine alone.

The joint rank trace is a function of the two drafters' own traces over the same stream
(:func:`hybrid_ranks`): where the true path has followed the chain through depth k, the rank is
0; elsewhere it is the model's rank + 1 (or -1). Growth, simulation and selection then apply
unchanged, and expected accepted length stays additive over nodes, so grown trees are exact.
No engine runs such a tree today (see docs/drafters.md); treeopt measures what it would gain.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch

from treeopt.decoding.drafter import Drafter
from treeopt.decoding.plan import tree_plan
from treeopt.drafters.prompt_lookup import NO_CANDIDATE, LookupState, PromptLookup
from treeopt.errors import TreeoptError
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.registry.kinds import HYBRID_SUFFIX, KINDS, drafter_kind

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan


def hybrid_ranks(model: npt.ArrayLike, chain: npt.ArrayLike, *, top_k: int,
                 ) -> npt.NDArray[np.int16]:
    """The hybrid's ranks ``[n, max(K_model, K_chain)]`` from the model drafter's ranks
    ``[n, K_model]`` and prompt lookup's chain ranks ``[n, K_chain]`` at the same positions:
    0 where the chain holds the true token at this depth and every depth above; else the model's
    rank + 1, -1 where that is not below ``top_k`` (or the model drafts no such depth).

    >>> hybrid_ranks([[0, 2], [1, -1]], [[0, -1, 0], [-1, 0, 0]], top_k=4).tolist()
    [[0, 3, -1], [2, -1, -1]]
    """
    m, c = np.asarray(model, dtype=np.int64), np.asarray(chain, dtype=np.int64)
    if m.shape[0] != c.shape[0]:
        raise TreeoptError(f"hybrid ranks: the model's trace has {m.shape[0]} positions, the "
                           f"chain's {c.shape[0]}; they must be the same positions")
    depth = max(m.shape[1], c.shape[1])
    shifted = np.full((m.shape[0], depth), -1, dtype=np.int64)
    shifted[:, : m.shape[1]] = np.where((m >= 0) & (m + 1 < top_k), m + 1, -1)
    followed = np.zeros((c.shape[0], depth), dtype=bool)
    followed[:, : c.shape[1]] = np.cumprod(c == 0, axis=1).astype(bool)
    return np.where(followed, 0, shifted).astype(np.int16)


def hybrid_trace(model: RankTrace, chain: RankTrace) -> RankTrace:
    """The hybrid's trace from a model drafter's trace and a prompt-lookup trace of the same
    prompts and continuations (as calibration of :class:`HybridDrafter` records it): each
    sequence keeps the positions both traces have (a deeper trace has fewer per sequence)."""
    for trace, name in ((model, "model"), (chain, "prompt-lookup")):
        if not trace.meta.get("sequence_positions"):
            raise TreeoptError(f"hybrid trace: the {name} trace records no "
                               f"'sequence_positions', so its sequences cannot be aligned")
    kind = str(model.head_kind or "")
    if drafter_kind(kind, source="hybrid trace: the model trace's kind").lookup:
        raise TreeoptError(f"hybrid trace: the model trace is of {kind!r}, an n-gram drafter")
    chained = KINDS.get(str(chain.head_kind or ""))
    if chained is None or not (chained.chain and chained.lookup) or chained.hybrid:
        raise TreeoptError(f"hybrid trace: the chain trace is of {chain.head_kind!r}, not "
                           f"prompt-lookup")
    for key in ("source", "max_new_tokens", "sampling", "sequences"):
        if model.meta.get(key) != chain.meta.get(key):
            raise TreeoptError(f"hybrid trace: the traces differ in {key} "
                               f"({model.meta.get(key)!r} and {chain.meta.get(key)!r}); both "
                               f"must rank the same continuations of the same prompts")
    counts_m, counts_c = model.meta["sequence_positions"], chain.meta["sequence_positions"]
    if len(counts_m) != len(counts_c):
        raise TreeoptError(f"hybrid trace: {len(counts_m)} sequences in the model trace, "
                           f"{len(counts_c)} in the chain trace")
    kept = [min(a, b) for a, b in zip(counts_m, counts_c, strict=True)]
    pick_m = _first_rows(counts_m, kept)
    pick_c = _first_rows(counts_c, kept)
    ranks = hybrid_ranks(model.ranks[pick_m], chain.ranks[pick_c], top_k=model.top_k)
    heads = dict(model.meta.get("heads_config") or {})
    meta = {**model.meta, "head_kind": kind + HYBRID_SUFFIX, "num_heads": ranks.shape[1],
            "sequence_positions": kept, "positions": int(sum(kept)),
            "heads_config": {**heads, "kind": kind + HYBRID_SUFFIX, "num_heads": ranks.shape[1],
                             "min_match": chain.meta.get("heads_config", {}).get("min_match", 1),
                             "max_match": chain.meta.get("heads_config", {}).get("max_match", 3)}}
    return RankTrace(ranks, meta)


def _first_rows(counts: list[int], kept: list[int]) -> npt.NDArray[np.int64]:
    """Row indices of the first ``kept[i]`` positions of every sequence of ``counts[i]``."""
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    return np.concatenate([np.arange(s, s + k) for s, k in zip(starts, kept, strict=True)]
                          or [np.zeros(0, dtype=np.int64)])


@dataclass(frozen=True, eq=False)
class HybridLayout:
    """Where a hybrid tree's nodes come from, as token indices of the full tree: the model
    drafts the first ``model_tokens`` tokens (every node the model reaches: its depths), with
    ranks shifted down by one (``plan``); the lookup's chain fills ``spine`` (the all-zero path,
    depth 1 first); rank-0 nodes off the spine are ``holes``; ``dedupe`` nodes (rank ≥ 1 below
    a spine node or the root) lose a token equal to the chain's at depth ``dedupe_depth``."""

    model_tokens: int
    plan: TreePlan | None  # None: the model drafts nothing (every node is on the spine)
    spine: torch.Tensor
    holes: torch.Tensor
    dedupe: torch.Tensor
    dedupe_depth: torch.Tensor


@functools.lru_cache(maxsize=64)
def hybrid_layout(tree: Tree, model_depth: int, device: str) -> HybridLayout:
    """The :class:`HybridLayout` of ``tree`` for a model drafter of ``model_depth`` depths;
    a tree with a model node (rank ≥ 1) deeper than that is refused.

    >>> lay = hybrid_layout(Tree.from_choices([[0], [1], [0, 0], [0, 1], [1, 0]]), 2, "cpu")
    >>> lay.spine.tolist(), lay.holes.tolist(), lay.dedupe.tolist(), lay.dedupe_depth.tolist()
    ([1, 3], [5], [2, 4], [0, 1])
    """
    paths = tree.paths
    deep = [p for p in paths if len(p) > model_depth and p[-1] > 0]
    if deep:
        raise TreeoptError(f"a hybrid tree's nodes deeper than its model drafter's {model_depth} "
                           f"depths must lie on the lookup's chain (rank 0 all the way), not "
                           f"{list(deep[0])}")
    spine = [i + 1 for i, p in enumerate(paths) if not any(p)]
    holes = [i + 1 for i, p in enumerate(paths) if p[-1] == 0 and any(p)]
    dedupe = [(i + 1, len(p) - 1) for i, p in enumerate(paths) if p[-1] > 0 and not any(p[:-1])]
    shallow = sum(1 for p in paths if len(p) <= model_depth)
    plan = _shifted_plan(tree.prefix(shallow), device) if shallow else None

    def long(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=device)

    return HybridLayout(shallow + 1, plan, long(spine), long(holes),
                        long([i for i, _ in dedupe]), long([d for _, d in dedupe]))


def _shifted_plan(tree: Tree, device: str) -> TreePlan:
    """``tree``'s plan with every rank r ≥ 1 drafted as the model's rank r − 1 (rank 0: the
    model's top candidate, replaced by the chain's token or a hole)."""
    plan = tree_plan(tree, device)
    levels = tuple(replace(lv, ranks=(lv.ranks - 1).clamp_min(0),
                           width=max(1, int((lv.ranks - 1).clamp_min(0).max()) + 1))
                   for lv in plan.levels)
    return replace(plan, levels=levels, ranks=(plan.ranks - 1).clamp_min(0))


class HybridDrafter(Drafter):
    """``model``'s tree with ``lookup``'s chain at rank 0 (see the module docstring)."""

    def __init__(self, model: Drafter, lookup: PromptLookup) -> None:
        super().__init__()
        if model.kind.lookup:
            raise TreeoptError(f"a hybrid joins prompt lookup to a model drafter, not to "
                               f"{model.kind.title}")
        self.model, self.lookup = model, lookup
        self.kind = drafter_kind(model.kind.name + HYBRID_SUFFIX)
        depth = max(model.config.num_heads, lookup.config.num_heads)
        self.config = replace(model.config, kind=self.kind.name, num_heads=depth,
                              min_match=lookup.rule.min_n, max_match=lookup.rule.max_n)

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.model.feature_layers

    def rank_depths(self, hidden: torch.Tensor | None, stream: torch.Tensor, *, top_k: int,
                    ) -> torch.Tensor:
        """:func:`hybrid_ranks` of the model's and the chain's ranks at every position."""
        K = self.config.num_heads
        n = stream.shape[1] - 1 - K
        if n <= 0:
            return torch.empty(stream.shape[0], 0, K, dtype=torch.int16, device=stream.device)
        model = self.model.rank_depths(hidden, stream, top_k=top_k)[:, :n]
        chain = PromptLookup(depth=K, min_n=self.lookup.rule.min_n, max_n=self.lookup.rule.max_n,
                             vocab_size=self.config.vocab_size).rank_depths(None, stream,
                                                                             top_k=top_k)
        b = stream.shape[0]  # every row's positions at once: the rule is per position
        joint = hybrid_ranks(model.reshape(b * n, -1).cpu().numpy(),
                             chain.reshape(b * n, K).cpu().numpy(), top_k=top_k)
        return torch.from_numpy(joint.reshape(b, n, K)).to(stream.device)

    def start(self, *, batch: int, capacity: int) -> tuple[Any, LookupState]:
        return (self.model.start(batch=batch, capacity=capacity),
                self.lookup.start(batch=batch, capacity=capacity))

    def advance(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                count: torch.Tensor, next_root: torch.Tensor, state: tuple[Any, LookupState],
                ) -> tuple[torch.Tensor, tuple[Any, LookupState]]:
        features, model_state = self.model.advance(hidden, tokens, index, count, next_root,
                                                   state[0])
        self.lookup.advance(hidden, tokens, index, count, next_root, state[1])
        return features, (model_state, state[1])

    def prime(self, state: tuple[Any, LookupState]) -> None:
        self.model.prime(state[0])

    def take_row(self, state: tuple[Any, LookupState], row: int,
                 new: tuple[Any, LookupState]) -> tuple[Any, LookupState]:
        return (self.model.take_row(state[0], row, new[0]),
                self.lookup.take_row(state[1], row, new[1]))

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: tuple[Any, LookupState] | None = None) -> torch.Tensor:
        """The model's tree drafted with the chain's tokens fixed along the spine, then the
        holes: rank-0 nodes off the chain, and the model's copies of the chain's tokens."""
        if state is None:
            raise TreeoptError("a hybrid drafts from its live state (start, then advance)")
        tree, device = plan.tree, root.device
        lay = hybrid_layout(tree, self.model.config.num_heads, str(device))
        b = root.shape[0]
        chain = torch.full((b, max(tree.depth, 1)), NO_CANDIDATE, dtype=torch.long)
        for r, row in enumerate(state[1].rows):
            proposed = row.propose(tree.depth)
            if proposed:
                chain[r, : len(proposed)] = torch.tensor(proposed)
        chain = chain.to(device)
        out = torch.full((b, tree.num_tokens), NO_CANDIDATE, dtype=torch.long, device=device)
        if lay.plan is not None:
            preset = torch.full((b, lay.model_tokens), NO_CANDIDATE, dtype=torch.long,
                                device=device)
            shallow = lay.spine[lay.spine < lay.model_tokens]
            preset[:, shallow] = chain[:, : shallow.shape[0]]
            out[:, : lay.model_tokens] = self.model.draft(replace(lay.plan, preset=preset),
                                                          hidden, root, state[0])
        out[:, lay.spine] = chain[:, : lay.spine.shape[0]]
        out[:, lay.holes] = NO_CANDIDATE
        copies = out[:, lay.dedupe] == chain[:, lay.dedupe_depth]
        out[:, lay.dedupe] = torch.where(copies, NO_CANDIDATE, out[:, lay.dedupe])
        out[:, 0] = root
        return out
