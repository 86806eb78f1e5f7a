"""Prompt-lookup (n-gram) settings routed to the engines' forms: from a chain length ``k`` and
n-gram lengths ``min_n`` … ``max_n``, each engine's config (the engine modules write them), and
the per-batch-size schedule of such chains. Needs no torch.

A prompt-lookup drafter's trees are chains (rank 0 at every depth), so what an engine needs is
not a tree but three numbers: ``k`` (tokens drafted per step, the chain's size) and the n-gram
lengths matched. The forms, read from each engine's own code:

| format        | engine / form                                                             |
|---------------|---------------------------------------------------------------------------|
| ``vllm``      | vLLM ``--speculative-config`` JSON, ``method: ngram``                      |
| ``sglang``    | SGLang server flags, ``--speculative-algorithm NGRAM`` (a chain)           |
| ``trtllm-yaml`` | TensorRT-LLM LLM-API YAML, ``NGramDecodingConfig``                       |
| ``hf``        | Hugging Face ``generate`` keyword arguments (prompt lookup)                |

>>> print(lookup_form("vllm").render(LookupSetting(k=4, min_n=1, max_n=3)))
{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from treeopt.engines import huggingface
from treeopt.engines.sglang import flags as sglang
from treeopt.engines.trtllm import configs as trtllm
from treeopt.engines.trtllm.schedule import DEFAULT_READING, encode
from treeopt.engines.vllm import forms as vllm
from treeopt.engines.vllm.per_batch import per_batch_config
from treeopt.errors import FieldError, TreeoptError
from treeopt.model.tree import Tree
from treeopt.registry.kinds import KINDS


@dataclass(frozen=True)
class LookupSetting:
    """A prompt-lookup drafter's engine settings: ``k`` tokens per step, after the longest
    match of the context's last ``min_n`` … ``max_n`` tokens."""

    k: int
    min_n: int
    max_n: int

    def __post_init__(self) -> None:
        if self.k < 1:
            raise TreeoptError(f"k (tokens drafted per step) must be ≥ 1, got {self.k}")
        if not 1 <= self.min_n <= self.max_n:
            raise FieldError("min_n", f"must be ≥ 1 and ≤ {{max_n}} ({self.max_n}), got "
                             f"{self.min_n}")

    @classmethod
    def of_chain(cls, tree: Tree, *, min_n: int, max_n: int) -> LookupSetting:
        """The setting that drafts ``tree``; anything but a chain is refused (prompt lookup
        proposes one token per depth).

        >>> LookupSetting.of_chain(Tree.chain(3), min_n=1, max_n=2)
        LookupSetting(k=3, min_n=1, max_n=2)
        """
        if tree.size == 0 or tree.paths != Tree.chain(tree.size).paths:
            shape = "is empty" if tree.size == 0 else f"branches ({tree.size} nodes, widths " \
                                                       f"{list(tree.widths)})"
            raise TreeoptError(f"prompt lookup drafts a chain (one token per depth, rank 0), "
                               f"but this tree {shape}: export a chain")
        return cls(tree.size, min_n, max_n)


def recorded_lookup(drafter: Mapping[str, Any]) -> tuple[int, int] | None:
    """The n-gram lengths ``(min_n, max_n)`` a growth or selection records of its drafter
    (:attr:`treeopt.model.growth.Growth.drafter`), or ``None`` when it is no drafter whose
    ``max_match`` is the longest n-gram (:attr:`~treeopt.registry.kinds.DrafterKind.max_match`;
    an n-gram trie's is its depth, :func:`recorded_trie`).

    >>> recorded_lookup({"kind": "prompt-lookup", "min_match": 1, "max_match": 3})
    (1, 3)
    >>> recorded_lookup({"kind": "eagle"}) is None, recorded_lookup({"kind": "ngram-trie"}) is None
    (True, True)
    """
    kind = KINDS.get(str(drafter.get("kind") or ""))
    if kind is None or kind.max_match != "max_n" or kind.hybrid:
        return None
    lengths = drafter.get("min_match"), drafter.get("max_match")
    if not all(isinstance(n, int) and n >= 1 for n in lengths):
        raise TreeoptError(f"max_match is not recorded for this {kind.title.lower()} drafter "
                         f"(got min_match {lengths[0]!r}, max_match {lengths[1]!r}): calibrate "
                         "again to record its n-gram lengths")
    return int(lengths[0]), int(lengths[1])  # type: ignore[arg-type]


@dataclass(frozen=True)
class TrieSetting:
    """An n-gram trie drafter's SGLang ``NGRAM`` settings (its ``max_trie_depth`` generation):
    ``nodes`` draft tokens per step, breadths ``min_bfs`` … ``max_bfs``, the trie's depth and
    the children's order (``bfs`` or ``prob``)."""

    nodes: int
    min_bfs: int
    max_bfs: int
    max_trie_depth: int
    match: str

    @classmethod
    def of_tree(cls, tree: Tree, *, max_trie_depth: int, match: str) -> TrieSetting:
        """The setting of a tree grown for the trie: as many draft tokens, breadth 1 up to the
        most children any of its nodes has.

        >>> TrieSetting.of_tree(Tree.from_choices([[0], [1], [0, 0]]), max_trie_depth=18,
        ...                     match="bfs")
        TrieSetting(nodes=3, min_bfs=1, max_bfs=2, max_trie_depth=18, match='bfs')
        """
        if tree.size == 0:
            raise TreeoptError("the tree is empty: an n-gram trie drafts at least one token")
        widest = int(np.bincount(tree.parents + 1).max())
        return cls(tree.size, 1, widest, max_trie_depth, match)


def recorded_trie(drafter: Mapping[str, Any]) -> TrieSetting | None:
    """``(max_trie_depth, match)`` of an n-gram trie a growth or selection records, as a
    :class:`TrieSetting` of no tree yet (nodes 0), or None for any other drafter; the match
    type defaults to SGLang's, bfs, where none is recorded.

    >>> recorded_trie({"kind": "ngram-trie", "max_match": 18, "match_type": "prob"}).match
    'prob'
    """
    kind = KINDS.get(str(drafter.get("kind") or ""))
    if kind is None or kind.max_match != "max_trie_depth":
        return None
    depth = drafter.get("max_match")
    if not isinstance(depth, int) or depth < 2:
        raise TreeoptError(f"max_match (the trie's depth) is not recorded for this n-gram trie "
                           f"drafter (got {depth!r}): calibrate again to record it")
    return TrieSetting(0, 1, 1, depth, str(drafter.get("match_type") or "bfs"))


def trie_flags(s: TrieSetting) -> list[str]:
    """SGLang's NGRAM flags of a trie setting (:func:`treeopt.engines.sglang.flags.trie_flags`)."""
    return sglang.trie_flags(nodes=s.nodes, min_bfs=s.min_bfs, max_bfs=s.max_bfs,
                             max_trie_depth=s.max_trie_depth, match=s.match)


# ----- the registry of forms ------------------------------------------------------------------
@dataclass(frozen=True)
class LookupForm:
    """An export target of prompt-lookup settings: the engine, the versions its form was read
    from, the text it reads, and what a user must know beside it."""

    format: str
    engine: str
    versions: str
    render: Callable[[LookupSetting], str]
    extension: str
    notes: Callable[[int], tuple[str, ...]]  # what to know, given min n


def _trtllm_text(s: LookupSetting) -> str:
    return trtllm.yaml_text(trtllm.ngram_config(k=s.k, max_n=s.max_n))


FORMS: tuple[LookupForm, ...] = (
    LookupForm("vllm", "vLLM n-gram proposer (method ngram)", vllm.NGRAM_VERSIONS,
               lambda s: vllm.config_text(vllm.ngram_config(k=s.k, min_n=s.min_n,
                                                            max_n=s.max_n)),
               "json", vllm.ngram_notes),
    LookupForm("sglang", "SGLang NGRAM (trie drafter) server flags", sglang.NGRAM_VERSIONS,
               lambda s: sglang.ngram_text(k=s.k, min_n=s.min_n, max_n=s.max_n), "txt",
               sglang.ngram_notes),
    LookupForm("trtllm-yaml", "TensorRT-LLM LLM API, NGramDecodingConfig",
               "TensorRT-LLM PyTorch backend: tensorrt_llm/llmapi/llm_args.py "
               "(NGramDecodingConfig), tensorrt_llm/_torch/speculative/drafter.py "
               "(draft_len_schedule)",
               _trtllm_text, "yaml", trtllm.ngram_notes),
    LookupForm("hf", "Hugging Face transformers generate (prompt lookup)", huggingface.VERSIONS,
               lambda s: json.dumps(huggingface.prompt_lookup_kwargs(k=s.k, max_n=s.max_n)),
               "json", huggingface.prompt_lookup_notes),
)
LOOKUP_FORMATS: tuple[str, ...] = tuple(f.format for f in FORMS)


def lookup_form(fmt: str) -> LookupForm:
    """The form ``fmt`` writes of prompt-lookup settings; a format without one is refused."""
    for form in FORMS:
        if form.format == fmt:
            return form
    raise TreeoptError(f"format {fmt!r} has no n-gram (prompt-lookup) form; choose one of "
                       f"{', '.join(LOOKUP_FORMATS)}")


def export_lookup(tree: Tree, fmt: str, *, min_n: int, max_n: int,
                  trie: TrieSetting | None = None) -> str:
    """The text ``fmt``'s engine reads to draft ``tree`` (a chain) by prompt lookup, or, with
    ``trie`` (:func:`recorded_trie`), any tree by SGLang's n-gram trie (``sglang`` only).

    >>> print(export_lookup(Tree.chain(2), "hf", min_n=1, max_n=3))
    {"prompt_lookup_num_tokens": 2, "max_matching_ngram_size": 3}
    """
    form = lookup_form(fmt)
    if trie is not None:
        if fmt != "sglang":
            raise TreeoptError(f"format {fmt!r} has no trie drafter: of the n-gram engines only "
                               f"SGLang's NGRAM drafts trees from a trie; export format "
                               f"'sglang'")
        setting = TrieSetting.of_tree(tree, max_trie_depth=trie.max_trie_depth, match=trie.match)
        return "# SGLang, trie-depth flags\n" + " ".join(trie_flags(setting)) + "\n"
    return form.render(LookupSetting.of_chain(tree, min_n=min_n, max_n=max_n))


def lookup_schedule(ranges: list[dict[str, Any]], *, min_n: int, max_n: int,
                    trie: TrieSetting | None = None, reading: str = DEFAULT_READING
                    ) -> dict[str, Any]:
    """The engines' forms of a per-batch-size schedule of chains (``ranges``: one chain size
    per batch range, as :func:`treeopt.pricing.selection.schedule` builds them; size 0:
    speculation off; above the last range: off): TensorRT-LLM's ``draft_len_schedule`` (as
    ``reading`` reads it) inside one ``NGramDecodingConfig``, one vLLM config switched by batch
    size and one per range, SGLang's flags per range, and Hugging Face's (batch 1 only). With
    ``trie`` (:func:`recorded_trie`) the ranges hold trees of an n-gram trie: SGLang's flags
    only (:func:`trie_schedule`)."""
    if trie is not None:
        return trie_schedule(ranges, trie)

    def per_range(render: Callable[[LookupSetting], Any]) -> list[dict[str, Any]]:
        return [{"min_batch": r["min_batch"], "max_batch": r["max_batch"],
                 "config": render(LookupSetting(r["size"], min_n, max_n)) if r["size"] else None}
                for r in ranges]

    rows = [(r["min_batch"], r["max_batch"], r["size"]) for r in ranges]
    k_max = max(r["size"] for r in ranges)
    first = ranges[0]
    trt: dict[str, Any] = {"reading": reading}
    try:
        sched = encode(rows, reading=reading)
        trt["draft_len_schedule"] = {str(k): v for k, v in sched.schedule}
        if sched.max_draft_len:
            trt["config"] = trtllm.ngram_config(k=sched.max_draft_len, max_n=max_n,
                                                schedule=sched)
    except TreeoptError as exc:
        trt["refused"] = str(exc)
    vllm_doc = ({"speculative_config": per_batch_config(
        vllm.ngram_config(k=k_max, min_n=min_n, max_n=max_n), rows, off_above=True)}
        if k_max else {})
    return {"tensorrt_llm": trt,
            "vllm": {**vllm_doc,  # 0.24 and later: one config, the draft length per batch range
                     "speculative_config_per_batch_range": per_range(
                         lambda s: vllm.ngram_config(k=s.k, min_n=s.min_n, max_n=s.max_n))},
            "sglang": {g: per_range(lambda s, g=g: sglang.ngram_flags(
                k=s.k, min_n=s.min_n, max_n=s.max_n, generation=g)) for g in sglang.GENERATIONS},
            "hugging_face": huggingface.prompt_lookup_kwargs(k=first["size"], max_n=max_n)
            if first["size"] else None,
            "lookup": {"min_n": min_n, "max_n": max_n},
            "note": "prompt lookup: draft length = chain length k per batch range; vLLM 0.24 "
                    "and later switch it by batch size (num_speculative_tokens_per_batch_size), "
                    "earlier vLLM and SGLang take one per server (deploy one config per batch "
                    "range); TensorRT-LLM switches it by batch size (draft_len_schedule); "
                    "Hugging Face runs batch size 1 only"}


def trie_schedule(ranges: list[dict[str, Any]], trie: TrieSetting) -> dict[str, Any]:
    """SGLang's NGRAM flags of each batch range's tree (``choices``) of an n-gram trie; the
    other engines have no trie drafter.

    >>> plan = trie_schedule([{"min_batch": 1, "max_batch": 4, "size": 2, "choices": [[0], [1]]},
    ...                       {"min_batch": 5, "max_batch": 8, "size": 0, "choices": []}],
    ...                      TrieSetting(0, 1, 1, 18, "bfs"))
    >>> [r["config"] and r["config"][3] for r in plan["sglang"]["trie-depth"]]
    ['3', None]
    """
    def flags(r: dict[str, Any]) -> list[str] | None:
        if not r["size"]:
            return None
        return trie_flags(TrieSetting.of_tree(
            Tree.from_choices(r["choices"]), max_trie_depth=trie.max_trie_depth,
            match=trie.match))

    return {"sglang": {"trie-depth": [{"min_batch": r["min_batch"], "max_batch": r["max_batch"],
                                       "config": flags(r)} for r in ranges]},
            "trie": {"max_trie_depth": trie.max_trie_depth, "match": trie.match},
            "note": "n-gram trie: of the engines only SGLang's NGRAM drafts trees from a trie "
                    "(vLLM, TensorRT-LLM and Hugging Face have none); SGLang takes one setting "
                    "per server (deploy one per batch range)"}
