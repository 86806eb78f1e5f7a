"""Live decoding with a tree on a Hugging Face causal LM and its draft heads, batched: the
:class:`Decoder` of one model, and the ways to run it (:func:`decode`, :func:`generate`,
:func:`autoregressive`, :func:`decode_alongside`, :func:`race_in_batches`).

``b`` prompts decode together in one :class:`~treeopt.decoding.cache.SlotCache`, step by step
(:class:`~treeopt.decoding.batch_run.BatchRun`): each step drafts every row's tree, verifies them
in one forward, accepts each row's longest passing path and moves its accepted keys and values
down to the end of its prefix (:mod:`~treeopt.decoding.prefixes`). A row that reaches its budget
or EOS stops accepting; the batch runs until every row has stopped, or, with ``batch`` below the
number of prompts, a stopped row takes the next waiting prompt (:mod:`~treeopt.decoding.
batching`). Every prompt decodes exactly as it does alone.

What a step verifies comes from a :mod:`~treeopt.decoding.tree_sources` part: a static tree (an
empty tree makes the same loop plain autoregressive decoding, the fair baseline), a tree drafted
afresh every step (:class:`~treeopt.model.dynamic_settings.DynamicSettings`), or a
:class:`TreeSource` that chooses each step's tree as the run goes.

Tokens per second are reported end to end (prefill included) and for the decode steps during
which every row was still running, the steady state a serving engine sees; with
``profile=True`` a run also reports where a step's time goes (:mod:`~treeopt.decoding.clocks`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from treeopt.decoding.batch_run import BatchResult, BatchRun
from treeopt.decoding.batching import ContinuousBatch, StaticBatch
from treeopt.decoding.cache import SlotCache
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.drafter import Drafter
from treeopt.decoding.models import check_context, model_device
from treeopt.decoding.prefixes import run_capacity
from treeopt.decoding.probe import prepare_cpu_products, verifier
from treeopt.decoding.sampling import stream_keys
from treeopt.decoding.stats import DecodeResult
from treeopt.decoding.tree_sources import Shape, TreeMismatch, TreeSource, step_trees
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["BatchResult", "DecodeConfig", "Decoder", "TreeMismatch", "TreeSource",
           "autoregressive", "decode", "decode_alongside", "generate", "race_in_batches"]


class Decoder:
    """The live decoder of one model and its heads, checked once: each layer's attention kind,
    that treeopt's tree step gives the model's own logits past every window, and how its verify
    forward runs (:func:`~treeopt.decoding.probe.verifier`). :meth:`decode` then decodes
    any tree, or none.

    On the CPU the float32 linear weights of the model and the heads are first stored
    column-major, in place (the same values and shapes:
    :mod:`~treeopt.decoding.weight_layout`), which a single row's product runs much faster with,
    and their products of 2 to 32 rows run on weights packed for oneDNN
    (:mod:`~treeopt.decoding.packed_linear`)."""

    def __init__(self, model: PreTrainedModel, heads: Drafter | None = None, *,
                 compile: bool = False) -> None:
        self.model, self.heads = model, heads
        self.device = model_device(model)
        prepare_cpu_products(heads)  # the model's: in verifier()
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
        finishes takes the next prompt (:mod:`~treeopt.decoding.batching`)."""
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
             streams: Sequence[int] | None, slot: int = 0, batch: int | None = None,
             settle: bool = False) -> BatchRun:
        """A checked, ready run of ``tree`` over ``prompts`` (the prefill not yet done);
        ``settle``: its calls' times end once the device is done (runs stepped in turn)."""
        config = config or DecodeConfig()
        trees = step_trees(tree, self.heads, str(self.device))
        if not prompts:
            raise TreeoptError("no prompts to decode")
        if any(len(p) == 0 for p in prompts):
            raise TreeoptError("a prompt is empty")
        longest = max(len(p) for p in prompts)
        check_context(self.model, longest + config.max_new_tokens + trees.tokens,
                      what=f"a prompt of {longest} tokens plus {config.max_new_tokens} new")
        if streams is not None and len(streams) != len(prompts):
            raise TreeoptError(f"{len(streams)} sampling streams for {len(prompts)} prompts")
        rows = len(prompts) if batch is None else min(batch, len(prompts))
        if rows < 1:
            raise TreeoptError(f"batch size {batch}: at least 1")
        if rows < len(prompts) and self.verify.static:
            raise TreeoptError("continuous batching runs eager steps, not compiled ones")
        if config.drafted_only and self.verify.static:
            raise TreeoptError("drafted-only steps vary in size, which compiled steps do not: "
                               "decode them eagerly")
        gen = torch.Generator(device=self.device).manual_seed(config.seed)
        ids = torch.tensor(list(range(len(prompts))) if streams is None else list(streams),
                           dtype=torch.long, device=self.device)
        capacity = run_capacity(longest=longest, new_tokens=config.max_new_tokens,
                                tokens=trees.tokens, fed=trees.fed, static=self.verify.static)
        batching = (ContinuousBatch(range(rows, len(prompts))) if rows < len(prompts)
                    else StaticBatch())
        return BatchRun(self.verify, self.heads, trees, batching,
                        self.cache(batch=rows, capacity=capacity, slot=slot), config, gen,
                        prompts, stream_keys(config.seed, ids), rows=rows, profile=profile,
                        settle=settle)


def decode_alongside(runs: Sequence[tuple[Decoder, Shape]],
                     prompts: Sequence[Sequence[int]], *, config: DecodeConfig | None = None,
                     profile: bool = False, streams: Sequence[int] | None = None,
                     batch: int | None = None,
                     drafted_runs: Collection[int] = ()) -> list[BatchResult]:
    """:meth:`Decoder.decode_alongside` over runs of several decoders — e.g. a tree on a model
    in bfloat16 beside autoregressive decoding of the same model in float32: each (decoder,
    shape) decodes ``prompts`` once, the runs' steps interleaved, each timing its own calls.
    ``drafted_runs``: the runs (by index) whose lookup chains verify only what was drafted
    (:attr:`~treeopt.decoding.config.DecodeConfig.drafted_only`)."""
    config = config or DecodeConfig()
    with torch.inference_mode():
        started = [decoder._run(shape, prompts, replace(config, drafted_only=True)
                                if i in drafted_runs else config, profile=profile,
                                streams=streams, slot=i, batch=batch,
                                settle=True)  # each step's device work timed in it
                   for i, (decoder, shape) in enumerate(runs)]
        for run in started:
            run.begin()
        live = [r for r in started if r.running]
        while live:
            run = min(live, key=lambda r: r.progress)
            if not run.step():
                live.remove(run)
        return [run.result() for run in started]


@dataclass(frozen=True)
class RaceTotals:
    """One run's totals over the batches of :func:`race_in_batches`: the tokens, seconds and
    row steps of its steady windows, the accepted lengths of all its steps (sequence after
    sequence), whether each of its outputs equals the reference run's (the last), and the
    tokens each prompt's output holds, in the prompts' order (what a walk of their trace
    follows)."""

    decode_tokens: int
    decode_seconds: float
    accept_lengths: tuple[int, ...]
    same_as_reference: bool
    emitted: tuple[int, ...] = ()
    decode_row_steps: int = 0

    @property
    def tokens_per_s(self) -> float:
        return self.decode_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0

    @property
    def steady_accept_length(self) -> float:
        """Accepted tokens per row and step in the steady windows: the E[L] :attr:`tokens_per_s`
        counts (a window ends where a row stops with no prompt left to take, so with as many
        prompts as rows it holds only each continuation's first steps)."""
        return self.decode_tokens / self.decode_row_steps if self.decode_row_steps else 0.0


def race_in_batches(runs: Sequence[tuple[Decoder, Shape]], prompts: Sequence[Sequence[int]],
                    *, batch: int, config: DecodeConfig, continuous: bool = False,
                    drafted_runs: Collection[int] = ()) -> list[RaceTotals]:
    """:func:`decode_alongside` of ``runs`` over ``prompts`` in consecutive batches of
    ``batch`` (``continuous``: in one run of ``batch`` rows, a finished row taking the next
    prompt; ``drafted_runs``: as there); per run its totals, the last run (e.g. plain
    decoding) the reference every output is compared with."""
    if batch < 1:
        raise TreeoptError(f"batch size {batch}: at least 1")
    totals = [RaceTotals(0, 0.0, (), True) for _ in runs]
    size = len(prompts) if continuous else batch
    for g in range(0, len(prompts), size):
        results = decode_alongside(runs, prompts[g: g + size], config=config, batch=batch,
                                   drafted_runs=drafted_runs)
        reference = results[-1].tokens
        totals = [RaceTotals(t.decode_tokens + r.stats.decode_tokens,
                             t.decode_seconds + r.stats.decode_seconds,
                             t.accept_lengths + r.stats.accept_lengths,
                             t.same_as_reference and r.tokens == reference,
                             t.emitted + tuple(len(out) for out in r.tokens),
                             t.decode_row_steps + r.stats.decode_row_steps)
                  for t, r in zip(totals, results, strict=True)]
    return totals


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
