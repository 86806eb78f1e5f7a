"""Every flag of every sub-command explains itself: help text, its default, whether it is required,
and a metavar that says what to type. Walks ``build_parser()``; imports no torch."""

from __future__ import annotations

import argparse

import pytest

from treeopt.cli import build_parser

SKIPPED = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)  # noqa: SLF001


def parsers() -> list[tuple[str, argparse.ArgumentParser]]:
    """``(command, parser)`` of the top level and every sub-command, nested ones included."""
    found, todo = [], [("treeopt", build_parser())]
    while todo:
        name, parser = todo.pop()
        found.append((name, parser))
        for action in parser._actions:  # noqa: SLF001
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                todo += [(f"{name} {sub}", p) for sub, p in action.choices.items()]
    return sorted(found, key=lambda item: item[0])


def actions() -> list[tuple[str, argparse.Action]]:
    return [(f"{name} {'/'.join(a.option_strings) or a.dest}", a) for name, p in parsers()
            for a in p._actions if not isinstance(a, SKIPPED)]  # noqa: SLF001


def mentions_default(text: str, default: object) -> bool:
    """The help names the default: ``%(default)s``, or the value written out (a list as 1,2)."""
    spelled = {str(default)}
    if isinstance(default, list | tuple):
        spelled.add(",".join(map(str, default)))
    return "%(default)" in text or any(s in text for s in spelled)


def test_the_walk_reaches_nested_sub_commands():
    names = {name for name, _ in parsers()}
    assert {"treeopt train-heads", "treeopt profile step", "treeopt trace merge",
            "treeopt demo build", "treeopt export", "treeopt verify"} <= names


def test_every_argument_has_help():
    missing = [where for where, a in actions() if not (a.help or "").strip()]
    assert missing == []


def test_required_flags_say_so():
    silent = [where for where, a in actions()
              if a.option_strings and a.required and "required" not in (a.help or "")]
    assert silent == []


def test_flags_with_a_default_state_it():
    silent = [f"{where} (default {a.default!r})" for where, a in actions()
              if a.default not in (None, False, argparse.SUPPRESS)
              and not mentions_default(a.help or "", a.default)]
    assert silent == []


def test_flags_that_take_a_value_name_it():
    """A metavar or a list of choices, never argparse's upper-cased dest (``MAX_NEW_TOKENS``)."""
    unnamed = [where for where, a in actions()
               if a.option_strings and a.nargs != 0 and a.metavar is None and a.choices is None]
    assert unnamed == []


@pytest.mark.parametrize("name", [name for name, _ in parsers()])
def test_help_renders(name):
    """``--help`` formats (a stray % in a help string would raise here) and shows defaults."""
    parser = dict(parsers())[name]
    text = parser.format_help()
    assert "%(" not in text
