"""Verify a tree by decoding for real: measured acceptance and tokens/s beside the prediction.

Tree and autoregressive decoding are compared by :func:`treeopt.decoding.compare.compare`. Under
greedy verification "lossless" means the tree's output equals the model's own greedy
``generate`` token for token (:mod:`treeopt.decoding.hf_generate`), and treeopt's autoregressive
loop is held to the same; under sampling, the tree's output equals treeopt's plain sampling with
the same seed. Beside them, the support probe's largest logit difference between treeopt's tree
step and the model's own forward, past every sliding window and chunk. A rank trace, when given,
predicts the mean accepted length the measurement is compared with: the per-step walk where the
trace records its sequences, the position-weighted E[L] beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from treeopt.decoding.compare import Comparison, compare
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.divergence import Divergence, first_divergence
from treeopt.decoding.drafter import Drafter
from treeopt.decoding.hf_generate import check_comparison
from treeopt.decoding.loop import TreeMismatch
from treeopt.decoding.models import attention_of
from treeopt.documents.measure import ONCE, Measurement
from treeopt.documents.verify_report import VERIFY_FORMAT, VerifyReport
from treeopt.errors import TreeoptError
from treeopt.model.runs import as_run, as_runs
from treeopt.model.simulation import Simulation, simulate, step_walk, steps_inside
from treeopt.model.trace import RankTrace, of_sequences, prompt_digest
from treeopt.model.tree import Tree

__all__ = ["VERIFY_FORMAT", "Verification", "VerifyReport", "check_tree_for", "verify"]


def check_tree_for(tree: Tree, *, trace: RankTrace | None = None, source: str = "tree") -> None:
    """Raise when the tree is empty, or deeper than the trace's heads or uses ranks beyond its
    recorded top-k (the drafter's own depth is the decoder's to check)."""
    if tree.size == 0:
        raise TreeoptError(f"{source}: the tree is empty")
    if trace is not None:
        if tree.depth > trace.heads:
            raise TreeoptError(f"{source}: the tree has depth {tree.depth} but the trace "
                               f"records only {trace.heads} heads")
        if tree.max_rank >= trace.top_k:
            raise TreeoptError(f"{source}: the tree uses rank {tree.max_rank}, beyond the "
                               f"trace's recorded top-{trace.top_k}")


def check_trace_for(trace: RankTrace, heads: Drafter) -> None:
    """Raise when ``trace`` was recorded with another kind of drafter."""
    if trace.head_kind not in (None, heads.config.kind):
        raise TreeoptError(f"the trace was recorded with a {trace.head_kind} drafter, this one "
                           f"is {heads.config.kind}")


@dataclass(frozen=True)
class Verification:
    """What one verify run decodes and how, checked when made, before any model loads
    (:func:`check_tree_for`; ``source`` names the tree in messages). ``sample_prompts``: the
    prompts are a population, taken batch by batch until ``measure`` is met
    (:func:`~treeopt.decoding.compare.compare`); otherwise every prompt, in rounds.
    ``continuous``: every prompt in one run of ``batch`` rows, a finished row taking the next
    (not with ``sample_prompts`` or ``compile``). ``trace`` predicts E[L]; ``held_out``, a trace
    recorded on the prompts decoded, is the one whose walk ``inside_trace`` sets beside the live
    steps (default: ``trace``, taken to be recorded on them)."""

    tree: Tree
    config: DecodeConfig = field(default_factory=DecodeConfig)
    trace: RankTrace | None = None
    held_out: RankTrace | None = None
    batch: int = 1
    measure: Measurement = ONCE
    sample_prompts: bool = False
    compile: bool = False
    source: str = "tree"
    continuous: bool = False

    def __post_init__(self) -> None:
        check_tree_for(self.tree, trace=self.trace, source=self.source)
        if self.held_out is not None:
            check_tree_for(self.tree, trace=self.held_out, source=self.source)
        if self.continuous and (self.sample_prompts or self.compile):
            raise TreeoptError("continuous batching decodes every prompt in one run of eager "
                               "steps: give a number of prompts, and no compiled steps")


def verify(model: torch.nn.Module, heads: Drafter, run: Verification,
           prompts: Sequence[Sequence[int]], *, eos_token_id: int | None = None,
           meta: dict[str, Any] | None = None,
           progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Decode the prompts with ``run``'s tree and autoregressively, ``batch`` at a time, for as
    long as its measurement says on the speed-up, then a profiled pass for the phase times
    (``eos_token_id``, when given: the tokenizer's end of sequence, where a row stops); the
    report, with ``meta`` (where it ran: :data:`~treeopt.documents.verify_report.RUN_KEYS`) and the
    model's attention implementation."""
    tree, trace = run.tree, run.trace
    config = (run.config if eos_token_id is None
              else replace(run.config, eos_token_id=eos_token_id))
    for t in (trace, run.held_out):
        if t is not None:
            check_trace_for(t, heads)
    try:
        result = compare(model, heads, tree, prompts, config=config, batch=run.batch,
                         measure=run.measure, sample_prompts=run.sample_prompts, split=True,
                         compile=run.compile, continuous=run.continuous, progress=progress)
    except TreeMismatch as exc:  # the decoder checks the tree against the drafter, once
        raise TreeMismatch(f"{run.source}: {exc}") from None
    doc = result.to_dict()
    probe = result.probe  # the decoder's, run before it decoded anything
    check = check_comparison(model, prompts, result)
    divergences = None
    if check is not None:  # greedy
        lossless = check.tree_equals_generate and not result.mismatched
        if result.mismatched:
            divergences = tuple(d.to_json() for d in parted(model, prompts, result))
    else:
        lossless = result.lossless  # sample: per seed; typical: None
    return VerifyReport(
        tree, heads.config.kind, config.mode, len(result.tree_outputs), config.max_new_tokens,
        run.batch, doc["rounds"], doc["tree_decoding"], doc["autoregressive"], result.speedup,
        result.speedup_spread, result.speedup_se, tuple(doc["round_speedups"]),
        doc["end_to_end_speedup"],
        {"prefix_tokens": probe.prefix, "max_abs_hidden_diff": probe.max_abs_diff,
         "tolerance": probe.tolerance}, lossless,
        mismatched_prompts=(tuple(result.mismatched) if "mismatched_prompts" in doc else None),
        sampled_batches=doc.get("sampled_batches"),
        model_generate=check.to_dict() if check is not None else None,
        predicted=(prediction(tree, as_run(trace, config.max_new_tokens),
                              result.tree_stats.mean_accept_length,
                              result.tree_stats.sequence_accept_lengths,
                              [len(t) for t in result.tree_outputs], prompts,
                              held_out=(as_run(run.held_out, config.max_new_tokens)
                                        if run.held_out is not None else None),
                              served_as_ranked=served_as_ranked(heads, run))
                   if trace is not None else None),  # over the positions the run starts steps
        # at: the prefill emits the first token, so the last step starts before the N-th
        run={**(meta or {}), "attention": attention_of(model),
             **({"drafted_only": True} if config.drafted_only else {})},
        batching="continuous" if run.continuous else "static", divergences=divergences)


def served_as_ranked(heads: Drafter, run: Verification) -> bool:
    """Whether ``run`` meets the requests its trace's ranks met: always, but for a drafter that
    drafts from earlier requests' outputs (suffix decoding), which calibration ranks one after
    another through one cache; live, only one row serving the prompts in turn does the same
    (continuous batching of one row). Static runs each start from the drafter's history."""
    return not heads.kind.request_cache or (run.continuous and run.batch == 1)


SERVED_OTHERWISE = ("the trace ranked each prompt after the ones before it, and these runs each "
                    "started from the drafter's history: continuous batching in one row serves "
                    "them as it ranked them")


def _sequences_of(prompts: Sequence[Sequence[int]], digests: Sequence[str]) -> list[int | None]:
    """Each prompt's sequence in a trace that records ``digests`` (one per sequence, in the
    trace's order: a merged run's shards keep theirs): the first not taken yet, None where the
    trace holds none.

    >>> from treeopt.model.trace import prompt_digest as d
    >>> _sequences_of([[1], [2], [1], [3]], [d([2]), d([1]), d([1])])
    [1, 0, 2, None]
    """
    free: dict[str, list[int]] = {}
    for i, digest in enumerate(digests):
        free.setdefault(digest, []).append(i)
    return [free[k].pop(0) if free.get(k := prompt_digest(p)) else None for p in prompts]


def parted(model: torch.nn.Module, prompts: Sequence[Sequence[int]], result: Comparison, *,
           most: int = 16) -> list[Divergence]:
    """Where each of the first ``most`` prompts whose tree output differs from the
    autoregressive one parted from it, with the model's own logits of both tokens there."""
    found = [first_divergence(model, prompts[i], result.autoregressive_outputs[i],
                              result.tree_outputs[i], index=i)
             for i in result.mismatched[:most]]
    return [d for d in found if d is not None]


def prediction(tree: Tree, trace: RankTrace, measured: float,
               sequences: Sequence[Sequence[int]] = (),
               emitted: Sequence[int] = (), prompts: Sequence[Sequence[int]] = (), *,
               held_out: RankTrace | None = None, served_as_ranked: bool = True,
               ) -> dict[str, Any]:
    """What ``trace`` predicts for the mean accepted length a live run ``measured``: the per-step
    walk where the trace records its sequences (``acceptance``: ``per step``; ``steps``: how
    many it takes), with the position-weighted E[L] beside it
    (``position_weighted_mean_accept_length``, ``position_weighted_stderr``,
    ``position_weighted_relative_difference``); else the position-weighted E[L] alone.

    ``sequences``: the live run's accepted lengths, step by step, of each prompt in order, and
    ``emitted`` the tokens each prompt's output holds (one per sequence). When the trace
    records its sequences and holds at least as many, ``inside_trace`` compares the walk of its
    first ones, each as its live run kept it (:func:`~treeopt.model.runs.as_runs`),
    with the live steps that start inside their positions: the steps that walk takes, if the
    trace was recorded on these prompts; ``held_out``, when given, is the trace that was (a
    calibration trace predicts, the held-out one is walked inside). ``prompts``: the prompts
    decoded: where the trace records its prompts' digests, their own sequences are walked,
    wherever the trace holds them (``prompts_match``; a trace without them is not walked as
    theirs, a trace without digests is read in order). ``served_as_ranked`` false (a drafter
    reading earlier requests, decoded otherwise than calibration ranked them): the walk stands
    with ``note`` saying why it may differ. A trace calibrated
    with the run's budget and EOS holds
    every step (a trace made before treeopt recorded the positions a run visits stops short of
    each continuation's end by the drafter's depth).
    """
    weighted = simulate(tree, trace)
    base = {"trace_positions": trace.positions, "measured": measured}
    if step_walk(tree, trace) is None:
        return {"acceptance": "position-weighted", **_against(weighted, measured), **base}
    walk = simulate(tree, trace, per_step=True)
    out = {"acceptance": "per step", **_against(walk, measured), "steps": walk.count, **base,
           **{f"position_weighted_{k}": v for k, v in _against(weighted, measured).items()}}
    inside = _inside_trace(tree, held_out if held_out is not None else trace, sequences,
                           emitted, prompts)
    if inside is not None:
        if not served_as_ranked and inside.get("prompts_match") is not False:
            inside = {**inside, "served_as_ranked": False, "note": SERVED_OTHERWISE}
        out["inside_trace"] = inside
    return out


def _against(sim: Simulation, measured: float) -> dict[str, float]:
    """A simulated mean accepted length, its standard error, and how far ``measured`` is off."""
    mean = float(sim.mean_accept_length)
    return {"mean_accept_length": mean, "stderr": float(sim.stderr),
            "relative_difference": (measured - mean) / mean}


def _inside_trace(tree: Tree, trace: RankTrace, sequences: Sequence[Sequence[int]],
                  emitted: Sequence[int],
                  prompts: Sequence[Sequence[int]] = ()) -> dict[str, Any] | None:
    """The walk of the trace's first sequences beside the live steps inside their positions
    (None without as many sequences in the trace, or no live step inside it); where the trace
    records its prompts' digests, the sequences of ``prompts`` wherever they are, and no walk
    where one is missing (``prompts_match`` False)."""
    counts = trace.meta["sequence_positions"]
    n = len(sequences)
    if not 0 < n <= len(counts):
        return None
    match = None
    if trace.prompt_digests is not None and len(prompts) >= n:
        found = _sequences_of(prompts[:n], trace.prompt_digests)
        missing = sum(i is None for i in found)
        if missing:
            return {"sequences": n, "prompts_match": False,
                    "note": f"{missing} of the {n} prompts decoded are not in the trace: no walk "
                            "inside it"}
        trace, match = of_sequences(trace, [i for i in found if i is not None]), True
    runs = as_runs(trace, [max(2, e) for e in emitted[:n]])  # each as its live run kept it
    own = simulate(tree, runs, per_step=True)
    inside = steps_inside(sequences, runs.meta["sequence_positions"])
    if not inside or not own.count:  # no step started inside the trace
        return None
    live = sum(inside) / len(inside)
    return {"sequences": n, "prompts_match": match,
            "mean_accept_length": own.mean_accept_length, "steps": own.count,
            "measured": live, "measured_steps": len(inside),
            "relative_difference": (live - own.mean_accept_length) / own.mean_accept_length}
