"""The README says what the code is.

- Its drafter-kind lists (``--demo [DEMO:]KIND``, ``calibrate --drafter``, ``train-heads
  --kind``) name the kinds of the registry (:mod:`treeopt.registry.kinds`) that the flag takes.
- Its command table names every command and sub-command of ``treeopt.cli.build_parser()`` and
  no other, and each ``--flag a|b|c`` it spells out offers the parser's choices of that flag.
- Its layout map names every package and top-level module under ``treeopt/``, and each module
  it lists in a package exists there.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from treeopt.registry.kinds import KINDS, TRAINED_KINDS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ROW = re.compile(r"^\| `(treeopt [^`]*)` \|.*$", re.M)
ALTERNATIVES = re.compile(r"(--[\w-]+) ([\w+-]+(?:\\\|[\w+-]+)+)")  # `--mode greedy\|sample`


def section(readme: str, title: str) -> str:
    """The text under the ``## title`` heading, up to the next one."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", readme, re.S | re.M)
    assert match, f"README.md has no section '## {title}'"
    return match.group(1)


def word_list(text: str) -> list[str]:
    """``a, b, c or d`` → the words.

    >>> word_list("medusa, hydra\\nor eagle")
    ['medusa', 'hydra', 'eagle']
    """
    return [w.strip() for w in re.split(r",|\bor\b", text) if w.strip()]


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def cli_commands() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command line the parser takes: ``("grow",)``, ``("profile",)`` and
    ``("profile", "step")``; a command whose sub-command is required is only its sub-commands."""
    from treeopt.cli import build_parser

    found = {}
    for name, parser in _subparsers(build_parser()).choices.items():
        subs = _subparsers(parser)
        if subs is None or not subs.required:
            found[(name,)] = parser
        for sub, sub_parser in (subs.choices.items() if subs else ()):
            found[(name, sub)] = sub_parser
    return found


def table_rows(readme: str) -> dict[tuple[str, ...], str]:
    """The command table's rows: the command line each names (its words before the first flag
    or placeholder: ``("profile", "step")``) → the whole row."""
    rows: dict[tuple[str, ...], str] = {}
    for row in ROW.finditer(section(readme, "The `treeopt` command")):
        words = row.group(1).split()[1:3]
        command = tuple(w for w in words if re.fullmatch(r"[a-z][a-z-]*", w))
        rows[command if len(command) == len(words) else command[:1]] = row.group(0)
    return rows


def command_table_problems(readme: str) -> list[str]:
    """Commands the table lacks or invents, and spelled-out choices that are not the parser's."""
    cli, rows = cli_commands(), table_rows(readme)
    found = [f"no row for `treeopt {' '.join(c)}`" for c in sorted(set(cli) - set(rows))]
    found += [f"a row for `treeopt {' '.join(c)}`, no such command"
              for c in sorted(set(rows) - set(cli))]
    for command in sorted(set(rows) & set(cli)):
        flags = {s: a for a in cli[command]._actions for s in a.option_strings}
        cell = rows[command].split("` |")[0]
        for flag, alternatives in ALTERNATIVES.findall(cell):
            action = flags.get(flag)
            name = f"treeopt {' '.join(command)} {flag}"
            if action is None:
                found.append(f"`{name}`: no such flag")
            elif action.choices is not None and (sorted(alternatives.split("\\|"))
                                                 != sorted(action.choices)):
                found.append(f"`{name}` offers {'|'.join(action.choices)}, "
                             f"the README {alternatives.replace(chr(92), '')}")
    return found


def test_the_command_table_is_the_clis() -> None:
    assert command_table_problems(README) == []
    spelled = [f for row in table_rows(README).values() for f, _ in ALTERNATIVES.findall(row)]
    assert {"--method", "--constraint", "--mode", "--kind", "--format", "--draft"} <= set(spelled)


def test_a_planted_bad_row_is_found() -> None:
    grow = table_rows(README)[("grow",)]
    readme = README.replace(grow, grow.replace("empirical\\|independent", "empirical\\|greedy"))
    readme = readme.replace(table_rows(README)[("fetch",)], "| `treeopt frobnicate --x 1` | |")
    assert command_table_problems(readme) == [
        "no row for `treeopt fetch`",
        "a row for `treeopt frobnicate`, no such command",
        "`treeopt grow --method` offers independent|empirical, the README empirical|greedy"]


def test_the_demo_kind_list_is_the_demos_kinds_of_the_registry() -> None:
    from treeopt.demo.layout import KINDS as DEMO_KINDS

    match = re.search(r"--demo \[DEMO:\]KIND`.*?KIND is ([\w ,\n-]+?);", README, re.S)
    assert match, "README.md gives no KIND list for --demo [DEMO:]KIND"
    listed = word_list(match.group(1))
    assert listed == list(DEMO_KINDS) == [k for k, kind in KINDS.items() if kind.demo_stage]


def test_the_calibrate_drafter_list_is_the_registrys() -> None:
    row = table_rows(README)[("calibrate",)]
    directories = re.search(r"a drafter directory — (.*?) — or", row)
    assert directories, "the calibrate row names no drafter directories"
    named = set(re.findall(r"[a-z][\w-]*", directories.group(1))) & set(KINDS)
    by_spec = set(re.findall(r"`([a-z][\w-]*)\[:", row))  # `prompt-lookup[:depth=K,…]`
    hybrid = re.findall(r"`DIR\+([a-z][\w-]*)\[:", row)  # `DIR+prompt-lookup[:…]`
    assert named == {k for k, kind in KINDS.items() if not kind.lookup}
    assert by_spec == {k for k, kind in KINDS.items() if kind.lookup and not kind.hybrid}
    assert hybrid == ["prompt-lookup"] and any(kind.hybrid for kind in KINDS.values())


def test_the_train_heads_kind_list_is_the_registrys_trained_kinds() -> None:
    listed = dict(ALTERNATIVES.findall(table_rows(README)[("train-heads",)]))["--kind"]
    assert listed.split("\\|") == list(TRAINED_KINDS)


def layout_map(readme: str) -> dict[str, str]:
    """The layout map's entries: path → its description (continuation lines joined)."""
    block = re.search(r"```\n(.*?)```", section(readme, "Layout"), re.S)
    assert block, "README.md's Layout section has no map"
    entries: dict[str, str] = {}
    path = ""
    for line in block.group(1).splitlines():
        if line[:1].strip():
            path, _, text = line.partition(" ")
            entries[path] = text.strip()
        else:
            entries[path] += " " + line.strip()
    return entries


def named_modules(description: str) -> list[str]:
    """The modules a package's entry lists: after the summary's colon, each item's first word
    (items are parted by commas, semicolons, ``and`` and ``+``; notes in parentheses skipped).

    >>> named_modules("the model (numpy: pure): tree (a tree), trace and growth; synthetic traces")
    ['tree', 'trace', 'growth', 'synthetic']
    >>> named_modules("what a demo holds")
    []
    """
    text = description
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", "", text)
    if ":" not in text:
        return []
    items = re.split(r"[,;]| and | \+ ", text.split(":", 1)[1])
    return [re.match(r"[\w.]+", item.strip()).group(0) for item in items if item.strip()]


def layout_problems(readme: str) -> list[str]:
    """Paths and modules the map names that do not exist; packages and top-level modules of
    ``treeopt/`` it leaves out."""
    entries = layout_map(readme)
    found = [f"no {p}" for p in entries if not (ROOT / p).exists()]
    for path, description in entries.items():
        for name in named_modules(description) if path.startswith("treeopt/") else ():
            where = ROOT / path / name
            if not (where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()
                    or where.is_file()):
                found.append(f"no {path}{name}")
    packages = sorted(f"treeopt/{p.parent.name}/" for p in (ROOT / "treeopt").glob("*/__init__.py"))
    found += [f"{p} is not in the map" for p in packages if p not in entries]
    face = named_modules(entries.get("treeopt/", ""))
    found += [f"treeopt/{p.name} is not in the map" for p in sorted((ROOT / "treeopt").glob("*.py"))
              if not p.stem.startswith("_") and p.stem not in face]
    return found


def test_the_layout_map_is_the_package_tree() -> None:
    assert layout_problems(README) == []


def test_a_planted_bad_layout_is_found() -> None:
    readme = (README.replace("step_growth (per-step greedy)", "step_grower (per-step greedy)")
              .replace("\ntreeopt/assets/ ", "\ntreeopt/gadgets/ ")
              .replace("(atomic, format-tagged JSON), version", "(atomic, format-tagged JSON)"))
    assert layout_problems(readme) == [
        "no treeopt/gadgets/", "no treeopt/model/step_grower", "no treeopt/gadgets/registry",
        "no treeopt/gadgets/gguf", "no treeopt/gadgets/humaneval", "no treeopt/gadgets/sharegpt",
        "treeopt/assets/ is not in the map", "treeopt/version.py is not in the map"]


def test_the_readme_opens_with_the_app_and_the_suite_and_ci_runs_the_suite_as_it_says() -> None:
    """Its first two commands set up and run the app on the shipped demo, then the whole test
    suite; ``.ci/run`` runs the second one step by step (nothing else)."""
    app, suite = re.findall(r"```bash\n(.*?)\n```", README, re.S)[:2]
    assert app.startswith("scripts/setup-venv && ") and app.endswith("streamlit run app.py")
    steps = suite.split(" && ")
    assert steps[0] == "scripts/setup-venv" and steps[-1].startswith(".venv/bin/python -m pytest")
    ci = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()
          if line.strip().startswith(("python3 ", ".venv/", "scripts/"))]
    assert ci == steps
    setup = (ROOT / "scripts/setup-venv").read_text()
    assert "python3 -m venv .venv" in setup and setup.count('-c constraints.txt -e ".[dev]"') == 2
