"""Adaptive speculation on the shipped demo, predicted and live (never a test).

The demo's EAGLE drafter (chains of up to its 4 depths), four strategies per batch size:

- ``default``: SGLang's built-in adaptive config (0.5.23, steps above the drafter's depth
  dropped), its controller driving the live loop (:class:`treeopt.adaptive.live.ChainSource`);
- ``tuned``: the config ``treeopt adaptive`` tunes on the calibration prompts' trace;
- ``fixed``: the best fixed chain there (a static chain; k = 0 is plain decoding);
- ``static``: the best static tree ``select`` picks from the calibration trace;

and plain decoding beside them (its live/predicted ratio is the machine's speed against the
profile's: a busy machine lowers every ratio alike; the ``÷plain's`` column divides it out,
beside the raw ratio, never instead of it).

The tuned config is at least the default on the calibration trace it is tuned on (printed);
each is predicted on the held-out prompts' trace — the adaptive and fixed ones by
:func:`treeopt.adaptive.live.replay_batches` (what the live loop runs: the prompts in
consecutive batches, each decoded until its last row finishes, the controller carried on), the
static tree by its walk over the same batches — over the rounds in which every row of a batch
runs (the live loop's steady window, which a step profile measures). The config is tuned with the
demo's step profile (``data/demo/latency/step-eagle-cpu.json``); the live runs of each batch size
are priced (``--alongside``, the default) by a profile of their own shapes — the chains of every
step count and the static tree — taken right before them, as ``bench_live`` prices its sweep
points: a profile taken hours earlier meets another machine speed. Then every strategy decodes the
same held-out prompts live, batch after batch, its steps interleaved with plain decoding's
(:func:`treeopt.decoding.loop.decode_alongside`, one torch thread; ``--race pairs``, the default:
each strategy beside plain decoding alone, two runs, as a profile record is measured beside its
reference — five runs interleaved share the caches five ways and each runs slower than profiled;
``--race all``: all at once), and every output is checked equal to plain decoding's. Printed per workload (``steady``: the prompts in order;
``shifting``: the easiest first, so acceptance falls and the controller has something to follow),
batch size and strategy: the steps drafted, predicted and live tokens/s, their ratio (the goal:
within 5%), and whether live decoding took the replay's steps, round by round (the static tree:
its walk's accepted lengths, step by step).

Run: ``python benchmarks/bench_adaptive.py [--prompts 32] [--new-tokens 64] [--batches 1,2,4,8]``
on a quiet machine (``--prompts`` must be a multiple of every batch size; a smoke run:
``--prompts 4 --new-tokens 32 --batches 1,2``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

STRATEGIES = ("default", "tuned", "fixed", "static")


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
class Row:
    """One strategy at one batch size: predicted and live steady tokens/s, the steps drafted and
    whether live decoding took the replay's steps."""

    strategy: str
    steps: str
    predicted: float
    live: float
    same_steps: bool
    lossless: bool


def workloads(demo, args) -> list[Workload]:
    """The held-out prompts as the trace records them, in order and easiest first."""
    from treeopt.adaptive.workload import ChainAcceptance
    from treeopt.prompts import encode

    held = demo.heldout_traces["eagle"].sequences(args.prompts, positions=args.new_tokens - 1)
    prompts = encode(demo.tokenizer, demo.prompts[: args.prompts])
    acc = ChainAcceptance.from_rank_trace(held, source="held-out")
    order = np.argsort(-acc.difficulty(), kind="stable").tolist()  # as by_difficulty orders
    return [Workload("steady", prompts, acc, held, args.new_tokens),
            Workload("shifting", [prompts[i] for i in order],
                     acc.select(order, source="held-out, easiest first"), _reorder(held, order),
                     args.new_tokens)]


def _reorder(trace, order: list[int]):
    """``trace``'s sequences in ``order``."""
    from treeopt.trace import RankTrace

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

    calib = demo.traces["eagle"].sequences(args.tune_prompts, positions=args.new_tokens - 1)
    acc = ChainAcceptance.from_rank_trace(calib, source="calibration")
    if workload == "shifting":
        acc = by_difficulty(acc)
    return adaptive_report(acc, costs, batches=args.batches, growth=demo.growths["eagle"],
                           static_trace=calib)


def predictions(report, w: Workload, costs, batch: int) -> dict[str, tuple[Any, Any, float]]:
    """Per strategy: what decodes live (a tree source or a tree), what its replay took (a
    Replay, or the static tree's step lengths), and the predicted steady tokens/s."""
    from treeopt.adaptive import FixedSteps, SGLangConfig
    from treeopt.adaptive.live import ChainSource, replay_batches, steady_tokens_per_s
    from treeopt.adaptive.replay import chain_step_seconds
    from treeopt.select import price_tree
    from treeopt.simulate import batch_window_accept_length, step_lengths
    from treeopt.tree import Tree

    depth = w.acceptance.max_steps
    seconds = chain_step_seconds(costs, batch=batch, max_steps=depth)
    side = next(s for s in report.sides if s.batch == batch)
    default = SGLangConfig.default()
    if max(default.union) > depth:
        default = default.capped(depth)
    policies = {"default": default.policy, "tuned": report.tuned.policy,
                "fixed": lambda: FixedSteps(int(side.best_fixed.steps[0]))}
    out: dict[str, tuple[Any, Any, float]] = {}
    for name, make in policies.items():
        r = replay_batches(make(), w.acceptance, batch=batch, costs=seconds)
        k = int(side.best_fixed.steps[0])
        live = (Tree(()) if name == "fixed" and k == 0 else
                ChainSource(make(), max_steps=depth))
        out[name] = (live, r, steady_tokens_per_s(r, seconds))
    tree = Tree.from_choices([list(p) for p in side.static.choices])
    ell = batch_window_accept_length(tree, w.trace, batch)
    ctx = costs.verify.contexts[0]
    rate, _ = price_tree(tree, verify=costs.verify, draft=costs.draft, overhead=costs.overhead,
                         batch=batch, context=ctx, expected_accept_length=ell)
    out["static"] = (tree, step_lengths(tree, w.trace).tolist(), rate)
    return out


def live(demo, w: Workload, batch: int, shapes: dict[str, Any], new_tokens: int, *,
         pairs: bool = True):
    """Each strategy and plain decoding over ``w``'s prompts, batch after batch, interleaved:
    per strategy (and ``plain``) its :class:`~treeopt.decoding.loop.RaceTotals`. With ``pairs``
    each strategy races plain decoding alone — two runs interleaved, as a step profile's record
    is measured beside its reference — and plain's totals pool its runs of every pair; without,
    all of them race at once."""
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder, RaceTotals, race_in_batches
    from treeopt.tree import Tree

    drafting, plain = Decoder(demo.model, demo.heads["eagle"]), Decoder(demo.model)
    names = list(shapes)
    runs = [(plain if isinstance(shapes[n], Tree) and not shapes[n].size else drafting, shapes[n])
            for n in names]
    config = DecodeConfig(max_new_tokens=new_tokens)
    if not pairs:
        totals = race_in_batches([*runs, (plain, Tree(()))], w.prompts, batch=batch,
                                 config=config)
        return dict(zip([*names, "plain"], totals, strict=True))
    out, plains = {}, []
    for name, run in zip(names, runs, strict=True):
        out[name], alone = race_in_batches([run, (plain, Tree(()))], w.prompts, batch=batch,
                                           config=config)
        plains.append(alone)
    out["plain"] = RaceTotals(sum(p.decode_tokens for p in plains),
                              sum(p.decode_seconds for p in plains), plains[0].accept_lengths,
                              all(p.same_as_reference for p in plains))
    return out


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
    from treeopt.measure import Measurement
    from treeopt.pricing import profiled_costs
    from treeopt.profiling.alongside import AlongsideProfile
    from treeopt.tree import Tree

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
    """The four strategies at ``batch`` on ``w``: predicted (priced by ``costs``), then live."""
    from treeopt.adaptive.live import ChainSource

    plan = predictions(report, w, costs, batch)
    shapes = {n: plan[n][0] for n in STRATEGIES}
    totals = live(demo, w, batch, shapes, args.new_tokens, pairs=args.race == "pairs")
    rows = []
    for n in STRATEGIES:
        shape, replayed, predicted = plan[n]
        lengths = list(totals[n].accept_lengths)
        if n == "static":
            same, steps = lengths == replayed, f"{shape.size} nodes"
        elif isinstance(shape, ChainSource):
            same, steps = shape.rounds().equals(replayed), mix(replayed.steps)
        else:  # plain decoding: one token a round
            same, steps = lengths == [1] * int(replayed.rows.sum()), "0:100%"
        rows.append(Row(n, steps, predicted, totals[n].tokens_per_s, same,
                        totals[n].same_as_reference))
    from treeopt.adaptive.replay import chain_step_seconds

    plain = totals["plain"]  # the machine's speed against the profile's
    step = chain_step_seconds(costs, batch=batch, max_steps=0)[0]
    rows.append(Row("plain", "0:100%", batch / step, plain.tokens_per_s,
                    set(plain.accept_lengths) == {1}, True))
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
    ap.add_argument("--step-profile", type=Path, metavar="FILE",
                    help="tune with this EAGLE step profile (default: the demo's)")
    ap.add_argument("--alongside", action=argparse.BooleanOptionalAction, default=True,
                    help="price the live runs of each batch size with a step profile of their "
                         "shapes taken right before them (default: on; off: with the tuning "
                         "profile)")
    ap.add_argument("--alongside-target-se", type=float, default=0.02,
                    help="relative standard error of each alongside record (default 0.02)")
    ap.add_argument("--race", choices=("pairs", "all"), default="pairs",
                    help="live: each strategy beside plain decoding alone, as a profile record "
                         "is measured (pairs, default), or every strategy at once (all)")
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
    from treeopt.pricing import profiled_costs
    from treeopt.tree import Tree

    torch.set_num_threads(1)
    started = time.perf_counter()
    demo = load(threads=1)
    costs = profiled_costs(args.step_profile or demo.step_profile("eagle"))
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
              "live/pred  ÷plain's  replay==live  lossless")
        for b in args.batches:
            priced = (profiled_alongside(demo, w, report, b, keep / f"alongside-{w.name}.json",
                                         args.alongside_target_se)
                      if args.alongside else costs)
            rows = measure(demo, priced, w, report, b, args)
            machine = rows[-1].live / rows[-1].predicted  # plain decoding's live/pred
            for r in rows:
                print(f"{b:5d}  {r.strategy:8s}  {r.steps:24s}  {r.predicted:15.1f}  "
                      f"{r.live:10.1f}  {r.live / r.predicted:9.3f}  "
                      f"{r.live / r.predicted / machine:8.3f}  "
                      f"{'yes' if r.same_steps else 'NO':>12s}  {'yes' if r.lossless else 'NO':>8s}")
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
