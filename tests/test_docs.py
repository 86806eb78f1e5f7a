"""Every module, file and command the docs and docstrings name exists.

Read from README.md, docs/**/*.md and the docstrings of every Python file of the project:
- repository paths (`treeopt/decoding/loop.py`, `benchmarks/bench_live.py`, `data/demo/…`,
  globs included), backticked or not, and the targets and #anchors of relative Markdown links;
- dotted names under ``treeopt`` (`treeopt.decoding.loop`, `treeopt.pricing.costs.step_costs`,
  `treeopt.documents.sweep.SweepPoint.error`): the module, then the name defined in it;
- ``treeopt <command> [<sub-command>]`` invocations inside backticks and code blocks, against
  ``treeopt.cli.build_parser()``.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("treeopt", "benchmarks", "tests", "docs", "data", "scripts", "app_pages", ".ci")
ROOT_FILES = ("README.md", "pyproject.toml", "app.py", "constraints.txt")
# what the project's runs write, named in the docs but not in a clean checkout (data/smollm2:
# the demo on a fetched model, built on request: docs/demo.md)
WRITTEN = ("tests/artifacts/", "data/smollm2")

_TOP, _FILES = ("|".join(map(re.escape, names)) for names in (TOP, ROOT_FILES))
PATH = re.compile(rf"(?<![\w./-])((?:{_TOP})/[\w./*{{}},<>-]*[\w*/}}>]|(?:{_FILES})(?![\w.-]))")
BARE_DOC = re.compile(r"(?<![\w./-])([A-Z][A-Z_]*\.md)\b")  # "DESIGN.md": a file at the top
FORMAT_TAG = re.compile(r"treeopt\.[\w-]+/\d+")  # "treeopt.sweep/1": a file's format, no module
DOTTED = re.compile(r"(?<![\w.])treeopt(?:\.\w+)+")
# the packages that were top-level once, named without their ``treeopt.`` ("profiling.step")
UNQUALIFIED = re.compile(r"(?<![\w./])(?:profiling|roofline)(?:\.\w+)+")
EXTENSIONS = {"json", "npz", "csv", "md", "py", "svg", "yaml", "txt"}
TICKED = re.compile(r"(`+)(.+?)\1", re.S)
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
COMMAND = re.compile(r"(?:^|[\s/(])treeopt((?: [a-z][\w-]*)(?: [\w-]+)?)")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _commands() -> dict[str, dict[str, argparse.ArgumentParser]]:
    from treeopt.cli import build_parser

    return {name: _subcommands(sub) for name, sub in _subcommands(build_parser()).items()}


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    body = FENCE.sub("", doc.read_text())
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", body, re.M)}


def _module_file(dotted: list[str]) -> tuple[Path | None, int]:
    """The file of the longest module prefix of ``dotted`` and how many parts it takes."""
    for n in range(len(dotted), 0, -1):
        base = ROOT.joinpath(*dotted[:n])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate, n
    return None, 0


def _defined(body: list[ast.stmt]) -> tuple[set[str], dict[str, list[ast.stmt]]]:
    """Names a module or class body defines (and imports), and the bodies of its classes."""
    names: set[str] = set()
    classes: dict[str, list[ast.stmt]] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            classes[node.name] = node.body
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.If, ast.Try)):
            inner, inner_classes = _defined(node.body + getattr(node, "orelse", []))
            names |= inner
            classes |= inner_classes
    return names, classes


def _dotted_problem(name: str) -> str | None:
    parts = name.split(".")
    path, n = _module_file(parts)
    if path is None:
        return f"no module {name}"
    rest = parts[n:]
    if not rest:
        return None
    names, classes = _defined(ast.parse(path.read_text()).body)
    if rest[0] not in names:
        return f"{'.'.join(parts[:n])} defines no {rest[0]} ({name})"
    if len(rest) > 1 and rest[0] in classes:
        members, _ = _defined(classes[rest[0]])
        if rest[1] not in members:
            return f"{'.'.join(parts[:n + 1])} has no {rest[1]} ({name})"
    return None


def _path_problem(ref: str) -> str | None:
    ref = ref.rstrip(".,;:")
    if ref.startswith(WRITTEN) or re.search(r"[{<]", ref):  # written by a run; a template
        return None
    if "*" in ref:
        return None if any(ROOT.glob(ref)) else f"nothing matches {ref}"
    return None if (ROOT / ref).exists() else f"no file {ref}"


def _command_problem(words: str, commands: dict[str, dict[str, argparse.ArgumentParser]]) -> str | None:
    first, *more = words.split()
    if first not in commands:
        return f"no command `treeopt {first}`"
    subs = commands[first]
    if subs and more and more[0][0].isalpha() and more[0].islower() and more[0] not in subs:
        return f"no command `treeopt {first} {more[0]}`"
    return None


def _code(text: str, *, markdown: bool) -> list[str]:
    """The spans a command can be named in: backticked text and fenced blocks."""
    spans = [m.group(1) for m in FENCE.finditer(text)] if markdown else []
    rest = FENCE.sub("", text) if markdown else text
    return spans + [m.group(2) for m in TICKED.finditer(rest)]


def problems(text: str, *, doc: Path | None = None,
             commands: dict[str, dict[str, argparse.ArgumentParser]] | None = None) -> list[str]:
    """What ``text`` names that does not exist; ``doc``: the Markdown file it is (links are
    checked against it), or None for a docstring."""
    commands = _commands() if commands is None else commands
    found: list[str | None] = []
    plain = FORMAT_TAG.sub("", text)
    found += [_path_problem(m.group(1)) for m in PATH.finditer(plain)]
    found += [None if (ROOT / m.group(1)).exists() else f"no file {m.group(1)} in the repository"
              for m in BARE_DOC.finditer(plain)]
    found += [_dotted_problem(m.group(0)) for m in DOTTED.finditer(plain)]
    found += [_dotted_problem(f"treeopt.{m.group(0)}") for m in UNQUALIFIED.finditer(plain)
              if m.group(0).rsplit(".", 1)[-1] not in EXTENSIONS]  # "roofline.json": a file
    for span in _code(plain, markdown=doc is not None):
        for line in span.splitlines():
            found += [_command_problem(m.group(1), commands) for m in COMMAND.finditer(line)]
    if doc is not None:
        for target in LINK.findall(FENCE.sub("", text)):
            found.append(_link_problem(target, doc))
    return [p for p in found if p is not None]


def _link_problem(target: str, doc: Path) -> str | None:
    if re.match(r"[a-z]+:", target) or not re.search(r"[./#]", target):
        return None  # http:, mailto:; "E[L](T)" is a formula, not a link
    file, _, anchor = target.partition("#")
    linked = (doc.parent / file).resolve() if file else doc
    if not linked.exists():
        return f"link to a missing {target}"
    if anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
        return f"link to a missing heading {target}"
    return None


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _docstrings(path: Path) -> list[tuple[str, str]]:
    """(where, docstring) of a Python file's module, classes and functions."""
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append((f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}", doc))
    return out


def _python_files() -> list[Path]:
    files = [ROOT / "app.py"]
    for top in ("treeopt", "benchmarks", "app_pages", "tests"):
        files += sorted((ROOT / top).rglob("*.py"))
    return [f for f in files if f.name != "test_docs.py"]


@pytest.fixture(scope="module")
def commands() -> dict[str, dict[str, argparse.ArgumentParser]]:
    return _commands()


@pytest.mark.parametrize("doc", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_reference_in_the_docs_exists(doc: Path, commands) -> None:
    assert problems(doc.read_text(), doc=doc, commands=commands) == []


def test_every_reference_in_a_docstring_exists(commands) -> None:
    bad = [f"{where}: {p}" for path in _python_files() for where, doc in _docstrings(path)
           for p in problems(doc, commands=commands)]
    assert bad == []


def test_a_planted_bad_reference_is_found(tmp_path: Path, commands) -> None:
    doc = tmp_path / "planted.md"
    doc.write_text(
        "# Planted\n\nSee `treeopt/decoding/loop.py`, treeopt/no_such_module.py and\n"
        "`benchmarks/bench_nothing.py`; `treeopt.decoding.loop.Decoder` and\n"
        "`treeopt.decoding.nowhere`, `treeopt.pricing.costs.no_such_function`,\n"
        "`treeopt.documents.sweep.SweepPoint.no_such_field`; the `treeopt.sweep/1` format\n"
        "(DESIGN.md).\n\n"
        "```\ntreeopt select --growth g.json\ntreeopt frobnicate --x 1\n"
        "treeopt profile step --out s.json\ntreeopt profile sideways\n```\n\n"
        "[ok](#planted) [gone](#no-such-heading) [missing](no-such-doc.md)\n")
    assert problems(doc.read_text(), doc=doc, commands=commands) == [
        "no file treeopt/no_such_module.py",
        "no file benchmarks/bench_nothing.py",
        "no file DESIGN.md in the repository",
        "treeopt.decoding defines no nowhere (treeopt.decoding.nowhere)",
        "treeopt.pricing.costs defines no no_such_function "
        "(treeopt.pricing.costs.no_such_function)",
        "treeopt.documents.sweep.SweepPoint has no no_such_field "
        "(treeopt.documents.sweep.SweepPoint.no_such_field)",
        "no command `treeopt frobnicate`",
        "no command `treeopt profile sideways`",
        "link to a missing heading #no-such-heading",
        "link to a missing no-such-doc.md",
    ]
    docstring = ("Runs ``treeopt tune --race-best`` and ``treeopt tuning``; see treeopt.nothing, "
                 ":mod:`profiling.step`, :mod:`profiling.drafting` and ``treeopt ARGS``; writes "
                 "roofline.json and ``data/demo/traces/{kind}.npz``.")
    assert problems(docstring, commands=commands) == [
        "treeopt defines no nothing (treeopt.nothing)",
        "treeopt.profiling defines no drafting (treeopt.profiling.drafting)",
        "no command `treeopt tuning`"]


def test_the_docs_carry_the_benchmarks_tables() -> None:
    """docs/hardware.md holds bench_live's table and docs/byo-model.md the architecture
    matrix, each between the markers the benchmark's ``--write`` replaces."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from doc_table import markers

    for doc, name, head in (("docs/hardware.md", "bench-live", "| drafter | batch |"),
                            ("docs/byo-model.md", "architecture-matrix", "| model_type |")):
        begin, end = markers(name)
        body = (ROOT / doc).read_text()
        assert body.count(begin) == body.count(end) == 1, doc
        assert body.partition(begin)[2].partition(end)[0].strip().startswith(head), doc


def test_a_benchmark_writes_its_table_between_the_markers(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from doc_table import write_between

    doc = tmp_path / "doc.md"
    doc.write_text("# Doc\n\n<!-- t -->\n| old |\n<!-- /t -->\n\nafter\n")
    write_between(doc, "t", "| new |\n|---|")
    assert doc.read_text() == "# Doc\n\n<!-- t -->\n| new |\n|---|\n<!-- /t -->\n\nafter\n"
    with pytest.raises(ValueError, match="doc.md: no <!-- other --> marker"):
        write_between(doc, "other", "x")


def test_hardware_doc_is_a_reference() -> None:
    """docs/hardware.md fits in 400 lines, and no heading of the docs is a dated entry."""
    assert len((ROOT / "docs/hardware.md").read_text().splitlines()) <= 400
    dated = [f"{doc.name}: {h}" for doc in _docs() if "notes" not in doc.parts
             for h in re.findall(r"^#+ .*\d{4}-\d\d-\d\d.*$", doc.read_text(), re.M)]
    assert dated == []
