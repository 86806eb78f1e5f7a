"""Throughput-optimal tree per (batch size, context length).

``tokens/s(T, b, s) = b · E[L](T) / (t_verify(b, s, |T| + 1) + t_draft(T, b) + t_overhead(b, |T|+1,
depth))``, scanned over the growth's sizes n = 0 … N (n = 0 is autoregressive decoding: q = 1,
E[L] = 1, no drafting) and,
where drafting cost grows with depth (Hydra), over depth caps too: the capped family is the growth
order with deeper nodes removed, exact because values fall along every path. ``t_verify`` comes
from a measured latency table or a roofline (:mod:`treeopt.pricing.costs`), interpolated linearly
between measured q; sizes beyond the largest q measured are not considered.

E[L] is the mean accepted length of the steps decoding really takes (the trace walked step by
step: what a live run measures): of the calibration trace when one is given, else the per-step
E[L] the growth stores. Only a growth without it (or depth caps without a trace) is priced with
its position-weighted E[L], and the selection's ``growth.acceptance`` says so. Given the trace,
the trees of a per-step greedy growth (:mod:`treeopt.model.step_growth`) are priced beside the
growth order's, the faster tree is picked, and each point names its ``family``. With
``drafted_only`` (a lookup drafter's trace that records its chain lengths), the chains verified
only as far as they were drafted are priced beside them (:mod:`treeopt.pricing.drafted`, family
``drafted chain``). The result is a :class:`~treeopt.pricing.selection.Selection`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from treeopt.errors import FieldError, TreeoptError
from treeopt.model.growth import Growth
from treeopt.model.simulation import nested_step_means, simulate
from treeopt.model.step_growth import GROWTH_ORDER, PER_STEP_GREEDY, grow_per_step
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Path, Tree
from treeopt.pricing.chains import chain_method, drafter_record, price_chains
from treeopt.pricing.costs import (
    NO_DRAFT,
    NO_OVERHEAD,
    DraftCost,
    OverheadCost,
    StepLatency,
    Throughput,
    expanded_nodes,
    throughput,
)
from treeopt.pricing.drafted import DRAFTED_CHAIN, NO_DRAFTED, chain_steps, drafted_price
from treeopt.pricing.selection import Curve, DepthCapBest, Point, Selection

MAX_BATCH = 1 << 20  # the largest batch size priced: beyond it, no device decodes
MAX_CONTEXT = 1 << 24  # the largest context length priced


@dataclass(frozen=True, eq=False)
class _Family:
    """Trees T_0 … T_N of one depth cap: E[L], expanded nodes and the trees themselves."""

    max_depth: int | None
    ell: npt.NDArray[np.float64]
    expanded: list[tuple[int, ...]]
    tree: Callable[[int], Tree]
    paths: list[Path] | None = None  # T_n = the first n paths, where the trees are so nested
    family: str = GROWTH_ORDER  # or PER_STEP_GREEDY, DRAFTED_CHAIN
    drafts: list[npt.NDArray[np.int64]] | None = None  # DRAFTED_CHAIN: each tree's steps' drafts


def _families(growth: Growth, caps: Sequence[int | None], trace: RankTrace | None,
              max_size: int) -> list[_Family]:
    ell = np.asarray(growth.expected_accept_length, dtype=np.float64)
    if growth.constraint == "uniform":
        trees = [growth.tree(n) for n in range(growth.max_nodes + 1)]
        fam = _Family(None, ell, [expanded_nodes(t.paths) for t in trees], growth.tree)
        if trace is None:
            return [replace(fam, ell=growth.headline_accept_length)]
        return [_walked(fam, trace, max_size)]
    order = list(growth.order)
    values = np.diff(ell)
    out = []
    for cap in caps:
        keep = [i for i, p in enumerate(order) if cap is None or len(p) <= cap]
        paths = [order[i] for i in keep]
        fam_ell = 1.0 + np.concatenate([[0.0], np.cumsum(values[keep])])
        expanded = [expanded_nodes(paths[:n]) for n in range(len(paths) + 1)]
        fam = _Family(cap, fam_ell, expanded, lambda n, paths=paths: Tree.from_choices(paths[:n]),
                      paths)
        out.append(_walked(fam, trace, max_size) if trace is not None else fam)
    if trace is None and list(caps) == [None]:  # the growth's own per-step E[L], if it has it
        return [replace(out[0], ell=growth.headline_accept_length)]
    return out


def _per_step_greedy(growth: Growth, caps: Sequence[int | None], trace: RankTrace,
                     max_size: int) -> _Family:
    """The per-step greedy growth's trees, under the growth's caps (depth: the deepest family
    priced), up to the largest size that can be priced."""
    deepest = None if None in caps else max(c for c in caps if c is not None)
    grown = grow_per_step(trace, max_nodes=min(growth.max_nodes, max_size),
                          max_depth=deepest or growth.caps.get("max_depth"),
                          max_rank=growth.caps.get("max_rank"), constraint=growth.constraint)
    paths = list(grown.order)
    return _Family(deepest, grown.accept_length,
                   [expanded_nodes(paths[:n]) for n in range(len(paths) + 1)], grown.tree, paths,
                   PER_STEP_GREEDY)


def _greedy_gains(greedy: _Family, families: list[_Family]) -> list[int]:
    """Sizes at which the per-step greedy tree accepts more per step than the growth order's
    tree of the same size and depth cap."""
    same = next(f for f in families if f.max_depth == greedy.max_depth)
    n = min(len(same.ell), len(greedy.ell))
    return [int(i) for i in np.flatnonzero(greedy.ell[:n] > same.ell[:n])]


def _walked(fam: _Family, trace: RankTrace, max_size: int) -> _Family:
    """The family with E[L] of every tree up to ``max_size`` nodes (the largest that can be
    priced) taken from the trace walked step by step."""
    ell = fam.ell.copy()
    sizes = min(len(ell), max_size + 1)
    if fam.paths is not None:
        ell[:sizes] = nested_step_means(fam.paths, trace, sizes=sizes)
    else:
        for n in range(sizes):
            ell[n] = simulate(fam.tree(n), trace, per_step=True).mean_accept_length
    return _Family(fam.max_depth, ell, fam.expanded, fam.tree, fam.paths)


def _drafted_chains(growth: Growth, trace: RankTrace, max_size: int) -> _Family:
    """The chains of depth 0 … the largest that can be priced (the trace's depths, the
    growth's nodes, the latency's tokens less the root), verified as drafted."""
    if trace.drafted is None:
        raise FieldError("trace", NO_DRAFTED)
    ell, drafts = chain_steps(trace, min(trace.heads, max_size, growth.max_nodes))
    return _Family(None, ell, [(1,) * d for d in range(len(ell))], Tree.chain,
                   family=DRAFTED_CHAIN, drafts=drafts)


def drafted_chain_prices(growth: Growth, trace: RankTrace, *, verify: StepLatency,
                         draft: DraftCost = NO_DRAFT, overhead: OverheadCost = NO_OVERHEAD,
                         batch: int, context: int) -> Throughput:
    """Tokens/s (and each term's seconds) of every chain verified as drafted that ``select
    --drafted-only`` prices, depth 0 … the deepest it can price, as it prices them."""
    fam = _drafted_chains(growth, trace, max_size=verify.max_tokens - 1)
    return _scan(fam, verify, draft, overhead, batch, context)


def _scan(fam: _Family, verify: StepLatency, draft: DraftCost, overhead: OverheadCost, b: int,
          s: int) -> Throughput:
    """Tokens/s and verify, draft and overhead seconds of every tree of the family."""
    if fam.drafts is not None:  # the steps walked once, priced at every (b, s)
        return drafted_price(fam.ell, fam.drafts, verify=verify, draft=draft,
                             overhead=overhead, batch=b, context=s)
    return throughput(fam.ell, tokens=list(range(1, len(fam.ell) + 1)), expanded=fam.expanded,
                      verify=verify, draft=draft, overhead=overhead, batch=b, context=s)


def growth_expected_accept_length(growth: Growth, tree: Tree) -> float:
    """E[L] of a tree made of the growth's nodes: 1 + the sum of their values (exact for any
    subset closed under prefixes, such as a depth-capped prefix of the order).

    >>> g = Growth("empirical", "none", ((0,), (0, 0), (1,)), np.array([1.0, 1.8, 2.4, 2.5]), {})
    >>> round(growth_expected_accept_length(g, Tree.from_choices([[0], [1]])), 12)
    1.9
    """
    value = dict(zip(growth.order, np.diff(np.asarray(growth.expected_accept_length)),
                     strict=True))
    missing = [p for p in tree.paths if p not in value]
    if missing:
        raise TreeoptError(f"the tree's node {list(missing[0])} is not in the growth")
    return 1.0 + float(sum(value[p] for p in tree.paths))


def price_tree(tree: Tree, *, verify: StepLatency, draft: DraftCost = NO_DRAFT,
               overhead: OverheadCost = NO_OVERHEAD, batch: int, context: int,
               expected_accept_length: float) -> tuple[float, float]:
    """Predicted tokens/s of ``tree`` and of autoregressive decoding at (batch, context): the
    formula :func:`select` scans, for one tree."""
    t = throughput([1.0, expected_accept_length], tokens=[1, tree.num_tokens],
                   expanded=[(), expanded_nodes(tree.paths)], verify=verify, draft=draft,
                   overhead=overhead, batch=batch, context=context).tokens_per_s
    return float(t[1]), float(t[0])


def select(growth: Growth, verify: StepLatency, *, batch: Sequence[int], context: Sequence[int],
           draft: DraftCost = NO_DRAFT, overhead: OverheadCost = NO_OVERHEAD,
           depth_caps: Sequence[int] | None = None, trace: RankTrace | None = None,
           search_per_step: bool = True, drafted_only: bool = False) -> Selection:
    """The best tree per (b, s), its tokens/s and speed-up, the curve, and where speculation
    stops paying (:meth:`~treeopt.pricing.selection.Selection.stops_paying`). With ``trace`` (one
    that records ``sequence_positions``), E[L] is the per-step walk of that trace and, with
    ``search_per_step``, the per-step greedy growth's trees are priced too; without it, the
    per-step E[L] the growth stores (the uncapped family only), else its position-weighted E[L].
    For a drafter vLLM drafts chains of, the chains are priced beside the trees
    (:func:`treeopt.pricing.chains.price_chains`). ``drafted_only``: the trace's chains verified
    only as far as the drafter drafted them are priced too (:mod:`treeopt.pricing.drafted`)."""
    if trace is not None and "sequence_positions" not in trace.meta:
        raise FieldError("trace", "lacks 'sequence_positions', which per-step E[L] needs "
                         "(recorded by treeopt calibrate)")
    if growth.max_nodes < 1:
        raise TreeoptError("the growth holds no trees (max_nodes 0)")
    check_grid(batch, context)
    caps: list[int | None] = [None]
    if depth_caps:
        caps = sorted(set(depth_caps))
    elif draft.per_depth and growth.constraint != "uniform":
        caps = list(range(1, max(len(p) for p in growth.order) + 1))
    families = _families(growth, caps, trace, max_size=verify.max_tokens - 1)
    searched: dict[str, object] = {}
    if trace is not None and search_per_step and growth.constraint != "uniform":
        greedy = _per_step_greedy(growth, caps, trace, max_size=verify.max_tokens - 1)
        searched = {"per_step_greedy": {"max_nodes": len(greedy.ell) - 1,
                                        "better_at": _greedy_gains(greedy, families)}}
        families.append(greedy)
    if drafted_only:
        if trace is None:
            raise FieldError("trace", "is needed to price drafted-only steps (their drafts are "
                             "read from it)")
        families.append(_drafted_chains(growth, trace, max_size=verify.max_tokens - 1))
    points = tuple(_point(families, verify, draft, overhead, b, s) for b in batch for s in context)
    drafter = drafter_record(growth)
    chains = (price_chains(growth, verify, batch=batch, context=context, draft=draft,
                           overhead=overhead, trace=trace) if chain_method(drafter) else None)
    return Selection(
        growth={"method": growth.method, "max_nodes": growth.max_nodes,
                "constraint": growth.constraint,
                "acceptance": _acceptance(growth, caps, trace), **searched,
                **({"drafted_only": True} if drafted_only else {}),
                **({"drafter": drafter} if drafter else {})},
        latency={"source": verify.source, **verify.meta},
        draft={"kind": draft.kind, "source": draft.source},
        overhead={"source": overhead.source}, depth_caps=tuple(caps), points=points,
        chains=chains)


def per_step_note(selection: Selection) -> str | None:
    """Where the per-step greedy growth's tree accepts more per step than the growth order's of
    the same size, and the points that pick it; None where it never does.

    >>> from treeopt.pricing.selection import Curve
    >>> p = Point(1, 64, Tree.chain(2), None, 2.5, 1.0, 0.0, 0.0, 250.0, 100.0, 2,
    ...           Curve((), ()), family="per-step greedy")
    >>> per_step_note(Selection({"per_step_greedy": {"max_nodes": 4, "better_at": [2, 3]}},
    ...                         {}, {}, {}, (None,), (p,)))
    'the per-step greedy growth accepts more per step than the growth order at sizes 2, 3; picked at batch 1 (context 64)'
    """
    better = (selection.growth.get("per_step_greedy") or {}).get("better_at") or []
    if not better:
        return None
    picked = [f"batch {p.batch} (context {p.context})" for p in selection.points
              if p.family == PER_STEP_GREEDY]
    return ("the per-step greedy growth accepts more per step than the growth order at sizes "
            + size_runs(better) + "; "
            + ("picked at " + ", ".join(picked) if picked else "no point picks it (it is not "
               "faster once priced)"))


def size_runs(sizes: Sequence[int]) -> str:
    """Sizes as runs: consecutive ones joined by a dash.

    >>> size_runs([2, 3, 4, 7, 9, 10])
    '2–4, 7, 9, 10'
    """
    runs: list[list[int]] = []
    for size in sorted(sizes):
        if runs and size == runs[-1][-1] + 1:
            runs[-1].append(size)
        else:
            runs.append([size])
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _acceptance(growth: Growth, caps: Sequence[int | None], trace: RankTrace | None) -> str:
    """Which E[L] the selection priced with."""
    if trace is not None:
        return "per-step walk of " + str(trace.meta.get("source_path", "the trace"))
    if growth.per_step_accept_length is not None and list(caps) == [None]:
        return "per-step E[L] of the growth"
    if growth.per_step_accept_length is not None:
        return "position-weighted E[L] of the growth (depth caps: per step needs the trace)"
    return "position-weighted E[L] of the growth"


def check_grid(batch: Sequence[int], context: Sequence[int], *,
               names: tuple[str, str] = ("batch size", "context length")) -> None:
    """Refuse batch sizes and context lengths that are not positive or are beyond what is
    priced (:data:`MAX_BATCH`, :data:`MAX_CONTEXT`); ``names``: what the errors call the two
    (the flags, on the command line).

    >>> check_grid([1, 2 ** 40], [128])
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: batch size 1099511627776 is outside 1 … 1048576, what select prices
    """
    for name, values, most in zip(names, (batch, context), (MAX_BATCH, MAX_CONTEXT),
                                  strict=True):
        for v in values:
            if not 0 < v <= most:
                raise TreeoptError(f"{name} {v} is outside 1 … {most}, what select prices")


def _point(families: list[_Family], verify: StepLatency, draft: DraftCost,
           overhead: OverheadCost, b: int, s: int) -> Point:
    scans = [_scan(f, verify, draft, overhead, b, s) for f in families]
    best_f, best_n, best = 0, 0, -np.inf
    for i, scan in enumerate(scans):
        tps = scan.tokens_per_s
        n = int(np.nanargmax(tps))
        if tps[n] > best + 1e-12 * abs(best if np.isfinite(best) else 0):
            best_f, best_n, best = i, n, float(tps[n])
    fam, scan = families[best_f], scans[best_f]
    tps = scan.tokens_per_s
    ar = float(tps[0])
    paying = np.flatnonzero(np.nan_to_num(tps, nan=-np.inf) > ar * (1 + 1e-12))
    capped = [(f, sc) for f, sc in zip(families, scans, strict=True) if f.family == GROWTH_ORDER]
    caps = ()
    if len(capped) > 1:
        caps = tuple(DepthCapBest(f.max_depth, int(np.nanargmax(sc.tokens_per_s)),
                                  float(np.nanmax(sc.tokens_per_s))) for f, sc in capped)
    return Point(
        batch=b, context=s, tree=fam.tree(best_n), max_depth=fam.max_depth,
        expected_accept_length=float(fam.ell[best_n]),
        verify_ms=float(scan.verify_s[best_n] * 1e3), draft_ms=float(scan.draft_s[best_n] * 1e3),
        overhead_ms=float(scan.overhead_s[best_n] * 1e3), tokens_per_s=best,
        autoregressive_tokens_per_s=ar,
        max_paying_size=int(paying.max()) if paying.size else 0,
        curve=Curve(tuple(range(len(tps))),
                    tuple(None if np.isnan(x) else float(x) for x in tps)),
        by_depth_cap=caps, family=fam.family)
