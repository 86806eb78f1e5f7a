"""bench_live's report: each sweep point's line, a drafter kind's goals, and the doc's table
with the caption that says how it was measured (the figures themselves: bench_live.py)."""

from __future__ import annotations

import os
import platform
import statistics
import sys
from pathlib import Path
from typing import Any

import torch

from treeopt.documents.sweep import Sweep, SweepPoint


def print_point_header(bracketed: bool, alongside: bool) -> None:
    """What the columns of :func:`print_point`'s lines mean, and their header."""
    print("predicted: the step-cost model with E[L] from the swept prompts' own trace; "
          "calibration: E[L] from the calibration trace (what select sees before any live run)"
          + ("; bracketed: the model from the profiles before and after the points, pooled"
             if bracketed else "")
          + ("; alongside: the model from each point's tree profiled right before the point"
             if alongside else ""))
    print("se: the relative standard error of the rounds' median speed-up; E[L]: accepted "
          "tokens per row and steady step (at batch > 1 the steady window's), live and as "
          "predicted (the swept prompts' own trace)")
    print("batch  size cap  measured tok/s  AR tok/s  speed-up ± spread  rounds     se  "
          "predicted  error  calibration  error" + ("  bracketed  error" if bracketed else "")
          + ("  alongside  error" if alongside else "") + "  E[L] live  priced  lossless")


def print_point(p: SweepPoint, calibration: float, error: float, more: str) -> None:
    """One sweep point: measured, predicted (the sweep's own), with the calibration trace's
    E[L] (``calibration`` and its ``error``), ``more`` (the other predictions' columns)."""
    star = " ← select" if p.selected else ""
    print(f"{p.batch:5d} {p.size:5d} {str(p.max_depth):>3}  {p.tree_tokens_per_s:14.0f} "
          f"{p.autoregressive_tokens_per_s:9.0f}  {p.speedup:8.3f} ± {p.spread:5.1%}  "
          f"{p.rounds or 0:6d}  {p.se or 0:5.1%}  {p.predicted_speedup:9.3f}  "
          f"{p.error:+6.1%}  "
          f"{calibration:11.3f}  {error:+6.1%}{more}  "
          f"{p.steady_accept_length or 0:9.3f}  {p.predicted_accept_length or 0:6.3f}  "
          f"{str(p.lossless):>8}{star}")


def within(errors: list[float], how: str) -> str:
    """One line of the sweep's errors predicted ``how``: the largest, the mean, the share
    within 5%, and the goal.

    >>> within([0.01, -0.06], "so")
    '  so: largest 6.0%, mean 3.5%, 1 of 2 within 5% — every point ≤ 5%: NOT met'
    """
    worst = max(map(abs, errors))
    return (f"  {how}: largest {worst:.1%}, mean {statistics.mean(map(abs, errors)):.1%}, "
            f"{sum(abs(e) <= 0.05 for e in errors)} of {len(errors)} within 5% — every point "
            f"≤ 5%: {mark(worst <= 0.05)}")


def print_goals(result: dict, args: Any, pick: Any, sweep: Sweep) -> None:
    """A drafter kind's goals, from its ``result`` (bench_live's ``summary``), met or not."""
    kind, first, sp = result["kind"], result["repeat_batch"], result["batch1_speedup"]
    speedups = result["batch1_speedup_runs"]
    print(f"\n{kind} goals:")
    goal = (f"≥ 1.3×: {mark(sp >= 1.3)}; stretch 1.5×: {mark(sp >= 1.5)}" if first == 1 else
            "the goals are at batch 1, which --batches left out")
    print(f"- batch {first}, select's pick ({pick.tree.size} nodes, depth cap {pick.max_depth}): "
          f"{sp:.3f}× autoregressive live (runs {', '.join(f'{s:.3f}' for s in speedups)}; "
          f"predicted {pick.speedup:.3f}×) — {goal}")
    print(f"- spread of that speed-up over {args.repeats} repeated runs: "
          f"{result['repeat_spread']:.1%} — ≤ 3%: {mark(result['repeat_spread'] <= 0.03)}")
    worst, points = result["sweep_max_abs_error"], sum(p.error is not None for p in sweep.points)
    print(f"- prediction error over {points} sweep points (E[L] of the swept prompts' own "
          f"trace): largest {worst:.1%}, mean {result['sweep_mean_abs_error']:.1%} — every "
          f"point ≤ 5%: {mark(worst <= 0.05)}; with E[L] from the calibration trace: largest "
          f"{result['sweep_max_abs_error_calibration_el']:.1%}, mean "
          f"{result['sweep_mean_abs_error_calibration_el']:.1%}")
    if "bracketed_errors" in result:
        print(within(result["bracketed_errors"], "with the step profiled before and after each "
                     "batch size's points, pooled"))
    if "alongside_errors" in result:
        print(within(result["alongside_errors"], "with each point's tree profiled right before "
                     "the point (the host's drift between profile and point taken out)")
              + "; root mean square of each error over its standard error (the point's and "
              f"its record's): {result['sweep_rms_error_over_se_alongside']:.2f} (1 where the "
              "rounds' noise is all there is)")
    shares = {b: s for b, s in result["pick_share_of_best"].items() if s is not None}
    print("- select's pick against the measured best: " + ", ".join(
        f"batch {b} {s:.1%}" for b, s in shares.items())
        + f" — ≥ 97% everywhere: {mark(min(shares.values()) >= 0.97)}")
    if "raced" in result:
        both = result["pick_share_of_best_head_to_head"]
        print("  where the pick was not the measured best, the two raced head to head (steps "
              "interleaved; the sweep's best is the best of several noisy points): " + ", ".join(
                  f"batch {b} {s:.1%}" for b, s in result["raced"].items())
              + f" — ≥ 97% everywhere, so measured: {mark(min(both.values()) >= 0.97)}")
    tree_ms, ar_ms = result["ms_per_step_tree"], result["ms_per_step_autoregressive"]
    book = result["bookkeeping_share_of_ar_step"]
    print(f"- per step (ms): tree draft {tree_ms['draft']:.3f} / verify {tree_ms['verify']:.3f} / "
          f"bookkeeping {tree_ms['bookkeeping']:.3f}; autoregressive step "
          f"{sum(ar_ms.values()):.3f} — bookkeeping {book:.1%} of it, ≤ 15%: {mark(book <= 0.15)}")
    print(f"- lossless at batch {', '.join(map(str, args.batches))}: "
          f"{mark(result['lossless_every_point'])}")
    if "batch1_tokens_per_s_own_dtype" in result:
        tree_rate = result["batch1_tokens_per_s_own_dtype"]
        f32_rate = result["batch1_float32_autoregressive_tokens_per_s"]
        print(f"- in absolute terms, batch 1: the pick in {args.dtype} {tree_rate:.0f} tokens/s, "
              f"float32 autoregressive decoding of the same prompts {f32_rate:.0f} tokens/s — "
              f"{tree_rate / f32_rate:.3f}× float32 autoregressive "
              f"(≥ 1.3×: {mark(tree_rate / f32_rate >= 1.3)})")
    top = max(args.batches)
    if result["batch1_tokens_per_s"] is not None:  # the picks' tokens/s, from summary()
        print(f"- batch {top} (select's pick): {result['batch8_tokens_per_s']:.0f} tokens/s "
              f"beside {top} × batch 1 = {top * result['batch1_tokens_per_s']:.0f}; "
              f"autoregressive {result['batch8_autoregressive']:.0f} beside "
              f"{top * result['batch1_autoregressive']:.0f}")


def mark(ok: bool) -> str:
    return "met" if ok else "NOT met"



def batch_rows(sweep: Sweep,
               errors: list[tuple[SweepPoint, float, float | None]]) -> list[dict]:
    """Per batch size of ``sweep``: the points' prediction errors (from the step profile with
    the swept prompts' E[L], with the calibration trace's E[L], and from the profile alongside;
    ``errors`` holds each point with its last two) and select's pick against the measured best."""
    rows = []
    for row in sweep.summary():
        mine = [e for e in errors if e[0].batch == row["batch"]]
        pick = next(e for e in mine if e[0].selected)
        rows.append({
            "batch": row["batch"], "points": len(mine),
            "error": [abs(p.error) for p, _, _ in mine if p.error is not None],
            "calibration_error": [abs(cal) for _, cal, _ in mine],
            "alongside_error": [abs(a) for _, _, a in mine if a is not None],
            "pick": (pick[0].size, pick[0].max_depth), "pick_speedup": pick[0].speedup,
            "pick_predicted": (1 + pick[1]) * pick[0].speedup,
            "share_of_best": row.get("selected_share_of_best_raced",
                                     row["selected_share_of_best"]),
            "raced": "selected_share_of_best_raced" in row,
            "lossless": all(p.lossless for p, _, _ in mine)})
    return rows


def spread(errors: list[float]) -> str:
    """"4.9% / 1.5%": the largest and the mean of absolute errors ("—" for none)."""
    return f"{max(errors):.1%} / {statistics.mean(errors):.1%}" if errors else "—"


def table(results: list[dict], caption: str) -> str:
    """The doc's table: per head kind and batch size, how well the sweep's points were predicted
    and how select's pick did, then ``caption``."""
    lines = ["| drafter | batch | points | error, largest / mean | with calibration E[L] "
             "| profiled alongside | select's pick (nodes, cap) | pick measured | pick predicted "
             "| pick / measured best | lossless |", "|---" * 11 + "|"]
    for result in results:
        for r in result["rows"]:
            size, cap = r["pick"]
            share = f"{r['share_of_best']:.1%}" + (" (raced)" if r["raced"] else "")
            lines.append(
                f"| {result['kind']} | {r['batch']} | {r['points']} | {spread(r['error'])} "
                f"| {spread(r['calibration_error'])} | {spread(r['alongside_error'])} "
                f"| {size}, {cap or '—'} | {r['pick_speedup']:.3f}× | {r['pick_predicted']:.3f}× "
                f"| {share} | {'yes' if r['lossless'] else '**no**'} |")
    return "\n".join([*lines, "", caption])



def caption(demo, args, results: list[dict], *, load: tuple[float, float]) -> str:
    """What the table measured and how: the command, the machine (and its 1-minute load average
    at the start and the end, ``load``: other jobs beside the run) and the batch-1 repeats."""
    flags, skip = [], False
    for flag in sys.argv[1:]:  # the command as run, less where its files and table went
        if not skip and flag.split("=")[0] not in ("--out", "--write"):
            flags.append(flag)
        skip = flag in ("--out", "--write")
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").open()
                if line.startswith("model name")), platform.processor() or "unknown CPU")
    repeats = "; ".join(
        f"{r['kind']}: {r['batch1_speedup']:.3f}× (spread {r['repeat_spread']:.1%}), "
        f"bookkeeping {r['bookkeeping_share_of_ar_step']:.1%} of an autoregressive step"
        for r in results)
    command = " ".join(["python benchmarks/bench_live.py", *flags])
    return (f"`{command}` on the shipped demo ({demo.manifest['base']['parameters']:,}-parameter base "
            f"model, {args.dtype}), {cpu}, pinned to {len(os.sched_getaffinity(0))} of "
            f"{os.cpu_count()} cores (load average {load[0]:.1f} at the start, {load[1]:.1f} at "
            f"the end), 1 torch thread, torch {torch.__version__}: "
            f"{args.prompts} held-out prompts × {args.new_tokens} tokens per point, at least "
            f"{args.rounds} rounds and {args.min_seconds:g} s, rounds until a speed-up's "
            f"standard error is at most {args.target_se:.1%}. Errors are predicted over measured "
            f"speed-up, minus one, over the sweep's points of that batch size: from the step "
            f"profile taken before the points with the swept prompts' own E[L] (the cost "
            f"model's error), with E[L] from the calibration trace (what `treeopt select` sees "
            f"before any live run), and from each point's tree profiled right before it "
            f"(`--alongside`). Select's pick is predicted with the calibration trace; where it "
            f"was not the measured best, the two were raced head to head (\"raced\"). The "
            f"batch-{min(args.batches)} pick re-run {args.repeats} times: {repeats}.")
