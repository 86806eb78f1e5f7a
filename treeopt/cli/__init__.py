"""The ``treeopt`` command: sub-commands are registered by the modules of this package.

Every sub-command prints JSON on stdout (or writes it to ``--out``), shows progress on stderr, and
turns a :class:`~treeopt.errors.TreeoptError`, or a module of an optional extra that is not
installed, into one line on stderr with exit status 2. A :class:`~treeopt.errors.FieldError`
names library fields; the line names the flags the user typed instead (:func:`flag_for`).

Layer: the command line; may import the numpy layer, ``decoding``, ``drafters``, ``profiling``,
``assets``, ``demo`` and ``workbench``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from typing import NoReturn

from treeopt.cli.common import check_out
from treeopt.cli.demo_flags import add_demo_flags, expand_demo
from treeopt.errors import FieldError, TreeoptError, missing_extra
from treeopt.version import __version__

_MODULES = ("treeopt.cli.core", "treeopt.cli.models", "treeopt.cli.live", "treeopt.cli.hardware",
            "treeopt.cli.demo", "treeopt.cli.adaptive", "treeopt.cli.fetch")


# library fields whose flag is not `--` + the field with `_` → `-` (nor the dest of a flag of the
# sub-command at hand): DecodeConfig.top_k is --sample-top-k
FLAGS: dict[str, str] = {"top_k": "--sample-top-k"}


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr and exit status 2, like every other user error."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every sub-command registered."""
    import importlib

    parser = _Parser(
        prog="treeopt",
        description="Design, price, export and verify static speculation trees.",
    )
    parser.add_argument("--version", action="version", version=f"treeopt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.register(sub)
    add_demo_flags(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``treeopt`` console script."""
    parser = build_parser()
    try:
        argv = expand_demo(sys.argv[1:] if argv is None else argv, parser)
    except TreeoptError as exc:
        print(f"treeopt: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        check_out(args, parser, argv)  # before any work: never overwrite an input, never fail at the end
        return int(args.func(args) or 0)
    except TreeoptError as exc:
        message = str(exc)
        if isinstance(exc, FieldError):
            message = exc.named(lambda field: flag_for(field, _subparser(parser, args.command)))
        return _fail(args.command, " ".join(line.strip() for line in message.splitlines()
                                            if line.strip()))
    except ModuleNotFoundError as exc:  # an optional extra left out of the install
        hint = missing_extra(exc)
        if hint is None:
            raise
        return _fail(args.command, f"this command {hint}")
    except BrokenPipeError:  # output piped into `head` and closed: not an error of ours
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        _end_progress_line()
        print(f"treeopt {args.command}: interrupted", file=sys.stderr)
        return 130


def flag_for(field: str, parser: argparse.ArgumentParser | None = None) -> str:
    """The flag that sets the library field ``field``: the long option of ``parser``'s argument
    whose dest is ``field``; else the one :data:`FLAGS` names; else ``--`` + ``field`` with ``_``
    written ``-``.

    >>> flag_for("top_p"), flag_for("top_k"), flag_for("max_new_tokens")
    ('--top-p', '--sample-top-k', '--max-new-tokens')
    """
    for action in actions(parser) if parser is not None else ():
        longs = [o for o in action.option_strings if o.startswith("--")]
        if action.dest == field and longs:
            return longs[0]
    return FLAGS.get(field, "--" + field.replace("_", "-"))


def actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """The arguments of ``parser`` and of its sub-commands, theirs included, depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from actions(sub)
        else:
            yield action


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser | None:
    """The parser of sub-command ``command``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(command)
    return None


def _fail(command: str, message: str) -> int:
    """``message`` as one line on stderr, after any progress bar; exit status 2."""
    _end_progress_line()
    print(f"treeopt {command}: error: {message}", file=sys.stderr)
    return 2


def _end_progress_line() -> None:
    """End the line of a progress bar still on stderr, so a message that follows starts its own."""
    tqdm = sys.modules.get("tqdm")
    bars = list(getattr(tqdm.tqdm, "_instances", ())) if tqdm is not None else []
    if bars:
        sys.stderr.write("\n")
    for bar in bars:
        bar.disable = True  # closing it later must not redraw over the message
