"""Engine formats: export a Tree in the form each engine reads, and import any of them back.

| name          | engine / form                                                            |
|---------------|--------------------------------------------------------------------------|
| ``medusa``    | Medusa reference code: the ``medusa_choices`` list (``hydra``: the same  |
|               | list for Hydra's ``hydra_choices``)                                      |
| ``trtllm``    | TensorRT-LLM run script flag ``--medusa_choices="[[0], …]"`` (or eagle)   |
| ``trtllm-yaml`` | TensorRT-LLM LLM-API ``speculative_config`` YAML (Medusa or Eagle)     |
| ``triton``    | TensorRT-LLM Triton backend brace form ``{0}, {0, 0}, {1}``               |
| ``vllm``      | vLLM ``speculative_token_tree`` tuple string + ``num_speculative_tokens`` |
| ``growmap``   | Sequoia-style growmap JSON (roots, branches, Successors, mask, depth, size) |
| ``paths``     | leaves only, one root-to-leaf path each                                  |
| ``json``      | treeopt's own tree file, ``{"format": "treeopt.tree/1", "choices": …}``   |

What each engine builds from these files, and so which trees each format refuses, is the
registry in :mod:`treeopt.engines.rules`; a per-batch-size schedule's vLLM table is
:func:`vllm_batch_table`. Parsing uses ``json``, ``ast.literal_eval`` and ``yaml.safe_load`` only —
never ``eval``.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from treeopt.engines.rules import engine, engine_problems
from treeopt.errors import FieldError, TreeoptError
from treeopt.model.tree import Tree

TREE_FORMAT = "treeopt.tree/1"
EXTENSIONS = {"trtllm-yaml": "yaml", "growmap": "json", "vllm": "json", "json": "json",
              "medusa": "json", "hydra": "json", "paths": "json"}  # file name endings; else .txt


# ----- export ---------------------------------------------------------------------------------
def export(tree: Tree, fmt: str, *, num_heads: int | None = None, draft: str = "medusa",
           speculative_model: str | None = None, method: str = "eagle") -> str:
    """The text ``fmt``'s engine reads for ``tree``; refused where the engine would build another.

    ``num_heads`` is the drafter's head count (checked against the tree's depth; TensorRT-LLM's
    Medusa YAML needs it); ``speculative_model`` is the EAGLE checkpoint TensorRT-LLM's EAGLE YAML
    names; ``method`` is vLLM's name of an EAGLE drafter (``eagle``, or ``eagle3``).

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
    target = engine(fmt, draft)
    problems = engine_problems(tree, fmt, num_heads=num_heads, draft=draft)
    if problems:
        raise TreeoptError(f"cannot export to {fmt}: {target.engine} would not build this tree: "
                           + "; ".join(problems))
    choices = tree.as_choices()
    if fmt in ("medusa", "hydra"):
        return json.dumps(choices)
    if fmt == "trtllm":
        return f'--{draft}_choices="{json.dumps(choices)}"'
    if fmt == "trtllm-yaml":
        return _trtllm_yaml(tree, draft=draft, num_heads=num_heads,
                            speculative_model=speculative_model)
    if fmt == "triton":
        return ", ".join("{" + ", ".join(map(str, p)) + "}" for p in tree.paths)
    if fmt == "vllm":
        drafter = ({"method": method, "model": speculative_model}
                   if draft == "eagle" and speculative_model else {})
        return json.dumps({**drafter, "num_speculative_tokens": tree.size,
                           "speculative_token_tree": str([tuple(p) for p in tree.paths])})
    if fmt == "growmap":
        return json.dumps(growmap(tree))
    if fmt == "paths":
        return json.dumps([list(p) for p in tree.leaves])
    return json.dumps({"format": TREE_FORMAT, "choices": choices})


def _trtllm_yaml(tree: Tree, *, draft: str, num_heads: int | None,
                 speculative_model: str | None) -> str:
    """TensorRT-LLM's ``speculative_config`` (the LLM API's ``extra_llm_api_options`` YAML)."""
    choices = json.dumps(tree.as_choices())
    if draft == "medusa":
        if num_heads is None:
            raise FieldError("num_heads", "is required for TensorRT-LLM's Medusa YAML: its "
                             "num_medusa_heads overrides the checkpoint's head count")
        lines = ["speculative_config:", "  decoding_type: Medusa",
                 f"  max_draft_len: {tree.size}",
                 f"  num_medusa_heads: {num_heads}",
                 f"  medusa_choices: {choices}"]
    else:
        if not speculative_model:
            raise FieldError("speculative_model", "is required for TensorRT-LLM's EAGLE YAML: "
                             "the EAGLE checkpoint (a local directory or hub name)")
        lines = ["speculative_config:", "  decoding_type: Eagle",
                 f"  speculative_model: {json.dumps(speculative_model)}",
                 f"  max_draft_len: {tree.depth}",
                 f"  max_total_draft_tokens: {tree.size}",
                 f"  max_non_leaves_per_layer: {max(_non_leaves_per_level(tree))}",
                 f"  eagle_choices: {choices}"]
    return "\n".join(lines) + "\n"


def _non_leaves_per_level(tree: Tree) -> list[int]:
    """Nodes with children at each depth, the root's level first."""
    parents = {p[:-1] for p in tree.paths}
    return [sum(1 for p in parents if len(p) == d) for d in range(tree.depth)]


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
        hint = "" if fmt == "paths" else " (a leaves-only list? pass --tree-format paths)"
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


def vllm_batch_table(ranges: list[dict[str, Any]]) -> list[list[int]]:
    """vLLM's ``num_speculative_tokens_per_batch_size`` (0.24 and later) for ``ranges``: vLLM
    carries the last range's draft length to every larger batch
    (``build_dynamic_sd_schedule_lookup``), so where the last range drafts, a range of 0 just
    above it turns speculation off there, as the schedule says.

    >>> vllm_batch_table([{"min_batch": 1, "max_batch": 2, "size": 3},
    ...                   {"min_batch": 3, "max_batch": 8, "size": 1}])
    [[1, 2, 3], [3, 8, 1], [9, 9, 0]]
    """
    table = [[r["min_batch"], r["max_batch"], r["size"]] for r in ranges]
    if table and table[-1][2]:
        table.append([table[-1][1] + 1, table[-1][1] + 1, 0])
    return table
