"""``treeopt adaptive``: replay the engines' step controllers on a trace, tune SGLang's adaptive
config, and write an engine's config file with its launch flags beside it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from treeopt.cli.common import int_list
from treeopt.errors import TreeoptError

WORKLOADS: tuple[str, ...] = ("steady", "easy-first", "hard-first")


def register(sub: argparse._SubParsersAction) -> None:
    from treeopt.engines.registry import ADAPTIVE_ENGINES
    from treeopt.engines.trtllm.schedule import DEFAULT_READING, READINGS

    p = sub.add_parser("adaptive", help="replay and tune the engines' adaptive step controllers "
                       "on a chain trace; write the engine's config")
    p.add_argument("--engine", choices=ADAPTIVE_ENGINES, default="sglang",
                   help="whose config file --out gets (default %(default)s)")
    p.add_argument("--trace", required=True, metavar="T.npz",
                   help="a rank trace that records its sequences, or a dynamic trace of top-k 1 "
                        "(required)")
    p.add_argument("--step-profile", required=True, nargs="+", metavar="S.json",
                   help="the live step profiled (treeopt profile step), which prices each "
                        "chain length (required)")
    p.add_argument("--shared-verify", nargs="+", metavar="S.json",
                   help="other drafters' step profiles of the same model and setup, which price "
                        "the verify step too (as select's; --demo: the demo's other drafters')")
    p.add_argument("--batch", type=int_list("--batch"), default=[1, 2, 4, 8], metavar="B,…",
                   help="batch sizes, each replayed as a steady load (default 1,2,4,8)")
    p.add_argument("--context", type=int, metavar="S", help="the profiled context to price at "
                   "(default: the profile's only one)")
    p.add_argument("--workload", choices=WORKLOADS, default="steady",
                   help="the trace's sequences in order, or ordered by acceptance so that it "
                        "shifts (default %(default)s)")
    p.add_argument("--sglang-version", default="0.5.23", metavar="V",
                   help="whose built-in default is compared (0.5.14 … 0.5.23; default "
                        "%(default)s)")
    p.add_argument("--no-overlap", action="store_true",
                   help="SGLang runs with --disable-overlap-schedule (a decision drafts the next "
                        "round, not the one after)")
    p.add_argument("--trtllm-reading", choices=READINGS, default=DEFAULT_READING,
                   help="which TensorRT-LLM version's reading of its per-batch schedule to "
                        "write for: release-1.2 (keys are lower thresholds) or main (after PR "
                        "#10860: keys are upper ends) (default %(default)s)")
    p.add_argument("--growth", metavar="G.json",
                   help="also price the best static tree of this growth (on --static-trace)")
    p.add_argument("--static-trace", metavar="R.npz",
                   help="the rank trace static trees are walked on (default --trace, when it "
                        "is a rank trace)")
    p.add_argument("--draft-model", default="DRAFT", metavar="PATH",
                   help="the draft model's path written into the flags and files (default "
                        "%(default)s)")
    p.add_argument("--report", metavar="FILE", help="write the whole report (JSON) here")
    p.add_argument("--out", metavar="FILE",
                   help="write the engine's config file here, its launch flags beside it "
                        "(FILE.flags); default: print the report")
    p.set_defaults(func=cmd_adaptive)


def _acceptance(path: str) -> tuple[Any, Any]:
    """The chain acceptance of the trace at ``path`` and the rank trace itself (None for a
    dynamic trace)."""
    import numpy as np

    from treeopt.adaptive.workload import ChainAcceptance
    from treeopt.dynamic.simulate import DynamicTrace
    from treeopt.model.trace import RankTrace

    try:
        with np.load(path, allow_pickle=False) as z:
            names = set(z.files)
    except FileNotFoundError:
        raise TreeoptError(f"{path}: no such file") from None
    except (OSError, ValueError) as exc:
        raise TreeoptError(f"{path}: not a trace (.npz) ({exc})") from None
    if "places" in names:
        trace = DynamicTrace.load(path)
        return ChainAcceptance.from_dynamic(trace, source=Path(path).name), None
    trace = RankTrace.load(path)
    kept = trace.nonempty()  # a continuation too short to rank is no request to replay
    if kept is not trace:
        left = len(trace.meta["sequence_positions"]) - len(kept.meta["sequence_positions"])
        print(f"note: {path}: {left} sequences of 0 positions (continuations shorter than "
              f"{trace.heads} heads + 2 tokens) left out of the replay", file=sys.stderr)
    return ChainAcceptance.from_rank_trace(kept, source=Path(path).name), kept


def cmd_adaptive(args: argparse.Namespace) -> int:
    from treeopt.adaptive.report import adaptive_report
    from treeopt.adaptive.workload import by_difficulty
    from treeopt.cli.select_sources import profile_costs
    from treeopt.documents.step_profile import StepProfile
    from treeopt.engines.sglang.adaptive import SGLangConfig
    from treeopt.files import write_json, write_text_atomic
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace

    acceptance, rank = _acceptance(args.trace)
    if args.workload != "steady":
        acceptance = by_difficulty(acceptance, easy_first=args.workload == "easy-first")
    costs = profile_costs(args, StepProfile.pool(args.step_profile))
    growth = Growth.load(args.growth) if args.growth else None
    static = RankTrace.load(args.static_trace) if args.static_trace else rank
    if growth is not None and static is None:
        raise TreeoptError("--growth needs a rank trace to walk static trees on: give "
                           "--static-trace (--trace is a dynamic trace)")
    default = SGLangConfig.default(args.sglang_version, overlap=not args.no_overlap)
    report = adaptive_report(acceptance, costs, batches=args.batch, context=args.context,
                             default=default, growth=growth, static_trace=static)
    print(report.table(), file=sys.stderr)
    if args.report:
        write_json(args.report, report.to_json())
    if not args.out:
        from treeopt.cli.common import emit

        return emit(report.to_json(), None)
    file = _engine_file(args, report)
    write_text_atomic(args.out, file.text)
    write_text_atomic(args.out + ".flags", file.flags + "\n")
    print(f"wrote {args.out} and {args.out}.flags", file=sys.stderr)
    print(file.flags)
    return 0


def _engine_file(args: argparse.Namespace, report: Any) -> Any:
    from treeopt.engines.sglang import adaptive as sglang
    from treeopt.engines.trtllm import schedule as trtllm
    from treeopt.engines.vllm import per_batch as vllm

    if args.engine == "sglang":
        return sglang.adaptive_file(report.tuned, args.out, draft_model=args.draft_model)
    if args.engine == "vllm":
        return vllm.adaptive_file(report.vllm, args.out, draft_model=args.draft_model)
    return trtllm.adaptive_file(report.trtllm[args.trtllm_reading], args.out,
                                draft_model=args.draft_model)
