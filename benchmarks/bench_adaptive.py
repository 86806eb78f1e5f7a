"""Adaptive speculation on the shipped demo, predicted and live (never a test).

The demo's EAGLE drafter (chains of up to its 4 depths), four strategies per batch size:

- ``default``: SGLang's built-in adaptive config (0.5.23, steps above the drafter's depth
  dropped), its controller driving the live loop (:class:`treeopt.adaptive.live.ChainSource`);
- ``tuned``: the config ``treeopt adaptive`` tunes on the calibration prompts' trace;
- ``fixed``: the best fixed chain there (a static chain; k = 0 is plain decoding);
- ``static``: the best static tree ``select`` picks from the calibration trace;

and plain decoding beside them.

The tuned config is at least the default on the calibration trace it is tuned on (printed);
each is predicted on the held-out prompts' trace — the adaptive and fixed ones by
:func:`treeopt.adaptive.live.replay_continuous` (what the live loop runs with ``--batching
continuous``, the default: ``b`` rows, a finished row taking the next prompt, as the engines
batch and as the tuning's replay models; ``--batching static``:
:func:`~treeopt.adaptive.live.replay_batches`, consecutive batches each decoded until its last
row finishes), the static tree by its walk over the same rows — over the rounds in which every
row runs (the live loop's steady window, which a step profile measures). The config is tuned with the
demo's step profile (``data/demo/latency/step-eagle-cpu.json``); the live runs of each batch size
are priced (``--alongside``, the default) by a profile of their own shapes — the chains of every
step count and the static tree — taken right before them, as ``bench_live`` prices its sweep
points: a profile taken hours earlier meets another machine speed. Then each strategy decodes the
same held-out prompts live, batch after batch, its steps interleaved with plain decoding's alone
(:func:`treeopt.decoding.loop.race_in_batches`, one torch thread: two runs, as a profile record
is measured beside its reference), in rounds — each a fresh controller over all the prompts —
until its speed-up over plain decoding has a relative standard error of ``--live-target-se``
(1.5%; at most ``--max-rounds``), and every output is checked equal to plain decoding's.

Printed per workload (``steady``: the prompts in order; ``shifting``: the easiest first, so
acceptance falls and the controller has something to follow), batch size and strategy: the steps
drafted; predicted and live tokens/s and their ratio (raw: it moves with the machine's speed,
which on a shared host drifts by tens of percent between minutes, plain decoding's as much as any
strategy's); the predicted speed-up over plain decoding (both from the same profile) and the live
one (both from the same races), and their ratio: the goal, within 5%, the standard ``bench_live``
holds every sweep point to; and whether live decoding took the replay's steps in every round (the
static tree: its walk's accepted lengths, step by step). A last line counts the points within the
goal.

Run: ``python benchmarks/bench_adaptive.py [--prompts 32] [--new-tokens 64] [--batches 1,2,4,8]``
on a quiet machine (``--prompts`` must be a multiple of every batch size; a smoke run:
``--prompts 4 --new-tokens 32 --batches 1,2``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STRATEGIES = ("default", "tuned", "fixed", "static")
GOAL = 0.05  # live within 5% of the prediction


@dataclass
class Workload:
    """A workload: the held-out prompts in some order, their chain acceptance and rank trace
    over the positions a run of ``new_tokens`` visits."""

    name: str
    prompts: list[list[int]]
    acceptance: Any  # ChainAcceptance
    trace: Any  # RankTrace
    new_tokens: int


@dataclass
class Plan:
    """One strategy at one batch size, before it runs: ``make()`` gives what decodes live (a
    fresh controller each time), ``replayed`` what its replay took (a Replay, or the static
    tree's walk: its accepted lengths step by step), ``predicted`` its steady tokens/s."""

    make: Callable[[], Any]
    replayed: Any
    predicted: float

    @property
    def steps(self) -> str:
        """The steps drafted (``3:92% 1:8%``), or the static tree's size."""
        if isinstance(self.replayed, list):
            return f"{self.make().size} nodes"
        return mix(self.replayed.steps)


@dataclass
class Row:
    """One strategy at one batch size: predicted tokens/s (and plain decoding's, from the same
    profile) beside what it measured live."""

    strategy: str
    steps: str
    predicted: float
    predicted_plain: float
    live: Live

    @property
    def predicted_speedup(self) -> float:
        return self.predicted / self.predicted_plain

    @property
    def error(self) -> float:
        """The live speed-up over the predicted one, less 1: the goal is within ±5%."""
        return self.live.speedup / self.predicted_speedup - 1


def workloads(demo, args) -> list[Workload]:
    """The held-out prompts as the trace records them, in order and easiest first."""
    from treeopt.adaptive.workload import ChainAcceptance
    from treeopt.documents.prompts import encode
    from treeopt.model.runs import as_runs

    held = as_runs(demo.heldout_traces["eagle"], [args.new_tokens] * args.prompts)  # as run
    prompts = encode(demo.tokenizer, demo.prompts[: args.prompts])
    acc = ChainAcceptance.from_rank_trace(held, source="held-out")
    order = np.argsort(-acc.difficulty(), kind="stable").tolist()  # as by_difficulty orders
    return [Workload("steady", prompts, acc, held, args.new_tokens),
            Workload("shifting", [prompts[i] for i in order],
                     acc.select(order, source="held-out, easiest first"), _reorder(held, order),
                     args.new_tokens)]


def _reorder(trace, order: list[int]):
    """``trace``'s sequences in ``order``."""
    from treeopt.model.trace import RankTrace

    counts = trace.meta["sequence_positions"]
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rows = np.concatenate([np.arange(starts[i], starts[i] + counts[i]) for i in order])
    return RankTrace(trace.ranks[rows], {**trace.meta,
                                         "sequence_positions": [counts[i] for i in order]})


def tuned_on_calibration(demo, costs, args, workload: str):
    """``treeopt adaptive``'s report on the calibration trace (the same order rule as the
    workload), with the static tree ``select`` picks."""
    from treeopt.adaptive.report import adaptive_report
    from treeopt.adaptive.workload import ChainAcceptance, by_difficulty
    from treeopt.model.runs import as_runs

    calib = as_runs(demo.traces["eagle"], [args.new_tokens] * args.tune_prompts)
    acc = ChainAcceptance.from_rank_trace(calib, source="calibration")
    if workload == "shifting":
        acc = by_difficulty(acc)
    return adaptive_report(acc, costs, batches=args.batches, growth=demo.growths["eagle"],
                           static_trace=calib)


def predictions(report, w: Workload, costs, batch: int, continuous: bool) -> dict[str, Plan]:
    """Per strategy: what decodes live (made afresh for each round: a controller starts each
    pass over the prompts anew, as its replay does), what its replay took (a Replay, or the
    static tree's step lengths), and the predicted steady tokens/s."""
    from treeopt.adaptive import FixedSteps, SGLangConfig, SGLangPolicy
    from treeopt.adaptive.live import (
        ChainSource,
        replay_batches,
        replay_continuous,
        steady_tokens_per_s,
    )
    from treeopt.adaptive.replay import chain_step_seconds
    from treeopt.model.simulation import (
        batch_window_accept_length,
        continuous_window_accept_length,
        step_lengths,
    )
    from treeopt.model.tree import Tree
    from treeopt.pricing.throughput import price_tree

    depth = w.acceptance.max_steps
    seconds = chain_step_seconds(costs, batch=batch, max_steps=depth)
    side = next(s for s in report.sides if s.batch == batch)
    default = SGLangConfig.default()
    if max(default.union) > depth:
        default = default.capped(depth)
    k = int(side.best_fixed.steps[0])
    policies = {"default": lambda: SGLangPolicy(default),
                "tuned": lambda: SGLangPolicy(report.tuned), "fixed": lambda: FixedSteps(k)}
    out: dict[str, Plan] = {}
    for name, policy in policies.items():
        replayer = replay_continuous if continuous else replay_batches
        r = replayer(policy(), w.acceptance, batch=batch, costs=seconds)
        make = ((lambda: Tree(())) if name == "fixed" and k == 0 else
                (lambda policy=policy: ChainSource(policy(), max_steps=depth)))
        out[name] = Plan(make, r, steady_tokens_per_s(r, seconds))
    tree = Tree.from_choices([list(p) for p in side.static.choices])
    window = continuous_window_accept_length if continuous else batch_window_accept_length
    ell = window(tree, w.trace, batch)
    ctx = costs.context()
    rate, _ = price_tree(tree, verify=costs.verify, draft=costs.draft, overhead=costs.overhead,
                         batch=batch, context=ctx, expected_accept_length=ell)
    out["static"] = Plan(lambda: tree, step_lengths(tree, w.trace).tolist(), rate)
    return out


@dataclass
class Live:
    """One strategy raced beside plain decoding in rounds: both pooled steady tokens/s, the
    rounds' speed-ups (the strategy's tokens/s over plain's in the same round), whether every
    round took the replay's steps and matched plain decoding's output."""

    tokens_per_s: float
    plain_tokens_per_s: float
    speedups: list[float]
    same_steps: bool
    lossless: bool

    @property
    def speedup(self) -> float:
        return statistics.fmean(self.speedups)

    @property
    def se(self) -> float:
        from treeopt.documents.measure import relative_se

        return relative_se(self.speedups)


def race_rounds(demo, w: Workload, batch: int, plan: Plan, new_tokens: int, measure,
                continuous: bool) -> Live:
    """``plan``'s strategy beside plain decoding alone — two runs, their steps interleaved, as a
    step profile's record is measured beside its reference — over all of ``w``'s prompts (in
    ``batch`` rows refilled as rows finish, or batch after batch), in rounds (a fresh controller
    each) until ``measure`` is met on the speed-up."""
    from treeopt.adaptive.live import ChainSource
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder, race_in_batches
    from treeopt.model.tree import Tree

    drafting, plain = Decoder(demo.model, demo.heads["eagle"]), Decoder(demo.model)
    config = DecodeConfig(max_new_tokens=new_tokens)
    runs, speedups, seconds = [], [], 0.0
    same = lossless = True
    while measure.planned(len(speedups), seconds, [speedups]) > len(speedups):
        shape = plan.make()
        decoder = plain if isinstance(shape, Tree) and not shape.size else drafting
        mine, alone = race_in_batches([(decoder, shape), (plain, Tree(()))], w.prompts,
                                      batch=batch, config=config, continuous=continuous)
        if isinstance(shape, ChainSource):
            same &= shape.rounds().equals(plan.replayed)
        elif shape.size and continuous:  # the walk's steps, each sequence's as alone, in any order
            same &= sorted(mine.accept_lengths) == sorted(plan.replayed)
        elif shape.size:  # the static tree: its walk's accepted lengths, step by step
            same &= list(mine.accept_lengths) == plan.replayed
        else:  # plain decoding: one token a round
            same &= list(mine.accept_lengths) == [1] * int(plan.replayed.rows.sum())
        lossless &= mine.same_as_reference
        runs.append((mine, alone))
        speedups.append(mine.tokens_per_s / alone.tokens_per_s)
        seconds += mine.decode_seconds + alone.decode_seconds
    pooled = [sum(r[i].decode_tokens for r in runs) / sum(r[i].decode_seconds for r in runs)
              for i in (0, 1)]
    return Live(pooled[0], pooled[1], speedups, same, lossless)


def mix(steps: np.ndarray) -> str:
    """``3:92% 1:8%``: the steps drafted, as shares of the rounds."""
    values, counts = np.unique(steps, return_counts=True)
    return " ".join(f"{v}:{c / steps.size:.0%}" for v, c in zip(values, counts, strict=True))


def profiled_alongside(demo, w: Workload, report, batch: int, out: Path, target_se: float):
    """The step costs of what ``batch``'s live runs decode — the chains of every step count and
    the static tree — profiled right before them into ``out``
    (:class:`~treeopt.profiling.alongside.AlongsideProfile`: each shape beside plain decoding, in
    rounds until its step over plain's has ``target_se``), so they meet the machine as the live
    runs do."""
    from treeopt.documents.measure import Measurement
    from treeopt.model.tree import Tree
    from treeopt.pricing.sources import profiled_costs
    from treeopt.profiling.alongside import AlongsideProfile

    profile = AlongsideProfile(demo.model, demo.heads["eagle"], w.prompts, out=out,
                               max_new_tokens=w.new_tokens,
                               measure=Measurement(target_se=target_se),
                               sequences=max(8, batch))
    side = next(s for s in report.sides if s.batch == batch)
    static = Tree.from_choices([list(p) for p in side.static.choices])
    for tree in [*(Tree.chain(k) for k in range(1, w.acceptance.max_steps + 1)), static]:
        profile(batch, tree.depth, tree)  # the depth tells a chain from a tree of its size
    return profiled_costs(out)


def measure(demo, costs, w: Workload, report, batch: int, args) -> list[Row]:
    """The four strategies at ``batch`` on ``w``: predicted (priced by ``costs``), then each
    raced live beside plain decoding; last, plain decoding (its live rate pooled over every
    race)."""
    from treeopt.adaptive.replay import chain_step_seconds
    from treeopt.documents.measure import Measurement

    continuous = args.batching == "continuous"
    plans = predictions(report, w, costs, batch, continuous)
    plain_rate = batch / chain_step_seconds(costs, batch=batch, max_steps=0)[0]
    measure = Measurement(rounds=2, target_se=args.live_target_se, max_rounds=args.max_rounds)
    rows, plains = [], []
    for n in STRATEGIES:
        plan = plans[n]
        raced = race_rounds(demo, w, batch, plan, args.new_tokens, measure, continuous)
        plains.append(raced.plain_tokens_per_s)
        rows.append(Row(n, plan.steps, plan.predicted, plain_rate, raced))
    plain = statistics.fmean(plains)
    rows.append(Row("plain", "0:100%", plain_rate, plain_rate,
                    Live(plain, plain, [1.0], True, True)))
    return rows


def main(argv: list[str] | None = None) -> int:
    from treeopt.cli.common import int_list

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=32, help="held-out prompts (default 32)")
    ap.add_argument("--new-tokens", type=int, default=64, help="new tokens each (default 64)")
    ap.add_argument("--batches", type=int_list("--batches"), default=[1, 2, 4, 8],
                    help="batch sizes (default 1,2,4,8)")
    ap.add_argument("--tune-prompts", type=int, default=48,
                    help="calibration prompts the config is tuned on (default 48)")
    ap.add_argument("--workloads", default="steady,shifting", help="steady, shifting or both")
    ap.add_argument("--batching", choices=("continuous", "static"), default="continuous",
                    help="live runs batch as the engines do, a finished row taking the next "
                         "prompt (continuous: what the tuning's replay models; the default), or "
                         "in consecutive static batches")
    ap.add_argument("--step-profile", type=Path, metavar="FILE",
                    help="tune with this EAGLE step profile (default: the demo's)")
    ap.add_argument("--alongside", action=argparse.BooleanOptionalAction, default=True,
                    help="price the live runs of each batch size with a step profile of their "
                         "shapes taken right before them (default: on; off: with the tuning "
                         "profile)")
    ap.add_argument("--alongside-target-se", type=float, default=0.02,
                    help="relative standard error of each alongside record (default 0.02)")
    ap.add_argument("--live-target-se", type=float, default=0.015,
                    help="relative standard error of each live speed-up over plain decoding: "
                         "each strategy races plain decoding in rounds until it is met "
                         "(default 0.015)")
    ap.add_argument("--max-rounds", type=int, default=8,
                    help="rounds at most per strategy and batch size (default 8)")
    ap.add_argument("--out", type=Path, default=None, metavar="DIR",
                    help="keep the alongside profiles here (default: a temporary directory)")
    args = ap.parse_args(argv)
    bad = [b for b in args.batches if args.prompts % b]
    if bad:
        ap.error(f"--prompts {args.prompts} is not a multiple of batch size {bad[0]}")

    import torch

    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder
    from treeopt.demo import load
    from treeopt.model.tree import Tree
    from treeopt.pricing.sources import profiled_costs

    torch.set_num_threads(1)
    started = time.perf_counter()
    demo = load(threads=1)
    # the demo's own pricing (its verify step shared with its other drafters'), or the given file
    costs = profiled_costs(args.step_profile) if args.step_profile else demo.step_costs("eagle")
    Decoder(demo.model, demo.heads["eagle"]).decode(Tree.chain(2), [[1, 2, 3]],  # warm-up
                                                    config=DecodeConfig(max_new_tokens=8))
    chosen = args.workloads.split(",")
    keep = args.out or Path(tempfile.mkdtemp(prefix="bench-adaptive-"))
    keep.mkdir(parents=True, exist_ok=True)
    print(f"demo EAGLE drafter; {args.prompts} held-out prompts × {args.new_tokens} tokens; "
          f"tuned on {args.tune_prompts} calibration prompts with the step profile "
          f"{costs.verify.source}; live runs priced "
          + (f"by profiles of their shapes taken right before them (to SE "
             f"{args.alongside_target_se:.0%}; in {keep})" if args.alongside
             else "by the same profile"))
    results: list[Row] = []
    for w in workloads(demo, args):
        if w.name not in chosen:
            continue
        report = tuned_on_calibration(demo, costs, args, w.name)
        print(f"\nworkload {w.name} ({w.acceptance.source}); tuned config: "
              f"{report.tuned.to_json()}")
        print("predicted on the calibration trace the config is tuned on (tokens/s, default → "
              "tuned): " + ", ".join(
                  f"batch {side.batch} {side.default.tokens_per_s:.1f} → "
                  f"{side.tuned.tokens_per_s:.1f} ({side.tuned.tokens_per_s / side.default.tokens_per_s - 1:+.1%})"
                  for side in report.sides if side.batch in args.batches))
        print("batch  strategy  steps drafted             predicted tok/s  live tok/s  "
              "raw ratio  speed-up pred → live (SE, rounds)  its ratio  replay==live  lossless")
        for b in args.batches:
            priced = (profiled_alongside(demo, w, report, b, keep / f"alongside-{w.name}.json",
                                         args.alongside_target_se)
                      if args.alongside else costs)
            for r in measure(demo, priced, w, report, b, args):
                live = r.live
                speed = (f"{r.predicted_speedup:5.3f} → {live.speedup:5.3f} "
                         f"({live.se:4.1%}, {len(live.speedups)})" if r.strategy != "plain"
                         else "")
                print(f"{b:5d}  {r.strategy:8s}  {r.steps:24s}  {r.predicted:15.1f}  "
                      f"{live.tokens_per_s:10.1f}  {live.tokens_per_s / r.predicted:9.3f}  "
                      f"{speed:33s}  "
                      + (f"{r.error:+9.1%}" if r.strategy != "plain" else " " * 9)
                      + f"  {'yes' if live.same_steps else 'NO':>12s}  "
                      f"{'yes' if live.lossless else 'NO':>8s}")
                if r.strategy != "plain":
                    results.append(r)
    within = sum(abs(r.error) <= GOAL for r in results)
    print(f"\nlive speed-up within {GOAL:.0%} of the predicted one at {within} of {len(results)} "
          f"(workload, batch, strategy) points; replay == live at "
          f"{sum(r.live.same_steps for r in results)}, lossless at "
          f"{sum(r.live.lossless for r in results)}")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
