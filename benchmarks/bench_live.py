"""The live-speed goals on the shipped demo, measured and printed goal by goal (never a test).

For each head kind:
1. per batch size, profile the live step on this machine (``treeopt.profiling.step``: the decoder's own
   loop, phase by phase) of the trees of the swept sizes (each depth cap for Hydra) and fit the
   step-cost model; the swept trees are then priced as measured, the others by the fit;
2. ``select`` at that batch size from it, E[L] from the calibration trace walked step by step;
3. right after, that batch size's part of the live sweep (``treeopt tune``): every growth tree of
   the sizes below, plus select's pick, decoded against autoregressive decoding (interleaved,
   warmed up, in rounds) on held-out prompts, beside the prediction;
   where select's pick is not the measured best, the two raced head to head (``tune
   --race-best``: the best of several noisy points is measured high); every point gets rounds
   until its speed-up has at most ``--target-se`` relative standard error, every profile record
   until its step over the reference has at most ``--profile-target-se``;
   with ``--alongside`` (default), each point's tree is also profiled right before the point
   (:mod:`treeopt.profiling.alongside`, to ``--alongside-target-se``) and the points are predicted also
   from that profile, which met the host as the points did; each error is printed over its
   standard error (the point's and its record's combined), whose root mean square is 1 where the
   rounds' noise is all there is; with ``--bracket``, the batch size is profiled again right
   after its points, how far the records moved is printed, and the points are predicted also
   from both profiles pooled;
4. select's pick at batch 1 (the smallest of ``--batches``) compared again, ``--repeats`` times
   (each to ``--repeat-target-se``), as re-running the command would:
   the spread of those speed-ups is how well the figure holds;
5. a profiled pass of the pick: draft / verify / bookkeeping per step against an autoregressive
   step.

Goals: batch-1 pick ≥ 1.3× autoregressive (stretch 1.5×); every sweep
point predicted within 5%; select's pick ≥ 97% of the measured best at every batch size;
bookkeeping ≤ 15% of an autoregressive step; lossless at every batch size; spread ≤ 3%.

With ``--dtype bfloat16`` the demo model and its drafters run in bfloat16 with treeopt's exact
attention (:mod:`treeopt.decoding.attention`; losslessness is checked at every point as in
float32), and step 2 works from traces calibrated in bfloat16 here — the calibration prompts and
the swept ones — and trees grown from them (the shipped traces describe the float32 model's
text, which bfloat16 greedy decoding leaves after a while). Its speed-ups are against bfloat16
autoregressive decoding; since a small model may run faster in float32, the batch-1 pick is also
timed against float32 autoregressive decoding of the same prompts: only that ratio says whether
the tree makes the model faster than it could run without one.

``--write docs/hardware.md`` puts the summary table (one row per head kind and batch size) into
that doc, between the ``bench-live`` markers; the table's caption states the settings it ran with.

Run: ``python benchmarks/bench_live.py [--kinds hydra,medusa] [--dtype bfloat16] [--out
bench-live] [--write docs/hardware.md]`` on a quiet machine (it sets one torch thread, as the app
does). A run at the defaults takes hours on a 2-core CPU; ``--prompts 8 --new-tokens 32`` takes
a fraction of that and measures the same things less precisely.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from doc_table import write_between
from live_report import batch_rows, caption, print_goals, print_point, print_point_header, table

from treeopt.decoding.calibrate import CalibrateConfig, calibrate
from treeopt.decoding.compare import Comparison, compare
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.live_sweep import tune
from treeopt.decoding.loop import Decoder, decode_alongside
from treeopt.decoding.models import attention_of
from treeopt.demo import load
from treeopt.demo.layout import demo_root
from treeopt.documents.measure import Measurement
from treeopt.documents.prompts import encode, read_texts
from treeopt.documents.step_profile import StepProfile, StepRecord
from treeopt.documents.sweep import BATCHINGS, Sweep, SweepPoint
from treeopt.model.growth import Growth, grow
from treeopt.model.runs import as_run, as_runs
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.pricing.costs import StepCosts
from treeopt.pricing.sources import profiled_costs
from treeopt.pricing.sweep_prediction import predict
from treeopt.pricing.throughput import select
from treeopt.profiling.alongside import AlongsideProfile
from treeopt.profiling.step import profile_steps

SIZES = (1, 2, 4, 8, 16, 32, 64)
BATCHES = (1, 2, 4, 8)


def own_traces(demo, kind: str, args, out: Path) -> tuple[Growth, RankTrace, RankTrace]:
    """Growth, calibration trace and the swept prompts' trace of the demo as loaded (its
    dtype): the shipped ones in float32, calibrated and grown here otherwise; both traces over
    the positions a run of ``--new-tokens`` decodes."""
    if args.dtype == "float32":
        return (demo.growths[kind], as_run(demo.traces[kind], args.new_tokens),
                as_runs(demo.heldout_traces[kind], [args.new_tokens] * args.prompts))
    shipped = demo.traces[kind].meta
    config = CalibrateConfig(top_k=int(shipped.get("top_k", 16)), max_new_tokens=args.new_tokens,
                             batch_size=16)
    traces = []
    for part, prompts in (("calibration", read_texts([demo.paths.prompts("calibration")])),
                          ("heldout", demo.prompts[: args.prompts])):
        print(f"  calibrating {kind} in {args.dtype}: {part} prompts", end="\r", flush=True)
        trace, _ = calibrate(demo.model, demo.heads[kind], encode(demo.tokenizer, prompts),
                             out / f"trace-{kind}-{part}-{args.dtype}.npz", config=config,
                             meta={"model": "treeopt demo", "dtype": args.dtype})
        traces.append(trace)
    growth = grow(traces[0], method="empirical", max_nodes=max(SIZES))
    return growth, traces[0], traces[1]


def against_float32(demo, kind: str, tree: Tree, prompts, config: DecodeConfig,
                    rounds: int) -> tuple[float, float]:
    """Batch-1 steady tokens/s of ``tree`` on the demo as loaded (bfloat16) and of float32
    autoregressive decoding (the demo model's faster dtype on the CPUs measured) on the same
    prompts, their steps interleaved prompt by prompt (:func:`~treeopt.decoding.loop.
    decode_alongside` over the two models' decoders), paired as
    :func:`~treeopt.decoding.compare.compare` pairs (:class:`~treeopt.decoding.compare.
    Comparison`): float32 tokens/s is its best of ``rounds`` prompt by prompt, the tree's that
    times the median over rounds of the tree's tokens/s over float32's in the same round."""
    f32 = load(demo.paths.root, threads=1)
    runs = [(Decoder(demo.model, demo.heads[kind]), tree), (Decoder(f32.model), Tree(()))]
    decode_alongside(runs, prompts[:1], config=replace(config, max_new_tokens=8))  # warm-up
    tree_rounds, f32_rounds = [], []
    for _ in range(rounds):
        pairs = [decode_alongside(runs, [prompt], config=config) for prompt in prompts]
        tree_rounds.append(tuple(t for t, _ in pairs))
        f32_rounds.append(tuple(a for _, a in pairs))
    paired = Comparison(tree, config, 1, tuple(tree_rounds), tuple(f32_rounds))
    return paired.tree_tokens_per_s, paired.autoregressive_tokens_per_s


def drift(before: Sequence[StepRecord], after: Sequence[StepRecord],
          ) -> dict[int, tuple[tuple, float]]:
    """Per batch: the record whose step (draft + verify + bookkeeping) over the autoregressive
    step changed most from one step profile to the next, as (q, depth cap), and the change."""
    def ratios(records):
        step = {(r.batch, r.q, r.max_depth): r.ms_draft + r.ms_verify + r.ms_bookkeeping
                for r in records}
        return {k: v / step[(k[0], 1, None)] for k, v in step.items() if k[1] > 1}

    old, new = ratios(before), ratios(after)
    out: dict[int, tuple[tuple, float]] = {}
    for k in sorted(old.keys() & new.keys(), key=lambda k: (k[0], k[1], k[2] or 0)):  # cap None
        change = new[k] / old[k] - 1
        if k[0] not in out or abs(change) > abs(out[k[0]][1]):
            out[k[0]] = ((k[1], k[2]), change)
    return out


def results_saver(out: Path, kind: str) -> Callable[[dict], None]:
    """Writes a head kind's results to ``out``/result-KIND.json (again as figures are added)."""
    return lambda result: (out / f"result-{kind}.json").write_text(json.dumps(result, indent=1))


PROFILE_SEQUENCES = 8  # sequences each step-profile record decodes, at least


def bench_kind(demo, kind: str, args, out: Path) -> dict:
    """Every figure of one drafter kind (steps 1–5 above), saved to ``out`` as it is added, and
    its goals printed."""
    prompts = [demo.tokenizer(p)["input_ids"] for p in demo.prompts]
    config = DecodeConfig(max_new_tokens=args.new_tokens)
    growth, trace, own = own_traces(demo, kind, args, out)
    sweep, costs, alongside = measure_points(demo, kind, args, out, prompts, config,
                                             growth=growth, trace=trace, own=own)
    bracketed = bracket_drift(kind, out) if args.bracket else None
    beside = profiled_costs(out / f"step-{kind}-alongside.json") if args.alongside else None
    errors = point_errors(sweep, growth, costs, trace, own, bracketed=bracketed, beside=beside,
                          alongside=alongside)
    pick, runs = repeat_pick(demo, kind, args, prompts, config, growth=growth, costs=costs,
                             trace=trace)
    result = summary(kind, args, sweep, pick, runs, errors)
    save = results_saver(out, kind)
    save(result)
    if args.dtype != "float32":
        tree_rate, f32_rate = against_float32(demo, kind, pick.tree, prompts[: args.prompts],
                                              config, args.rounds)
        result.update(batch1_tokens_per_s_own_dtype=tree_rate,
                      batch1_float32_autoregressive_tokens_per_s=f32_rate)
        save(result)
    print_goals(result, args, pick, sweep)
    return result


def measure_points(demo, kind: str, args, out: Path, prompts, config: DecodeConfig, *,
                   growth: Growth, trace: RankTrace, own: RankTrace,
                   ) -> tuple[Sweep, StepCosts, AlongsideProfile | None]:
    """Steps 1–3: per batch size, the live step profiled, then that batch size's sweep points
    (each point's tree profiled right before it with ``--alongside``, the batch profiled again
    after with ``--bracket``). Each batch size is profiled right before its own points: on a
    host whose speed drifts, a profile taken an hour before the points it predicts no longer
    describes them. Every record averages over the same 8 (or more) sequences, whatever its
    batch size."""
    sequences = max(PROFILE_SEQUENCES, *args.batches)
    step_path = out / f"step-{kind}.json"

    def profile(b: int, path: Path) -> None:
        profile_steps(demo.model, demo.heads[kind], growth, prompts[:sequences],
                      batch=[b], out=path, sizes=args.sizes, max_new_tokens=args.new_tokens,
                      measure=Measurement(3, args.profile_seconds, args.profile_target_se),
                      sequences=sequences, log=lambda _: None)

    alongside = (AlongsideProfile(demo.model, demo.heads[kind], prompts[:sequences],
                                  out=out / f"step-{kind}-alongside.json",
                                  max_new_tokens=args.new_tokens, sequences=sequences,
                                  measure=Measurement(3, args.profile_seconds,
                                                      args.alongside_target_se))
                 if args.alongside else None)
    for b in args.batches:
        profile(b, step_path)
        costs = profiled_costs(step_path)
        print(f"\n== {kind}, batch {b}: step profile fitted (largest error of draft + overhead "
              f"over the profiled trees {costs.fit['draft_and_overhead']:.1%}; largest fall of "
              f"the verify time as q grows {costs.fit['verify_dip']:.1%}, which should be 0)",
              flush=True)
        sweep = tune(demo.model, demo.heads[kind], growth, prompts[: args.prompts],
                     batch=[b], sizes=[n for n in args.sizes if n <= growth.max_nodes],
                     out=out / f"sweep-{kind}.json", config=config,
                     measure=Measurement(args.rounds, args.min_seconds, args.target_se),
                     costs=costs, trace=own, select_trace=trace,
                     meta={"model": "demo", "device": "cpu", "dtype": args.dtype},
                     race_best=True, before_point=alongside,
                     continuous=args.batching == "continuous",
                     progress=lambda i, n: print(f"  sweep point {i}/{n}", end="\r",
                                                 flush=True))
        if args.bracket:  # the same records again, right after the points they predict
            profile(b, out / f"step-{kind}-after.json")
        print(" " * 40, end="\r")
    return sweep, costs, alongside


def bracket_drift(kind: str, out: Path) -> StepCosts:
    """``--bracket``: how far each batch size's records moved between the profiles before and
    after its points (printed), and the step-cost model of both pooled, as tune would."""
    before_path, after_path = out / f"step-{kind}.json", out / f"step-{kind}-after.json"
    before, after = StepProfile.load(before_path), StepProfile.load(after_path)
    for b, (key, change) in drift(before.records, after.records).items():
        print(f"== {kind}, batch {b}: profiled again after its points, a record's step over "
              f"the autoregressive step moved by up to {change:+.1%} (q = {key[0]}, depth "
              f"cap {key[1]})")
    return profiled_costs([before_path, after_path])


@dataclass
class PointErrors:
    """Each sweep point's prediction errors (predicted over measured speed-up, minus one) beyond
    the sweep's own: with the calibration trace's E[L], from the bracketing profiles, from the
    profile alongside (and that one over its standard error)."""

    calibration: list[float] = field(default_factory=list)
    bracketed: list[float] = field(default_factory=list)
    alongside: list[float] = field(default_factory=list)
    alongside_z: list[float] = field(default_factory=list)
    points: list[tuple[SweepPoint, float, float | None]] = field(default_factory=list)


def point_errors(sweep: Sweep, growth: Growth, costs: StepCosts, trace: RankTrace,
                 own: RankTrace, *, bracketed: StepCosts | None, beside: StepCosts | None,
                 alongside: AlongsideProfile | None) -> PointErrors:
    """Every sweep point, measured and predicted each way, printed one line each."""
    records = ({(r["batch"], r["size"], r["max_depth"]): r for r in alongside.doc["records"]}
               if alongside is not None else {})  # the alongside profile as written
    print_point_header(bracketed is not None, beside is not None)
    errors = PointErrors()
    for p in sorted(sweep.points, key=lambda p: (p.batch, p.size)):
        def error(model: StepCosts, trace: RankTrace, p: SweepPoint = p) -> float:
            return predict(Tree.from_choices([list(c) for c in p.choices]), growth, model, trace,
                           p.batch, continuous=sweep.continuous).speedup / p.speedup - 1

        cal = error(costs, trace)  # calibration E[L]
        errors.calibration.append(abs(cal))
        both = ""
        if bracketed is not None:
            errors.bracketed.append(error(bracketed, own))
            both = f"  {(1 + errors.bracketed[-1]) * p.speedup:9.3f}  {errors.bracketed[-1]:+6.1%}"
        if beside is not None:
            errors.alongside.append(error(beside, own))
            both += f"  {(1 + errors.alongside[-1]) * p.speedup:9.3f}  {errors.alongside[-1]:+6.1%}"
            record = records.get(p.key)
            if record is not None and record.get("se") is not None and p.se is not None:
                errors.alongside_z.append(errors.alongside[-1]
                                          / (p.se ** 2 + record["se"] ** 2) ** 0.5)
        errors.points.append((p, cal, errors.alongside[-1] if beside is not None else None))
        print_point(p, (1 + cal) * p.speedup, cal, both)
    return errors


def repeat_pick(demo, kind: str, args, prompts, config: DecodeConfig, *, growth: Growth,
                costs: StepCosts, trace: RankTrace) -> tuple[Any, list[Comparison]]:
    """Step 4: select's pick at the smallest batch size, compared again ``--repeats`` times."""
    first = min(args.batches)  # 1 unless --batches leaves it out: then the smallest one measured
    pick = select(growth, costs.verify, draft=costs.draft, overhead=costs.overhead,
                  batch=[first], context=costs.verify.contexts, trace=trace).points[0]
    runs = [compare(demo.model, demo.heads[kind], pick.tree, prompts[: args.prompts],
                    config=config, batch=first, split=True,
                    measure=Measurement(args.rounds, args.min_seconds, args.repeat_target_se))
            for _ in range(args.repeats)]
    return pick, runs


def summary(kind: str, args, sweep: Sweep, pick, runs: list[Comparison],
            errors: PointErrors) -> dict:
    """The kind's figures, as ``result-KIND.json`` holds them."""
    speedups = [r.speedup for r in runs]
    split = runs[0].to_dict()  # step 5: the pick's step, phase by phase
    tree_ms, ar_ms = split["tree_decoding"]["ms_per_step"], split["autoregressive"]["ms_per_step"]
    rows = sweep.summary()
    b1 = next((p for p in sweep.points if p.batch == 1 and p.selected), None)  # --batches 1,…
    b8 = next(p for p in sweep.points if p.batch == max(args.batches) and p.selected)
    sweep_errors = [abs(p.error) for p in sweep.points if p.error is not None]
    result = {
        "kind": kind, "repeat_batch": min(args.batches),
        "pick_batch1": {"size": pick.tree.size, "max_depth": pick.max_depth,
                        "choices": pick.tree.as_choices(), "predicted_speedup": pick.speedup},
        "batch1_speedup_runs": speedups, "batch1_speedup": statistics.median(speedups),
        "repeat_spread": (max(speedups) - min(speedups)) / statistics.median(speedups),
        "sweep_max_abs_error": max(sweep_errors),
        "sweep_mean_abs_error": statistics.mean(sweep_errors),
        "sweep_max_abs_error_calibration_el": max(errors.calibration),
        "sweep_mean_abs_error_calibration_el": statistics.mean(errors.calibration),
        "pick_share_of_best": {r["batch"]: r.get("selected_share_of_best") for r in rows},
        "ms_per_step_tree": tree_ms, "ms_per_step_autoregressive": ar_ms,
        "bookkeeping_share_of_ar_step": tree_ms["bookkeeping"] / sum(ar_ms.values()),
        "lossless_every_point": all(p.lossless for p in sweep.points),
        "batch8_tokens_per_s": b8.tree_tokens_per_s, "batch1_tokens_per_s": b1 and b1.tree_tokens_per_s,
        "batch8_autoregressive": b8.autoregressive_tokens_per_s,
        "batch1_autoregressive": b1 and b1.autoregressive_tokens_per_s,
        "rows": batch_rows(sweep, errors.points)}
    if errors.bracketed:
        result.update(sweep_max_abs_error_bracketed=max(map(abs, errors.bracketed)),
                      sweep_mean_abs_error_bracketed=statistics.mean(map(abs, errors.bracketed)),
                      bracketed_errors=errors.bracketed)
    if errors.alongside:
        z = errors.alongside_z
        result.update(sweep_max_abs_error_alongside=max(map(abs, errors.alongside)),
                      sweep_mean_abs_error_alongside=statistics.mean(map(abs, errors.alongside)),
                      alongside_errors=errors.alongside,
                      sweep_rms_error_over_se_alongside=(statistics.fmean(e * e for e in z) ** 0.5
                                                         if z else float("nan")))
    raced = {r["batch"]: r["selected_share_of_best_raced"] for r in rows
             if "selected_share_of_best_raced" in r}
    if raced:
        result["pick_share_of_best_head_to_head"] = {**result["pick_share_of_best"], **raced}
        result["raced"] = raced
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo", "--demo-dir", dest="demo_dir",
                    help="a demo in data/ (smollm2: the real model's, after `treeopt fetch`) or "
                         "its directory; default: the shipped data/demo")
    ap.add_argument("--kinds", help="drafter kinds, comma-separated (default: hydra,medusa where "
                                    "the demo ships them, else every kind it ships)")
    ap.add_argument("--prompts", type=int, default=32, help="held-out prompts per point")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3,
                    help="interleaved rounds per point and per repeated run (verify's and tune's default)")
    ap.add_argument("--min-seconds", type=float, default=36.0,
                    help="and more rounds until a point has been timed this long (tree and "
                         "autoregressive together; tune's --min-seconds): 36 s is about 3 "
                         "rounds at batch 1 with 16 prompts × 64 tokens on the demo's 2-core "
                         "host, 12–15 at batch 8")
    ap.add_argument("--target-se", type=float, default=0.015,
                    help="and more rounds until a point's mean speed-up, and a profile record's "
                         "step over its reference, have at most this relative standard error "
                         "(tune's, verify's and profile step's --target-se): each as many "
                         "rounds as its own noise needs (profile records: "
                         "--profile-target-se)")
    ap.add_argument("--profile-target-se", type=float, default=0.02,
                    help="a step-profile record's --target-se (default 0.02): with --bracket "
                         "each record is measured twice and pooled, about 1.4%% together, for "
                         "half the rounds of 1.5%% each")
    ap.add_argument("--bracket", action=argparse.BooleanOptionalAction, default=False,
                    help="profile each batch size again right after its points and predict "
                         "them also from both profiles pooled (default off): on a shared host "
                         "the steps' relative costs drift over the minutes between a profile "
                         "and the points it predicts; how far, this prints")
    ap.add_argument("--alongside", action=argparse.BooleanOptionalAction, default=True,
                    help="profile each point's tree right before the point is measured "
                         "(treeopt.profiling.alongside, to --alongside-target-se) and predict the points "
                         "also from that profile (default on): the host's drift between a "
                         "profile and the points it predicts taken out of the error")
    ap.add_argument("--alongside-target-se", type=float, default=0.01,
                    help="an alongside record's --target-se (default 0.01): with a point's "
                         "1.5%%, the two together about 1.8%%, so 5%% is 2.8 standard errors")
    ap.add_argument("--repeats", type=int, default=3, help="repeated runs of the batch-1 pick")
    ap.add_argument("--repeat-target-se", type=float, default=0.01,
                    help="each repeated run's --target-se (default 0.01: three runs each "
                         "within 1%% standard error span about 1.7%% on average)")
    ap.add_argument("--profile-seconds", type=float, default=10.0,
                    help="each step-profile record timed at least this long (profile step "
                         "--min-seconds): 8 rounds at batch 1 take about 6 s, 3 at batch 8 "
                         "about 4")
    ap.add_argument("--batching", default="static", choices=BATCHINGS,
                    help="a batch-b point: its prompts b at a time, or in one run of b rows "
                         "each taking the next prompt as a serving engine does (default "
                         "%(default)s, as the figures in docs/hardware.md were measured)")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"),
                    help="the demo model's and drafters' dtype (bfloat16: exact attention)")
    ap.add_argument("--batches", type=lambda t: [int(x) for x in t.split(",")],
                    default=list(BATCHES), help="default 1,2,4,8")
    ap.add_argument("--sizes", type=lambda t: [int(x) for x in t.split(",")],
                    default=list(SIZES), help="tree sizes swept (default 1,2,4,…,64)")
    ap.add_argument("--out", help="where the step profiles, sweeps and results go")
    ap.add_argument("--write", metavar="DOC.md",
                    help="replace the table between the doc's bench-live markers")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-live-"))
    out.mkdir(parents=True, exist_ok=True)
    demo = load(demo_root(args.demo_dir), threads=1, dtype=args.dtype)
    print(f"demo: {demo.manifest['base']['parameters']:,}-parameter base model in {args.dtype} "
          f"(attention {attention_of(demo.model)}); 1 torch thread; "
          f"{args.prompts} held-out prompts × {args.new_tokens} tokens per point, {args.rounds} "
          f"rounds and at least {args.min_seconds:g} s, standard error ≤ {args.target_se:.1%}; "
          f"files in {out}", file=sys.stderr)
    start_load = os.getloadavg()[0]
    for line in demo.profiled_elsewhere():
        print(line, file=sys.stderr)
    kinds = (args.kinds.split(",") if args.kinds else
             [k for k in ("hydra", "medusa") if k in demo.kinds] or list(demo.kinds))
    results = [bench_kind(demo, kind, args, out) for kind in kinds]
    text = table(results, caption(demo, args, results, load=(start_load, os.getloadavg()[0])))
    print(f"\n{text}")
    if args.write:
        try:
            write_between(args.write, "bench-live", text)
        except ValueError as error:
            sys.exit(str(error))


if __name__ == "__main__":
    from entry import run

    run(main)
