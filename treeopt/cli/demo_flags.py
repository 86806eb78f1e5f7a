"""``--demo [KIND]`` (medusa, hydra, eagle or draft-model) on every sub-command that takes a model, heads, trace, growth,
prompts or latency table: the flags the user left out are filled with the shipped demo's files.

The filling happens on the command line itself, before parsing, so required flags, mutually
exclusive groups and every sub-command's own validation stay exactly as they are.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from treeopt.demo.layout import KINDS

# demo_defaults key -> the flag it fills
FLAGS = {"model": "--model", "heads": "--heads", "trace": "--trace", "held_out": "--held-out",
         "growth": "--growth", "prompts": "--prompts", "latency": "--latency",
         "step_profile": "--step-profile", "speculative_model": "--speculative-model"}


def add_demo_flags(sub: argparse._SubParsersAction) -> None:
    """Give ``--demo`` to every sub-command that has at least one fillable flag, nested ones
    (``profile step``) included."""
    for parser in sub.choices.values():
        nested = _subparsers_action(parser)
        if nested is not None:
            add_demo_flags(nested)
        if _options(parser) & set(FLAGS.values()):
            parser.add_argument("--demo", nargs="?", const="hydra", choices=KINDS,
                                metavar="KIND", help="use the shipped demo's files for the "
                                "model/drafter/trace/… flags not given (KIND: "
                                f"{', '.join(KINDS)}; default hydra)")


def expand_demo(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with the demo's paths appended for the fillable flags it does not give."""
    args = list(argv)
    if "--demo" not in args:
        return args
    i = args.index("--demo")
    kind = args[i + 1] if i + 1 < len(args) and args[i + 1] in KINDS else "hydra"
    sub = _command_parser(args, parser)
    if sub is None:
        return args
    from treeopt.demo.layout import demo_defaults

    given = {a.split("=", 1)[0] for a in args}
    given |= {s for action in sub._actions  # noqa: SLF001  (an alias given counts for all)
              if given & set(action.option_strings) for s in action.option_strings}
    blocked = {flag for group in sub._mutually_exclusive_groups  # noqa: SLF001
               if given & _group_options(group) for flag in _group_options(group)}
    extra: list[str] = []
    for key, path in demo_defaults(kind).items():
        flag = FLAGS[key]
        if flag in _options(sub) and flag not in given and flag not in blocked:
            extra += [flag, path]
    return args + extra


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}  # noqa: SLF001


def _group_options(group: argparse._MutuallyExclusiveGroup) -> set[str]:
    return {s for action in group._group_actions for s in action.option_strings}  # noqa: SLF001


def _command_parser(args: Sequence[str],
                    parser: argparse.ArgumentParser) -> argparse.ArgumentParser | None:
    """The parser of the (innermost) sub-command ``args`` name: ``profile step``'s, not
    ``profile``'s."""
    words = iter(a for a in args if not a.startswith("-"))
    found = None
    while (choices := _subparsers(parser)):
        command = next((w for w in words if w in choices), None)
        if command is None:
            break
        found = parser = choices[command]
    return found


def _subparsers_action(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    for action in parser._actions:  # noqa: SLF001
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = _subparsers_action(parser)
    return {} if action is None else dict(action.choices)
