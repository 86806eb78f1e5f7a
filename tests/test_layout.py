"""The import direction that makes the layout readable, checked on the source of every module.

- the core (modules directly in ``treeopt/``) imports no torch, transformers or streamlit, and
  none of the torch-side or app packages; the one exception is the drafter registry
  (``treeopt.drafters`` itself and ``treeopt.drafters.config``), which is torch-free;
- ``treeopt.drafters`` and ``treeopt.decoding`` import no app code (workbench, cli, demo, pages,
  streamlit);
- ``treeopt.workbench`` imports no streamlit (services are tested without it);
- the app's pages import no torch or transformers: they only wire widgets to library calls.

Every import counts, including those inside functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "streamlit", "safetensors", "accelerate")
APP = ("treeopt.workbench", "treeopt.cli", "treeopt.demo", "app_pages", "streamlit")
TORCH_SIDE = ("treeopt.drafters", "treeopt.decoding", "treeopt.workbench", "treeopt.cli",
              "treeopt.demo", "treeopt.profiling")
TORCH_FREE_DRAFTERS = ("treeopt.drafters", "treeopt.drafters.config")


def imports(path: Path) -> set[str]:
    """Every module a file imports, anywhere in it (relative imports are not used here)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def modules(folder: str, *, recursive: bool = True) -> list[Path]:
    pattern = "**/*.py" if recursive else "*.py"
    return sorted((ROOT / folder).glob(pattern))


CORE = [p for p in modules("treeopt", recursive=False) if p.name != "__main__.py"]  # the entry


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.name)
def test_core_imports_no_torch_and_no_upper_layer(path):
    bad = sorted(m for m in imports(path)
                 if under(m, HEAVY) or (under(m, TORCH_SIDE) and m not in TORCH_FREE_DRAFTERS))
    assert not bad, f"{path.name} imports {bad}"


@pytest.mark.parametrize("path", modules("treeopt/drafters") + modules("treeopt/decoding"),
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_drafters_and_decoding_import_no_app_code(path):
    bad = sorted(m for m in imports(path) if under(m, APP))
    assert not bad, f"{path} imports {bad}"


def test_the_drafter_registry_and_configs_are_torch_free():
    for name in ("__init__.py", "config.py"):
        bad = sorted(m for m in imports(ROOT / "treeopt/drafters" / name) if under(m, HEAVY))
        assert not bad, f"treeopt/drafters/{name} imports {bad}"


@pytest.mark.parametrize("path", modules("treeopt/workbench"), ids=lambda p: p.name)
def test_workbench_services_import_no_streamlit(path):
    assert not [m for m in imports(path) if under(m, ("streamlit", "app_pages"))]


@pytest.mark.parametrize("path", [ROOT / "app.py", *modules("app_pages")], ids=lambda p: p.name)
def test_pages_import_no_torch(path):
    bad = sorted(m for m in imports(path) if under(m, ("torch", "transformers")))
    assert not bad, f"{path.name} imports {bad}"


def test_the_checks_see_imports_inside_functions(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    import torch\n    from treeopt.decoding import loop\n")
    assert imports(probe) == {"torch", "treeopt.decoding"}
