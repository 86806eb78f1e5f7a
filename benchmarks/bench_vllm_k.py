"""vLLM's per-batch draft length on the shipped demo: treeopt's table against the table vLLM's
own profiler rule picks from the same measurements, predicted and live (never a test).

For each chain drafter the demo ships (prompt lookup and EAGLE; the demo ships no MTP drafter,
so MTP is not measured here), ``select`` prices the drafter's chains from its step profile and
calibration trace (:func:`treeopt.pricing.chains.price_chains`) and writes both tables
(:func:`treeopt.pricing.per_batch_k.vllm_per_batch`): treeopt's, the fastest chain vLLM takes
at each batch size (prompt lookup: select's pick, a chain; EAGLE: its picks are trees, so the
best chain; then the shortest chain within the step profile's noise of it), and vLLM's rule's, K ∈ {1, 3, 5}, accepted length ÷ latency with vLLM's
interpolation, measured at the batch sizes the demo's sweep priced (a CPU demo has none of
vLLM's profiler batch sizes above 4; the output says which).

Then, at each batch size of ``--batches`` (the demo's sweep: 1, 2, 4, 8), treeopt's decoder
decodes the first ``--prompts`` held-out prompts live with the chain of each table's K and
autoregressively, their steps interleaved (:func:`treeopt.decoding.loop.race_in_batches`,
continuous batching, one torch thread), every output checked equal to plain decoding's. Where
treeopt's table switches K between two batch sizes, both K are decoded at both, so the cost of
switching at the threshold (throughput just below against just above, with either K) is
measured beside the prediction.

Printed per drafter and batch size: each table's K, predicted and live tokens/s and speed-up,
treeopt's live gain over the rule, lossless; then each switch; then the goal: treeopt's table
≥ vLLM's rule's, live, at every batch size (the same K counts as equal), and ≥ 5% faster at one
at least. Where the two tables' predictions differ by a per cent or two, the live order is
decided by noise: run on a quiet core, with ``--rounds 3`` (each K's median of three races).

Both tables are priced by the demo's step profiles, measured on the host that built the demo. A
step's cost relative to the autoregressive step is the machine's: on another host, profile the
drafter there (``treeopt profile step --demo prompt-lookup --batch 1,2,4,8 --max-new-tokens N
--out step.json``, N the decode length here, so that the prices are at the decoded context) and
pass ``--step-profile step.json --kinds prompt-lookup``.

Run: ``python benchmarks/bench_vllm_k.py [--prompts 16] [--new-tokens 256] [--kinds
prompt-lookup,eagle] [--demo smollm2] [--step-profile FILE]`` on a quiet machine: a few minutes
at the defaults on a 2-core CPU; ``--prompts 4 --new-tokens 24 --batches 1,2`` checks it runs.
Prompt lookup's long chains pay over long continuations (its matches come from the text already written): with 256
new tokens treeopt's batch-1 K (11) is beyond vLLM's rule's K ≤ 5; over 64 tokens both pick
K 5 or 6.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CHAIN_KINDS = ("prompt-lookup", "eagle", "mtp")  # the demo's chain drafters, where it ships them


def tables(demo, kind: str, batches: list[int], new_tokens: int,
           step_profile: Path | None = None) -> dict:
    """``select``'s vllm_per_batch section for the demo's ``kind`` drafter at ``batches``, E[L]
    from the calibration trace's first ``new_tokens`` positions of each sequence (the part of
    a continuation a live run of ``new_tokens`` decodes), steps priced by ``step_profile``
    (default: the demo's, measured on the host that built it)."""
    from treeopt.documents.step_profile import StepProfile
    from treeopt.model.runs import as_run
    from treeopt.pricing.selection import schedule
    from treeopt.pricing.sources import costs_of_profile, price

    costs = costs_of_profile(StepProfile.pool([step_profile or demo.step_profile(kind)]))
    context = costs.context(None)
    selection = price(demo.growths[kind], costs.verify, draft=costs.draft,
                      overhead=costs.overhead, batch=batches, context=[context],
                      trace=as_run(demo.traces[kind], new_tokens))
    section = schedule(selection, context=context).get("vllm_per_batch")
    if not section or "refused" in section:
        raise SystemExit(f"{kind}: no vLLM per-batch K ({(section or {}).get('refused')})")
    return section


def ks_to_decode(section: dict, batch: int) -> list[int]:
    """The chains decoded at ``batch``: both tables' K, and both K of any switch next to it."""
    row = next(r for r in section["batches"] if r["batch"] == batch)
    ks = {row["treeopt"]["k"], row["vllm_rule"]["k"]}
    for s in section["switches"]:
        if batch in (s["batch_below"], s["batch"]):
            ks |= {s["k_below"], s["k"]}
    return sorted(ks)


def live(demo, kind: str, ks: list[int], prompts, batch: int, new_tokens: int
         ) -> tuple[dict[int, float], dict[int, bool]]:
    """Per K (0: plain decoding) the steady tokens/s of the chain of K over ``prompts`` in
    ``batch`` rows, decoded interleaved, and whether its outputs equal plain decoding's."""
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder, race_in_batches
    from treeopt.model.tree import Tree

    drafted = [k for k in ks if k > 0]
    runs = [(Decoder(demo.model, demo.heads[kind]), Tree.chain(k)) for k in drafted]
    runs.append((Decoder(demo.model), Tree(())))
    totals = race_in_batches(runs, prompts, batch=batch,
                             config=DecodeConfig(max_new_tokens=new_tokens), continuous=True)
    names = [*drafted, 0]
    return ({k: t.tokens_per_s for k, t in zip(names, totals, strict=True)},
            {k: t.same_as_reference for k, t in zip(names, totals, strict=True)})


def report(kind: str, section: dict, measured: dict[int, dict[int, float]],
           equal: dict[int, dict[int, bool]]) -> tuple[bool, bool]:
    """Print the drafter's rows and switches; (treeopt ≥ rule everywhere, ≥ 5% somewhere)."""
    print(f"\n{kind} (vLLM method {section['method']}); vLLM's rule measured at "
          f"{section['vllm_rule']['measured_at']}; acceptance {section['acceptance']}")
    print("batch | treeopt K  predicted → live tok/s (speed-up) | vLLM rule K  predicted → live "
          "tok/s (speed-up) | live treeopt/rule | lossless")
    at_least, ahead = True, False
    for row in section["batches"]:
        b, mine, rule = row["batch"], row["treeopt"], row["vllm_rule"]
        tps, ar = measured[b], measured[b][0]
        gain = tps[mine["k"]] / tps[rule["k"]] - 1 if mine["k"] != rule["k"] else 0.0
        at_least &= gain >= 0
        ahead |= gain >= 0.05
        cells = [f"{t['k']:2d}  {t['tokens_per_s']:7.1f} → {tps[t['k']]:7.1f} "
                 f"({t['speedup']:.2f}× → {tps[t['k']] / ar:.2f}×)" for t in (mine, rule)]
        same = " (same K)" if mine["k"] == rule["k"] else ""
        lossless = all(equal[b].values())
        print(f"{b:5d} | {cells[0]} | {cells[1]} | {gain:+6.1%}{same} | "
              f"{'yes' if lossless else 'NO'}")
    for s in section["switches"]:
        lo, hi, k0, k1 = s["batch_below"], s["batch"], s["k_below"], s["k"]
        print(f"switch K {k0}→{k1} between batch {lo} and {hi}: batch {lo} K {k0} "
              f"{measured[lo][k0]:.1f} / K {k1} {measured[lo][k1]:.1f} tok/s live "
              f"(predicted {s['tokens_per_s_below'][str(k0)]:.1f} / "
              f"{s['tokens_per_s_below'][str(k1)]:.1f}); batch {hi} K {k0} {measured[hi][k0]:.1f}"
              f" / K {k1} {measured[hi][k1]:.1f} tok/s live (predicted "
              f"{s['tokens_per_s_at'][str(k0)]:.1f} / {s['tokens_per_s_at'][str(k1)]:.1f})")
    return at_least, ahead


def main(argv: list[str] | None = None) -> int:
    from treeopt.cli.common import int_list

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16, help="held-out prompts (default 16)")
    ap.add_argument("--new-tokens", type=int, default=256,
                    help="new tokens each (default 256, as long as the calibration trace's "
                         "continuations)")
    ap.add_argument("--batches", type=int_list("--batches"),
                    help="batch sizes (default: the demo's sweep, 1,2,4,8)")
    ap.add_argument("--kinds", help="chain drafters, comma-separated (default: those of "
                                    f"{', '.join(CHAIN_KINDS)} the demo ships)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="races per batch size, each K's median tokens/s reported (default 1)")
    ap.add_argument("--step-profile", type=Path,
                    help="price the chains with this step profile (`treeopt profile step` of the "
                         "one drafter of --kinds, on this host) instead of the demo's, which "
                         "was measured on the host that built the demo: a step's cost relative "
                         "to the autoregressive step differs between machines")
    ap.add_argument("--demo", help="a demo in data/ (smollm2: the real model's, after "
                                   "`treeopt fetch`) or its directory; default the shipped one")
    args = ap.parse_args(argv)

    import torch

    from treeopt.demo import load
    from treeopt.demo.layout import demo_root
    from treeopt.documents.prompts import encode

    torch.set_num_threads(1)
    started = time.perf_counter()
    demo = load(demo_root(args.demo), threads=1)
    batches = args.batches or list(demo.manifest.get("config", {}).get("live_batches",
                                                                        [1, 2, 4, 8]))
    shipped = [k for k in CHAIN_KINDS if k in demo.kinds and demo.step_profile(k) is not None]
    kinds = args.kinds.split(",") if args.kinds else shipped
    missing = [k for k in kinds if k not in shipped]
    if missing:
        ap.error(f"the demo ships no {', '.join(missing)} drafter with a step profile "
                 f"(it ships {', '.join(shipped)})")
    if args.step_profile is not None and len(kinds) != 1:
        ap.error("--step-profile prices one drafter: give one kind with --kinds")
    if "mtp" not in shipped:
        print("note: the demo ships no MTP drafter: MTP is not measured", file=sys.stderr)
    prompts = encode(demo.tokenizer, demo.prompts[: args.prompts])
    print(f"{len(prompts)} held-out prompts × {args.new_tokens} new tokens, continuous batching, "
          f"one thread, greedy, median of {args.rounds} race(s); speed-ups over plain decoding "
          "in the same run; steps priced by "
          + (str(args.step_profile) if args.step_profile else "the demo's step profiles"))
    goals = []
    for kind in kinds:
        section = tables(demo, kind, batches, args.new_tokens, args.step_profile)
        measured, equal = {}, {}
        for b in batches:
            ks = [0, *ks_to_decode(section, b)]
            runs = [live(demo, kind, ks, prompts, b, args.new_tokens) for _ in range(args.rounds)]
            measured[b] = {k: statistics.median(r[0][k] for r in runs) for k in ks}
            equal[b] = {k: all(r[1][k] for r in runs) for k in ks}
        goals.append((kind, *report(kind, section, measured, equal)))
    print()
    for kind, at_least, ahead in goals:
        print(f"goal, {kind}: treeopt's table ≥ vLLM rule's live at every batch size: "
              f"{'met' if at_least else 'NOT met'}; ≥ 5% faster at one at least: "
              f"{'met' if ahead else 'NOT met'}")
    print(f"({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
