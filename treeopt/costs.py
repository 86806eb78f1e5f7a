"""What a decoding step costs: verify-step latency (measured or predicted) and drafting.

``t_verify(b, s, q)`` comes from a latency table or a roofline, interpolated linearly between
measured q (:class:`StepLatency`); the drafter's cost from its own measurements or a roofline
(:class:`DraftCost`), as a function of the batch and the nodes expanded at each depth
(:func:`expanded_nodes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from treeopt.drafters import drafter_kind
from treeopt.errors import TreeoptError
from treeopt.tree import Path

Grid = dict[tuple[int, int], tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]]
DraftFn = Callable[[int, tuple[int, ...]], float]  # (batch, nodes expanded per depth) → seconds


@dataclass(frozen=True, eq=False)
class StepLatency:
    """Verify-step seconds: ``grid[(b, s)] = (q ascending, seconds)``; ``source`` describes it."""

    grid: Grid
    source: str
    meta: dict[str, Any] = field(default_factory=dict)

    def seconds(self, batch: int, context: int, tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """Seconds at each q, linear between measured q, NaN beyond the largest.

        >>> lat = StepLatency({(1, 8): (np.array([1.0, 4.0]), np.array([0.01, 0.04]))}, "toy")
        >>> lat.seconds(1, 8, np.array([1, 2, 5])).tolist()
        [0.01, 0.02, nan]
        """
        if (batch, context) not in self.grid:
            known = ", ".join(f"{b}×{s}" for b, s in sorted(self.grid))
            raise TreeoptError(f"{self.source}: no measurements at batch {batch}, context "
                               f"{context}; it has (batch×context) {known}")
        q, t = self.grid[(batch, context)]
        if q[0] != 1:
            raise TreeoptError(f"{self.source}: no tokens=1 step at batch {batch}, context "
                               f"{context}; the autoregressive baseline needs it")
        tokens = np.asarray(tokens, dtype=np.float64)
        return np.where(tokens <= q[-1], np.interp(tokens, q, t), np.nan)

    @property
    def batches(self) -> list[int]:
        return sorted({b for b, _ in self.grid})

    @property
    def contexts(self) -> list[int]:
        return sorted({s for _, s in self.grid})

    @classmethod
    def from_points(cls, points: Sequence[tuple[int, int, int, float]], source: str,
                    **meta: Any) -> StepLatency:
        """From ``(batch, context, tokens, seconds)`` points."""
        rows: dict[tuple[int, int], list[tuple[int, float]]] = {}
        for b, s, q, sec in points:
            rows.setdefault((int(b), int(s)), []).append((int(q), float(sec)))
        grid = {k: (np.array([q for q, _ in sorted(v)], dtype=np.float64),
                    np.array([t for _, t in sorted(v)], dtype=np.float64)) for k, v in rows.items()}
        return cls(grid, source, dict(meta))


@dataclass(frozen=True)
class DraftCost:
    """The drafter's seconds per step, ``fn(batch, expanded)``; ``kind`` names the drafter
    ("none": drafting not priced)."""

    kind: str = "none"
    source: str = "not included"
    fn: DraftFn | None = None

    def seconds(self, batch: int, expanded: tuple[int, ...]) -> float:
        return 0.0 if self.fn is None or not expanded else float(self.fn(batch, expanded))

    @property
    def per_depth(self) -> bool:
        """One drafter call per tree depth, so deeper trees cost more to draft."""
        return self.kind != "none" and drafter_kind(self.kind).per_depth


NO_DRAFT = DraftCost()


def draft_from_measurements(doc: dict[str, Any], *, source: str) -> DraftCost:
    """Draft cost from a ``treeopt.draft-latency/1`` document (``treeopt profile draft``).

    Hydra heads are interpolated linearly in nodes; a depth or node count beyond the measured
    ones gives NaN, which removes that tree from the scan.
    """
    kind = drafter_kind(doc["heads"]["kind"], source=f"{source}: heads kind")
    rows = [r for r in doc["records"] if r.get("ms_median") is not None]
    batches = sorted({int(r["batch"]) for r in rows})
    if not kind.per_depth:
        table = {int(r["batch"]): float(r["ms_median"]) / 1e3 for r in rows}

        def one_call(b: int, expanded: tuple[int, ...]) -> float:
            if b not in table:
                raise TreeoptError(f"{source}: no draft measurement at batch {b}; measured {batches}")
            return table[b]

        return DraftCost(kind.name, source, one_call)
    grid = StepLatency.from_points([(r["batch"], r["head"], r["nodes"], r["ms_median"] / 1e3)
                                    for r in rows], source).grid

    def by_depth(b: int, expanded: tuple[int, ...]) -> float:
        if b not in batches:
            raise TreeoptError(f"{source}: no draft measurement at batch {b}; measured {batches}")
        total = 0.0
        for k, m in enumerate(expanded):
            if (b, k) not in grid:
                return float("nan")
            nodes, sec = grid[(b, k)]
            total += float(np.interp(m, nodes, sec)) if nodes[0] <= m <= nodes[-1] else np.nan
        return total

    return DraftCost(kind.name, source, by_depth)


def expanded_nodes(paths: Sequence[Path]) -> tuple[int, ...]:
    """Nodes each depth's head runs on: the root at depth 0, then every node that has a child.

    >>> expanded_nodes([(0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)])
    (1, 2, 1)
    """
    if not paths:
        return ()
    depth = max(len(p) for p in paths)
    parents = {p[:-1] for p in paths}
    return tuple(sum(1 for p in parents if len(p) == k) for k in range(depth))
