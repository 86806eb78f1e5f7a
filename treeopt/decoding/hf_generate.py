"""The model's own decoding as the reference for "lossless": transformers' greedy ``generate``.

treeopt's autoregressive loop and its tree decoding drive the model through treeopt's masks,
cache and positions; both could be wrong together and still agree. ``generate`` builds every
mask, position and cache itself, so a tree whose output equals it decodes the real model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from treeopt.decoding.models import model_device

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.compare import Comparison


def own_greedy(model: PreTrainedModel, prompts: Sequence[Sequence[int]], *,
               max_new_tokens: int, eos_token_id: int | None) -> list[tuple[int, ...]]:
    """Each prompt's greedy continuation by the model's own ``generate``, one prompt at a time
    (no padding), with no sampling, penalty or length rule of the model's generation config:
    ``max_new_tokens`` tokens, or fewer up to and including ``eos_token_id``."""
    from transformers import GenerationConfig

    device = model_device(model)
    pad = eos_token_id if eos_token_id is not None else 0
    config = GenerationConfig(max_new_tokens=max_new_tokens, min_new_tokens=0, do_sample=False,
                              num_beams=1, eos_token_id=eos_token_id, pad_token_id=pad)
    out = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([list(prompt)], device=device)
            got = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 generation_config=config)[0, ids.shape[1]:].tolist()
            out.append(tuple(_truncate(got, max_new_tokens, eos_token_id)))
    return out


def _truncate(tokens: list[int], limit: int, eos: int | None) -> list[int]:
    """At most ``limit`` tokens, ending at the first ``eos``.

    >>> _truncate([5, 2, 0, 0], 8, 2), _truncate([5, 6, 7], 2, None)
    ([5, 2], [5, 6])
    """
    tokens = tokens[:limit]
    return tokens[: tokens.index(eos) + 1] if eos is not None and eos in tokens else tokens


@dataclass(frozen=True)
class ReferenceCheck:
    """How treeopt's outputs compare with the model's own greedy ``generate``, prompt by prompt."""

    prompts: int
    tree_mismatched: tuple[int, ...]  # prompts whose tree output differs from generate's
    loop_mismatched: tuple[int, ...]  # prompts whose autoregressive loop output differs

    @property
    def tree_equals_generate(self) -> bool:
        return not self.tree_mismatched

    @property
    def loop_equals_generate(self) -> bool:
        return not self.loop_mismatched

    def to_dict(self) -> dict[str, Any]:
        return {"reference": "the model's own greedy generate", "prompts": self.prompts,
                "tree_equals_generate": self.tree_equals_generate,
                "autoregressive_equals_generate": self.loop_equals_generate,
                "tree_mismatched_prompts": list(self.tree_mismatched),
                "autoregressive_mismatched_prompts": list(self.loop_mismatched)}


def check_against_generate(model: PreTrainedModel, prompts: Sequence[Sequence[int]],
                           tree_outputs: Sequence[Sequence[int]],
                           loop_outputs: Sequence[Sequence[int]], *, max_new_tokens: int,
                           eos_token_id: int | None) -> ReferenceCheck:
    """Compare treeopt's tree and autoregressive outputs of ``prompts`` with ``generate``'s."""
    want = own_greedy(model, prompts, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)

    def differ(got: Sequence[Sequence[int]]) -> tuple[int, ...]:
        return tuple(i for i, (g, w) in enumerate(zip(got, want, strict=True)) if tuple(g) != w)

    return ReferenceCheck(len(prompts), differ(tree_outputs), differ(loop_outputs))


def check_comparison(model: PreTrainedModel, prompts: Sequence[Sequence[int]],
                     comparison: Comparison) -> ReferenceCheck | None:
    """A greedy comparison's tree and autoregressive outputs (of the first prompts, as many as
    it decoded) against ``generate``; None for sampling and typical acceptance."""
    config = comparison.config
    if config.mode != "greedy":
        return None
    decoded = comparison.tree_outputs
    return check_against_generate(model, prompts[: len(decoded)], decoded,
                                  comparison.autoregressive_outputs,
                                  max_new_tokens=config.max_new_tokens,
                                  eos_token_id=config.eos_token_id)
