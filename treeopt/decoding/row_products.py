"""Products that give a row the same bits however many rows they hold, where the CPU's kernel
rounds otherwise.

On a CPU, oneDNN picks its 16-bit matrix kernel by the shape of the product, and two kernels can
differ in the last bit of a row (they sum the inner dimension in another order). Two switches are
seen:

- **a lone row**: on SmolLM2-135M in bfloat16, 7 of 64 random rows of the MLP's down projection
  (1536 inputs) come out otherwise alone than inside any product of 2 rows or more;
- **many rows**: on another Xeon (AMX, 4 MiB L2 per core), SmolLM2's tied vocabulary projection
  (49,152 × 576) gives rows one set of bits in every product of 2 to 32 rows and another from 33
  rows on (29 of 32 rows differ), while its decoder layers' shapes agree up to 300 rows.

A token's logits would then depend on how many rows its step multiplied: one decoded alone (an
autoregressive step at batch 1), beside a few others (a small tree), or beside many (a tree at
batch 16: 144 rows). Where two 16-bit logits tie, greedy decoding picks another token, and
batched tree decoding stops being lossless (:mod:`treeopt.decoding.divergence`): on that Xeon, 10
of 16 prompts kept their greedy output with a chain of 8 at batch 16 before this module split
the vocabulary projection.

:func:`pair_lone_rows` finds, per weight shape, the rows a product may hold with every row's bits
those of a two-row product (:func:`row_rule`), and gives each ``nn.Linear`` that needs it a
forward that keeps every product within them: a lone row is multiplied beside a copy of itself
(the copy dropped), and a product beyond the largest agreeing count is split into near-equal
chunks of at most that many rows. Only 16-bit CPU weights are checked: there logits tie often,
and two rows cost what one does (in float32 a lone row is up to twice as fast,
:mod:`~treeopt.decoding.weight_layout`, and ties are rare). Splitting costs time where a kernel
switches (each chunk reads the weight again): a step profile measures it with the rest. A weight
packed for oneDNN (:mod:`~treeopt.decoding.packed_linear`) is probed, and multiplied, packed.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.decoding.packed_linear import product as packed_product
from treeopt.decoding.weight_layout import cpu_linears, plain_linear

SIXTEEN_BIT = (torch.bfloat16, torch.float16)
_RULE = "_treeopt_row_rule"  # set on a module whose forward keeps its products' rows agreeing
REFERENCE_ROWS = 64  # rows whose bits every probed product is compared on (a kernel can
# round a row otherwise by where it stands in the product: row 18 of 33, say)
# row counts probed: every count up to 64, then sparser (a kernel switch is assumed to hold
# from its count on, as oneDNN's choice by size does)
PROBED_ROWS = (*range(2, 65), 96, 128, 129, 192, 256, 257, 384, 512, 513, 1024)


@dataclass(frozen=True)
class RowRule:
    """How a weight's products must be taken for every row to get one set of bits: ``pair``:
    a lone row beside a copy; ``max_rows``: at most this many rows per product (None: any)."""

    pair: bool
    max_rows: int | None

    @property
    def needed(self) -> bool:
        return self.pair or self.max_rows is not None

    def chunks(self, rows: int) -> list[int]:
        """Row counts a product of ``rows`` is taken in: near-equal, each at most ``max_rows``.

        >>> RowRule(True, 32).chunks(144), RowRule(True, 32).chunks(33), RowRule(False, None).chunks(9)
        ([29, 29, 29, 29, 28], [17, 16], [9])
        """
        if self.max_rows is None or rows <= self.max_rows:
            return [rows]
        n = -(-rows // self.max_rows)
        return [rows // n + (i < rows % n) for i in range(n)]


def row_rule(weight: torch.Tensor, *, seed: int = 0,
             product: Callable[[torch.Tensor], torch.Tensor] | None = None) -> RowRule:
    """The :class:`RowRule` of ``weight``: products of every count of :data:`PROBED_ROWS` of
    random rows, each row's bits against the same row's in a two-row product (every row up to
    :data:`REFERENCE_ROWS`; beyond, the first of them), and a lone row against its pair. The
    largest agreeing count is the one probed before the first that disagrees. ``product``: the
    kernel probed, rows ↦ rows times ``weight`` (default ``F.linear``)."""
    times = product or (lambda rows: F.linear(rows, weight))
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(PROBED_ROWS[-1], weight.shape[1], generator=gen).to(weight.dtype)
    with torch.no_grad():
        pairs = torch.cat([times(x[i:i + 2]) for i in range(0, REFERENCE_ROWS, 2)])
        pair = any(not torch.equal(times(x[i:i + 1])[0], pairs[i])
                   for i in range(REFERENCE_ROWS))
        agreed = None
        for rows in PROBED_ROWS:
            n = min(rows, REFERENCE_ROWS)
            if not torch.equal(times(x[:rows])[:n], pairs[:n]):
                return RowRule(pair, agreed)
            agreed = rows
    return RowRule(pair, None)


def lone_row_differs(weight: torch.Tensor, *, seed: int = 0) -> bool:
    """Whether a lone row multiplied by ``weight`` can differ from the same row in a product of
    two (:func:`row_rule`'s ``pair``)."""
    return row_rule(weight, seed=seed).pair


def _agreeing_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    rule: RowRule = getattr(self, _RULE)
    rows = x.numel() // x.shape[-1] if x.dim() >= 2 else 1
    if x.dim() < 2 or (rows > 1 and len(rule.chunks(rows)) == 1):
        return packed_product(self, x)
    flat = x.reshape(rows, x.shape[-1])
    out = torch.cat([_product(self, part, rule.pair) for part in flat.split(rule.chunks(rows))])
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _product(linear: nn.Linear, rows: torch.Tensor, pair: bool) -> torch.Tensor:
    """``rows`` times the weight (packed where it is: :mod:`~treeopt.decoding.packed_linear`);
    with ``pair``, a lone row beside a copy of itself."""
    if pair and len(rows) == 1:
        return packed_product(linear, torch.cat([rows, rows]))[:1]
    return packed_product(linear, rows)


def pair_lone_rows(*modules: nn.Module | None) -> int:
    """Give every 16-bit CPU ``nn.Linear`` of ``modules`` whose products round a row otherwise by
    their row count (:func:`row_rule`, probed once per weight shape and dtype) a forward that
    keeps each product within the counts that agree, in place (idempotent); the values,
    parameters and state dict stay as they were. Returns how many modules were changed.

    The smallest agreeing count found on any shape holds for every shape of that dtype: the
    kernel is chosen by the row count, and random rows can miss a switch that changes a bit
    seldom on one shape (on the Xeon above, every shape of SmolLM2 switches at 33 rows, but
    random weights of its attention's shapes showed it in none of 64 rows)."""
    linears = [(sub, w) for sub, w in cpu_linears(*modules)
               if w.dtype in SIXTEEN_BIT and not hasattr(sub, _RULE) and plain_linear(sub)]
    rules: dict[tuple[int, int, torch.dtype], RowRule] = {}
    for sub, weight in linears:
        key = (weight.shape[0], weight.shape[1], weight.dtype)
        if key not in rules:  # probed on the kernel the module runs (packed, where it is)
            rules[key] = row_rule(weight, product=lambda rows, sub=sub: packed_product(sub, rows))
    least: dict[torch.dtype, int] = {}
    for (_, _, dtype), rule in rules.items():
        if rule.max_rows is not None:
            least[dtype] = min(least.get(dtype, rule.max_rows), rule.max_rows)
    changed = 0
    for sub, weight in linears:
        rule = RowRule(rules[(weight.shape[0], weight.shape[1], weight.dtype)].pair,
                       least.get(weight.dtype))
        setattr(sub, _RULE, rule)  # probed: the next call (every decoding's start) skips it
        if rule.needed:
            sub.forward = types.MethodType(_agreeing_forward, sub)  # type: ignore[method-assign]
            changed += 1
    return changed
