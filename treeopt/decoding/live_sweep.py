"""The live throughput sweep behind ``treeopt tune``: every chosen tree of a growth, at every
batch size, decoded against autoregressive decoding (:func:`~treeopt.decoding.compare.compare`:
interleaved, warmed up, in rounds), beside what the step-cost model predicts for it.

With a step profile (:class:`~treeopt.pricing.costs.StepCosts`) the sweep also measures, per batch,
the tree :func:`~treeopt.pricing.throughput.select` picks over the whole growth (every size and depth
cap of the growth order, and the per-step greedy growth's trees, as ``treeopt select`` prices
them: such a pick is a point of its own family), so the sweep shows how close the model's choice
comes to the measured best. Two traces may play two parts: ``trace`` gives each point's
predicted E[L] (ideally the swept prompts' own trace, so the error is the step-cost model's
alone), ``select_trace`` is what select picks with (a calibration trace: what a user's select sees before any live run; by default
``trace``). ``trace`` is read over the positions the sweep decodes, each sequence's first
``max_new_tokens``; a ``select_trace`` is read as given, whole, as ``treeopt select --trace`` reads
it, so the pick measured is the one select makes (without one, select picks with ``trace`` as read).

A lookup drafter's chains may be swept ``drafted``: every step verifies only the tokens drafted
(:attr:`~treeopt.decoding.config.DecodeConfig.drafted_only`), each point predicted as ``select``
prices such chains from the trace's drafted lengths (:mod:`treeopt.pricing.drafted`), and the
pick measured is the best drafted chain. The sweep records it (``verified``: "as drafted") and
resumes only alike.

A sweep's points are timed apart, each against an autoregressive decoding of its own, or
``together``: every pending point of a batch size at once against one autoregressive decoding
(:func:`~treeopt.decoding.compare.compare_together`), so each round decodes the prompts
autoregressively once instead of once per point, and a point whose speed-up met the measurement
sits out the rounds the others still need. The sweep records which (``points_timed``, per batch
size where they differ) and a batch size with points resumes only timed alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from treeopt.decoding.compare import Comparison, check_batch, compare, compare_together, race
from treeopt.decoding.config import DecodeConfig
from treeopt.documents.measure import Measurement, pooled_spread
from treeopt.documents.sweep import (
    BY_BATCH,
    PointKey,
    Race,
    Sweep,
    SweepPoint,
    point_key,
    points_timed,
)
from treeopt.errors import FieldError, TreeoptError
from treeopt.model.growth import Growth
from treeopt.model.runs import as_run
from treeopt.model.step_growth import GROWTH_ORDER
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.pricing.costs import StepCosts
from treeopt.pricing.drafted import NO_DRAFTED
from treeopt.pricing.sweep_prediction import predict
from treeopt.pricing.throughput import drafted_chain_prices, select

# what a sweep's steps count: the tokens each step keeps (a sweep from before treeopt counted so
# lacks the meta, and cannot be resumed: its points were measured otherwise)
STEP_TOKENS = "kept"
# a point to measure: its depth cap, whether select picked it, its family (None: growth order)
Planned = tuple[int | None, bool, str | None]

if TYPE_CHECKING:
    import os

    from transformers import PreTrainedModel

    from treeopt.decoding.drafter import Drafter


def family_tree(growth: Growth, size: int, cap: int | None) -> Tree:
    """The growth's tree of ``size`` nodes among those no deeper than ``cap``."""
    paths = [p for p in growth.order if cap is None or len(p) <= cap]
    if size > len(paths):
        raise FieldError("sizes", f"{size} is beyond the growth's {len(paths)} nodes"
                         + (f" of depth ≤ {cap}" if cap is not None else ""))
    return Tree.from_choices(paths[:size])


def tune(model: PreTrainedModel, heads: Drafter, growth: Growth,
         prompts: Sequence[Sequence[int]], *, batch: Sequence[int], sizes: Sequence[int],
         out: str | os.PathLike[str], depth_caps: Sequence[int | None] = (None,),
         config: DecodeConfig | None = None, measure: Measurement | None = None,
         measure_at: Mapping[int, Measurement] | None = None,
         costs: StepCosts | None = None, trace: RankTrace | None = None,
         select_trace: RankTrace | None = None, meta: dict[str, Any] | None = None,
         compile: bool = False, race_best: bool = False, continuous: bool = False,
         drafted: bool = False, retime: bool = False, together: bool = False,
         before_point: Callable[[int, int | None, Tree], None] | None = None,
         progress: Callable[[int, int], None] | None = None) -> Sweep:
    """Measure every (batch, size, cap) point — and select's pick per batch when ``costs`` are
    given, picked with ``select_trace`` (default ``trace``) — writing ``out`` after each point;
    points already in ``out`` are kept. Each point is a :func:`~treeopt.decoding.compare.compare`
    timed as ``measure`` (default: 3 rounds), or ``measure_at`` for its batch size, says, on its
    speed-up (recorded; a batch size resumes only timed as its points were; ``retime``: the points
    of ``batch`` in ``out`` are measured again, timed so). ``race_best``: then, per batch where
    select's pick is not the measured best, the two raced head to head
    (:func:`~treeopt.decoding.compare.race`, measured alike), recorded in the sweep's ``races``.
    With ``costs``, the points kept from ``out`` are predicted again by them and select's pick is
    marked again, so a finished sweep run again with other step profiles is re-priced, measuring
    nothing but a pick that changed. Without ``costs``, a sweep whose points were predicted is
    refused (its predictions would no longer say by what). A point's standard error (and its
    rounds) is floored by the round spread pooled over its batch size's points measured before it:
    two rounds may agree by chance (SmolLM2's 2-round batch-8 points: 0.8–4.5%).
    ``before_point(batch, cap, tree)`` is called right before each point is measured (not for
    points kept from ``out``): a step profile taken at the points' own moments
    (:class:`treeopt.profiling.alongside.AlongsideProfile`). ``continuous``: each point decodes
    every prompt in one run of b rows, a finished row taking the next prompt, as a serving engine
    batches (:func:`~treeopt.decoding.compare.compare`), and is predicted over that run's steady
    window; the sweep records it (``batching``) and resumes only alike (its steps priced at the
    profiled context, though the longest row sets a batched step's: SmolLM2, fp32, batch 4,
    predicted 1.5–3% high). ``drafted``: the growth's chains verified only as far as they were
    drafted (a lookup drafter's; with ``costs``, the traces must record drafted lengths),
    predicted and picked as ``select`` prices them. ``together``: as the module says."""
    config = config or DecodeConfig()
    if drafted:
        _check_drafted(growth, sizes, depth_caps, [trace, select_trace] if costs else [])
        config = replace(config, drafted_only=True)
    measure = measure or Measurement()
    check_batch(max(batch), len(prompts))
    # E[L] over the positions the sweep decodes, as its runs keep them
    trace = as_run(trace, config.max_new_tokens) if trace is not None else None
    picker = select_trace if select_trace is not None else trace  # read as select reads it
    todo = _points(growth, batch=batch, sizes=sizes, depth_caps=depth_caps, costs=costs,
                   trace=picker, drafted=drafted)  # checks every size before anything runs
    timed, timing = _timings(batch, measure, measure_at, together)
    sweep = _resumed(out, growth, todo, costs, trace, picker, batch, retime, {
        **(meta or {}), "heads": heads.config.to_dict(), "prompts": len(prompts),
        "max_new_tokens": config.max_new_tokens, **timing, "compile": compile,
        "step_tokens": STEP_TOKENS, "batching": "continuous" if continuous else "static",
        "verified": "as drafted" if drafted else "whole"})
    total = len(todo) + (len(batch) if race_best else 0)
    rounds: dict[int, list[list[float]]] = {}  # each batch size's points' round speed-ups
    done = 0
    for group in _groups(todo, together):
        pending = [(b, tree, (cap, pick, fam)) for (b, tree), (cap, pick, fam) in group
                   if not sweep.has(tree_key(b, tree, cap, fam))]
        if pending:
            b = pending[0][0]
            for _, tree, (cap, _, _) in pending if before_point is not None else ():
                before_point(b, cap, tree)
            results = _measured(model, heads, [tree for _, tree, _ in pending], prompts,
                                config=config, batch=b, measure=timed[b], compile=compile,
                                continuous=continuous, spread=pooled_spread(rounds.get(b, [])))
            rounds.setdefault(b, []).extend(r.round_speedups() for r in results)
            for (_, tree, (cap, picked, family)), result in zip(pending, results, strict=True):
                point = measured_point(result, b, tree, cap, picked, family)
                sweep = sweep.with_point(point if costs is None else point.predicted_by(
                    predict(tree, growth, costs, trace, b, continuous=continuous,
                            drafted=drafted)))
        sweep.save(out)
        done += len(group)
        if progress is not None:
            progress(done, total)
    for i, b in enumerate(batch if race_best else ()):
        sweep = _raced(model, heads, sweep, prompts, b, config, timed[b], continuous, out)
        if progress is not None:
            progress(len(todo) + i + 1, total)
    return sweep


def _groups(todo: dict[tuple[int, Tree], Planned], together: bool,
            ) -> list[list[tuple[tuple[int, Tree], Planned]]]:
    """The points measured at once: each alone, or ``together`` every point of a batch size."""
    if not together:
        return [[item] for item in todo.items()]
    by_batch: dict[int, list[tuple[tuple[int, Tree], Planned]]] = {}
    for item in todo.items():
        by_batch.setdefault(item[0][0], []).append(item)
    return list(by_batch.values())


def _measured(model: PreTrainedModel, heads: Drafter, trees: list[Tree],
              prompts: Sequence[Sequence[int]], **how: Any) -> list[Comparison]:
    """Each of ``trees`` against autoregressive decoding: one tree alone
    (:func:`~treeopt.decoding.compare.compare`), several against one autoregressive decoding
    (:func:`~treeopt.decoding.compare.compare_together`)."""
    if len(trees) == 1:
        return [compare(model, heads, trees[0], prompts, **how)]
    return compare_together(model, heads, trees, prompts, **how)


def _raced(model: PreTrainedModel, heads: Drafter, sweep: Sweep, prompts: Sequence[Sequence[int]],
           b: int, config: DecodeConfig, measure: Measurement, continuous: bool,
           out: str | os.PathLike[str]) -> Sweep:
    """``sweep`` with select's pick at batch ``b`` raced head to head against the measured best
    (written to ``out``), where the two differ and are not raced yet."""
    best, pick = sweep.best(b), sweep.selected(b)
    if pick is None or pick.key == best.key or sweep.race(b) is not None:
        return sweep
    trees = [Tree.from_choices([list(c) for c in p.choices]) for p in (best, pick)]
    share = race(model, heads, trees, prompts, config=config, batch=b, measure=measure,
                 continuous=continuous)[1]
    sweep = sweep.with_race(Race(b, best.key, pick.key, share))
    sweep.save(out)
    return sweep


def sweep_pending(out: str | os.PathLike[str], growth: Growth, *, batch: Sequence[int],
                  sizes: Sequence[int], costs: StepCosts, trace: RankTrace,
                  select_trace: RankTrace | None = None, max_new_tokens: int,
                  continuous: bool = False, drafted: bool = False) -> list[str]:
    """What :func:`tune` with these arguments would change in the finished sweep at ``out``, in
    words (empty: nothing; no model needed to tell): points it lacks (select's pick above all),
    points marked as select's pick that no longer are, and points whose prediction moved (the
    step costs are not those the sweep was priced by). A sweep that tune cannot resume, measured
    by an earlier treeopt, says so alone (:func:`resumable`)."""
    run = as_run(trace, max_new_tokens)
    todo = _points(growth, batch=batch, sizes=sizes, depth_caps=(None,), costs=costs,
                   trace=select_trace if select_trace is not None else run, drafted=drafted)
    sweep = Sweep.load(out)
    if not resumable(sweep):
        return ["measured by an earlier treeopt, whose steps counted otherwise: measured "
                "again only whole (the demo's sweep stage redone), not point by point"]
    keys = {tree_key(b, tree, cap, family): picked
            for (b, tree), (cap, picked, family) in todo.items()}
    pending = [f"batch {k[0]}: {'select picks' if picked else 'no point of'} the {k[1]}-node "
               "tree" + (f" of the {k[3]} growth" if len(k) == 4 else "")
               + (" (not measured)" if picked else "")
               for k, picked in keys.items() if not sweep.has(k)]
    picks = _pick_keys(todo)
    pending += [f"batch {p.batch}: the {p.size}-node tree is marked select's pick"
                for p in sweep.points if p.selected and p.batch in batch and p.key not in picks]
    moved = sum(p.predicted_speedup is None or not np.isclose(predict(
        Tree.from_choices([list(c) for c in p.choices]), growth, costs, run, p.batch,
        continuous=continuous, drafted=drafted).speedup, p.predicted_speedup, rtol=1e-9)
        for p in sweep.points)
    return pending + ([f"{moved} point(s) priced otherwise"] if moved else [])


def resumable(sweep: Sweep) -> bool:
    """Whether :func:`tune` can add points to ``sweep``: its steps counted as tune's count now."""
    return sweep.meta.get("step_tokens") == STEP_TOKENS


def measured_point(result: Comparison, batch: int, tree: Tree, cap: int | None,
                   picked: bool, family: str | None = None) -> SweepPoint:
    """The sweep point of ``tree``'s comparison at ``batch`` (``cap``: the tree's depth cap;
    ``picked``: select's pick; ``family``: None for a growth-order tree)."""
    return SweepPoint(
        batch, tree.size, cap, tree.depth, tree.paths, result.tree_tokens_per_s,
        result.autoregressive_tokens_per_s, result.speedup, result.speedup_spread,
        result.tree_stats.mean_accept_length, result.lossless, selected=picked,
        rounds=len(result.tree_rounds), se=result.speedup_se,
        steady_accept_length=result.tree_stats.decode_accept_length, family=family)


def tree_key(batch: int, tree: Tree, cap: int | None, family: str | None) -> PointKey:
    """The key of the sweep point that measures ``tree`` at ``batch``."""
    return point_key(batch, tree.size, cap, family)


def _pick_keys(todo: dict[tuple[int, Tree], Planned]) -> set[PointKey]:
    """The keys of the points select picked."""
    return {tree_key(b, tree, cap, family)
            for (b, tree), (cap, picked, family) in todo.items() if picked}


def _resumed(out: str | os.PathLike[str], growth: Growth, todo: dict[tuple[int, Tree], Planned],
             costs: StepCosts | None,
             trace: RankTrace | None, picker: RankTrace | None, batch: Sequence[int],
             retime: bool, meta: dict[str, Any]) -> Sweep:
    """The sweep at ``out`` (or a new one) with ``meta`` — less its points at ``batch`` when
    ``retime`` — and, with a step-cost model, every kept point priced again by the one given
    now (profiles taken after the points, pooled with those before, describe them better than
    either) and select's picks marked again."""
    renewed = ("predicted", "acceptance", "selection") if costs is not None else ()
    continuous, drafted = meta["batching"] == "continuous", meta["verified"] == "as drafted"
    existing = Sweep.load(out) if Path(out).exists() else None
    if existing is not None and retime:  # measured again: the file keeps them until then
        existing = existing.without_batches(batch)
    if existing is not None and (was := existing.meta.get("verified", "whole")) != (
            meta["verified"]):
        raise TreeoptError(f"{out}: a sweep of trees verified {was}, not {meta['verified']}; "
                           "write to another path")
    window = ("the steady window of continuous batching (b rows, each taking the next prompt)"
              if continuous else "each batch's steady window")
    if costs is None and existing is not None and (was := existing.meta.get("predicted")):
        raise TreeoptError(f"{out}: a sweep predicted from {was}; give a step-cost model to "
                           "predict its points again, or write to another path")
    sweep = Sweep.resume(out, {
        **meta, "predicted": costs.verify.source if costs is not None else None,
        "acceptance": (f"per-step walk of the trace, at batch > 1 over {window}"
                       if trace is not None else "growth E[L]"),
        "selection": ("growth E[L]" if picker is None else "the predictions' trace"
                      if picker is trace else "a trace of its own (calibration)"),
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}, renewed=renewed,
        old=existing, measured=batch)
    if costs is not None and sweep.points:
        picks = _pick_keys(todo) | {p.key for p in sweep.points
                                    if p.selected and p.batch not in batch}
        sweep = sweep.with_predictions(
            {p.key: predict(Tree.from_choices([list(c) for c in p.choices]), growth, costs,
                            trace, p.batch, continuous=continuous, drafted=drafted)
             for p in sweep.points}, picks)
    return sweep


def _timings(batch: Sequence[int], measure: Measurement,
             measure_at: Mapping[int, Measurement] | None, together: bool,
             ) -> tuple[dict[int, Measurement], dict[str, Any]]:
    """Each batch size's measurement, and the sweep meta that records them: ``measure``'s, and
    each batch size timed otherwise its own (:data:`~treeopt.documents.sweep.BY_BATCH`)."""
    timed = {b: (measure_at or {}).get(b, measure) for b in batch}
    by_batch = {str(b): _timing(m, together) for b, m in timed.items() if m != measure}
    return timed, {**_timing(measure, together), **({BY_BATCH: by_batch} if by_batch else {})}


def _timing(measure: Measurement, together: bool) -> dict[str, Any]:
    """A measurement as a sweep's meta records it (:data:`~treeopt.documents.sweep.TIMING_KEYS`)."""
    return {"rounds": measure.rounds, "min_seconds": measure.min_seconds,
            "target_se": measure.target_se, "max_rounds": measure.cap,
            "points_timed": points_timed(together)}


def _check_drafted(growth: Growth, sizes: Sequence[int], depth_caps: Sequence[int | None],
                   traces: Sequence[RankTrace | None]) -> None:
    """Refuse a drafted sweep of trees that are no chains, or priced by a trace without the
    drafted lengths it needs."""
    for cap in depth_caps:
        for n in sizes:
            if not family_tree(growth, n, cap).is_chain:
                raise FieldError("drafted_only", f"the growth's {n}-node tree is no chain: only a "
                                 "lookup drafter's chains are verified as far as they were "
                                 "drafted")
    if traces and all(t is None for t in traces):
        raise FieldError("trace", "is needed to predict chains verified as drafted (their "
                         "drafts are read from it)")
    for trace in traces:
        if trace is not None and trace.drafted is None:
            raise FieldError("trace", NO_DRAFTED)


def _drafted_pick(growth: Growth, costs: StepCosts, trace: RankTrace, batch: int) -> Tree:
    """The chain verified as drafted that ``select --drafted-only`` prices fastest at ``batch``
    among such chains (none: the empty tree)."""
    tp = drafted_chain_prices(growth, trace, verify=costs.verify, draft=costs.draft,
                              overhead=costs.overhead, batch=batch, context=costs.context())
    return Tree.chain(int(np.nanargmax(tp.tokens_per_s)))


def _points(growth: Growth, *, batch: Sequence[int], sizes: Sequence[int],
            depth_caps: Sequence[int | None], costs: StepCosts | None,
            trace: RankTrace | None, drafted: bool = False) -> dict[tuple[int, Tree], Planned]:
    """(batch, tree) → (depth cap, whether select picked it, family): every point to measure,
    once (``drafted``: select's pick among the chains verified as drafted). A pick of the
    per-step greedy growth that is not also a growth-order tree swept is a point of its own
    family."""
    todo: dict[tuple[int, Tree], Planned] = {}
    for b in batch:
        for cap in depth_caps:
            for n in sizes:
                todo.setdefault((b, family_tree(growth, n, cap)), (cap, False, None))
        if costs is not None and drafted:
            tree = _drafted_pick(growth, costs, trace, b)
            todo[(b, tree)] = (todo.get((b, tree), (None, False, None))[0], True, None)
        elif costs is not None:
            pick = select(growth, costs.verify, draft=costs.draft, overhead=costs.overhead,
                          batch=[b], context=costs.verify.contexts, trace=trace).points[0]
            family = None if pick.family == GROWTH_ORDER else pick.family
            cap, _, family = todo.get((b, pick.tree), (pick.max_depth, False, family))
            todo[(b, pick.tree)] = (cap, True, family)
    return todo
