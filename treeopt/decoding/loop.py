"""Live decoding with a static tree on a Hugging Face causal LM and its draft heads, batched.

``b`` prompts decode together in one :class:`~treeopt.decoding.cache.SlotCache`. Each step
drafts every row's tree (:meth:`~treeopt.decoding.drafter.Drafter.draft`), verifies them in one
forward (:func:`~treeopt.decoding.tree_forward.verify_step`), accepts each row's longest passing
path (:mod:`treeopt.decoding.accept`), reads the accepted tokens back in the step's one host
sync, and moves each row's accepted keys and values down to the end of its prefix. Rows accept
different lengths, so their prefixes are ragged; the mask keeps each row to its own. A row that
reaches its budget or EOS stops accepting; the batch runs until every row has stopped.

An empty tree makes the same loop plain autoregressive decoding, the fair baseline. Tokens per
second are reported end to end (prefill included) and for the decode steps during which every
row was still running (the steady state a serving engine sees, which the cost model predicts).
The loop keeps no phase timers: with ``profile=True`` it synchronises around each phase and
reports where a step's time goes over the same steady steps (timing itself costs time, so
throughput comes from unprofiled runs). The steps after a batch's first row stops are left out
of both: in them the frontier sits at the longest row and every row's accepted keys move, so
they cost more than a steady step, and counting them would price a tree above what its
throughput pays.

Continuous batching (``batch`` below the number of prompts): the run has ``batch`` rows, and
before a step a row that has stopped takes the next waiting prompt, as a serving engine refills
a finished request's slot. The prompt is prefilled alone into the row's slots of the cache (the
row's old entries lie past its new length, where the mask hides them), its first token drawn
from its own sampling stream, and its drafter state takes the row's place
(:meth:`~treeopt.decoding.drafter.Drafter.take_row`), fed up to what a step's catch-up feeds
(:meth:`~treeopt.decoding.drafter.Drafter.prime`). Every prompt decodes exactly as it does alone.
The steady window then runs until a row stops with no prompt left to take; the refills' time
counts end to end but not in it (a step profile prices decode steps alone), so a batch-b
throughput no longer ends where the first of b static rows finishes, and no longer leaves out
the ends of continuations.

The tree is checked against the drafter (depth, ranks, dynamic drafting) where a run starts,
once per decode: the one place a tree meets the heads that draft it.

A :class:`TreeSource` in place of the tree chooses each step's tree as the run goes (an engine's
adaptive step controller, :class:`treeopt.adaptive.live.ChainSource`): before a step it gets the
step's :class:`~treeopt.adaptive.policies.RoundState` (the step's index in this run, the rows
still running and those of the step before), after it the running rows' accepted draft tokens
(the bonus token excluded). Every tree it may choose is checked once, where the run starts. An
empty tree in such a run is an autoregressive step that still feeds the drafter what was
accepted (its :meth:`~treeopt.decoding.drafter.Drafter.draft` of the root alone), so the next
step drafts as it would have.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from treeopt.adaptive.policies import RoundState
from treeopt.decoding.accept import Verdict, accept, accept_rows
from treeopt.decoding.cache import SlotCache
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.drafter import Drafter, LiveState
from treeopt.decoding.dynamic_drafting import RowPlan
from treeopt.decoding.models import check_context, model_device
from treeopt.decoding.plan import TreePlan, tree_plan
from treeopt.decoding.probe import verifier
from treeopt.decoding.row_products import pair_lone_rows
from treeopt.decoding.sampling import stream_keys
from treeopt.decoding.stats import DecodeResult, DecodeStats, StepSplit
from treeopt.decoding.tree_forward import verify_step
from treeopt.decoding.weight_layout import lay_out_for_cpu
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

CAPACITY_BUCKET = 256  # a static cache's capacity is a multiple of this

__all__ = ["BatchResult", "DecodeConfig", "Decoder", "TreeSource", "autoregressive", "decode",
           "generate"]


@dataclass(frozen=True)
class BatchResult:
    """The new tokens of every prompt (prompt excluded) and the batch's statistics."""

    tokens: tuple[tuple[int, ...], ...]
    stats: DecodeStats


class TreeSource(Protocol):
    """Each step's tree, chosen as a run goes: :meth:`tree` before the step, :meth:`verified`
    after it with the accepted draft tokens of the rows that ran it (in row order)."""

    @property
    def trees(self) -> tuple[Tree, ...]:
        """Every tree it may choose (checked against the drafter, and the run's cache sized for
        the largest, where a run starts)."""
        ...

    def tree(self, state: RoundState) -> Tree: ...

    def verified(self, state: RoundState, accepted: Sequence[int]) -> None: ...


Shape = Tree | DynamicSettings | TreeSource  # what a run decodes with


class TreeMismatch(TreeoptError):
    """A tree its drafter cannot draft: deeper than its heads, ranks beyond the vocabulary, or
    dynamic drafting without an EAGLE drafter (a caller that read the tree from a file adds
    the file's name)."""


def check_tree_for_heads(tree: Tree | DynamicSettings, heads: Drafter | None) -> None:
    """Raise a :class:`TreeMismatch` unless ``heads`` can draft ``tree`` (an empty tree needs no
    heads), or draft dynamically with ``tree``'s settings."""
    if isinstance(tree, DynamicSettings):
        if heads is None or not heads.kind.dynamic:
            what = heads.kind.title if heads is not None else "no drafter"
            raise TreeMismatch(f"dynamic trees need an EAGLE drafter (EAGLE-1/2 or EAGLE-3), "
                               f"not {what}")
        return
    if tree.size and heads is None:
        raise TreeMismatch("tree decoding needs draft heads")
    if heads is not None and tree.depth > heads.config.num_heads:
        raise TreeMismatch(f"the tree has depth {tree.depth} but there are only "
                           f"{heads.config.num_heads} heads")
    if heads is not None and heads.kind.chain and tree.max_rank > 0:
        raise TreeMismatch(f"{heads.kind.title.lower()} proposes one token per depth (a chain), "
                           f"but the tree uses rank {tree.max_rank}")
    if heads is not None and tree.size and tree.max_rank >= heads.config.vocab_size:
        raise TreeMismatch(f"the tree uses rank {tree.max_rank}, beyond the vocabulary")


class Decoder:
    """The live decoder of one model and its heads, checked once: each layer's attention kind,
    that treeopt's tree step gives the model's own logits past every window, and how its verify
    forward runs (:func:`~treeopt.decoding.probe.verifier`). :meth:`decode` then decodes
    any tree, or none.

    On the CPU the float32 linear weights of the model and the heads are first stored
    column-major, in place (the same values and shapes:
    :mod:`~treeopt.decoding.weight_layout`), which the few-row products of a step run much faster
    with."""

    def __init__(self, model: PreTrainedModel, heads: Drafter | None = None, *,
                 compile: bool = False) -> None:
        self.model, self.heads = model, heads
        self.device = model_device(model)
        lay_out_for_cpu(heads)  # the model's: in verifier()
        pair_lone_rows(heads)
        # compiled: (b, capacity, slot) → kv; runs decoded alongside each other use their own slot
        self._static_kv: dict[tuple[int, int, int], torch.Tensor] = {}
        with torch.inference_mode():
            self.verify = verifier(model, tree=True, compile=compile,
                                   features=heads.feature_layers if heads is not None else ())

    def cache(self, *, batch: int, capacity: int, slot: int = 0) -> SlotCache:
        """An empty cache for one run. Compiled steps write into one buffer per batch and
        capacity, allocated once and marked as a static address: a CUDA graph may then write into
        it in place (it would skip graphs for a mutated input otherwise), and no run re-records
        a graph for a new buffer."""
        with torch.inference_mode():  # as every run
            if not self.verify.static:
                return self.verify.cache(batch=batch, capacity=capacity)
            kv = self._static_kv.get((batch, capacity, slot))
            if kv is None:
                kv = self.verify.cache(batch=batch, capacity=capacity).kv
                torch._dynamo.mark_static_address(kv)
                self._static_kv[batch, capacity, slot] = kv
            kv.zero_()  # nothing of an earlier run stays
            return SlotCache(kv, static=True, widths=self.verify.shape.widths)

    def decode(self, tree: Shape, prompts: Sequence[Sequence[int]], *,
               config: DecodeConfig | None = None, profile: bool = False,
               streams: Sequence[int] | None = None, batch: int | None = None) -> BatchResult:
        """Decode every prompt with ``tree`` in one batch (an empty tree: autoregressive;
        :class:`~treeopt.model.dynamic_settings.DynamicSettings`: a tree drafted afresh every step;
        a :class:`TreeSource`: the tree it chooses, step by step).

        ``streams``: each prompt's sampling stream id (default 0 … n-1). Mode ``sample`` draws
        a row's tokens from (seed, stream, position) alone, so a prompt decoded with the same
        stream id emits the same tokens in any batch, with any tree.

        ``batch`` (fewer than the prompts): continuous batching — ``batch`` rows, and a row that
        finishes takes the next prompt (module docstring)."""
        with torch.inference_mode():
            return self._run(tree, prompts, config, profile=profile, streams=streams,
                             batch=batch).loop()

    def decode_alongside(self, shapes: Sequence[Shape],
                         prompts: Sequence[Sequence[int]], *, config: DecodeConfig | None = None,
                         profile: bool = False, streams: Sequence[int] | None = None,
                         batch: int | None = None) -> list[BatchResult]:
        """Decode ``prompts`` once with each of ``shapes`` (e.g. a tree and the empty tree), their
        steps interleaved: each next step is the run furthest behind in its token budget, so every
        run spreads over the same stretch of time, a few milliseconds apart. Each run counts only
        its own calls' time. A shared machine's speed drifts over tenths of a second to seconds:
        decoded one after the other, two runs meet different speeds; interleaved step by step,
        they meet the same, and the ratio of their throughputs holds still.

        The same tokens as :meth:`decode` of each shape alone (a run's state is its own).
        ``batch``: as :meth:`decode`'s."""
        return decode_alongside([(self, shape) for shape in shapes], prompts, config=config,
                                profile=profile, streams=streams, batch=batch)

    def _run(self, tree: Shape, prompts: Sequence[Sequence[int]],
             config: DecodeConfig | None, *, profile: bool,
             streams: Sequence[int] | None, slot: int = 0, batch: int | None = None) -> _Run:
        """A checked, ready run of ``tree`` over ``prompts`` (the prefill not yet done)."""
        config = config or DecodeConfig()
        source = None if isinstance(tree, (Tree, DynamicSettings)) else tree
        if source is not None:  # its largest tree sizes the run
            if not source.trees:
                raise TreeoptError("a tree source with no trees to choose from")
            for t in source.trees:
                check_tree_for_heads(t, self.heads)
            tree = max(source.trees, key=lambda t: t.num_tokens)
        check_tree_for_heads(tree, self.heads)
        if not prompts:
            raise TreeoptError("no prompts to decode")
        if any(len(p) == 0 for p in prompts):
            raise TreeoptError("a prompt is empty")
        longest = max(len(p) for p in prompts)
        shape = tree if isinstance(tree, DynamicSettings) else tree_plan(tree, str(self.device))
        check_context(self.model, longest + config.max_new_tokens + _tokens(shape),
                      what=f"a prompt of {longest} tokens plus {config.max_new_tokens} new")
        if streams is not None and len(streams) != len(prompts):
            raise TreeoptError(f"{len(streams)} sampling streams for {len(prompts)} prompts")
        rows = len(prompts) if batch is None else min(batch, len(prompts))
        if rows < 1:
            raise TreeoptError(f"batch size {batch}: at least 1")
        if rows < len(prompts) and self.verify.static:
            raise TreeoptError("continuous batching runs eager steps, not compiled ones")
        gen = torch.Generator(device=self.device).manual_seed(config.seed)
        ids = torch.tensor(list(range(len(prompts))) if streams is None else list(streams),
                           dtype=torch.long, device=self.device)
        return _Run(self, shape, config, gen, profile, prompts, stream_keys(config.seed, ids),
                    slot=slot, source=source, rows=rows)


def decode_alongside(runs: Sequence[tuple[Decoder, Shape]],
                     prompts: Sequence[Sequence[int]], *, config: DecodeConfig | None = None,
                     profile: bool = False, streams: Sequence[int] | None = None,
                     batch: int | None = None) -> list[BatchResult]:
    """:meth:`Decoder.decode_alongside` over runs of several decoders — e.g. a tree on a model
    in bfloat16 beside autoregressive decoding of the same model in float32: each (decoder,
    shape) decodes ``prompts`` once, the runs' steps interleaved, each timing its own calls."""
    config = config or DecodeConfig()
    with torch.inference_mode():
        started = [decoder._run(shape, prompts, config, profile=profile, streams=streams, slot=i,
                                batch=batch)
                   for i, (decoder, shape) in enumerate(runs)]
        for run in started:
            run.settle = True  # a step's device work is done, and timed, within that step
            run.begin()
        live = [r for r in started if r.running]
        while live:
            run = min(live, key=lambda r: r.progress)
            if not run.step():
                live.remove(run)
        return [run.result() for run in started]


@dataclass(frozen=True)
class RaceTotals:
    """One run's totals over the batches of :func:`race_in_batches`: the tokens and seconds of
    its steady windows, the accepted lengths of all its steps (sequence after sequence), and
    whether each of its outputs equals the reference run's (the last)."""

    decode_tokens: int
    decode_seconds: float
    accept_lengths: tuple[int, ...]
    same_as_reference: bool

    @property
    def tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0


def race_in_batches(runs: Sequence[tuple[Decoder, Shape]], prompts: Sequence[Sequence[int]],
                    *, batch: int, config: DecodeConfig,
                    continuous: bool = False) -> list[RaceTotals]:
    """:func:`decode_alongside` of ``runs`` over ``prompts`` in consecutive batches of
    ``batch`` (``continuous``: in one run of ``batch`` rows, a finished row taking the next
    prompt); per run its totals, the last run (e.g. plain decoding) the reference every output
    is compared with."""
    if batch < 1:
        raise TreeoptError(f"batch size {batch}: at least 1")
    totals = [RaceTotals(0, 0.0, (), True) for _ in runs]
    size = len(prompts) if continuous else batch
    for g in range(0, len(prompts), size):
        results = decode_alongside(runs, prompts[g: g + size], config=config, batch=batch)
        reference = results[-1].tokens
        totals = [RaceTotals(t.decode_tokens + r.stats.decode_tokens,
                             t.decode_seconds + r.stats.decode_seconds,
                             t.accept_lengths + r.stats.accept_lengths,
                             t.same_as_reference and r.tokens == reference)
                  for t, r in zip(totals, results, strict=True)]
    return totals


def _tokens(shape: TreePlan | DynamicSettings) -> int:
    """Tokens a step verifies."""
    return shape.draft_tokens if isinstance(shape, DynamicSettings) else shape.tree.num_tokens


def _drafts(shape: TreePlan | DynamicSettings) -> bool:
    """Whether a step drafts at all (an empty static tree: autoregressive decoding)."""
    return isinstance(shape, DynamicSettings) or shape.tree.size > 0


def decode(model: PreTrainedModel, heads: Drafter | None, tree: Shape,
           prompts: Sequence[Sequence[int]], *, config: DecodeConfig | None = None,
           profile: bool = False, streams: Sequence[int] | None = None,
           batch: int | None = None) -> BatchResult:
    """Decode every prompt with ``tree`` in one batch (an empty tree: autoregressive;
    ``batch``: continuously, in that many rows); one-off (a :class:`Decoder` checks the model
    once for many calls)."""
    drafts = not isinstance(tree, Tree) or tree.size > 0
    return Decoder(model, heads if drafts else None).decode(
        tree, prompts, config=config, profile=profile, streams=streams, batch=batch)


def generate(model: PreTrainedModel, heads: Drafter | None, tree: Tree,
             prompt_ids: Sequence[int], *, config: DecodeConfig | None = None,
             profile: bool = False) -> DecodeResult:
    """Decode one prompt with ``tree`` (an empty tree: autoregressive decoding)."""
    if not prompt_ids:
        raise TreeoptError("the prompt is empty")
    run = decode(model, heads, tree, [prompt_ids], config=config, profile=profile)
    return DecodeResult(tokens=run.tokens[0], stats=run.stats)


def autoregressive(model: PreTrainedModel, prompt_ids: Sequence[int], *,
                   config: DecodeConfig | None = None, profile: bool = False) -> DecodeResult:
    """Plain decoding through the same loop (an empty tree): the baseline for tokens/s."""
    return generate(model, None, Tree(()), prompt_ids, config=config, profile=profile)


class _Clock:
    """Phase times when profiling: a synchronised clock read at each phase boundary."""

    PHASES = ("draft", "verify", "bookkeeping")

    def __init__(self, device: torch.device, on: bool) -> None:
        self.device, self.on = device, on
        self.totals = [0.0, 0.0, 0.0]  # over the steps counted so far
        self.step = [0.0, 0.0, 0.0]  # the step under way
        self.steps = 0
        self.last = self.now()

    def now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def restart(self) -> None:
        """Phases count from here: what came before (setting up, the prefill) is no step's."""
        if self.on:
            self.last = self.now()

    def lap(self, phase: int) -> None:
        if self.on:
            t = self.now()
            self.step[phase] += t - self.last
            self.last = t

    def end_step(self, *, counted: bool) -> None:
        """The step's laps join the totals when ``counted`` (a steady step); the next begins."""
        if not self.on:  # unprofiled runs keep no phase times: nothing on their hot path
            return
        if counted:
            self.totals = [a + b for a, b in zip(self.totals, self.step, strict=True)]
            self.steps += 1
        self.step = [0.0, 0.0, 0.0]

    def split(self) -> StepSplit | None:
        return StepSplit(*self.totals, steps=self.steps) if self.on else None


class _Run:
    """One batch decoding: the device state (cache, lengths, roots, drafter state) and the host
    state (tokens emitted, budgets) of its rows. :meth:`begin` prefills, :meth:`step` runs one
    step while any row runs, :meth:`result` reads the outcome: :meth:`loop` does all three, and
    :meth:`Decoder.decode_alongside` steps several runs in turn."""

    def __init__(self, decoder: Decoder, plan: TreePlan | DynamicSettings, cfg: DecodeConfig,
                 gen: torch.Generator, profile: bool, prompts: Sequence[Sequence[int]],
                 keys: torch.Tensor, *, slot: int = 0, source: TreeSource | None = None,
                 rows: int | None = None) -> None:
        self.verify, self.heads, self.plan, self.cfg, self.gen = (
            decoder.verify, decoder.heads, plan, cfg, gen)
        self.source = source  # each step's tree (``plan``: its largest, which sizes the cache)
        self.offered = frozenset(source.trees) if source is not None else frozenset()
        self.previous: int | None = None  # (with a source) the rows that ran the step before
        self.streams = keys  # [n]: each prompt's sampling stream
        self.device = decoder.device
        self.clock = _Clock(self.device, profile)
        self.prompts = [list(p) for p in prompts]
        b, longest = rows or len(prompts), max(len(p) for p in prompts)
        self.owner = list(range(b))  # the prompt each row decodes
        self.waiting = list(range(b, len(prompts)))  # prompts no row has taken yet, in order
        self.keys = keys[:b].clone()  # [b]: each row's sampling stream
        self.drafts = (source is not None or _drafts(plan)) and self.heads is not None
        # a lookup drafter leaves nodes it had no candidate for as token -1 (see _draft)
        self.holes = self.drafts and self.heads.kind.lookup
        q = _tokens(plan)
        fed = plan.topk * (plan.steps - 1) if isinstance(plan, DynamicSettings) else 0
        capacity = longest + cfg.max_new_tokens + 2 * q + fed + 1  # + a scratch slot
        if self.verify.static:  # compiled steps: one graph per bucket of capacity, not per prompt
            capacity = -(-capacity // CAPACITY_BUCKET) * CAPACITY_BUCKET
        self.capacity = capacity
        self.cache = decoder.cache(batch=b, capacity=capacity, slot=slot)
        self.state: LiveState = (self.heads.start(batch=b, capacity=capacity)
                                 if self.heads is not None else None)
        self.scratch = capacity - 1
        self.out: list[list[int]] = [[] for _ in prompts]  # per prompt
        self.steps: list[list[int]] = [[] for _ in prompts]
        self.active = [True] * b  # per row
        self.settle = False  # whether each call waits for its device work (decode_alongside)

    def loop(self) -> BatchResult:
        """Decode to the end, step after step."""
        self.begin()
        while self.step():
            pass
        return self.result()

    def begin(self) -> None:
        """The prefill: every prompt's first token and the drafter's first features."""
        entered = self.clock.now()
        self.root, self.h, self.lengths = self._prefill()
        self.clock.restart()
        self.lens = [len(self.prompts[p]) for p in self.owner]
        self.frontier = max(self.lens)
        self.steady_tokens = self.steady_row_steps = self.iterations = 0
        self.busy = self._settled() - entered  # seconds spent in this run's own calls
        self.prefill_s = self.steady_seconds = self.busy
        self.refill_s = self.steady_refill_s = 0.0  # prefills of rows that took a new prompt

    @property
    def running(self) -> bool:
        """Whether any row still decodes, or a prompt still waits for a row."""
        return any(self.active) or bool(self.waiting)

    def step(self) -> bool:
        """One decode step of every running row; whether any row still runs.

        Time is counted per call (``busy``), so two runs whose steps alternate
        (:meth:`Decoder.decode_alongside`) each count their own steps alone; run by itself, the
        sum is the wall time."""
        if not self.running:
            return False
        if self.waiting and not all(self.active):  # continuous batching: not a step's time
            entered = time.perf_counter()
            self._refill()
            spent = self._settled() - entered
            self.busy += spent
            self.refill_s += spent
        self.clock.restart()  # (profiled) a step's phases hold nothing that ran between steps
        entered = time.perf_counter()
        self.iterations += 1
        running = all(self.active)
        chosen = (RoundState(self.iterations - 1, sum(self.active), self.previous)
                  if self.source is not None else None)
        tokens, plan = self._draft(self.h, self.root, self._shape(chosen))
        self.clock.lap(0)
        verified = tokens.clamp_min(0) if self.holes else tokens  # -1: no candidate
        logits, hidden = verify_step(self.verify, verified, plan, cache=self.cache,
                                     lengths=self.lengths, frontier=self.frontier)
        self.clock.lap(1)
        positions = self.lengths[:, None] + plan.offsets
        verdict = (accept_rows(plan, tokens, logits, self.cfg, positions=positions,
                               keys=self.keys) if isinstance(plan, RowPlan) else
                   accept(plan, tokens, logits, self.cfg, self.gen, positions=positions,
                          keys=self.keys))
        accepted, in_place = self._read(verdict, tokens, self.lens, self.frontier)  # host sync
        if chosen is not None:  # the rows that ran it: those that accepted (the root, at least)
            self.source.verified(chosen, [n - 1 for n in accepted if n])
            self.previous = chosen.batch
        self.lengths, self.lens = self._move(verdict, plan.steps, accepted, in_place,
                                             self.lengths, self.lens, self.frontier)
        self.frontier = max(self.lens)
        if running:  # a steady step: its time so far (the features below belong to the next)
            self.steady_seconds = self.busy + time.perf_counter() - entered
            self.steady_refill_s = self.refill_s
            self.steady_tokens += sum(accepted)
            self.steady_row_steps += len(accepted)
        self.clock.lap(2)
        self.clock.end_step(counted=running)
        self.root = verdict.next_root
        if any(self.active):
            count = (verdict.length if running
                     else torch.tensor(accepted, device=self.device))  # stopped rows: 0
            self.h, self.state = self._features(hidden, tokens, verdict.path, count, self.root)
            self.clock.lap(0)  # the drafter's features for the next step: that step's drafting
        self.busy += self._settled() - entered
        return self.running

    def _settled(self) -> float:
        """The time now; with ``settle`` (runs stepped in turn), once the device has finished
        what this run queued, so none of it runs, unseen, inside another run's step."""
        if self.settle and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    @property
    def progress(self) -> float:
        """The share of the batch's token budget emitted so far."""
        return sum(len(o) for o in self.out) / (len(self.out) * self.cfg.max_new_tokens)

    def result(self) -> BatchResult:
        self.clock.now()  # on CUDA: what the last step queued is done
        split = self.clock.split()
        tokens_out = tuple(tuple(self._truncate(o)) for o in self.out)
        stats = DecodeStats(
            tokens=sum(len(t) for t in tokens_out),
            accept_lengths=tuple(x for s in self.steps for x in s), seconds=self.busy,
            decode_tokens=self.steady_tokens,
            decode_seconds=self.steady_seconds - self.prefill_s - self.steady_refill_s,
            iterations=self.iterations, split=split, decode_row_steps=self.steady_row_steps,
            runs=tuple((sum(s), len(s)) for s in self.steps) if len(self.steps) > 1 else ())
        return BatchResult(tokens_out, stats)

    def _shape(self, chosen: RoundState | None) -> TreePlan | DynamicSettings:
        """The step's plan: the run's own, or the tree its source chooses."""
        if self.source is None or chosen is None:
            return self.plan
        tree = self.source.tree(chosen)
        if tree not in self.offered:
            raise TreeoptError(f"round {chosen.round}: the tree source chose a tree it does not "
                               f"offer in its trees ({list(map(list, tree.paths))})")
        return tree_plan(tree, str(self.device))

    def _draft(self, h: torch.Tensor, root: torch.Tensor, shape: TreePlan | DynamicSettings,
               ) -> tuple[torch.Tensor, TreePlan | RowPlan]:
        """The step's tree tokens ``[b, q]`` (root first) and the plan they are verified by; a
        token -1 is a node the drafter had no candidate for (verified as token 0, never
        accepted: no model token is -1)."""
        if not self.drafts:
            return root[:, None], shape
        if isinstance(shape, DynamicSettings):
            return self.heads.draft_dynamic(shape, h, root, self.state)
        return self.heads.draft(shape, h, root, self.state), shape

    def _prefill(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Every prompt at once, right-padded; returns the roots, the features the heads read
        and the rows' lengths."""
        prompts = [self.prompts[p] for p in self.owner]
        b, longest = len(prompts), max(len(p) for p in prompts)
        ids = torch.zeros(b, longest, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, : len(p)] = torch.tensor(p)
        ids = ids.to(self.device)
        lengths = torch.tensor([len(p) for p in prompts], device=self.device)
        logits, hidden = self.verify.prefill(ids, lengths, cache=self.cache)
        rows = torch.arange(b, device=self.device)
        first = accept(tree_plan(Tree(()), str(self.device)), ids[:, :1],
                       logits[rows, lengths - 1][:, None], self.cfg, self.gen,
                       positions=(lengths - 1)[:, None], keys=self.keys).next_root
        for i, token in enumerate(first.tolist()):
            self.out[self.owner[i]].append(token)
            self.active[i] = not self._finished(i, [token])
        order = torch.arange(longest, device=self.device)[None].expand(b, -1)
        h, self.state = self._features(hidden, ids, order, lengths, first)
        return first, h, lengths

    def _features(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                  count: torch.Tensor, next_root: torch.Tensor) -> tuple[torch.Tensor, LiveState]:
        """The features the drafter reads after the tokens just accepted (``tokens[:, index]``,
        ``count`` of them per row, then ``next_root``)."""
        if not self.drafts:
            return hidden[:, -1:], None
        return self.heads.advance(hidden, tokens, index, count, next_root, self.state)

    def _read(self, verdict: Verdict, tokens: torch.Tensor, lens: list[int],
              frontier: int) -> tuple[list[int], bool]:
        """Bring the accepted tokens to the host (the one sync of a step) and record them for
        the running rows. Returns how many each row accepted (0 for stopped rows) and whether
        every accepted path already sits where it belongs (then nothing needs to move)."""
        path_tokens = tokens.gather(1, verdict.path)  # [b, depth+1]
        packed = torch.cat([verdict.length[:, None], verdict.path, path_tokens,
                            verdict.next_root[:, None]], dim=1).tolist()
        width = verdict.path.shape[1]
        accepted, in_place = [], True
        for i, row in enumerate(packed):
            n = row[0] if self.active[i] else 0
            accepted.append(n)
            if not n:
                continue
            path = row[1: 1 + n]
            in_place &= lens[i] == frontier and path == list(range(n))
            new = [*row[2 + width: 1 + width + n], row[-1]]
            self.out[self.owner[i]].extend(new)
            self.steps[self.owner[i]].append(n)
            self.active[i] = not self._finished(i, new)
        return accepted, in_place

    def _move(self, verdict: Verdict, steps: torch.Tensor, accepted: list[int], in_place: bool,
              lengths: torch.Tensor, lens: list[int], frontier: int,
              ) -> tuple[torch.Tensor, list[int]]:
        """Move each row's accepted keys and values to the end of its prefix."""
        if not in_place:
            n = torch.tensor(accepted, device=self.device)
            valid = steps[None] < n[:, None]  # [b, depth+1]
            source = torch.where(valid, frontier + verdict.path, self.scratch)
            target = torch.where(valid, lengths[:, None] + steps, self.scratch)
            self.cache.move(source, target)
            return lengths + n, [a + b for a, b in zip(lens, accepted, strict=True)]
        if any(accepted):
            lengths = lengths + torch.tensor(accepted, device=self.device)
        return lengths, [a + b for a, b in zip(lens, accepted, strict=True)]

    def _refill(self) -> None:
        """Each stopped row takes the next waiting prompt (another, if that one stops at its
        first token)."""
        self.root, self.lengths = self.root.clone(), self.lengths.clone()  # the step's own
        if self.drafts:
            self.h = self.h.clone()
        for row, active in enumerate(self.active):
            while not active and self.waiting:
                active = self._take(row, self.waiting.pop(0))
        self.frontier = max(self.lens)

    def _take(self, row: int, p: int) -> bool:
        """Prompt ``p`` into stopped row ``row``: its prefill into the row's slots of the cache,
        its first token, and its drafter state in place of the row's (fed up to a step's
        catch-up, :meth:`~treeopt.decoding.drafter.Drafter.prime`). Whether the row runs."""
        prompt = self.prompts[p]
        ids = torch.tensor([prompt], device=self.device)
        lengths = torch.tensor([len(prompt)], device=self.device)
        view = SlotCache(self.cache.kv[:, :, row: row + 1], widths=self.cache.widths)
        logits, hidden = self.verify.prefill(ids, lengths, cache=view)
        key = self.streams[p: p + 1]
        first = accept(tree_plan(Tree(()), str(self.device)), ids[:, :1],
                       logits[:, -1:], self.cfg, self.gen, positions=(lengths - 1)[:, None],
                       keys=key).next_root
        self.owner[row], self.keys[row], self.root[row] = p, key[0], first[0]
        self.lengths[row], self.lens[row] = len(prompt), len(prompt)
        if self.drafts:
            new = self.heads.start(batch=1, capacity=self.capacity)
            order = torch.arange(len(prompt), device=self.device)[None]
            h, new = self.heads.advance(hidden, ids, order, lengths, first, new)
            self.heads.prime(new)
            self.state = self.heads.take_row(self.state, row, new)
            self.h[row] = h[0]
        token = int(first[0])
        self.out[p].append(token)
        self.active[row] = not self._finished(row, [token])
        return self.active[row]

    def _finished(self, i: int, new: list[int]) -> bool:
        """Row i has its prompt's budget of tokens, or just emitted EOS."""
        return len(self.out[self.owner[i]]) >= self.cfg.max_new_tokens or (
            self.cfg.eos_token_id is not None and self.cfg.eos_token_id in new)

    def _truncate(self, out: list[int]) -> list[int]:
        out = out[: self.cfg.max_new_tokens]
        if self.cfg.eos_token_id is not None and self.cfg.eos_token_id in out:
            out = out[: out.index(self.cfg.eos_token_id) + 1]
        return out
