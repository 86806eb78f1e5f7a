"""The pricing sub-commands: ``roofline`` (predicted step latency), ``select`` (the
throughput-optimal tree per batch size and context) and ``choose-drafter`` (the fastest drafter
of several selections). Each handler parses flags, calls the library, and writes JSON."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from treeopt.cli import select_sources
from treeopt.cli.common import add_out, emit, int_list, require
from treeopt.cli.hardware_flags import (
    add_grid,
    add_model_shape,
    add_precision,
    model_shape,
    names,
    need_grid,
    precision,
)
from treeopt.registry.kinds import KIND_NAMES


def register_roofline(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("roofline", help="predicted step latency from FLOPs and bytes per operator")
    add_model_shape(p)
    add_precision(p)
    add_grid(p, tokens=True)
    p.add_argument("--fit", metavar="LATENCY", help="fit efficiencies to this latency table")
    p.add_argument("--totals", action="store_true", help="step totals only, no operators")
    add_out(p)
    p.set_defaults(func=cmd_roofline)


def register_select(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("select", help="the throughput-optimal tree per batch size and context")
    p.add_argument("--growth", required=True, metavar="G.json",
                   help="the growth whose trees are priced (treeopt grow) (required)")
    p.add_argument("--latency", metavar="L.json", help="a measured latency table")
    p.add_argument("--roofline", metavar="R.json", help="a saved roofline")
    add_model_shape(p, required=False)
    add_precision(p, required=False)
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
    p.add_argument("--shared-verify", nargs="+", metavar="S.json",
                   help="with --step-profile: other drafters' step profiles of the same model "
                        "and setup; the verify step, the base model's whichever drafter "
                        "proposed, is priced from them too, each scaled to --step-profile's "
                        "autoregressive step (--demo: the demo's other drafters')")
    p.add_argument("--trace", metavar="T.npz",
                   help="calibration trace: E[L] of every tree from its per-step walk, and "
                        "the trees of a per-step greedy growth priced beside the growth's "
                        "(default: the per-step E[L] the growth stores, where it has it)")
    p.add_argument("--drafted-only", action=argparse.BooleanOptionalAction,
                   help="a lookup drafter's chains verified only as far as they were drafted "
                        "(verify --drafted-only; Hugging Face's prompt lookup, vLLM's ngram): "
                        "price them too, from the drafted lengths --trace records, and pick "
                        "them where faster (default: on where --trace records drafted lengths; "
                        "--no-drafted-only prices whole trees alone)")
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


def register_choose_drafter(sub: argparse._SubParsersAction) -> None:
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


def cmd_roofline(args: argparse.Namespace) -> int:
    from treeopt.profiling.table import LatencyTable
    from treeopt.roofline import fit_efficiency, load_hardware, roofline

    cfg, hw, prec = model_shape(args), load_hardware(args.hardware), precision(args)
    need_grid(args, "batch", "context", "tokens")
    fit = None
    if args.fit:
        table = LatencyTable.load(args.fit)
        table.check_matches(model=cfg, dtype=prec.compute, source=args.fit)
        fit = fit_efficiency(cfg, hw, table.points(), precision=prec,
                             attention=args.attention, source=f"--fit {args.fit}")
    r = roofline(cfg, hw, batch=args.batch, context=args.context, tokens=args.tokens,
                 precision=prec, attention=args.attention,
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
    from treeopt.pricing.drafted import prices_drafted
    from treeopt.pricing.sources import costs_of_profile, price
    from treeopt.pricing.throughput import check_grid, per_step_note

    check_grid(args.batch or (), args.context or (), names=("--batch", "--context"))
    growth = Growth.load(args.growth)
    trace = RankTrace.load(args.trace) if args.trace else None
    profile = select_sources.step_profile(args)
    # bad dynamic traces and profiles fail before any pricing
    dynamic, dynamic_files = select_sources.dynamic_traces(args)
    dynamic_profile = select_sources.dynamic_profile(args)
    select_sources.check_sources(args, growth, trace, profile, dynamic_files, dynamic_profile)
    cfg = model_shape(args, need=bool(args.hardware))
    costs = select_sources.profile_costs(args, profile)
    verify = select_sources.verify_latency(args, growth, cfg, costs)
    draft = select_sources.draft_cost(args, cfg, costs)
    draft = select_sources.hybrid_draft(growth, profile, draft)
    overhead = costs.overhead if costs is not None else NO_OVERHEAD
    selection = price(growth, verify, draft=draft, overhead=overhead, batch=args.batch,
                      context=args.context, depth_caps=args.max_depths, trace=trace,
                      drafted_only=(prices_drafted(trace) if args.drafted_only is None
                                    else args.drafted_only))
    if (note := per_step_note(selection)) is not None:
        print(f"note: {note}", file=sys.stderr)
    _print_per_batch_k(selection)
    if not dynamic:
        return emit(selection.to_json(), args.out)
    from treeopt.dynamic.report import dynamic_selection

    if dynamic_profile is not None:
        dyn = costs_of_profile(dynamic_profile)
        verify, draft, overhead = dyn.verify, dyn.draft, dyn.overhead
    return emit(dynamic_selection(dynamic, verify=verify, draft=draft, overhead=overhead,
                                  static=selection, topks=args.topk, steps=args.steps,
                                  draft_tokens=args.draft_tokens,
                                  sources={str(k): dynamic_files[k][0] for k in dynamic},
                                  attention=select_sources.model_attention(args)),
                args.out)


def _print_per_batch_k(selection: Any) -> None:
    """vLLM's per-batch K by treeopt's table and by vLLM's profiler rule, per context, on
    stderr (a chain drafter's selection; the file holds them under each schedule)."""
    from treeopt.pricing.per_batch_k import table_text
    from treeopt.pricing.selection import schedule

    if selection.chains is None:
        return
    for context in selection.contexts:
        section = schedule(selection, context=context).get("vllm_per_batch") or {}
        if "refused" in section:
            print(f"vLLM per-batch K, context {context}: {section['refused']}", file=sys.stderr)
        elif section:
            print(table_text(section), file=sys.stderr)


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
    if not sep or not name.strip() or not names(files):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=S.json,S.json,…")
    return name.strip(), names(files)
