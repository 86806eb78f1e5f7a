"""The demo's quality numbers: repetition of greedy text, trace-predicted versus live acceptance.

Under greedy decoding a live run on a prompt emits exactly the greedy continuation, and a step
that starts at trace row t accepts ``accept_length(t)`` tokens and hands over to row
``t + accept_length(t)``. So the trace predicts both the position average E[L] (what growth
maximises) and, by walking each sequence step by step, the per-step mean a live run measures.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from treeopt.errors import TreeoptError
from treeopt.simulate import accept_lengths
from treeopt.trace import RankTrace
from treeopt.tree import Tree


def repetition_share(tokens: Sequence[int], n: int = 8) -> float:
    """Share of the n-grams of ``tokens`` that already occurred earlier in ``tokens``.

    >>> repetition_share([1, 2, 3, 1, 2, 3, 1, 2], n=3)
    0.5
    >>> repetition_share([5] * 10, n=8)
    0.6666666666666666
    """
    grams = [tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return 0.0
    seen: set[tuple[int, ...]] = set()
    repeated = 0
    for g in grams:
        repeated += g in seen
        seen.add(g)
    return repeated / len(grams)


def walk_mean(tree: Tree, trace: RankTrace, *, rows_per_sequence: int) -> float:
    """Mean accepted length per step when each sequence is decoded step by step from row 0.

    >>> tr = RankTrace(np.array([[0, 0], [1, 0], [0, -1], [-1, 0]], np.int16))
    >>> walk_mean(Tree.from_choices([[0], [0, 0]]), tr, rows_per_sequence=4)  # rows 0, 3
    2.0
    """
    if rows_per_sequence < 1 or trace.positions % rows_per_sequence:
        raise TreeoptError(f"the trace has {trace.positions} positions, not a multiple of "
                           f"{rows_per_sequence} rows per sequence")
    lengths = accept_lengths(tree, trace).reshape(-1, rows_per_sequence)  # [sequences, rows]
    steps: list[int] = []
    for row in lengths:  # a loop over sequences; each walk is a few dozen jumps
        t = 0
        while t < rows_per_sequence:
            steps.append(int(row[t]))
            t += int(row[t])
    return float(np.mean(steps))


def rows_per_sequence(trace: RankTrace) -> int:
    """Rows each calibration sequence contributed (all equal when no sequence hit EOS)."""
    seqs = int(trace.meta.get("sequences", 0))
    if seqs < 1 or trace.positions % seqs:
        raise TreeoptError(f"the trace's {trace.positions} positions do not split evenly into "
                           f"its {seqs} sequences")
    return trace.positions // seqs


def live_run(model: Any, heads: Any, tree: Tree, prompts: Sequence[Sequence[int]], *,
             max_new_tokens: int, reference: Sequence[Sequence[int]] | None = None,
             ) -> dict[str, Any]:
    """Tree-decode every prompt; pooled acceptance, time per prompt and the lossless check."""
    from treeopt.decode import DecodeConfig, generate
    from treeopt.decode_stats import combine

    config = DecodeConfig(max_new_tokens=max_new_tokens)
    generate(model, heads, tree, list(prompts[0]), config=config)  # warm-up: caches, probes
    results = [generate(model, heads, tree, list(p), config=config) for p in prompts]
    stats = combine([r.stats for r in results])
    doc: dict[str, Any] = {
        "tree_size": tree.size, "prompts": len(prompts), "max_new_tokens": max_new_tokens,
        "mean_accept_length": stats.mean_accept_length, "stderr": stats.stderr,
        "steps": stats.steps, "histogram": stats.histogram,
        "seconds_median": statistics.median(r.stats.seconds for r in results),
        "seconds_max": max(r.stats.seconds for r in results),
        "tokens_per_s": stats.tokens_per_s}
    if reference is not None:
        same = [list(r.tokens) == list(ref) for r, ref in zip(results, reference, strict=True)]
        doc["lossless"] = all(same)
        doc["lossless_prompts"] = f"{sum(same)}/{len(same)}"
    return doc


def autoregressive_run(model: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                       ) -> tuple[list[list[int]], dict[str, Any]]:
    """Plain greedy continuations of every prompt, their time and their 8-gram repetition."""
    from treeopt.decode import DecodeConfig, autoregressive

    config = DecodeConfig(max_new_tokens=max_new_tokens)
    autoregressive(model, list(prompts[0]), config=config)  # warm-up
    results = [autoregressive(model, list(p), config=config) for p in prompts]
    tokens = [list(r.tokens) for r in results]
    return tokens, {"seconds_median": statistics.median(r.stats.seconds for r in results),
                    "tokens_per_s": sum(len(t) for t in tokens)
                    / sum(r.stats.seconds for r in results),
                    "repetition_8gram": float(np.mean([repetition_share(t) for t in tokens]))}


def greedy_repetition(model: Any, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                      ) -> float:
    """Mean 8-gram repetition share of greedy continuations (batched, for reference models)."""
    from treeopt.ranks import greedy_continuations

    seqs = greedy_continuations(model, prompts, max_new_tokens=max_new_tokens)
    return float(np.mean([repetition_share(s[len(p):]) for s, p in
                          zip(seqs, prompts, strict=True)]))
