"""The measuring sub-commands: ``profile`` (the verify step's latency over a grid), ``profile
device`` (the device's peaks) and ``profile step`` (the live decoder's step, phase by phase).
Each handler parses flags, calls :mod:`treeopt.profiling`, and writes JSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from treeopt.cli.common import (
    add_live_flags,
    add_out,
    add_target_se,
    counted,
    emit,
    int_list,
    load_drafter_from,
    load_model_from,
    measurement_from,
    require,
)
from treeopt.cli.hardware_flags import (
    add_device,
    add_grid,
    add_model_shape,
    measured_dtype,
    model_shape,
    names,
    need_grid,
)


def register_profile(sub: argparse._SubParsersAction) -> None:
    """``profile`` (the verify step), with its forms ``profile device`` and ``profile step``."""
    p = sub.add_parser("profile", help="measure verify-step latency over batch × context × tokens",
                       description="Measure verify-step latency; 'profile device' measures the "
                       "device's peaks, 'profile step' the live decoder's step phase by phase.")
    add_model_shape(p)
    add_device(p)
    add_grid(p, tokens=True)
    p.add_argument("--repeats", type=int, default=20, metavar="N",
                   help="timed repeats per point (default 20)")
    p.add_argument("--warmup", type=int, default=3, metavar="N",
                   help="untimed calls per point first (default %(default)s)")
    p.add_argument("--cuda-graphs", action="store_true", help="replay one CUDA graph per q")
    p.add_argument("--out", metavar="FILE",
                   help="latency table; an existing one is resumed (required)")
    p.set_defaults(func=cmd_profile)
    forms = p.add_subparsers(dest="form", metavar="{device,step}")
    _register_device(forms)
    _register_step(forms)


def _register_device(forms: argparse._SubParsersAction) -> None:
    d = forms.add_parser("device", help="achieved matmul FLOP/s and memory bandwidth")
    d.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="cpu or cuda[:N] (default %(default)s)")
    d.add_argument("--dtype", type=names, metavar="LIST",
                   help="matmul dtypes (default bf16,fp32 on CUDA, fp32 on CPU)")
    d.add_argument("--matmul-size", type=int, metavar="N", help="n of the n×n matmul")
    d.add_argument("--copy-mib", type=int, metavar="MIB", help="size of the copied buffer")
    d.add_argument("--repeats", type=int, default=10, metavar="N",
                   help="timed repeats of each measurement (default %(default)s)")
    add_out(d)
    d.set_defaults(func=cmd_profile_device)


def _register_step(forms: argparse._SubParsersAction) -> None:
    d = forms.add_parser("step", help="the live decoder's step, phase by phase (draft, verify, "
                                      "bookkeeping), for a growth's trees at each batch size")
    add_live_flags(d)
    d.add_argument("--sizes", type=int_list("--sizes"), metavar="LIST",
                   help="tree sizes profiled (default 1,2,3,4,6,8,12,16,24,32,48,64)")
    d.add_argument("--max-new-tokens", type=int, default=64, metavar="N",
                   help="tokens decoded per prompt (default %(default)s)")
    d.add_argument("--rounds", type=int, default=3, metavar="R",
                   help="rounds over every tree, each beside an autoregressive reference; a "
                        "record keeps its median round (default %(default)s)")
    d.add_argument("--sequences", type=int, metavar="N",
                   help="sequences each record decodes at least, rotating through the prompts: "
                        "smaller batches get more rounds (default: the largest --batch)")
    d.add_argument("--min-seconds", type=float, default=0.0, metavar="S",
                   help="more rounds, until each record's decodes took S seconds: a round at "
                        "batch 8 is one short decode (default 0: --rounds and --sequences only)")
    add_target_se(d, what="a record's step, relative to its reference's, over its rounds",
                  pooled="its batch size's records")
    d.add_argument("--compile", action="store_true",
                   help="profile the compiled step (as verify/tune --compile decode)")
    d.add_argument("--dynamic", type=_dynamic_list, metavar="K:S:N,…",
                   help="profile dynamic drafting instead of the growth's trees: settings as "
                        "topk:steps:draft-tokens, comma-separated (an EAGLE drafter)")
    d.add_argument("--shared-reference", action="store_true",
                   help="the records a round measures decode together beside one "
                        "autoregressive reference, not each beside its own (SmolLM2: 1.3-2x "
                        "less time; a fresh build's batch-8 points then priced up to 13%% high, "
                        "docs/demo.md); recorded, and resumed only so")
    d.add_argument("--retime", action="store_true",
                   help="profile the --batch sizes again: their records in --out are replaced "
                        "by this run's (timed as its flags say), the other batch sizes' kept")
    d.add_argument("--out", metavar="FILE", required=True,
                   help="the step profile (JSON); an existing one is resumed (required)")
    d.set_defaults(func=cmd_profile_step)


def _dynamic_list(text: str) -> list[Any]:
    """``1:3:4,4:4:16`` → dynamic settings (topk:steps:draft-tokens)."""
    from treeopt.errors import TreeoptError
    from treeopt.model.dynamic_settings import DynamicSettings

    out = []
    for item in names(text):
        parts = item.split(":")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise argparse.ArgumentTypeError(f"{item!r} is not topk:steps:draft-tokens")
        try:
            out.append(DynamicSettings(*(int(p) for p in parts)))
        except TreeoptError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return out


def cmd_profile(args: argparse.Namespace) -> int:
    from treeopt.profiling.verify_latency import profile_verify

    cfg = model_shape(args)
    need_grid(args, "batch", "context", "tokens")
    require(bool(args.out), "--out is required: the latency table is written as points finish")
    bar, report = counted("profile", "group")
    table = profile_verify(cfg, out=args.out, device=args.device, dtype=measured_dtype(args),
                           batch=args.batch, context=args.context, tokens=args.tokens,
                           repeats=args.repeats, warmup=args.warmup,
                           method="cuda-graphs" if args.cuda_graphs else "eager",
                           weights_dir=args.model,
                           log=lambda line: bar.write(line, file=sys.stderr), progress=report)
    bar.close()
    failed = sum(1 for r in table.records if not r.ok)
    noisy = sum(1 for r in table.records if r.ok and r.spread is not None and r.spread > 0.2)
    print(f"wrote {args.out}: {len(table.records)} points, {failed} failed", file=sys.stderr)
    if noisy:
        print(f"warning: {noisy} points spread more than 20% between repeats (p90 − p10 over the "
              "median); the device is busy or throttling — re-run them with more --repeats",
              file=sys.stderr)
    return 0


def cmd_profile_device(args: argparse.Namespace) -> int:
    from treeopt.profiling.device import measure_device

    dtypes = args.dtype or (["bf16", "fp32"] if args.device.startswith("cuda") else ["fp32"])
    return emit(measure_device(device=args.device, dtypes=dtypes, matmul_size=args.matmul_size,
                               copy_mib=args.copy_mib, repeats=args.repeats), args.out)


def cmd_profile_step(args: argparse.Namespace) -> int:
    from treeopt.documents.prompts import encode, read_texts
    from treeopt.model.growth import Growth
    from treeopt.pricing.verify_prices import kernel_dips, verify_dips
    from treeopt.profiling.step import FALL_LIMIT, SIZES, profile_steps

    growth = Growth.load(args.growth)
    texts = read_texts(args.prompts)
    require(max(args.batch) <= len(texts), f"--batch {max(args.batch)} is larger than the "
            f"{len(texts)} prompts in {' '.join(args.prompts)}")
    require(args.sequences is None or args.sequences >= 1,
            f"--sequences must be ≥ 1, got {args.sequences}")
    measure = measurement_from(args)
    model, tok = load_model_from(args)
    heads = load_drafter_from(args, model)
    bar, report = counted("profile step", "batch")
    require(not args.dynamic or heads.kind.dynamic,
            f"--dynamic: --heads {args.heads} is a {heads.kind.title.lower()}, and dynamic "
            f"trees need an EAGLE drafter")
    profile = profile_steps(model, heads, growth, encode(tok, texts, source=" ".join(args.prompts)),
                            batch=args.batch, sizes=args.sizes or SIZES, out=args.out,
                            max_new_tokens=args.max_new_tokens, measure=measure,
                            sequences=args.sequences, compile=args.compile,
                            dynamic=args.dynamic or (), retime=args.retime,
                            shared=args.shared_reference, log=lambda _: None, progress=report)
    bar.close()
    print(f"wrote {args.out}: {len(profile.records)} records", file=sys.stderr)
    dips = verify_dips((r.batch, r.q, r.ms_verify) for r in profile.records)
    kernels = kernel_dips(profile.records)
    for b, q, below, fall in [d for d in dips if d[3] > FALL_LIMIT][:3]:
        said = (f"warning: {args.out}: at batch {b} the verify step of {q} tokens measured "
                f"{fall:.0%} below {below} tokens', even measured again")
        if (b, q, below, fall) in kernels:
            print(f"{said}, beyond its noise: the CPU's kernels (seen in bf16 on AVX512-BF16); "
                  f"select prices both as measured", file=sys.stderr)
        else:
            print(f"{said}, within its noise: the host was busy; select prices the two at "
                  f"their pooled mean; profile again on a quiet machine", file=sys.stderr)
    return 0
