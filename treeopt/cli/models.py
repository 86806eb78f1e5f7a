"""Model sub-commands: train-heads, calibrate, verify, trace merge."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from treeopt.cli.common import add_out, emit, progress
from treeopt.drafters import KIND_NAMES
from treeopt.errors import TreeoptError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-heads", help="train draft heads by self-distillation (base frozen)")
    _add_model(p)
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
    _add_model(p)
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

    p = sub.add_parser("verify", help="decode with a tree for real: acceptance, tokens/s, match")
    _add_model(p)
    p.add_argument("--heads", required=True, metavar="DIR")
    p.add_argument("--tree", required=True, metavar="TREE")
    p.add_argument("--size", type=int, metavar="N", help="tree size, for growth files")
    p.add_argument("--prompts", nargs="+", required=True, metavar="FILE")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--trace", metavar="T.npz", help="predict E[L] from this trace, for comparison")
    p.add_argument("--mode", choices=("greedy", "typical"), default="greedy")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--posterior-threshold", type=float, default=0.09, help="ε")
    p.add_argument("--posterior-alpha", type=float, help="α (default √ε)")
    p.add_argument("--seed", type=int, default=0)
    add_out(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("trace", help="rank-trace utilities")
    tsub = p.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    m = tsub.add_parser("merge", help="concatenate calibration shards into one trace")
    m.add_argument("shards", nargs="+", metavar="SHARD.npz")
    m.add_argument("--out", required=True, metavar="T.npz")
    m.set_defaults(func=cmd_trace_merge)


def _add_model(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="DIR", help="local Hugging Face model")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, …")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16, float16, float64")
    p.add_argument("--device-map", help="passed to from_pretrained (e.g. auto)")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads for torch (default: torch's choice; 1 is fastest for tiny "
                        "models and on busy machines)")


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    from treeopt.decoding.models import ModelSpec, load_model

    return load_model(ModelSpec(path=args.model, device=args.device, dtype=args.dtype,
                                device_map=args.device_map,
                                trust_remote_code=args.trust_remote_code, threads=args.threads))


def cmd_train_heads(args: argparse.Namespace) -> int:
    from treeopt.decoding.ranks import greedy_continuations
    from treeopt.drafters.checkpoints import save_heads
    from treeopt.drafters.training import TrainConfig, train_heads
    from treeopt.prompts import encode, read_texts

    fields = {k: getattr(args, k) for k in TrainConfig().__dict__ if k != "kind"}
    cfg = TrainConfig(kind=args.kind, **fields)
    texts = read_texts(args.data)
    model, tok = _load(args)
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
    model, tok = _load(args)
    heads = load_heads_for(model, args.heads)
    cfg = CalibrateConfig(top_k=args.top_k, max_new_tokens=args.max_new_tokens,
                          batch_size=args.batch_size, source="texts" if args.texts else "greedy",
                          shard=shard, num_shards=num_shards,
                          eos_token_id=getattr(tok, "eos_token_id", None))
    prompts = encode(tok, texts, source=" ".join(args.prompts))
    bar = progress(desc=f"calibrate {shard}/{num_shards}", unit="batch")

    def report(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    meta = {"model": args.model, "heads": args.heads, "prompts": " ".join(args.prompts)}
    trace, path = calibrate(model, heads, prompts, args.out, config=cfg, meta=meta,
                            progress=report)
    bar.close()
    return emit({"trace": str(path), "positions": trace.positions, "heads": trace.heads,
                 "top_k": trace.top_k, "sequences": trace.meta.get("sequences"),
                 "shard": f"{shard}/{num_shards}"}, None)


def cmd_verify(args: argparse.Namespace) -> int:
    from treeopt.decoding.loop import DecodeConfig
    from treeopt.decoding.verify import check_tree_for, verify
    from treeopt.drafters.checkpoints import load_heads_for
    from treeopt.formats import load_tree_arg
    from treeopt.prompts import encode, read_texts
    from treeopt.trace import RankTrace

    tree = load_tree_arg(args.tree, size=args.size)
    trace = RankTrace.load(args.trace) if args.trace else None
    if trace is not None:  # fail before loading a model
        check_tree_for(tree, num_heads=trace.heads, trace=trace, source=args.tree)
    texts = read_texts(args.prompts)
    model, tok = _load(args)
    heads = load_heads_for(model, args.heads)
    check_tree_for(tree, num_heads=heads.config.num_heads, trace=trace, source=args.tree)
    cfg = DecodeConfig(max_new_tokens=args.max_new_tokens, mode=args.mode,
                       temperature=args.temperature, posterior_threshold=args.posterior_threshold,
                       posterior_alpha=args.posterior_alpha, seed=args.seed,
                       eos_token_id=getattr(tok, "eos_token_id", None))
    prompts = encode(tok, texts, source=" ".join(args.prompts))
    report = verify(model, heads, tree, prompts, config=cfg, trace=trace)
    report.update({"model": args.model, "heads_dir": args.heads, "device": args.device,
                   "dtype": args.dtype})
    return emit(report, args.out)


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
