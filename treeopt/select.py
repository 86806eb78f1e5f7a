"""Throughput-optimal tree per (batch size, context length).

``tokens/s(T, b, s) = b · E[L](T) / (t_verify(b, s, |T| + 1) + t_draft(T, b))``, scanned over the
growth's sizes n = 0 … N (n = 0 is autoregressive decoding: q = 1, E[L] = 1, no drafting) and,
where drafting cost grows with depth (Hydra), over depth caps too: the capped family is the growth
order with deeper nodes removed, exact because values fall along every path. ``t_verify`` comes
from a measured latency table or a roofline (:mod:`treeopt.costs`), interpolated linearly between
measured q; sizes beyond the largest q measured are not considered. The result is a
:class:`~treeopt.selection.Selection`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from treeopt.costs import NO_DRAFT, DraftCost, StepLatency, expanded_nodes
from treeopt.errors import TreeoptError
from treeopt.grow import Growth
from treeopt.selection import Curve, DepthCapBest, Point, Selection
from treeopt.tree import Tree

Scan = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]


@dataclass(frozen=True, eq=False)
class _Family:
    """Trees T_0 … T_N of one depth cap: E[L], expanded nodes and the trees themselves."""

    max_depth: int | None
    ell: npt.NDArray[np.float64]
    expanded: list[tuple[int, ...]]
    tree: Callable[[int], Tree]


def _families(growth: Growth, caps: Sequence[int | None]) -> list[_Family]:
    ell = np.asarray(growth.expected_accept_length, dtype=np.float64)
    if growth.constraint == "uniform":
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


def _scan(fam: _Family, verify: StepLatency, draft: DraftCost, b: int, s: int) -> Scan:
    """Tokens/s, verify seconds and draft seconds of every tree of the family at (b, s)."""
    sizes = np.arange(len(fam.ell))
    t_verify = verify.seconds(b, s, sizes + 1)
    t_draft = np.array([draft.seconds(b, e) for e in fam.expanded])
    tps = b * fam.ell / (t_verify + t_draft)  # NaN beyond the measured q
    return tps, t_verify, t_draft


def select(growth: Growth, verify: StepLatency, *, batch: Sequence[int], context: Sequence[int],
           draft: DraftCost = NO_DRAFT, depth_caps: Sequence[int] | None = None) -> Selection:
    """The best tree per (b, s), its tokens/s and speed-up, the curve, and where speculation
    stops paying (:meth:`~treeopt.selection.Selection.stops_paying`)."""
    if growth.max_nodes < 1:
        raise TreeoptError("the growth holds no trees (max_nodes 0)")
    caps: list[int | None] = [None]
    if depth_caps:
        caps = sorted(set(depth_caps))
    elif draft.per_depth and growth.constraint != "uniform":
        caps = list(range(1, max(len(p) for p in growth.order) + 1))
    families = _families(growth, caps)
    points = tuple(_point(families, verify, draft, b, s) for b in batch for s in context)
    return Selection(
        growth={"method": growth.method, "max_nodes": growth.max_nodes,
                "constraint": growth.constraint},
        latency={"source": verify.source, **verify.meta},
        draft={"kind": draft.kind, "source": draft.source}, depth_caps=tuple(caps),
        points=points)


def _point(families: list[_Family], verify: StepLatency, draft: DraftCost, b: int,
           s: int) -> Point:
    scans = [_scan(f, verify, draft, b, s) for f in families]
    best_f, best_n, best = 0, 0, -np.inf
    for i, (tps, _, _) in enumerate(scans):
        n = int(np.nanargmax(tps))
        if tps[n] > best + 1e-12 * abs(best if np.isfinite(best) else 0):
            best_f, best_n, best = i, n, float(tps[n])
    fam, (tps, tv, td) = families[best_f], scans[best_f]
    ar = float(tps[0])
    paying = np.flatnonzero(np.nan_to_num(tps, nan=-np.inf) > ar * (1 + 1e-12))
    caps = ()
    if len(families) > 1:
        caps = tuple(DepthCapBest(f.max_depth, int(np.nanargmax(sc[0])), float(np.nanmax(sc[0])))
                     for f, sc in zip(families, scans, strict=True))
    return Point(
        batch=b, context=s, tree=fam.tree(best_n), max_depth=fam.max_depth,
        expected_accept_length=float(fam.ell[best_n]), verify_ms=float(tv[best_n] * 1e3),
        draft_ms=float(td[best_n] * 1e3), tokens_per_s=best, autoregressive_tokens_per_s=ar,
        max_paying_size=int(paying.max()) if paying.size else 0,
        curve=Curve(tuple(range(len(tps))),
                    tuple(None if np.isnan(x) else float(x) for x in tps)),
        by_depth_cap=caps)
