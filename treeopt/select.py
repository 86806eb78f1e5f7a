"""Throughput-optimal tree per (batch size, context length), and per-batch-size schedules.

``tokens/s(T, b, s) = b · E[L](T) / (t_verify(b, s, |T| + 1) + t_draft(T, b))``, scanned over the
growth's sizes n = 0 … N (n = 0 is autoregressive decoding: q = 1, E[L] = 1, no drafting) and,
where drafting cost grows with depth (Hydra), over depth caps too: the capped family is the growth
order with deeper nodes removed, exact because values fall along every path. ``t_verify`` comes
from a measured latency table or a roofline, interpolated linearly between measured q; sizes
beyond the largest q measured are not considered.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from treeopt.drafters import drafter_kind
from treeopt.errors import TreeoptError
from treeopt.tree import Path, Tree

SELECTION_FORMAT = "treeopt.selection/1"
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

        def medusa(b: int, expanded: tuple[int, ...]) -> float:
            if b not in table:
                raise TreeoptError(f"{source}: no draft measurement at batch {b}; measured {batches}")
            return table[b]

        return DraftCost(kind.name, source, medusa)
    grid = StepLatency.from_points([(r["batch"], r["head"], r["nodes"], r["ms_median"] / 1e3)
                                    for r in rows], source).grid

    def hydra(b: int, expanded: tuple[int, ...]) -> float:
        if b not in batches:
            raise TreeoptError(f"{source}: no draft measurement at batch {b}; measured {batches}")
        total = 0.0
        for k, m in enumerate(expanded):
            if (b, k) not in grid:
                return float("nan")
            nodes, sec = grid[(b, k)]
            total += float(np.interp(m, nodes, sec)) if nodes[0] <= m <= nodes[-1] else np.nan
        return total

    return DraftCost(kind.name, source, hydra)


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


@dataclass(frozen=True, eq=False)
class _Family:
    """Trees T_0 … T_N of one depth cap: E[L], expanded nodes and the trees themselves."""

    max_depth: int | None
    ell: npt.NDArray[np.float64]
    expanded: list[tuple[int, ...]]
    tree: Callable[[int], Tree]


def _families(growth: Any, caps: Sequence[int | None]) -> list[_Family]:
    ell = np.asarray(growth.expected_accept_length, dtype=np.float64)
    if getattr(growth, "constraint", "none") == "uniform":
        trees = [growth.tree(n) for n in range(growth.max_nodes + 1)]
        return [_Family(None, ell, [expanded_nodes(t.paths) for t in trees], growth.tree)]
    order = list(growth.order)
    values = np.diff(ell)
    out = []
    for cap in caps:
        keep = [i for i, p in enumerate(order) if cap is None or len(p) <= cap]
        paths = [order[i] for i in keep]
        fam_ell = 1.0 + np.concatenate([[0.0], np.cumsum(values[keep])])
        expanded = [expanded_nodes(paths[:n]) for n in range(len(paths) + 1)]
        out.append(_Family(cap, fam_ell, expanded,
                           lambda n, paths=paths: Tree.from_choices(paths[:n])))
    return out


def _scan(fam: _Family, verify: StepLatency, draft: DraftCost, b: int, s: int):
    sizes = np.arange(len(fam.ell))
    t_verify = verify.seconds(b, s, sizes + 1)
    t_draft = np.array([draft.seconds(b, e) for e in fam.expanded])
    tps = b * fam.ell / (t_verify + t_draft)  # NaN beyond the measured q
    return tps, t_verify, t_draft


def select(growth: Any, verify: StepLatency, *, batch: Sequence[int], context: Sequence[int],
           draft: DraftCost = NO_DRAFT, depth_caps: Sequence[int] | None = None,
           ) -> dict[str, Any]:
    """The best tree per (b, s), its tokens/s and speedup, the curve, and where speculation stops
    paying; see :func:`schedule` for the per-batch-size export."""
    if growth.max_nodes < 1:
        raise TreeoptError("the growth holds no trees (max_nodes 0)")
    caps: list[int | None] = [None]
    if depth_caps:
        caps = sorted(set(depth_caps))
    elif draft.per_depth and getattr(growth, "constraint", "none") != "uniform":
        caps = list(range(1, max(len(p) for p in growth.order) + 1))
    families = _families(growth, caps)
    points = [_point(families, verify, draft, b, s) for b in batch for s in context]
    stops = []
    for s in context:
        at = [p["batch"] for p in points if p["context"] == s and p["best_size"] == 0]
        stops.append({"context": s, "batch": min(at) if at else None})
    return {"format": SELECTION_FORMAT, "formula": "b·E[L](T) / (t_verify(b, s, |T|+1) + t_draft(T, b))",
            "growth": {"method": growth.method, "max_nodes": growth.max_nodes,
                       "constraint": getattr(growth, "constraint", "none")},
            "latency": {"source": verify.source, **verify.meta},
            "draft": {"kind": draft.kind, "source": draft.source},
            "depth_caps": list(caps), "points": points, "stops_paying": stops}


def _point(families: list[_Family], verify: StepLatency, draft: DraftCost, b: int,
           s: int) -> dict[str, Any]:
    scans = [_scan(f, verify, draft, b, s) for f in families]
    best_f, best_n, best = 0, 0, -np.inf
    for i, (tps, _, _) in enumerate(scans):
        n = int(np.nanargmax(tps))
        if tps[n] > best + 1e-12 * abs(best if np.isfinite(best) else 0):
            best_f, best_n, best = i, n, float(tps[n])
    fam, (tps, tv, td) = families[best_f], scans[best_f]
    ar = float(tps[0])
    paying = np.flatnonzero(np.nan_to_num(tps, nan=-np.inf) > ar * (1 + 1e-12))
    tree = fam.tree(best_n)
    point = {
        "batch": b, "context": s, "best_size": best_n, "max_depth": fam.max_depth,
        "depth": tree.depth, "choices": tree.as_choices(),
        "expected_accept_length": float(fam.ell[best_n]), "verify_ms": float(tv[best_n] * 1e3),
        "draft_ms": float(td[best_n] * 1e3), "tokens_per_s": best,
        "autoregressive_tokens_per_s": ar, "speedup": best / ar, "pays": best_n > 0,
        "max_paying_size": int(paying.max()) if paying.size else 0,
        "curve": {"size": list(range(len(tps))),
                  "tokens_per_s": [None if np.isnan(x) else float(x) for x in tps]},
    }
    if len(families) > 1:
        point["by_depth_cap"] = [{"max_depth": f.max_depth, "best_size": int(np.nanargmax(sc[0])),
                                  "tokens_per_s": float(np.nanmax(sc[0]))}
                                 for f, sc in zip(families, scans, strict=True)]
    return point


def schedule(selection: dict[str, Any], *, context: int) -> dict[str, Any]:
    """One tree per batch-size range at ``context``, with TensorRT-LLM and vLLM forms.

    A batch size between two swept ones uses the tree of the next larger swept size (larger
    batches favour smaller trees); above the largest swept size speculation is off.
    """
    pts = sorted((p for p in selection["points"] if p["context"] == context),
                 key=lambda p: p["batch"])
    if not pts:
        swept = sorted({p["context"] for p in selection["points"]})
        raise TreeoptError(f"--schedule-context {context} was not swept; swept contexts: {swept}")
    ranges: list[dict[str, Any]] = []
    lo = 1
    for p in pts:
        if ranges and ranges[-1]["choices"] == p["choices"]:
            ranges[-1]["max_batch"] = p["batch"]
        else:
            ranges.append({"min_batch": lo, "max_batch": p["batch"], "size": p["best_size"],
                           "depth": p["depth"], "choices": p["choices"]})
        lo = p["batch"] + 1
    trt = {str(r["max_batch"]): r["size"] for r in ranges}
    while trt and list(trt.values())[-1] == 0:  # trailing zeros are implicit in TensorRT-LLM
        trt.pop(list(trt)[-1])
    vllm = [[r["min_batch"], r["max_batch"], r["size"]] for r in ranges]
    return {"context": context, "ranges": ranges,
            "tensorrt_llm": {"draft_len_schedule": trt},
            "vllm": {"num_speculative_tokens_per_batch_size": vllm},
            "note": "draft length = tree nodes (tokens drafted per step); batches above "
                    f"{pts[-1]['batch']} were not swept, so speculation is off there"}
