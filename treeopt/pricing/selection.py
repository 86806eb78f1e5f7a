"""The result of a selection: the best tree per (batch, context) with its predicted curve, and
per-batch-size schedules in the engines' forms. Frozen types; ``to_json`` is the file format.

File: ``"format": "treeopt.selection/1"``: ``formula``, ``growth`` (with ``acceptance``: which
E[L] was priced, and ``per_step_greedy``: the size of the per-step greedy growth priced and the
sizes at which it accepts more per step than the growth order), ``latency``, ``draft``,
``depth_caps``, ``points`` (one per (batch, context), each naming its tree's ``family``), ``stops_paying`` (per context, the first
batch size at which no tree beats autoregressive decoding), ``schedules`` (per context) and,
for a drafter vLLM drafts chains of, ``chains`` (:class:`~treeopt.pricing.chains.ChainTable`:
every (batch, context)'s chains priced, from which each schedule's ``vllm_per_batch`` is made).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from treeopt.documents.fields import integer, integers, listed, mapping, number, numbers, optional
from treeopt.engines.forms import per_batch_forms
from treeopt.engines.lookup import lookup_schedule, recorded_lookup, recorded_trie
from treeopt.engines.trtllm.schedule import DEFAULT_READING
from treeopt.errors import FieldError, TreeoptError
from treeopt.files import read_tagged_json
from treeopt.model.step_growth import FAMILIES, GROWTH_ORDER
from treeopt.model.tree import Tree
from treeopt.pricing.chains import ChainTable, chain_method
from treeopt.pricing.contexts import pick_context
from treeopt.pricing.drafted import DRAFTED_CHAIN
from treeopt.pricing.per_batch_k import vllm_per_batch

SELECTION_FORMAT = "treeopt.selection/1"
POINT_FAMILIES = (*FAMILIES, DRAFTED_CHAIN)  # the trees a point's best one may come from
FORMULA = "b·E[L](T) / (t_verify(b, s, |T|+1) + t_draft(T, b) + t_overhead(b, |T|+1, depth(T)))"


@dataclass(frozen=True)
class Curve:
    """Predicted tokens/s of the tree of every size (None where the latency is unknown)."""

    size: tuple[int, ...]
    tokens_per_s: tuple[float | None, ...]


@dataclass(frozen=True)
class DepthCapBest:
    """The best tree of one depth-capped family at a point."""

    max_depth: int | None
    best_size: int
    tokens_per_s: float


@dataclass(frozen=True)
class Point:
    """The best tree at one (batch, context) and what it is predicted to do there."""

    batch: int
    context: int
    tree: Tree
    max_depth: int | None  # the depth cap of the family the best tree comes from
    expected_accept_length: float
    verify_ms: float
    draft_ms: float
    overhead_ms: float
    tokens_per_s: float
    autoregressive_tokens_per_s: float
    max_paying_size: int  # largest size still faster than autoregressive decoding
    curve: Curve
    by_depth_cap: tuple[DepthCapBest, ...] = ()  # the growth order's families, one per cap
    family: str = GROWTH_ORDER  # the trees the best one comes from (POINT_FAMILIES)

    @property
    def drafted(self) -> bool:
        """Whether the best tree is a lookup drafter's chain verified as far as it was drafted."""
        return self.family == DRAFTED_CHAIN

    @property
    def best_size(self) -> int:
        return self.tree.size

    @property
    def depth(self) -> int:
        return self.tree.depth

    @property
    def choices(self) -> list[list[int]]:
        return self.tree.as_choices()

    @property
    def speedup(self) -> float:
        return self.tokens_per_s / self.autoregressive_tokens_per_s

    @property
    def pays(self) -> bool:
        return self.best_size > 0

    @classmethod
    def from_json(cls, doc: Any, *, where: str = "point") -> Point:
        """The inverse of :meth:`to_json`, every field checked (derived keys are recomputed,
        not read; ``where``: the file and the point, for errors)."""
        doc = mapping(doc, where)
        curve = mapping(doc.get("curve", {}), f"{where}: curve")
        try:
            tree = Tree.from_choices(listed(doc, "choices", where))
        except TreeoptError as exc:
            raise TreeoptError(f"{where}: {exc}") from None
        return cls(
            integer(doc, "batch", where, minimum=1), integer(doc, "context", where, minimum=0),
            tree, optional(integer, doc, "max_depth", where, minimum=1),
            number(doc, "expected_accept_length", where, minimum=1.0),
            number(doc, "verify_ms", where, positive=True),
            number(doc, "draft_ms", where, minimum=0.0),
            number(doc, "overhead_ms", where, minimum=0.0),
            number(doc, "tokens_per_s", where, positive=True),
            number(doc, "autoregressive_tokens_per_s", where, positive=True),
            integer(doc, "max_paying_size", where, minimum=0),
            Curve(integers(curve, "size", f"{where}: curve", minimum=0) if "size" in curve
                  else (),
                  numbers(curve, "tokens_per_s", f"{where}: curve", positive=True, nullable=True)
                  if "tokens_per_s" in curve else ()),
            tuple(_depth_cap(c, f"{where}: by_depth_cap[{i}]")
                  for i, c in enumerate(doc.get("by_depth_cap") or [])),
            _family(doc, where))

    def to_json(self) -> dict[str, Any]:
        doc = {"batch": self.batch, "context": self.context, "best_size": self.best_size,
               "max_depth": self.max_depth, "depth": self.depth, "choices": self.choices,
               "expected_accept_length": self.expected_accept_length,
               "verify_ms": self.verify_ms, "draft_ms": self.draft_ms,
               "overhead_ms": self.overhead_ms,
               "tokens_per_s": self.tokens_per_s,
               "autoregressive_tokens_per_s": self.autoregressive_tokens_per_s,
               "speedup": self.speedup, "pays": self.pays,
               "max_paying_size": self.max_paying_size, "family": self.family,
               "curve": {"size": list(self.curve.size),
                         "tokens_per_s": list(self.curve.tokens_per_s)}}
        if self.by_depth_cap:
            doc["by_depth_cap"] = [{"max_depth": c.max_depth, "best_size": c.best_size,
                                    "tokens_per_s": c.tokens_per_s} for c in self.by_depth_cap]
        return doc


def _family(doc: dict[str, Any], where: str) -> str:
    """The family a point's tree comes from (a file without the key: the growth order)."""
    family = doc.get("family", GROWTH_ORDER)
    if family not in POINT_FAMILIES:
        raise TreeoptError(f"{where}: family {family!r}: expected one of "
                           f"{', '.join(map(repr, POINT_FAMILIES))}")
    return str(family)


def _depth_cap(doc: Any, where: str) -> DepthCapBest:
    doc = mapping(doc, where)
    return DepthCapBest(optional(integer, doc, "max_depth", where, minimum=1),
                        integer(doc, "best_size", where, minimum=0),
                        number(doc, "tokens_per_s", where, positive=True))


@dataclass(frozen=True)
class Selection:
    """Best trees over a (batch × context) grid, and where their inputs came from."""

    growth: dict[str, Any]  # method, max_nodes, constraint of the growth scanned; acceptance
    latency: dict[str, Any]  # the verify-latency source and its provenance
    draft: dict[str, Any]  # the drafting cost's kind and source
    overhead: dict[str, Any]  # the decoder's own per-step cost: its source
    depth_caps: tuple[int | None, ...]
    points: tuple[Point, ...]
    source: str = field(default="selection", compare=False)  # the file it was read from
    chains: ChainTable | None = None  # a chain drafter's chains, priced at every point

    @property
    def batches(self) -> list[int]:
        return sorted({p.batch for p in self.points})

    @property
    def priced_on(self) -> dict[str, Any]:
        """What its latency source records of the setup it priced: the ``device`` (a measured
        device, or the hardware a roofline models), the ``model`` and the compute ``dtype``
        (keys not recorded are left out)."""
        return {k: self.latency[k] for k in ("device", "model", "dtype")
                if self.latency.get(k) not in (None, "")}

    @property
    def contexts(self) -> list[int]:
        return sorted({p.context for p in self.points})

    def point(self, batch: int, context: int) -> Point:
        """The point at (batch, context); anything else is refused, naming the grid."""
        for p in self.points:
            if (p.batch, p.context) == (batch, context):
                return p
        raise TreeoptError(f"the selection has no point at batch {batch}, context {context}; "
                           f"it has batches {self.batches} and contexts {self.contexts}")

    def tree_at(self, batch: int | None = None, context: int | None = None) -> Tree:
        """The tree picked at ``batch`` and ``context``; either may be left out when the
        selection holds only one (the error names the field to give)."""
        if batch is None:
            if len(self.batches) > 1:
                raise FieldError("batch", f"the selection holds a tree per batch size "
                                 f"{self.batches}; pick one with {{batch}} B", inline=True)
            batch = self.batches[0]
        return self.point(batch, pick_context(self.contexts, context)).tree

    def stops_paying(self) -> list[dict[str, int | None]]:
        """Per context, the smallest batch size at which autoregressive decoding wins."""
        out = []
        for s in self.contexts:
            at = [p.batch for p in self.points if p.context == s and not p.pays]
            out.append({"context": s, "batch": min(at) if at else None})
        return out

    def to_json(self) -> dict[str, Any]:
        return {"format": SELECTION_FORMAT, "formula": FORMULA, "growth": self.growth,
                "latency": self.latency, "draft": self.draft, "overhead": self.overhead,
                "depth_caps": list(self.depth_caps),
                "points": [p.to_json() for p in self.points],
                "stops_paying": self.stops_paying(),
                "schedules": [schedule(self, context=s) for s in self.contexts],
                **({"chains": self.chains.to_json()} if self.chains is not None else {})}

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str = "selection") -> Selection:
        """A selection file read back, every field checked (``stops_paying`` and
        ``schedules`` are derived)."""
        caps = listed(doc, "depth_caps", source)
        if any(c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 1)
               for c in caps):
            raise TreeoptError(f"{source}: 'depth_caps' must hold depths ≥ 1 or null, got "
                               f"{caps}")
        missing = [k for k in ("growth", "latency", "draft") if k not in doc]
        if missing:
            raise TreeoptError(f"{source}: missing '{missing[0]}'")
        blocks = (dict(mapping(doc.get(k, {}), f"{source}: '{k}'"))
                  for k in ("growth", "latency", "draft", "overhead"))
        chains = (ChainTable.from_json(doc["chains"], where=f"{source}: chains")
                  if doc.get("chains") is not None else None)
        selection = cls(*blocks, tuple(caps),
                        tuple(Point.from_json(p, where=f"{source}: points[{i}]")
                              for i, p in enumerate(listed(doc, "points", source))),
                        source=source, chains=chains)
        if not selection.points:
            raise TreeoptError(f"{source}: the selection has no points")
        return selection

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Selection:
        return cls.from_json(read_tagged_json(path, SELECTION_FORMAT), source=str(path))


def schedule(selection: Selection, *, context: int,
             reading: str = DEFAULT_READING) -> dict[str, Any]:
    """One tree per batch-size range at ``context``, with the engines' per-batch forms
    (:func:`treeopt.engines.forms.per_batch_forms`; for an n-gram drafter, whose trees are
    chains, the engines' n-gram settings instead: :func:`treeopt.engines.lookup.lookup_schedule`);
    ``reading``: the TensorRT-LLM version whose reading of ``draft_len_schedule`` is written
    (:data:`treeopt.engines.trtllm.schedule.READINGS`).

    A batch size between two swept ones uses the tree of the next larger swept size (larger
    batches favour smaller trees); above the largest swept size speculation is off. For a
    drafter vLLM drafts chains of (with the selection's ``chains``), ``vllm_per_batch`` holds
    vLLM's per-batch K by treeopt's rule and by vLLM's profiler rule
    (:func:`treeopt.pricing.per_batch_k.vllm_per_batch`).
    """
    pts = sorted((p for p in selection.points if p.context == context), key=lambda p: p.batch)
    if not pts:
        raise TreeoptError(f"context {context} was not swept; swept contexts: "
                           f"{selection.contexts}")
    ranges: list[dict[str, Any]] = []
    lo = 1
    for p in pts:
        if ranges and ranges[-1]["choices"] == p.choices:
            ranges[-1]["max_batch"] = p.batch
        else:
            ranges.append({"min_batch": lo, "max_batch": p.batch, "size": p.best_size,
                           "depth": p.depth, "choices": p.choices})
        lo = p.batch + 1
    unswept = f"batches above {pts[-1].batch} were not swept, so speculation is off there"
    drafter = selection.growth.get("drafter") or {}
    chains = _chains(selection, drafter, pts, context)
    lookup, trie = recorded_lookup(drafter), recorded_trie(drafter)
    if lookup is not None or trie is not None:  # an n-gram drafter: its n-gram settings
        lengths = lookup or (1, 1)  # a trie's trees need no n-gram lengths
        forms = lookup_schedule(ranges, min_n=lengths[0], max_n=lengths[1], trie=trie,
                                reading=reading)
        return {"context": context, "ranges": ranges, **forms, **chains,
                "note": f"{forms['note']}; {unswept}"}
    rows = [(r["min_batch"], r["max_batch"], r["size"]) for r in ranges]
    return {"context": context, "ranges": ranges, **per_batch_forms(rows, reading=reading),
            **chains, "note": f"draft length = tree nodes (tokens drafted per step); {unswept}"}


def _chains(selection: Selection, drafter: dict[str, Any], pts: list[Point],
            context: int) -> dict[str, Any]:
    """``vllm_per_batch`` at ``context`` where the selection priced a chain drafter's chains
    (refused in one line where it cannot be made), else nothing."""
    if selection.chains is None or not chain_method(drafter):
        return {}
    try:
        return {"vllm_per_batch": vllm_per_batch(selection.chains, drafter, context=context,
                                                 picks={p.batch: p.best_size for p in pts},
                                                 step_se=selection.latency.get("step_se"))}
    except TreeoptError as exc:
        return {"vllm_per_batch": {"refused": str(exc)}}


def check_same_setup(selections: list[Selection]) -> None:
    """Refuse selections priced on another device, model or dtype than the first (as far as
    both record it): their speed-ups are not of one machine and one base model.

    >>> a = Selection({}, {"device": "cpu"}, {}, {}, (None,), (), source="a.json")
    >>> b = Selection({}, {"device": "h100-sxm", "model": "llama-2-7b"}, {}, {}, (None,), (),
    ...               source="b.json")
    >>> check_same_setup([a, b])
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: a.json was priced on device 'cpu' but b.json on 'h100-sxm': choose among selections priced on the same hardware and model
    """
    for i, first in enumerate(selections):
        for other in selections[i + 1:]:
            for key, value in first.priced_on.items():
                theirs = other.priced_on.get(key)
                if theirs is not None and theirs != value:
                    raise TreeoptError(f"{first.source} was priced on {key} {value!r} but "
                                       f"{other.source} on {theirs!r}: choose among "
                                       "selections priced on the same hardware and model")


NO_DRAFTER = "none"  # the choice where no drafter's tree beats autoregressive decoding


def pick_gain(speedup: float, size: int) -> float:
    """A pick's speed-up over autoregressive decoding, 1 for a pick of no tree: a drafter that
    drafts nothing decodes autoregressively, whatever its profile prices."""
    return speedup if size else 1.0


@dataclass(frozen=True)
class DrafterChoice:
    """The fastest drafter at one (batch, context), among selections made for several drafters
    on the same hardware: its name (``none`` where no tree of any drafter beats autoregressive
    decoding), its point, and every candidate's predicted tokens/s, speed-up and tree size
    (0: it decodes autoregressively there)."""

    batch: int
    context: int
    drafter: str
    point: Point
    tokens_per_s: dict[str, float]
    speedups: dict[str, float]
    sizes: dict[str, int]

    def gain(self, drafter: str) -> float:
        """``drafter``'s speed-up here, 1 where its pick is no tree (or it is ``none``): a
        drafter that drafts nothing decodes autoregressively, whatever its profile prices."""
        return pick_gain(self.speedups[drafter], self.sizes[drafter]) if drafter in self.sizes else 1.0

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "context": self.context, "drafter": self.drafter,
                "size": self.point.tree.size, "choices": self.point.choices,
                "tokens_per_s": self.point.tokens_per_s, "speedup": self.point.speedup,
                "candidates_tokens_per_s": self.tokens_per_s,
                "candidates_speedup": self.speedups, "candidates_size": self.sizes}


def choose_drafter(selections: dict[str, Selection]) -> list[DrafterChoice]:
    """Per (batch, context) that every selection prices, the drafter whose best tree is fastest
    (ties: the first named), or ``none`` where no drafter's tree beats autoregressive decoding
    (a drafter whose pick is no tree counts as speed-up 1, whatever its profile prices).

    Drafters are ranked by predicted speed-up over autoregressive decoding, each against the
    autoregressive step of its own step profile: every selection prices the same base model on
    the same hardware, so the speed-up compares them without the few per cent by which separate
    profiling runs time the same autoregressive step. Selections priced on different hardware,
    models or dtypes are refused (:func:`check_same_setup`); on different (batch, context)
    grids they are compared where they overlap, and none at all is refused.

    >>> from treeopt.model.tree import Tree
    >>> def sel(tps):
    ...     c = Curve((0, 1), (1.0, tps))
    ...     p = Point(1, 64, Tree.chain(1), None, 1.5, 1.0, 0.0, 0.0, tps, 1.0, 1, c)
    ...     return Selection({}, {}, {}, {}, (None,), (p,))
    >>> [(c.drafter, c.speedups) for c in choose_drafter({"a": sel(2.0), "b": sel(3.0)})]
    [('b', {'a': 2.0, 'b': 3.0})]
    """
    if not selections:
        raise TreeoptError("no selections to choose a drafter from")
    check_same_setup(list(selections.values()))
    grids = [{(p.batch, p.context) for p in s.points} for s in selections.values()]
    shared = sorted(set.intersection(*grids))
    if not shared:
        raise TreeoptError(f"the selections of {list(selections)} share no (batch, context) "
                           f"point; select them over the same batch sizes and contexts")
    out = []
    for b, s in shared:
        points = {name: sel.point(b, s) for name, sel in selections.items()}
        gains = {name: pick_gain(p.speedup, p.tree.size) for name, p in points.items()}
        best = max(points, key=gains.__getitem__)
        name = best if points[best].tree.size and gains[best] > 1.0 else NO_DRAFTER
        out.append(DrafterChoice(b, s, name, points[best],
                                 {n: p.tokens_per_s for n, p in points.items()},
                                 {n: p.speedup for n, p in points.items()},
                                 {n: p.tree.size for n, p in points.items()}))
    return out


@dataclass(frozen=True)
class PromptSetChoice:
    """The fastest drafter at one (batch, context) on each of several prompt sets (workloads:
    code, prose …), and the one drafter to run when a deployment serves all of them."""

    batch: int
    context: int
    choices: dict[str, DrafterChoice]  # prompt set → the fastest drafter there
    robust: str  # the drafter whose worst share of a set's best speed-up is largest
    shares: dict[str, float]  # drafter (and ``none``) → its worst share over the sets

    @property
    def drafters(self) -> dict[str, str]:
        """Prompt set → the name of its fastest drafter."""
        return {name: c.drafter for name, c in self.choices.items()}

    @property
    def agree(self) -> bool:
        """Whether one drafter is the fastest on every prompt set."""
        return len(set(self.drafters.values())) == 1

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "context": self.context, "fastest": self.drafters,
                "agree": self.agree, "robust": self.robust, "worst_share": self.shares,
                "speedup": {name: c.speedups for name, c in self.choices.items()}}


def choose_drafter_per_set(sets: dict[str, dict[str, Selection]]) -> list[PromptSetChoice]:
    """Per (batch, context) that every selection prices: :func:`choose_drafter` on each prompt
    set's selections (prompt set → drafter → selection), and the robust pick across the sets.

    Every set names the same drafters. A drafter's share on a set is its speed-up over the
    set's best (autoregressive decoding, ``none``, counts as a candidate of speed-up 1, and so
    does a drafter whose pick there is no tree: :meth:`DrafterChoice.gain`); the robust pick
    maximises the smallest share over the sets (ties: ``none`` first, then the first named), so
    it is the fastest drafter wherever the sets agree, and ``none`` where no drafter gains on
    any set.

    >>> from treeopt.model.tree import Tree
    >>> def sel(tps):
    ...     c = Curve((0, 1), (1.0, tps))
    ...     p = Point(1, 64, Tree.chain(1), None, 1.5, 1.0, 0.0, 0.0, tps, 1.0, 1, c)
    ...     return Selection({}, {}, {}, {}, (None,), (p,))
    >>> [c] = choose_drafter_per_set({"code": {"lookup": sel(3.0), "eagle": sel(2.0)},
    ...                               "prose": {"lookup": sel(1.1), "eagle": sel(1.8)}})
    >>> c.drafters, c.robust, c.shares
    ({'code': 'lookup', 'prose': 'eagle'}, 'eagle', {'none': 0.3333333333333333, 'lookup': 0.6111111111111112, 'eagle': 0.6666666666666666})
    """
    if not sets:
        raise TreeoptError("no prompt sets to choose a drafter for")
    names = list(next(iter(sets.values())))
    for name, selections in sets.items():
        if sorted(selections) != sorted(names):
            raise TreeoptError(f"prompt set {name!r} has selections of {sorted(selections)}, "
                               f"another of {sorted(names)}: compare the same drafters on "
                               "every prompt set")
    per_set = {name: {(c.batch, c.context): c for c in choose_drafter(selections)}
               for name, selections in sets.items()}
    shared = sorted(set.intersection(*(set(choices) for choices in per_set.values())))
    if not shared:
        raise TreeoptError(f"the prompt sets {list(sets)} share no (batch, context) point; "
                           "select them over the same batch sizes and contexts")
    out = []
    for point in shared:
        choices = {name: per_set[name][point] for name in sets}
        shares = {d: min(_share(c.gain(d), c) for c in choices.values())
                  for d in [NO_DRAFTER, *names]}
        out.append(PromptSetChoice(*point, choices, max(shares, key=shares.__getitem__),
                                   shares))
    return out


def _share(speedup: float, choice: DrafterChoice) -> float:
    """``speedup`` over the best of ``choice``'s candidates and autoregressive decoding."""
    return speedup / max(1.0, *(choice.gain(d) for d in choice.speedups))
