"""Drafted-only steps against chains verified whole, on a demo's lookup drafters: predicted and
live (never a test; writes nothing in data/).

For prompt lookup and the n-gram trie (each the demo ships), on calibration and held-out traces
calibrated here once (``treeopt.decoding.calibrate``, as ``treeopt calibrate`` does: drafted
lengths recorded, each continuation stopped at EOS) into ``.cache/drafted-traces/<demo>/``
(``--traces`` names another folder), with the demo's top-k and batch and ``--new-tokens`` new
tokens: the walk covers every position a run of ``--new-tokens`` visits, as the run keeps it:

1. ``select`` on the calibration trace and the demo's step profile, at ``--batch``: with the
   chains verified whole (the shipped way) and with ``drafted_only`` (:mod:`treeopt.pricing.
   drafted`): each pick and its predicted speed-up;
2. live, the first ``--prompts`` held-out prompts × ``--new-tokens``, ``--rounds`` rounds: each
   pick decoded beside autoregressive decoding (steps interleaved, one run per pick), the steady
   tokens/s of both, the speed-up (median of the rounds), whether every output equals
   autoregressive decoding's; and the prediction for those prompts (their held-out walk,
   priced by the same profile) beside it.

``--demo`` names a demo in data/ (default the real model's, ``smollm2``; its base model must be
under .cache). Run pinned to a core of its own, the other idle, e.g. ``taskset -c 0 python
benchmarks/bench_drafted.py --prompts 16 --new-tokens 128``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

KINDS = ("prompt-lookup", "ngram-trie")
ROOT = Path(__file__).resolve().parents[1]


def drafted_traces(demo, kind: str, folder: Path, new_tokens: int):
    """The calibration and held-out traces of ``kind`` in ``folder``, calibrated there when
    missing (the base model's continuations kept beside them, decoded once)."""
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate
    from treeopt.decoding.continuations import ContinuationStore
    from treeopt.documents.prompts import encode, read_texts

    c, drafter = demo.manifest["config"], demo.heads[kind]
    config = CalibrateConfig(top_k=c["top_k"], max_new_tokens=new_tokens,
                             batch_size=c["calibration_batch"],
                             eos_token_id=demo.tokenizer.eos_token_id)
    out = []
    for part in ("calibration", "heldout"):
        path = folder / f"{kind}{'-heldout' if part == 'heldout' else ''}-{new_tokens}.npz"
        if not path.exists():
            print(f"calibrating {kind} on the {part} prompts into {path}", flush=True)
        prompts = encode(demo.tokenizer, read_texts([demo.paths.prompts(part)]))
        trace, _ = calibrate(demo.model, drafter, prompts, path, config=config,
                             meta={"model": demo.paths.root.name,
                                   "prompts": f"prompts/{part}.jsonl"},
                             continuations=ContinuationStore(folder / "continuations"))
        out.append(trace)
    return tuple(out)


def predicted_for(tree, family, trace, costs, batch, context) -> tuple[float, float]:
    """E[L] and speed-up of ``tree`` over ``trace`` (held-out prompts' walk), priced by
    ``costs``: drafted-only for a drafted chain, else the whole tree."""
    from treeopt.model.simulation import simulate
    from treeopt.pricing.drafted import DRAFTED_CHAIN, drafted_throughput
    from treeopt.pricing.throughput import price_tree

    if family == DRAFTED_CHAIN:
        ell, tp = drafted_throughput(trace, max_depth=tree.depth, verify=costs.verify,
                                     draft=costs.draft, overhead=costs.overhead, batch=batch,
                                     context=context)
        return float(ell[-1]), float(tp.tokens_per_s[-1] / tp.tokens_per_s[0])
    ell = simulate(tree, trace, per_step=True).mean_accept_length if tree.size else 1.0
    tree_tps, ar_tps = price_tree(tree, verify=costs.verify, draft=costs.draft,
                                  overhead=costs.overhead, batch=batch, context=context,
                                  expected_accept_length=ell)
    return float(ell), tree_tps / ar_tps


def live(demo, drafter, tree, prompts, config, batch, rounds) -> dict:
    """``tree`` beside autoregressive decoding, ``rounds`` times: steady tokens/s, the median
    speed-up, E[L], and whether every output equals autoregressive decoding's."""
    from treeopt.decoding.loop import Decoder, decode_alongside
    from treeopt.model.tree import Tree

    runs = [(Decoder(demo.model, drafter), tree), (Decoder(demo.model), Tree(()))]
    ups, rates, same, ell = [], [], True, []
    for _ in range(rounds):
        with_tree, plain = decode_alongside(runs, prompts, config=config, batch=batch)
        rate = [r.stats.decode_tokens / r.stats.decode_seconds for r in (with_tree, plain)]
        ups.append(rate[0] / rate[1])
        rates.append(rate)
        same = same and with_tree.tokens == plain.tokens
        ell = with_tree.stats.accept_lengths
    return {"speedup": statistics.median(ups), "spread": max(ups) - min(ups),
            "tokens_per_s": statistics.median(r[0] for r in rates),
            "ar_tokens_per_s": statistics.median(r[1] for r in rates),
            "ell": sum(ell) / len(ell), "lossless": same}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", default="smollm2", help="a demo in data/ (default smollm2)")
    ap.add_argument("--traces", type=Path, help="folder of traces with drafted lengths, made "
                    "there where missing (default .cache/drafted-traces/<demo>)")
    ap.add_argument("--prompts", type=int, default=16, help="held-out prompts (default 16)")
    ap.add_argument("--new-tokens", type=int, default=128, help="new tokens each (default 128)")
    ap.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    ap.add_argument("--rounds", type=int, default=2, help="live rounds (default 2)")
    args = ap.parse_args(argv)

    import torch
    from transformers.utils import logging

    from treeopt.decoding.config import DecodeConfig
    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.documents.prompts import encode
    from treeopt.pricing.sources import price, profiled_costs

    logging.set_verbosity_error()
    torch.set_num_threads(1)
    demo = load(demo_root(args.demo), threads=1)
    prompts = encode(demo.tokenizer, demo.prompts[: args.prompts])
    config = DecodeConfig(max_new_tokens=args.new_tokens,
                          eos_token_id=demo.tokenizer.eos_token_id)
    print(f"demo {demo.paths.root.name}: {len(prompts)} held-out prompts × {args.new_tokens} new "
          f"tokens, batch {args.batch}, {args.rounds} rounds, one thread, "
          f"{demo.manifest['config'].get('dtype', 'fp32')}; predicted: select's on the "
          "calibration trace, and these prompts' held-out walk")
    print(f"{'drafter':14} {'steps':14} {'pick':>8} {'select':>7} {'walk':>7} {'live':>7} "
          f"{'gap':>7} {'E[L] walk':>9} {'live':>6} {'tok/s':>6} {'AR':>5}  lossless")
    for kind in [k for k in KINDS if k in demo.kinds]:
        folder = args.traces or ROOT / ".cache" / "drafted-traces" / demo.paths.root.name
        trace, held = drafted_traces(demo, kind, folder, args.new_tokens)
        held = held.sequences(len(prompts))
        costs = profiled_costs(demo.step_profile(kind))
        context = costs.context()
        for drafted_only in (False, True):
            sel = price(demo.growths[kind], costs.verify, draft=costs.draft,
                        overhead=costs.overhead, batch=[args.batch], context=[context],
                        trace=trace, drafted_only=drafted_only)
            point = sel.points[0]
            ell, walk_up = predicted_for(point.tree, point.family, held, costs, args.batch,
                                         context)
            got = live(demo, demo.heads[kind], point.tree, prompts,
                       replace(config, drafted_only=drafted_only), args.batch, args.rounds)
            steps = "drafted only" if drafted_only else "whole chain"
            print(f"{kind:14} {steps:14} {point.tree.size:>6}n {point.speedup:>6.2f}× "
                  f"{walk_up:>6.2f}× {got['speedup']:>6.2f}× "
                  f"{(walk_up / got['speedup'] - 1) * 100:>+6.1f}% {ell:>9.3f} "
                  f"{got['ell']:>6.3f} {got['tokens_per_s']:>6.1f} {got['ar_tokens_per_s']:>5.1f}"
                  f"  {'yes' if got['lossless'] else 'NO'}", flush=True)
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
