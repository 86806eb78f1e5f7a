"""Core sub-commands: accuracies, grow, simulate, export, show."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from treeopt.cli.common import add_out, emit
from treeopt.engines.chain_forms import EXTENSIONS as CHAIN_EXTENSIONS
from treeopt.engines.chain_forms import chain_notes, export_chain, exports_chains
from treeopt.engines.forms import EXTENSIONS, export
from treeopt.engines.lookup import (
    LOOKUP_FORMATS,
    export_lookup,
    lookup_form,
    recorded_lookup,
    recorded_trie,
)
from treeopt.engines.registry import DRAFTS, ENGINES, FORMATS, engine, engine_problems
from treeopt.engines.sglang.flags import TRIE_NOTES
from treeopt.errors import TreeoptError
from treeopt.files import write_json, write_text_atomic
from treeopt.model.acceptance import METHODS
from treeopt.model.accuracy import AccuracyTable, read_accuracies
from treeopt.model.growth import CONSTRAINTS, Growth, grow
from treeopt.model.simulation import simulate
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.pricing.chains import chain_method
from treeopt.pricing.contexts import pick_context
from treeopt.pricing.selection import Selection, schedule
from treeopt.pricing.tree_files import file_kind, is_selection_file, load_tree_arg, recorded_drafter
from treeopt.registry.kinds import KINDS, engine_draft

NGRAM = "ngram"  # --draft of a chain drafted by prompt lookup (n-gram settings, no tree)
EXPORT_FORMATS = FORMATS + tuple(f for f in LOOKUP_FORMATS if f not in FORMATS)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("accuracies", help="per-head top-i accuracy tables of a trace or CSV")
    _add_source(p)
    add_out(p)
    p.set_defaults(func=cmd_accuracies)

    p = sub.add_parser("grow", help="grow the E[L]-maximising tree of every size")
    _add_source(p)
    p.add_argument("--method", choices=METHODS, default="empirical",
                   help="empirical (exact, needs --trace) or independent (Medusa's model) "
                        "(default %(default)s)")
    p.add_argument("--max-nodes", type=int, required=True, metavar="N",
                   help="the largest tree; the growth holds every size 0 … N (required)")
    p.add_argument("--max-depth", type=int, metavar="D", help="default: number of heads")
    p.add_argument("--max-rank", type=int, metavar="R", help="default: recorded top-k")
    p.add_argument("--constraint", choices=CONSTRAINTS, default="none",
                   help="engine shape (default none): contiguous (TensorRT-LLM EAGLE, Sequoia), "
                        "grounded (Hydra) or uniform (vLLM); `treeopt show` says which a tree "
                        "needs")
    p.add_argument("--held-out", metavar="TRACE",
                   help="also report E[L] of every size on this trace, and the gap")
    add_out(p)
    p.set_defaults(func=cmd_grow)

    p = sub.add_parser("simulate", help="accepted lengths of a tree on a rank trace")
    _add_tree(p)
    p.add_argument("--trace", required=True, metavar="T.npz",
                   help="the rank trace the tree is walked on (required)")
    add_out(p)
    p.set_defaults(func=cmd_simulate)

    p = sub.add_parser("export", help="a tree in an engine's format, refused where the engine "
                                      "would build a different tree")
    _add_tree(p)
    p.add_argument("--format", dest="target", choices=EXPORT_FORMATS, required=True,
                   help="the engine format to write (required); for prompt lookup: "
                        f"{', '.join(LOOKUP_FORMATS)} (sglang and hf have no tree form)")
    p.add_argument("--num-heads", type=int, metavar="K",
                   help="heads (depths) the drafter has: checked against the tree's depth; "
                        "required for --format trtllm-yaml --draft medusa (default: what a "
                        "growth or selection --tree records)")
    p.add_argument("--draft", choices=(*DRAFTS, NGRAM),
                   help="TensorRT-LLM decoding type for trtllm / trtllm-yaml, or ngram: the "
                        "chain's prompt-lookup settings (default: eagle or ngram when a growth "
                        "or selection --tree was grown for an EAGLE drafter or prompt lookup, "
                        "else medusa)")
    p.add_argument("--min-n", type=int, metavar="N",
                   help="--draft ngram: shortest n-gram matched (default: what the --tree "
                        "records, else 1)")
    p.add_argument("--max-n", type=int, metavar="N",
                   help="--draft ngram: longest n-gram matched (default: what the --tree "
                        "records, else treeopt's prompt-lookup default)")
    p.add_argument("--speculative-model", metavar="DIR",
                   help="the EAGLE checkpoint, for --format trtllm-yaml --draft eagle (required "
                        "there) and vllm (default: the drafter directory a growth or selection "
                        "--tree records)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", metavar="FILE", help="write the text here instead of stdout")
    out.add_argument("--schedule-dir", metavar="DIR",
                     help="for a selection: one file per batch-size range of its schedule, "
                          "named <format>.batch<min>-<max>.<ext>, and schedule.json")
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("show", help="draw a tree, list its shape and every engine that runs it")
    p.add_argument("tree", metavar="TREE",
                   help="growth JSON (with --size), selection JSON (with --batch), tree JSON or "
                        "a choices list in any form")
    _add_tree_pick(p)
    p.add_argument("--num-heads", type=int, metavar="K",
                   help="heads the drafter has (checked against the tree's depth)")
    p.set_defaults(func=cmd_show)


def _add_source(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--trace", metavar="T.npz", help="a rank trace (this or --accuracies)")
    src.add_argument("--accuracies", metavar="A.csv",
                     help="cumulative top-i accuracies (CSV head,top1,…,topK or JSON)")


def _add_tree(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tree", required=True, metavar="TREE",
                   help="growth JSON (with --size), selection JSON (with --batch), tree JSON or "
                        "a choices list in any form (required)")
    _add_tree_pick(p)


def _add_tree_pick(p: argparse.ArgumentParser) -> None:
    p.add_argument("--size", type=int, metavar="N", help="tree size, for growth files")
    p.add_argument("--batch", type=int, metavar="B",
                   help="for selection files: the batch size whose tree to take")
    p.add_argument("--context", type=int, metavar="S",
                   help="for selections swept at several contexts: the context length")
    p.add_argument("--tree-format", choices=FORMATS, help="the TREE file's form (default: detected)")


def _tree(args: argparse.Namespace) -> Tree:
    return load_tree_arg(args.tree, size=args.size, fmt=args.tree_format, batch=args.batch,
                         context=args.context)


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
        doc["held_out"] = _held_out(growth, args.held_out)
    print(f"grew {args.method} trees of 1 … {growth.max_nodes} nodes; "
          f"{_growth_accept_text(growth, growth.max_nodes)}", file=sys.stderr)
    if "exhausted" in growth.meta:
        print(f"note: {growth.meta['exhausted']}", file=sys.stderr)
    return emit(doc, args.out)


def _growth_accept_text(growth: Growth, n: int) -> str:
    """E[L] of the growth's n-node tree as a person reads it: per step first.

    >>> import numpy as np
    >>> g = Growth("empirical", "none", ((0,),), np.array([1.0, 2.0]), {},
    ...            per_step_accept_length=np.array([1.0, 1.5]))
    >>> _growth_accept_text(g, 1)
    'E[L] of the 1-node tree 1.5 per step (2 position-weighted)'
    """
    weighted = f"{float(growth.expected_accept_length[n]):.4g}"
    if growth.per_step_accept_length is None:
        return f"E[L] of the {n}-node tree {weighted} position-weighted"
    return (f"E[L] of the {n}-node tree {float(growth.per_step_accept_length[n]):.4g} per step "
            f"({weighted} position-weighted)")


def _held_out(growth: Growth, path: str) -> dict[str, Any]:
    """E[L] of every size on the held-out trace at ``path``, and the gap to the growth's own:
    per step (where both traces record their sequences) first, then position-weighted."""
    trace = RankTrace.load(path)
    doc: dict[str, Any] = {"trace": path}
    steps = growth.evaluate_per_step(trace)
    if steps is not None:
        doc["per_step_accept_length"] = _rounded(steps)
        if growth.per_step_accept_length is not None:
            doc["per_step_gap"] = _rounded(growth.per_step_accept_length - steps)
    held = growth.evaluate(trace)
    doc["expected_accept_length"] = _rounded(held)
    doc["gap"] = _rounded(growth.expected_accept_length - held)
    return doc


def _rounded(values: Any) -> list[float]:
    return [round(float(x), 12) for x in values]


def cmd_simulate(args: argparse.Namespace) -> int:
    tree = _tree(args)
    trace = RankTrace.load(args.trace)
    trace.require(heads=tree.depth, source=args.trace)
    return emit(_simulation_doc(tree, trace), args.out)


def _simulation_doc(tree: Tree, trace: RankTrace) -> dict[str, Any]:
    """``treeopt simulate``'s output: the per-step walk where the trace records its sequences
    (``acceptance``: ``per step``), with the position-weighted figures under
    ``position_weighted``; else the position-weighted ones alone.

    >>> import numpy as np
    >>> tr = RankTrace(np.array([[0], [0], [-1], [0]], np.int16), {"sequence_positions": [4]})
    >>> doc = _simulation_doc(Tree.chain(1), tr)
    >>> doc["acceptance"], doc["mean_accept_length"], doc["steps"]
    ('per step', 1.6666666666666667, 3)
    >>> doc["position_weighted"]["mean_accept_length"]
    1.75
    """
    weighted = simulate(tree, trace).to_json()
    if "sequence_positions" not in trace.meta:
        return {"acceptance": "position-weighted", **weighted}
    walk = simulate(tree, trace, per_step=True)  # where decoding's steps really start
    return {"acceptance": "per step", "mean_accept_length": walk.mean_accept_length,
            "stderr": walk.stderr, "histogram": list(walk.histogram), "steps": walk.count,
            "sequences": len(walk.sequences), "positions": trace.positions,
            "position_weighted": weighted}


def cmd_export(args: argparse.Namespace) -> int:
    _fill_drafter(args)
    notes = _notes(args)
    if args.schedule_dir:
        return _export_schedule(args)
    tree = _tree(args)
    text = _export_text(tree, args)
    if args.chain is not None:
        notes = chain_notes(args.chain[0], args.target, tree)
    if args.out:
        write_text_atomic(args.out, text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(text.rstrip("\n"))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0


def _notes(args: argparse.Namespace) -> tuple[str, ...]:
    """What a user must know beside the exported text; an unknown target is refused."""
    if args.chain is not None:
        return chain_notes(args.chain[0], args.target, Tree(()))
    if args.draft == NGRAM:
        trie = getattr(args, "trie", None) is not None
        return TRIE_NOTES if trie else lookup_form(args.target).notes(args.min_n)
    if args.target not in FORMATS:
        raise TreeoptError(f"--format {args.target} writes prompt-lookup settings only: export "
                           "a growth or selection grown for prompt lookup, or pass --draft ngram")
    return engine(args.target, args.draft).notes


def _fill_drafter(args: argparse.Namespace) -> None:
    """Defaults of --draft, --speculative-model and --num-heads from the drafter a growth or
    selection --tree records (flags given win); a drafter the engines run as chains (MTP,
    suffix decoding: :func:`treeopt.engines.chain_forms.exports_chains`) sets ``args.chain``
    (its vLLM method and record) and takes no --draft."""
    recorded = recorded_drafter(args.tree)
    hybrid = KINDS.get(str(recorded.get("kind") or ""))
    if hybrid is not None and hybrid.hybrid:
        raise TreeoptError(f"{args.tree} was grown for a hybrid ({hybrid.title}): no engine "
                           "verifies one tree of a drafter's and n-gram candidates (see "
                           "docs/drafters.md); export the drafter's own tree, or --draft ngram")
    method = chain_method(recorded)
    args.chain = (method, recorded) if exports_chains(method) else None
    if args.chain is not None:
        if args.draft is not None:
            raise TreeoptError(f"{args.tree} was grown for a {hybrid.title.lower()}, which the "
                               f"engines draft as chains (their own configs): leave out --draft")
        return
    if _fill_lookup(args, recorded):
        return
    typed = engine_draft(recorded.get("kind"))  # medusa, eagle or eagle3
    eagle = typed != "medusa"
    if args.draft is None:
        args.draft = "eagle" if eagle else "medusa"
    if args.draft == "eagle" and args.speculative_model is None and eagle:
        args.speculative_model = recorded.get("checkpoint")
    args.method = typed if eagle else "eagle"
    if args.num_heads is None and isinstance(recorded.get("depth"), int):
        args.num_heads = recorded["depth"]


def _fill_lookup(args: argparse.Namespace, recorded: dict[str, Any]) -> bool:
    """Whether the export is of n-gram settings (``--draft ngram``, the default for a --tree
    grown for an n-gram drafter); if so, --min-n and --max-n default to the n-gram lengths it
    records, and a trie's recorded depth goes to its trie setting (which kind records which:
    :attr:`~treeopt.registry.kinds.DrafterKind.max_match`)."""
    lookup, trie = recorded_lookup(recorded), recorded_trie(recorded)
    ngram = lookup is not None or trie is not None
    if ngram and args.draft not in (None, NGRAM):
        grown = KINDS[str(recorded["kind"])].title.lower()
        raise TreeoptError(f"{args.tree} was grown for {grown}, not for --draft "
                           f"{args.draft}: export it with --draft ngram")
    if args.draft != NGRAM and not ngram:
        if args.min_n is not None or args.max_n is not None:
            raise TreeoptError("--min-n and --max-n apply to prompt-lookup settings "
                               "(--draft ngram) only")
        return False
    if trie is not None and (args.min_n is not None or args.max_n is not None):
        raise TreeoptError(f"--min-n and --max-n set prompt lookup's n-grams; {args.tree} was "
                           f"grown for an n-gram trie of depth {trie.max_trie_depth}, which it "
                           "records")
    from treeopt.drafters.ngram import LookupRule

    args.draft = NGRAM
    args.trie = trie  # a tree of an n-gram trie, not a chain
    default = lookup or (LookupRule().min_n, LookupRule().max_n)
    args.min_n = default[0] if args.min_n is None else args.min_n
    args.max_n = default[1] if args.max_n is None else args.max_n
    return True


def _export_text(tree: Tree, args: argparse.Namespace) -> str:
    if args.chain is not None:
        return export_chain(args.chain[0], args.target, tree, drafter=args.chain[1])
    if args.draft == NGRAM:
        text = export_lookup(tree, args.target, min_n=args.min_n, max_n=args.max_n,
                             trie=getattr(args, "trie", None))
    else:
        text = export(tree, args.target, num_heads=args.num_heads, draft=args.draft,
                      speculative_model=args.speculative_model,
                      method=getattr(args, "method", "eagle"))
    return text if text.endswith("\n") else text + "\n"


def _export_schedule(args: argparse.Namespace) -> int:
    """One engine file per batch-size range of a selection's schedule, and the schedule."""
    if not is_selection_file(args.tree):
        raise TreeoptError(f"--schedule-dir exports a selection's per-batch schedule, and "
                           f"{args.tree} is not a selection (pass --out instead)")
    if args.batch is not None:
        raise TreeoptError("--schedule-dir writes every batch range; leave out --batch")
    selection = Selection.load(args.tree)
    context = pick_context(selection.contexts, args.context, where=args.tree)
    plan = schedule(selection, context=context)
    files = {}  # every file is rendered (and every tree checked) before one is written
    for r in plan["ranges"]:
        if r["size"] == 0:
            continue  # speculation off: nothing for the engine to load
        name = f"{args.target}.batch{r['min_batch']}-{r['max_batch']}.{_extension(args)}"
        try:
            files[name] = _export_text(Tree.from_choices(r["choices"]), args)
        except TreeoptError as exc:
            raise TreeoptError(f"batches {r['min_batch']}-{r['max_batch']}: {exc}") from None
        r["file"] = name
    folder = Path(args.schedule_dir)
    for name in [*files, "schedule.json"]:
        if (folder / name).exists() and (folder / name).samefile(args.tree):
            raise TreeoptError(f"--schedule-dir {folder}: writing {name} would overwrite the "
                               "--tree input; choose another --schedule-dir")
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_text_atomic(folder / name, text)
    write_json(folder / "schedule.json", plan)
    for r in plan["ranges"]:
        what = r.get("file", "speculation off")
        print(f"batch {r['min_batch']}-{r['max_batch']}: {r['size']} nodes → {what}",
              file=sys.stderr)
    print(f"wrote {len(files)} file(s) and schedule.json to {folder}", file=sys.stderr)
    for note in _notes(args):
        print(f"note: {note}", file=sys.stderr)
    return 0


def _extension(args: argparse.Namespace) -> str:
    """The file name ending of what --format writes."""
    if args.chain is not None:
        return CHAIN_EXTENSIONS.get(args.target, "txt")
    if args.draft == NGRAM:
        return lookup_form(args.target).extension
    return EXTENSIONS.get(args.target, "txt")


def cmd_show(args: argparse.Namespace) -> int:
    tree = _tree(args)
    if tree.size == 0:
        raise TreeoptError(f"{args.tree}: the tree has no nodes")
    print(tree.draw())
    print(f"\nnodes {tree.size} (+ root), depth {tree.depth}, widths per depth {list(tree.widths)}, "
          f"leaves {len(tree.leaves)}, max rank {tree.max_rank}")
    recorded = _recorded_accept_length(args, tree)
    if recorded is not None:
        print(recorded)
    print("\nengines (export --format …):")
    for target in ENGINES:
        problems = engine_problems(tree, target.format, num_heads=args.num_heads,
                                   draft=target.draft or "medusa")
        verdict = "runs it" if not problems else "no: " + "; ".join(problems)
        print(f"  {target.label:26} {verdict}")
    return 0


def _recorded_accept_length(args: argparse.Namespace, tree: Tree) -> str | None:
    """The E[L] a growth or selection --tree records for ``tree`` (per step first); None for
    a plain tree file."""
    kind = file_kind(Path(args.tree).read_text(encoding="utf-8"))
    if kind == "growth":
        return _growth_accept_text(Growth.load(args.tree), args.size)
    if kind != "selection":
        return None
    selection = Selection.load(args.tree)
    point = next(p for p in selection.points if p.tree == tree
                 and args.batch in (None, p.batch) and args.context in (None, p.context))
    how = selection.growth.get("acceptance", "E[L] of the growth")
    return (f"E[L] {point.expected_accept_length:.4g} as priced ({how}), a tree of the "
            f"{point.family} family")
