"""A demo's sweeps measured again with each batch size's points timed together (one
autoregressive decoding a round against every tree, ``tune(together=True)``): what it saves,
and whether the points still land on the step-cost model's prediction.

    python benchmarks/bench_sweep_together.py --demo smollm2 --out DIR
        [--kinds K,K] [--apart K,K] [--batches 1,2,4,8] [--within 0.05]

For each drafter of ``--kinds`` (default: every one the demo has) and each of its shipped
sweeps (a lookup drafter's also verified as drafted): the sweep's growth-order trees at each
batch size measured together, as the demo build measures them (the same held-out prompts, new
tokens, end of sequence, and the shipped sweep's timing at that batch size). The drafters of
``--apart`` are measured point by point as well, in the same run (each batch size's two ways
in turn, alternating which goes first), so the two ways' seconds are paired. Printed per point:
the shipped speed-up, this run's together (and apart), each ± its standard error with the
demo's prediction over it minus one (:func:`~treeopt.workbench.demo_pricing.held_out_pricing`);
per sweep the seconds each way; at the end the points within ``--within`` each way and the
seconds. One torch thread; pin it (``taskset -c 0``) with the other core idle. Written under
``--out`` only, and resumed from there; the demo is not changed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if TYPE_CHECKING:
    from treeopt.documents.sweep import Sweep

WAYS = ("shipped", "together", "apart")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", default="smollm2", help="a demo in data/ or its directory")
    ap.add_argument("--kinds", help="comma-separated drafter kinds (default: the demo's)")
    ap.add_argument("--apart", default="", help="kinds also measured point by point")
    ap.add_argument("--out", type=Path, required=True, help="where the new sweeps go")
    ap.add_argument("--batches", default="1,2,4,8", help="comma-separated batch sizes")
    ap.add_argument("--within", type=float, default=0.05)
    args = ap.parse_args()

    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.documents.prompts import encode, read_texts
    from treeopt.errors import TreeoptError

    demo = load(demo_root(args.demo), threads=1)
    kinds = [k for k in (args.kinds or ",".join(demo.kinds)).split(",") if k]
    apart = [k for k in args.apart.split(",") if k]
    if unknown := [k for k in {*kinds, *apart} if k not in demo.kinds]:
        raise TreeoptError(f"--kinds/--apart: {', '.join(unknown)} not in the demo "
                           f"({', '.join(demo.kinds)})")
    args.out.mkdir(parents=True, exist_ok=True)
    heldout = encode(demo.tokenizer, read_texts([demo.paths.prompts("heldout")]))
    batches = [int(b) for b in args.batches.split(",") if b]
    counts = {way: [0, 0] for way in WAYS}  # within, of
    seconds = {way: 0.0 for way in WAYS[1:]}
    paired = {way: 0.0 for way in WAYS[1:]}  # the drafters measured both ways
    for kind in kinds:
        for drafted in (False, True):
            path = demo.sweep(kind, drafted=drafted)
            if path is None:  # a lookup drafter's chains verified as drafted, where shipped
                continue
            spent = _sweeps(demo, kind, path, heldout, batches, args, drafted=drafted,
                            both=kind in apart, counts=counts)
            for way, s in spent.items():
                seconds[way] += s
                if kind in apart:
                    paired[way] += s
    for way, (within, of) in counts.items():
        if of:
            print(f"{way}: {within} of {of} points within {args.within:.0%} of the prediction")
    print(f"measured together: {seconds['together']:.0f} s"
          + (f"; the drafters measured both ways: together {paired['together']:.0f} s, apart "
             f"{paired['apart']:.0f} s ({paired['apart'] / paired['together']:.2f}×)"
             if paired["apart"] else ""))
    return 0


def _sweeps(demo: Any, kind: str, path: Path, heldout: list[list[int]], batches: list[int],
            args: argparse.Namespace, *, drafted: bool, both: bool,
            counts: dict[str, list[int]]) -> dict[str, float]:
    """One shipped sweep measured again, batch size by batch size: together, and apart too
    where ``both`` (alternating which goes first); the points printed; seconds each way."""
    from treeopt.documents.sweep import Sweep
    from treeopt.workbench.demo_pricing import held_out_pricing

    shipped = Sweep.load(path)
    pricing = held_out_pricing(demo, kind, demo.step_costs(kind), shipped)
    name = f"{kind}{'-drafted' if drafted else ''}"
    spent = {"together": 0.0, "apart": 0.0}
    new: dict[str, Sweep] = {}
    for i, b in enumerate(b for b in batches if b in shipped.batches):
        ways = ["together", "apart"] if both else ["together"]
        for way in ways if i % 2 == 0 else ways[::-1]:
            begin = time.perf_counter()
            new[way] = _measured(demo, kind, shipped, heldout, b, args.out / f"{name}-{way}.json",
                                 drafted=drafted, together=way == "together")
            spent[way] += time.perf_counter() - begin
    print(f"{name}: " + ", ".join(f"{way} {s:.0f} s" for way, s in spent.items() if s))
    for point in (p for p in shipped.points if p.family is None and p.size > 0):
        cells = []
        for way, sweep in (("shipped", shipped), *new.items()):
            p = next((q for q in sweep.points if q.key == point.key), None)
            if p is None:
                continue
            error = pricing.predict(_tree(p), p.batch, drafted=drafted).speedup / p.speedup - 1
            counts[way][0] += abs(error) <= args.within
            counts[way][1] += 1
            cells.append(f"{way} {p.speedup:.3f} ±{(p.se or 0):.1%} ({error:+.1%})")
        if len(cells) > 1:
            print(f"  batch {point.batch}, {point.size} nodes: " + " · ".join(cells))
    return spent


def _measured(demo: Any, kind: str, shipped: Sweep, heldout: list[list[int]], batch: int,
              out: Path, *, drafted: bool, together: bool) -> Sweep:
    """The shipped sweep's growth-order trees at ``batch`` measured as the build sweeps them
    (its prompts and new tokens, rows stopping at EOS, its timing there), into ``out``."""
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.live_sweep import tune
    config = demo.manifest["config"]
    sizes = sorted({p.size for p in shipped.points
                    if p.batch == batch and p.family is None and p.size > 0})
    return tune(demo.model, demo.heads[kind], demo.growths[kind],
                heldout[: config["sweep_prompts"]], batch=[batch], sizes=sizes, out=out,
                measure=shipped.measurement(batch),
                drafted=drafted, together=together,
                config=DecodeConfig(max_new_tokens=config["live_new_tokens"],
                                    eos_token_id=demo.tokenizer.eos_token_id))


def _tree(point: Any) -> Any:
    from treeopt.model.tree import Tree

    return Tree.from_choices([list(c) for c in point.choices])


if __name__ == "__main__":
    from entry import run

    run(main)
