"""``--demo [DEMO:]KIND`` on every sub-command that takes a model, heads, trace, growth, prompts
or latency table: the flags the user left out are filled with a demo's files.

``KIND`` is a drafter kind (:data:`~treeopt.demo.layout.KINDS`; left out: hydra, or the first
drafter a demo without Hydra heads ships). ``DEMO`` names a demo directory beside the shipped one
(``data/<DEMO>``: ``demo`` is the shipped demo, ``smollm2`` the demo on SmolLM2-135M-Instruct once
built); left out, the shipped demo (``$TREEOPT_DEMO`` when set). ``--demo smollm2:`` takes that
demo's default kind. A demo on a pretrained base fills ``--model`` with the base where it was
fetched; when it is not fetched, a one-line error names the command that fetches it. With the
demo's model comes its dtype (``--dtype``, the demo build's: bf16 on SmolLM2), unless given.
With ``--device``, the step profile is the one the demo ships for that device, where it ships one
(SmolLM2's n-gram drafters on CUDA: ``step-KIND-cuda.json``).

The filling happens on the command line itself, before parsing, so required flags, mutually
exclusive groups and every sub-command's own validation stay exactly as they are.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from treeopt.demo.layout import KINDS
from treeopt.errors import TreeoptError

# demo_defaults key -> the flag it fills (``dtype`` aside: see MODEL_DTYPE)
FLAGS = {"model": "--model", "heads": "--heads", "trace": "--trace", "held_out": "--held-out",
         "growth": "--growth", "prompts": "--prompts", "latency": "--latency",
         "step_profile": "--step-profile", "speculative_model": "--speculative-model",
         "shared_verify": "--shared-verify"}
# With the demo's model, its dtype: the model's own ``--dtype`` (a sub-command that loads the model
# from ``--model``, as :func:`~treeopt.cli.common.add_model_flags` gives it with
# ``--trust-remote-code``), never the precision a roofline prices with (``select``, ``roofline``)
MODEL_DTYPE, LOADS_MODEL = "--dtype", "--trust-remote-code"


def add_demo_flags(sub: argparse._SubParsersAction) -> None:
    """Give ``--demo`` to every sub-command that has at least one fillable flag, nested ones
    (``profile step``) included."""
    for parser in sub.choices.values():
        nested = _subparsers_action(parser)
        if nested is not None:
            add_demo_flags(nested)
        if _options(parser) & set(FLAGS.values()):
            parser.add_argument("--demo", nargs="?", const="hydra", type=_checked,
                                metavar="[DEMO:]KIND", help="use a demo's files for the "
                                "model/drafter/trace/… flags not given (KIND: "
                                f"{', '.join(KINDS)}; default hydra; DEMO: a demo in data/, "
                                "e.g. smollm2; default the shipped demo)")


def parse_demo(text: str) -> tuple[str | None, str | None]:
    """``[DEMO:]KIND`` → (DEMO, KIND), each None when left out.

    >>> parse_demo("eagle"), parse_demo("smollm2:prompt-lookup"), parse_demo("smollm2:")
    ((None, 'eagle'), ('smollm2', 'prompt-lookup'), ('smollm2', None))
    >>> parse_demo("smollm2:bogus")
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: --demo smollm2:bogus: no drafter kind 'bogus'; expected [DEMO:]KIND, KIND one of medusa, hydra, eagle, draft-model, prompt-lookup, ngram-trie, suffix
    """
    demo, _, kind = text.rpartition(":") if ":" in text else (None, "", text)
    if kind and kind not in KINDS:
        raise TreeoptError(f"--demo {text}: no drafter kind {kind!r}; expected [DEMO:]KIND, "
                           f"KIND one of {', '.join(KINDS)}")
    if demo is not None and not demo:
        raise TreeoptError(f"--demo {text}: no demo name before the colon; expected "
                           "[DEMO:]KIND, DEMO a directory in data/ (demo, smollm2)")
    return demo, kind or None


def _checked(text: str) -> str:
    """``--demo``'s value, as the parser checks it (expand_demo has read it already)."""
    try:
        parse_demo(text)
    except TreeoptError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _demo_value(args: Sequence[str], i: int) -> str:
    """The ``[DEMO:]KIND`` given to the ``--demo`` at ``args[i]`` ('' when none: the word after
    it, if any, is an argument of the sub-command)."""
    if args[i].startswith("--demo="):
        return args[i].split("=", 1)[1]
    after = args[i + 1] if i + 1 < len(args) else ""
    return after if after in KINDS or (":" in after and not after.startswith("-")) else ""


def expand_demo(argv: Sequence[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with the demo's paths appended for the fillable flags it does not give."""
    args = list(argv)
    at = [i for i, a in enumerate(args) if a == "--demo" or a.startswith("--demo=")]
    if not at:
        return args
    demo, kind = parse_demo(_demo_value(args, at[0]))
    sub = _command_parser(args, parser)
    if sub is None:
        return args
    from treeopt.demo.layout import demo_defaults, named_demo

    given = {a.split("=", 1)[0] for a in args}
    given |= {s for action in sub._actions  # noqa: SLF001  (an alias given counts for all)
              if given & set(action.option_strings) for s in action.option_strings}
    blocked = {flag for group in sub._mutually_exclusive_groups  # noqa: SLF001
               if given & _group_options(group) for flag in _group_options(group)}
    fill = {flag for flag in _options(sub) & set(FLAGS.values())
            if flag not in given and flag not in blocked}
    root = named_demo(demo) if demo is not None else None
    extra: list[str] = []
    defaults = demo_defaults(kind, root, model="--model" in fill,
                             device=_given(args, "--device"))
    for key, path in defaults.items():
        if key in FLAGS and FLAGS[key] in fill:
            extra += [FLAGS[key], *([path] if isinstance(path, str) else path)]
    if "dtype" in defaults and LOADS_MODEL in _options(sub) and MODEL_DTYPE not in given:
        extra += [MODEL_DTYPE, defaults["dtype"]]
    return args + extra


def _given(args: Sequence[str], flag: str) -> str | None:
    """The value given to ``flag`` in ``args`` (``--flag V`` or ``--flag=V``), or None.

    >>> _given(["verify", "--device", "cuda:1"], "--device"), _given(["--device=cpu"], "--device")
    ('cuda:1', 'cpu')
    """
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


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
