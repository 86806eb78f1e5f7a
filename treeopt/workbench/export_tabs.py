"""What the Export page shows for a tree and the drafter it was grown for: one tab per engine
form that runs that drafter, each holding the file to download or, where the engine cannot run
this tree, one line saying why. The drafter's kind decides the forms
(:data:`treeopt.registry.kinds.KINDS`):

| drafter              | tabs                                                                |
|----------------------|---------------------------------------------------------------------|
| prompt lookup        | each engine's n-gram settings (vLLM, SGLang, TensorRT-LLM, HF)       |
| n-gram trie          | SGLang's NGRAM trie flags; a chain also as the other engines' n-gram |
|                      | settings (their n-gram drafters draft chains by prompt lookup)      |
| MTP, suffix decoding | each engine's chain config (vLLM ``mtp`` / ``suffix``, TensorRT-LLM |
|                      | MTP / SA, SGLang NEXTN: :mod:`treeopt.engines.chain_forms`)          |
| a model drafter      | each engine's tree format (:data:`treeopt.engines.registry.ENGINES`)|
| EAGLE, beside those  | ``select --dynamic``'s engine settings and SGLang's tuned adaptive  |
|                      | config, where the demo ships them                                   |

The texts are the library's (:func:`treeopt.engines.forms.export`,
:func:`treeopt.engines.lookup.export_lookup`): the page renders, never formats.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from treeopt.drafters.ngram import LookupRule
from treeopt.engines import chain_forms
from treeopt.engines.forms import EXTENSIONS, export
from treeopt.engines.lookup import (
    FORMS,
    TrieSetting,
    export_lookup,
    recorded_lookup,
    recorded_trie,
)
from treeopt.engines.registry import ENGINES, engine_problems
from treeopt.engines.sglang.adaptive import ADAPTIVE_TAB
from treeopt.engines.sglang.flags import TRIE_NOTES
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree
from treeopt.pricing.chains import chain_method
from treeopt.registry.kinds import KINDS
from treeopt.workbench.numbers import nodes_text

MODEL_FLAG = "speculative-model"  # export's flag of the EAGLE checkpoint (treeopt's own)
LOOKUP_TITLES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm-yaml": "TRT-LLM YAML",
                 "hf": "Hugging Face"}  # the n-gram forms' tab names
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "trtllm-yaml": "TensorRT-LLM",
                "hf": "Hugging Face"}  # the engine each n-gram form is for, in a sentence
TREE_TITLES = {"medusa": "Medusa", "hydra": "Hydra", "trtllm": "TRT-LLM script",
               "trtllm-yaml": "TRT-LLM YAML", "triton": "Triton", "vllm": "vLLM",
               "growmap": "Sequoia", "paths": "Leaf paths", "json": "JSON"}  # short: 9 fit


@dataclass(frozen=True)
class ExportTab:
    """One engine form of the tree: the file (``text``) or why there is none (``problem``, one
    line), what its rules were checked against, and what a user must know beside it."""

    title: str
    engine: str  # "vLLM n-gram proposer — read from …"
    text: str | None
    problem: str | None
    file_name: str
    language: str | None = None
    notes: tuple[str, ...] = ()
    checked: bool = False  # the engine's tree rules were checked: it builds exactly this tree


def describe(tree: Tree, drafter: Mapping[str, Any]) -> str:
    """What the drafter drafts, in its kind's own words.

    >>> describe(Tree.chain(4), {"kind": "prompt-lookup", "min_match": 1, "max_match": 3})
    "Prompt lookup drafts a chain of 4 tokens after the longest match of the context's last 1…3 tokens: each engine's n-gram settings for it."
    >>> describe(Tree.from_choices([[0], [1], [0, 0]]), {"kind": "ngram-trie", "max_match": 18})
    "An n-gram trie drafts a tree of 3 tokens (depth 2, up to 2 children a node) from the continuations its trie holds of the context's suffixes, up to 18 tokens deep: SGLang's NGRAM drafter runs it; vLLM, TensorRT-LLM and Hugging Face draft n-gram chains by prompt lookup."
    >>> describe(Tree.chain(2), {"kind": "medusa"})
    "Medusa heads: a tree of 2 nodes, depth 2, in each engine's tree format."
    """
    lookup, trie = recorded_lookup(drafter), recorded_trie(drafter)
    if lookup is not None:
        return (f"Prompt lookup drafts a chain of {tree.size} tokens after the longest match of "
                f"the context's last {lookup[0]}…{lookup[1]} tokens: each engine's n-gram "
                "settings for it.")
    if trie is not None:
        widest = TrieSetting.of_tree(tree, max_trie_depth=trie.max_trie_depth,
                                     match=trie.match).max_bfs if tree.size else 0
        shape = "one child a node: a chain" if widest == 1 else f"up to {widest} children a node"
        return (f"An n-gram trie drafts a tree of {tree.size} tokens (depth {tree.depth}, "
                f"{shape}) from the continuations its trie holds of the "
                f"context's suffixes, up to {trie.max_trie_depth} tokens deep: SGLang's NGRAM "
                "drafter runs it; vLLM, TensorRT-LLM and Hugging Face draft n-gram chains by "
                "prompt lookup.")
    kind = KINDS.get(str(drafter.get("kind") or ""))
    title = kind.title if kind is not None else "The tree"
    if chain_forms.exports_chains(chain_method(drafter)) and tree.size:
        return (f"{title}: the engines draft its chains, of {chain_forms.chain_k(tree)} tokens "
                f"for this tree of {nodes_text(tree.size)}: each engine's config for it.")
    return (f"{title}: a tree of {nodes_text(tree.size)}, depth {tree.depth}, in each "
            "engine's tree format.")


def lookup_tabs(tree: Tree, drafter: Mapping[str, Any]) -> list[ExportTab]:
    """The n-gram drafters' tabs (prompt lookup, the n-gram trie), those that export first;
    empty for any other drafter."""
    lookup, trie = recorded_lookup(drafter), recorded_trie(drafter)
    if lookup is None and trie is None:
        return []
    rule = LookupRule()
    min_n, max_n = lookup or (rule.min_n, rule.max_n)
    chain = tree.size > 0 and tree.is_chain
    out = []
    for form in FORMS:
        name = f"ngram_{tree.size}_{form.format}.{form.extension}"
        language = None if form.extension == "txt" else form.extension
        engine = f"{form.engine} — read from {form.versions}"
        if trie is not None and form.format == "sglang":
            out.append(_tab(LOOKUP_TITLES[form.format], engine, name, language, TRIE_NOTES,
                            lambda: export_lookup(tree, "sglang", min_n=min_n, max_n=max_n,
                                                  trie=trie)))
            continue
        notes = form.notes(min_n)
        if trie is not None:
            if not chain:
                out.append(ExportTab(LOOKUP_TITLES[form.format], engine, None,
                                     f"{ENGINE_NAMES[form.format]} has no n-gram trie drafter: "
                                     f"its n-gram drafter drafts a chain, and this tree branches "
                                     f"(widths {list(tree.widths)}); SGLang's NGRAM runs it",
                                     name))
                continue
            notes = (f"this engine's n-gram drafter is prompt lookup, not a trie: the same chain "
                     f"of {tree.size} tokens, matched by n-grams of {min_n}…{max_n} tokens "
                     "(treeopt's prompt-lookup defaults), so its acceptance is prompt "
                     "lookup's, not the trie's that was priced", *notes)
        out.append(_tab(LOOKUP_TITLES[form.format], engine, name, language, notes,
                        lambda f=form.format: export_lookup(tree, f, min_n=min_n, max_n=max_n)))
    return sorted(out, key=lambda t: t.text is None)  # the engines that run it first


def chain_tabs(tree: Tree, drafter: Mapping[str, Any]) -> list[ExportTab]:
    """The tabs of a drafter the engines run as chains (MTP, suffix decoding), those that
    export first; empty for any other drafter."""
    method = chain_method(drafter)
    if not chain_forms.exports_chains(method):
        return []
    out = []
    for fmt in chain_forms.CHAIN_FORMATS:
        ext = chain_forms.EXTENSIONS[fmt]
        out.append(_tab(chain_forms.TITLES[fmt], chain_forms.ENGINE_TEXT[(method, fmt)],
                        f"{method}_{tree.size}_{fmt}.{ext}", None if ext == "txt" else ext,
                        chain_forms.chain_notes(method, fmt, tree),
                        lambda f=fmt: chain_forms.export_chain(method, f, tree,
                                                               drafter=drafter)))
    return sorted(out, key=lambda t: t.text is None)


def tree_tabs(tree: Tree, *, num_heads: int, draft: str, speculative_model: str | None,
              method: str) -> list[ExportTab]:
    """A model drafter's tabs: each engine's tree format for ``draft`` (``medusa`` or
    ``eagle``), its rules checked."""
    out = []
    for target in (e for e in ENGINES if e.draft in (None, draft)):
        engine = f"{target.engine} — rules checked against {target.versions}"
        name = f"tree_{tree.size}_{target.format}.{EXTENSIONS.get(target.format, 'txt')}"
        language = "yaml" if target.format == "trtllm-yaml" else "json"
        problems = engine_problems(tree, target.format, num_heads=num_heads, draft=draft)
        if problems:
            out.append(ExportTab(TREE_TITLES[target.format], engine, None,
                                 "This engine would build a different tree: "
                                 + "; ".join(problems), name))
            continue
        tab = _tab(TREE_TITLES[target.format], engine, name, language, target.notes,
                   lambda f=target.format: export(tree, f, num_heads=num_heads, draft=draft,
                                                  speculative_model=speculative_model,
                                                  method=method))
        out.append(ExportTab(tab.title, tab.engine, tab.text,
                             tab.problem and tab.problem.replace(f"--{MODEL_FLAG}",
                                                                 "the EAGLE checkpoint"),
                             tab.file_name, tab.language, tab.notes, checked=tab.text is not None))
    return out


def dynamic_tabs(batch: int | None, *, dynamic_point: Mapping[str, Any] | None,
                 adaptive_config: Mapping[str, Any] | None) -> list[ExportTab]:
    """An EAGLE drafter's dynamic tabs: ``select --dynamic``'s engine settings at ``batch``
    (``dynamic_point``: the document's point there) and SGLang's tuned adaptive config; each
    tab present only where its document is."""
    out = []
    if dynamic_point is not None:
        engines = dynamic_point.get("engines", {})
        text = "".join(f"# {name}\n{entry['text'].rstrip()}\n" for name, entry in engines.items()
                       if entry.get("text"))
        notes = tuple(f"{name}: {problem}" for name, entry in engines.items()
                      for problem in (*entry.get("problems", ()), *entry.get("notes", ())))
        out.append(ExportTab("Dynamic", f"`select --dynamic`'s best setting at batch {batch}, "
                             "in each engine's form", text, None,
                             f"dynamic_batch{batch}.txt", None, notes))
    if adaptive_config is not None:
        out.append(ExportTab("Adaptive", f"{ADAPTIVE_TAB}: the step controller tuned on the "
                             "demo's held-out prompts (`treeopt adaptive`)",
                             json.dumps(dict(adaptive_config), indent=1), None,
                             "sglang_adaptive.json", "json"))
    return out


def _tab(title: str, engine: str, file_name: str, language: str | None,
         notes: tuple[str, ...], render: Callable[[], str]) -> ExportTab:
    """The tab of ``render()``'s text, or of its refusal in one line."""
    try:
        text = render()
    except TreeoptError as exc:
        return ExportTab(title, engine, None, str(exc).splitlines()[0], file_name)
    return ExportTab(title, engine, text.rstrip("\n"), None, file_name, language, notes)


__all__ = ["LOOKUP_TITLES", "TREE_TITLES", "ExportTab", "chain_tabs", "describe", "dynamic_tabs",
           "lookup_tabs", "tree_tabs"]
