"""The layout: which package may import which (:data:`ALLOWED`), which libraries each may use
(:data:`THIRD_PARTY`), and no import circle between any two modules — checked on the source of
every module, where every import counts: at the top, inside functions and under
``TYPE_CHECKING``.

The packages, each above those it may import; each states its own line in its docstring
(``Layer: …; may import …``, :func:`test_each_package_states_its_layer`).

The numpy layer (``import treeopt`` loads it, and numpy only), from the bottom up:

- ``errors``, ``version``: leaves; ``files``: versioned files, atomic writes (imports errors);
- ``registry``: the drafter kinds and the drafters' settings (:mod:`treeopt.registry.kinds`,
  :mod:`treeopt.registry.drafter_configs`), free of numpy and torch;
- ``model``: trees, rank traces, acceptance, growth, simulation, dynamic-tree settings;
- ``documents``: the typed documents (step profiles, sweeps, verify reports, …); imports model;
- ``roofline``: predicted latency; ``engines``: one module per engine, everything it accepts
  and the versions that accept it (imports model, and registry: which drafter kind records
  which n-gram lengths);
- ``pricing``: step costs and selection (imports model, documents, roofline and engines: a
  selection file records each batch range's engine forms);
- ``dynamic``: dynamic-tree simulation and recommendation (prices with pricing; each engine's
  settings come from engines);
- ``adaptive``: the engines' adaptive step controllers, replayed over dynamic workloads (the
  controllers' rules and files are engines');
- ``treeopt``: the package's face, the public API; no module of treeopt imports it.

Above it: ``decoding`` (the tree forward, acceptance, the live loop and the
:class:`~treeopt.decoding.drafter.Drafter` interface it drives), ``drafters`` (its
implementations), ``profiling`` (measured latency), ``assets`` (a pretrained model and prompt
sets fetched from the package registry), ``demo``, ``workbench`` (the app's services, without
Streamlit), ``cli`` (argparse wiring) and ``app_pages`` (and ``app.py``: Streamlit pages, no
torch).

A circle is any set of modules that import one another, whatever their packages: a module is a
node of the graph (a package's ``__init__.py`` is the package's node); ``from a import b``
names module ``a.b`` where ``b`` is one, else ``a``. Importing ``a.b.c`` runs ``a/__init__.py``
and ``a/b/__init__.py`` first, but that is no edge: a package's face imports its own modules,
and the layout keeps them below it.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NUMPY_LAYER = ("errors", "version", "files", "registry", "model", "documents", "roofline",
               "engines", "pricing", "dynamic", "adaptive")  # bottom up; and the face, treeopt
_BASE = ("errors", "files")
ALLOWED: dict[str, tuple[str, ...]] = {
    "errors": (),
    "version": (),
    "files": ("errors",),
    "registry": ("errors",),
    "model": (*_BASE, "version"),
    "documents": (*_BASE, "model", "registry"),
    "roofline": (*_BASE, "registry"),
    "engines": (*_BASE, "model", "documents", "registry"),
    "pricing": (*_BASE, "model", "documents", "registry", "roofline", "engines"),
    "dynamic": (*_BASE, "model", "documents", "registry", "engines", "pricing"),
    "adaptive": (*_BASE, "model", "documents", "registry", "engines", "pricing", "dynamic"),
    "treeopt": ("errors", "version", "model", "documents", "engines", "pricing"),
    "decoding": NUMPY_LAYER,
    "drafters": (*NUMPY_LAYER, "decoding"),
    "profiling": (*NUMPY_LAYER, "decoding", "drafters"),
    "assets": _BASE,
    "demo": (*NUMPY_LAYER, "decoding", "drafters", "profiling", "assets"),
    "workbench": (*NUMPY_LAYER, "decoding", "drafters", "profiling", "assets", "demo"),
    "cli": (*NUMPY_LAYER, "decoding", "drafters", "profiling", "assets", "demo", "workbench"),
    "app_pages": (*NUMPY_LAYER, "demo", "workbench"),
}
TORCH = ("numpy", "torch", "transformers", "safetensors")
THIRD_PARTY: dict[str, tuple[str, ...]] = {
    **{p: () for p in ("errors", "version", "files", "registry", "documents")},
    **{p: ("numpy",) for p in ("model", "roofline", "pricing", "dynamic", "adaptive", "treeopt")},
    "engines": ("numpy", "yaml"),  # TensorRT-LLM's YAML form, read back
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
LEAVES = {"treeopt.errors": "errors", "treeopt.version": "version", "treeopt.files": "files"}
STATED_IN = {"treeopt": "treeopt/__init__.py",
             "app_pages": "app_pages/__init__.py",
             **{p: f"treeopt/{p}.py" for p in LEAVES.values()}}  # else treeopt/<p>/__init__.py


@dataclass(frozen=True)
class Import:
    module: str  # the module named: ``from a.b import c`` names ``a.b.c`` when that is a module
    line: int


def module_of(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources(root: Path = ROOT) -> list[Path]:
    found = [*(root / "treeopt").rglob("*.py"), *(root / "app_pages").rglob("*.py")]
    return sorted(found + [p for p in (root / "app.py",) if p.exists()])


def imports(path: Path, modules: frozenset[str] = frozenset()) -> list[Import]:
    """Every absolute import in a file, anywhere in it (relative imports are not used here);
    ``modules``: the project's modules, which ``from a import b`` may name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                     else node.module for a in node.names]
        else:
            continue
        found += [Import(name, node.lineno) for name in dict.fromkeys(names)]
    return found


def package_of(module: str) -> str | None:
    """The package a treeopt or app module belongs to; None for anything else (a library)."""
    parts = module.split(".")
    if parts[0] in ("app", "app_pages"):
        return "app_pages"
    if parts[0] != "treeopt":
        return None
    if len(parts) == 1:
        return "treeopt"
    if parts[1] == "__main__":
        return "cli"  # the command line's entry point
    return LEAVES.get(".".join(parts[:2]), parts[1])


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module → the project's modules it imports, over every source file under ``root``."""
    paths = sources(root)
    modules = frozenset(module_of(p, root) for p in paths)
    edges: dict[str, set[str]] = {}
    for path in paths:
        here = module_of(path, root)
        edges[here] = {i.module for i in imports(path, modules) if i.module in modules} - {here}
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every set of nodes that reach one another (a strongly connected component of more than
    one node), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(n: str) -> None:  # Tarjan's algorithm
        index[n] = low[n] = len(index)
        stack.append(n)
        for m in sorted(edges.get(n, ())):
            if m not in index:
                visit(m)
                low[n] = min(low[n], low[m])
            elif m in stack:
                low[n] = min(low[n], index[m])
        if low[n] == index[n]:
            component = []
            while not component or component[-1] != n:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for n in sorted(edges):
        if n not in index:
            visit(n)
    return sorted(found)


def stated_imports(doc: str) -> set[str] | None:
    """The packages a docstring's ``Layer: …; may import …`` paragraph names (``the numpy
    layer`` stands for all of :data:`NUMPY_LAYER`); None without one."""
    found = re.search(r"^Layer: (.+?)(?:\n\n|\Z)", doc, re.S | re.M)
    layer = " ".join(found.group(1).split()) if found else ""
    if "may import" not in layer:
        return None
    listed = layer.split("may import", 1)[1]
    named = set(re.findall(r"``(\w+)``", listed))
    return named | set(NUMPY_LAYER) if "the numpy layer" in listed else named


SOURCES = sources()
MODULES = frozenset(module_of(p) for p in SOURCES)


def test_every_package_has_an_allowed_list():
    packages = {package_of(module_of(p)) for p in SOURCES}
    assert packages == set(ALLOWED) == set(THIRD_PARTY)


def test_the_allowed_directions_have_no_circle():
    assert circles({p: set(a) for p, a in ALLOWED.items()}) == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layout(path):
    package = package_of(module_of(path))
    assert package is not None
    bad = []
    for imp in imports(path, MODULES):
        target = package_of(imp.module)
        if target is None:
            top = imp.module.split(".")[0]
            if top not in sys.stdlib_module_names and top not in THIRD_PARTY[package]:
                bad.append(f"line {imp.line}: {imp.module} (a library {package} may not use)")
        elif target != package and target not in ALLOWED[package]:
            bad.append(f"line {imp.line}: {imp.module} (package {target})")
    assert not bad, f"{path.relative_to(ROOT)} ({package}) imports " + "; ".join(bad)


def test_no_import_circle():
    assert circles(graph()) == []


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_each_package_states_its_layer(package):
    path = ROOT / STATED_IN.get(package, f"treeopt/{package}/__init__.py")
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    assert doc.splitlines(), f"{path.relative_to(ROOT)} has no docstring saying what it holds"
    assert stated_imports(doc) == set(ALLOWED[package]), (
        f"{path.relative_to(ROOT)}: its 'Layer: …; may import …' paragraph should name "
        f"{sorted(ALLOWED[package]) or 'nothing of treeopt'}")


PLANTED = {"treeopt/__init__.py": "from treeopt.model.tree import Tree\n",
           "treeopt/errors.py": "", "treeopt/model/__init__.py": "",
           "treeopt/model/tree.py": "from treeopt.errors import E\n",
           "treeopt/decoding/__init__.py": "", "treeopt/drafters/__init__.py": "",
           "treeopt/decoding/loop.py": "def run():\n    from treeopt.drafters.heads import D\n",
           "treeopt/drafters/heads.py": "from treeopt.decoding.loop import run\n",
           "treeopt/model/growth.py": "from typing import TYPE_CHECKING\n"
                                      "from treeopt.model import tree\n"
                                      "if TYPE_CHECKING:\n    from treeopt.model.trace import T\n",
           "treeopt/model/trace.py": "from treeopt.model.growth import grow\n"}


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_planted_circles_are_found(tmp_path):
    _plant(tmp_path, PLANTED)  # across packages (inside a function), inside one (for a type)
    assert circles(graph(tmp_path)) == [["treeopt.decoding.loop", "treeopt.drafters.heads"],
                                        ["treeopt.model.growth", "treeopt.model.trace"]]
    _plant(tmp_path, {"treeopt/drafters/heads.py": "from treeopt.errors import E\n",
                      "treeopt/model/trace.py": "from treeopt.model.tree import Tree\n"})
    assert circles(graph(tmp_path)) == []
    _plant(tmp_path, {"treeopt/model/tree.py": "import treeopt\n"})  # a module importing the face
    assert circles(graph(tmp_path)) == [["treeopt", "treeopt.model.tree"]]


def test_a_submodule_named_by_from_import_is_an_edge_to_it(tmp_path):
    _plant(tmp_path, PLANTED)
    edges = graph(tmp_path)
    assert edges["treeopt.model.growth"] == {"treeopt.model.tree", "treeopt.model.trace"}
    assert edges["treeopt"] == {"treeopt.model.tree"}  # parent packages' faces are no edges


def test_the_checks_see_imports_inside_functions_and_for_annotations(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from treeopt.decoding.drafter import Drafter\n"
                     "def f():\n    import torch\n    from treeopt.decoding import loop\n")
    assert {i.module for i in imports(probe, frozenset({"treeopt.decoding.loop"}))} == {
        "typing", "treeopt.decoding.drafter", "torch", "treeopt.decoding.loop"}


def test_a_layer_statement_is_read():
    doc = "Holds things.\n\nLayer: torch; may\nimport the numpy layer and ``decoding``.\n"
    assert stated_imports(doc) == {*NUMPY_LAYER, "decoding"}
    assert stated_imports("A leaf.\n\nLayer: numpy; may import nothing of treeopt.") == set()
    assert stated_imports("Holds things, imports ``model``.") is None


def test_the_numpy_layer_loads_no_torch():
    numpy_layer = [m for m in sorted(MODULES) if package_of(m) in (*NUMPY_LAYER, "treeopt")]
    code = (f"import importlib, sys\nfor m in {numpy_layer!r}:\n    importlib.import_module(m)\n"
            "print(sorted(m for m in ('torch', 'transformers', 'streamlit') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == "[]"
