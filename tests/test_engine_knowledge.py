"""No module outside ``treeopt/engines/`` knows an engine's rules: no string a module computes
with names an engine's config key or server flag (``draft_len_schedule``,
``--speculative-num-steps``, ``medusa_choices`` …). Docstrings may mention them — they explain
what a function hands to the engine modules — and so may comments; any other string literal,
f-string part included, is a rule written outside the engine's module.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINE_WORDS: tuple[str, ...] = (
    # TensorRT-LLM
    "draft_len_schedule", "decoding_type", "speculative_config", "max_draft_len",
    "max_total_draft_tokens", "use_dynamic_tree", "dynamic_tree_max_topK", "eagle_choices",
    "medusa_choices", "max_matching_ngram_size", "sa_config", "use_sa_spec",
    "extra_llm_api_options",
    # vLLM
    "num_speculative_tokens", "speculative_token_tree", "prompt_lookup_min", "prompt_lookup_max",
    "suffix_decoding_", "--speculative-config",
    # SGLang
    "--speculative-algorithm", "--speculative-num-steps", "--speculative-num-draft-tokens",
    "--speculative-eagle-topk", "--speculative-adaptive", "--speculative-ngram",
    "--speculative-draft-model-path", "candidate_steps",
    # reference code and Hugging Face
    "hydra_choices", "total_token", "prompt_lookup_num_tokens",
)


def docstring_nodes(tree: ast.AST) -> set[int]:
    """The ids of the module's, classes' and functions' docstring nodes."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                found.add(id(body[0].value))
    return found


def engine_words_in(source: str) -> list[tuple[int, str]]:
    """(line, word) of every engine word in a string literal that is not a docstring.

    >>> engine_words_in('def f():\\n    "uses draft_len_schedule"\\n    return "draft_len_schedule"\\n')
    [(3, 'draft_len_schedule')]
    """
    tree = ast.parse(source)
    skip = docstring_nodes(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found += [(node.lineno, w) for w in ENGINE_WORDS if w in node.value]
    return sorted(found)


def outside_engines() -> list[Path]:
    engines = ROOT / "treeopt" / "engines"
    return sorted(p for p in (ROOT / "treeopt").rglob("*.py") if engines not in p.parents)


def test_no_module_outside_engines_writes_an_engines_keys_or_flags():
    found = [f"{p.relative_to(ROOT)}:{line}: {word}" for p in outside_engines()
             for line, word in engine_words_in(p.read_text(encoding="utf-8"))]
    assert found == []


def test_the_scan_finds_a_rule_written_outside_the_engines():
    planted = ('"""Says draft_len_schedule in a docstring: allowed."""\n'
               'KEY = "speculative_config"\n'
               'def flags(k):\n'
               '    # --speculative-num-steps in a comment: allowed\n'
               '    return f"--speculative-num-steps {k}"\n')
    assert engine_words_in(planted) == [(2, "speculative_config"), (5, "--speculative-num-steps")]


def test_the_engines_themselves_hold_the_words():
    sources = "".join(p.read_text(encoding="utf-8")
                      for p in (ROOT / "treeopt" / "engines").rglob("*.py"))
    assert [w for w in ENGINE_WORDS if w not in sources] == []
