"""The roofline over a (batch, context, tokens) sweep: per-operator times and the step total."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from treeopt.errors import TreeoptError
from treeopt.files import check_format
from treeopt.roofline.config import ModelConfig
from treeopt.roofline.hardware import Hardware
from treeopt.roofline.model import (
    BF16,
    BYTE_KINDS,
    OP_CLASSES,
    PURE_ROOFLINE,
    ROOFLINE_FORMAT,
    Array,
    Efficiency,
    Operators,
    Precision,
    operators,
)


@dataclass(frozen=True, eq=False)
class Roofline:
    """Predicted step latency on a grid; ``total_s[ib, is, iq]`` in seconds.

    >>> from treeopt.roofline.config import preset
    >>> hw = Hardware("toy", tflops_bf16=100.0, tflops_fp32=10.0, bandwidth_gbs=1000.0)
    >>> r = roofline(preset("llama-2-7b"), hw, batch=[1], context=[512], tokens=[1, 64])
    >>> [round(float(x) * 1e3, 3) for x in r.total_s[0, 0]]  # memory-bound: 13.2 GB of weights
    [13.495, 14.266]
    """

    config: ModelConfig
    hardware: Hardware
    precision: Precision
    efficiency: Efficiency
    attention: str
    batch: tuple[int, ...]
    context: tuple[int, ...]
    tokens: tuple[int, ...]
    ops: Operators
    op_s: Array  # [ops, B, S, Q]: all instances of the operator, efficiency applied
    class_raw_s: Array  # [classes, B, S, Q]: roofline time per class before efficiency
    total_s: Array = field(repr=False)  # [B, S, Q]

    def seconds(self, batch: int, context: int, tokens: int) -> float:
        """Step latency at one swept point."""
        try:
            ib, ic, iq = (self.batch.index(batch), self.context.index(context),
                          self.tokens.index(tokens))
        except ValueError:
            raise TreeoptError(f"({batch}, {context}, {tokens}) is not in this roofline's sweep "
                               f"{list(self.batch)} × {list(self.context)} × {list(self.tokens)}"
                               ) from None
        return float(self.total_s[ib, ic, iq])

    def points(self) -> list[tuple[int, int, int, float]]:
        """``(batch, context, tokens, seconds)`` of every swept point."""
        return [(b, s, q, float(self.total_s[ib, ic, iq])) for ib, b in enumerate(self.batch)
                for ic, s in enumerate(self.context) for iq, q in enumerate(self.tokens)]

    def records(self) -> list[dict[str, Any]]:
        """One record per (b, s, q): every operator's flops, bytes, intensity, bound, time."""
        ops = self.ops
        counts = ops.counts[:, None, None, None]
        flops, by_kind = ops.flops * counts, ops.bytes * counts[:, None]
        moved = by_kind.sum(axis=1)
        compute = flops / self._peaks()[:, None, None, None]
        bound = np.where(compute >= moved / self.hardware.bandwidth, "compute", "memory")
        f_l, m_l, k_l, t_l, b_l = (flops.tolist(), moved.tolist(), by_kind.tolist(),
                                   self.op_s.tolist(), bound.tolist())
        out = []
        for ib, b in enumerate(self.batch):
            for ic, s in enumerate(self.context):
                for iq, q in enumerate(self.tokens):
                    out.append({
                        "batch": b, "context": s, "tokens": q,
                        "time_s": float(self.total_s[ib, ic, iq]),
                        "flops": float(flops[:, ib, ic, iq].sum()),
                        "bytes": float(moved[:, ib, ic, iq].sum()),
                        "operators": [_op_record(ops, j, f_l[j][ib][ic][iq], m_l[j][ib][ic][iq],
                                                 [k_l[j][x][ib][ic][iq] for x in range(5)],
                                                 b_l[j][ib][ic][iq], t_l[j][ib][ic][iq])
                                      for j in range(len(ops.names))],
                    })
        return out

    def to_json(self) -> dict[str, Any]:
        hw = self.hardware.to_json()
        hw.pop("format")
        return {"format": ROOFLINE_FORMAT, "model": self.config.to_json(), "hardware": hw,
                "dtype": self.precision.compute, "precision": self.precision.__dict__,
                "attention": self.attention, "efficiency": self.efficiency.to_json(),
                "records": self.records()}

    def _peaks(self) -> Array:
        return np.where(self.ops.tensor, self.hardware.matmul_flops(self.precision.compute),
                        self.hardware.vector_flops)


def _op_record(ops: Operators, j: int, flops: float, moved: float, kinds: list[float],
               bound: str, time_s: float) -> dict[str, Any]:
    return {"name": ops.names[j], "class": OP_CLASSES[int(ops.classes[j])],
            "count": int(ops.counts[j]), "flops": flops, "bytes": moved,
            "bytes_by_kind": dict(zip(BYTE_KINDS, kinds, strict=True)),
            "intensity": flops / moved if moved else None, "bound": bound, "time_s": time_s}


def roofline(cfg: ModelConfig, hardware: Hardware, *, batch: Sequence[int],
             context: Sequence[int], tokens: Sequence[int], precision: Precision = BF16,
             efficiency: Efficiency = PURE_ROOFLINE, attention: str = "fused") -> Roofline:
    """Predict the step latency of every (b, s, q) in ``batch × context × tokens``."""
    for flag, values in (("--batch", batch), ("--context", context), ("--tokens", tokens)):
        if not values or any(int(v) < (0 if flag == "--context" else 1) for v in values):
            raise TreeoptError(f"{flag}: expected a non-empty list of positive integers, got "
                               f"{list(values)}")
    cfg.check_positions(max(context), max(tokens))
    ops = operators(cfg, precision, batch, context, tokens, attention=attention)
    peaks = np.where(ops.tensor, hardware.matmul_flops(precision.compute), hardware.vector_flops)
    one = np.maximum(ops.flops / peaks[:, None, None, None],
                     ops.bytes.sum(axis=1) / hardware.bandwidth)  # [ops, B, S, Q]
    raw = one * ops.counts[:, None, None, None]
    class_raw = np.stack([raw[ops.classes == c].sum(axis=0) for c in range(len(OP_CLASSES))])
    op_s = raw / efficiency.factors()[ops.classes][:, None, None, None]
    total = op_s.sum(axis=0) + efficiency.overhead_s
    return Roofline(cfg, hardware, precision, efficiency, attention, tuple(map(int, batch)),
                    tuple(map(int, context)), tuple(map(int, tokens)), ops, op_s, class_raw, total)


def read_roofline_points(doc: dict[str, Any], *, source: str) -> list[tuple[int, int, int, float]]:
    """``(batch, context, tokens, seconds)`` from a saved roofline document."""
    check_format(doc, ROOFLINE_FORMAT, source)
    try:
        return [(int(r["batch"]), int(r["context"]), int(r["tokens"]), float(r["time_s"]))
                for r in doc["records"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise TreeoptError(f"{source}: malformed roofline records ({exc!r})") from None
