"""Fit the roofline's per-class efficiencies and per-step overhead to measured step latencies.

Model: ``t(b, s, q) = overhead + Σ_class R_class(b, s, q) / efficiency_class``, where R is the
class's pure roofline time. It is linear in ``x_class = 1 / efficiency_class`` and the overhead, so
the fit is a least-squares problem in relative error, solved exactly under the bounds
``efficiency ≤ 100`` and ``overhead ≥ 0`` by enumerating active sets (four unknowns, sixteen
sets). An efficiency above 1 does not mean a kernel beat the hardware: it means the row's peaks
are not that class's real ceiling (a tiny model's weights staying in CPU cache while the bandwidth
is DRAM's). The error of the fit is reported beside the unfitted roofline's.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from treeopt.errors import TreeoptError
from treeopt.roofline.config import ModelConfig
from treeopt.roofline.hardware import Hardware
from treeopt.roofline.model import BF16, OP_CLASSES, Array, Efficiency, Precision
from treeopt.roofline.step_times import roofline

Point = tuple[int, int, int, float]  # batch, context, tokens, measured seconds
MIN_SCALE = 0.01  # time multiplier = 1 / efficiency; efficiency ≤ 100


@dataclass(frozen=True)
class Fit:
    """Fitted efficiencies and the relative error before and after the fit."""

    efficiency: Efficiency
    points: int
    mean_abs_rel_error: float
    max_abs_rel_error: float
    unfitted_mean_abs_rel_error: float
    unfitted_max_abs_rel_error: float

    def to_json(self) -> dict[str, object]:
        return {"efficiency": self.efficiency.to_json(), "points": self.points,
                "mean_abs_rel_error": self.mean_abs_rel_error,
                "max_abs_rel_error": self.max_abs_rel_error,
                "unfitted_mean_abs_rel_error": self.unfitted_mean_abs_rel_error,
                "unfitted_max_abs_rel_error": self.unfitted_max_abs_rel_error}


def fit_efficiency(cfg: ModelConfig, hardware: Hardware, points: Sequence[Point], *,
                   precision: Precision = BF16, attention: str = "fused",
                   source: str = "the latency table") -> Fit:
    """Fit efficiencies to measured ``(batch, context, tokens, seconds)`` points."""
    if len(points) < 2:
        raise TreeoptError(f"{source}: the fit needs at least 2 measured points, got "
                           f"{len(points)}")
    b_list = sorted({p[0] for p in points})
    s_list = sorted({p[1] for p in points})
    q_list = sorted({p[2] for p in points})
    r = roofline(cfg, hardware, batch=b_list, context=s_list, tokens=q_list,
                 precision=precision, attention=attention)
    idx = tuple(np.array([lst.index(p[j]) for p in points]) for j, lst in
                enumerate((b_list, s_list, q_list)))
    raw = r.class_raw_s[:, idx[0], idx[1], idx[2]].T  # [points, classes]
    measured = np.array([p[3] for p in points], dtype=np.float64)
    if not np.all(np.isfinite(measured) & (measured > 0)):
        raise TreeoptError(f"{source}: measured latencies must be positive and finite")
    # x = MIN_SCALE + z, z ≥ 0; unknowns [z_matmul, z_attention, z_elementwise, overhead] ≥ 0
    design = np.column_stack([raw, np.ones(len(points))]) / measured[:, None]
    target = (measured - MIN_SCALE * raw.sum(axis=1)) / measured
    solution = _nnls(design, target)
    scale = MIN_SCALE + solution[:3]
    eff = Efficiency(*(float(1.0 / x) for x in scale), overhead_s=float(solution[3]))
    fitted = raw @ scale + solution[3]
    before = _errors(raw.sum(axis=1), measured)
    after = _errors(fitted, measured)
    return Fit(eff, len(points), after[0], after[1], before[0], before[1])


def _errors(predicted: Array, measured: Array) -> tuple[float, float]:
    rel = np.abs(predicted - measured) / measured
    return float(rel.mean()), float(rel.max())


def _nnls(a: Array, y: Array) -> Array:
    """min ‖a x − y‖ subject to x ≥ 0, exactly, by trying every support set (few unknowns).

    >>> _nnls(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([2.0, -1.0])).tolist()
    [2.0, 0.0]
    """
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    a = a / norms  # equilibrate columns (seconds and 1/seconds differ by orders of magnitude)
    n = a.shape[1]
    best, best_cost = np.zeros(n), float(np.sum(y * y))
    for size in range(1, n + 1):
        for support in itertools.combinations(range(n), size):
            cols = list(support)
            sol, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
            if np.any(sol < 0):
                continue
            x = np.zeros(n)
            x[cols] = sol
            cost = float(np.sum((a @ x - y) ** 2))
            if cost < best_cost - 1e-15:
                best, best_cost = x, cost
    return best / norms


__all__ = ["OP_CLASSES", "Fit", "fit_efficiency"]
