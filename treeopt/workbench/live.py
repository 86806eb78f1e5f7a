"""One live comparison for the app's Verify page: tree vs autoregressive decoding of a few
prompts (held-out ones by default, or one of the person's own), with the first prompt's text
split into the tokens each step accepted, and the accepted length predicted for those prompts
by the held-out trace walked step by step — the walk the other pages price with."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from treeopt.errors import TreeoptError
from treeopt.model.runs import as_runs
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.drafter import Drafter


@dataclass(frozen=True)
class LiveRun:
    """Both decodings of some prompts, ``batch`` at a time, and what the page shows about them
    (the text and the step-by-step pieces are the first prompt's; accepted lengths and
    throughput are every prompt's)."""

    segments: tuple[str, ...]  # the tree decoding's text, one piece per step (first: prefill)
    accept_lengths: tuple[int, ...]
    histogram: tuple[int, ...]
    mean_accept_length: float
    stderr: float
    batch: int
    tree_tokens_per_s: float  # steady-state decode, the whole batch
    autoregressive_tokens_per_s: float
    speedup: float
    outputs_match: bool | None  # greedy / sample: equal to plain decoding; None under typical
    generate_match: bool | None  # greedy: tree and plain outputs equal the model's own generate
    predicted_accept_length: float | None  # these prompts' trace walked step by step
    time_split: dict[str, float]  # milliseconds per step drafting, verifying, bookkeeping
    prompts: int = 1  # prompts decoded


def live_run(model: PreTrainedModel, tokenizer: Any, heads: Drafter, tree: Tree,
             prompts: Sequence[str], *, max_new_tokens: int = 128, mode: str = "greedy",
             temperature: float = 0.7, seed: int = 0, trace: RankTrace | None = None,
             batch: int = 1, walked: RankTrace | None = None,
             drafted: bool = False) -> LiveRun:
    """Decode ``prompts``, ``batch`` at a time, with ``tree`` and autoregressively (after a
    short warm-up of each); ``mode`` ``sample`` and ``typical`` sample at ``temperature`` with
    ``seed``. ``trace``: the drafter's calibration trace (its depth bounds the tree);
    ``walked``: these prompts' own trace (their continuations' ranks, as many sequences as
    prompts), walked step by step over the tokens each prompt decoded for the predicted
    accepted length — as a sweep point counts it at ``batch``. ``drafted``: a lookup drafter's
    chain verifies only as far as it was drafted (a pick select priced so)."""
    from treeopt.decoding.compare import compare
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.hf_generate import check_comparison
    from treeopt.decoding.verify import check_tree_for
    from treeopt.documents.prompts import encode
    from treeopt.pricing.sweep_prediction import sweep_accept_length

    if not prompts or not all(p.strip() for p in prompts):
        raise TreeoptError("a prompt is empty")
    if not 1 <= batch <= len(prompts):
        raise TreeoptError(f"batch {batch}: needs at least {batch} prompts, {len(prompts)} given")
    check_tree_for(tree, trace=trace)  # the drafter's depth: the decoder checks it
    ids = encode(tokenizer, prompts)  # as the demo and `treeopt verify` encode them
    config = DecodeConfig(max_new_tokens=max_new_tokens, mode=mode, temperature=temperature,
                          seed=seed, eos_token_id=getattr(tokenizer, "eos_token_id", None),
                          drafted_only=drafted)
    result = compare(model, heads, tree, ids, config=config, batch=batch, split=True,
                     warmup_tokens=4)
    spec = result.tree_outputs[0]
    stats = result.tree_stats
    first = stats.accept_lengths[: stats.runs[0][1]] if stats.runs else stats.accept_lengths
    bounds, pieces = 1, [spec[:1]]
    for n in first:
        pieces.append(spec[bounds:bounds + n])
        bounds += n
    segments = tuple(tokenizer.decode(list(p)) for p in pieces if p)
    predicted = None
    if walked is not None and tree.size:
        predicted = sweep_accept_length(tree, decoded_part(walked, result.tree_outputs,
                                                           max_new_tokens), batch)
    split = result.to_dict()["tree_decoding"].get("ms_per_step", {})
    check = check_comparison(model, ids, result)
    generate_match = None if check is None else (check.tree_equals_generate
                                                 and check.loop_equals_generate)
    return LiveRun(
        segments=segments, accept_lengths=tuple(first), histogram=stats.histogram,
        mean_accept_length=stats.mean_accept_length, stderr=stats.stderr, batch=batch,
        tree_tokens_per_s=result.tree_tokens_per_s,
        autoregressive_tokens_per_s=result.autoregressive_tokens_per_s, speedup=result.speedup,
        outputs_match=result.lossless, generate_match=generate_match,
        predicted_accept_length=predicted,
        time_split={"drafting": split.get("draft", 0.0), "verification": split.get("verify", 0.0),
                    "bookkeeping": split.get("bookkeeping", 0.0)}, prompts=len(prompts))


def prompts_walk(trace: RankTrace | None, prompts: int) -> RankTrace | None:
    """The first ``prompts`` sequences of held-out ``trace``: the continuations of the first
    held-out prompts, to walk for a live run's prediction (None without a trace that records
    that many sequences)."""
    counts = trace.meta.get("sequence_positions") if trace is not None else None
    if trace is None or not counts or prompts > len(counts):
        return None
    return trace.sequences(prompts)


def decoded_part(trace: RankTrace, outputs: Sequence[Sequence[int]],
                 max_new_tokens: int) -> RankTrace:
    """Each sequence of ``trace`` as its prompt's live run kept it (:func:`~treeopt.model.runs.
    as_runs`): the positions the run stepped through — its output less its last
    token, at most ``max_new_tokens`` — with no target past the output's end. A prompt that met
    its end-of-sequence token early walks only what it decoded.

    >>> import numpy as np
    >>> t = RankTrace(np.zeros((6, 1), np.int16), {"sequence_positions": [3, 3]})
    >>> decoded_part(t, [(5, 6, 7, 8, 9), (5,)], 2).meta["sequence_positions"]
    [1, 0]
    """
    return as_runs(trace, [min(len(out), max_new_tokens) for out in outputs])
