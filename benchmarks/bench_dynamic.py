"""Dynamic trees on the demo's EAGLE drafter: simulation against live decoding, and the
recommended settings against live-measured throughput.

    python benchmarks/bench_dynamic.py [--calibration DIR] [--heldout DIR] [--accuracy-only | --throughput-only]
                                       [--shipped-profile]

DIRs hold dynamic traces (``treeopt calibrate-dynamic`` writes ``dynamic-topk<K>.npz``); by
default the demo's own (``data/demo/dynamic/eagle-{calibration,heldout}-topk<K>.npz``). Prints,
goal by goal:

1. simulated E[L] against live dynamic decoding of held-out prompts over a grid of (topk, steps,
   draft tokens): the held-out trace's walk (the same text live decodes: the simulation
   itself, equal up to the last step of each sequence) and the calibration trace's walk (other
   prompts: the simulation plus the difference between prompt sets, with its standard error);
2. per batch size: the settings ``select --dynamic`` recommends, their live speed-up, and the
   best live speed-up of the throughput grid (each point interleaved with autoregressive
   decoding, the median of the paired rounds), then the finalists — the recommended settings, the scan's best,
   the recommended and the best chain — re-measured head to head with more rounds and tokens
   (the scan's maximum over ~40 noisy points is biased upward); the prediction's error split into its two factors, E[L] (the
   calibration walk against the timed prompts' live E[L]) and the step's cost in
   autoregressive steps (the step profile's against the live one). The step profile is
   measured first, in the same run, as the demo build measures it (the demo's design set of
   settings, its calibration prompts): a profile taken on another machine, or on this one while
   it was busy, prices steps at other ratios (``--shipped-profile`` prices with the demo's);
3. the best chain (top-k 1, steps only: the AutoSpec idea) against the full schedule;
4. at equal verify budget (N tokens): dynamic against the best static tree of N − 1 nodes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from treeopt.decoding.compare import compare  # noqa: E402
from treeopt.decoding.config import DecodeConfig  # noqa: E402
from treeopt.decoding.loop import Decoder  # noqa: E402
from treeopt.demo.load import load  # noqa: E402
from treeopt.documents.measure import Measurement  # noqa: E402
from treeopt.dynamic.recommend import acceptance, recommend  # noqa: E402
from treeopt.dynamic.simulate import DynamicTrace  # noqa: E402
from treeopt.model.dynamic_settings import grid  # noqa: E402
from treeopt.pricing.sources import profiled_costs  # noqa: E402
from treeopt.pricing.throughput import growth_expected_accept_length, price_tree  # noqa: E402


def traces(directory: Path | None, demo_dir: Path, part: str) -> dict[int, DynamicTrace]:
    """The traces of ``directory`` (calibrate-dynamic's names), else the demo's of ``part``."""
    where, pattern = ((directory, "dynamic-topk*.npz") if directory is not None
                      else (demo_dir / "dynamic", f"eagle-{part}-topk*.npz"))
    out = {}
    for path in sorted(where.glob(pattern)):
        t = DynamicTrace.load(path)
        out[t.topk] = t
    if not out:
        sys.exit(f"{where}: no {pattern} traces (treeopt calibrate-dynamic, or the demo's "
                 "dynamic stage)")
    return out


def as_runs(traces: dict[int, DynamicTrace], new_tokens: int,
            count: int | None = None) -> dict[int, DynamicTrace]:
    """Each trace's first ``count`` sequences (all by default) as live runs of ``new_tokens``
    see them: a 256-token trace walked whole is not the prediction for a 16-token run."""
    return {k: t.as_run(new_tokens, count) for k, t in traces.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", type=Path, help="directory of calibration traces")
    ap.add_argument("--heldout", type=Path, help="directory of the held-out prompts' traces")
    ap.add_argument("--prompts", type=int, default=48, help="held-out prompts for acceptance")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--timed-prompts", type=int, default=8)
    ap.add_argument("--timed-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2, help="rounds per point of the grid scan")
    ap.add_argument("--confirm-rounds", type=int, default=4,
                    help="rounds of the head-to-head re-measurement of the finalists")
    ap.add_argument("--confirm-tokens", type=int, default=128)
    ap.add_argument("--batches", default="1,2,4,8")
    ap.add_argument("--steps", default="2,3,4,5,6", help="steps of the acceptance grid")
    ap.add_argument("--accuracy-only", action="store_true",
                    help="goal 1 only (e.g. --prompts 192: every held-out prompt)")
    ap.add_argument("--throughput-only", action="store_true", help="goals 2-4 only")
    ap.add_argument("--shipped-profile", action="store_true",
                    help="price with the demo's dynamic step profile instead of profiling here")
    args = ap.parse_args()

    demo = load(threads=1)
    eagle = demo.heads["eagle"]
    cal_traces = traces(args.calibration, demo.paths.root, "calibration")
    held_traces = traces(args.heldout, demo.paths.root, "heldout")
    cal = as_runs(cal_traces, args.new_tokens)
    held_all = as_runs(held_traces, args.new_tokens)
    held = as_runs(held_traces, args.new_tokens, args.prompts)
    ids = [demo.tokenizer(p)["input_ids"] for p in demo.prompts]
    dec = Decoder(demo.model, eagle)
    print(f"demo EAGLE drafter; {args.prompts} held-out prompts × {args.new_tokens} new tokens; "
          f"1 torch thread\n")

    # 1. simulation against live ------------------------------------------------------------
    if not args.throughput_only:
        accuracy(dec, ids, cal, held, held_all, args)

    if args.accuracy_only:
        return 0

    throughput(demo, ids, cal_traces, args)
    return 0


def throughput(demo, ids, cal_traces, args) -> None:
    """Goals 2-4: per batch size, the recommendation against a timed grid of settings, its
    finalists re-measured head to head, and dynamic against static trees of each budget."""
    batches = [int(x) for x in args.batches.split(",")]
    if args.shipped_profile:
        costs = profiled_costs(demo.paths.dynamic_step_profile("cpu"))
    else:
        costs = profile_here(demo, batches)
    print(f"dynamic steps priced with {costs.draft.source}\n")
    timed = ids[args.prompts: args.prompts + args.timed_prompts]
    speed_grid = [s for s in grid((1, 2, 4, 8), (2, 3, 4, 5), (4, 8, 16, 32))
                  if s.draft_tokens <= costs.verify.max_tokens]
    timed_cal = as_runs(cal_traces, args.timed_tokens)  # the runs the grid times
    for b in batches:
        choice = recommend(timed_cal, speed_grid, verify=costs.verify, draft=costs.draft,
                           overhead=costs.overhead, batch=[b],
                           context=int(costs.verify.contexts[0]))[0]
        t0 = time.perf_counter()
        runs = {s: compare(demo.model, demo.heads["eagle"], s, timed,
                           config=DecodeConfig(max_new_tokens=args.timed_tokens), batch=b,
                           measure=Measurement(rounds=args.rounds)) for s in speed_grid}
        measured = {s: r.speedup for s, r in runs.items()}
        print_scan(b, choice, runs, time.perf_counter() - t0)
        confirm_finalists(demo, b, choice, measured, timed, args)
        static_beside(demo, b, speed_grid, measured, timed_cal, timed, args)


def print_scan(b: int, choice, runs: dict, seconds: float) -> None:
    """The grid scan at batch ``b``: the recommendation against the live best, and the
    prediction's errors over the grid, in its two factors."""
    measured = {s: r.speedup for s, r in runs.items()}
    best = max(measured, key=measured.get)
    pick = choice.best.settings
    print(f"batch {b} ({seconds:.0f} s): recommended {pick.label}: "
          f"predicted {choice.best.speedup:.3f}×, live {measured[pick]:.3f}× = "
          f"{100 * measured[pick] / measured[best]:.1f}% of the live best "
          f"({best.label}: {measured[best]:.3f}×)")
    errors = [abs(p.speedup / measured[p.settings] - 1) for p in choice.points]
    print(f"  speed-up predicted vs live over the grid: mean error "
          f"{100 * np.mean(errors):.1f}%, largest {100 * max(errors):.1f}%")
    factors = [error_factors(p, runs[p.settings]) for p in choice.points]
    print(f"  its factors over the grid (predicted / live − 1, mean |·|): E[L] "
          f"{100 * np.mean([abs(f[0]) for f in factors]):.1f}%, step in autoregressive "
          f"steps {100 * np.mean([abs(f[1]) for f in factors]):.1f}%")
    for label, point in (("recommended", choice.best),
                         ("live best", next(p for p in choice.points if p.settings == best))):
        el, step = error_factors(point, runs[point.settings])
        live = runs[point.settings].tree_stats.mean_accept_length
        print(f"  {label} {point.settings.label}: E[L] predicted "
              f"{point.expected_accept_length:.3f} vs live {live:.3f} ({100 * el:+.1f}%); "
              f"step predicted {point.expected_accept_length / point.speedup:.3f} vs live "
              f"{live / measured[point.settings]:.3f} autoregressive steps ({100 * step:+.1f}%)")
    print(f"  spread of a grid point over its rounds: median "
          f"{100 * np.median([r.speedup_spread for r in runs.values()]):.1f}%")


def confirm_finalists(demo, b: int, choice, measured: dict, timed, args) -> None:
    """The recommendation, the live best and the best chains (top-k 1), predicted and live,
    re-measured head to head over more rounds and tokens: goal ≥ 97% of the live best."""
    best = max(measured, key=measured.get)
    pick = choice.best.settings
    chain_pred = choice.best_chain.settings if choice.best_chain else None
    chains = {s: v for s, v in measured.items() if s.is_chain}
    chain_best = max(chains, key=chains.get) if chains else None
    finalists = list(dict.fromkeys(s for s in (pick, best, chain_pred, chain_best) if s))
    ccfg = DecodeConfig(max_new_tokens=args.confirm_tokens)
    confirmed = {s: compare(demo.model, demo.heads["eagle"], s, timed, config=ccfg, batch=b,
                            measure=Measurement(rounds=args.confirm_rounds))
                 for s in finalists}
    print(f"  finalists re-measured ({args.confirm_rounds} rounds × {args.confirm_tokens} "
          "tokens): " + "; ".join(f"{s.label} {c.speedup:.3f}× (spread "
                                 f"{100 * c.speedup_spread:.1f}%)"
                                 for s, c in confirmed.items()))
    top = max(confirmed, key=lambda s: confirmed[s].speedup)
    share = confirmed[pick].speedup / confirmed[top].speedup
    print(f"  goal ≥ 97% of the live best: recommended {100 * share:.1f}% of {top.label} "
          f"(re-measured) → {'met' if share >= 0.97 else 'NOT met'}")
    if chain_pred is not None:
        print(f"  steps only, re-measured: the full schedule's pick over the steps-only pick "
              f"{100 * (confirmed[pick].speedup / confirmed[chain_pred].speedup - 1):+.1f}%")
    if chain_best is not None and chain_pred is not None:
        print(f"  steps only (top-k 1): recommended {chain_pred.label} live "
              f"{measured[chain_pred]:.3f}×, best chain live {chain_best.label} "
              f"{measured[chain_best]:.3f}×; the full schedule adds "
              f"{100 * (measured[pick] / measured[chain_pred] - 1):+.1f}% "
              f"(live best over best chain {100 * (measured[best] / measured[chain_best] - 1):+.1f}%)")


def static_beside(demo, b: int, speed_grid, measured: dict, timed_cal, timed, args) -> None:
    """Per draft budget N: the best dynamic setting of N draft tokens live beside the static
    tree of N − 1 nodes, live and as the demo's static step profile prices it."""
    growth = demo.growths["eagle"]
    static_costs = profiled_costs(demo.step_profile("eagle"))
    for n in (4, 8, 16, 32):
        dyn = [s for s in speed_grid if s.draft_tokens == n]
        if not dyn or n - 1 > growth.max_nodes:
            continue
        d_best = max(dyn, key=measured.get)
        tree = growth.tree(n - 1)
        static = compare(demo.model, demo.heads["eagle"], tree, timed,
                         config=DecodeConfig(max_new_tokens=args.timed_tokens), batch=b,
                         measure=Measurement(rounds=args.rounds))
        ell_d = acceptance(timed_cal, d_best)[0]
        ell_s = growth_expected_accept_length(growth, tree)
        pred_s = price_tree(tree, verify=static_costs.verify, draft=static_costs.draft,
                            overhead=static_costs.overhead, batch=b,
                            context=int(static_costs.verify.contexts[0]),
                            expected_accept_length=ell_s)
        winner = "dynamic" if measured[d_best] > static.speedup else "static"
        print(f"  N={n:2d}: dynamic {d_best.label}: E[L] (walk) {ell_d:.3f}, live "
              f"{measured[d_best]:.3f}× | static {n - 1} nodes: E[L] (growth) {ell_s:.3f}, live "
              f"{static.speedup:.3f}× (predicted {pred_s[0] / pred_s[1]:.3f}×) → {winner}")


def accuracy(dec, ids, cal, held, held_all, args) -> None:
    """Goal 1: simulated E[L] against live dynamic decoding over a grid of settings."""
    accuracy_grid = grid((1, 2, 4, 8), tuple(int(x) for x in args.steps.split(",")),
                         (4, 8, 16, 32, 64))
    cfg = DecodeConfig(max_new_tokens=args.new_tokens)
    plain = dec.decode(_empty(), ids[: args.prompts], config=cfg).tokens
    print("settings                          live E[L]  held-out walk    calibration walk ± se  "
          "(z)     all held-out walk  lossless")
    same_text, other_text, sets, zs, lossless = 0.0, 0.0, 0.0, [], True
    for s in accuracy_grid:
        runs = [dec.decode(s, ids[i: min(i + 8, args.prompts)], config=cfg)
                for i in range(0, args.prompts, 8)]
        lengths = [x for r in runs for x in r.stats.accept_lengths]
        live = float(np.mean(lengths))
        same = [t for r in runs for t in r.tokens] == list(plain)
        lossless &= same
        hw, hw_se = acceptance(held, s)  # the live prompts' own text
        sim, sim_se = acceptance(cal, s)
        full = acceptance(held_all, s)[0]
        z = (sim - live) / float(np.hypot(sim_se, hw_se))
        zs.append(z)
        same_text = max(same_text, abs(hw / live - 1))
        other_text = max(other_text, abs(sim / live - 1))
        sets = max(sets, abs(sim / full - 1))
        print(f"{s.label:32s}  {live:8.3f}  {hw:6.3f} ({100 * (hw / live - 1):+5.2f}%)  "
              f"{sim:6.3f} ± {sim_se:.3f} ({100 * (sim / live - 1):+5.2f}%, z {z:+4.1f})  "
              f"{full:6.3f} ({100 * (sim / full - 1):+5.2f}%)  {same}")
    print(f"\ngoal: simulated E[L] within 2% of live over the grid ({len(accuracy_grid)} settings):"
          f"\n  the simulation on the text live decodes (held-out walk): "
          f"{'met' if same_text <= 0.02 else 'NOT met'}, largest error {100 * same_text:.2f}%"
          f"\n  predicted from the calibration prompts: "
          f"{'met' if other_text <= 0.02 else 'NOT met'}, largest error {100 * other_text:.2f}% "
          f"(z of the difference: median {np.median(zs):+.1f}, largest {max(zs, key=abs):+.1f}; "
          f"calibration walk vs all {len(next(iter(held_all.values())).lengths)} held-out "
          f"prompts' walk: largest {100 * sets:.2f}%)")
    print(f"check: lossless on every prompt, every setting: {lossless}\n")


# Settings the recommendation picks among at batch 1-8 on the demo, beyond the demo build's
# design set: profiled here so that they are priced as measured (treeopt.pricing.costs.step_costs).
PICKED = ((1, 3, 4), (2, 2, 4))


def error_factors(point, run) -> tuple[float, float]:
    """The prediction's error in its two factors, each predicted / live − 1: E[L], and the
    step's cost in autoregressive steps (E[L] / speed-up). The speed-up's error is
    (1 + E[L] error) / (1 + step error) − 1."""
    live_el = run.tree_stats.mean_accept_length
    predicted_step = point.expected_accept_length / point.speedup
    live_step = live_el / run.speedup
    return point.expected_accept_length / live_el - 1, predicted_step / live_step - 1


def profile_here(demo, batches):
    """The dynamic step profile measured now, as the demo build measures it, over the demo's
    design set and :data:`PICKED`."""
    import tempfile

    from treeopt.demo.config import DemoConfig
    from treeopt.documents.prompts import encode, read_texts
    from treeopt.model.dynamic_settings import DynamicSettings
    from treeopt.profiling.step import profile_steps

    c = DemoConfig()
    design = [DynamicSettings(*s) for s in (*c.dynamic_profile, *PICKED)]
    prompts = encode(demo.tokenizer, read_texts([demo.paths.prompts("calibration")]))
    out = Path(tempfile.mkdtemp()) / "step-eagle-dynamic-here.json"
    t0 = time.perf_counter()
    profile_steps(demo.model, demo.heads["eagle"], None, prompts[: max(batches)],
                  batch=batches, out=out, max_new_tokens=c.live_new_tokens,
                  measure=Measurement(rounds=c.step_rounds), dynamic=design,
                  log=lambda line: None)
    print(f"dynamic step profile measured here ({time.perf_counter() - t0:.0f} s)")
    return profiled_costs(out)


def _empty():
    from treeopt.model.tree import Tree

    return Tree(())


if __name__ == "__main__":
    sys.exit(main())
