"""Helpers shared by the sub-command modules: output, list flags, progress, the ``--out`` check."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from treeopt.decoding.config import ATTENTIONS
from treeopt.documents.dtypes import dtype_name
from treeopt.documents.measure import MAX_ROUNDS
from treeopt.errors import TreeoptError
from treeopt.files import dumps, streamed, write_json


def emit(obj: Any, out: str | None) -> int:
    """Write ``obj`` as JSON to ``out`` (atomically) or to stdout; return exit status 0."""
    if out:
        write_json(out, obj)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(dumps(obj) + "\n")
    return 0


def check_out(args: argparse.Namespace, parser: argparse.ArgumentParser,
              argv: Sequence[str] = ()) -> None:
    """Refuse, before any work starts, an output that would overwrite one of the command's
    inputs or that cannot be written: ``--out`` (a directory that the command replaces when it
    sets ``writes_directory=True`` in its defaults, else a file) and ``export --schedule-dir`` (a
    directory the command adds files to)."""
    replaces = bool(getattr(args, "writes_directory", False))
    outputs = [("--out", getattr(args, "out", None), replaces, replaces),
               ("--schedule-dir", getattr(args, "schedule_dir", None), True, False)]
    for out_flag, out, directory, replaces_contents in outputs:
        if not out:
            continue
        for flag, value in input_paths(args, parser, argv):
            _check_not_input(Path(out), flag, Path(value), out_flag=out_flag,
                             replaces_contents=replaces_contents)
        check_writable(Path(out), directory=directory, out_flag=out_flag)


def input_paths(args: argparse.Namespace, parser: argparse.ArgumentParser,
                argv: Sequence[str] = ()) -> list[tuple[str, str]]:
    """``(flag, value)`` of every plain string argument of the chosen sub-command that names an
    existing file or directory — the command's inputs (``--out`` itself excluded); a flag with
    aliases is named as ``argv`` spells it."""
    found = []
    for action in _chosen_actions(args, parser):
        if (action.dest in ("out", "schedule_dir") or not isinstance(action, argparse._StoreAction)  # noqa: SLF001
                or action.type is not None or action.choices is not None):
            continue
        value = getattr(args, action.dest, None)
        flag = _flag_name(action, argv)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and v and os.path.exists(v):
                found.append((flag, v))
    return found


def _flag_name(action: argparse.Action, argv: Sequence[str]) -> str:
    """The flag as ``argv`` spells it (of aliases such as --drafter/--heads), else its longest."""
    if not action.option_strings:
        return str(action.metavar or action.dest)
    typed = [s for s in action.option_strings
             if any(a == s or a.startswith(s + "=") for a in argv)]
    return typed[0] if typed else max(action.option_strings, key=len)


def _chosen_actions(args: argparse.Namespace,
                    parser: argparse.ArgumentParser | None) -> list[argparse.Action]:
    """The actions of ``parser`` and of every sub-command parser ``args`` chose below it."""
    actions: list[argparse.Action] = []
    while parser is not None:
        sub = None
        for action in parser._actions:  # noqa: SLF001
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                sub = action
            else:
                actions.append(action)
        parser = sub.choices.get(getattr(args, sub.dest, None) or "") if sub else None
    return actions


def _check_not_input(out: Path, flag: str, source: Path, *, out_flag: str,
                     replaces_contents: bool) -> None:
    again = f"choose another {out_flag}"
    if out.exists() and os.path.samefile(out, source):
        raise TreeoptError(f"{out_flag} {out} is the {flag} input: writing it would overwrite "
                           f"the input; {again}")
    if source.is_dir() and out.exists() and _inside(out, source):  # a new file there is fine
        raise TreeoptError(f"{out_flag} {out} is inside the {flag} directory {source}: writing "
                           f"it would overwrite part of an input; {again}")
    if replaces_contents and out.is_dir() and _inside(source, out):
        raise TreeoptError(f"{out_flag} {out} holds the {flag} input {source}: writing it would "
                           f"change an input; {again}")


def _inside(path: Path, folder: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def check_writable(out: Path, *, directory: bool, out_flag: str = "--out") -> None:
    """The target has the right kind, and its nearest existing ancestor (its parent, unless
    missing folders are created) is a directory a file can be created in."""
    if out.is_dir() and not directory:
        raise TreeoptError(f"{out_flag} {out} is a directory; give a file name")
    if not directory and streamed(out, flag=out_flag):
        return  # a device or FIFO, written through: nothing is created beside it
    if directory and out.is_symlink() and not out.exists():
        raise TreeoptError(f"{out_flag} {out} is a symlink to {os.readlink(out)}, which does "
                           "not exist; remove it or give another path")
    if directory and out.exists() and not out.is_dir():
        raise TreeoptError(f"{out_flag} {out} is a file; give a directory")
    where = out if directory and out.is_dir() else out.parent
    existing = next(p for p in (where, *where.parents) if p.exists())
    if not existing.is_dir():
        raise TreeoptError(f"{out_flag} {out}: {existing} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=existing, prefix=".treeopt-probe-"):
            pass
    except OSError as exc:
        raise TreeoptError(f"{out_flag} {out}: cannot write in {existing} "
                           f"({exc.strerror or exc})") from None


def add_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="FILE", help="write the JSON here instead of stdout")


def int_list(flag: str):
    """An argparse ``type`` for comma-separated positive integers, naming ``flag`` on error.

    >>> int_list("--batch")("1,2,8")
    [1, 2, 8]
    """

    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag}: expected comma-separated integers such as 1,2,4, got {text!r}") from None
        if not values or any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError(f"{flag}: expected positive integers, got {text!r}")
        return values

    return parse


def add_sampling_filters(p: argparse.ArgumentParser, *, when: str) -> None:
    """``--top-p`` and ``--sample-top-k``: which tokens a sampler keeps (``when``: the flag
    they go with, for the help)."""
    p.add_argument("--top-p", type=float, default=1.0, metavar="P",
                   help=f"{when}: nucleus sampling, keep the most likely tokens up to mass P "
                        "(default %(default)s: off)")
    p.add_argument("--sample-top-k", type=int, default=0, metavar="K",
                   help=f"{when}: keep the K most likely tokens (default %(default)s: off)")


DTYPE_HELP = "fp32, bf16, fp16 or fp64 (torch's names float32, bfloat16, … also work)"


def dtype_flag(text: str) -> str:
    """``--dtype``: a name of :mod:`treeopt.documents.dtypes` (an alias becomes its name)."""
    try:
        return dtype_name(text, source="dtype")
    except TreeoptError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """Flags of a real model loaded from a local directory (``ModelSpec`` fields, one to one)."""
    p.add_argument("--model", required=True, metavar="DIR",
                   help="local Hugging Face model directory: config.json, safetensors weights, "
                        "tokenizer files; nothing is downloaded (required)")
    p.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="cpu, cuda, cuda:1, … (default %(default)s)")
    p.add_argument("--dtype", default="fp32", type=dtype_flag, metavar="DTYPE",
                   help=DTYPE_HELP + " (default %(default)s)")
    p.add_argument("--attention", choices=ATTENTIONS, default="auto",
                   help="attention implementation: auto (default) is treeopt's exact attention "
                        "for 16-bit dtypes — a node's logits then do not depend on the tree "
                        "verified with it, so greedy tree decoding stays token-for-token "
                        "lossless — and the model's own otherwise")
    p.add_argument("--device-map", metavar="MAP",
                   help="passed to from_pretrained, e.g. auto to spread a model over several "
                        "GPUs (default: the whole model on --device)")
    p.add_argument("--trust-remote-code", action="store_true",
                   help="run Python code shipped in the model directory (off unless given; "
                        "only for models you trust)")
    p.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads for torch (default: torch's choice; 1 is fastest for tiny "
                        "models and on busy machines)")


def load_model_from(args: argparse.Namespace) -> tuple[Any, Any]:
    """The model and tokenizer the :func:`add_model_flags` flags name."""
    from treeopt.decoding.loading import ModelSpec, load_model
    from treeopt.profiling.host import emulated_bf16

    why = emulated_bf16(args.dtype, args.device)
    if why is not None:
        print(f"note: {why} (--dtype fp32; `treeopt demo build --dtype auto` measures both)",
              file=sys.stderr)
    return load_model(ModelSpec(path=args.model, device=args.device, dtype=args.dtype,
                                device_map=args.device_map,
                                trust_remote_code=args.trust_remote_code, threads=args.threads,
                                attention=args.attention))


def add_live_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a live measurement: a real model (:func:`add_model_flags`), its heads, the
    growth whose trees are measured, prompts and batch sizes."""
    add_model_flags(p)
    add_heads_flag(p)
    p.add_argument("--growth", required=True, metavar="G.json",
                   help="the growth whose trees are measured (treeopt grow) (required)")
    add_prompts_flag(p)
    p.add_argument("--batch", type=int_list("--batch"), default=[1], metavar="LIST",
                   help="comma-separated batch sizes (default 1)")


def add_heads_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--drafter", "--heads", dest="heads", required=True, metavar="DIR|SPEC",
                   help="drafter directory: treeopt heads (heads.json), Medusa's published "
                        "layout, or a draft model (a Hugging Face causal LM sharing the base "
                        "model's tokenizer); or weightless n-gram drafting: prompt lookup, "
                        "'prompt-lookup' or 'prompt-lookup:depth=10,min-n=1,max-n=3', or "
                        "SGLang's trie, 'ngram-trie' or "
                        "'ngram-trie:depth=10,max-trie-depth=18,match=bfs|prob', or "
                        "suffix decoding, 'suffix' or 'suffix:depth=16,max-tree-depth=24,"
                        "max-spec-factor=1.0,max-spec-offset=0,min-token-prob=0.1,"
                        "max-cached-requests=10000' (required)")
    p.add_argument("--draft-depth", type=int, metavar="K",
                   help="depths a draft model, an n-gram drafter or a published EAGLE "
                        "checkpoint drafts and a trace records (default 4; n-gram drafters "
                        "10; heads, and treeopt's EAGLE drafters, carry their own)")


def load_drafter_from(args: argparse.Namespace, model: Any) -> Any:
    """The drafter the :func:`add_heads_flag` flags name, wired to ``model``."""
    from treeopt.drafters.checkpoints import load_heads_for

    depth = getattr(args, "draft_depth", None)
    if depth is not None and depth < 1:
        raise TreeoptError(f"--draft-depth must be ≥ 1, got {depth}")
    return load_heads_for(model, args.heads, depth=depth)


def add_target_se(p: argparse.ArgumentParser, *, what: str, pooled: str = "") -> None:
    """``--target-se F``: more rounds until ``what`` is known to a relative standard error F
    (``pooled``: the figures whose spread floors each one's, where they share it)."""
    need = (f"its own noise, and at least {pooled}' pooled spread, needs" if pooled
            else "its own noise needs")
    p.add_argument("--target-se", type=float, default=0.0, metavar="F",
                   help=f"more rounds (up to {MAX_ROUNDS} in all), until the standard error of "
                        f"{what} is at most F of it, e.g. 0.015: each gets the rounds {need} "
                        f"(default 0: off)")


def measurement_from(args: argparse.Namespace, **fields: Any) -> Any:
    """The :class:`~treeopt.documents.measure.Measurement` of ``--rounds``, ``--min-seconds`` and
    ``--target-se`` (``fields`` replace flags); a bad value is a
    :class:`~treeopt.errors.FieldError`, which :func:`treeopt.cli.main` words as its flag."""
    from treeopt.documents.measure import Measurement

    return Measurement(**{"rounds": args.rounds, "min_seconds": args.min_seconds,
                          "target_se": args.target_se, **fields})


def add_prompts_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompts", nargs="+", required=True, metavar="FILE",
                   help="JSONL files with a 'prompt' field, text files (one text each) or "
                        "folders of them (required)")


def counted(desc: str, unit: str) -> tuple[Any, Any]:
    """A progress bar and the ``progress(done, total)`` callback the library calls."""
    bar = progress(desc=desc, unit=unit)

    def report(done: int, total: int) -> None:
        if bar.total != total:  # known once the library starts: show it at once
            bar.total = total
            bar.refresh()
        bar.update(done - bar.n)

    return bar, report


def progress(iterable: Any = None, **kwargs: Any) -> Any:
    """A tqdm progress bar on stderr (disabled when stderr is not a terminal unless forced)."""
    from tqdm.auto import tqdm

    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("leave", False)
    return tqdm(iterable, **kwargs)


def require(condition: bool, message: str) -> None:
    """Raise a TreeoptError with ``message`` unless ``condition``."""
    if not condition:
        raise TreeoptError(message)
