"""``import treeopt`` needs numpy only: the optional extras' modules (torch, transformers,
streamlit, plotly, …) load where they are used, and a command that needs a missing one names
the extra to install."""

from __future__ import annotations

import subprocess
import sys

from treeopt.errors import EXTRAS

HEAVY = tuple(EXTRAS)  # every module an optional extra installs


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
    code = ("import treeopt.model.tree, treeopt.model.trace, treeopt.model.accuracy, "
            "treeopt.model.acceptance, treeopt.model.growth, treeopt.model.uniform, "
            "treeopt.model.simulation, treeopt.engines.forms, treeopt.files, "
            "treeopt.model.synthetic, treeopt.cli.core")
    assert imported_heavy_modules(code) == []


def test_building_the_command_line_is_light():
    assert imported_heavy_modules("from treeopt.cli import build_parser\nbuild_parser()") == []


HIDE = """
import importlib.abc, sys
class Hide(importlib.abc.MetaPathFinder):  # as if the extras were not installed
    def find_spec(self, name, path, target=None):
        if any(name == h or name.startswith(h + ".") for h in {hidden!r}):
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Hide())
from treeopt.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_command_needing_a_missing_extra_names_it(tmp_path):
    code = HIDE.format(hidden=HEAVY)
    args = ["calibrate", "--demo", "hydra", "--out", str(tmp_path / "t.npz")]
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "treeopt calibrate: error: this command needs torch, which is not installed: "
        "pip install 'treeopt[torch]'"]
    assert not any(tmp_path.iterdir())


def test_a_missing_module_of_ours_is_not_blamed_on_an_extra(tmp_path):
    code = HIDE.format(hidden=("treeopt.decoding",))
    proc = subprocess.run([sys.executable, "-c", code, "calibrate", "--demo", "hydra", "--out",
                           str(tmp_path / "t.npz")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr  # a bug of ours: its traceback, not an install hint
    assert "ModuleNotFoundError: No module named 'treeopt.decoding" in proc.stderr
    assert "pip install" not in proc.stderr
