"""Every engine's entries in one place: the tree formats (one :class:`~treeopt.engines.rules.Engine`
per format and draft type, gathered from the engine modules), the adaptive step controllers, and
the engines a dynamic setting or an adaptive file is written for.

A tree that breaks an entry's rule is not refused by the engine in general, it is *built
differently* (a node attached to the wrong parent, a candidate drafted from the wrong sibling),
so treeopt refuses it on export, with the reason and the ``treeopt grow`` flags that grow the
best tree the engine does build.

>>> [e.label for e in engines_for(Tree.from_choices([[0], [1], [1, 0]]))][:4]
['medusa', 'trtllm --draft medusa', 'trtllm --draft eagle', 'trtllm-yaml --draft medusa']
"""

from __future__ import annotations

from treeopt.engines import papers, trtllm, vllm
from treeopt.engines.rules import NONEMPTY, Controller, Engine
from treeopt.engines.sglang import CONTROLLER as SGLANG_CONTROLLER
from treeopt.engines.trtllm.trees import DRAFTS
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree

OWN_FORMS: tuple[Engine, ...] = (
    Engine("paths", None, "leaf paths (one root-to-leaf path each)", "treeopt", (NONEMPTY,)),
    Engine("json", None, "treeopt tree file", "treeopt", ()),
)
ENGINES: tuple[Engine, ...] = (*papers.ENGINES[:2], *trtllm.ENGINES, *vllm.ENGINES,
                               *papers.ENGINES[2:], *OWN_FORMS)
FORMATS: tuple[str, ...] = tuple(dict.fromkeys(e.format for e in ENGINES))
CONTROLLERS: tuple[Controller, ...] = (SGLANG_CONTROLLER, vllm.CONTROLLER, *trtllm.CONTROLLERS)
ADAPTIVE_ENGINES: tuple[str, ...] = ("sglang", "vllm", "trtllm")  # an adaptive file's engines
__all__ = ["ADAPTIVE_ENGINES", "CONTROLLERS", "DRAFTS", "ENGINES", "FORMATS", "engine",
           "engine_problems", "engines_for"]


def engine(fmt: str, draft: str = "medusa") -> Engine:
    """The registry entry for ``fmt`` exported with ``draft``; anything else is refused."""
    if fmt not in FORMATS:
        raise TreeoptError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if draft not in DRAFTS:
        raise TreeoptError(f"unknown draft type {draft!r}; choose one of {', '.join(DRAFTS)}")
    return next(e for e in ENGINES if e.format == fmt and e.draft in (None, draft))


def engine_problems(tree: Tree, fmt: str, *, num_heads: int | None = None,
                    draft: str = "medusa") -> list[str]:
    """Why ``fmt``'s engine would not run ``tree`` as designed, in plain words (empty: it would).

    >>> engine_problems(Tree.from_choices([[0], [2]]), "hydra")
    ['[2] is there without [1]: Hydra drafts the children of a node as the top-m of its head (grow with --constraint grounded)']
    """
    problems = engine(fmt, draft).problems(tree)
    if num_heads is not None and tree.depth > num_heads and fmt not in ("paths", "json"):
        problems.append(f"the tree is {tree.depth} deep but there are only {num_heads} heads "
                        f"(grow with --max-depth {num_heads})")
    return problems


def engines_for(tree: Tree, *, num_heads: int | None = None) -> list[Engine]:
    """Every registry entry whose engine runs ``tree`` as designed (formats in registry order)."""
    return [e for e in ENGINES
            if not engine_problems(tree, e.format, num_heads=num_heads, draft=e.draft or "medusa")]


def check_adaptive_engine(name: str) -> str:
    """``name`` if an adaptive file is written for it; anything else is refused."""
    if name not in ADAPTIVE_ENGINES:
        raise TreeoptError(f"engine {name!r}: expected one of {', '.join(ADAPTIVE_ENGINES)}")
    return name
