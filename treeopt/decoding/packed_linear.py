"""CPU linears through oneDNN's packed weights: float32 products of a few rows, bfloat16 ones
of any number.

A tree step multiplies q rows per sequence (q = the tree's nodes + 1), a batch of b sequences b·q.
MKL, which runs ``F.linear`` on the CPU, is quick for a single row (with the weight column-major:
:mod:`~treeopt.decoding.weight_layout`) but takes a few rows far above what reading the weight
costs: on SmolLM2-135M in float32, one thread of a 2-core AMD EPYC (AVX2), a 5-token step took
2.3 times the single token's. oneDNN, multiplying by a weight packed once into its own blocked
layout, took the forwards of 3 to 17 tokens in 12–23% less time (2 tokens: 1%), and an
autoregressive step of 4 sequences 22% less; past about 32 rows MKL caught up (4 sequences × 17
tokens: +3 to 4%). Live, prompt lookup's 2-node chain went from 0.96× to 1.07× autoregressive at
batch 1. ``benchmarks/bench_cpu_linear.py`` prints both kernels on any host.

In bfloat16, on a CPU that multiplies it natively (AVX512-BF16 or AMX: oneDNN says so), ``F.linear``
runs on oneDNN already, but with the weight as stored. Packed once, the same products took 38%
less time for one row and 47–53% less for 5 to 9 rows, over SmolLM2-135M's 211 weights (an AMD
EPYC with AVX512-BF16, one thread; 26–29% less for its small 192 × 576 weights, 3–5% less at 512
rows), and they gave ``F.linear``'s very bits in every product tried (5 weight shapes, 1 to 512
rows, with and without bias). So every bfloat16 weight packs there, whatever its size, for every
row count; where bfloat16 is emulated its weights keep ``F.linear`` (packing there is untried).

:func:`pack_for_cpu` gives each float32 CPU ``nn.Linear`` of 1 MiB or more (below, oneDNN's
call costs more than the product) a packed copy of its weight and a forward that multiplies 2 to
:data:`MAX_ROWS` rows by it; a single row still runs ``F.linear`` (the MKL product the step's
cost is compared with), and so do more rows. Every bfloat16 ``nn.Linear`` packs where bfloat16 is
native, for any number of rows. Every product that autograd records or ``torch.compile`` traces
runs ``F.linear``. The parameters, the state dict and tied weights stay as they were: the
packed copy is a cache beside them (memory: those weights once more), packed again when the
weight has changed in place since (training after decoding) or been replaced.

A float32 product's last bits depend on the kernel (as they already did on MKL's choice by row count):
a token's logits can differ in the last bit between a step of 1 row and a step of many, and in
float32 that rarely decides a greedy token. The decoder packs the model and its drafter before it
times or decodes anything, so every step it runs uses the same kernels.
"""

from __future__ import annotations

import types
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.decoding.weight_layout import cpu_linears, plain_linear

_PACKED = "_treeopt_packed"  # set on a module whose forward multiplies a few rows packed
MAX_ROWS = 32  # the most rows a product takes packed (beyond, MKL was as fast or faster)
# whether torch.compile is tracing (torch < 2.3 has no torch.compiler: never)
_COMPILING = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)
MIN_ELEMENTS = 1 << 18  # the smallest weight packed (1 MiB): oneDNN's call costs about 20 µs
# more than MKL's, which a 128 × 384 weight's whole product takes (576 × 576: even at 2 rows)


def packing_available() -> bool:
    """Whether this torch can pack a linear weight for oneDNN (built with it, and the ops
    present)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight  # noqa: B018 (an op that is missing raises)
        torch.ops.mkldnn._linear_pointwise  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


def native_bf16() -> bool:
    """Whether oneDNN multiplies bfloat16 natively on this CPU (AVX512-BF16 or AMX)."""
    if not packing_available():
        return False
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _packs(weight: torch.Tensor) -> bool:
    """Whether a CPU weight gets a packed copy: float32 of :data:`MIN_ELEMENTS` or more, or any
    bfloat16 where it is native."""
    if weight.dtype == torch.float32:
        return weight.numel() >= MIN_ELEMENTS
    return weight.dtype == torch.bfloat16 and native_bf16()


def _rows_packed(rows: int, dtype: torch.dtype) -> bool:
    """Whether a product of ``rows`` rows runs packed: float32 2 to :data:`MAX_ROWS`, bfloat16
    any."""
    return 2 <= rows <= MAX_ROWS if dtype == torch.float32 else rows >= 1


def pack_for_cpu(*modules: nn.Module | None) -> int:
    """Give every CPU ``nn.Linear`` of ``modules`` that packs (float32 of at least
    :data:`MIN_ELEMENTS`, 2 to :data:`MAX_ROWS` rows; bfloat16 where native, any rows) a oneDNN-packed
    copy of its weight, which :func:`product` multiplies by, and :func:`product` as its forward
    where it has none of its own yet (a forward set already, as
    :mod:`~treeopt.decoding.row_products`' is, calls :func:`product` itself). In place and
    idempotent; a weight shared by modules packed in one call is packed once. Returns how many
    modules were changed (0 where torch cannot pack)."""
    if not packing_available():
        return 0
    changed = 0
    shared: dict[int, _Pack] = {}
    for sub, weight in cpu_linears(*modules):
        if not _packs(weight) or hasattr(sub, _PACKED) or not plain_linear(sub):
            continue
        pack = shared.setdefault(id(weight), _Pack())
        setattr(sub, _PACKED, pack)
        if "forward" not in vars(sub):
            sub.forward = types.MethodType(product, sub)  # type: ignore[method-assign]
        changed += 1
    return changed


def unpack_for_cpu(*modules: nn.Module | None) -> int:
    """Undo :func:`pack_for_cpu` on ``modules`` (every product through ``F.linear`` again, the
    packed copies dropped; another forward set on a module stays): what a comparison of the two
    kernels times against. Returns how many modules were changed."""
    changed = 0
    for sub, _ in cpu_linears(*modules):
        if hasattr(sub, _PACKED):
            delattr(sub, _PACKED)
            if getattr(vars(sub).get("forward"), "__func__", None) is product:
                del sub.forward  # the class's own again
            changed += 1
    return changed


class _Pack:
    """One weight's packed copy, made on first use and again when the weight has changed."""

    def __init__(self) -> None:
        # what was packed: the weight's storage (held, so that no other tensor takes its place)
        # and its in-place version then
        self.source: torch.Tensor | None = None
        self.version = -1
        self.packed: torch.Tensor | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> _Pack:
        return _Pack()  # a copied module packs its own weight on first use (oneDNN's layout
        # cannot be copied)

    def __getstate__(self) -> dict[str, Any]:
        return vars(_Pack())

    def of(self, weight: torch.Tensor) -> torch.Tensor:
        if (self.packed is None or self.source is None or weight._version != self.version
                or weight.data_ptr() != self.source.data_ptr()):
            self.source, self.version = weight.detach(), weight._version
            with torch.inference_mode():
                self.packed = torch.ops.mkldnn._reorder_linear_weight(
                    self.source.contiguous(), None)
        return self.packed


def product(self: nn.Linear, x: torch.Tensor) -> Any:
    """``F.linear(x, weight, bias)`` of a linear: through its packed weight where it has one
    (:func:`pack_for_cpu`) and ``x``'s rows pack (:func:`_rows_packed`), outside autograd and
    compilation; otherwise ``F.linear`` itself."""
    pack = getattr(self, _PACKED, None)
    rows = x.numel() // x.shape[-1] if x.dim() and x.shape[-1] else 0
    if (pack is None or x.dtype != self.weight.dtype or not _rows_packed(rows, x.dtype)
            or x.device.type != "cpu" or _COMPILING()
            or (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad))):
        return F.linear(x, self.weight, self.bias)
    bias = None if self.bias is None else self.bias.detach()
    y = torch.ops.mkldnn._linear_pointwise(
        x.reshape(rows, x.shape[-1]).contiguous(), pack.of(self.weight), bias, "none", [], "")
    return y.reshape(*x.shape[:-1], y.shape[-1])
