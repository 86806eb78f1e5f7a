"""Tree decoding against autoregressive decoding on the same prompts: the one comparison that
``treeopt verify``, ``treeopt tune``, the app's Verify page, the demo's quality check and the
benchmarks use.

Both run through the same batched loop (:func:`~treeopt.decoding.loop.decode`), ``batch`` prompts
at a time. After a warm-up of each, every round decodes every batch of prompts with the tree and
autoregressively, the two runs' steps interleaved (:meth:`~treeopt.decoding.loop.Decoder.
decode_alongside`: each next step is the run furthest behind in its budget, each run timing its
own steps), so both meet the machine at the same moments. A shared host's speed moves in spells
of tenths of a second to seconds (on the demo's 2-core host a fixed product loop ran 5% to 55%
over its fastest, p10 to p90, in 0.35 s windows); two whole decodes of a batch, each about that long, taken
one after the other met different spells. Five repeats of the same batch-1 comparison (Medusa,
16 nodes, 16 prompts × 64 tokens, 3 rounds) spread 11.1% with the runs alternated batch by batch
and 2.4% with their steps interleaved, on the same host in the same half hour.

The speed-up is the median of the rounds' speed-ups, each the tree's tokens/s over the
autoregressive tokens/s *of the same round*: the pairing is what interleaving buys, and the
median drops a round a burst disturbed. Autoregressive throughput is its best of rounds, batch by
batch (for every batch of prompts the fastest of its rounds — ``timeit``'s rule, noise only ever
adds time — summed over the batches), and the tree's is that times the speed-up: the tree's
throughput at the moment autoregressive decoding ran fastest, the normalisation the step profile
uses too (:mod:`profiling.step`). Taking each decoding's best of rounds on its own would pair
rounds run at different moments: on the demo's 2-core host autoregressive decoding at batch 4
varied by ±8% from round to round, drifting, where a 32-node tree varied by ±2.5%, so best of
rounds against best of rounds put the speed-up 8% below the paired median. The spread of the
per-round speed-ups says how much the machine moved. Throughput is the steady-state decode rate
(every row of the batch running, prefill excluded: what the cost model predicts) and, beside it,
end to end. Phase times (draft / verify / bookkeeping) come from a separate profiled pass (its
steps interleaved too), since timing phases costs time itself.

How long to measure: with ``min_seconds``, rounds go on past ``rounds`` until the two decodings
together have been timed that long (at most :data:`MAX_ROUNDS`). What is left of the machine's
spells after interleaving — one caught in the tree's step but not in the autoregressive steps
around it — averages out over the time measured, not over the rounds: on the demo's host a
round of 16 prompts × 64 tokens lasts about 13 s at batch 1 and 3 s at batch 8, and over 3 rounds
the rounds' speed-ups spread 3.3–4.2% (mean over a sweep's points) at batch 1 and 7.9–8.9% at
batch 8. Measuring every point of a sweep for the same time measures them all alike; but a
batch-8 round times about 60 steady tree steps against batch 1's 500, so alike is not equally
well. With ``target_se``, rounds go on (up to :data:`MAX_ROUNDS`) until the standard error of the
rounds' mean speed-up is at most that share of it: each point gets the rounds its own noise
needs, and says how precisely it was measured (:attr:`Comparison.speedup_se`).
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
from treeopt.decoding.stats import DecodeStats, combine, relative_se
from treeopt.dynamic.settings import DynamicSettings
from treeopt.errors import TreeoptError
from treeopt.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.probe import SupportProbe

SPLIT_BATCHES = 2  # batches of the profiled pass that measures the per-step phase times
MAX_ROUNDS = 64  # rounds at most, however short a round is against ``min_seconds``
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
        """Tree over autoregressive tokens/s of each round (steady-state decode by default)."""
        out = []
        for tree, ar in zip(self.tree_rounds, self.autoregressive_rounds, strict=True):
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
        """The relative standard error of the rounds' mean speed-up (None with one round)."""
        se = relative_se(self.round_speedups())
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
            "batch": self.batch, "rounds": len(self.tree_rounds),
            "tree_decoding": tree_doc, "autoregressive": ar_doc,
            "speedup": self.speedup, "speedup_spread": self.speedup_spread,
            "speedup_se": self.speedup_se,
            "round_speedups": self.round_speedups(),
            "end_to_end_speedup": statistics.median(self.round_speedups(end_to_end=True))}
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


def batches(prompts: Sequence[Sequence[int]], batch: int) -> list[list[Sequence[int]]]:
    """Consecutive batches of ``batch`` prompts; a shorter last batch is dropped when there are
    full ones (every timed batch has the same size), and refused when there are none.

    >>> [len(b) for b in batches([[1]] * 7, 3)]
    [3, 3]
    """
    if batch < 1:
        raise TreeoptError(f"--batch must be ≥ 1, got {batch}")
    if len(prompts) < batch:
        raise TreeoptError(f"--batch {batch} is larger than the {len(prompts)} prompts given")
    full = len(prompts) // batch
    return [list(prompts[i * batch: (i + 1) * batch]) for i in range(full)]


def compare(model: PreTrainedModel, heads: Drafter | None, tree: Tree | DynamicSettings,
            prompts: Sequence[Sequence[int]], *, config: DecodeConfig | None = None,
            batch: int = 1, rounds: int = 1, min_seconds: float = 0.0, target_se: float = 0.0,
            split: bool = False, warmup_tokens: int = 8, compile: bool = False,
            progress: Callable[[int, int], None] | None = None) -> Comparison:
    """Decode every batch of ``batch`` prompts with ``tree`` and autoregressively, their steps
    interleaved, ``rounds`` times after a warm-up — and more rounds, up to :data:`MAX_ROUNDS`,
    until both have been timed ``min_seconds`` together and, with ``target_se``, until the
    rounds' speed-ups have a relative standard error of at most that (``compile``: steps through
    torch.compile, for CUDA)."""
    config = config or DecodeConfig()
    if rounds < 1:
        raise TreeoptError(f"--rounds must be ≥ 1, got {rounds}")
    check_timing(min_seconds=min_seconds, target_se=target_se)
    groups = batches(prompts, batch)
    drafts = isinstance(tree, DynamicSettings) or tree.size > 0
    decoder = Decoder(model, heads if drafts else None, compile=compile)
    empty = Tree(())
    split_runs = 2 * min(SPLIT_BATCHES, len(groups)) if split else 0
    done = 0

    def tick(known_rounds: int) -> None:
        nonlocal done
        done += 1
        if progress is not None:  # the rounds still to come as far as now known
            progress(done, max(rounds, known_rounds) * len(groups) * 2 + split_runs)

    def on_batch(r: int) -> None:  # two decodings of a batch of prompts done in round r
        tick(r + 1)
        tick(r + 1)

    # autoregressive first: the rounds stop on the tree's tokens/s over it — the speed-up whose
    # standard error the comparison reports — not on its inverse
    timed = timed_rounds(decoder, (empty, tree), groups, config=config, rounds=rounds,
                         min_seconds=min_seconds, target_se=target_se,
                         warmup_tokens=warmup_tokens, on_batch=on_batch)
    tree_rounds = [tuple(runs[1] for runs in rnd) for rnd in timed]
    ar_rounds = [tuple(runs[0] for runs in rnd) for rnd in timed]
    tree_prof = ar_prof = None
    if split:
        tree_split, ar_split = [], []
        for g in groups[:SPLIT_BATCHES]:
            t, a = decoder.decode_alongside((tree, empty), g, config=config, profile=True)
            tree_split.append(t.stats)
            ar_split.append(a.stats)
            tick(len(timed))
            tick(len(timed))
        tree_prof, ar_prof = combine(tree_split), combine(ar_split)
    return Comparison(tree, config, batch, tuple(tree_rounds), tuple(ar_rounds), tree_prof,
                      ar_prof, probe=decoder.verify.probe)


def race(model: PreTrainedModel, heads: Drafter, trees: Sequence[Tree], prompts:
         Sequence[Sequence[int]], *, config: DecodeConfig | None = None, batch: int = 1,
         rounds: int = 3, min_seconds: float = 0.0, target_se: float = 0.0) -> list[float]:
    """Each of ``trees`` against the first, head to head: every batch of prompts decoded with all
    of them, their steps interleaved, ``rounds`` times (and more until ``min_seconds`` were timed
    and the ratios' relative standard error was at most ``target_se``);
    each tree's steady tokens/s over the first's, the median over rounds (the first: 1.0).

    Which of a sweep's points measured fastest is partly which one the noise favoured: the best of
    several points measured with the same noise is, on average, measured high. Raced directly
    against each other, two trees meet the same moments, and their ratio is measured afresh.
    """
    config = config or DecodeConfig()
    timed = timed_rounds(Decoder(model, heads), trees, batches(prompts, batch), config=config,
                         rounds=rounds, min_seconds=min_seconds, target_se=target_se)
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


def check_timing(*, min_seconds: float, target_se: float) -> None:
    """Refuse a negative ``--min-seconds`` and a ``--target-se`` outside [0, 1)."""
    if min_seconds < 0:
        raise TreeoptError(f"--min-seconds must be ≥ 0, got {min_seconds}")
    if not 0 <= target_se < 1:
        raise TreeoptError(f"--target-se must be in [0, 1), got {target_se}")


def timed_rounds(decoder: Decoder, shapes: Sequence[Tree | DynamicSettings],
                 groups: Sequence[Sequence[Sequence[int]]], *, config: DecodeConfig,
                 rounds: int, min_seconds: float = 0.0, target_se: float = 0.0,
                 warmup_tokens: int = 8, on_batch: Callable[[int], None] | None = None,
                 ) -> list[list[list[BatchResult]]]:
    """Every batch of prompts (``groups``) decoded with every shape, their steps interleaved,
    after a warm-up: ``rounds`` rounds, and more (up to :data:`MAX_ROUNDS`) until every decode
    together was timed ``min_seconds`` and, with ``target_se``, until the rounds' ratio of each
    shape's throughput to the first's (:func:`round_ratios`) has a relative standard error of at
    most that; ``[round][batch][shape]``. A prompt's sampling stream is its index;
    ``on_batch(round)`` after each batch."""
    if rounds < 1:
        raise TreeoptError(f"--rounds must be ≥ 1, got {rounds}")
    check_timing(min_seconds=min_seconds, target_se=target_se)
    warm = replace(config, max_new_tokens=min(warmup_tokens, config.max_new_tokens))
    # warmed up as timed: alongside, each run in its own cache (compiled: its own static buffer)
    decoder.decode_alongside(shapes, groups[0], config=warm)
    out: list[list[list[BatchResult]]] = []
    timed = 0.0

    def short() -> bool:  # whether another round is wanted
        if len(out) < rounds:
            return True
        if len(out) >= MAX_ROUNDS:
            return False
        return timed < min_seconds or (
            target_se > 0 and max(relative_se(column) for column
                                  in list(zip(*round_ratios(out), strict=True))[1:]) > target_se)

    while short():
        rnd = []
        for i, group in enumerate(groups):
            size = len(group)
            runs = decoder.decode_alongside(shapes, group, config=config,
                                            streams=range(i * size, (i + 1) * size))
            rnd.append(runs)
            timed += sum(r.stats.seconds for r in runs)
            if on_batch is not None:
                on_batch(len(out))
        out.append(rnd)
    return out
