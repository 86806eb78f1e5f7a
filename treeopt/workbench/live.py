"""One live comparison for the app's Verify page: tree vs autoregressive decoding of one prompt,
with the text split into the tokens each step accepted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from treeopt.errors import TreeoptError
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.drafter import Drafter


@dataclass(frozen=True)
class LiveRun:
    """Both decodings of a batch of prompts and what the page shows about them (the text and the
    accepted lengths are the first prompt's; throughput is the whole batch's)."""

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
    predicted_accept_length: float | None  # position-weighted E[L] of the calibration trace
    predicted_per_step: float | None  # the calibration trace walked as decoding steps through it
    time_split: dict[str, float]  # milliseconds per step drafting, verifying, bookkeeping


def live_run(model: PreTrainedModel, tokenizer: Any, heads: Drafter, tree: Tree, prompt: str, *,
             max_new_tokens: int = 128, mode: str = "greedy", temperature: float = 0.7,
             seed: int = 0, trace: RankTrace | None = None, batch: int = 1,
             others: Sequence[str] = ()) -> LiveRun:
    """Decode ``prompt`` — with ``others`` filling a batch of ``batch`` — with ``tree`` and
    autoregressively (after a short warm-up of each); ``mode`` ``sample`` and ``typical`` sample
    at ``temperature`` with ``seed``."""
    from treeopt.decoding.compare import compare
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.reference import check_comparison
    from treeopt.decoding.verify import check_tree_for
    from treeopt.model.simulation import simulate

    if not prompt.strip():
        raise TreeoptError("the prompt is empty")
    if batch < 1 or batch - 1 > len(others):
        raise TreeoptError(f"batch {batch}: needs {batch - 1} more prompts, {len(others)} given")
    check_tree_for(tree, trace=trace)  # the drafter's depth: the decoder checks it
    ids = [list(tokenizer(p, add_special_tokens=False)["input_ids"])
           for p in (prompt, *others[: batch - 1])]
    config = DecodeConfig(max_new_tokens=max_new_tokens, mode=mode, temperature=temperature,
                          seed=seed, eos_token_id=getattr(tokenizer, "eos_token_id", None))
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
    predicted = per_step = None
    if trace is not None:
        predicted = simulate(tree, trace).mean_accept_length
        if "sequence_positions" in trace.meta:
            per_step = simulate(tree, trace, per_step=True).mean_accept_length
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
        predicted_accept_length=predicted, predicted_per_step=per_step,
        time_split={"drafting": split.get("draft", 0.0), "verification": split.get("verify", 0.0),
                    "bookkeeping": split.get("bookkeeping", 0.0)})
