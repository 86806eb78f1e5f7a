"""``import treeopt`` needs numpy only: torch, transformers and streamlit load where they are used."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("torch", "transformers", "streamlit")


def imported_heavy_modules(code: str) -> list[str]:
    """Run ``code`` in a fresh interpreter; return the heavy modules it left in sys.modules."""
    probe = (f"{code}\nimport sys\n"
             f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [m for m in proc.stdout.strip().split(",") if m]


def test_import_treeopt_is_light():
    code = ("import treeopt\n"
            "assert all(hasattr(treeopt, name) for name in treeopt.__all__)\n"
            "assert {'Tree', 'RankTrace', 'grow', 'simulate', 'export', 'select'} "
            "<= set(treeopt.__all__)")
    assert imported_heavy_modules(code) == []


def test_core_modules_are_light():
    code = ("import treeopt.tree, treeopt.trace, treeopt.accuracy, treeopt.value, treeopt.grow, "
            "treeopt.uniform, treeopt.simulate, treeopt.formats, treeopt.files, "
            "treeopt.synthetic, treeopt.cli.core")
    assert imported_heavy_modules(code) == []


def test_building_the_command_line_is_light():
    assert imported_heavy_modules("from treeopt.cli import build_parser\nbuild_parser()") == []
