"""Engine formats: export a Tree in the form each engine reads, and import any of them back.

| name          | engine / form                                                            |
|---------------|--------------------------------------------------------------------------|
| ``medusa``    | Medusa reference code: the ``medusa_choices`` list (``hydra``: same list,  |
|               | checked against Hydra's contiguous-children assumption)                  |
| ``trtllm``    | TensorRT-LLM run script flag ``--medusa_choices="[[0], …]"`` (or eagle)   |
| ``trtllm-yaml`` | TensorRT-LLM LLM-API ``speculative_config`` YAML (Medusa or Eagle)     |
| ``triton``    | TensorRT-LLM Triton backend brace form ``{0}, {0, 0}, {1}``               |
| ``vllm``      | vLLM ``speculative_token_tree`` tuple string + ``num_speculative_tokens`` |
| ``growmap``   | Sequoia-style growmap JSON (roots, branches, Successors, mask, depth, size) |
| ``paths``     | leaves only, one root-to-leaf path each                                  |
| ``json``      | treeopt's own tree file, ``{"format": "treeopt.tree/1", "choices": …}``   |

Parsing uses ``json``, ``ast.literal_eval`` and ``yaml.safe_load`` only — never ``eval``.
"""

from __future__ import annotations

import ast
import json
import os
import re
from pathlib import Path as FilePath
from typing import Any

from treeopt.errors import TreeoptError
from treeopt.files import read_text
from treeopt.tree import Tree

TREE_FORMAT = "treeopt.tree/1"
FORMATS: tuple[str, ...] = ("medusa", "hydra", "trtllm", "trtllm-yaml", "triton", "vllm",
                            "growmap", "paths", "json")
DRAFTS: tuple[str, ...] = ("medusa", "eagle")
MEDUSA_TOPK = 10  # the Medusa and Hydra reference code take the top-10 candidates of every head


# ----- engine constraints ---------------------------------------------------------------------
def engine_problems(tree: Tree, fmt: str, *, num_heads: int | None = None) -> list[str]:
    """Why ``fmt``'s engine cannot run ``tree``, in plain words (empty when it can).

    >>> engine_problems(Tree.from_choices([[0], [2]]), "hydra")
    ['Hydra expands the children of every node as ranks 0..m-1, but (2,) is there without (1,)']
    """
    problems = []
    if tree.size == 0 and fmt != "json":
        problems.append("the tree is empty: every engine needs at least one draft node")
    if num_heads is not None and tree.depth > num_heads and fmt not in ("paths", "json"):
        problems.append(f"the tree is {tree.depth} deep but there are only {num_heads} heads")
    if fmt in ("medusa", "hydra") and tree.max_rank >= MEDUSA_TOPK:
        problems.append(f"rank {tree.max_rank} is used, but the reference code keeps only the "
                        f"top-{MEDUSA_TOPK} candidates of each head (ranks 0..{MEDUSA_TOPK - 1})")
    if fmt in ("hydra", "growmap") and not tree.is_contiguous():
        gap = _first_gap(tree)
        engine = "Hydra" if fmt == "hydra" else "A growmap"
        problems.append(f"{engine} expands the children of every node as ranks 0..m-1, "
                        f"but {gap[0]} is there without {gap[1]}")
    if fmt == "vllm":
        problems.extend(_uniform_problems(tree))
    return problems


def _first_gap(tree: Tree) -> tuple[tuple[int, ...], tuple[int, ...]]:
    for p in tree.paths:
        if p[-1] > 0 and p[:-1] + (p[-1] - 1,) not in tree:
            return p, p[:-1] + (p[-1] - 1,)
    raise AssertionError("tree is contiguous")


def _uniform_problems(tree: Tree) -> list[str]:
    """vLLM drafts level by level: every node of a level has the same children, ranks 0..c-1."""
    level: list[tuple[int, ...]] = [()]
    for depth in range(1, tree.depth + 1):
        counts = [len(tree.children(p)) for p in level]
        c = counts[0]
        if any(k != c for k in counts) or any(tree.children(p) != [p + (r,) for r in range(c)]
                                              for p in level):
            return [f"vLLM's tree drafter needs a level-uniform tree (every node of a level with "
                    f"the same children 0..c-1), but depth {depth} has children counts "
                    f"{sorted(set(counts))} under its {len(level)} parents; grow with "
                    f"--constraint uniform"]
        level = [p + (r,) for p in level for r in range(c)]
    return []


def check_engine(tree: Tree, fmt: str, *, num_heads: int | None = None) -> None:
    """Raise a TreeoptError listing every reason ``fmt``'s engine cannot run ``tree``."""
    problems = engine_problems(tree, fmt, num_heads=num_heads)
    if problems:
        raise TreeoptError(f"cannot export to {fmt}: " + "; ".join(problems))


# ----- export ---------------------------------------------------------------------------------
def export(tree: Tree, fmt: str, *, num_heads: int | None = None, draft: str = "medusa") -> str:
    """The text ``fmt``'s engine reads for ``tree``.

    >>> t = Tree.from_choices([[0], [1], [0, 0]])
    >>> export(t, "medusa")
    '[[0], [1], [0, 0]]'
    >>> export(t, "triton")
    '{0}, {1}, {0, 0}'
    >>> export(t, "trtllm")
    '--medusa_choices="[[0], [1], [0, 0]]"'
    >>> export(Tree.from_choices([[0], [1], [0, 0], [1, 0]]), "vllm")
    '{"num_speculative_tokens": 4, "speculative_token_tree": "[(0,), (1,), (0, 0), (1, 0)]"}'
    """
    if fmt not in FORMATS:
        raise TreeoptError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if draft not in DRAFTS:
        raise TreeoptError(f"unknown draft type {draft!r}; choose one of {', '.join(DRAFTS)}")
    check_engine(tree, fmt, num_heads=num_heads)
    choices = tree.as_choices()
    if fmt in ("medusa", "hydra"):
        return json.dumps(choices)
    if fmt == "trtllm":
        return f'--{draft}_choices="{json.dumps(choices)}"'
    if fmt == "trtllm-yaml":
        return _trtllm_yaml(tree, draft=draft, num_heads=num_heads)
    if fmt == "triton":
        return ", ".join("{" + ", ".join(map(str, p)) + "}" for p in tree.paths)
    if fmt == "vllm":
        return json.dumps({"num_speculative_tokens": tree.size,
                           "speculative_token_tree": str([tuple(p) for p in tree.paths])})
    if fmt == "growmap":
        return json.dumps(growmap(tree))
    if fmt == "paths":
        return json.dumps([list(p) for p in tree.leaves])
    return json.dumps({"format": TREE_FORMAT, "choices": choices})


def _trtllm_yaml(tree: Tree, *, draft: str, num_heads: int | None) -> str:
    choices = json.dumps(tree.as_choices())
    if draft == "medusa":
        lines = ["speculative_config:", "  decoding_type: Medusa",
                 f"  max_draft_len: {tree.size}",
                 f"  num_medusa_heads: {num_heads or tree.depth}",
                 f"  medusa_choices: {choices}"]
    else:
        non_leaves = [1] + [w - sum(1 for leaf in tree.leaves if len(leaf) == d)
                            for d, w in enumerate(tree.widths, start=1)]
        lines = ["speculative_config:", "  decoding_type: Eagle",
                 f"  max_draft_len: {tree.depth}",
                 f"  max_total_draft_tokens: {tree.size}",
                 f"  num_eagle_layers: {tree.depth}",
                 f"  max_non_leaves_per_layer: {max(non_leaves)}",
                 f"  eagle_choices: {choices}"]
    return "\n".join(lines) + "\n"


def growmap(tree: Tree) -> dict[str, Any]:
    """Sequoia-style growmap: node 0 is the root, nodes in canonical (breadth-first) order.

    >>> g = growmap(Tree.from_choices([[0], [1], [0, 0]]))
    >>> g["roots"], g["branches"], g["Successors"], g["depth"], g["size"]
    ([[0], [1, 2], [3]], [[2], [1, 0], [0]], [[1, 2], [3], [], []], [0, 1, 1, 2], 4)
    """
    succ: list[list[int]] = [[] for _ in range(tree.num_tokens)]
    for i, parent in enumerate(tree.parents.tolist()):
        succ[parent + 1].append(i + 1)
    depth = tree.position_offsets.tolist()
    roots = [[i for i in range(tree.num_tokens) if depth[i] == d] for d in range(tree.depth + 1)]
    return {"roots": roots,
            "branches": [[len(succ[i]) for i in level] for level in roots],
            "Successors": succ,
            "mask": tree.attention_mask.astype(int).tolist(),
            "depth": depth,
            "size": tree.num_tokens}


# ----- import ---------------------------------------------------------------------------------
def parse_tree(text: str, *, fmt: str | None = None, source: str = "tree") -> Tree:
    """Parse any exported form back into a Tree; ``fmt=None`` detects the form.

    >>> parse_tree('--medusa_choices="[[0], [0, 0]]"').paths
    ((0,), (0, 0))
    >>> parse_tree("{0}, {1}, {0, 0}").paths
    ((0,), (1,), (0, 0))
    >>> parse_tree("[[0, 0], [1]]", fmt="paths").paths
    ((0,), (1,), (0, 0))
    """
    text = text.strip()
    if not text:
        raise TreeoptError(f"{source}: empty; expected a choices list such as [[0], [0, 0], [1]]")
    try:
        choices = _choices_from_text(text, fmt=fmt)
        if fmt == "paths":
            choices = _prefixes(choices)
    except (ValueError, SyntaxError, TypeError, KeyError) as exc:
        if isinstance(exc, TreeoptError):
            raise TreeoptError(f"{source}: {exc}") from None
        raise TreeoptError(f"{source}: not a tree in any known form ({exc.__class__.__name__}: "
                           f"{exc}); expected e.g. [[0], [0, 0], [1]]") from None
    try:
        return Tree.from_choices(choices)
    except TreeoptError as exc:
        hint = "" if fmt == "paths" else " (a leaves-only list? pass --format paths)"
        missing = "has no parent" in str(exc)
        raise TreeoptError(f"{source}: {exc}{hint if missing else ''}") from None


def _choices_from_text(text: str, *, fmt: str | None) -> list[Any]:
    flag = re.match(r"^--(medusa|eagle)_choices\s*=?\s*", text)
    if flag:
        text = text[flag.end():].strip().strip("'\"")
    if fmt == "triton" or (fmt is None and re.match(r"^\{\s*\d", text)):
        return _literal("[" + text.replace("{", "[").replace("}", "]") + "]")
    if fmt == "trtllm-yaml" or (fmt is None and text.startswith("speculative_config")):
        return _from_yaml(text)
    if text.startswith("{"):
        return _from_json_object(json.loads(text))
    value = _literal(re.sub(r"^[A-Za-z_]\w*\s*=\s*", "", text))  # allow `name = [[0], ...]`
    return value


def _prefixes(leaves: list[Any]) -> list[list[Any]]:
    """Every prefix of every leaf path, each once, in first-seen order."""
    out: dict[tuple[Any, ...], None] = {}
    for leaf in leaves:
        if not isinstance(leaf, (list, tuple)) or len(leaf) == 0:
            raise TreeoptError(f"leaf path {leaf!r} is not a non-empty list of ranks")
        out.update(dict.fromkeys(tuple(leaf[:d]) for d in range(1, len(leaf) + 1)))
    return [list(p) for p in out]


def _literal(text: str) -> list[Any]:
    value = ast.literal_eval(text)
    if not isinstance(value, (list, tuple)):
        raise TreeoptError(f"expected a list of paths, got a {type(value).__name__}")
    return [list(p) if isinstance(p, (list, tuple)) else p for p in value]


def _from_yaml(text: str) -> list[Any]:
    import yaml

    doc = yaml.safe_load(text)
    cfg = doc.get("speculative_config", doc) if isinstance(doc, dict) else None
    for key in ("medusa_choices", "eagle_choices"):
        if isinstance(cfg, dict) and key in cfg:
            return list(cfg[key])
    raise TreeoptError("YAML has no speculative_config.medusa_choices or eagle_choices")


def _from_json_object(doc: Any) -> list[Any]:
    if not isinstance(doc, dict):
        raise TreeoptError("expected a JSON object")
    if "speculative_token_tree" in doc:
        return _literal(str(doc["speculative_token_tree"]))
    if "Successors" in doc:
        return Tree.from_parents(_parents_from_successors(doc["Successors"])).as_choices()
    if doc.get("format") == TREE_FORMAT:
        return list(doc["choices"])
    for key in ("medusa_choices", "eagle_choices", "choices"):
        if key in doc:
            return list(doc[key])
    raise TreeoptError(f"JSON object with keys {sorted(doc)[:6]} is not a known tree form")


def _parents_from_successors(successors: list[list[int]]) -> list[int]:
    parent = {int(c): i for i, kids in enumerate(successors) for c in kids}
    if sorted(parent) != list(range(1, len(successors))):
        raise TreeoptError("growmap Successors must name every node 1..size-1 exactly once")
    return [parent[i] - 1 for i in range(1, len(successors))]


def load_tree_arg(path: str | os.PathLike[str], *, size: int | None = None,
                  fmt: str | None = None) -> Tree:
    """Resolve a TREE argument: a tree JSON, a growth JSON (``size`` picks T_n), or any form."""
    p = FilePath(path)
    text = read_text(p, expected="a text file holding a tree")
    if '"treeopt.growth/1"' in text:
        from treeopt.grow import Growth

        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TreeoptError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        growth = Growth.from_json(doc, source=str(p))
        if size is None:
            raise TreeoptError(f"{p}: a growth file holds trees of 1..{growth.max_nodes} nodes; "
                               "pick one with --size N")
        return growth.tree(size)
    if size is not None:
        raise TreeoptError(f"--size applies to growth files only, and {p} is not one")
    return parse_tree(text, fmt=fmt, source=str(p))
