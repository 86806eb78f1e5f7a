"""Code a newcomer can read at a sitting, outside benchmarks/ (scripts run on demand): no
function over 80 lines (counted from ``def`` to its last line, docstring included), and in the
package and the app no module over 500 lines and no class over 250."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOST_LINES = 80
FOLDERS = ("treeopt", "app_pages", "tests", "scripts")
MODULE_LINES, CLASS_LINES = 500, 250
LIBRARY = ("treeopt", "app_pages")  # tests hold tables of cases: a module's length is no burden


def long_functions(path: Path, most: int = MOST_LINES) -> list[str]:
    """``name (lines)`` for every function in ``path`` longer than ``most`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{node.name} ({node.end_lineno - node.lineno + 1})" for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > most]


def sources() -> list[Path]:
    found = [ROOT / "app.py"]
    for folder in FOLDERS:
        found += sorted((ROOT / folder).rglob("*.py"))
    return found


def test_no_function_is_over_80_lines():
    long = {str(p.relative_to(ROOT)): f for p in sources() if (f := long_functions(p))}
    assert not long, long


def test_the_count_finds_a_long_function(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def short():\n    return 1\n\n\ndef long():\n" + "    x = 1\n" * 80)
    assert long_functions(probe) == ["long (81)"]
    assert long_functions(probe, most=81) == []


def long_classes(path: Path, most: int = CLASS_LINES) -> list[str]:
    """``name (lines)`` for every class in ``path`` longer than ``most`` lines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{node.name} ({node.end_lineno - node.lineno + 1})" for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > most]


def library() -> list[Path]:
    return [ROOT / "app.py"] + [p for f in LIBRARY for p in sorted((ROOT / f).rglob("*.py"))]


def test_no_module_is_over_500_lines_and_no_class_over_250():
    long = {str(p.relative_to(ROOT)): n for p in library()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MODULE_LINES}
    assert not long, long
    classes = {str(p.relative_to(ROOT)): c for p in library() if (c := long_classes(p))}
    assert not classes, classes


def test_the_count_finds_a_long_class(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("class Long:\n" + "    x = 1\n" * 250)
    assert long_classes(probe) == ["Long (251)"]
    assert long_classes(probe, most=251) == []
