"""Grow the trees that maximise expected accepted length, every size at once.

Because a child's value never exceeds its parent's, adding nodes in decreasing value order (ties:
shallower first, then lexicographic path) gives, for every n, a tree T_n of maximal E[L] among
trees of n nodes under the same caps. The sequence T_1 ⊂ T_2 ⊂ … is one growth order.

Engine-shape constraints:
- ``contiguous``: the children of every node have ranks 0 … m-1 (the Hydra reference code). A rank
  becomes a candidate once its left sibling is in the tree; greedy is exact when values decrease
  with rank, as head accuracies do.
- ``grounded``: contiguous, and among siblings the ones with children are ranks 0 … e-1 (Hydra's
  grounded heads extend the first e candidates of a node). A node's first child becomes a
  candidate once its left sibling has one.
- ``uniform``: level-uniform trees (vLLM's drafter): every node at depth l-1 has the same c_l
  children ranked 0 … c_l-1. Not nested, so searched over branching vectors
  (:mod:`treeopt.model.uniform`).

E[L] above weights every trace position alike (``expected_accept_length``, position-weighted).
Where the trace records its sequences, a growth also holds each tree's per-step mean accepted
length (``per_step_accept_length``: the trace walked as decoding steps through it,
:func:`treeopt.model.simulation.nested_step_means`), what live decoding measures and what a person
reads first (:attr:`Growth.headline_accept_length`).
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from treeopt.errors import FieldError, TreeoptError
from treeopt.files import read_tagged_json, write_json
from treeopt.model.acceptance import (
    METHODS,
    Method,
    Source,
    accuracy_table,
    independent_value,
    prefix_counts,
)
from treeopt.model.simulation import accept_lengths, nested_step_means, node_visits, simulate
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Path, Tree, canonical_key
from treeopt.version import __version__

GROWTH_FORMAT = "treeopt.growth/1"
# suffix decoding's settings a growth's drafter record carries (treeopt.drafters.suffix_tree)
_SUFFIX_SETTINGS = ("max_spec_factor", "max_spec_offset", "min_token_prob", "max_cached_requests",
                    "history")
CONSTRAINTS: tuple[str, ...] = ("none", "contiguous", "grounded", "uniform")
Constraint = Literal["none", "contiguous", "grounded", "uniform"]


@dataclass(frozen=True, eq=False)
class Growth:
    """A growth order and the E[L] of each prefix (position-weighted, and per step where the
    trace recorded its sequences); for ``uniform``, the best tree per size."""

    method: str
    constraint: str
    order: tuple[Path, ...]  # nested families: T_n = first n paths
    expected_accept_length: npt.NDArray[np.float64]  # [max_nodes + 1]: E[L] of T_0 … T_N
    caps: dict[str, int]
    uniform: tuple[tuple[int, ...], ...] = ()  # uniform family: branching vector of T_n, n ≥ 1
    meta: dict[str, Any] = field(default_factory=dict)
    per_step_accept_length: npt.NDArray[np.float64] | None = None  # [max_nodes + 1]

    @property
    def max_nodes(self) -> int:
        return int(self.expected_accept_length.shape[0]) - 1

    @property
    def headline_accept_length(self) -> npt.NDArray[np.float64]:
        """E[L] of T_0 … T_N as a person reads it: per step where the growth has it (what live
        decoding measures), else position-weighted; :attr:`acceptance` says which."""
        if self.per_step_accept_length is not None:
            return self.per_step_accept_length
        return self.expected_accept_length

    @property
    def acceptance(self) -> str:
        """What :attr:`headline_accept_length` is: ``per step`` or ``position-weighted``."""
        return "per step" if self.per_step_accept_length is not None else "position-weighted"

    @property
    def drafter(self) -> dict[str, Any]:
        """The drafter this growth's trace was calibrated with, as far as it recorded it:
        ``kind``, ``checkpoint`` (the directory given to ``treeopt calibrate``), ``depth``
        (the depths it drafts) and, for an n-gram drafter, ``min_match`` and ``max_match`` (the
        n-gram lengths it matches), for an n-gram trie, ``match_type``, and for suffix decoding
        (``max_match``: its trees' depth) ``max_spec_factor``, ``max_spec_offset``,
        ``min_token_prob``, ``max_cached_requests`` and ``history`` (the responses its cache
        started from, where it was warmed); absent keys were not recorded."""
        meta = self.meta.get("trace_meta")
        meta = meta if isinstance(meta, dict) else {}
        heads = meta.get("heads_config") if isinstance(meta.get("heads_config"), dict) else {}
        found = {"kind": meta.get("head_kind") or self.meta.get("head_kind"),
                 "checkpoint": meta.get("heads"),
                 "depth": meta.get("num_heads") or heads.get("num_heads"),
                 "min_match": heads.get("min_match") or None,  # 0: not an n-gram drafter
                 "max_match": heads.get("max_match") or None,
                 "match_type": heads.get("match_type") or None,  # an n-gram trie's order
                 **{k: heads.get(k) for k in _SUFFIX_SETTINGS}}  # suffix decoding's
        return {k: v for k, v in found.items() if v is not None}

    def tree(self, n: int) -> Tree:
        """The best tree with at most ``n`` nodes (exactly ``n`` for nested families)."""
        if not 0 <= n <= self.max_nodes:
            raise TreeoptError(f"tree size {n} is outside this growth's 0 … {self.max_nodes}")
        if self.constraint == "uniform":
            return uniform_tree(self.uniform[n - 1]) if n else Tree(())
        return Tree.from_choices(self.order[:n])

    def evaluate(self, trace: RankTrace) -> npt.NDArray[np.float64]:
        """Empirical E[L] of T_0 … T_N on another trace (held-out evaluation).

        A node's acceptance does not depend on which other nodes are in the tree, so one
        simulation of the largest tree gives every prefix: 1 + cumulative node probabilities.
        """
        if self.constraint == "uniform":
            cache: dict[tuple[int, ...], float] = {}
            values = [1.0]
            for vec in self.uniform:
                if vec not in cache:
                    cache[vec] = float(accept_lengths(uniform_tree(vec), trace).mean())
                values.append(cache[vec])
            return np.asarray(values)
        full = self.tree(self.max_nodes)
        trace.require(heads=full.depth, source="held-out trace")
        prob = node_visits(full, trace) / trace.positions  # canonical order of `full`
        index = {p: i for i, p in enumerate(full.paths)}
        in_order = prob[[index[p] for p in self.order]]
        return 1.0 + np.concatenate([[0.0], np.cumsum(in_order)])

    def evaluate_headline(self, trace: RankTrace) -> npt.NDArray[np.float64]:
        """E[L] of T_0 … T_N on another trace, read as :attr:`headline_accept_length` is: per
        step where this growth holds per-step figures and ``trace`` records its sequences, else
        position-weighted (:meth:`evaluate`)."""
        steps = (self.evaluate_per_step(trace) if self.per_step_accept_length is not None
                 else None)
        return steps if steps is not None else self.evaluate(trace)

    def evaluate_per_step(self, trace: RankTrace) -> npt.NDArray[np.float64] | None:
        """Per-step mean accepted length of T_0 … T_N on ``trace`` (None where it records no
        ``sequence_positions``).

        >>> tr = RankTrace(np.array([[0], [0], [1], [0]], np.int16), {"sequence_positions": [4]})
        >>> g = grow(tr, method="empirical", max_nodes=2)
        >>> g.expected_accept_length.tolist(), g.evaluate_per_step(tr).tolist()
        ([1.0, 1.75, 2.0], [1.0, 1.6666666666666667, 2.0])
        """
        counts = trace.meta.get("sequence_positions")
        if not counts or sum(counts) != trace.positions:
            return None
        if self.constraint != "uniform":
            trace.require(heads=self.tree(self.max_nodes).depth, source="per-step trace")
            return nested_step_means(self.order, trace, sizes=self.max_nodes + 1)
        cache: dict[tuple[int, ...], float] = {}
        values = [1.0]
        for vec in self.uniform:
            if vec not in cache:
                cache[vec] = simulate(uniform_tree(vec), trace, per_step=True).mean_accept_length
            values.append(cache[vec])
        return np.asarray(values)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": GROWTH_FORMAT,
            "method": self.method,
            "constraint": self.constraint,
            "caps": self.caps,
            "order": [list(p) for p in self.order],
        }
        if self.per_step_accept_length is not None:
            doc["per_step_accept_length"] = _rounded(self.per_step_accept_length)
        doc["expected_accept_length"] = _rounded(self.expected_accept_length)
        if self.constraint == "uniform":
            doc["branching"] = [list(b) for b in self.uniform]
        doc["meta"] = self.meta
        return doc

    def save(self, path: str | os.PathLike[str]) -> None:
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Growth:
        return cls.from_json(read_tagged_json(path, GROWTH_FORMAT), source=str(path))

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str = "growth") -> Growth:
        try:
            order = tuple(tuple(int(r) for r in p) for p in doc["order"])
            ell = np.asarray(doc["expected_accept_length"], dtype=np.float64)
            steps = doc.get("per_step_accept_length")
            growth = cls(str(doc["method"]), str(doc.get("constraint", "none")), order, ell,
                         dict(doc.get("caps", {})),
                         tuple(tuple(int(c) for c in b) for b in doc.get("branching", [])),
                         dict(doc.get("meta", {})),
                         None if steps is None else np.asarray(steps, dtype=np.float64))
        except (KeyError, TypeError, ValueError) as exc:
            raise TreeoptError(f"{source}: malformed growth file ({exc!r})") from None
        _check_values(ell, growth.caps, source)
        if growth.per_step_accept_length is not None:
            _check_values(growth.per_step_accept_length, {}, source,
                          key="per_step_accept_length")
            if growth.per_step_accept_length.shape != ell.shape:
                raise TreeoptError(f"{source}: {growth.per_step_accept_length.size} values in "
                                   f"'per_step_accept_length' but {ell.size} in "
                                   "'expected_accept_length' (one per size 0 … N in each)")
        if growth.constraint != "uniform" and len(order) != growth.max_nodes:
            raise TreeoptError(f"{source}: {len(order)} nodes in 'order' but "
                               f"{len(ell)} E[L] values (expected one more than nodes)")
        if growth.constraint == "uniform" and len(growth.uniform) != growth.max_nodes:
            raise TreeoptError(f"{source}: 'branching' needs one entry per size")
        if growth.constraint != "uniform":
            _check_order(doc["order"], source)
        return growth


def _rounded(values: npt.NDArray[np.float64]) -> list[float]:
    return [round(float(x), 12) for x in values]


def _check_values(ell: npt.NDArray[np.float64], caps: dict[str, Any], source: str, *,
                  key: str = "expected_accept_length") -> None:
    """E[L] (at ``key``) of every size must be a finite number of at least 1 (T_0,
    autoregressive decoding, accepts exactly 1), and every cap a positive integer."""
    if ell.ndim != 1 or not ell.size:
        raise TreeoptError(f"{source}: '{key}' must be a list of numbers, one per size 0 … N")
    bad = np.flatnonzero(~np.isfinite(ell) | (ell < 1.0))
    if bad.size:
        n = int(bad[0])
        raise TreeoptError(f"{source}: '{key}' of size {n} is {ell[n]}; E[L] is a finite "
                           "number ≥ 1")
    for name, value in caps.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise TreeoptError(f"{source}: cap '{name}' must be a positive integer, got "
                               f"{value!r}")


def _check_order(order: list[Any], source: str) -> None:
    """Every prefix of ``order`` must be a tree: valid paths, each after its parent."""
    try:
        Tree.from_choices(order)  # integer ranks, no duplicates, prefix-closed
    except TreeoptError as exc:
        raise TreeoptError(f"{source}: {exc}") from None
    seen: set[Path] = set()
    for p in map(tuple, order):
        if len(p) > 1 and p[:-1] not in seen:
            raise TreeoptError(f"{source}: 'order' lists {list(p)} before its parent "
                               f"{list(p[:-1])}; every prefix of the order must be a tree")
        seen.add(p)


def grow(source: Source, *, method: Method, max_nodes: int, max_depth: int | None = None,
         max_rank: int | None = None, constraint: Constraint = "none") -> Growth:
    """Grow trees of 1 … ``max_nodes`` nodes maximising E[L] under ``method``; where ``source``
    is a trace that records its sequences, each tree's per-step E[L] on it too.

    >>> tr = RankTrace(np.array([[0, 0], [0, 1], [1, 0], [0, 0]], np.int16))
    >>> g = grow(tr, method="empirical", max_nodes=4)
    >>> g.order, g.expected_accept_length.tolist()
    (((0,), (0, 0), (1,), (0, 1)), [1.0, 1.75, 2.25, 2.5, 2.75])
    """
    if method not in METHODS:
        raise TreeoptError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if constraint not in CONSTRAINTS:
        raise TreeoptError(f"unknown constraint {constraint!r}; choose one of {', '.join(CONSTRAINTS)}")
    if max_nodes < 1:
        raise FieldError("max_nodes", f"must be at least 1, got {max_nodes}")
    heads, top_k = _shape(source)
    caps = {"max_nodes": max_nodes,
            "max_depth": heads if max_depth is None else min(max_depth, heads),
            "max_rank": top_k if max_rank is None else min(max_rank, top_k)}
    if caps["max_depth"] < 1 or caps["max_rank"] < 1:
        raise FieldError("max_depth", f"and {{max_rank}} must be at least 1, got {caps}")
    meta = _provenance(source)
    if constraint == "uniform":
        from treeopt.model.uniform import grow_uniform

        vectors, ell = grow_uniform(source, method=method, **caps)
        if len(vectors) < max_nodes:
            from treeopt.model.uniform import capped_note

            meta["exhausted"] = capped_note(max_nodes, len(vectors))
        return _with_steps(Growth(method, constraint, (), ell, caps, vectors, meta), source)
    value, scale = _value_function(source, method, caps)
    order, values = best_first(value, max_nodes=max_nodes, max_depth=caps["max_depth"],
                               max_rank=caps["max_rank"], shape=constraint)
    ell = 1.0 + np.concatenate([[0.0], np.cumsum(np.asarray(values, dtype=np.float64))]) / scale
    if len(order) < max_nodes:
        meta["exhausted"] = (f"only {len(order)} nodes have a non-zero acceptance probability "
                             "under the caps; larger trees cannot raise E[L]")
    return _with_steps(Growth(method, constraint, tuple(order), ell, caps, (), meta), source)


def _with_steps(growth: Growth, source: Source) -> Growth:
    """``growth`` with its trees' per-step E[L] on ``source``, where that is a trace recording
    its sequences."""
    if not isinstance(source, RankTrace):
        return growth
    return replace(growth, per_step_accept_length=growth.evaluate_per_step(source))


def best_first(value: Callable[[Path], float], *, max_nodes: int, max_depth: int, max_rank: int,
               shape: Constraint = "none") -> tuple[list[Path], list[float]]:
    """Add frontier nodes in decreasing ``value`` (ties: shallower, then lexicographic).

    ``shape`` limits the frontier: under ``contiguous`` a rank is a candidate once its left
    sibling is in; under ``grounded`` also a node's first child only once its left sibling has
    children. Nodes worth nothing are left out, except a rank that a more valuable later sibling
    can only be reached through (it comes after every valued node).
    """
    ordered = shape in ("contiguous", "grounded")
    heap: list[tuple[float, int, Path]] = []
    chosen: set[Path] = set()

    def bridges(p: Path) -> bool:  # a worthless node the shape needs below a valuable one
        if any(value(p[:-1] + (r,)) > 0 for r in range(p[-1] + 1, max_rank)):
            return True  # a later sibling
        return (shape == "grounded" and len(p) > 1 and p[-1] == 0  # a first child of a later
                and any(value(p[:-2] + (r, 0)) > 0 for r in range(p[-2] + 1, max_rank)))  # uncle

    def push(paths: Iterable[Path]) -> None:
        for p in paths:
            v = value(p)
            if v > 0 or (ordered and bridges(p)):
                heapq.heappush(heap, (-v, len(p), p))

    def may_have_children(p: Path) -> bool:  # grounded: left siblings are extended first
        return shape != "grounded" or p[-1] == 0 or p[:-1] + (p[-1] - 1, 0) in chosen

    push([(0,)] if ordered else [(r,) for r in range(max_rank)])
    order: list[Path] = []
    values: list[float] = []
    while heap and len(order) < max_nodes:
        neg, _, path = heapq.heappop(heap)
        order.append(path)
        values.append(-neg)
        chosen.add(path)
        if not ordered:
            if len(path) < max_depth:
                push(path + (r,) for r in range(max_rank))
            continue
        new = [path[:-1] + (path[-1] + 1,)] if path[-1] + 1 < max_rank else []
        if len(path) < max_depth and may_have_children(path):
            new.append(path + (0,))
        if shape == "grounded" and len(path) > 1 and path[-1] == 0:  # a first child unlocks
            right = path[:-2] + (path[-2] + 1,)  # the right sibling of its parent
            if right in chosen:
                new.append(right + (0,))
        push(new)
    return order, values


def _value_function(source: Source, method: str,
                    caps: dict[str, int]) -> tuple[Callable[[Path], float], float]:
    """``value(path)`` and the scale that turns summed values into probabilities."""
    if method == "independent":
        marginal = accuracy_table(source).marginal
        return (lambda p: independent_value(marginal, p)), 1.0
    if not isinstance(source, RankTrace):
        raise TreeoptError("the empirical method needs a rank trace, not an accuracy table; "
                           "use the independent method")
    if source.positions == 0:
        raise TreeoptError("the rank trace is empty (0 positions)")
    counts = prefix_counts(source, max_depth=caps["max_depth"], max_rank=caps["max_rank"])
    return (lambda p: counts.get(p, 0)), float(source.positions)


def uniform_tree(branching: Iterable[int]) -> Tree:
    """The level-uniform tree in which every depth-(l-1) node has ``branching[l]`` children.

    >>> uniform_tree([2, 1]).paths
    ((0,), (1,), (0, 0), (1, 0))
    """
    level: list[Path] = [()]
    paths: list[Path] = []
    for c in branching:
        level = [p + (r,) for p in level for r in range(int(c))]
        paths.extend(level)
    return Tree(tuple(sorted(paths, key=canonical_key)))


def _shape(source: Source) -> tuple[int, int]:
    if isinstance(source, RankTrace):
        if source.positions == 0:
            raise TreeoptError("the rank trace is empty (0 positions)")
        return source.heads, max(source.top_k, 1)
    return source.heads, source.top_k


def _provenance(source: Source) -> dict[str, Any]:
    meta: dict[str, Any] = {"created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                            "treeopt_version": __version__}
    if isinstance(source, RankTrace):
        meta.update({"source": "rank trace", "positions": source.positions,
                     "trace_meta": dict(source.meta)})
        if source.head_kind:
            meta["head_kind"] = source.head_kind
    else:
        meta.update({"source": source.source,
                     "counts": None if source.counts is None else source.counts.tolist()})
    return meta
