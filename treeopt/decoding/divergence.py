"""Where two greedy outputs of one prompt part, and whether the model itself could tell them apart.

Greedy decoding takes the argmax of the next-token logits. In 16-bit dtypes logits are coarse
(bf16 keeps 8 significant bits: at a logit of 37 its step is 0.25), so two tokens often tie, and
which one a forward picks depends on the last bit of its hidden state. On CPUs that last bit
depends on how a matrix product is cut into blocks: oneDNN's bf16 product of a row computed alone
can differ from the same row inside a product of several (the MLP's down projection of
SmolLM2-135M, K = 1536, differs for a few rows in 48), so a token verified inside a tree step, or
decoded in a batch, can leave a different last bit in the cache than a token decoded alone. The
model's own ``generate`` shows the same: in bf16 on this CPU, 4 of 8 HumanEval prompts decode
differently batched than alone, in fp32 none.

:func:`first_divergence` finds the first token at which two outputs differ and asks the model's
own forward, over the prompt and the common prefix, for the logits there: when the two tokens'
logits are equal (or one step of the dtype apart), the outputs parted at a tie that the dtype
cannot resolve, not at a fault of the decoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@dataclass(frozen=True)
class Divergence:
    """The first new token at which two outputs of one prompt differ (``position``, 0-based
    among the new tokens), each output's token there, and the model's own logits of the two
    (``logits``) with the dtype's step at that magnitude (``resolution``)."""

    prompt: int
    position: int
    tokens: tuple[int, int]
    logits: tuple[float, float]
    resolution: float

    @property
    def at_tie(self) -> bool:
        """The two tokens' logits are within one step of the dtype: a tie it cannot resolve.

        >>> Divergence(0, 27, (1468, 923), (37.25, 37.25), 0.25).at_tie
        True
        >>> Divergence(0, 27, (1468, 923), (38.0, 37.25), 0.25).at_tie
        False
        """
        return abs(self.logits[0] - self.logits[1]) <= self.resolution

    def to_json(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "position": self.position, "tokens": list(self.tokens),
                "logits": list(self.logits), "resolution": self.resolution,
                "at_tie": self.at_tie}


def resolution(value: float, dtype: torch.dtype) -> float:
    """The distance from ``value`` to the next larger number of ``dtype`` (its step there).

    >>> resolution(37.25, torch.bfloat16), resolution(1.0, torch.float16)
    (0.25, 0.0009765625)
    """
    x = torch.tensor(abs(value), dtype=dtype)
    return float(torch.nextafter(x, torch.tensor(float("inf"), dtype=dtype)) - x)


def first_divergence(model: PreTrainedModel, prompt: Sequence[int], a: Sequence[int],
                     b: Sequence[int], *, index: int = 0) -> Divergence | None:
    """The first new token at which outputs ``a`` and ``b`` of ``prompt`` differ, with the
    model's own logits of both there (None when one output is a prefix of the other)."""
    at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if at is None:
        return None
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([[*prompt, *a[:at]]], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, -1]  # [vocab], in the model's dtype
    pair = (float(logits[a[at]]), float(logits[b[at]]))
    return Divergence(index, at, (int(a[at]), int(b[at])), pair,
                      resolution(max(pair, key=abs), logits.dtype))
