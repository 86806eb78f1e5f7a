"""Hybrid trees on the shipped demo: prompt lookup's chain and a model drafter in one verified
tree (``<kind>+lookup``, :mod:`treeopt.drafters.hybrid`) against each of them alone (never a
test).

For every model drafter the demo ships:

1. **Per batch size, predicted** (the demo's measured step costs of that drafter, the
   calibration traces walked step by step): the best tree's tokens/s of the model drafter
   alone, of prompt lookup alone and of the hybrid, and which wins. The hybrid is priced with
   its model drafter's step profile, drafting only the model's own depths
   (:meth:`~treeopt.pricing.costs.DraftCost.first_depths`); prompt lookup with its own step profile
   where the demo ships one, else with the same verify and overhead and no drafting cost.
   ``--own-profile DIR``: the hybrid's own live step is profiled too (as the demo build profiles
   each drafter: its growth's design trees at the demo's batch sizes, the demo's step
   measurement; kept in ``DIR`` and resumed), and the hybrid is priced again by it — its
   drafting then holds the lookup and the host work of presetting the chain's tokens, which
   the model drafter's profile does not.
2. **Exactness, live at batch 1** on the first ``--prompts`` held-out prompts, greedy and
   sampled: the hybrid calibrated on them (:func:`treeopt.decoding.calibrate.calibrate`), then
   select's batch-1 tree decoded live; the trace's walk against live accepted lengths step by
   step, E[L] of both, and losslessness against plain decoding with the same sampling stream.
3. **Speed, live at batch 1** on the same prompts, interleaved, one thread: tokens/s of the
   batch-1 pick of the model drafter, of prompt lookup and of the hybrid.

Run: ``python benchmarks/bench_hybrid.py [--prompts 32] [--new-tokens 128] [--kinds eagle]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def lookup_trace(demo, lookup, *, new_tokens: int, temperature: float = 0.0):
    """Prompt lookup's calibration trace: the demo's when it ships one, else calibrated here
    over the calibration prompts (the demo traces' continuations, ``new_tokens`` long)."""
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate
    from treeopt.documents.prompts import encode, read_texts

    if "prompt-lookup" in demo.kinds and not temperature:
        return demo.traces["prompt-lookup"]
    prompts = encode(demo.tokenizer, read_texts([demo.paths.prompts("calibration")]))
    sampled = {"temperature": temperature, "seed": 0} if temperature else {}
    with tempfile.TemporaryDirectory() as tmp:
        trace, _ = calibrate(demo.model, lookup, prompts, Path(tmp) / "t.npz",
                             config=CalibrateConfig(top_k=4, max_new_tokens=new_tokens,
                                                    batch_size=16,
                                                    eos_token_id=demo.tokenizer.eos_token_id,
                                                    **sampled))
    return trace


def selections(demo, kind: str, chain, own=None):
    """The model drafter's, prompt lookup's and the hybrid's selections from the demo's
    calibration traces and measured step costs; with ``own`` (a function of the hybrid's
    growth giving its own step costs), the hybrid priced by those too (``<kind>+lookup, own
    profile``)."""
    from treeopt.drafters.hybrid import hybrid_trace
    from treeopt.model.growth import grow
    from treeopt.pricing.costs import NO_DRAFT
    from treeopt.pricing.sources import price, profiled_costs
    from treeopt.workbench.demo_pricing import demo_pricing

    costs = profiled_costs(demo.step_profile(kind))
    model = demo_pricing(demo, kind).selection
    joint = hybrid_trace(demo.traces[kind], chain)
    growth = grow(joint, method="empirical", max_nodes=demo.growths[kind].max_nodes)
    hybrid = price(growth, costs.verify, draft=costs.draft.first_depths(demo.traces[kind].heads),
                   overhead=costs.overhead, trace=joint)
    shipped = demo_pricing(demo, "prompt-lookup") if "prompt-lookup" in demo.kinds else None
    if shipped is not None:
        lookup = shipped.selection
    else:
        chain_growth = grow(chain, method="empirical", max_nodes=chain.heads)
        lookup = price(chain_growth, costs.verify, draft=NO_DRAFT, overhead=costs.overhead,
                       trace=chain)
    out = {kind: model, "prompt-lookup": lookup, kind + "+lookup": hybrid}
    if own is not None:
        mine = own(growth)
        out[kind + "+lookup, own profile"] = price(growth, mine.verify, draft=mine.draft,
                                                   overhead=mine.overhead, trace=joint)
    return out


def own_costs(demo, hybrid, growth, *, out: Path):
    """The hybrid's own step costs: its live step profiled as the demo build profiles a
    drafter's (the growth's design trees, the demo's batch sizes, new tokens and step
    measurement, on its calibration prompts), resumed from ``out``."""
    from treeopt.demo.config import DemoConfig
    from treeopt.documents.prompts import encode, read_texts
    from treeopt.pricing.sources import profiled_costs
    from treeopt.profiling.step import profile_steps

    flat = {k: tuple(v) if isinstance(v, list) else v  # the timing settings: no nested ones
            for k, v in demo.manifest["config"].items()
            if k in DemoConfig.__dataclass_fields__ and not isinstance(v, dict)}
    config = replace(DemoConfig(), **flat)
    prompts = encode(demo.tokenizer, read_texts([demo.paths.prompts("calibration")]))
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    profile_steps(demo.model, hybrid, growth, prompts[: max(config.live_batches)],
                  batch=list(config.live_batches), sizes=list(config.step_sizes), out=out,
                  max_new_tokens=config.live_new_tokens, measure=config.measurement("step"),
                  log=lambda line: print(f"  {line}", flush=True))
    print(f"  the hybrid's own step profile: {out} ({time.perf_counter() - started:.0f} s)")
    return profiled_costs(out)


def print_batches(kind: str, chosen: dict) -> None:
    """Per batch size at the middle context: each option's best tokens/s and the winner."""
    names = list(chosen)
    batches = sorted(set.intersection(*(set(s.batches) for s in chosen.values())))
    contexts = sorted(set.intersection(*(set(s.contexts) for s in chosen.values())))
    context = contexts[len(contexts) // 2]
    print(f"\n{kind}: predicted best tree per batch size (context {context}), tokens/s "
          f"(nodes)")
    print("  batch  " + "  ".join(f"{n:>22}" for n in names) + "  winner, hybrid(s) vs best alone")
    for b in batches:
        points = {n: chosen[n].point(b, context) for n in names}
        cells = "  ".join(f"{p.tokens_per_s:>15.1f} ({p.tree.size:>3})" for p in points.values())
        best = max(names, key=lambda n: points[n].tokens_per_s)
        alone = max(points[n].tokens_per_s for n in names[:2])
        ratios = ", ".join(f"{points[n].tokens_per_s / alone:.3f}×" for n in names[2:])
        print(f"  {b:>5}  {cells}  {best}, {ratios}")


def exactness(demo, heads, tree, prompts, *, new_tokens: int, temperature: float) -> str:
    """Calibrate ``heads`` on ``prompts``, decode each live with ``tree``: step-by-step
    agreement of walk and live, E[L] of both, and losslessness."""
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.exactness import walk_against_live

    eos = demo.tokenizer.eos_token_id
    sampled = {"temperature": temperature, "seed": 0} if temperature else {}
    with tempfile.TemporaryDirectory() as tmp:
        trace, _ = calibrate(demo.model, heads, prompts, Path(tmp) / "t.npz",
                             config=CalibrateConfig(top_k=16, max_new_tokens=new_tokens,
                                                    batch_size=8, eos_token_id=eos, **sampled))
    cfg = DecodeConfig(max_new_tokens=new_tokens, eos_token_id=eos,
                       **({"mode": "sample", **sampled} if temperature else {}))
    found = walk_against_live(demo.model, heads, tree, prompts, trace, cfg)
    return found.describe(f"sampled T={temperature:g}" if temperature else "greedy")


def race(demo, options: dict, prompts, *, new_tokens: int) -> None:
    """Tokens/s of each (drafter, tree) at batch 1 on ``prompts``, interleaved per prompt."""
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder

    cfg = DecodeConfig(max_new_tokens=new_tokens, eos_token_id=demo.tokenizer.eos_token_id)
    decoders = {n: (Decoder(demo.model, h), t) for n, (h, t) in options.items()}
    seconds = dict.fromkeys(options, 0.0)
    tokens = dict.fromkeys(options, 0)
    steps = dict.fromkeys(options, 0)
    outputs: dict[str, list] = {n: [] for n in options}
    for ids in prompts:
        for name, (dec, tree) in decoders.items():
            start = time.perf_counter()
            out = dec.decode(tree, [ids], config=cfg)
            seconds[name] += time.perf_counter() - start
            tokens[name] += len(out.tokens[0])
            steps[name] += len(out.stats.accept_lengths)
            outputs[name].append(out.tokens[0])
    first = next(iter(outputs.values()))
    same = all(o == first for o in outputs.values())
    print(f"  live at batch 1, {len(prompts)} held-out prompts × {new_tokens} tokens "
          f"(outputs identical: {same}):")
    for name in options:
        print(f"    {name:>28}: {tokens[name] / seconds[name]:7.1f} tokens/s "
              f"({options[name][1].size} nodes; {tokens[name] / steps[name]:.3f} tokens a step, "
              f"{seconds[name] / steps[name] * 1e3:.2f} ms a step)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=32, help="held-out prompts (default 32)")
    ap.add_argument("--new-tokens", type=int, default=128, help="new tokens each (default 128)")
    ap.add_argument("--kinds", default="", help="model drafters, comma-separated (default: all "
                    "the demo ships)")
    ap.add_argument("--chain-depth", type=int, default=16,
                    help="prompt lookup's deepest chain (default 16)")
    ap.add_argument("--max-n", type=int, default=3, help="longest n-gram matched (default 3)")
    ap.add_argument("--temperature", type=float, default=0.7,
                    help="the sampled check's temperature (default 0.7; 0: none)")
    ap.add_argument("--own-profile", type=Path, metavar="DIR",
                    help="also profile each hybrid's own step (kept in DIR, resumed) and price "
                         "the hybrid by it")
    args = ap.parse_args(argv)

    import torch

    from treeopt.demo import load
    from treeopt.drafters.hybrid import HybridDrafter
    from treeopt.drafters.prompt_lookup import PromptLookup
    from treeopt.registry.kinds import drafter_kind

    torch.set_num_threads(1)
    demo = load(threads=1)
    lookup = PromptLookup(depth=args.chain_depth, max_n=args.max_n,
                          vocab_size=len(demo.tokenizer))
    chain = lookup_trace(demo, lookup, new_tokens=demo.traces["eagle"].meta["max_new_tokens"])
    # model drafters only: the n-gram ones (prompt lookup, the trie, suffix decoding) join no hybrid
    kinds = [k for k in (args.kinds.split(",") if args.kinds else demo.kinds)
             if not drafter_kind(k).lookup and demo.step_profile(k) is not None]
    prompts = [demo.tokenizer(t)["input_ids"] for t in demo.prompts[: args.prompts]]
    print(f"hybrid = model drafter + prompt lookup (n-grams 1…{args.max_n}, chain ≤ "
          f"{args.chain_depth}); demo {demo.paths.root}")
    for kind in kinds:
        hybrid = HybridDrafter(demo.heads[kind], lookup)
        own = None
        if args.own_profile is not None:
            def own(growth, kind=kind, hybrid=hybrid):
                return own_costs(demo, hybrid, growth,
                                 out=args.own_profile / f"step-{kind}+lookup-cpu.json")
        chosen = selections(demo, kind, chain, own)
        print_batches(kind, chosen)
        pick = {n: s.tree_at(1, min(s.contexts)) for n, s in chosen.items()}
        print(f"  batch-1 hybrid tree: {pick[kind + '+lookup'].size} nodes, depth "
              f"{pick[kind + '+lookup'].depth}")
        for temperature in (0.0, args.temperature) if args.temperature else (0.0,):
            print("  " + exactness(demo, hybrid, pick[kind + "+lookup"], prompts,
                                   new_tokens=args.new_tokens, temperature=temperature))
        options = {kind: (demo.heads[kind], pick[kind]),
                   "prompt-lookup": (lookup, pick["prompt-lookup"]),
                   kind + "+lookup": (hybrid, pick[kind + "+lookup"])}
        own_pick = pick.get(kind + "+lookup, own profile")
        if own_pick is not None and own_pick != pick[kind + "+lookup"]:
            options[kind + "+lookup, own profile's pick"] = (hybrid, own_pick)
        race(demo, options, prompts, new_tokens=args.new_tokens)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
