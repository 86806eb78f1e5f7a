"""Model sub-commands: train-heads, calibrate, trace merge."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from treeopt.cli.common import (
    add_heads_flag,
    add_model_flags,
    add_prompts_flag,
    add_sampling_filters,
    counted,
    emit,
    int_list,
    load_drafter_from,
    load_model_from,
    progress,
    require,
)
from treeopt.errors import TreeoptError
from treeopt.registry.kinds import TRAINED_KINDS

if TYPE_CHECKING:
    from treeopt.dynamic.simulate import DynamicTrace

# TrainConfig field -> (metavar, help) of its train-heads flag; defaults come from TrainConfig
TRAIN_FLAGS = {
    "num_heads": ("K", "draft heads; head k (from 0) drafts the token k+1 places after the "
                       "base model's own next token"),
    "num_layers": ("N", "layers per head: residual blocks (Hydra: its input layer counts)"),
    "share_lm_head": (None, "project with the base model's frozen LM head instead of a trained "
                            "copy per head (saves vocabulary × hidden weights per head)"),
    "prefix_attention": (None, "Hydra++: an extra decoder layer over the base hidden states "
                               "(--kind hydra only)"),
    "steps": ("N", "optimiser steps"),
    "batch_size": ("N", "windows per step"),
    "seq_len": ("N", "tokens per training window; cut to the tokens the data hold and to the "
                     "model's context when longer"),
    "lr": ("LR", "peak AdamW learning rate"),
    "weight_decay": ("WD", "AdamW weight decay"),
    "warmup": ("N", "linear warm-up steps before the cosine decay"),
    "decay": ("D", "head k's loss is weighted D^k"),
    "seed": ("N", "random seed of the heads' initialisation and of batch sampling"),
    "teacher_top_k": ("K", "compute the base model's features and its K most probable next "
                           "tokens once, and score each step over the batch's candidate tokens "
                           "(fast on a large vocabulary); 0: the full vocabulary every step"),
}


def register(sub: argparse._SubParsersAction) -> None:
    _register_train_heads(sub)
    _register_calibrate(sub)
    _register_calibrate_dynamic(sub)
    p = sub.add_parser("trace", help="rank-trace utilities")
    tsub = p.add_subparsers(dest="trace_command", metavar="ACTION", required=True)
    m = tsub.add_parser("merge", help="concatenate calibration shards into one trace")
    m.add_argument("shards", nargs="+", metavar="SHARD.npz",
                   help="the shards calibrate wrote (T.shard-i-of-n.npz)")
    m.add_argument("--out", required=True, metavar="T.npz", help="the merged trace (required)")
    m.set_defaults(func=cmd_trace_merge)


def _register_train_heads(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-heads", help="train draft heads by self-distillation (base frozen)")
    add_model_flags(p)
    p.add_argument("--kind", choices=TRAINED_KINDS, required=True, help="drafter kind (required)")
    p.add_argument("--data", nargs="+", required=True, metavar="FILE",
                   help="texts: JSONL with a 'prompt' field, text files or folders (required)")
    p.add_argument("--generate", type=int, default=0, metavar="N",
                   help="extend each text with N greedy tokens of the base model first, so the "
                        "heads learn the model's own text (default %(default)s: train on the "
                        "texts as they are)")
    from treeopt.registry.drafter_configs import TrainConfig

    for name, default in TrainConfig().__dict__.items():
        if name == "kind":
            continue
        flag = "--" + name.replace("_", "-")
        metavar, text = TRAIN_FLAGS.get(name, (None, ""))
        if isinstance(default, bool):
            p.add_argument(flag, action="store_true", help=text)
        else:
            p.add_argument(flag, type=type(default), default=default, metavar=metavar,
                           help=f"{text} (default %(default)s)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="heads directory to write: heads.json and heads.safetensors (required)")
    p.add_argument("--force", action="store_true",
                   help="replace the heads in an --out directory that is not empty")
    p.set_defaults(func=cmd_train_heads, writes_directory=True)


def _register_calibrate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="a rank trace of a model's heads on prompts")
    add_model_flags(p)
    add_heads_flag(p)
    add_prompts_flag(p)
    p.add_argument("--texts", action="store_true",
                   help="prompts are whole texts: the base model's argmax stands in for its "
                        "greedy continuation (an approximation; nothing is generated)")
    p.add_argument("--top-k", type=int, default=16, metavar="K",
                   help="ranks recorded per head; a rank beyond is stored as -1 (default "
                        "%(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N",
                   help="greedy tokens generated per prompt (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=8, metavar="N",
                   help="prompts per chunk: decoded together, and saved as one part for "
                        "resuming (default %(default)s)")
    p.add_argument("--shard", metavar="i/n",
                   help="take chunks i, i+n, … and write T.shard-i-of-n.npz (default: "
                        "RANK/WORLD_SIZE from torchrun, or 0/1)")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T",
                   help="continue the prompts by sampling at T (per-position seeded, as "
                        "verify --mode sample draws) and rank the sampled tokens: the trace "
                        "predicts lossless sampling at T (default %(default)s: greedy)")
    add_sampling_filters(p, when="with --temperature")
    p.add_argument("--samples-per-prompt", type=int, default=1, metavar="S",
                   help="with --temperature: continuations sampled per prompt (default "
                        "%(default)s)")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="with --temperature: the sampler's seed (default %(default)s)")
    p.add_argument("--out", required=True, metavar="T.npz",
                   help="the rank trace, written when complete (required)")
    p.add_argument("--responses-out", metavar="R.npz",
                   help="suffix decoding: also write the requests' responses, in order, a "
                        "history that warms a later run's cache (suffix:history=R.npz)")
    p.set_defaults(func=cmd_calibrate)


def _register_calibrate_dynamic(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate-dynamic",
                       help="dynamic traces: where the true path stands in an EAGLE drafter's "
                            "dynamic tree, at every position, for every steps and draft tokens")
    add_model_flags(p)
    add_heads_flag(p)
    add_prompts_flag(p)
    p.add_argument("--topk", type=int_list("--topk"), default=[1, 2, 4, 8], metavar="LIST",
                   help="top-k values, one trace each (default 1,2,4,8)")
    p.add_argument("--steps", type=int, default=6, metavar="S",
                   help="most steps (tree depth); every smaller number comes free (default "
                        "%(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N",
                   help="greedy tokens generated per prompt (default %(default)s)")
    p.add_argument("--batch-size", type=int, default=4, metavar="N",
                   help="sequences per pass (memory grows with top-k × vocabulary; default "
                        "%(default)s)")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="directory for the traces, dynamic-topk<K>.npz (required); a trace of "
                        "the same run found there is kept, one of another run is refused")
    p.add_argument("--force", action="store_true",
                   help="replace the traces of another run in --out")
    p.set_defaults(func=cmd_calibrate_dynamic, writes_directory=True)


def cmd_train_heads(args: argparse.Namespace) -> int:
    from treeopt.decoding.models import context_length
    from treeopt.decoding.rank_pass import greedy_continuations
    from treeopt.documents.prompts import encode, read_texts
    from treeopt.drafters.checkpoints import save_heads
    from treeopt.drafters.training import TrainConfig, fit_to_data, train_heads

    require(args.generate >= 0, f"--generate {args.generate}: must be ≥ 0 (0: train on the "
                                "texts as they are)")
    fields = {k: getattr(args, k) for k in TrainConfig().__dict__ if k != "kind"}
    cfg = TrainConfig(kind=args.kind, **fields)
    out = Path(args.out)
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise TreeoptError(f"--out {out} exists and is not empty; pass --force to replace the "
                           "heads there, or choose another --out")
    texts = read_texts(args.data)
    model, tok = load_model_from(args)
    data = encode(tok, texts, source=" ".join(args.data))
    if args.generate > 0:
        data = greedy_continuations(model, data, max_new_tokens=args.generate)
    tokens = sum(len(s) for s in data)
    try:
        fitted = fit_to_data(cfg, data, context=context_length(model))
    except TreeoptError as exc:  # the library's greedy continuations are --generate N here
        raise TreeoptError(f"{exc}; --generate N adds them") from None
    if fitted.seq_len != cfg.seq_len:
        why = (f"the training data hold {tokens} tokens" if fitted.seq_len == tokens else
               f"the model's context is {fitted.seq_len} positions")
        print(f"note: --seq-len {cfg.seq_len} cut to {fitted.seq_len}: {why}; training on "
              f"{tokens // fitted.seq_len} window(s) of {fitted.seq_len} tokens (more text, or "
              "--generate N, trains better heads)", file=sys.stderr)
    cfg = fitted
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
                 "seq_len": cfg.seq_len, "tokens": tokens,
                 "first_loss": history[0]["loss"], "final_loss": last["loss"],
                 "final_head_loss": last["head_loss"],
                 "final_top1_agreement": last["top1_agreement"]}, None)


def cmd_calibrate(args: argparse.Namespace) -> int:
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate, parse_shard
    from treeopt.documents.prompts import encode, read_texts

    shard, num_shards = parse_shard(args.shard)
    texts = read_texts(args.prompts)
    options = {"top_k": args.top_k, "max_new_tokens": args.max_new_tokens,
               "batch_size": args.batch_size, "source": "texts" if args.texts else "greedy",
               "shard": shard, "num_shards": num_shards, "temperature": args.temperature,
               "top_p": args.top_p, "sample_top_k": args.sample_top_k, "seed": args.seed,
               "samples_per_prompt": args.samples_per_prompt}
    CalibrateConfig(**options)  # bad flags fail before the model loads
    model, tok = load_model_from(args)
    heads = load_drafter_from(args, model)
    cfg = CalibrateConfig(**options, eos_token_id=getattr(tok, "eos_token_id", None))
    prompts = encode(tok, texts, source=" ".join(args.prompts))
    bar, report = counted(f"calibrate {shard}/{num_shards}", "batch")
    meta = {"model": args.model, "heads": args.heads, "prompts": " ".join(args.prompts)}
    trace, path = calibrate(model, heads, prompts, args.out, config=cfg, meta=meta,
                            progress=report, responses=args.responses_out)
    bar.close()
    return emit({"trace": str(path), "positions": trace.positions, "heads": trace.heads,
                 "top_k": trace.top_k, "sequences": trace.meta.get("sequences"),
                 "sampling": trace.sampling, "shard": f"{shard}/{num_shards}"}, None)


def cmd_calibrate_dynamic(args: argparse.Namespace) -> int:
    from treeopt.decoding.dynamic_rank_pass import simulate_dynamic
    from treeopt.decoding.rank_pass import greedy_continuations
    from treeopt.documents.prompts import encode, read_texts

    _check_dynamic_flags(args)
    out = Path(args.out)
    run = {"model": args.model, "heads": args.heads, "prompts": " ".join(args.prompts),
           "max_new_tokens": args.max_new_tokens, "steps": args.steps,
           "positions": "run"}  # where a run starts its steps (rank_pass.cut_to_run)
    kept = {k: _earlier_trace(out / f"dynamic-topk{k}.npz", run, force=args.force)
            for k in args.topk}
    todo = [k for k in args.topk if kept[k] is None]
    sequences: list[list[int]] = []
    if todo:
        texts = read_texts(args.prompts)
        model, tok = load_model_from(args)
        drafter = load_drafter_from(args, model)
        require(drafter.kind.dynamic,
                f"--heads {args.heads}: dynamic trees need an EAGLE drafter, not "
                f"{drafter.kind.title.lower()}")
        vocab = drafter.config.draft_vocab_size or drafter.config.vocab_size
        require(max(todo) <= vocab, f"--topk {max(todo)} is more than the drafter's "
                                    f"vocabulary of {vocab} tokens")
        prompts = encode(tok, texts, source=" ".join(args.prompts))
        sequences = greedy_continuations(model, prompts, max_new_tokens=args.max_new_tokens,
                                         eos_token_id=getattr(tok, "eos_token_id", None))
        starts = [len(p) - 1 for p in prompts]
    written = []
    for k in args.topk:
        path = out / f"dynamic-topk{k}.npz"
        written.append(str(path))
        if kept[k] is not None:
            print(f"kept {path}: this run's trace, already complete", file=sys.stderr)
            continue
        bar, report = counted(f"dynamic top-k {k}", "sequence")
        trace = simulate_dynamic(model, drafter, sequences, starts, topk=k, steps=args.steps,
                                 batch_size=args.batch_size, progress=report)
        bar.close()
        type(trace)(trace.topk, trace.places, trace.lengths, {**trace.meta, **run}).save(path)
    count = len(sequences) if todo else next(iter(kept.values())).meta["sequences"]
    return emit({"traces": written, "steps": args.steps, "sequences": count}, None)


def _check_dynamic_flags(args: argparse.Namespace) -> None:
    """calibrate-dynamic's numbers, before anything loads: a trace stores pool places as
    16-bit counts, so a step's pool of candidates must fit them."""
    import numpy as np

    from treeopt.model.dynamic_settings import DynamicSettings

    require(all(k >= 1 for k in args.topk), f"--topk {args.topk}: values must be ≥ 1")
    require(args.steps >= 1, f"--steps must be ≥ 1, got {args.steps}")
    require(args.batch_size >= 1, f"--batch-size must be ≥ 1, got {args.batch_size}")
    require(args.max_new_tokens >= 1, f"--max-new-tokens must be ≥ 1, got {args.max_new_tokens}")
    most = int(np.iinfo(np.int16).max)
    for k in args.topk:
        pool = DynamicSettings(topk=k, steps=args.steps, draft_tokens=2).pool
        require(pool <= most, f"--topk {k} with --steps {args.steps} drafts {pool} candidates "
                              f"per step; a dynamic trace holds at most {most} (lower --topk "
                              "or --steps)")


def _earlier_trace(path: Path, run: dict[str, object], *, force: bool) -> DynamicTrace | None:
    """The trace at ``path`` when an earlier call of this same run wrote it (kept); None when
    there is none, or when ``force`` lets it be replaced; another run's is refused."""
    from treeopt.dynamic.simulate import DynamicTrace

    if force or not path.exists():
        return None
    again = "pass --force to replace it, or choose another --out"
    try:
        trace = DynamicTrace.load(path)
    except TreeoptError as exc:
        raise TreeoptError(f"{exc}; {again}") from None
    for key, value in run.items():
        if trace.meta.get(key) != value:
            raise TreeoptError(f"{path} holds another run's trace ({key} "
                               f"{trace.meta.get(key)!r}, this run {value!r}); {again}")
    return trace


def cmd_trace_merge(args: argparse.Namespace) -> int:
    from treeopt.model.trace import RankTrace, merge_traces

    traces = [RankTrace.load(p) for p in args.shards]
    merged = merge_traces(traces, names=args.shards)
    meta = {k: v for k, v in merged.meta.items() if k != "fingerprint"}
    meta["positions"] = merged.positions
    merged.with_meta(meta).save(args.out)
    print(f"wrote {args.out}", file=sys.stderr)
    return emit({"trace": args.out, "positions": merged.positions, "shards": len(traces)}, None)
