"""The layout: which package may import which, and no import cycle between them, checked on the
source of every module (every import counts, inside functions and under ``TYPE_CHECKING`` too).

The packages, each above the ones it may import (:data:`ALLOWED`):

- ``core``: the flat modules of ``treeopt/`` and the drafter registry (``treeopt.drafters.kinds``
  and ``treeopt.drafters.config``, which are torch-free); with ``dynamic`` (dynamic-tree
  simulation and recommendation) and ``roofline`` (predicted latency) it is the numpy layer.
  The three import each other where a job needs it (``treeopt.pricing.sources`` reads the roofline,
  ``treeopt.documents.step_profile`` names dynamic settings, ``dynamic`` prices with ``treeopt.pricing.costs``),
  so there a cycle is a chain of imports that leaves a package and comes back to it, module by
  module; every other package is one node of the import graph;
- ``decoding``: the tree forward, acceptance, the live loop (static and dynamic trees), the
  :class:`~treeopt.decoding.drafter.Drafter` interface it drives and the ranking rule;
- ``drafters``: the drafters, implementations of that interface;
- ``assets``: a pretrained model and prompt sets fetched from the package registry (GGUF
  conversion imports torch, transformers and gguf);
- ``profiling``: measured latency; ``demo``: building and loading the shipped demo;
- ``workbench``: the app's services, without Streamlit; ``cli``: argparse wiring;
- ``app_pages`` (and ``app.py``): Streamlit pages, which import no torch.

:data:`THIRD_PARTY` names the libraries each package may import (the numpy layer: numpy, and
PyYAML for the core's engine configs).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMPY_LAYER = ("core", "dynamic", "roofline")
ALLOWED: dict[str, tuple[str, ...]] = {
    "core": ("dynamic", "roofline"),
    "dynamic": ("core",),
    "roofline": ("core",),
    "decoding": (*NUMPY_LAYER,),
    "drafters": (*NUMPY_LAYER, "decoding"),
    "profiling": (*NUMPY_LAYER, "decoding", "drafters"),
    "assets": ("core",),
    "demo": (*NUMPY_LAYER, "decoding", "drafters", "profiling", "assets"),
    "workbench": (*NUMPY_LAYER, "decoding", "drafters", "profiling", "demo", "assets"),
    "cli": (*NUMPY_LAYER, "decoding", "drafters", "profiling", "demo", "workbench", "assets"),
    "app_pages": (*NUMPY_LAYER, "demo", "workbench"),
}
TORCH = ("numpy", "torch", "transformers", "safetensors")
THIRD_PARTY: dict[str, tuple[str, ...]] = {
    "core": ("numpy", "yaml"),
    "dynamic": ("numpy",),
    "roofline": ("numpy",),
    "decoding": TORCH,
    "drafters": TORCH,
    "profiling": TORCH,
    "assets": ("torch", "transformers", "gguf"),
    "demo": (*TORCH, "tokenizers", "tqdm"),
    "workbench": ("numpy", "transformers", "plotly", "networkx"),
    "cli": ("numpy", "tqdm"),
    # pages draw the library's figures; app_pages/cache.py keys them (a go.Figure return) and
    # hands out read-only arrays — no page computes with numpy or builds a figure itself
    "app_pages": ("streamlit", "numpy", "plotly"),
}
REGISTRY = ("treeopt.drafters.kinds", "treeopt.drafters.config")
SUBPACKAGES = ("drafters", "decoding", "dynamic", "profiling", "roofline", "workbench", "cli",
               "demo", "assets")
# An upward import allowed under ``if TYPE_CHECKING:`` only: the registry's build_heads returns
# a Drafter, whose implementations it loads by name ("module:Class").
ANNOTATION_ONLY: dict[str, tuple[str, ...]] = {"treeopt.drafters": ("treeopt.decoding.drafter",)}


@dataclass(frozen=True)
class Import:
    module: str  # the module named (``from a.b import c``: ``a.b``)
    line: int
    annotation: bool  # under ``if TYPE_CHECKING:``


def imports(path: Path) -> list[Import]:
    """Every absolute import in a file, anywhere in it (relative imports are not used here)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        else:
            continue
        found += [Import(name, node.lineno, id(node) in typing_only) for name in names]
    return found


def module_of(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(module: str) -> str | None:
    """The package a treeopt or app module belongs to; None for anything else (a library)."""
    parts = module.split(".")
    if parts[0] in ("app", "app_pages"):
        return "app_pages"
    if parts[0] != "treeopt":
        return None
    if module in REGISTRY or len(parts) == 1:
        return "core"
    if parts[1] == "__main__":
        return "cli"  # the command line's entry point
    return parts[1] if parts[1] in SUBPACKAGES else "core"


def sources(root: Path = ROOT) -> list[Path]:
    found = [*(root / "treeopt").rglob("*.py"), *(root / "app_pages").rglob("*.py")]
    return sorted(found + [p for p in (root / "app.py",) if p.exists()])


def exempt(module: str, imp: Import) -> bool:
    """An upward import the layout lets through: annotation-only, where it says so."""
    return imp.annotation and imp.module in ANNOTATION_ONLY.get(module, ())


def node(module: str) -> str:
    """A module's node in the import graph: itself in the numpy layer, else its package."""
    package = package_of(module)
    return module if package in NUMPY_LAYER else str(package)


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Node → the nodes it imports, over every source file under ``root``."""
    edges: dict[str, set[str]] = {}
    for path in sources(root):
        module = module_of(path, root)
        here = node(module)
        for imp in imports(path):
            if package_of(imp.module) is not None and not exempt(module, imp):
                there = node(imp.module)
                if there != here:
                    edges.setdefault(here, set()).add(there)
    return edges


def package_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles between packages: each set of nodes that reach one another (a strongly
    connected component) and span more than one package, sorted. A cycle of modules inside one
    package of the numpy layer is that package's own business."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(n: str) -> None:  # Tarjan's algorithm
        index[n] = low[n] = len(index)
        stack.append(n)
        for m in edges.get(n, ()):
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in stack:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            component = []
            while not component or component[-1] != n:
                component.append(stack.pop())
            if len({n if n in ALLOWED else package_of(n) for n in component}) > 1:
                found.append(sorted(component))

    for n in sorted(edges):
        if n not in index:
            visit(n)
    return sorted(found)


SOURCES = sources()


def test_every_package_has_an_allowed_list():
    packages = {package_of(module_of(p)) for p in SOURCES}
    assert packages == set(ALLOWED) == set(THIRD_PARTY)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layout(path):
    module = module_of(path)
    package = package_of(module)
    assert package is not None
    bad = []
    for imp in imports(path):
        target = package_of(imp.module)
        if target is None:
            top = imp.module.split(".")[0]
            if top not in sys.stdlib_module_names and top not in THIRD_PARTY[package]:
                bad.append(f"line {imp.line}: {imp.module} (a library {package} may not use)")
        elif target != package and target not in ALLOWED[package] and not exempt(module, imp):
            bad.append(f"line {imp.line}: {imp.module} (package {target})")
    assert not bad, f"{path.relative_to(ROOT)} ({package}) imports " + "; ".join(bad)


def test_no_import_cycle_between_packages():
    assert package_cycles(graph()) == []


def test_a_planted_cycle_is_found(tmp_path):
    files = {"treeopt/__init__.py": "", "treeopt/errors.py": "",
             "treeopt/decoding/__init__.py": "", "treeopt/drafters/__init__.py": "",
             "treeopt/decoding/loop.py": "from treeopt.errors import E\n"
                                         "def run():\n    from treeopt.drafters.heads import D\n",
             "treeopt/drafters/heads.py": "from treeopt.decoding.loop import run\n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert package_cycles(graph(tmp_path)) == [["decoding", "drafters"]]
    (tmp_path / "treeopt/drafters/heads.py").write_text("from treeopt.errors import E\n")
    assert package_cycles(graph(tmp_path)) == []


def test_the_numpy_layer_is_checked_module_by_module():
    edges = {"treeopt.pricing.costs": {"treeopt.model.dynamic_settings"},
             "treeopt.dynamic.recommend": {"treeopt.pricing.costs"},
             "treeopt.roofline.config": {"treeopt.roofline.families"},
             "treeopt.roofline.families": {"treeopt.roofline.config"}}
    assert package_cycles(edges) == []  # no chain leaves a package and comes back
    edges["treeopt.model.dynamic_settings"] = {"treeopt.dynamic.recommend"}
    assert package_cycles(edges) == [["treeopt.dynamic.recommend", "treeopt.model.dynamic_settings",
                                      "treeopt.pricing.costs"]]


def test_the_checks_see_imports_inside_functions_and_for_annotations(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from treeopt.decoding.drafter import Drafter\n"
                     "def f():\n    import torch\n    from treeopt.decoding import loop\n")
    assert {(i.module, i.annotation) for i in imports(probe)} == {
        ("typing", False), ("treeopt.decoding.drafter", True), ("torch", False),
        ("treeopt.decoding", False)}


def test_annotation_only_allowances_hold_only_under_type_checking():
    module = "treeopt.drafters"
    assert exempt(module, Import("treeopt.decoding.drafter", 1, annotation=True))
    assert not exempt(module, Import("treeopt.decoding.drafter", 1, annotation=False))
    assert not exempt("treeopt.pricing.costs", Import("treeopt.decoding.drafter", 1, annotation=True))


def test_the_numpy_layer_loads_no_torch():
    code = ("import treeopt.dynamic.engines, treeopt.dynamic.recommend, treeopt.dynamic.report, "
            "treeopt.dynamic.simulate, treeopt.drafters.kinds, treeopt.drafters.config, treeopt.documents.dtypes,"
            " treeopt.roofline.draft, sys\nprint('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "False"
