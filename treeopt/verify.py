"""Verify a tree by decoding for real: measured acceptance and tokens/s beside the prediction.

Both tree and autoregressive decoding run through the same loop, after one warm-up run each.
Under greedy verification the two outputs must be identical token for token; a rank trace, when
given, predicts the mean accepted length (E[L]) that the measurement is compared with.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from treeopt.errors import TreeoptError
from treeopt.trace import RankTrace
from treeopt.tree import Tree

if TYPE_CHECKING:
    from treeopt.decode import DecodeConfig

VERIFY_FORMAT = "treeopt.verify/1"


def check_tree_for(tree: Tree, *, num_heads: int, trace: RankTrace | None = None,
                   source: str = "--tree") -> None:
    """Raise when the tree is deeper than the heads or uses ranks beyond the recorded top-k."""
    if tree.size == 0:
        raise TreeoptError(f"{source}: the tree is empty")
    if tree.depth > num_heads:
        raise TreeoptError(f"{source}: the tree has depth {tree.depth} but there are only "
                           f"{num_heads} heads")
    if trace is not None:
        if tree.depth > trace.heads:
            raise TreeoptError(f"{source}: the tree has depth {tree.depth} but the trace "
                               f"records {trace.heads} heads")
        if tree.max_rank >= trace.top_k:
            raise TreeoptError(f"{source}: the tree uses rank {tree.max_rank}, beyond the "
                               f"trace's recorded top-{trace.top_k}")


def verify(model: Any, heads: Any, tree: Tree, prompts: Sequence[Sequence[int]], *,
           config: DecodeConfig | None = None, trace: RankTrace | None = None,
           ) -> dict[str, Any]:
    """Decode every prompt with the tree and autoregressively; return the report (JSON-ready)."""
    from treeopt.decode import DecodeConfig, autoregressive, generate
    from treeopt.decode_stats import combine

    config = config or DecodeConfig()
    check_tree_for(tree, num_heads=heads.config.num_heads, trace=trace)
    if trace is not None and trace.head_kind not in (None, heads.config.kind):
        raise TreeoptError(f"--trace was recorded with {trace.head_kind} heads, these are "
                           f"{heads.config.kind} heads")
    warm = DecodeConfig(**{**config.__dict__, "max_new_tokens": min(8, config.max_new_tokens)})
    generate(model, heads, tree, prompts[0], config=warm)
    autoregressive(model, prompts[0], config=warm)
    tree_runs = [generate(model, heads, tree, p, config=config) for p in prompts]
    ar_runs = [autoregressive(model, p, config=config) for p in prompts]
    tree_stats = combine([r.stats for r in tree_runs])
    ar_stats = combine([r.stats for r in ar_runs])
    report: dict[str, Any] = {
        "format": VERIFY_FORMAT, "tree": {"size": tree.size, "depth": tree.depth,
                                          "choices": tree.as_choices()},
        "heads": heads.config.kind, "mode": config.mode, "prompts": len(prompts),
        "max_new_tokens": config.max_new_tokens,
        "tree_decoding": tree_stats.to_dict(), "autoregressive": ar_stats.to_dict(),
        "speedup": (tree_stats.tokens_per_s / ar_stats.tokens_per_s
                    if ar_stats.tokens_per_s else None),
    }
    if config.mode == "greedy":
        mismatched = [i for i, (a, b) in enumerate(zip(tree_runs, ar_runs, strict=True))
                      if a.tokens != b.tokens]
        report["outputs_match"] = not mismatched
        report["mismatched_prompts"] = mismatched
    if trace is not None:
        report["predicted"] = _prediction(tree, trace, tree_stats.mean_accept_length)
    return report


def _prediction(tree: Tree, trace: RankTrace, measured: float) -> dict[str, Any]:
    from treeopt.simulate import simulate, step_lengths

    sim = simulate(tree, trace)
    predicted = float(sim.mean_accept_length)
    out = {"mean_accept_length": predicted, "stderr": float(sim.stderr),
           "trace_positions": trace.positions, "measured": measured,
           "relative_difference": (measured - predicted) / predicted}
    steps = step_lengths(tree, trace)
    if steps is not None:
        per_step = float(np.mean(steps))
        out["per_step"] = {"mean_accept_length": per_step, "steps": int(steps.size),
                           "relative_difference": (measured - per_step) / per_step}
    return out
