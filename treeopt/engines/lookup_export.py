"""Prompt-lookup (n-gram) settings in the forms engines accept: from a chain length ``k`` and
n-gram lengths ``min_n`` … ``max_n``, each engine's config. Needs no torch.

A prompt-lookup drafter's trees are chains (rank 0 at every depth), so what an engine needs is
not a tree but three numbers: ``k`` (tokens drafted per step, the chain's size) and the n-gram
lengths matched. The forms, read from each engine's own code:

| format        | engine / form                                                             |
|---------------|---------------------------------------------------------------------------|
| ``vllm``      | vLLM ``--speculative-config`` JSON, ``method: ngram``                      |
| ``sglang``    | SGLang server flags, ``--speculative-algorithm NGRAM`` (a chain)           |
| ``trtllm-yaml`` | TensorRT-LLM LLM-API YAML, ``NGramDecodingConfig``                       |
| ``hf``        | Hugging Face ``generate`` keyword arguments (prompt lookup)                |

>>> s = LookupSetting(k=4, min_n=1, max_n=3)
>>> vllm_config(s)
{'method': 'ngram', 'num_speculative_tokens': 4, 'prompt_lookup_min': 1, 'prompt_lookup_max': 3}
>>> hf_kwargs(s)
{'prompt_lookup_num_tokens': 4, 'max_matching_ngram_size': 3}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from treeopt.drafters.kinds import KINDS
from treeopt.engines.formats import vllm_batch_table
from treeopt.errors import FieldError, TreeoptError
from treeopt.model.tree import Tree

SGLANG_GENERATIONS: tuple[str, ...] = ("window", "trie-depth")


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
    ``max_match`` is the longest n-gram (:attr:`~treeopt.drafters.kinds.DrafterKind.max_match`;
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


def sglang_trie_flags(s: TrieSetting) -> list[str]:
    """SGLang's NGRAM server flags of a trie setting (releases with
    ``--speculative-ngram-max-trie-depth``): ``nodes + 1`` verified slots (SGLang counts the
    root).

    >>> " ".join(sglang_trie_flags(TrieSetting(8, 1, 3, 18, "bfs")))
    '--speculative-algorithm NGRAM --speculative-num-draft-tokens 9 --speculative-ngram-min-bfs-breadth 1 --speculative-ngram-max-bfs-breadth 3 --speculative-ngram-max-trie-depth 18 --speculative-ngram-match-type BFS'
    """
    return ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens",
            str(s.nodes + 1), "--speculative-ngram-min-bfs-breadth", str(s.min_bfs),
            "--speculative-ngram-max-bfs-breadth", str(s.max_bfs),
            "--speculative-ngram-max-trie-depth", str(s.max_trie_depth),
            "--speculative-ngram-match-type", s.match.upper()]


TRIE_NOTES: tuple[str, ...] = (
    "SGLang shapes each step's tree itself: every matching suffix (longest first) adds its "
    "children in BFS up to a breadth that falls from max to min bfs breadth with the match "
    "length and the level, until num-draft-tokens is filled; treeopt priced the grown tree, "
    "whose size and widest branching these flags copy, not SGLang's shape",
    "SGLang's trie is shared by all requests and indexes only the last max-trie-depth tokens of "
    "each request per step (not the whole prompt), so it drafts less from the prompt than "
    "treeopt's per-request trie that was priced",
    "these flags are for releases with --speculative-ngram-max-trie-depth; older ones use "
    "--speculative-ngram-branch-length and the match-window flags instead")


# ----- the engines' forms ---------------------------------------------------------------------
def vllm_config(s: LookupSetting) -> dict[str, Any]:
    """vLLM's ``speculative_config`` (the JSON of ``--speculative-config``) for n-gram drafting."""
    return {"method": "ngram", "num_speculative_tokens": s.k, "prompt_lookup_min": s.min_n,
            "prompt_lookup_max": s.max_n}


def sglang_flags(s: LookupSetting, *, generation: str = "window") -> list[str]:
    """SGLang's NGRAM server flags for a chain of ``k``: breadth 1, ``k + 1`` verified slots
    (SGLang counts the root), matches of ``min_n`` … ``max_n`` tokens (``window``: releases with
    the match-window flags) or of up to ``max_n`` (``trie-depth``: releases that replaced them
    with ``--speculative-ngram-max-trie-depth``), and trie paths long enough for ``k`` drafts
    after a ``max_n``-token match.

    >>> " ".join(sglang_flags(LookupSetting(2, 1, 3), generation="trie-depth"))
    '--speculative-algorithm NGRAM --speculative-num-draft-tokens 3 --speculative-ngram-min-bfs-breadth 1 --speculative-ngram-max-bfs-breadth 1 --speculative-ngram-max-trie-depth 5'
    """
    flags = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(s.k + 1),
             "--speculative-ngram-min-bfs-breadth", "1", "--speculative-ngram-max-bfs-breadth",
             "1"]
    if generation == "window":
        return flags + ["--speculative-ngram-min-match-window-size", str(s.min_n),
                        "--speculative-ngram-max-match-window-size", str(s.max_n),
                        "--speculative-ngram-branch-length", str(s.max_n + s.k)]
    if generation == "trie-depth":
        return flags + ["--speculative-ngram-max-trie-depth", str(s.max_n + s.k)]
    raise TreeoptError(f"generation must be one of {', '.join(SGLANG_GENERATIONS)}, got "
                     f"{generation!r}")


def trtllm_config(s: LookupSetting, *, draft_len_schedule: Mapping[int, int] | None = None
                  ) -> dict[str, Any]:
    """TensorRT-LLM's LLM-API options (``--extra_llm_api_options`` YAML) for
    ``NGramDecodingConfig``: each request's own context (``is_public_pool`` false), the oldest
    match (``is_use_oldest``, the earliest occurrence), the overlap scheduler off.
    ``draft_len_schedule`` maps the last batch size of each range to its draft length, as
    :func:`treeopt.pricing.selection.schedule` writes it (the semantics of TensorRT-LLM's
    ``_torch/speculative/utils.py`` ``get_draft_len_for_batch_size``: a key's length holds up to
    that batch size; the older ``Drafter.get_draft_len_for_batch_size`` read keys as the first
    batch size of a range instead)."""
    spec: dict[str, Any] = {"decoding_type": "NGram", "max_draft_len": s.k,
                            "max_matching_ngram_size": s.max_n, "is_keep_all": True,
                            "is_use_oldest": True, "is_public_pool": False}
    if draft_len_schedule:
        spec["draft_len_schedule"] = {int(b): int(n) for b, n in draft_len_schedule.items()}
    return {"speculative_config": spec, "disable_overlap_scheduler": True}


def trtllm_yaml(s: LookupSetting, *, draft_len_schedule: Mapping[int, int] | None = None
                ) -> str:
    """:func:`trtllm_config` as YAML text, keys in the order written there."""
    lines = []
    for key, value in trtllm_config(s, draft_len_schedule=draft_len_schedule).items():
        if isinstance(value, dict):
            lines.append(f"{key}:")
            lines += [f"  {k}: {_yaml_scalar(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {_yaml_scalar(value)}")
    return "\n".join(lines) + "\n"


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)


def hf_kwargs(s: LookupSetting) -> dict[str, Any]:
    """Hugging Face ``generate`` keyword arguments for prompt lookup (its minimum n is 1)."""
    return {"prompt_lookup_num_tokens": s.k, "max_matching_ngram_size": s.max_n}


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


def _sglang_text(s: LookupSetting) -> str:
    return "".join(f"# SGLang, {g} flags\n" + " ".join(sglang_flags(s, generation=g)) + "\n"
                   for g in SGLANG_GENERATIONS)


def _vllm_notes(min_n: int) -> tuple[str, ...]:
    return ("vLLM matches only n-grams of prompt_lookup_min … prompt_lookup_max tokens; left "
            "unset both default to 5, so n-grams shorter than 5 never match",
            "vLLM takes one num_speculative_tokens per server: no per-batch-size n-gram length")


def _sglang_notes(min_n: int) -> tuple[str, ...]:
    return ("SGLang's NGRAM is not the same drafter: it drafts from one global trie of recent "
            "request tails (the last branch-length tokens of every request after each step), "
            "not from this request's prompt; the flags give the same chain length and match "
            "lengths",
            "with breadth 1 each match drafts a chain, but when the longest match's chain is "
            "shorter than k, shorter matches fill the free slots with their own chains, so the "
            "draft may branch at the root",
            "the 'window' line is for releases with --speculative-ngram-*-match-window-size; the "
            "'trie-depth' line for releases that replaced them with "
            "--speculative-ngram-max-trie-depth: those match 1 … max-trie-depth tokens, so min n "
            "and max n cannot be set there (the depth is max n + k, room for k tokens after a "
            "max-n match)")


def _trtllm_notes(min_n: int) -> tuple[str, ...]:
    low = (f"TensorRT-LLM has no minimum n-gram length: it matches down to 1 token, not "
           f"{min_n}",) if min_n > 1 else ()
    return low + ("NGramDecodingConfig runs on the PyTorch backend with the overlap scheduler "
                  "off",)


def _hf_notes(min_n: int) -> tuple[str, ...]:
    low = (f"Hugging Face always matches down to n = 1: min n {min_n} cannot be set, so it "
           "drafts where this setting would not",) if min_n > 1 else ()
    return low + ("Hugging Face prompt lookup runs at batch size 1 only",)


FORMS: tuple[LookupForm, ...] = (
    LookupForm("vllm", "vLLM n-gram proposer (method ngram)",
               "vLLM v1: vllm/config/speculative.py (SpeculativeConfig.__post_init__), "
               "vllm/v1/spec_decode/ngram_proposer.py at 016e8ede",
               lambda s: json.dumps(vllm_config(s)), "json", _vllm_notes),
    LookupForm("sglang", "SGLang NGRAM (trie drafter) server flags",
               "SGLang 0.5.x python/sglang/srt/speculative/ngram_worker.py at 0037c142 and "
               "cpp_ngram/ngram.cpp at 0657507f (window flags); newer main's ngram_worker.py "
               "with max_trie_depth (trie-depth flags)",
               _sglang_text, "txt", _sglang_notes),
    LookupForm("trtllm-yaml", "TensorRT-LLM LLM API, NGramDecodingConfig",
               "TensorRT-LLM PyTorch backend: tensorrt_llm/llmapi/llm_args.py "
               "(NGramDecodingConfig), tensorrt_llm/_torch/speculative/drafter.py "
               "(draft_len_schedule)",
               trtllm_yaml, "yaml", _trtllm_notes),
    LookupForm("hf", "Hugging Face transformers generate (prompt lookup)",
               "transformers 5.23.0 generation/candidate_generator.py "
               "(PromptLookupCandidateGenerator)",
               lambda s: json.dumps(hf_kwargs(s)), "json", _hf_notes),
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
        return "# SGLang, trie-depth flags\n" + " ".join(sglang_trie_flags(setting)) + "\n"
    return form.render(LookupSetting.of_chain(tree, min_n=min_n, max_n=max_n))


def lookup_schedule(ranges: list[dict[str, Any]], draft_len_schedule: Mapping[str, int], *,
                    min_n: int, max_n: int, trie: TrieSetting | None = None) -> dict[str, Any]:
    """The engines' forms of a per-batch-size schedule of chains (``ranges``: one chain size
    per batch range, as :func:`treeopt.pricing.selection.schedule` builds them; size 0: speculation
    off): TensorRT-LLM's ``draft_len_schedule`` inside one ``NGramDecodingConfig``, one vLLM
    config and one set of SGLang flags per range, and Hugging Face's (batch 1 only). With
    ``trie`` (:func:`recorded_trie`) the ranges hold trees of an n-gram trie: SGLang's flags
    only (:func:`trie_schedule`)."""
    if trie is not None:
        return trie_schedule(ranges, trie)
    def per_range(render: Callable[[LookupSetting], Any]) -> list[dict[str, Any]]:
        return [{"min_batch": r["min_batch"], "max_batch": r["max_batch"],
                 "config": render(LookupSetting(r["size"], min_n, max_n)) if r["size"] else None}
                for r in ranges]

    k_max = max(r["size"] for r in ranges)
    trt = ({"draft_len_schedule": dict(draft_len_schedule)}
           | ({"config": trtllm_config(LookupSetting(k_max, min_n, max_n),
                                       draft_len_schedule={int(b): n for b, n in
                                                           draft_len_schedule.items()})}
              if k_max else {}))
    first = ranges[0]
    vllm = ({"speculative_config": {**vllm_config(LookupSetting(k_max, min_n, max_n)),
                                    "num_speculative_tokens_per_batch_size":
                                        vllm_batch_table(ranges)}} if k_max else {})
    return {"tensorrt_llm": trt,
            "vllm": {**vllm,  # 0.24 and later: one config, the draft length per batch range
                     "speculative_config_per_batch_range": per_range(vllm_config)},  # earlier
            "sglang": {g: per_range(lambda s, g=g: sglang_flags(s, generation=g))
                       for g in SGLANG_GENERATIONS},
            "hugging_face": hf_kwargs(LookupSetting(first["size"], min_n, max_n))
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
        return sglang_trie_flags(TrieSetting.of_tree(
            Tree.from_choices(r["choices"]), max_trie_depth=trie.max_trie_depth,
            match=trie.match))

    return {"sglang": {"trie-depth": [{"min_batch": r["min_batch"], "max_batch": r["max_batch"],
                                       "config": flags(r)} for r in ranges]},
            "trie": {"max_trie_depth": trie.max_trie_depth, "match": trie.match},
            "note": "n-gram trie: of the engines only SGLang's NGRAM drafts trees from a trie "
                    "(vLLM, TensorRT-LLM and Hugging Face have none); SGLang takes one setting "
                    "per server (deploy one per batch range)"}
