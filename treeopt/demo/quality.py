"""The demo's quality numbers: repetition of greedy text, trace-predicted versus live acceptance.

Under greedy decoding a live run on a prompt emits exactly the greedy continuation, and a step
that starts at trace row t accepts ``accept_length(t)`` tokens and hands over to row
``t + accept_length(t)``. So the trace predicts both the position average E[L] (what growth
maximises) and, by walking each sequence step by step, the per-step mean a live run measures.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.loop import Decoder
from treeopt.decoding.models import torch_threads
from treeopt.decoding.stats import combine
from treeopt.model.simulation import simulate, steps_inside
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel


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


def fidelity(measured: float, measured_se: float, predicted: float, predicted_se: float,
             ) -> tuple[float, float]:
    """Relative error ``measured / predicted − 1`` and its standard error (independent samples).

    >>> fidelity(2.0, 0.0, 2.0, 0.02)
    (0.0, 0.01)
    """
    rel = measured / predicted - 1.0
    se = np.hypot(measured_se / predicted, measured * predicted_se / predicted**2)
    return rel, float(se)


def prediction(run: dict[str, Any], tree: Tree, *, calibration: RankTrace, heldout: RankTrace,
               position_mean: float) -> dict[str, Any]:
    """What the traces predict for a live ``run`` and how far the measurement is from it.

    ``predicted.step_walk`` walks the calibration trace (the prediction a user gets before
    decoding anything); ``heldout_trace_step_walk`` walks the held-out prompts' own trace, which a
    lossless greedy run must reproduce over the steps inside that trace (the run's
    ``inside_trace``). ``fidelity`` is measured / step_walk − 1, with a standard error over
    prompts on both sides.
    """
    walk = simulate(tree, calibration, per_step=True)
    rel, rel_se = fidelity(run["mean_accept_length"], run["stderr"], walk.mean_accept_length,
                           walk.stderr)
    return {"predicted": {"position_mean": position_mean, "step_walk": walk.mean_accept_length,
                          "step_walk_stderr": walk.stderr,
                          "heldout_trace_step_walk": simulate(
                              tree, heldout, per_step=True).mean_accept_length},
            "fidelity": rel, "fidelity_stderr": rel_se}


QUALITY_BATCH = 16  # prompts decoded together in the quality checks (acceptance is per row)
TIMED_PROMPTS = 8  # prompts decoded one at a time for the seconds of a verification


def acceptance_run(decoder: Decoder, tree: Tree, prompts: Sequence[Sequence[int]], *,
                   max_new_tokens: int, reference: Sequence[Sequence[int]],
                   positions: Sequence[int] | None = None,
                   progress: Callable[[], None] | None = None,
                   eos_token_id: int | None = None,
                   timed_threads: int | None = None) -> dict[str, Any]:
    """Tree-decode every prompt (in batches: acceptance and outputs do not depend on it) and
    check each output against ``reference``, the plain greedy continuation; pooled acceptance
    (standard error over prompts) and the seconds of single-prompt verifications.

    ``positions``: the positions per prompt of the prompts' own trace (calibrated with the
    same budget and ``eos_token_id``, it holds every step a run takes; one made before traces
    recorded the positions a run visits stops short of each continuation's end by the drafter's
    depth). The steps that start inside them are the steps the trace's walk takes:
    ``inside_trace`` is their mean, what the walk must reproduce. ``progress()`` is called after
    each decoding, as :func:`autoregressive_run` calls it (:func:`quality_decodings` of them).
    Each prompt stops at ``eos_token_id`` where given, as a served request does; the timed
    prompts run on ``timed_threads`` torch threads where given."""
    runs, timed = _batched_then_timed(decoder, tree, prompts, max_new_tokens, progress,
                                      eos_token_id, timed_threads)
    outputs = [t for r in runs for t in r.tokens]
    stats = combine([r.stats for r in runs])
    same = sum(list(a) == list(b) for a, b in zip(outputs, reference, strict=True))
    seconds = [t.seconds for t in timed]
    run = {"tree_size": tree.size, "prompts": len(prompts), "max_new_tokens": max_new_tokens,
           "mean_accept_length": stats.mean_accept_length, "stderr": stats.stderr,
           "steps": stats.steps, "histogram": list(stats.histogram),
           "seconds_median": statistics.median(seconds), "seconds_max": max(seconds),
           "lossless": same == len(prompts), "lossless_prompts": f"{same}/{len(prompts)}"}
    if positions is not None:
        inside = steps_inside(stats.sequence_accept_lengths, positions)
        run["inside_trace"] = {"positions_per_prompt": max(positions, default=0),
                               "steps": len(inside),
                               "mean_accept_length": float(np.mean(inside)) if inside else 0.0}
    return run


def autoregressive_run(decoder: Decoder, prompts: Sequence[Sequence[int]], *,
                       max_new_tokens: int, progress: Callable[[], None] | None = None,
                       eos_token_id: int | None = None, timed_threads: int | None = None,
                       outputs: Sequence[Sequence[int]] | None = None,
                       ) -> tuple[list[tuple[int, ...]], dict[str, Any]]:
    """Plain greedy continuations of every prompt (batched), their 8-gram repetition, and the
    seconds of single-prompt decoding; ``progress()`` is called after each decoding (one per
    batch of :data:`QUALITY_BATCH`, then one per timed prompt: :func:`quality_decodings` of
    them); each stops at ``eos_token_id`` where given; the timed prompts run on
    ``timed_threads`` torch threads where given. ``outputs``: the continuations, decoded
    already in those batches (a calibration's); then only the timed prompts are decoded."""
    tree = Tree(())
    if outputs is None:
        runs, timed = _batched_then_timed(decoder, tree, prompts, max_new_tokens, progress,
                                          eos_token_id, timed_threads)
        outputs = [t for r in runs for t in r.tokens]
    else:
        config = DecodeConfig(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
        timed = _timed(decoder, tree, prompts, config, progress, timed_threads)
    kept = [tuple(t) for t in outputs]
    return kept, {"seconds_median": statistics.median(s.seconds for s in timed),
                  "tokens_per_s": combine(timed).tokens_per_s,
                  "repetition_8gram": float(np.mean([repetition_share(list(t))
                                                     for t in kept]))}


def _batched_then_timed(decoder: Decoder, tree: Tree, prompts: Sequence[Sequence[int]],
                        max_new_tokens: int, progress: Callable[[], None] | None,
                        eos_token_id: int | None = None, timed_threads: int | None = None,
                        ) -> tuple[list[Any], list[Any]]:
    """What both checks decode: every prompt in batches of :data:`QUALITY_BATCH` (the runs),
    then the first :data:`TIMED_PROMPTS` alone on ``timed_threads`` (their stats);
    ``progress()`` after each. A drafter that reads earlier requests (suffix decoding) serves
    the batches' prompts one after another in one row, as its trace ranks them."""
    config = DecodeConfig(max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    tick = progress or (lambda: None)
    runs = []
    in_order = decoder.heads is not None and decoder.heads.kind.request_cache
    if in_order:
        runs.append(decoder.decode(tree, prompts, config=config, batch=1))
    for i in range(0, len(prompts), QUALITY_BATCH):
        if not in_order:
            runs.append(decoder.decode(tree, prompts[i: i + QUALITY_BATCH], config=config))
        tick()
    return runs, _timed(decoder, tree, prompts, config, progress, timed_threads)


def _timed(decoder: Decoder, tree: Tree, prompts: Sequence[Sequence[int]],
           config: DecodeConfig, progress: Callable[[], None] | None,
           timed_threads: int | None) -> list[Any]:
    """The stats of the first :data:`TIMED_PROMPTS` decoded one at a time on
    ``timed_threads``; ``progress()`` after each."""
    timed = []
    with torch_threads(timed_threads):
        for p in prompts[:TIMED_PROMPTS]:
            timed.append(decoder.decode(tree, [p], config=config).stats)
            if progress is not None:
                progress()
    return timed


def quality_decodings(prompt_count: int, *, batched: bool = True) -> int:
    """How many decodings :func:`autoregressive_run` and :func:`acceptance_run` make for
    ``prompt_count`` prompts (their progress bar's total); ``batched=False``: the timed ones
    alone (an autoregressive run given its outputs).

    >>> quality_decodings(64), quality_decodings(3), quality_decodings(64, batched=False)
    (12, 4, 8)
    """
    batches = -(-prompt_count // QUALITY_BATCH) if batched else 0
    return batches + min(prompt_count, TIMED_PROMPTS)


def greedy_repetition(model: PreTrainedModel, prompts: Sequence[Sequence[int]], *, max_new_tokens: int,
                      ) -> float:
    """Mean 8-gram repetition share of greedy continuations (batched, for reference models)."""
    from treeopt.decoding.rank_pass import greedy_continuations

    seqs = greedy_continuations(model, prompts, max_new_tokens=max_new_tokens)
    return float(np.mean([repetition_share(s[len(p):]) for s, p in
                          zip(seqs, prompts, strict=True)]))
