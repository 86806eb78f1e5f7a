"""What ``treeopt select`` prices with, read from its flags and checked against one another: the
step profiles, the dynamic traces, the verify step's latency and the drafting cost."""

from __future__ import annotations

import argparse
from typing import Any

from treeopt.cli.common import require
from treeopt.cli.hardware_flags import need_grid, precision
from treeopt.errors import TreeoptError


def hybrid_draft(growth: Any, profile: Any, draft: Any) -> Any:
    """``draft`` for a hybrid's growth priced with its model drafter's step profile: the model
    drafts its own depths only (the lookup's chain runs deeper alone); else ``draft`` itself."""
    from treeopt.registry.kinds import HYBRID_SUFFIX, KINDS

    kind = KINDS.get(str(growth.drafter.get("kind") or ""))
    if kind is None or not kind.hybrid or profile is None:
        return draft
    if profile.kind + HYBRID_SUFFIX != kind.name:  # the hybrid's own profile, or another's
        return draft
    return draft.first_depths(int(profile.heads["num_heads"]))


def dynamic_traces(args: argparse.Namespace) -> tuple[dict[int, Any], dict[int, Any]]:
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


def dynamic_profile(args: argparse.Namespace) -> Any:
    """--dynamic-profile read, if given: a step profile of dynamic drafting."""
    if not args.dynamic_profile:
        return None
    from treeopt.documents.step_profile import StepProfile

    profile = StepProfile.load(args.dynamic_profile)
    require(profile.design == "dynamic", f"--dynamic-profile {args.dynamic_profile}: a step "
            f"profile of static trees ({profile.kind} heads), not of dynamic drafting; "
            "profile one with treeopt profile step --dynamic")
    return profile


def model_attention(args: argparse.Namespace) -> str | None:
    """The target model's attention (``full``, ``mla``, ``sliding-window``) from the config.json
    of --model DIR or --config FILE, or None where neither is given (--preset names a shape,
    not a checkpoint's attention)."""
    from pathlib import Path

    from treeopt.engines.trtllm.configs import attention_kind
    from treeopt.files import read_json

    model, config = getattr(args, "model", None), getattr(args, "config", None)
    path = Path(model) / "config.json" if model else Path(config) if config else None
    if path is None:
        return None
    doc = read_json(path)
    require(isinstance(doc, dict), f"{path}: a model config.json holds an object")
    return attention_kind(doc)


def step_profile(args: argparse.Namespace) -> Any:
    """The --step-profile files read and pooled (one profile), if given."""
    if not args.step_profile:
        return None
    from treeopt.documents.step_profile import StepProfile

    return StepProfile.pool(args.step_profile)


def profile_costs(args: argparse.Namespace, profile: Any) -> Any:
    """The step costs of the --step-profile files (None without them), the verify step shared
    with the --shared-verify profiles."""
    require(profile is not None or not args.shared_verify, "--shared-verify needs "
            "--step-profile: the drafter's own profile, whose drafting and overhead are priced")
    if profile is None:
        return None
    from treeopt.documents.step_profile import StepProfile
    from treeopt.pricing.shared_verify import shared_verify_costs, unlike

    others = []
    for path in args.shared_verify or ():
        try:
            other = StepProfile.load(path)
        except TreeoptError as exc:
            raise TreeoptError(f"--shared-verify {exc}") from None
        require((why := unlike(profile, other)) is None, f"--shared-verify {path}: {why}")
        others.append(other)
    return shared_verify_costs(profile, others)


def check_sources(args: argparse.Namespace, growth: Any, trace: Any, profile: Any,
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


def verify_latency(args: argparse.Namespace, growth: Any, cfg: Any, costs: Any) -> Any:
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

    need_grid(args, "batch", "context")
    return roofline_latency(growth, model=cfg, hardware=load_hardware(args.hardware),
                            batch=args.batch, context=args.context,
                            precision=precision(args), attention=args.attention)


def draft_cost(args: argparse.Namespace, cfg: Any, costs: Any) -> Any:
    """The drafting cost: the step profile's, else --draft-kind's on the roofline, else none."""
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
                          hardware=load_hardware(args.hardware), precision=precision(args),
                          num_layers=args.draft_layers)
