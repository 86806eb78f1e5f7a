"""One live comparison for the app's Verify page: tree vs autoregressive decoding of one prompt,
with the text split into the tokens each step accepted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from treeopt.errors import TreeoptError
from treeopt.trace import RankTrace
from treeopt.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.drafters.base import DraftHeads


@dataclass(frozen=True)
class LiveRun:
    """Both decodings of one prompt and what the page shows about them."""

    segments: tuple[str, ...]  # the tree decoding's text, one piece per step (first: prefill)
    accept_lengths: tuple[int, ...]
    histogram: tuple[int, ...]
    mean_accept_length: float
    stderr: float
    tree_tokens_per_s: float
    autoregressive_tokens_per_s: float
    outputs_match: bool | None  # None under typical acceptance (outputs may differ by design)
    predicted_accept_length: float | None  # position-weighted E[L] of the calibration trace
    predicted_per_step: float | None  # the calibration trace walked as decoding steps through it
    time_split: dict[str, float]  # seconds spent drafting, verifying, bookkeeping


def live_run(model: PreTrainedModel, tokenizer: Any, heads: DraftHeads, tree: Tree, prompt: str, *,
             max_new_tokens: int = 128, mode: str = "greedy",
             trace: RankTrace | None = None) -> LiveRun:
    """Decode ``prompt`` with ``tree`` and autoregressively (after a short warm-up of each)."""
    from treeopt.decoding.compare import compare
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.verify import check_tree_for
    from treeopt.simulate import simulate

    if not prompt.strip():
        raise TreeoptError("the prompt is empty")
    check_tree_for(tree, num_heads=heads.config.num_heads, trace=trace, source="tree")
    ids = list(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    config = DecodeConfig(max_new_tokens=max_new_tokens, mode=mode,
                          eos_token_id=getattr(tokenizer, "eos_token_id", None))
    result = compare(model, heads, tree, [ids], config=config, split=True, warmup_tokens=4)
    spec = result.tree_outputs[0]
    stats = result.tree_stats
    bounds, pieces = 1, [spec[:1]]
    for n in stats.accept_lengths:
        pieces.append(spec[bounds:bounds + n])
        bounds += n
    segments = tuple(tokenizer.decode(list(p)) for p in pieces if p)
    predicted = per_step = None
    if trace is not None:
        predicted = simulate(tree, trace).mean_accept_length
        if "sequence_positions" in trace.meta:
            per_step = simulate(tree, trace, per_step=True).mean_accept_length
    split = result.tree_profile.split if result.tree_profile is not None else None
    return LiveRun(
        segments=segments,
        accept_lengths=stats.accept_lengths, histogram=stats.histogram,
        mean_accept_length=stats.mean_accept_length, stderr=stats.stderr,
        tree_tokens_per_s=stats.tokens_per_s,
        autoregressive_tokens_per_s=result.autoregressive_stats.tokens_per_s,
        outputs_match=result.lossless,
        predicted_accept_length=predicted, predicted_per_step=per_step,
        time_split={"drafting": split.draft_s, "verification": split.verify_s,
                    "bookkeeping": split.bookkeeping_s} if split else {})
