"""Predicted cost of the draft heads per decoding step (pure roofline, no efficiency factors).

The shapes follow :mod:`treeopt.drafters.heads` (T = tokens the heads run on, h = hidden, V =
vocabulary):

- Medusa (one call, T = b: the last accepted token of each sequence), per head:
  ``num_layers`` ResBlocks (linear h→h with bias: 2·T·h² + T·h FLOPs, w·(h² + h) + 2·a·T·h bytes;
  SiLU and residual: 5·T·h FLOPs, 3·a·T·h bytes), then the projection h→V (2·T·h·V FLOPs,
  w·h·V + a·T·h + a·T·V bytes). All K heads run every step.
- Hydra head k (one call per depth, T = b·m for the m nodes expanded at depth k): gathers k+1
  token embeddings (w·(k+1)·T·h bytes) and concatenates ``[h; e…]`` (2·a·(k+2)·T·h bytes), an input
  linear (k+2)·h→h, SiLU and residual, ``num_layers − 1`` ResBlocks, the projection h→V.
- EAGLE / EAGLE-3 and a draft model (one call per depth): decoder layers of a Llama-like shape
  (see :func:`_eagle` and :func:`_draft_model`); attention over the cached context is left out.
- MTP (one call per depth, through module k mod n): EAGLE's call plus two input norms and the
  output norm, the fc without a bias, one layer per module (see :func:`_mtp`).
- Prompt lookup: no device work (a host lookup, :func:`_lookup`).

Which formula prices a kind, and the shape of EAGLE's fc, are fields of the kind's
:class:`~treeopt.registry.kinds.DrafterKind` (``draft_formula``, ``fc_inputs``, ``fc_bias``).

Each operator takes max(FLOPs / peak, bytes / bandwidth): matmuls at the dtype's tensor peak,
element-wise work at the FP32 vector peak.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from treeopt.errors import TreeoptError
from treeopt.registry.kinds import drafter_kind
from treeopt.roofline.hardware import Hardware
from treeopt.roofline.model import BF16, Precision


@dataclass(frozen=True)
class DraftSpec:
    """The shape of a set of draft heads (the fields of ``treeopt.registry.drafter_configs.HeadsConfig``).

    >>> hw = Hardware("toy", tflops_bf16=100.0, tflops_fp32=10.0, bandwidth_gbs=1000.0)
    >>> spec = DraftSpec("medusa", num_heads=4, hidden_size=4096, vocab_size=32000)
    >>> round(draft_seconds(spec, hw, batch=1, expanded=[1, 2]) * 1e3, 4)  # 4 × 295 MB of weights
    1.1833
    """

    kind: str
    num_heads: int
    hidden_size: int
    vocab_size: int
    num_layers: int = 1

    def __post_init__(self) -> None:
        drafter_kind(self.kind, source="--draft-kind")
        if min(self.num_heads, self.hidden_size, self.vocab_size) < 1 or self.num_layers < 0:
            raise TreeoptError(f"draft heads: sizes must be positive, got {self}")


def draft_seconds(spec: DraftSpec, hardware: Hardware, *, batch: int, expanded: Sequence[int],
                  precision: Precision = BF16) -> float:
    """Seconds the heads take in one step for a tree whose depth-k expansion has ``expanded[k]``
    nodes (``expanded[0] = 1``: the root); an empty tree drafts nothing."""
    if not expanded:
        return 0.0
    cost = _Cost(hardware, precision)
    _FORMULAS[drafter_kind(spec.kind).draft_formula](cost, spec, batch, expanded)
    return cost.seconds


def _medusa(cost: _Cost, spec: DraftSpec, batch: int, expanded: Sequence[int]) -> None:
    """One call: every head on the last accepted token of each sequence."""
    h, v, t = spec.hidden_size, spec.vocab_size, batch
    for _ in range(spec.num_heads):
        for _ in range(spec.num_layers):
            cost.resblock(t, h)
        cost.linear(t, h, v, bias=False)


def _hydra(cost: _Cost, spec: DraftSpec, batch: int, expanded: Sequence[int]) -> None:
    """One call per depth k, on the ``expanded[k]`` nodes of every sequence."""
    h, v, p = spec.hidden_size, spec.vocab_size, cost.p
    for k, m in enumerate(expanded[: spec.num_heads]):
        t = batch * m
        cost.memory(p.weight_bytes * (k + 1) * t * h + 2 * p.activation_bytes * (k + 2) * t * h)
        cost.linear(t, (k + 2) * h, h, bias=True)
        cost.elementwise(t * h, per_element=5, tensors=3)
        for _ in range(spec.num_layers - 1):
            cost.resblock(t, h)
        cost.linear(t, h, v, bias=False)


class _Cost:
    """Accumulates max(FLOPs / peak, bytes / bandwidth) over operators."""

    def __init__(self, hardware: Hardware, precision: Precision) -> None:
        self.hw, self.p, self.seconds = hardware, precision, 0.0

    def linear(self, t: int, n_in: int, n_out: int, *, bias: bool) -> None:
        flops = 2 * t * n_in * n_out + (t * n_out if bias else 0)
        moved = (self.p.weight_bytes * (n_in * n_out + (n_out if bias else 0))
                 + self.p.activation_bytes * t * (n_in + n_out))
        self.seconds += max(flops / self.hw.matmul_flops(self.p.compute), moved / self.hw.bandwidth)

    def elementwise(self, elements: int, *, per_element: int, tensors: int) -> None:
        flops = per_element * elements
        moved = tensors * self.p.activation_bytes * elements
        self.seconds += max(flops / self.hw.vector_flops, moved / self.hw.bandwidth)

    def memory(self, moved: float) -> None:
        self.seconds += moved / self.hw.bandwidth

    def resblock(self, t: int, h: int) -> None:
        self.linear(t, h, h, bias=True)
        self.elementwise(t * h, per_element=5, tensors=3)


def _draft_model(cost: _Cost, spec: DraftSpec, batch: int, expanded: Sequence[int]) -> None:
    """One forward per depth on the ``expanded[k]`` nodes of every sequence (the first also
    reads the tokens committed last step, about one more per sequence): ``num_layers``
    decoder layers of a Llama-like shape (attention 4·h², MLP 8·h² weights: intermediate size
    8/3·h), then the projection h→V. Attention over the cached context is left out."""
    h, v = spec.hidden_size, spec.vocab_size
    for k, m in enumerate(expanded[: spec.num_heads]):
        t = batch * (m + (1 if k == 0 else 0))
        for _ in range(spec.num_layers):
            cost.linear(t, h, 12 * h, bias=False)
            cost.elementwise(t * h, per_element=10, tensors=6)
        cost.linear(t, h, v, bias=False)


def _eagle(cost: _Cost, spec: DraftSpec, batch: int, expanded: Sequence[int]) -> None:
    """One call per depth on the ``expanded[k]`` nodes of every sequence (the first also feeds
    the entries committed last step, about one more per sequence): the embedding gather, fc
    (2h→h; at the first call the kind's ``fc_inputs``·h→h: EAGLE-3 fuses three layers),
    ``num_layers`` decoder layers of a Llama-like shape (attention 4·h², MLP 8·h²), then the
    projection h→V."""
    h, v, p = spec.hidden_size, spec.vocab_size, cost.p
    kind = drafter_kind(spec.kind)
    for k, m in enumerate(expanded[: spec.num_heads]):
        t = batch * (m + (1 if k == 0 else 0))
        cost.memory(p.weight_bytes * t * h)
        cost.linear(t, (kind.fc_inputs if k == 0 else 2) * h, h, bias=kind.fc_bias)
        for _ in range(max(spec.num_layers, 1)):
            cost.linear(t, h, 12 * h, bias=False)
            cost.elementwise(t * h, per_element=10, tensors=6)
        cost.linear(t, h, v, bias=False)


def _mtp(cost: _Cost, spec: DraftSpec, batch: int, expanded: Sequence[int]) -> None:
    """One call per depth k on the ``expanded[k]`` nodes of every sequence, through module
    k mod n (n = ``num_layers`` modules; the first call also feeds the entries committed last
    step, about one per sequence, and every other module feeds them too, into its own cache):
    the embedding gather, ``enorm`` and ``hnorm`` (two RMS norms over h: 4 FLOPs an element),
    ``eh_proj`` 2h→h without a bias, one decoder layer of a Llama-like shape (attention 4·h²,
    MLP 8·h²), the output norm, then the projection h→V."""
    h, v, p = spec.hidden_size, spec.vocab_size, cost.p

    def module(t: int) -> None:
        cost.memory(p.weight_bytes * t * h)
        cost.elementwise(2 * t * h, per_element=4, tensors=2)
        cost.linear(t, 2 * h, h, bias=False)
        cost.linear(t, h, 12 * h, bias=False)
        cost.elementwise(t * h, per_element=10, tensors=6)

    for k, m in enumerate(expanded[: spec.num_heads]):
        t = batch * (m + (1 if k == 0 else 0))
        module(t)
        if k == 0:
            for _ in range(max(spec.num_layers, 1) - 1):
                module(batch)
        cost.elementwise(t * h, per_element=4, tensors=2)
        cost.linear(t, h, v, bias=False)


def _lookup(cost: _Cost, spec: DraftSpec, batch: int, expanded: Sequence[int]) -> None:
    """Prompt lookup: a dictionary lookup per sequence on the host, no device work at all (the
    measured step profile prices the host's time)."""


_FORMULAS: dict[str, Callable[[_Cost, DraftSpec, int, Sequence[int]], None]] = {
    "medusa": _medusa, "hydra": _hydra, "eagle": _eagle, "draft-model": _draft_model,
    "lookup": _lookup, "mtp": _mtp,
}  # by name: each registered kind's ``draft_formula`` (tests/test_roofline.py checks)
