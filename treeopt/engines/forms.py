"""Tree forms: export a Tree in the form each engine reads, and import any of them back; the
per-batch-size schedule of a selection's trees in the engines' forms.

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

The texts are the engine modules' (:mod:`treeopt.engines.papers`,
:mod:`treeopt.engines.trtllm`, :mod:`treeopt.engines.vllm`); what each engine builds from them,
and so which trees each format refuses, is :mod:`treeopt.engines.registry`. Parsing uses
``json``, ``ast.literal_eval`` and ``yaml.safe_load`` only — never ``eval``.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Sequence
from typing import Any

from treeopt.engines import papers
from treeopt.engines.registry import engine, engine_problems
from treeopt.engines.trtllm import schedule as trt_schedule
from treeopt.engines.trtllm import trees as trt_trees
from treeopt.engines.vllm import forms as vllm_forms
from treeopt.engines.vllm.per_batch import table_rows
from treeopt.errors import TreeoptError
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
    if fmt in ("medusa", "hydra"):
        return papers.choices_text(tree)
    if fmt == "trtllm":
        return trt_trees.run_script_flag(tree, draft=draft)
    if fmt == "trtllm-yaml":
        return trt_trees.static_tree_yaml(tree, draft=draft, num_heads=num_heads,
                                          speculative_model=speculative_model)
    if fmt == "triton":
        return trt_trees.triton_text(tree)
    if fmt == "vllm":
        model = speculative_model if draft == "eagle" else None
        return vllm_forms.config_text(vllm_forms.tree_config(tree, method=method, model=model))
    if fmt == "growmap":
        return json.dumps(papers.growmap(tree))
    if fmt == "paths":
        return json.dumps([list(p) for p in tree.leaves])
    return json.dumps({"format": TREE_FORMAT, "choices": tree.as_choices()})


def per_batch_forms(ranges: Sequence[tuple[int, int, int]], *,
                    reading: str = trt_schedule.DEFAULT_READING) -> dict[str, Any]:
    """The engines' per-batch-size draft lengths of ``ranges`` (lo, hi, tree nodes; above the
    last range speculation is off): TensorRT-LLM's ``draft_len_schedule`` as ``reading`` reads
    it (or why it takes none), vLLM's ``num_speculative_tokens_per_batch_size`` rows.

    >>> per_batch_forms([(1, 2, 3), (3, 8, 1)])["vllm"]
    {'num_speculative_tokens_per_batch_size': [[1, 2, 3], [3, 8, 1], [9, 9, 0]]}
    """
    return {"tensorrt_llm": trt_schedule.schedule_or_refusal(ranges, reading=reading),
            "vllm": {"num_speculative_tokens_per_batch_size": table_rows(ranges,
                                                                         off_above=True)}}


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
    text = trt_trees.strip_flag(text)
    if fmt == "triton" or (fmt is None and re.match(r"^\{\s*\d", text)):
        return _literal("[" + text.replace("{", "[").replace("}", "]") + "]")
    if fmt == "trtllm-yaml" or (fmt is None and trt_trees.is_yaml(text)):
        return trt_trees.choices_from_yaml(text)
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


def _from_json_object(doc: Any) -> list[Any]:
    if not isinstance(doc, dict):
        raise TreeoptError("expected a JSON object")
    tree = vllm_forms.tree_from_config(doc)
    if tree is not None:
        return _literal(tree)
    if "Successors" in doc:
        return Tree.from_parents(papers.growmap_parents(doc["Successors"])).as_choices()
    if doc.get("format") == TREE_FORMAT:
        return list(doc["choices"])
    choices = trt_trees.choices_from_object(doc)
    if choices is not None:
        return choices
    if "choices" in doc:
        return list(doc["choices"])
    raise TreeoptError(f"JSON object with keys {sorted(doc)[:6]} is not a known tree form")
