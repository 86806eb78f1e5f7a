"""Model sub-commands: train-heads, calibrate, trace merge."""

from __future__ import annotations

import argparse
import sys

from treeopt.cli.common import add_model_flags, counted, emit, load_model_from, progress
from treeopt.drafters import KIND_NAMES
from treeopt.errors import TreeoptError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-heads", help="train draft heads by self-distillation (base frozen)")
    add_model_flags(p)
    p.add_argument("--kind", choices=KIND_NAMES, required=True)
    p.add_argument("--data", nargs="+", required=True, metavar="FILE",
                   help="texts: JSONL with a 'prompt' field, text files or folders")
    p.add_argument("--generate", type=int, default=0, metavar="N",
                   help="extend each text with N greedy tokens of the base model first")
    from treeopt.drafters.config import TrainConfig

    for name, default in TrainConfig().__dict__.items():
        if name == "kind":
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(default, bool):
            p.add_argument(flag, action="store_true")
        else:
            p.add_argument(flag, type=type(default), default=default)
    p.add_argument("--out", required=True, metavar="DIR", help="heads directory to write")
    p.set_defaults(func=cmd_train_heads)

    p = sub.add_parser("calibrate", help="a rank trace of a model's heads on prompts")
    add_model_flags(p)
    p.add_argument("--heads", required=True, metavar="DIR")
    p.add_argument("--prompts", nargs="+", required=True, metavar="FILE")
    p.add_argument("--texts", action="store_true",
                   help="prompts are whole texts: the base model's argmax stands in for its "
                        "greedy continuation (an approximation; nothing is generated)")
    p.add_argument("--top-k", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--shard", metavar="i/n", help="default: RANK/WORLD_SIZE from torchrun, or 0/1")
    p.add_argument("--out", required=True, metavar="T.npz")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("trace", help="rank-trace utilities")
    tsub = p.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    m = tsub.add_parser("merge", help="concatenate calibration shards into one trace")
    m.add_argument("shards", nargs="+", metavar="SHARD.npz")
    m.add_argument("--out", required=True, metavar="T.npz")
    m.set_defaults(func=cmd_trace_merge)


def cmd_train_heads(args: argparse.Namespace) -> int:
    from treeopt.decoding.ranks import greedy_continuations
    from treeopt.drafters.checkpoints import save_heads
    from treeopt.drafters.training import TrainConfig, train_heads
    from treeopt.prompts import encode, read_texts

    fields = {k: getattr(args, k) for k in TrainConfig().__dict__ if k != "kind"}
    cfg = TrainConfig(kind=args.kind, **fields)
    texts = read_texts(args.data)
    model, tok = load_model_from(args)
    data = encode(tok, texts, source=" ".join(args.data))
    if args.generate > 0:
        data = greedy_continuations(model, data, max_new_tokens=args.generate)
    bar = progress(total=cfg.steps, desc="train-heads")

    def report(step: int, total: int, loss: float) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")

    heads, history = train_heads(model, data, cfg, progress=report)
    bar.close()
    save_heads(heads, args.out, meta={"base_model": args.model, "train": cfg.__dict__})
    last = history[-1]
    print(f"wrote {args.out}", file=sys.stderr)
    return emit({"heads": args.out, "kind": cfg.kind, "steps": cfg.steps,
                 "first_loss": history[0]["loss"], "final_loss": last["loss"],
                 "final_head_loss": last["head_loss"],
                 "final_top1_agreement": last["top1_agreement"]}, None)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate, parse_shard
    from treeopt.drafters.checkpoints import load_heads_for
    from treeopt.prompts import encode, read_texts

    shard, num_shards = parse_shard(args.shard)
    texts = read_texts(args.prompts)
    model, tok = load_model_from(args)
    heads = load_heads_for(model, args.heads)
    cfg = CalibrateConfig(top_k=args.top_k, max_new_tokens=args.max_new_tokens,
                          batch_size=args.batch_size, source="texts" if args.texts else "greedy",
                          shard=shard, num_shards=num_shards,
                          eos_token_id=getattr(tok, "eos_token_id", None))
    prompts = encode(tok, texts, source=" ".join(args.prompts))
    bar, report = counted(f"calibrate {shard}/{num_shards}", "batch")
    meta = {"model": args.model, "heads": args.heads, "prompts": " ".join(args.prompts)}
    trace, path = calibrate(model, heads, prompts, args.out, config=cfg, meta=meta,
                            progress=report)
    bar.close()
    return emit({"trace": str(path), "positions": trace.positions, "heads": trace.heads,
                 "top_k": trace.top_k, "sequences": trace.meta.get("sequences"),
                 "shard": f"{shard}/{num_shards}"}, None)


def cmd_trace_merge(args: argparse.Namespace) -> int:
    from treeopt.trace import RankTrace, merge_traces

    traces = [RankTrace.load(p) for p in args.shards]
    shards = [t.meta["shard"] for t in traces if "shard" in t.meta]
    if len(set(shards)) != len(shards):
        raise TreeoptError(f"trace merge: the same shard appears twice ({shards})")
    merged = merge_traces(traces)
    meta = {k: v for k, v in merged.meta.items() if k != "fingerprint"}
    meta["positions"] = merged.positions
    RankTrace(merged.ranks, meta).save(args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return emit({"trace": args.out, "positions": merged.positions, "shards": len(traces)}, None)
