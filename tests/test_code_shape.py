"""Functions a newcomer can read at a sitting: none over 80 lines, outside benchmarks/ (scripts
run on demand). Counted from ``def`` to the function's last line, docstring included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MOST_LINES = 80
FOLDERS = ("treeopt", "app_pages", "tests", "scripts")


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
