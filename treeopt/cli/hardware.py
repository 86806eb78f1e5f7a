"""Hardware sub-commands: ``profile`` (and ``profile device``, ``profile step``), ``roofline``,
``select``. Each handler parses flags, calls the library, and writes JSON; no computation here."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from treeopt.cli.common import (
    DTYPE_HELP,
    add_live_flags,
    add_out,
    add_target_se,
    counted,
    dtype_flag,
    emit,
    int_list,
    load_drafter_from,
    load_model_from,
    measurement_from,
    require,
)
from treeopt.drafters.kinds import KIND_NAMES


def register(sub: argparse._SubParsersAction) -> None:
    _register_profile(sub)
    _register_roofline(sub)
    _register_select(sub)
    _register_choose_drafter(sub)


def _register_profile(sub: argparse._SubParsersAction) -> None:
    """``profile`` (the verify step), with its forms ``profile device`` and ``profile step``."""
    p = sub.add_parser("profile", help="measure verify-step latency over batch × context × tokens",
                       description="Measure verify-step latency; 'profile device' measures the "
                       "device's peaks, 'profile step' the live decoder's step phase by phase.")
    _add_model_shape(p)
    _add_device(p)
    _add_grid(p, tokens=True)
    p.add_argument("--repeats", type=int, default=20, metavar="N",
                   help="timed repeats per point (default 20)")
    p.add_argument("--warmup", type=int, default=3, metavar="N",
                   help="untimed calls per point first (default %(default)s)")
    p.add_argument("--cuda-graphs", action="store_true", help="replay one CUDA graph per q")
    p.add_argument("--out", metavar="FILE",
                   help="latency table; an existing one is resumed (required)")
    p.set_defaults(func=cmd_profile)
    forms = p.add_subparsers(dest="form", metavar="{device,step}")

    d = forms.add_parser("device", help="achieved matmul FLOP/s and memory bandwidth")
    d.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="cpu or cuda[:N] (default %(default)s)")
    d.add_argument("--dtype", type=_names, metavar="LIST",
                   help="matmul dtypes (default bf16,fp32 on CUDA, fp32 on CPU)")
    d.add_argument("--matmul-size", type=int, metavar="N", help="n of the n×n matmul")
    d.add_argument("--copy-mib", type=int, metavar="MIB", help="size of the copied buffer")
    d.add_argument("--repeats", type=int, default=10, metavar="N",
                   help="timed repeats of each measurement (default %(default)s)")
    add_out(d)
    d.set_defaults(func=cmd_profile_device)

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
    add_target_se(d, what="a record's step, relative to its reference's, over its rounds")
    d.add_argument("--compile", action="store_true",
                   help="profile the compiled step (as verify/tune --compile decode)")
    d.add_argument("--dynamic", type=_dynamic_list, metavar="K:S:N,…",
                   help="profile dynamic drafting instead of the growth's trees: settings as "
                        "topk:steps:draft-tokens, comma-separated (an EAGLE drafter)")
    d.add_argument("--out", metavar="FILE", required=True,
                   help="the step profile (JSON); an existing one is resumed (required)")
    d.set_defaults(func=cmd_profile_step)


def _register_roofline(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("roofline", help="predicted step latency from FLOPs and bytes per operator")
    _add_model_shape(p)
    _add_precision(p)
    _add_grid(p, tokens=True)
    p.add_argument("--fit", metavar="LATENCY", help="fit efficiencies to this latency table")
    p.add_argument("--totals", action="store_true", help="step totals only, no operators")
    add_out(p)
    p.set_defaults(func=cmd_roofline)


def _register_select(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("select", help="the throughput-optimal tree per batch size and context")
    p.add_argument("--growth", required=True, metavar="G.json",
                   help="the growth whose trees are priced (treeopt grow) (required)")
    p.add_argument("--latency", metavar="L.json", help="a measured latency table")
    p.add_argument("--roofline", metavar="R.json", help="a saved roofline")
    _add_model_shape(p, required=False)
    _add_precision(p, required=False)
    p.add_argument("--batch", type=int_list("--batch"), metavar="LIST",
                   help="comma-separated batch sizes (required with --hardware; default: every "
                        "batch size the latency source holds)")
    p.add_argument("--context", type=int_list("--context"), metavar="LIST",
                   help="comma-separated context lengths (required with --hardware; default: "
                        "every context the latency source holds)")
    p.add_argument("--step-profile", nargs="+", metavar="S.json",
                   help="the live step profiled (treeopt profile step): drafting and the "
                        "decoder's overhead, and the verify step when no other source is given; "
                        "several profiles of one setup are pooled")
    p.add_argument("--trace", metavar="T.npz",
                   help="calibration trace: E[L] of every tree from its per-step walk, and "
                        "the trees of a per-step greedy growth priced beside the growth's "
                        "(default: the per-step E[L] the growth stores, where it has it)")
    p.add_argument("--draft-kind", choices=KIND_NAMES, help="predict the heads' cost")
    p.add_argument("--draft-heads", type=int, metavar="K",
                   help="heads the drafter has, for --draft-kind")
    p.add_argument("--draft-layers", type=int, default=1, metavar="N",
                   help="layers per head, for --draft-kind (default %(default)s)")
    p.add_argument("--max-depths", type=int_list("--max-depths"), metavar="LIST",
                   help="depth caps to scan (default: all, when drafting grows with depth)")
    p.add_argument("--dynamic", nargs="+", metavar="D.npz",
                   help="dynamic traces (treeopt calibrate-dynamic, one per top-k): also price "
                        "dynamic drafting and report its best settings per batch beside the "
                        "static tree, with each engine's flags")
    p.add_argument("--dynamic-profile", metavar="S.json",
                   help="with --dynamic: the dynamic step profiled (treeopt profile step "
                        "--dynamic), which prices dynamic drafting (default: --step-profile)")
    p.add_argument("--topk", type=int_list("--topk"), metavar="LIST",
                   help="with --dynamic: top-k values to scan (default: every trace's)")
    p.add_argument("--steps", type=int_list("--steps"), metavar="LIST",
                   help="with --dynamic: numbers of steps (default: 1 … the traces' steps)")
    p.add_argument("--draft-tokens", type=int_list("--draft-tokens"), metavar="LIST",
                   help="with --dynamic: tokens verified per step, the root included "
                        "(default 2, 4, 8, … up to the latency source's largest)")
    add_out(p)
    p.set_defaults(func=cmd_select)


def _register_choose_drafter(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("choose-drafter", help="the fastest drafter per batch size and context, "
                                              "from selections made for each drafter")
    p.add_argument("selections", nargs="+", metavar="S.json",
                   help="selection files (treeopt select), one per drafter, priced on the same "
                        "hardware")
    p.add_argument("--prompt-set", action="append", type=_prompt_set, metavar="NAME=S.json,…",
                   help="selections of the same drafters made on another prompt set (repeat the "
                        "flag for more): adds each set's choices and, per batch size, the "
                        "fastest drafter on every set and the one whose worst share of a set's "
                        "best speed-up is largest")
    p.add_argument("--name", metavar="NAME",
                   help="the prompt set the positional selections were made on, beside "
                        "--prompt-set (default: prompts)")
    add_out(p)
    p.set_defaults(func=cmd_choose_drafter)


def _dynamic_list(text: str) -> list[Any]:
    """``1:3:4,4:4:16`` → dynamic settings (topk:steps:draft-tokens)."""
    from treeopt.errors import TreeoptError
    from treeopt.model.dynamic_settings import DynamicSettings

    out = []
    for item in _names(text):
        parts = item.split(":")
        if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
            raise argparse.ArgumentTypeError(f"{item!r} is not topk:steps:draft-tokens")
        try:
            out.append(DynamicSettings(*(int(p) for p in parts)))
        except TreeoptError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return out


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _add_model_shape(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", metavar="DIR", help="a local model directory (its config.json)")
    g.add_argument("--config", metavar="FILE", help="a bare config.json (random weights)")
    g.add_argument("--preset", metavar="NAME", help="a named model preset (random weights)")


def _add_device(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="cpu or cuda[:N] (default cpu)")
    p.add_argument("--dtype", type=dtype_flag, metavar="DTYPE",
                   help=DTYPE_HELP + "; default bf16 on CUDA, fp32 on CPU")


def _add_precision(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    p.add_argument("--hardware", required=required, metavar="NAME|FILE",
                   help="a row of treeopt/roofline/gpus.csv or a hardware JSON"
                        + (" (required)" if required else ""))
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"),
                   help="compute dtype (default bf16)")
    p.add_argument("--weight-dtype", metavar="DT", help="weights' dtype (default: --dtype)")
    p.add_argument("--kv-dtype", metavar="DT", help="KV cache dtype (default: --dtype)")
    p.add_argument("--attention", choices=("fused", "eager"), default="fused",
                   help="fused: FlashAttention-like kernels, scores stay on chip; eager: adds the "
                        "score, mask and probability traffic (default %(default)s)")


def _add_grid(p: argparse.ArgumentParser, *, tokens: bool) -> None:
    p.add_argument("--batch", type=int_list("--batch"), metavar="LIST",
                   help="comma-separated batch sizes (required)")
    p.add_argument("--context", type=int_list("--context"), metavar="LIST",
                   help="comma-separated context lengths: tokens already cached (required)")
    if tokens:
        p.add_argument("--tokens", type=int_list("--tokens"), metavar="LIST",
                       help="comma-separated tree tokens q = nodes + 1 (required)")


def _model(args: argparse.Namespace, *, need: bool = True) -> Any:
    from treeopt.roofline.config import load_config, preset

    if args.preset:
        return preset(args.preset)
    if args.config or args.model:
        return load_config(args.config or args.model)
    require(not need, "give the model: --model DIR, --config FILE or --preset NAME")
    return None


def _need_grid(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        require(getattr(args, name) is not None, f"--{name} is required (comma-separated list)")


def _dtype(args: argparse.Namespace) -> str:
    return args.dtype or ("bf16" if str(getattr(args, "device", "")).startswith("cuda") else "fp32")


def cmd_profile(args: argparse.Namespace) -> int:
    from treeopt.profiling.verify import profile_verify

    cfg = _model(args)
    _need_grid(args, "batch", "context", "tokens")
    require(bool(args.out), "--out is required: the latency table is written as points finish")
    bar, report = counted("profile", "group")
    table = profile_verify(cfg, out=args.out, device=args.device, dtype=_dtype(args),
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
    from treeopt.pricing.costs import verify_dips
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
                            dynamic=args.dynamic or (),
                            log=lambda _: None, progress=report)
    bar.close()
    print(f"wrote {args.out}: {len(profile.records)} records", file=sys.stderr)
    dips = verify_dips((r.batch, r.q, r.ms_verify) for r in profile.records)
    for b, q, below, fall in [d for d in dips if d[3] > FALL_LIMIT][:3]:
        print(f"warning: {args.out}: at batch {b} the verify step of {q} tokens measured "
              f"{fall:.0%} below {below} tokens', even measured again — the host was busy; "
              f"select prices the two at their pooled mean; profile again on a quiet machine",
              file=sys.stderr)
    return 0


def _precision(args: argparse.Namespace) -> Any:
    from treeopt.roofline.model import Precision

    return Precision.from_dtypes(args.dtype or "bf16", weight=args.weight_dtype, kv=args.kv_dtype)


def cmd_roofline(args: argparse.Namespace) -> int:
    from treeopt.profiling.table import LatencyTable
    from treeopt.roofline import fit_efficiency, load_hardware, roofline

    cfg, hw, precision = _model(args), load_hardware(args.hardware), _precision(args)
    _need_grid(args, "batch", "context", "tokens")
    fit = None
    if args.fit:
        table = LatencyTable.load(args.fit)
        table.check_matches(model=cfg, dtype=precision.compute, source=args.fit)
        fit = fit_efficiency(cfg, hw, table.points(), precision=precision,
                             attention=args.attention, source=f"--fit {args.fit}")
    r = roofline(cfg, hw, batch=args.batch, context=args.context, tokens=args.tokens,
                 precision=precision, attention=args.attention,
                 **({"efficiency": fit.efficiency} if fit else {}))
    doc = r.to_json()
    if args.totals:
        doc["records"] = [{k: v for k, v in rec.items() if k != "operators"}
                          for rec in doc["records"]]
    if fit is not None:
        doc["fit"] = {"latency_table": args.fit, **fit.to_json()}
    return emit(doc, args.out)


def cmd_select(args: argparse.Namespace) -> int:
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace
    from treeopt.pricing.costs import NO_OVERHEAD
    from treeopt.pricing.select import check_grid, per_step_note
    from treeopt.pricing.sources import costs_of_profile, price

    check_grid(args.batch or (), args.context or (), names=("--batch", "--context"))
    growth = Growth.load(args.growth)
    trace = RankTrace.load(args.trace) if args.trace else None
    profile = _step_profile(args)
    dynamic, dynamic_files = _dynamic_traces(args)  # bad traces fail before any pricing
    dynamic_profile = _dynamic_profile(args)
    _check_sources(args, growth, trace, profile, dynamic_files, dynamic_profile)
    cfg = _model(args, need=bool(args.hardware))
    costs = costs_of_profile(profile) if profile is not None else None
    verify, draft = _verify_latency(args, growth, cfg, costs), _draft(args, cfg, costs)
    draft = _hybrid_draft(growth, profile, draft)
    overhead = costs.overhead if costs is not None else NO_OVERHEAD
    selection = price(growth, verify, draft=draft, overhead=overhead, batch=args.batch,
                      context=args.context, depth_caps=args.max_depths, trace=trace)
    if (note := per_step_note(selection)) is not None:
        print(f"note: {note}", file=sys.stderr)
    if not dynamic:
        return emit(selection.to_json(), args.out)
    from treeopt.dynamic.report import dynamic_selection

    if dynamic_profile is not None:
        dyn = costs_of_profile(dynamic_profile)
        verify, draft, overhead = dyn.verify, dyn.draft, dyn.overhead
    return emit(dynamic_selection(dynamic, verify=verify, draft=draft, overhead=overhead,
                                  static=selection, topks=args.topk, steps=args.steps,
                                  draft_tokens=args.draft_tokens,
                                  sources={str(k): dynamic_files[k][0] for k in dynamic}),
                args.out)


def _hybrid_draft(growth: Any, profile: Any, draft: Any) -> Any:
    """``draft`` for a hybrid's growth priced with its model drafter's step profile: the model
    drafts its own depths only (the lookup's chain runs deeper alone); else ``draft`` itself."""
    from treeopt.drafters.kinds import HYBRID_SUFFIX, KINDS

    kind = KINDS.get(str(growth.drafter.get("kind") or ""))
    if kind is None or not kind.hybrid or profile is None:
        return draft
    if profile.kind + HYBRID_SUFFIX != kind.name:  # the hybrid's own profile, or another's
        return draft
    return draft.first_depths(int(profile.heads["num_heads"]))


def _dynamic_traces(args: argparse.Namespace) -> tuple[dict[int, Any], dict[int, Any]]:
    """--dynamic's traces by top-k (one per top-k), and (file, trace) by top-k; the other
    dynamic flags need --dynamic."""
    if not args.dynamic:
        require(not (args.topk or args.steps or args.draft_tokens or args.dynamic_profile),
                "--topk, --steps, --draft-tokens and --dynamic-profile need --dynamic D.npz")
        return {}, {}
    from treeopt.dynamic.simulate import DynamicTrace

    files: dict[int, Any] = {}
    for path in args.dynamic:
        trace = DynamicTrace.load(path)
        require(trace.topk not in files, f"--dynamic: two traces of top-k {trace.topk} "
                f"({files[trace.topk][0] if trace.topk in files else ''} and {path})")
        files[trace.topk] = (path, trace)
    files = dict(sorted(files.items()))
    return {k: trace for k, (_, trace) in files.items()}, files


def _dynamic_profile(args: argparse.Namespace) -> Any:
    """--dynamic-profile read, if given: a step profile of dynamic drafting."""
    if not args.dynamic_profile:
        return None
    from treeopt.documents.step_profile import StepProfile

    profile = StepProfile.load(args.dynamic_profile)
    require(profile.design == "dynamic", f"--dynamic-profile {args.dynamic_profile}: a step "
            f"profile of static trees ({profile.kind} heads), not of dynamic drafting; "
            "profile one with treeopt profile step --dynamic")
    return profile


def cmd_choose_drafter(args: argparse.Namespace) -> int:
    from treeopt.pricing.selection import choose_drafter, choose_drafter_per_set

    require(not args.name or bool(args.prompt_set), "--name names the positional selections' "
            "prompt set beside --prompt-set NAME=S.json,…; give --prompt-set too")
    named, files = _named_selections(args.selections)
    doc: dict[str, Any] = {"format": "treeopt.drafter-choice/1", "selections": files,
                           "points": [c.to_json() for c in choose_drafter(named)]}
    if not args.prompt_set:
        return emit(doc, args.out)
    sets, set_files = {args.name or "prompts": named}, {args.name or "prompts": files}
    for name, paths in args.prompt_set:
        require(name not in sets, f"--prompt-set {name}: that prompt set is named twice")
        sets[name], set_files[name] = _named_selections(paths)
    doc["prompt_sets"] = {name: {"selections": set_files[name], "points": [
        c.to_json() for c in choose_drafter(selections)]} for name, selections in sets.items()}
    doc["across_sets"] = [c.to_json() for c in choose_drafter_per_set(sets)]
    return emit(doc, args.out)


def _named_selections(paths: list[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """Selection files read and named by their drafter's kind (a file's path added where two
    share a kind or one has none); and name → path."""
    from treeopt.pricing.selection import Selection

    named: dict[str, Selection] = {}
    for path in paths:
        selection = Selection.load(path)
        name = str(selection.draft.get("kind") or "none")
        if name in named or name == "none":
            name = f"{name} ({path})"
        named[name] = selection
    return named, dict(zip(named, paths, strict=True))


def _prompt_set(text: str) -> tuple[str, list[str]]:
    """``prose=a.json,b.json`` → (``prose``, [``a.json``, ``b.json``])."""
    name, sep, files = text.partition("=")
    if not sep or not name.strip() or not _names(files):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=S.json,S.json,…")
    return name.strip(), _names(files)


def _step_profile(args: argparse.Namespace) -> Any:
    """The --step-profile files read and pooled (one profile), if given."""
    if not args.step_profile:
        return None
    from treeopt.documents.step_profile import StepProfile

    return StepProfile.pool(args.step_profile)


def _check_sources(args: argparse.Namespace, growth: Any, trace: Any, profile: Any,
                   dynamic: dict[int, Any], dynamic_profile: Any) -> None:
    """Refuse a growth, trace, step profile, latency table, drafter, dynamic trace (``dynamic``:
    (file, trace) by top-k) or dynamic profile made with other heads or another model than the
    rest (as far as each file records), and too few --draft-heads."""
    from treeopt.workbench import provenance as pv

    records = [pv.recorded_by_growth(growth, f"--growth {args.growth}")]
    if trace is not None:
        records.append(pv.recorded_by_trace(trace, f"--trace {args.trace}"))
    if profile is not None:
        records.append(pv.recorded_by_step_profile(profile, f"--step-profile "
                                                   f"{' '.join(args.step_profile)}"))
    if args.latency:
        from treeopt.profiling.table import LatencyTable

        records.append(pv.recorded_by_table(LatencyTable.load(args.latency),
                                            f"--latency {args.latency}"))
    if args.draft_kind:
        records.append(pv.Recorded("--draft-kind", kind=args.draft_kind))
    if dynamic_profile is not None:
        records.append(pv.recorded_by_step_profile(dynamic_profile, f"--dynamic-profile "
                                                   f"{args.dynamic_profile}"))
    records += [pv.recorded_by_dynamic_trace(trace, f"--dynamic {path}")
                for path, trace in dynamic.values()]
    pv.check_agree(records)
    if args.draft_kind and args.draft_heads is not None:
        pv.check_draft_heads(growth, args.draft_heads, source=f"--growth {args.growth}",
                             depth_caps=args.max_depths)


def _verify_latency(args: argparse.Namespace, growth: Any, cfg: Any, costs: Any) -> Any:
    """The verify-step latency named by one of --latency, --roofline, --hardware, or else the
    one the step profile measured."""
    from treeopt.pricing.sources import roofline_latency, saved_roofline_latency

    sources = [x for x in (args.latency, args.roofline, args.hardware) if x]
    require(len(sources) <= 1 and (sources or costs is not None),
            "give exactly one of --latency L, --roofline R or --hardware NAME (with --preset "
            "or --config), or a --step-profile S that prices the verify step too")
    if not sources:
        return costs.verify
    if args.latency:
        from treeopt.profiling.table import LatencyTable

        table = LatencyTable.load(args.latency)
        device = costs.verify.meta.get("device") if costs is not None else None
        beside = f" (beside --step-profile {' '.join(args.step_profile)})" if device else ""
        table.check_matches(model=cfg, dtype=args.dtype, device=device,
                            source=f"{args.latency}{beside}")
        return table.latency(source=args.latency)
    if args.roofline:
        return saved_roofline_latency(args.roofline, model=cfg, dtype=args.dtype)
    from treeopt.roofline import load_hardware

    _need_grid(args, "batch", "context")
    return roofline_latency(growth, model=cfg, hardware=load_hardware(args.hardware),
                            batch=args.batch, context=args.context,
                            precision=_precision(args), attention=args.attention)


def _draft(args: argparse.Namespace, cfg: Any, costs: Any) -> Any:
    from treeopt.pricing.costs import NO_DRAFT

    if costs is not None:
        require(not args.draft_kind, "give --step-profile or --draft-kind, not both")
        return costs.draft
    if not args.draft_kind:
        return NO_DRAFT
    require(bool(args.hardware) and cfg is not None and bool(args.draft_heads),
            "--draft-kind predicts the heads' cost on --hardware: give --hardware, the model "
            "(--preset/--config) and --draft-heads K")
    from treeopt.pricing.sources import roofline_draft
    from treeopt.roofline import load_hardware

    return roofline_draft(args.draft_kind, num_heads=args.draft_heads, model=cfg,
                          hardware=load_hardware(args.hardware), precision=_precision(args),
                          num_layers=args.draft_layers)
