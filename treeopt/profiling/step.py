"""Measured cost of a live decoding step, phase by phase, in the decoder's own loop.

For every batch size and every tree of a design set — sizes of a growth, each depth cap where the
drafter is called once per depth, and the empty tree (autoregressive decoding) — the live decoder
(:class:`treeopt.decoding.loop.Decoder`) decodes real prompts with ``profile=True``. A record
gives the milliseconds per loop step of its draft, verify and bookkeeping phases — over the steps
during which every row of the batch ran, the steady state that a live run's throughput counts —
the tree's shape (size, depth, tokens q, nodes expanded per depth) and the mean context.

A record averages over as many sequences at every batch size — at least ``sequences``
(default: the largest batch), so a batch-1 record is not one prompt's: round r decodes the r-th
group of b prompts, taken cyclically from those given, and a batch size gets as many rounds
beyond the measurement's ``rounds`` as that takes. Further rounds — while a record's decodes
took less than the measurement's ``min_seconds``, or its step over its reference's, round by
round, has a relative standard error above ``target_se``, that error at least what the round
spread pooled over the batch size's records gives (two rounds may agree by chance)
(:class:`treeopt.documents.measure.Measurement`, up to its round cap; records say their ``se``) —
come a whole cycle at a time, so that every sequence weighs alike in a record: a verify step's cost
depends on its context.

A shared machine changes speed from minute to minute, and a step's cost matters only relative to
the autoregressive step it is compared with. So every round decodes each tree alongside an
autoregressive decode of the same prompts, their steps interleaved
(:meth:`~treeopt.decoding.loop.Decoder.decode_alongside`: the reference meets the machine at the
same moments, a few milliseconds apart, as the live comparison's does); a tree's record is its
phases scaled by ``fastest / reference`` — ``fastest`` the quickest autoregressive step of the
whole batch size, also the autoregressive record — the median round's, by scaled step (one
disturbed decode among three moves no record; of an even count, the mean of the middle two: the
lower one alone would favour the tree, a round being disturbed on either side of the ratio). A
verify time that falls as q grows is measured again (:data:`REMEASURES` rounds at most), and the
measurement's rule applied again after. With ``shared`` references, the records a round
measures — every one at first, then those still short or remeasured — decode together beside one
autoregressive decode, all their steps interleaved, which serves as each one's reference (and
as the autoregressive record's round): one autoregressive decode a round, not one per record.
:func:`treeopt.pricing.costs.step_costs` turns the records into the step-cost model ``select`` uses.

The file is a :class:`~treeopt.documents.step_profile.StepProfile` (``steps`` ``"steady"``), written
atomically after each batch size, so an interrupted run keeps every finished batch and resumes
after it.
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from time import perf_counter
from typing import TYPE_CHECKING, Any

import numpy as np  # noqa: F401  (the doctest below builds a Growth)
import torch

from treeopt.decoding.compare import check_batch
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.loop import Decoder
from treeopt.decoding.models import architecture, attention_of, name_of_dtype
from treeopt.documents.measure import Measurement, floored_se, pooled_spread
from treeopt.documents.step_profile import SETUP, StepProfile, StepRecord
from treeopt.dynamic.recommend import expanded as dynamic_expanded
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.model.growth import Growth
from treeopt.model.tree import Tree
from treeopt.pricing.costs import expanded_nodes
from treeopt.pricing.verify_prices import verify_dips
from treeopt.profiling.host import cpu_identity, other_cpu

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.drafter import Drafter

SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
Shape = Tree | DynamicSettings  # what one profiled step drafts
_SHAPE = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
          "intermediate_size", "vocab_size")


def design_trees(growth: Growth, *, sizes: Sequence[int], per_depth: bool,
                 ) -> list[tuple[int | None, Tree]]:
    """The trees a step profile measures: the empty tree, then the growth's tree of each size —
    of every depth cap when drafting is called once per depth — without repeats.

    >>> g = Growth("empirical", "none", ((0,), (0, 0), (1,)), np.array([1.0, 1.8, 2.4, 2.5]), {})
    >>> [(cap, t.size) for cap, t in design_trees(g, sizes=[1, 2, 3], per_depth=True)]
    [(None, 0), (None, 1), (None, 2), (None, 3), (1, 2)]
    """
    depth = max((len(p) for p in growth.order), default=0)
    caps: list[int | None] = [None, *range(1, depth)] if per_depth else [None]
    seen: set[Tree] = {Tree(())}
    out: list[tuple[int | None, Tree]] = [(None, Tree(()))]
    for cap in caps:
        paths = [p for p in growth.order if cap is None or len(p) <= cap]
        for n in sizes:
            tree = Tree.from_choices(paths[:n])
            if n <= len(paths) and tree not in seen:
                seen.add(tree)
                out.append((cap, tree))
    return out


def design_dynamic(settings: Sequence[DynamicSettings]) -> list[tuple[int | None, Shape]]:
    """The steps a dynamic step profile measures: autoregressive decoding, then each setting.

    >>> [s for _, s in design_dynamic([DynamicSettings(2, 2, 4)])]
    [Tree(size=0, depth=0, widths=[]), DynamicSettings(topk=2, steps=2, draft_tokens=4, policy='sglang')]
    """
    return [(None, Tree(())), *((None, s) for s in settings)]


def step_shape(step: Shape) -> dict[str, Any]:
    """What a record says of the step it profiled: size, depth, tokens q, nodes expanded per
    depth (and, for dynamic drafting, its settings)."""
    if isinstance(step, DynamicSettings):
        return {"size": step.nodes, "depth": step.steps, "q": step.draft_tokens,
                "expanded": list(dynamic_expanded(step)), "dynamic": step.to_dict()}
    return {"size": step.size, "depth": step.depth, "q": step.num_tokens,
            "expanded": list(expanded_nodes(step.paths))}


def profile_steps(model: PreTrainedModel, heads: Drafter, growth: Growth | None,
                  prompts: Sequence[Sequence[int]], *, batch: Sequence[int],
                  out: str | os.PathLike[str], sizes: Sequence[int] = SIZES,
                  max_new_tokens: int = 64, measure: Measurement | None = None,
                  measure_at: Mapping[int, Measurement] | None = None,
                  sequences: int | None = None, compile: bool = False,
                  dynamic: Sequence[DynamicSettings] = (), retime: bool = False,
                  shared: bool = False, log: Callable[[str], None] | None = None,
                  progress: Callable[[int, int], None] | None = None) -> StepProfile:
    """Profile the live step of every design tree at every batch size — or, with ``dynamic``,
    of every dynamic setting (then ``growth`` is unused) — each record timed as ``measure``
    says (default: 3 rounds), or as ``measure_at`` says for its batch size, on its step over
    its reference's (records say their rounds and standard error), and write and return the
    profile (a finished batch size already in ``out`` is kept, not measured again; ``retime``:
    the batch sizes given are profiled again, their records in ``out`` replaced; ``shared``:
    a round's records share one autoregressive reference, :func:`batch_records`, recorded in
    the profile's meta as ``references`` and resumed only alike)."""
    if sequences is not None and sequences < 1:
        raise TreeoptError(f"sequences must be ≥ 1, got {sequences}")
    check_batch(max(batch), len(prompts))
    say = log or (lambda line: print(line, file=sys.stderr))
    if dynamic:
        trees = design_dynamic(dynamic)
    elif growth is None:
        raise TreeoptError("a step profile needs a growth (its trees) or dynamic settings")
    else:
        trees = list(design_trees(growth, sizes=sizes, per_depth=heads.kind.per_depth))
    profile = resume_document(out, model, heads, prompts, max_new_tokens, compile,
                              design="dynamic" if dynamic else "trees", shared=shared)
    if retime:  # profiled again: the file keeps them until then
        profile = profile.without_batches(batch)
    done = set(profile.batches)
    decoder = Decoder(model, heads, compile=compile)
    config = DecodeConfig(max_new_tokens=max_new_tokens)
    todo = [b for b in batch if b not in done]
    sequences = max(batch) if sequences is None else sequences
    for i, b in enumerate(todo):
        records = batch_records(decoder, trees, prompts, b, config=config,
                                measure=(measure_at or {}).get(b, measure or Measurement()),
                                sequences=sequences, shared=shared)
        profile = profile.with_records(StepRecord.from_json(r, where=f"{out}: batch {b}")
                                       for r in records)
        profile.save(out)
        say(f"batch {b}: {len(trees)} trees profiled")
        if progress is not None:
            progress(i + 1, len(todo))
    return profile


def batch_records(decoder: Decoder, trees: Sequence[tuple[int | None, Shape]],
                  prompts: Sequence[Sequence[int]], b: int, *, config: DecodeConfig,
                  measure: Measurement, sequences: int,
                  shared: bool = False) -> list[dict[str, Any]]:
    """The records of ``trees`` (the first: the empty tree, their reference) at batch ``b``:
    each tree's steps interleaved with an autoregressive decode of the same prompts, in rounds
    over at least ``sequences`` sequences, more as ``measure`` says, scaled to the fastest
    autoregressive step (the module's docstring). ``shared``: the records a round measures at
    once — every one at first, then those still short — decoded together beside one
    autoregressive decode (:func:`_measure_shared`), not each beside its own."""
    cycle = -(-sequences // b)  # rounds that decode every sequence once
    count = max(measure.rounds, cycle)  # rounds at this batch size
    used = [p for r in range(count) for p in rotating_group(prompts, b, r)]
    context = statistics.mean(len(p) for p in used) + config.max_new_tokens / 2
    decoder.decode(trees[-1][1], rotating_group(prompts, b, 0),
                   config=DecodeConfig(max_new_tokens=8))  # warm-up
    phases: dict[int, list[Phases]] = {j: [] for j in range(len(trees))}
    reference: dict[int, list[Phases]] = {j: [] for j in range(len(trees))}
    timed = dict.fromkeys(range(len(trees)), 0.0)  # seconds each record's decodes took
    state = (phases, reference, timed)

    def rounds(js: Sequence[int]) -> None:  # a round more of each of js, in turn or shared
        if shared:
            _measure_shared(decoder, trees, js, prompts, b, config, *state)
        else:
            for j in js:
                _measure(decoder, trees, j, prompts, b, config, *state)

    def top_up() -> None:  # a cycle more of every record still short of time or precision
        while short := _short(*state, measure=measure):
            if shared:
                for _ in range(cycle):
                    rounds([j for j in short if len(phases[j]) < measure.cap])
            else:
                for j in short:
                    rounds([j] * min(cycle, measure.cap - len(phases[j])))

    for _ in range(count):
        rounds(range(len(trees)))
    top_up()
    for _ in range(REMEASURES):  # a verify time that falls as q grows is a busy moment
        rounds(_falling(trees, _scaled(phases, reference)))
        top_up()
    kept, spread = _scaled(phases, reference), _spread(phases, reference)
    records = []
    for j, (cap, tree) in enumerate(trees):
        draft, verify, book = kept[j]
        records.append({
            "batch": b, "max_depth": cap, **step_shape(tree),
            "context": round(context, 1), "ms_draft": round(draft * 1e3, 6),
            "ms_verify": round(verify * 1e3, 6), "ms_bookkeeping": round(book * 1e3, 6),
            "rounds": len(phases[j]), "seconds": round(timed[j], 3),
            **({"se": round(_se(phases[j], reference[j], spread), 6)}
               if j > 0 and len(phases[j]) > 1 else {})})
    return records


def _measure(decoder: Decoder, trees: Sequence[tuple[int | None, Shape]], j: int,
             prompts: Sequence[Sequence[int]], batch: int, config: DecodeConfig,
             phases: dict[int, list[Phases]], reference: dict[int, list[Phases]],
             timed: dict[int, float]) -> None:
    """Entry j's next round, on its next group of prompts: the entry and its autoregressive
    reference, their steps interleaved (the autoregressive entry itself: alone); the time the
    round took is added to ``timed[j]``."""
    group = rotating_group(prompts, batch, len(phases[j]))
    started = perf_counter()
    if not j:
        phases[j].extend(_phases(decoder, [trees[0][1]], group, config))
    else:
        ref, run = _phases(decoder, [trees[0][1], trees[j][1]], group, config)
        reference[j].append(ref)
        phases[j].append(run)
    timed[j] += perf_counter() - started


def _measure_shared(decoder: Decoder, trees: Sequence[tuple[int | None, Shape]],
                    js: Sequence[int], prompts: Sequence[Sequence[int]], batch: int,
                    config: DecodeConfig, phases: dict[int, list[Phases]],
                    reference: dict[int, list[Phases]], timed: dict[int, float]) -> None:
    """The next round of each entry of ``js``, the entries at the same round decoded together
    on its group of prompts beside one autoregressive decode, all their steps interleaved (the
    autoregressive entry, where one of them, is that decode); each entry's ``timed`` gains the
    seconds of the decode it was in."""
    at: dict[int, list[int]] = {}
    for j in js:
        at.setdefault(len(phases[j]), []).append(j)
    for r, members in at.items():
        drafted = [j for j in members if j]
        started = perf_counter()
        ref, *runs = _phases(decoder, [trees[0][1], *(trees[j][1] for j in drafted)],
                             rotating_group(prompts, batch, r), config)
        seconds = perf_counter() - started
        if 0 in members:
            phases[0].append(ref)
        for j, run in zip(drafted, runs, strict=True):
            reference[j].append(ref)
            phases[j].append(run)
        for j in members:
            timed[j] += seconds


def rotating_group(prompts: Sequence[Sequence[int]], batch: int, r: int) -> list[list[int]]:
    """Round r's ``batch`` prompts: the r-th group of ``batch``, taken cyclically.

    >>> [rotating_group([[1], [2], [3]], 2, r) for r in range(3)]
    [[[1], [2]], [[3], [1]], [[2], [3]]]
    """
    return [list(prompts[(r * batch + i) % len(prompts)]) for i in range(batch)]


Phases = tuple[float, float, float]  # seconds per loop step: draft, verify, bookkeeping
FALL_LIMIT = 0.05  # a verify time this far below a smaller q's is noise, measured again
REMEASURES = 2  # extra rounds, at most, for the entries of such a fall


def _falling(trees: Sequence[tuple[int | None, Shape]], kept: dict[int, Phases]) -> list[int]:
    """The design entries whose verify time falls more than :data:`FALL_LIMIT` below a smaller
    q's, and those of the q it falls below (which of the two is off is not known).

    >>> from treeopt.model.tree import Tree
    >>> trees = [(None, Tree(())), (None, Tree.from_choices([[0]])),
    ...          (None, Tree.from_choices([[0], [1]]))]
    >>> _falling(trees, {0: (0, 5.0, 0), 1: (0, 6.0, 0), 2: (0, 5.4, 0)})
    [1, 2]
    >>> _falling(trees, {0: (0, 5.0, 0), 1: (0, 6.0, 0), 2: (0, 5.8, 0)})
    []
    """
    q_of = [step_shape(tree)["q"] for _, tree in trees]
    points = [(0, q, kept[j][1]) for j, q in enumerate(q_of)]
    noisy = {q for _, low, high, fall in verify_dips(points) if fall > FALL_LIMIT
             for q in (low, high)}
    return [j for j, q in enumerate(q_of) if q in noisy]


def _short(phases: dict[int, list[Phases]], reference: dict[int, list[Phases]],
           timed: dict[int, float], *, measure: Measurement) -> list[int]:
    """The records that get another round, as ``measure`` says on each one's time and, beside
    a reference, on its step over the reference's round by round — its standard error at least
    what the batch's records' pooled spread gives (:func:`_spread`, computed once a pass)."""
    spread = _spread(phases, reference)
    return [j for j in timed
            if measure.wants(len(phases[j]), timed[j],
                             [_ratios(phases[j], reference[j])] if j > 0 else [], spread=spread)]


def _spread(phases: dict[int, list[Phases]], reference: dict[int, list[Phases]]) -> float:
    """A round's relative spread, pooled over every record of the batch beside its reference
    (:func:`~treeopt.documents.measure.pooled_spread`): on SmolLM2 at batch 4, a record of two
    rounds that agreed within 1.5% stood 5% below what six rounds measured."""
    return pooled_spread(_ratios(phases[j], reference[j]) for j in phases if j > 0)


def _ratios(phases: Sequence[Phases], reference: Sequence[Phases]) -> list[float]:
    """A record's whole step over its reference's, round by round."""
    return [sum(p) / sum(ref) for p, ref in zip(phases, reference, strict=True)]


def _se(phases: Sequence[Phases], reference: Sequence[Phases], spread: float = 0.0) -> float:
    """The relative standard error of a record's (median) step over its reference's, over its
    rounds, at least what a round's pooled ``spread`` gives (:func:`_spread`).

    >>> round(_se([(0, 2.0, 0), (0, 2.2, 0)], [(0, 1.0, 0), (0, 1.0, 0)]), 6)
    0.059682
    >>> round(_se([(0, 2.0, 0), (0, 2.0, 0)], [(0, 1.0, 0), (0, 1.0, 0)], spread=0.05), 6)
    0.044311
    """
    return floored_se(_ratios(phases, reference), spread)


def _phases(decoder: Decoder, shapes: Sequence[Shape], group: Sequence[Sequence[int]],
            config: DecodeConfig) -> list[Phases]:
    """Each shape's seconds per steady step, phase by phase (the steps throughput counts), the
    shapes decoded alongside each other."""
    runs = decoder.decode_alongside(shapes, group, config=config, profile=True)
    return [tuple(r.stats.split.per_step().values()) for r in runs]  # type: ignore[misc]


def _scaled(phases: dict[int, list[Phases]], reference: dict[int, list[Phases]],
            ) -> dict[int, Phases]:
    """Each design entry's record: entry 0 (autoregressive decoding) the fastest autoregressive
    step of any round; every other the median of its rounds by step after scaling each round by
    ``fastest / its reference`` (of an even count, the mean of the middle two, phase by phase).

    >>> kept = _scaled({0: [(0, 2.0, 0), (0, 1.0, 0)], 1: [(1.0, 3.0, 0), (1.0, 8.0, 0)]},
    ...                {0: [], 1: [(0, 2.0, 0), (0, 4.0, 0)]})
    >>> kept[0], kept[1]
    ((0, 1.0, 0), (0.375, 1.75, 0.0))
    """
    every = phases[0] + [r for rounds in reference.values() for r in rounds]
    fastest = min(every, key=sum)
    out = {0: fastest}
    for j in phases:
        if j == 0:
            continue
        scaled = sorted((tuple(x * sum(fastest) / sum(ref) for x in p)
                         for p, ref in zip(phases[j], reference[j], strict=True)), key=sum)
        middle = scaled[(len(scaled) - 1) // 2:len(scaled) // 2 + 1]
        out[j] = tuple(sum(xs) / len(middle)  # type: ignore[assignment]
                       for xs in zip(*middle, strict=True))
    return out


STEPS = "steady"  # records time the steps during which every row of the batch ran


def setup_of(model: PreTrainedModel) -> dict[str, Any]:
    """The fields of :data:`~treeopt.documents.step_profile.SETUP` for ``model`` as loaded: the
    device (``cpu`` or ``cuda:<name>``), dtype, attention implementation and shape a step profile
    records."""
    from treeopt.profiling.verify_latency import device_label

    cfg = model.config
    return {"device": device_label(str(next(model.parameters()).device)),
            "dtype": name_of_dtype(next(model.parameters()).dtype),
            "attention": attention_of(model),
            "model": {"architecture": architecture(model),
                      **{k: getattr(cfg, k, None) for k in _SHAPE}}}


def check_setup(profile: StepProfile, model: PreTrainedModel, *, source: str,
                warn: Callable[[str], None] | None = None) -> None:
    """Raise a TreeoptError naming ``source`` when ``profile`` was measured on another device,
    dtype, attention or model shape than ``model`` runs with (its figures would not hold);
    what the profile does not record is not compared. A CPU profile taken on a CPU of another
    matrix class (:func:`~treeopt.profiling.host.other_cpu`) is ``warn``-ed of (default: a line
    on stderr): it runs, but its predictions may miss."""
    here = setup_of(model)
    for key in SETUP:
        value = getattr(profile, key)
        if value is not None and value != here[key]:
            raise TreeoptError(f"{source}: profiled with another {key} ({value!r}, not "
                               f"{here[key]!r} as loaded here); profile this setup first "
                               f"(treeopt profile step)")
    if here["device"] == "cpu" and (why := other_cpu(profile.meta.get("cpu"))):
        (warn or (lambda line: print(line, file=sys.stderr)))(
            f"warning: {source}: {why}; its step costs may not hold here (treeopt profile "
            f"step measures this host)")


def host_meta(model: PreTrainedModel) -> dict[str, Any]:
    """What a CPU measurement records of its host: ``{"cpu": …}``
    (:func:`~treeopt.profiling.host.cpu_identity`); nothing on a GPU, whose name the device
    label carries."""
    on_cpu = next(model.parameters()).device.type == "cpu"
    return {"cpu": cpu_identity()} if on_cpu else {}


REFERENCES = {False: "own", True: "shared"}  # each record beside its own reference, or not
RESUMED_ALIKE = ("device", "dtype", "attention", "threads", "model", "heads", "max_new_tokens",
                 "compile", "design", "steps")  # a profile extended must agree on all of it


def resume_document(out: str | os.PathLike[str], model: PreTrainedModel, heads: Drafter,
                    prompts: Sequence[Sequence[int]], max_new_tokens: int,
                    compile: bool, *, design: str = "trees", shared: bool = False,
                    ) -> StepProfile:
    """The profile to extend: the one at ``out`` when it was measured the same way (a profile
    that does not record its attention was measured with ``sdpa``, one without ``references``
    each record beside its own), else a new one."""
    fresh = StepProfile(
        heads.config.to_dict(), (), **setup_of(model), threads=torch.get_num_threads(),
        prompts=len(prompts), max_new_tokens=max_new_tokens, compile=compile, design=design,
        steps=STEPS, meta={"torch": torch.__version__,
                           "timing": "each step interleaved with an autoregressive reference",
                           "references": REFERENCES[shared],
                           "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           **host_meta(model)},
        sources=(str(out),))
    if not os.path.exists(out):
        return fresh
    old = StepProfile.load(out)
    if old.attention is None:
        old = replace(old, attention="sdpa")
    differ = old.differences(fresh, RESUMED_ALIKE)
    if (was := old.meta.get("references", REFERENCES[False])) != REFERENCES[shared]:
        raise TreeoptError(f"{out}: profiled with other references ({was}, not "
                           f"{REFERENCES[shared]}); write to another path")
    if not differ and old.cpu_matmul and fresh.cpu_matmul and old.cpu_matmul != fresh.cpu_matmul:
        raise TreeoptError(f"{out}: profiled on a CPU with {old.cpu_matmul}, this one has "
                           f"{fresh.cpu_matmul}; write to another path")
    if differ:
        key = differ[0]
        raise TreeoptError(f"{out}: profiled with another {key} ({getattr(old, key)!r}, not "
                           f"{getattr(fresh, key)!r}); write to another path")
    return old
