"""Verify a tree by decoding for real: measured acceptance and tokens/s beside the prediction.

Tree and autoregressive decoding are compared by :func:`treeopt.decoding.compare.compare`. Under
greedy verification "lossless" means the tree's output equals the model's own greedy
``generate`` token for token (:mod:`treeopt.decoding.reference`), and treeopt's autoregressive
loop is held to the same; under sampling, the tree's output equals treeopt's plain sampling with
the same seed. Beside them, the support probe's largest logit difference between treeopt's tree
step and the model's own forward, past every sliding window and chunk. A rank trace, when given,
predicts the mean accepted length (E[L], and the per-step walk) the measurement is compared with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from treeopt.decoding.compare import compare
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.drafter import Drafter
from treeopt.decoding.reference import check_comparison
from treeopt.errors import TreeoptError
from treeopt.simulate import simulate, step_walk
from treeopt.trace import RankTrace
from treeopt.tree import Tree

VERIFY_FORMAT = "treeopt.verify/1"


def check_tree_for(tree: Tree, *, num_heads: int, trace: RankTrace | None = None,
                   source: str = "--tree") -> None:
    """Raise when the tree is deeper than the heads or uses ranks beyond the recorded top-k."""
    if tree.size == 0:
        raise TreeoptError(f"{source}: the tree is empty")
    if tree.depth > num_heads:
        raise TreeoptError(f"{source}: the tree has depth {tree.depth} but there are only "
                           f"{num_heads} heads (depths the drafter drafts)")
    if trace is not None:
        if tree.depth > trace.heads:
            raise TreeoptError(f"{source}: the tree has depth {tree.depth} but the trace "
                               f"records {trace.heads} heads")
        if tree.max_rank >= trace.top_k:
            raise TreeoptError(f"{source}: the tree uses rank {tree.max_rank}, beyond the "
                               f"trace's recorded top-{trace.top_k}")


def check_trace_for(trace: RankTrace, heads: Drafter) -> None:
    """Raise when ``trace`` was recorded with another kind of drafter."""
    if trace.head_kind not in (None, heads.config.kind):
        raise TreeoptError(f"--trace was recorded with a {trace.head_kind} drafter, this one is "
                           f"{heads.config.kind}")


def verify(model: torch.nn.Module, heads: Drafter, tree: Tree,
           prompts: Sequence[Sequence[int]], *, config: DecodeConfig | None = None,
           trace: RankTrace | None = None, batch: int = 1, rounds: int = 1,
           min_seconds: float = 0.0, target_se: float = 0.0, compile: bool = False,
           progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Decode every prompt with the tree and autoregressively, ``batch`` at a time, ``rounds``
    times (and more until both were timed ``min_seconds`` and, with ``target_se``, until the
    speed-up's relative standard error was at most that); return the report (JSON-ready)."""
    config = config or DecodeConfig()
    check_tree_for(tree, num_heads=heads.config.num_heads, trace=trace)
    if trace is not None:
        check_trace_for(trace, heads)
    result = compare(model, heads, tree, prompts, config=config, batch=batch, rounds=rounds,
                     min_seconds=min_seconds, target_se=target_se, split=True, compile=compile,
                     progress=progress)
    probe = result.probe  # the decoder's, run before it decoded anything
    report: dict[str, Any] = {
        "format": VERIFY_FORMAT, "tree": {"size": tree.size, "depth": tree.depth,
                                          "choices": tree.as_choices()},
        "heads": heads.config.kind, "mode": config.mode, "prompts": len(prompts),
        "max_new_tokens": config.max_new_tokens, **result.to_dict(),
        "support_probe": {"prefix_tokens": probe.prefix, "max_abs_logit_diff": probe.max_abs_diff,
                          "tolerance": probe.tolerance}}
    check = check_comparison(model, prompts, result)
    if check is not None:  # greedy
        report["model_generate"] = check.to_dict()
        report["lossless"] = check.tree_equals_generate and not result.mismatched
    else:
        report["lossless"] = result.lossless  # sample: per seed; typical: None
    if trace is not None:  # over the positions the run decodes
        report["predicted"] = prediction(tree, trace.first_positions(config.max_new_tokens),
                                         result.tree_stats.mean_accept_length)
    return report


def prediction(tree: Tree, trace: RankTrace, measured: float) -> dict[str, Any]:
    """What ``trace`` predicts for the mean accepted length a live run ``measured``."""
    sim = simulate(tree, trace)
    predicted = float(sim.mean_accept_length)
    out = {"mean_accept_length": predicted, "stderr": float(sim.stderr),
           "trace_positions": trace.positions, "measured": measured,
           "relative_difference": (measured - predicted) / predicted}
    if step_walk(tree, trace) is not None:
        walk = simulate(tree, trace, per_step=True)
        per_step = walk.mean_accept_length
        out["per_step"] = {"mean_accept_length": per_step, "stderr": walk.stderr,
                           "steps": walk.count,
                           "relative_difference": (measured - per_step) / per_step}
    return out
