"""What better draft heads would buy on the shipped demo: head variants trained as the demo
build trains them, priced by ``select`` and decoded live against the shipped heads (never a test).

At batch 1 a tree step on the demo is the verify forward plus a little drafting, both near
what the CPU allows, so what is left to gain is acceptance. This benchmark asks how much a different head recipe gives before anyone spends the
four hours a demo rebuild takes. For each variant ``LAYERSxSTEPS`` (residual blocks per head,
training steps):

1. train the heads on the build's own self-distillation data (``treeopt.demo.stages.head_data``,
   regenerated here with the demo's seed) with the build's optimiser settings: ``2x937``
   is the build's default recipe and reproduces the Medusa heads a build trains with it, to one
   float16 step on a few weights, with the same held-out agreement and trace E[L];
2. top-1 agreement per depth with the base model on held-out text (greedy continuations of
   held-out prompts, which no variant trained on);
3. a rank trace over ``--prompts`` calibration prompts, the trees grown from it, and ``select``'s
   batch-1 pick and predicted speed-up from the shipped step profile (whose drafting costs are
   those of the shipped 2-block heads; a deeper head drafts a little slower, so ``--profile``
   times every variant's own step here, at batch 1, and prices from that);
4. with ``--live``, that pick decoded against autoregressive decoding and against the shipped
   heads' pick of the same size, interleaved prompt by prompt, on held-out prompts (the paired
   speed-ups, per round, and whether every output equals autoregressive decoding's).

Run: ``python benchmarks/bench_heads.py --variants 2x937,4x937 --live --out bench-heads`` (the
trained heads, traces and head data stay in ``--out``, so a second run reuses them). On the 2-core
CPU: head data 4 minutes, training 6–7 minutes per 937 steps of 2-block heads (8–9 with 4 blocks), a
160-prompt trace 2 minutes, ``--profile`` 3 minutes and ``--live`` 4 minutes per variant.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from treeopt.decoding.calibrate import CalibrateConfig, calibrate
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.loop import Decoder
from treeopt.decoding.models import model_dims
from treeopt.decoding.rank_pass import greedy_continuations
from treeopt.demo import load, stages
from treeopt.demo.config import plan
from treeopt.documents.prompts import encode, read_texts
from treeopt.drafters.heads import build_heads
from treeopt.drafters.training import distill_loss, train_heads, windows
from treeopt.model.growth import grow
from treeopt.model.tree import Tree
from treeopt.pricing.sources import profiled_costs
from treeopt.pricing.throughput import select
from treeopt.profiling.step import profile_steps
from treeopt.registry.drafter_configs import TrainConfig
from treeopt.registry.kinds import drafter_kind

HELDOUT_SEQUENCES = 96  # held-out prompts continued greedily for the agreement check
PROFILE_SEQUENCES = 8  # held-out prompts a --profile step profile decodes (as bench_live's)
PROFILE_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)  # the trees it times (select's picks: 3–8)


def demo_config(demo):
    """The demo's build settings, planned again from its recorded command, and checked against
    what its manifest records."""
    recorded = demo.manifest["config"]
    config = plan(budget_minutes=recorded["budget_minutes"], device=recorded["device"],
                  seed=recorded["seed"], base_layers=recorded["base"]["num_layers"],
                  medusa_head_layers=recorded.get("medusa_head_layers"))
    for key in ("head_steps", "head_layers", "head_batch", "head_lr", "head_seq_len",
                "head_data_prompts", "head_prefix_attention"):
        if getattr(config, key) != recorded[key]:
            sys.exit(f"bench_heads: the demo's {key} ({recorded[key]}) is not what its command "
                     f"plans ({getattr(config, key)}); rebuild it or point --demo-dir at a demo "
                     "this version built")
    return config


def head_data(demo, config, out: Path) -> list[list[int]]:
    """The build's self-distillation rows, made as the build makes them (cached in ``out``)."""
    ctx = stages.Context(config, demo.paths, out, lambda line: print(line, file=sys.stderr))
    ctx.loaded["model"] = demo.model
    if not (out / "head-data.npy").exists():
        print("head data: continuing the build's train prompts greedily …", file=sys.stderr)
        stages.head_data(ctx)
    return np.load(out / "head-data.npy", allow_pickle=False).tolist()


def heldout_rows(demo, config, out: Path) -> torch.Tensor:
    path = out / "heldout-continuations.npy"
    if not path.exists():
        prompts = encode(demo.tokenizer, read_texts([demo.paths.prompts("heldout")]))
        rows = []
        for i in range(0, HELDOUT_SEQUENCES, 48):
            batch = prompts[i: i + 48]
            new = config.head_seq_len - min(len(p) for p in batch)
            rows += [s[: config.head_seq_len]
                     for s in greedy_continuations(demo.model, batch, max_new_tokens=new)]
        np.save(path, np.asarray(rows, dtype=np.int32))
    return windows(np.load(path, allow_pickle=False).tolist(), config.head_seq_len)


def agreement(demo, heads, rows: torch.Tensor) -> list[float]:
    """Top-1 agreement per depth with the base model on ``rows``."""
    per_batch = []
    with torch.no_grad():
        for i in range(0, len(rows), 8):
            per_batch.append(distill_loss(demo.model, heads, rows[i: i + 8])[2])
    return np.mean(per_batch, 0).tolist()


def train_variant(demo, config, kind: str, layers: int, steps: int, rows, out: Path):
    """Heads of ``layers`` blocks trained ``steps`` steps as the build trains them (cached)."""
    cfg = TrainConfig(kind=kind, num_heads=config.num_heads, num_layers=layers,
                      share_lm_head=True, steps=steps, batch_size=config.head_batch,
                      prefix_attention=config.head_prefix_attention
                      and drafter_kind(kind).prefix_attention, seq_len=config.head_seq_len,
                      lr=config.head_lr, warmup=max(1, steps // 20),
                      seed=config.seed + 1 + stages.DRAFTERS.index(kind))
    path = out / f"{kind}-{layers}x{steps}.pt"
    if not path.exists():  # train_heads seeds before it builds the heads, as the build does
        print(f"training {kind} heads {layers}x{steps} …", file=sys.stderr)
        checkpoint = out / f"{kind}-{layers}x{steps}-checkpoint.pt"
        trained, _ = train_heads(demo.model, rows, cfg, checkpoint=checkpoint)
        torch.save(trained.state_dict(), path)
        checkpoint.unlink(missing_ok=True)
        return trained
    hidden, vocab = model_dims(demo.model)
    heads = build_heads(cfg.heads_config(hidden, vocab,
                                         base_layers=demo.model.config.num_hidden_layers),
                        lm_head=demo.model.get_output_embeddings(),
                        embeddings=demo.model.get_input_embeddings())
    heads.load_state_dict(torch.load(path, weights_only=True))
    return heads.eval()


def price(demo, kind: str, heads, name: str, args, out: Path):
    """E[L] by size on a trace of the calibration prompts, and select's batch-1 pick."""
    prompts = encode(demo.tokenizer, read_texts([demo.paths.prompts("calibration")]))
    path = out / f"trace-{kind}-{name}-{args.prompts}x{args.new_tokens}.npz"
    trace, _ = calibrate(demo.model, heads, prompts[: args.prompts], path,
                         config=CalibrateConfig(top_k=16, max_new_tokens=args.new_tokens,
                                                batch_size=16),
                         meta={"model": "treeopt demo", "heads": name})
    growth = grow(trace, method="empirical", max_nodes=64)
    profile = demo.step_profile(kind)
    if args.profile:  # these heads' own step, timed on this machine now
        profile = out / f"step-{kind}-{name}.json"
        decoded = [demo.tokenizer(p)["input_ids"] for p in demo.prompts[:PROFILE_SEQUENCES]]
        profile_steps(demo.model, heads, growth, decoded, batch=[1], out=profile,
                      sizes=PROFILE_SIZES, log=lambda _: None)
    costs = profiled_costs(profile)
    pick = select(growth, costs.verify, draft=costs.draft, overhead=costs.overhead, batch=[1],
                  context=costs.verify.contexts, trace=trace).points[0]
    return growth, pick


def live(demo, kind: str, contenders: dict[str, tuple[object, Tree]], args) -> dict[str, list[float]]:
    """Steady tokens/s of each contender over autoregressive decoding's, per round, every
    decoding of a prompt run back to back (order alternating), after a warm-up."""
    prompts = [demo.tokenizer(p)["input_ids"] for p in demo.prompts[: args.live_prompts]]
    config = DecodeConfig(max_new_tokens=args.new_tokens)
    runs = {"autoregressive": (Decoder(demo.model), Tree(()))}
    runs.update({name: (Decoder(demo.model, heads), tree)
                 for name, (heads, tree) in contenders.items()})
    for decoder, tree in runs.values():
        decoder.decode(tree, prompts[:1], config=DecodeConfig(max_new_tokens=8))
    rate = {name: [] for name in runs}
    outputs: dict[tuple[int, str], tuple] = {}
    for r in range(args.rounds):
        seconds, tokens = dict.fromkeys(runs, 0.0), dict.fromkeys(runs, 0)
        for i, prompt in enumerate(prompts):
            for name in (list(runs) if (i + r) % 2 == 0 else list(runs)[::-1]):
                decoder, tree = runs[name]
                res = decoder.decode(tree, [prompt], config=config)
                seconds[name] += res.stats.decode_seconds
                tokens[name] += res.stats.decode_tokens
                outputs.setdefault((i, name), res.tokens)
        for name in runs:
            rate[name].append(tokens[name] / seconds[name])
    speedups = {name: [t / a for t, a in zip(rate[name], rate["autoregressive"], strict=True)]
                for name in contenders}
    speedups["lossless"] = [all(outputs[i, n] == outputs[i, "autoregressive"]
                                for i in range(len(prompts)) for n in runs)]
    return speedups


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--demo-dir", help="default: the shipped data/demo")
    ap.add_argument("--kind", default="medusa", choices=stages.HEAD_KINDS)
    ap.add_argument("--variants", default="2x937,4x937",
                    help="LAYERSxSTEPS per variant: residual blocks per head × training steps")
    ap.add_argument("--prompts", type=int, default=160, help="calibration prompts per trace")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--profile", action="store_true",
                    help="price each variant from its own step profile, timed here at batch 1 "
                         "(default: the shipped profile of the shipped heads)")
    ap.add_argument("--live", action="store_true", help="decode each pick live (paired)")
    ap.add_argument("--live-prompts", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", help="where head data, heads, traces and results go")
    args = ap.parse_args()
    try:
        variants = [tuple(int(x) for x in v.split("x")) for v in args.variants.split(",")]
        assert all(len(v) == 2 and min(v) > 0 for v in variants)
    except (ValueError, AssertionError):
        ap.error(f"--variants {args.variants!r}: expected LAYERSxSTEPS[,…], e.g. 2x937,4x937")
    torch.set_num_threads(1)
    out = Path(args.out or tempfile.mkdtemp(prefix="bench-heads-"))
    out.mkdir(parents=True, exist_ok=True)
    demo = load(args.demo_dir, threads=1)
    config = demo_config(demo)
    rows, held = head_data(demo, config, out), heldout_rows(demo, config, out)
    kind = args.kind
    shipped = demo.heads[kind]
    results = {}
    table = {"shipped": shipped}
    for layers, steps in variants:
        table[f"{layers}x{steps}"] = train_variant(demo, config, kind, layers, steps, rows, out)
    picks = {}
    for name, heads in table.items():
        growth, pick = price(demo, kind, heads, name, args, out)
        picks[name] = (heads, pick.tree, growth)
        results[name] = {
            "heldout_top1_agreement": agreement(demo, heads, held),
            # a growth whose candidates run out (meta "exhausted") stops short of 64 nodes
            "accept_length": {n: float(growth.headline_accept_length[n])
                              for n in (1, 2, 4, 8, 16, 64) if n <= growth.max_nodes},
            "acceptance": growth.acceptance,
            "pick": {"size": pick.tree.size, "choices": pick.tree.as_choices(),
                     "predicted_speedup": pick.speedup}}
        print(f"{name:>8}: held-out top-1 "
              f"{' / '.join(f'{a:.3f}' for a in results[name]['heldout_top1_agreement'])}; "
              f"E[L] ({growth.acceptance}) at 4 / 16 nodes {growth.headline_accept_length[4]:.3f} / "
              f"{growth.headline_accept_length[16]:.3f}; select's batch-1 pick {pick.tree.size} "
              f"nodes, predicted {pick.speedup:.3f}×", flush=True)
    if args.live:
        for name, (heads, tree, _) in picks.items():
            if name == "shipped":
                continue
            if not tree.size:
                print(f"{name:>8} live: select picks no tree, nothing to decode", flush=True)
                continue
            same_size = picks["shipped"][2].tree(tree.size)  # the shipped heads' tree of that size
            got = live(demo, kind, {"shipped": (shipped, same_size), name: (heads, tree)}, args)
            results[name]["live"] = got
            print(f"{name:>8} live, {tree.size} nodes, {args.live_prompts} held-out prompts × "
                  f"{args.new_tokens} tokens: {statistics.median(got[name]):.3f}× "
                  f"autoregressive (rounds {', '.join(f'{s:.3f}' for s in got[name])}) against "
                  f"the shipped heads' {statistics.median(got['shipped']):.3f}× (rounds "
                  f"{', '.join(f'{s:.3f}' for s in got['shipped'])}); lossless: "
                  f"{got['lossless'][0]}", flush=True)
    (out / f"result-{kind}.json").write_text(json.dumps(results, indent=1))
    print(f"results in {out / f'result-{kind}.json'}", file=sys.stderr)


if __name__ == "__main__":
    main()
