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
import numpy.typing as npt

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


def walk_steps(tree: Tree, trace: RankTrace, *, rows_per_sequence: int,
               ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Tokens and steps of each sequence when it is decoded step by step from row 0.

    A step that starts at row t accepts ``accept_length(t)`` tokens and hands over to row
    ``t + accept_length(t)``; a sequence's tokens are its rows, its steps the jumps.

    >>> tr = RankTrace(np.array([[0, 0], [1, 0], [0, -1], [-1, 0]], np.int16))
    >>> walk_steps(Tree.from_choices([[0], [0, 0]]), tr, rows_per_sequence=4)  # rows 0, 3
    (array([4]), array([2]))
    """
    if rows_per_sequence < 1 or trace.positions % rows_per_sequence:
        raise TreeoptError(f"the trace has {trace.positions} positions, not a multiple of "
                           f"{rows_per_sequence} rows per sequence")
    lengths = accept_lengths(tree, trace).reshape(-1, rows_per_sequence)  # [sequences, rows]
    tokens = np.zeros(len(lengths), np.int64)
    steps = np.zeros(len(lengths), np.int64)
    for i, row in enumerate(lengths):  # a loop over sequences; each walk is a few dozen jumps
        t = 0
        while t < rows_per_sequence:
            tokens[i] += row[t]
            steps[i] += 1
            t += int(row[t])
    return tokens, steps


def walk_mean(tree: Tree, trace: RankTrace, *, rows_per_sequence: int) -> float:
    """Mean accepted length per step when each sequence is decoded step by step from row 0.

    >>> tr = RankTrace(np.array([[0, 0], [1, 0], [0, -1], [-1, 0]], np.int16))
    >>> walk_mean(Tree.from_choices([[0], [0, 0]]), tr, rows_per_sequence=4)  # rows 0, 3
    2.0
    """
    tokens, steps = walk_steps(tree, trace, rows_per_sequence=rows_per_sequence)
    return float(tokens.sum() / steps.sum())


def ratio_stderr(tokens: Sequence[float], steps: Sequence[float]) -> float:
    """Standard error of ``sum(tokens) / sum(steps)`` with whole sequences as the sampled units.

    Steps within one sequence are not independent (a model that loops accepts long runs), so the
    error of a pooled mean accepted length is taken over sequences, by the delta method:
    ``se² = Σ (y_i − R x_i)² / (n (n − 1) x̄²)``.

    >>> ratio_stderr([4, 8], [2, 2])  # sequence means 2 and 4: R = 3, se = 1
    1.0
    """
    y, x = np.asarray(tokens, np.float64), np.asarray(steps, np.float64)
    n = len(y)
    if n < 2:
        return 0.0
    r = y.sum() / x.sum()
    return float(np.sqrt(((y - r * x) ** 2).sum() / (n * (n - 1) * x.mean() ** 2)))


def fidelity(measured: float, measured_se: float, predicted: float, predicted_se: float,
             ) -> tuple[float, float]:
    """Relative error ``measured / predicted − 1`` and its standard error (independent samples).

    >>> fidelity(2.0, 0.0, 2.0, 0.02)
    (0.0, 0.01)
    """
    rel = measured / predicted - 1.0
    se = np.hypot(measured_se / predicted, measured * predicted_se / predicted**2)
    return rel, float(se)


def rows_per_sequence(trace: RankTrace) -> int:
    """Rows each calibration sequence contributed (all equal when no sequence hit EOS)."""
    seqs = int(trace.meta.get("sequences", 0))
    if seqs < 1 or trace.positions % seqs:
        raise TreeoptError(f"the trace's {trace.positions} positions do not split evenly into "
                           f"its {seqs} sequences")
    return trace.positions // seqs


def prediction(run: dict[str, Any], tree: Tree, *, calibration: RankTrace, heldout: RankTrace,
               position_mean: float) -> dict[str, Any]:
    """What the traces predict for a live ``run`` and how far the measurement is from it.

    ``predicted.step_walk`` walks the calibration trace (the prediction a user gets before
    decoding anything); ``heldout_trace_step_walk`` walks the held-out prompts' own trace, which a
    lossless greedy run must reproduce. ``fidelity`` is measured / step_walk − 1, with a standard
    error over prompts on both sides.
    """
    cal_tok, cal_steps = walk_steps(tree, calibration,
                                    rows_per_sequence=rows_per_sequence(calibration))
    walk, walk_se = float(cal_tok.sum() / cal_steps.sum()), ratio_stderr(cal_tok, cal_steps)
    rel, rel_se = fidelity(run["mean_accept_length"], run["stderr"], walk, walk_se)
    return {"predicted": {"position_mean": position_mean, "step_walk": walk,
                          "step_walk_stderr": walk_se,
                          "heldout_trace_step_walk": walk_mean(
                              tree, heldout, rows_per_sequence=rows_per_sequence(heldout))},
            "fidelity": rel, "fidelity_stderr": rel_se}


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
    per_prompt = [(sum(r.stats.accept_lengths), r.stats.steps) for r in results]
    doc: dict[str, Any] = {
        "tree_size": tree.size, "prompts": len(prompts), "max_new_tokens": max_new_tokens,
        "mean_accept_length": stats.mean_accept_length,
        "stderr": ratio_stderr(*zip(*per_prompt, strict=True)),  # over prompts, not steps
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
