"""Core sub-commands: accuracies, grow, simulate, export, show."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from treeopt.accuracy import AccuracyTable, read_accuracies
from treeopt.cli.common import add_out, emit
from treeopt.errors import TreeoptError
from treeopt.formats import DRAFTS, FORMATS, engine_problems, export, load_tree_arg
from treeopt.grow import CONSTRAINTS, grow
from treeopt.simulate import simulate
from treeopt.trace import RankTrace
from treeopt.value import METHODS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("accuracies", help="per-head top-i accuracy tables of a trace or CSV")
    _add_source(p)
    add_out(p)
    p.set_defaults(func=cmd_accuracies)

    p = sub.add_parser("grow", help="grow the E[L]-maximising tree of every size")
    _add_source(p)
    p.add_argument("--method", choices=METHODS, default="empirical",
                   help="empirical (exact, needs --trace) or independent (Medusa's model)")
    p.add_argument("--max-nodes", type=int, required=True, metavar="N")
    p.add_argument("--max-depth", type=int, metavar="D", help="default: number of heads")
    p.add_argument("--max-rank", type=int, metavar="R", help="default: recorded top-k")
    p.add_argument("--constraint", choices=CONSTRAINTS, default="none",
                   help="engine shape: contiguous (Hydra) or uniform (vLLM)")
    p.add_argument("--held-out", metavar="TRACE",
                   help="also report E[L] of every size on this trace, and the gap")
    add_out(p)
    p.set_defaults(func=cmd_grow)

    p = sub.add_parser("simulate", help="accepted lengths of a tree on a rank trace")
    _add_tree(p)
    p.add_argument("--trace", required=True, metavar="T.npz")
    add_out(p)
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("export", help="a tree in an engine's format")
    _add_tree(p)
    p.add_argument("--format", dest="target", choices=FORMATS, required=True)
    p.add_argument("--num-heads", type=int, metavar="K", help="heads the engine has (checked)")
    p.add_argument("--draft", choices=DRAFTS, default="medusa",
                   help="TensorRT-LLM decoding type for trtllm / trtllm-yaml")
    p.add_argument("--out", metavar="FILE", help="write the text here instead of stdout")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("show", help="draw a tree and list its shape")
    p.add_argument("tree", metavar="TREE")
    p.add_argument("--size", type=int, metavar="N", help="tree size, for growth files")
    p.add_argument("--format", dest="tree_format", choices=FORMATS,
                   help="the TREE file's form (default: detected)")
    p.set_defaults(func=cmd_show)


def _add_source(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="T.npz", help="a rank trace")
    src.add_argument("--accuracies", metavar="A.csv",
                     help="cumulative top-i accuracies (CSV head,top1,…,topK or JSON)")


def _add_tree(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tree", required=True, metavar="TREE",
                   help="tree JSON, growth JSON (with --size) or a choices list in any form")
    p.add_argument("--size", type=int, metavar="N", help="tree size, for growth files")
    p.add_argument("--tree-format", choices=FORMATS, help="the TREE file's form (default: detected)")


def _load_source(args: argparse.Namespace) -> RankTrace | AccuracyTable:
    if args.trace:
        return RankTrace.load(args.trace)
    return read_accuracies(args.accuracies)


def cmd_accuracies(args: argparse.Namespace) -> int:
    source = _load_source(args)
    table = source if isinstance(source, AccuracyTable) else AccuracyTable.from_trace(source)
    return emit(table.to_json(), args.out)


def cmd_grow(args: argparse.Namespace) -> int:
    source = _load_source(args)
    growth = grow(source, method=args.method, max_nodes=args.max_nodes, max_depth=args.max_depth,
                  max_rank=args.max_rank, constraint=args.constraint)
    doc: dict[str, Any] = growth.to_json()
    if args.held_out:
        held = growth.evaluate(RankTrace.load(args.held_out))
        doc["held_out"] = {"trace": args.held_out,
                           "expected_accept_length": [round(float(x), 12) for x in held],
                           "gap": [round(float(a - b), 12) for a, b in
                                   zip(growth.expected_accept_length, held, strict=True)]}
    print(f"grew {args.method} trees of 1 … {growth.max_nodes} nodes", file=sys.stderr)
    if "exhausted" in growth.meta:
        print(f"note: {growth.meta['exhausted']}", file=sys.stderr)
    return emit(doc, args.out)


def cmd_simulate(args: argparse.Namespace) -> int:
    tree = load_tree_arg(args.tree, size=args.size, fmt=args.tree_format)
    trace = RankTrace.load(args.trace)
    trace.require(heads=tree.depth, source=args.trace)
    doc = simulate(tree, trace).to_json()
    if "sequence_positions" in trace.meta:  # where decoding's steps really start
        doc["per_step"] = simulate(tree, trace, per_step=True).to_json()
    return emit(doc, args.out)


def cmd_export(args: argparse.Namespace) -> int:
    tree = load_tree_arg(args.tree, size=args.size, fmt=args.tree_format)
    text = export(tree, args.target, num_heads=args.num_heads, draft=args.draft)
    if args.out:
        from treeopt.files import write_text_atomic

        write_text_atomic(args.out, text if text.endswith("\n") else text + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text.rstrip("\n"))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    tree = load_tree_arg(args.tree, size=args.size, fmt=args.tree_format)
    if tree.size == 0:
        raise TreeoptError(f"{args.tree}: the tree has no nodes")
    print(tree.draw())
    print(f"\nnodes {tree.size} (+ root), depth {tree.depth}, widths per depth {list(tree.widths)}, "
          f"leaves {len(tree.leaves)}, max rank {tree.max_rank}")
    for fmt in ("medusa", "hydra", "vllm", "growmap"):
        problems = engine_problems(tree, fmt)
        print(f"{fmt:8} {'ok' if not problems else 'no: ' + '; '.join(problems)}")
    return 0
