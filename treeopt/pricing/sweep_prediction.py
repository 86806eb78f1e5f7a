"""A sweep point's prediction: the step-cost model's tokens/s and speed-up of a tree at a batch
size, with E[L] as a live sweep measures it (no torch: the app prices sweeps with it)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from treeopt.errors import TreeoptError
from treeopt.model.growth import Growth
from treeopt.model.simulation import (
    batch_window_accept_length,
    continuous_window_accept_length,
    simulate,
)
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.pricing.costs import StepCosts
from treeopt.pricing.drafted import longest_of, step_drafts, step_seconds, window_longest
from treeopt.pricing.throughput import growth_expected_accept_length, price_tree


def sweep_accept_length(tree: Tree, trace: RankTrace, batch: int, *,
                        continuous: bool = False) -> float:
    """E[L] of ``tree`` as a sweep point at ``batch`` measures it: the trace's per-step walk, at
    batch b > 1 counted over the steady window — of each group of b sequences
    (:func:`~treeopt.model.simulation.batch_window_accept_length`), or with ``continuous`` batching
    of b rows that each take the next sequence (:func:`~treeopt.model.simulation.
    continuous_window_accept_length`); the pooled walk where the trace has fewer than b
    sequences."""
    window = (continuous_window_accept_length if continuous else batch_window_accept_length)(
        tree, trace, batch)  # batch 1: the pooled walk itself
    return window if window is not None else simulate(tree, trace, per_step=True).mean_accept_length


class Prediction(NamedTuple):
    """What the step-cost model predicts for a sweep point."""

    tokens_per_s: float
    speedup: float
    accept_length: float  # the E[L] it was priced with (at batch > 1: the steady window's)


def predict(tree: Tree, growth: Growth, costs: StepCosts, trace: RankTrace | None,
            batch: int, *, continuous: bool = False, drafted: bool = False) -> Prediction:
    """Predicted tokens/s and speed-up of ``tree`` at ``batch`` (E[L]: the trace walked step
    by step when there is one — at batch b > 1 through the steady window the sweep measures,
    its sequences b at a time, or through b rows of ``continuous`` batching — else the growth's
    values summed over the tree's nodes). ``drafted``: ``tree`` is a lookup drafter's chain
    verified only as far as it was drafted, each step priced at its size as ``select
    --drafted-only`` prices it, the sizes and E[L] those of the run the point decodes
    (:func:`_drafted_run`): at b > 1 the steady window's E[L], which weights every row alike and
    sees more than the pooled walk (on SmolLM2's trie chains of 4 and 8 nodes, 6–12% more), and
    the longest draft of the window's own rows at each step (where rows drawn independently, as
    select draws them for a serving load, priced the trie's 4- and 8-token chains at batch 4
    5–7% low)."""
    if drafted and not tree.is_chain:
        raise TreeoptError(f"a tree of {tree.size} nodes that is no top-1 chain: only a lookup "
                           "drafter's chain is verified as far as it was drafted")
    if drafted and trace is not None and tree.size:
        return _drafted_run(tree, costs, trace, batch, continuous=continuous)
    if trace is not None:
        ell = sweep_accept_length(tree, trace, batch, continuous=continuous)
    else:
        ell = growth_expected_accept_length(growth, tree)
    tree_tps, ar_tps = price_tree(tree, verify=costs.verify, draft=costs.draft,
                                  overhead=costs.overhead, batch=batch,
                                  context=costs.context(), expected_accept_length=ell)
    return Prediction(tree_tps, tree_tps / ar_tps, ell)


def _drafted_run(tree: Tree, costs: StepCosts, trace: RankTrace, batch: int, *,
                 continuous: bool) -> Prediction:
    """A chain verified as drafted, priced over the run of the trace's own sequences that the
    sweep point decodes: E[L] and the steps' longest drafts M from its steady window
    (:func:`~treeopt.pricing.drafted.window_longest`; rows drawn independently, as select prices
    them, where the trace has fewer sequences than rows)."""
    depth, context = tree.depth, costs.context()
    p = window_longest(depth, trace, batch, continuous=continuous)
    if p is None:
        p = longest_of(step_drafts(depth, trace)[1], depth, batch)
    priced = {"verify": costs.verify, "draft": costs.draft, "overhead": costs.overhead,
              "batch": batch, "context": context}
    ell = sweep_accept_length(tree, trace, batch, continuous=continuous)
    rate = batch * ell / float(step_seconds(p, **priced).sum())
    plain = batch / float(step_seconds(np.ones(1), **priced).sum())
    return Prediction(rate, rate / plain, ell)


__all__ = ["Prediction", "predict", "sweep_accept_length"]
