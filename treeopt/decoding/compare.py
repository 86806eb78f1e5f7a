"""Tree decoding against autoregressive decoding on the same prompts: the one comparison that
``treeopt verify``, ``treeopt tune``, the app's Verify page, the demo's quality check and the
benchmarks use.

Both run through the same batched loop (:func:`~treeopt.decoding.loop.decode`), ``batch`` prompts
at a time (``continuous``: all prompts in one run of ``batch`` rows, a finished row taking the
next prompt, as a serving engine batches), after a warm-up of each. Every batch of prompts is decoded with the tree and
autoregressively, the two runs' steps interleaved (:meth:`~treeopt.decoding.loop.Decoder.
decode_alongside`: each next step is the run furthest behind in its budget, each run timing its
own steps), so both meet the machine at the same moments.

The speed-up is the median of the rounds' speed-ups, each the tree's steady-state tokens/s over
the autoregressive tokens/s *of the same round* (paired: both met the same moments; the median
drops a round a burst disturbed); its standard error is the median's
(:attr:`Comparison.speedup_se`, :func:`~treeopt.documents.measure.median_relative_se`).
Autoregressive throughput is its best of rounds, batch by batch (for every batch of prompts the
fastest of its rounds, summed over the batches), and the tree's is that times the speed-up: the
tree's throughput at the moment autoregressive decoding ran fastest, the normalisation the step
profile uses too (:mod:`treeopt.profiling.step`). The spread of the rounds' speed-ups says how much
the machine moved. Throughput is the steady-state decode rate (every row of the batch running,
prefill excluded: what the cost model predicts) and, beside it, end to end. Phase times (draft /
verify / bookkeeping) come from a separate profiled pass (its steps interleaved too), since timing
phases costs time itself.

How long to measure is a :class:`~treeopt.documents.measure.Measurement`: its rounds, seconds and
target standard error are read on the speed-up the comparison reports. With ``sample_prompts`` the
prompts are a population to sample: batches are taken one at a time, in order, each decoded once,
and the speed-up is estimated over the batches (a round is a batch of prompts), so the sample
grows until the speed-up's standard error meets the target or the batches run out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.drafter import Drafter
from treeopt.decoding.loop import BatchResult, Decoder
from treeopt.decoding.stats import DecodeStats, combine
from treeopt.documents.measure import ONCE, Measurement, floored_se, pooled_spread
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.tree_forward import SupportProbe

SPLIT_BATCHES = 2  # batches of the profiled pass that measures the per-step phase times
LOSSLESS_MODES = ("greedy", "sample")  # tree output must equal autoregressive output exactly


@dataclass(frozen=True, eq=False)
class Comparison:
    """Both decodings of every batch of prompts, round by round, and the profiled phase times."""

    tree: Tree | DynamicSettings
    config: DecodeConfig
    batch: int
    tree_rounds: tuple[tuple[BatchResult, ...], ...]  # [round][batch of prompts]
    autoregressive_rounds: tuple[tuple[BatchResult, ...], ...]
    tree_profile: DecodeStats | None = None
    autoregressive_profile: DecodeStats | None = None
    probe: SupportProbe | None = None  # the decoder's support probe
    sampled: bool = False  # one round of a sample of batches: the speed-up is over its batches
    continuous: bool = False  # all prompts in one run of ``batch`` rows, each refilled
    spread: float = 0.0  # a round's spread pooled over like comparisons: floors ``speedup_se``

    @property
    def tree_outputs(self) -> list[tuple[int, ...]]:
        return [t for run in self.tree_rounds[0] for t in run.tokens]

    @property
    def autoregressive_outputs(self) -> list[tuple[int, ...]]:
        return [t for run in self.autoregressive_rounds[0] for t in run.tokens]

    @property
    def tree_stats(self) -> DecodeStats:
        """The first round's tree decoding, pooled over its batches (every round decodes the
        same tokens; rounds differ only in time)."""
        return combine([r.stats for r in self.tree_rounds[0]])

    @property
    def autoregressive_stats(self) -> DecodeStats:
        return combine([r.stats for r in self.autoregressive_rounds[0]])

    def round_speedups(self, *, end_to_end: bool = False) -> list[float]:
        """Tree over autoregressive tokens/s of each round, all its batches pooled — of each
        batch of prompts when ``sampled`` (steady-state decode by default)."""
        pairs: Sequence[tuple[Sequence[BatchResult], Sequence[BatchResult]]]
        if self.sampled:
            pairs = [((t,), (a,)) for t, a in zip(self.tree_rounds[0],
                                                  self.autoregressive_rounds[0], strict=True)]
        else:
            pairs = list(zip(self.tree_rounds, self.autoregressive_rounds, strict=True))
        out = []
        for tree, ar in pairs:
            t, a = combine([r.stats for r in tree]), combine([r.stats for r in ar])
            if end_to_end:
                out.append(t.tokens_per_s / a.tokens_per_s)
            else:
                out.append(t.decode_tokens_per_s / a.decode_tokens_per_s)
        return out

    @property
    def speedup(self) -> float:
        """The median over rounds of the tree's steady-state tokens/s over the autoregressive
        tokens/s of the same round."""
        return statistics.median(self.round_speedups())

    @property
    def speedup_spread(self) -> float:
        """(largest − smallest) round speed-up over their median: how much the machine moved."""
        s = self.round_speedups()
        return (max(s) - min(s)) / statistics.median(s)

    @property
    def speedup_se(self) -> float | None:
        """The relative standard error of the reported (median) speed-up (None with one round),
        at least what ``spread`` gives over as many rounds: what the measurement's target
        standard error is read on."""
        se = floored_se(self.round_speedups(), self.spread)
        return se if math.isfinite(se) else None

    @property
    def tree_tokens_per_s(self) -> float:
        """The tree's steady-state decode tokens/s (the whole batch) where autoregressive
        decoding ran its best: that best times the paired speed-up."""
        return self.autoregressive_tokens_per_s * self.speedup

    @property
    def autoregressive_tokens_per_s(self) -> float:
        """Autoregressive steady-state decode tokens/s (the whole batch), best of rounds."""
        return best_of_rounds(self.autoregressive_rounds)

    @property
    def mismatched(self) -> list[int]:
        """Prompts whose tree output differs from the autoregressive one."""
        return [i for i, (a, b) in enumerate(zip(self.tree_outputs, self.autoregressive_outputs,
                                                  strict=True)) if a != b]

    @property
    def lossless(self) -> bool | None:
        """Greedy and sample (same seed, same streams): every output identical to autoregressive
        decoding; typical: None (by design the outputs may differ)."""
        return not self.mismatched if self.config.mode in LOSSLESS_MODES else None

    def to_dict(self) -> dict[str, Any]:
        tree_doc, ar_doc = self.tree_stats.to_dict(), self.autoregressive_stats.to_dict()
        for doc, prof in ((tree_doc, self.tree_profile), (ar_doc, self.autoregressive_profile)):
            if prof is not None and prof.split is not None:
                doc["ms_per_step"] = {k: 1e3 * v for k, v in prof.split.per_step().items()}
        tree_doc["decode_tokens_per_s_paired"] = self.tree_tokens_per_s
        tree_doc["decode_tokens_per_s_best"] = best_of_rounds(self.tree_rounds)
        ar_doc["decode_tokens_per_s_best"] = self.autoregressive_tokens_per_s
        doc: dict[str, Any] = {
            "batch": self.batch, "batching": "continuous" if self.continuous else "static",
            "rounds": len(self.tree_rounds),
            "tree_decoding": tree_doc, "autoregressive": ar_doc,
            "speedup": self.speedup, "speedup_spread": self.speedup_spread,
            "speedup_se": self.speedup_se,
            "round_speedups": self.round_speedups(),
            "end_to_end_speedup": statistics.median(self.round_speedups(end_to_end=True))}
        if self.sampled:
            doc["sampled_batches"] = len(self.tree_rounds[0])
        if self.config.mode in LOSSLESS_MODES:
            doc["outputs_match"] = not self.mismatched
            doc["mismatched_prompts"] = self.mismatched
        return doc


def best_of_rounds(rounds: Sequence[Sequence[BatchResult]]) -> float:
    """Steady-state tokens/s from each batch's fastest round: Σ tokens / Σ min seconds.

    >>> from treeopt.decoding.stats import DecodeStats
    >>> run = lambda s: BatchResult(((1,),), DecodeStats(8, (2, 2), s, 8, s))
    >>> best_of_rounds([[run(1.0), run(4.0)], [run(2.0), run(2.0)]])  # 16 tokens in 1 + 2 s
    5.333333333333333
    """
    tokens = sum(r.stats.decode_tokens for r in rounds[0])
    seconds = sum(min(rnd[g].stats.decode_seconds for rnd in rounds)
                  for g in range(len(rounds[0])))
    return tokens / seconds if seconds > 0 else 0.0


def check_batch(batch: int, prompts: int) -> None:
    """Refuse a batch size below 1 or above the number of ``prompts`` there are to fill it.

    >>> check_batch(3, 2)
    Traceback (most recent call last):
    treeopt.errors.TreeoptError: a batch of 3 prompts, but only 2 prompts given
    """
    if batch < 1:
        raise TreeoptError(f"the batch size must be ≥ 1, got {batch}")
    if prompts < batch:
        raise TreeoptError(f"a batch of {batch} prompts, but only {prompts} prompts given")


def prompt_groups(prompts: Sequence[Sequence[int]], batch: int, *,
                  continuous: bool = False) -> list[list[Sequence[int]]]:
    """What one round decodes, run by run: :func:`batches` of ``batch`` prompts, or with
    ``continuous`` batching every prompt in one run (of ``batch`` rows)."""
    if continuous:
        check_batch(batch, len(prompts))
        return [list(prompts)]
    return batches(prompts, batch)


def batches(prompts: Sequence[Sequence[int]], batch: int) -> list[list[Sequence[int]]]:
    """Consecutive batches of ``batch`` prompts; a shorter last batch is dropped when there are
    full ones (every timed batch has the same size), and refused when there are none.

    >>> [len(b) for b in batches([[1]] * 7, 3)]
    [3, 3]
    """
    check_batch(batch, len(prompts))
    full = len(prompts) // batch
    return [list(prompts[i * batch: (i + 1) * batch]) for i in range(full)]


def compare(model: PreTrainedModel, heads: Drafter | None, tree: Tree | DynamicSettings,
            prompts: Sequence[Sequence[int]], *, config: DecodeConfig | None = None,
            batch: int = 1, measure: Measurement = ONCE, sample_prompts: bool = False,
            split: bool = False, warmup_tokens: int = 8, compile: bool = False,
            continuous: bool = False, spread: float = 0.0,
            progress: Callable[[int, int], None] | None = None) -> Comparison:
    """Decode every batch of ``batch`` prompts with ``tree`` and autoregressively, their steps
    interleaved, in rounds after a warm-up, for as long as ``measure`` says on the speed-up
    (``sample_prompts``: batches one at a time, each decoded once, until ``measure`` is met or
    the batches run out; ``split``: then a profiled pass for the phase times; ``compile``: steps
    through torch.compile, for CUDA; ``continuous``: every prompt in one run of ``batch`` rows, a
    finished row taking the next prompt, as a serving engine batches; ``spread``: a round's
    relative spread pooled over like comparisons — a sweep's points at one batch size — which
    floors the standard error the rounds stop on, :func:`~treeopt.documents.measure.floored_se`:
    two rounds may agree by chance). ``progress(done, total)`` counts decodes of a batch, the
    total as far as known."""
    config = config or DecodeConfig()
    if continuous and sample_prompts:
        raise TreeoptError("continuous batching decodes every prompt in one run: it has no "
                           "batches of prompts to sample")
    groups = prompt_groups(prompts, batch, continuous=continuous)
    rows = batch if continuous else None
    drafts = isinstance(tree, DynamicSettings) or tree.size > 0
    decoder = Decoder(model, heads if drafts else None, compile=compile)
    empty = Tree(())
    per_round = 1 if sample_prompts else len(groups)
    split_runs = 2 * min(SPLIT_BATCHES, len(groups)) if split else 0
    done, planned = 0, measure.rounds

    def tick(rounds: int | None = None) -> None:  # two decodings of a batch of prompts done
        nonlocal done, planned
        done += 2
        planned = rounds or planned
        if progress is not None:
            progress(done, planned * per_round * 2 + split_runs)

    # autoregressive first: the rounds stop on the tree's tokens/s over it, the speed-up whose
    # standard error the comparison reports
    timed = timed_rounds(decoder, (empty, tree), groups, config=config, measure=measure,
                         sampled=sample_prompts, warmup_tokens=warmup_tokens, on_batch=tick,
                         rows=rows, spread=spread)
    if sample_prompts:  # one round of the batches taken
        timed = [[runs for rnd in timed for runs in rnd]]
    planned = len(timed) if not sample_prompts else len(timed[0])
    tree_prof = ar_prof = None
    if split:
        tree_split, ar_split = [], []
        for g in groups[:SPLIT_BATCHES]:
            t, a = decoder.decode_alongside((tree, empty), g, config=config, profile=True,
                                            batch=rows)
            tree_split.append(t.stats)
            ar_split.append(a.stats)
            tick()
        tree_prof, ar_prof = combine(tree_split), combine(ar_split)
    elif progress is not None:
        progress(done, done)  # the rounds the measurement took, however many were foreseen
    return Comparison(tree, config, batch, tuple(tuple(rnd[1] for rnd in t) for t in timed),
                      tuple(tuple(rnd[0] for rnd in t) for t in timed), tree_prof, ar_prof,
                      probe=decoder.verify.probe, sampled=sample_prompts, continuous=continuous,
                      spread=spread)


def compare_together(model: PreTrainedModel, heads: Drafter | None, trees: Sequence[Tree],
                     prompts: Sequence[Sequence[int]], *, config: DecodeConfig | None = None,
                     batch: int = 1, measure: Measurement = ONCE, warmup_tokens: int = 8,
                     compile: bool = False, continuous: bool = False, spread: float = 0.0,
                     ragged: bool = True) -> list[Comparison]:
    """Every one of ``trees`` against one autoregressive decoding: each batch of prompts decoded
    once autoregressively and once with each tree still measuring, all their steps interleaved,
    each tree for as long as ``measure`` says on its own speed-up (:func:`rounds_each`); one
    :class:`Comparison` per tree, as :func:`compare` of it alone would report, its
    autoregressive rounds the ones it was decoded beside. A sweep's points at one batch size
    measured so cost one autoregressive decoding a round instead of one per point, meet the same
    moments of the machine, and a point already measured sits out the rounds the others need
    (``ragged=False``: every tree decodes every round until all are measured)."""
    config = config or DecodeConfig()
    groups = prompt_groups(prompts, batch, continuous=continuous)
    drafts = any(tree.size > 0 for tree in trees)
    decoder = Decoder(model, heads if drafts else None, compile=compile)
    ar, own = rounds_each(decoder, trees, groups, config=config, measure=measure,
                          warmup_tokens=warmup_tokens, rows=batch if continuous else None,
                          spread=spread, ragged=ragged)
    pooled = max(spread, pooled_spread(paired_ratios(ar, rounds) for rounds in own))
    return [Comparison(tree, config, batch, tuple(runs for _, runs in rounds),
                       tuple(ar[i] for i, _ in rounds), probe=decoder.verify.probe,
                       continuous=continuous, spread=pooled)
            for tree, rounds in zip(trees, own, strict=True)]


TreeRounds = list[tuple[int, tuple[BatchResult, ...]]]  # (round, [batch of prompts]) a tree ran


def rounds_each(decoder: Decoder, trees: Sequence[Tree],
                groups: Sequence[Sequence[Sequence[int]]], *, config: DecodeConfig,
                measure: Measurement, warmup_tokens: int = 8, rows: int | None = None,
                spread: float = 0.0, ragged: bool = True,
                ) -> tuple[list[tuple[BatchResult, ...]], list[TreeRounds]]:
    """Every tree against autoregressive decoding, each for as long as ``measure`` says on its
    own speed-up, after a warm-up of all: a round decodes every batch of prompts (``groups``)
    autoregressively and with each tree still measuring, their steps interleaved. A tree's
    standard error is floored by the round spread pooled over all trees so far (and by
    ``spread``); a tree that met the measurement sits out later rounds, and rejoins should the
    pooled spread grow past it. Returns the autoregressive rounds (``[round][batch]``) and, per
    tree, the rounds it ran (:data:`TreeRounds`). ``rows``: as :func:`timed_rounds`'; a
    prompt's sampling stream is its index; ``ragged=False``: every tree decodes every round
    while any wants one (the reference the ragged rounds are measured against)."""
    warm_up(decoder, (Tree(()), *trees), groups[0], config, warmup_tokens, rows)
    ar: list[tuple[BatchResult, ...]] = []
    own: list[TreeRounds] = [[] for _ in trees]
    seconds = 0.0
    while measuring := still_measuring(measure, ar, own, seconds, spread, ragged=ragged):
        shapes = (Tree(()), *(trees[k] for k in measuring))
        runs = [decoder.decode_alongside(shapes, g, config=config, batch=rows,
                                         streams=range(i * len(g), (i + 1) * len(g)))
                for i, g in enumerate(groups)]
        seconds += sum(r.stats.seconds for batch_runs in runs for r in batch_runs)
        for j, k in enumerate(measuring, start=1):
            own[k].append((len(ar), tuple(batch_runs[j] for batch_runs in runs)))
        ar.append(tuple(batch_runs[0] for batch_runs in runs))
    return ar, own


def still_measuring(measure: Measurement, ar: Sequence[Sequence[BatchResult]],
                    own: Sequence[TreeRounds], seconds: float, spread: float, *,
                    ragged: bool = True) -> list[int]:
    """The trees (indices) that want another round of :func:`rounds_each` after ``ar``'s rounds,
    which took ``seconds`` in all: each read on its own paired speed-ups, floored by the spread
    pooled over all trees' (and ``spread``); all of them while any does, unless ``ragged``."""
    columns = [paired_ratios(ar, rounds) for rounds in own]
    pooled = max(spread, pooled_spread(columns))
    wanted = [k for k, column in enumerate(columns)
              if measure.wants(len(column), seconds, [column], spread=pooled)]
    return wanted if ragged or not wanted else list(range(len(own)))


def paired_ratios(ar: Sequence[Sequence[BatchResult]], rounds: TreeRounds) -> list[float]:
    """A tree's steady tokens/s over autoregressive decoding's, round by round: each of its
    rounds (all batches pooled) over the autoregressive round it ran beside."""
    return [combine([r.stats for r in runs]).decode_tokens_per_s
            / combine([r.stats for r in ar[i]]).decode_tokens_per_s for i, runs in rounds]


def race(model: PreTrainedModel, heads: Drafter, trees: Sequence[Tree], prompts:
         Sequence[Sequence[int]], *, config: DecodeConfig | None = None, batch: int = 1,
         measure: Measurement | None = None, continuous: bool = False) -> list[float]:
    """Each of ``trees`` against the first, head to head: every batch of prompts decoded with all
    of them, their steps interleaved, in rounds for as long as ``measure`` (default: 3 rounds)
    says on every tree's ratio to the first; each tree's steady tokens/s over the first's, the
    median over rounds (the first: 1.0).

    Which of a sweep's points measured fastest is partly which one the noise favoured: the best of
    several points measured with the same noise is, on average, measured high. Raced directly
    against each other, two trees meet the same moments, and their ratio is measured afresh.
    ``continuous``: as :func:`compare`'s.
    """
    config = config or DecodeConfig()
    timed = timed_rounds(Decoder(model, heads), trees,
                         prompt_groups(prompts, batch, continuous=continuous), config=config,
                         measure=measure or Measurement(), rows=batch if continuous else None)
    return [statistics.median(column) for column in zip(*round_ratios(timed), strict=True)]


def round_ratios(timed: Sequence[Sequence[Sequence[BatchResult]]]) -> list[list[float]]:
    """Per round of :func:`timed_rounds`' ``[round][batch][shape]``: each shape's steady tokens/s
    (all batches of the round) over the first shape's.

    >>> from treeopt.decoding.stats import DecodeStats
    >>> run = lambda s: BatchResult(((1,),), DecodeStats(4, (2, 2), s, 4, s))
    >>> round_ratios([[[run(1.0), run(2.0)]], [[run(1.0), run(4.0)], [run(1.0), run(4.0)]]])
    [[1.0, 0.5], [1.0, 0.25]]
    """
    out = []
    for rnd in timed:
        rates = [combine([runs[k].stats for runs in rnd]).decode_tokens_per_s
                 for k in range(len(rnd[0]))]
        out.append([rate / rates[0] for rate in rates])
    return out


def timed_rounds(decoder: Decoder, shapes: Sequence[Tree | DynamicSettings],
                 groups: Sequence[Sequence[Sequence[int]]], *, config: DecodeConfig,
                 measure: Measurement, sampled: bool = False, warmup_tokens: int = 8,
                 on_batch: Callable[[int], None] | None = None, rows: int | None = None,
                 spread: float = 0.0) -> list[list[list[BatchResult]]]:
    """Every batch of prompts (``groups``) decoded with every shape, their steps interleaved,
    after a warm-up, in rounds for as long as ``measure`` says on each shape's throughput over
    the first's (:func:`round_ratios`); ``[round][batch][shape]``. ``sampled``: a round is the
    next batch alone, each batch decoded once. ``rows``: each group decoded by continuous
    batching in that many rows; ``spread``: as :func:`compare`'s. A prompt's sampling stream is
    its index; ``on_batch(rounds planned)`` after each batch."""
    if sampled:
        measure = measure.capped(len(groups))
    warm_up(decoder, shapes, groups[0], config, warmup_tokens, rows)
    out: list[list[list[BatchResult]]] = []
    timed = 0.0
    while (planned := measure.planned(len(out), timed, ratio_columns(out),
                                      spread=spread)) > len(out):
        rnd = []
        for i in [len(out)] if sampled else range(len(groups)):
            size = len(groups[i])
            runs = decoder.decode_alongside(shapes, groups[i], config=config,
                                            streams=range(i * size, (i + 1) * size), batch=rows)
            rnd.append(runs)
            timed += sum(r.stats.seconds for r in runs)
            if on_batch is not None:
                on_batch(planned)
        out.append(rnd)
    return out


def warm_up(decoder: Decoder, shapes: Sequence[Tree | DynamicSettings],
            group: Sequence[Sequence[int]], config: DecodeConfig, tokens: int,
            rows: int | None) -> None:
    """Decode ``group`` with every shape for ``tokens`` new tokens at most, as the rounds will
    time them: alongside, each run in its own cache (compiled: its own static buffer)."""
    warm = replace(config, max_new_tokens=min(tokens, config.max_new_tokens))
    decoder.decode_alongside(shapes, group, config=warm, batch=rows)


def ratio_columns(timed: Sequence[Sequence[Sequence[BatchResult]]]) -> list[list[float]]:
    """Per shape after the first, its throughput over the first's, round by round: the figures
    a comparison or a race reports (empty before any round)."""
    return [list(column) for column in zip(*round_ratios(timed), strict=True)][1:]
