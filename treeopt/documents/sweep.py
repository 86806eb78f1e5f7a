"""A live throughput sweep: measured tokens/s of growth trees against autoregressive decoding,
per batch size, beside what the step-cost model predicts for the same points (``treeopt tune``,
the Hydra paper's procedure for choosing the tree size, §4 and App. B).

File: ``"format": "treeopt.sweep/1"`` with ``meta`` (model, heads, device, threads, prompts, new
tokens, rounds and the least time measured per point — and, for a batch size timed otherwise
than the rest, its own, ``timing_by_batch`` — what predicted) and ``points``, one per
(batch, tree): the tree (size, depth cap, depth, choices), ``measured`` (tree and autoregressive
steady-state tokens/s of the whole batch, the speed-up as the median over rounds and its spread,
the rounds timed and the relative standard error of their mean speed-up, the mean accepted
length, the accepted tokens per row and steady step — the E[L] the steady tokens/s counts —,
lossless) and, when a step profile was given, ``predicted`` (tokens/s, speed-up and the E[L]
priced) and ``error`` (predicted / measured speed-up − 1). A point's tree is the growth order's of
its size and depth cap, or, where the point says ``"family": "per-step greedy"``, the per-step
greedy growth's tree of that size (:mod:`treeopt.model.step_growth`), which ``select`` may pick.
``selected`` marks the tree ``select`` picks for that batch; ``races`` (optional), per batch
where the pick is not the measured best, the two raced head to head. Written atomically after
every point, so an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from treeopt.documents.fields import flag, integer, integers, listed, mapping, number, optional
from treeopt.documents.measure import MAX_ROUNDS, Measurement
from treeopt.errors import TreeoptError
from treeopt.files import read_tagged_json, write_json

SWEEP_FORMAT = "treeopt.sweep/1"
# how a batch-b measurement batches its prompts: b at a time, or all in one run of b rows where
# a finished row takes the next prompt (continuous batching, as a serving engine does)
BATCHINGS = ("static", "continuous")
# which of a lookup drafter's chains verified as drafted a demo sweeps: every swept chain size
# and select's pick, or select's pick alone (treeopt.demo.config.DemoConfig.drafted_sweep)
DRAFTED_SWEEPS = ("sizes", "pick")
# meta a file may leave out, and what its absence means
# what a sweep written before a setting existed was measured with
LATER_META = {"min_seconds": 0.0, "target_se": 0.0, "max_rounds": MAX_ROUNDS,
              "batching": "static", "points_timed": "apart"}
# how a point was timed: the keys of its sweep's meta that say it (points_timed: each point
# against its own autoregressive decoding, "apart", or a batch size's points "together" against
# one) …
TIMING_KEYS = ("rounds", "min_seconds", "target_se", "max_rounds", "points_timed")
# … and, where a batch size was timed otherwise than the rest, that batch's own values of them
BY_BATCH = "timing_by_batch"


def points_timed(together: bool) -> str:
    """How a sweep records its points' timing (:data:`TIMING_KEYS`' ``points_timed``).

    >>> points_timed(True), points_timed(False)
    ('together', 'apart')
    """
    return "together" if together else "apart"


def timed_together(path: str | os.PathLike[str]) -> bool | None:
    """Whether the sweep at ``path`` timed its points together (its meta's ``points_timed``;
    a sweep without one was timed apart), or None where no sweep can be read there: how a
    command that resumes it times by default."""
    if not Path(path).is_file():
        return None
    try:
        meta = Sweep.load(path).meta
    except TreeoptError:  # resuming refuses it in its own words
        return None
    return meta.get("points_timed", LATER_META["points_timed"]) == points_timed(True)


# a point's key: (batch, size, depth cap) for a growth-order tree, with its family after them
# for a tree of another family (the per-step greedy growth's)
PointKey = tuple[int, int, int | None] | tuple[int, int, int | None, str]


def point_key(batch: int, size: int, max_depth: int | None, family: str | None = None,
              ) -> PointKey:
    """The key of a point: its family after the rest only for a tree of another family."""
    return (batch, size, max_depth) if family is None else (batch, size, max_depth, family)


@dataclass(frozen=True)
class SweepPoint:
    """One measured (batch, tree) point of a sweep, and its prediction when there is one."""

    batch: int
    size: int
    max_depth: int | None
    depth: int
    choices: tuple[tuple[int, ...], ...]
    tree_tokens_per_s: float
    autoregressive_tokens_per_s: float
    speedup: float  # median over rounds of the per-round speed-up
    spread: float  # (largest − smallest round speed-up) / median
    mean_accept_length: float
    lossless: bool | None
    predicted_tokens_per_s: float | None = None
    predicted_speedup: float | None = None
    selected: bool = False
    rounds: int | None = None  # timed rounds (None: not recorded)
    se: float | None = None  # relative standard error of the median speed-up (ditto)
    # accepted tokens per row and steady step, measured and as priced: the E[L] the steady
    # tokens/s counts (None: not recorded)
    steady_accept_length: float | None = None
    predicted_accept_length: float | None = None
    family: str | None = None  # None: the growth order's tree; else e.g. "per-step greedy"

    @property
    def key(self) -> PointKey:
        return point_key(self.batch, self.size, self.max_depth, self.family)

    def predicted_by(self, prediction: tuple[float, float, float]) -> SweepPoint:
        """The point with a prediction: (tokens/s, speed-up, E[L] it was priced with)."""
        tokens_per_s, speedup, accept_length = prediction
        return replace(self, predicted_tokens_per_s=tokens_per_s, predicted_speedup=speedup,
                       predicted_accept_length=accept_length)

    @property
    def error(self) -> float | None:
        """Predicted over measured speed-up, minus one."""
        if self.predicted_speedup is None:
            return None
        return self.predicted_speedup / self.speedup - 1.0

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "batch": self.batch, "size": self.size, "max_depth": self.max_depth,
            "depth": self.depth, "choices": [list(p) for p in self.choices],
            "selected": self.selected,
            **({"family": self.family} if self.family is not None else {}),
            "measured": {"tree_tokens_per_s": self.tree_tokens_per_s,
                         "autoregressive_tokens_per_s": self.autoregressive_tokens_per_s,
                         "speedup": self.speedup, "spread": self.spread,
                         "mean_accept_length": self.mean_accept_length,
                         "lossless": self.lossless}}
        if self.rounds is not None:
            doc["measured"]["rounds"] = self.rounds
        if self.se is not None:
            doc["measured"]["speedup_se"] = self.se
        if self.steady_accept_length is not None:
            doc["measured"]["steady_accept_length"] = self.steady_accept_length
        if self.predicted_speedup is not None:
            doc["predicted"] = {"tokens_per_s": self.predicted_tokens_per_s,
                                "speedup": self.predicted_speedup}
            if self.predicted_accept_length is not None:
                doc["predicted"]["accept_length"] = self.predicted_accept_length
            doc["error"] = self.error
        return doc

    @classmethod
    def from_json(cls, doc: Any, *, source: str) -> SweepPoint:
        """A point read back, every field checked (``source``: the file and the point)."""
        doc = mapping(doc, source)
        m = mapping(doc.get("measured"), f"{source}: measured")
        p = mapping(doc.get("predicted") or {}, f"{source}: predicted")
        where, said = f"{source}: measured", f"{source}: predicted"
        lossless = m.get("lossless")
        if lossless is not None and not isinstance(lossless, bool):
            raise TreeoptError(f"{where}: 'lossless' must be true, false or null, got "
                               f"{lossless!r}")
        return cls(integer(doc, "batch", source, minimum=1),
                   integer(doc, "size", source, minimum=0),
                   optional(integer, doc, "max_depth", source, minimum=1),
                   integer(doc, "depth", source, minimum=0), _choices(doc, source),
                   number(m, "tree_tokens_per_s", where, positive=True),
                   number(m, "autoregressive_tokens_per_s", where, positive=True),
                   number(m, "speedup", where, positive=True),
                   number(m, "spread", where, minimum=0.0),
                   number(m, "mean_accept_length", where, minimum=0.0), lossless,
                   optional(number, p, "tokens_per_s", said, positive=True),
                   optional(number, p, "speedup", said, positive=True),
                   bool(optional(flag, doc, "selected", source)),
                   optional(integer, m, "rounds", where, minimum=1),
                   optional(number, m, "speedup_se", where, minimum=0.0),
                   optional(number, m, "steady_accept_length", where, minimum=0.0),
                   optional(number, p, "accept_length", said, minimum=0.0),
                   _family(doc, source))


def _family(doc: dict[str, Any], where: str) -> str | None:
    """The point's tree family: absent for the growth order's trees."""
    family = doc.get("family")
    if family is not None and not isinstance(family, str):
        raise TreeoptError(f"{where}: 'family' must be a string, got {family!r}")
    return family


def _choices(doc: dict[str, Any], where: str) -> tuple[tuple[int, ...], ...]:
    """The point's tree, as rank paths."""
    return tuple(integers({"choices": c}, "choices", f"{where}: choices[{i}]", minimum=0)
                 for i, c in enumerate(listed(doc, "choices", where)))


@dataclass(frozen=True)
class Race:
    """Select's pick at one batch size decoded head to head with the sweep's measured best
    (:func:`~treeopt.decoding.compare.race`): the best of several points measured with the same
    noise is, on average, measured high, and the pick's share of it low; raced, the two meet the
    same moments and their ratio is measured afresh."""

    batch: int
    best: PointKey  # the points raced
    selected: PointKey
    selected_over_best: float  # the pick's tokens/s over the best's, median over rounds

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "best": list(self.best), "selected": list(self.selected),
                "selected_over_best": self.selected_over_best}

    @classmethod
    def from_json(cls, doc: Any, *, source: str) -> Race:
        """A race read back, every field checked (``source``: the file and the race)."""
        doc = mapping(doc, source)
        return cls(integer(doc, "batch", source, minimum=1), _key(doc, "best", source),
                   _key(doc, "selected", source),
                   number(doc, "selected_over_best", source, positive=True))


def _key(doc: dict[str, Any], name: str, where: str) -> PointKey:
    """A point's key ``[batch, size, depth cap or null]``, its family after them for a tree of
    another family than the growth order's."""
    key = listed(doc, name, where)
    if len(key) not in (3, 4) or (len(key) == 4 and not isinstance(key[3], str)):
        raise TreeoptError(f"{where}: '{name}' must be [batch, size, depth cap] or [batch, "
                           f"size, depth cap, family], got {key!r}")
    part = dict(zip(("batch", "size", "max_depth"), key[:3], strict=True))
    at = f"{where}: '{name}'"
    return point_key(integer(part, "batch", at, minimum=1), integer(part, "size", at, minimum=0),
                     optional(integer, part, "max_depth", at, minimum=1),
                     key[3] if len(key) == 4 else None)


@dataclass(frozen=True)
class Sweep:
    """The points of a live sweep and how they were measured."""

    meta: dict[str, Any]
    points: tuple[SweepPoint, ...] = ()
    source: str = field(default="sweep", compare=False)
    races: tuple[Race, ...] = ()  # select's pick raced against the measured best, per batch

    def with_point(self, point: SweepPoint) -> Sweep:
        """The sweep with ``point`` added (replacing a point with the same key)."""
        kept = tuple(p for p in self.points if p.key != point.key)
        return replace(self, points=(*kept, point))

    def has(self, key: PointKey) -> bool:
        return any(p.key == key for p in self.points)

    def with_race(self, race: Race) -> Sweep:
        """The sweep with ``race`` recorded (replacing its batch's earlier one)."""
        kept = tuple(r for r in self.races if r.batch != race.batch)
        return replace(self, races=(*kept, race))

    def race(self, batch: int) -> Race | None:
        """The race of ``batch``'s pick against its best, when the two are still the points
        raced (a point measured again may have changed which is best)."""
        best, pick = self.best(batch), self.selected(batch)
        return next((r for r in self.races if r.batch == batch and pick is not None
                     and (r.best, r.selected) == (best.key, pick.key)), None)

    @property
    def batches(self) -> list[int]:
        return sorted({p.batch for p in self.points})

    @property
    def continuous(self) -> bool:
        """Whether each point decoded its prompts by continuous batching (``batching`` in the
        meta; a sweep written before the setting existed batched statically)."""
        return self.meta.get("batching", LATER_META["batching"]) == "continuous"

    def best(self, batch: int) -> SweepPoint:
        """The measured fastest tree at ``batch``: by speed-up, each point's tokens/s over the
        autoregressive tokens/s measured interleaved with it (points are measured minutes
        apart, and the machine's speed drifts between them; within a point it cannot)."""
        at = [p for p in self.points if p.batch == batch]
        if not at:
            raise TreeoptError(f"{self.source}: no points at batch {batch}; swept {self.batches}")
        return max(at, key=lambda p: p.speedup)

    def selected(self, batch: int) -> SweepPoint | None:
        return next((p for p in self.points if p.batch == batch and p.selected), None)

    def summary(self) -> list[dict[str, Any]]:
        """Per batch: the measured best tree, the one select picked and how close it came, and
        the worst prediction error."""
        out = []
        for b in self.batches:
            best, pick = self.best(b), self.selected(b)
            errors = [abs(p.error) for p in self.points if p.batch == b and p.error is not None]
            row: dict[str, Any] = {"batch": b, "best_size": best.size,
                                   "best_max_depth": best.max_depth,
                                   "best_speedup": best.speedup,
                                   "max_abs_error": max(errors) if errors else None}
            if pick is not None:
                row.update(selected_size=pick.size, selected_max_depth=pick.max_depth,
                           selected_speedup=pick.speedup,
                           selected_share_of_best=pick.speedup / best.speedup)
                if (race := self.race(b)) is not None:
                    row["selected_share_of_best_raced"] = race.selected_over_best
            out.append(row)
        return out

    def to_json(self) -> dict[str, Any]:
        doc = {"format": SWEEP_FORMAT, "meta": self.meta,
               "points": [p.to_json() for p in sorted(self.points, key=_order)],
               "summary": self.summary()}
        if self.races:
            doc["races"] = [r.to_json() for r in sorted(self.races, key=lambda r: r.batch)]
        return doc

    def save(self, path: str | os.PathLike[str]) -> None:
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Sweep:
        doc = read_tagged_json(path, SWEEP_FORMAT)
        if not isinstance(doc.get("points"), list) or not isinstance(doc.get("meta"), dict):
            raise TreeoptError(f"{path}: a sweep needs 'meta' and 'points'")
        points = tuple(SweepPoint.from_json(p, source=f"{path}: points[{i}]")
                       for i, p in enumerate(doc["points"]))
        races = tuple(Race.from_json(r, source=f"{path}: races[{i}]")
                      for i, r in enumerate(doc.get("races") or []))
        return cls(doc["meta"], points, source=str(path), races=races)

    @classmethod
    def resume(cls, path: str | os.PathLike[str], meta: dict[str, Any], *,
               renewed: Collection[str] = (), old: Sweep | None = None,
               measured: Collection[int] = ()) -> Sweep:
        """The sweep at ``path`` when it was measured the same way (its points are kept), else
        a new one; a file from another setup is refused rather than mixed in. Each batch size
        is timed one way: at each of ``measured`` (the batch sizes the caller measures) where
        the file has points, ``meta``'s timing (:meth:`timing`) must be theirs; where it has
        none, it may be another, and is recorded. The ``renewed`` keys of
        ``meta`` may differ: they describe what the caller makes afresh for every kept point
        (the predictions), and take the new values. ``old``: the file at ``path``, where the
        caller has read it already."""
        if old is None:
            if not Path(path).exists():
                return cls(meta, source=str(path))
            old = cls.load(path)
        new = cls(meta)
        differ = [k for k in meta if k not in ("created", BY_BATCH, *TIMING_KEYS, *renewed)
                  and old.meta.get(k, LATER_META.get(k)) != meta[k]]
        differ += [f"{k} at batch {b} ({v}, not {new.timing(b)[k]})" for b in old.batches
                   if b in measured for k, v in old.timing(b).items() if new.timing(b)[k] != v]
        if differ:
            raise TreeoptError(f"{path}: a sweep measured with other {', '.join(differ)}; "
                               f"write to another path")
        base = {k: old.meta.get(k, LATER_META.get(k)) for k in TIMING_KEYS}
        by_batch = {b: timing for b, timing in {
            **old.meta.get(BY_BATCH, {}),
            **{str(b): new.timing(b) for b in measured}}.items() if timing != base}
        kept = {k: v for k, v in old.meta.items() if k != BY_BATCH}
        return replace(old, meta={**kept, **{k: meta[k] for k in renewed if k in meta},
                                  **({BY_BATCH: by_batch} if by_batch else {})})

    def timing(self, batch: int) -> dict[str, Any]:
        """How the sweep times a point at ``batch``: its meta's :data:`TIMING_KEYS`, or that
        batch's own values (:data:`BY_BATCH`) where it was timed otherwise.

        >>> s = Sweep({"rounds": 2, "target_se": 0.0, BY_BATCH: {"8": {"target_se": 0.025}}})
        >>> s.timing(1)["target_se"], s.timing(8)["target_se"], s.timing(8)["rounds"]
        (0.0, 0.025, 2)
        """
        base = {k: self.meta.get(k, LATER_META.get(k)) for k in TIMING_KEYS}
        return {**base, **self.meta.get(BY_BATCH, {}).get(str(batch), {})}

    def measurement(self, batch: int) -> Measurement:
        """How long a point at ``batch`` was timed (:meth:`timing`), as a measurement to time
        another alike.

        >>> Sweep({"rounds": 2, "target_se": 0.02}).measurement(8).target_se
        0.02
        """
        timing = self.timing(batch)
        return Measurement(timing["rounds"], timing["min_seconds"], timing["target_se"],
                           timing["max_rounds"])

    def without_batches(self, batches: Collection[int]) -> Sweep:
        """The sweep less its points, races and own timing at ``batches``: what measuring those
        batch sizes again starts from."""
        by_batch = {b: t for b, t in self.meta.get(BY_BATCH, {}).items()
                    if int(b) not in batches}
        meta = {k: v for k, v in self.meta.items() if k != BY_BATCH}
        return replace(self, meta={**meta, **({BY_BATCH: by_batch} if by_batch else {})},
                       points=tuple(p for p in self.points if p.batch not in batches),
                       races=tuple(r for r in self.races if r.batch not in batches))

    def with_predictions(self, predicted: Mapping[PointKey, tuple[float, float, float]],
                         selected: Collection[PointKey]) -> Sweep:
        """Every point with its (tokens/s, speed-up, E[L]) from ``predicted`` and marked
        selected when its key is in ``selected``: the points priced again by another step-cost
        model."""
        return replace(self, points=tuple(
            replace(p.predicted_by(predicted[p.key]), selected=p.key in selected)
            for p in self.points))


def _order(p: SweepPoint) -> tuple[int, int, int, str, int]:
    return (p.batch, -1 if p.max_depth is None else p.max_depth, p.size, p.family or "",
            int(p.selected))


__all__ = ["BATCHINGS", "BY_BATCH", "SWEEP_FORMAT", "TIMING_KEYS", "PointKey", "Race", "Sweep",
           "SweepPoint", "point_key", "points_timed"]

