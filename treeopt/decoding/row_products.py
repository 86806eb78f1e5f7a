"""One-row products computed as two-row ones, where the CPU's kernel rounds a lone row otherwise.

On a CPU, oneDNN multiplies a single 16-bit row by another kernel than two or more rows, and the
two can differ in the last bit: on SmolLM2-135M in bfloat16, 7 of 64 random rows of the MLP's down
projection (1536 inputs) come out otherwise alone than inside any product of 2, 4, 9 or 16 rows,
while every product of two rows or more gives a row the same bits wherever it stands. A token's
hidden state would then depend on whether it was decoded alone (an autoregressive step at batch
1) or beside other tokens (a tree step, a batch, the prefill), and where two 16-bit logits tie,
greedy decoding would pick another token (:mod:`treeopt.decoding.divergence`).

:func:`pair_lone_rows` gives each ``nn.Linear`` whose lone-row product differs, found per weight
shape on random rows, a forward that multiplies a lone row beside a copy of itself and keeps the
first: every product the decoder (and the model's own ``generate``) runs then has at least two
rows, so a token gets the same bits however it is decoded. Only 16-bit CPU weights are checked:
there logits tie often, and two rows cost what one does (in float32 a lone row is up to twice as
fast, :mod:`~treeopt.decoding.weight_layout`, and ties are rare).
"""

from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.decoding.weight_layout import cpu_linears

SIXTEEN_BIT = (torch.bfloat16, torch.float16)
_PAIRED = "_treeopt_paired"  # set on a module whose forward pairs lone rows


def lone_row_differs(weight: torch.Tensor, *, rows: int = 64, seed: int = 0) -> bool:
    """Whether some of ``rows`` random rows multiplied by ``weight`` alone differ from the same
    rows in one product (of all of them)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, weight.shape[1], generator=gen).to(weight.dtype)
    with torch.no_grad():
        together = F.linear(x, weight)
        return any(not torch.equal(F.linear(x[i:i + 1], weight)[0], together[i])
                   for i in range(rows))


def _paired_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if x.dim() >= 2 and x.numel() == x.shape[-1]:  # one row: beside a copy of itself
        return F.linear(torch.cat([x, x], dim=-2), self.weight, self.bias).narrow(-2, 0, 1)
    return F.linear(x, self.weight, self.bias)


def pair_lone_rows(*modules: nn.Module | None) -> int:
    """Give every 16-bit CPU ``nn.Linear`` of ``modules`` whose lone-row product differs
    (:func:`lone_row_differs`, checked once per weight shape and dtype) the paired forward, in
    place (idempotent); the values, parameters and state dict stay as they were. Returns how
    many modules were paired."""
    verdict: dict[tuple[int, int, torch.dtype], bool] = {}
    paired = 0
    for sub, weight in cpu_linears(*modules):
        if weight.dtype not in SIXTEEN_BIT or getattr(sub, _PAIRED, False):
            continue
        key = (weight.shape[0], weight.shape[1], weight.dtype)
        if key not in verdict:
            verdict[key] = lone_row_differs(weight)
        if verdict[key]:
            sub.forward = types.MethodType(_paired_forward, sub)  # type: ignore[method-assign]
            setattr(sub, _PAIRED, True)
            paired += 1
    return paired
