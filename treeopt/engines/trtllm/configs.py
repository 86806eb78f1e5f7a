"""TensorRT-LLM's LLM-API ``speculative_config`` (PyTorch backend) for chains and dynamic trees:
``NGram``, ``MTP``, the suffix automaton (standalone ``SA``, or enhancing MTP, EAGLE-3 and PARD
drafts) and EAGLE-3's dynamic tree; each refuses, in one line, what TensorRT-LLM refuses.

Read on main: tensorrt_llm/llmapi/llm_args.py at 0004396720054fd8e205cbf616f21f0b57c6b412
(``NGramDecodingConfig``, ``MTPDecodingConfig``, ``SADecodingConfig``, ``SAEnhancerConfig``,
``EagleDecodingConfig.validate_eagle_config``, ``Eagle3DecodingConfig``),
tensorrt_llm/_torch/speculative/utils.py at 011d0933dcb5e592f5fa2626beaf42a96324c578
(``update_spec_config_from_model_config``: vanilla MTP's draft length; ``_is_effective_dynamic_tree``)
and tensorrt_llm/_torch/speculative/eagle3_dynamic_tree.py at
057c8a65145bb53caf3939ba4fbcabbad46ea3dc (the dynamic-tree worker refuses the suffix automaton
and relaxed acceptance). The dynamic tree's refusal of MLA and sliding-window models is
TensorRT-LLM's documentation (its speculative-decoding feature page, PR #13081, merged
2026-04-15).

>>> print(yaml_text({"speculative_config": mtp_config(k=1, num_nextn_predict_layers=1)}), end="")
speculative_config:
  decoding_type: MTP
  max_draft_len: 1
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from treeopt.engines.trtllm.schedule import DraftLenSchedule
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings

ATTENTION_KINDS: tuple[str, ...] = ("full", "mla", "sliding-window")
SA_GENERATIONS: tuple[str, ...] = ("main", "use-sa-spec")
SA_HOSTS: tuple[str, ...] = ("MTP", "Eagle3", "PARD")


def yaml_text(doc: Mapping[str, Any]) -> str:
    """A config of scalars and nested mappings as YAML (two-space indents, keys in order)."""
    def lines(d: Mapping[str, Any], indent: str) -> list[str]:
        out = []
        for key, value in d.items():
            if isinstance(value, Mapping):
                out += [f"{indent}{key}:", *lines(value, indent + "  ")]
            else:
                out.append(f"{indent}{key}: {_scalar(value)}")
        return out

    return "\n".join(lines(doc, "")) + "\n"


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):  # quoted unless a plain word (a decoding type)
        return value if value.replace("_", "").isalnum() else json.dumps(value)
    return str(value)


def _positive(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TreeoptError(f"TensorRT-LLM refuses {name} {value!r}: it must be ≥ 1")
    return value


def ngram_config(*, k: int, max_n: int, schedule: DraftLenSchedule | None = None
                 ) -> dict[str, Any]:
    """``NGramDecodingConfig`` drafting ``k`` tokens after a match of up to ``max_n``: each
    request's own context (``is_public_pool`` false), the oldest match, all matches kept, the
    overlap scheduler off; ``schedule`` (:func:`treeopt.engines.trtllm.schedule.encode`) switches
    the length by batch size and must have ``k`` as its ``max_draft_len``."""
    spec: dict[str, Any] = {"decoding_type": "NGram", "max_draft_len": _positive(k, "max_draft_len"),
                            "max_matching_ngram_size": max_n, "is_keep_all": True,
                            "is_use_oldest": True, "is_public_pool": False}
    if schedule is not None:
        if schedule.max_draft_len != k:
            raise TreeoptError(f"draft_len_schedule's max_draft_len {schedule.max_draft_len} is "
                               f"not the config's max_draft_len {k}")
        spec["draft_len_schedule"] = schedule.as_dict()
    return {"speculative_config": spec, "disable_overlap_scheduler": True}


def ngram_notes(min_n: int) -> tuple[str, ...]:
    """What a user must know beside the n-gram config."""
    low = (f"TensorRT-LLM has no minimum n-gram length: it matches down to 1 token, not "
           f"{min_n}",) if min_n > 1 else ()
    return low + ("NGramDecodingConfig runs on the PyTorch backend with the overlap scheduler "
                  "off",)


def mtp_config(*, k: int, num_nextn_predict_layers: int) -> dict[str, Any]:
    """``MTPDecodingConfig`` drafting ``k`` tokens with a checkpoint of
    ``num_nextn_predict_layers`` MTP layers. One layer runs as MTP-EAGLE (the layer replayed ``k``
    times); more run vanilla MTP, one layer per draft token, whose ``max_draft_len`` must equal
    the layer count (TensorRT-LLM drafts min(k, layers) otherwise).

    >>> mtp_config(k=3, num_nextn_predict_layers=2)
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: TensorRT-LLM's vanilla MTP drafts one token per MTP layer: max_draft_len 3 must equal num_nextn_predict_layers 2
    """
    layers = _positive(num_nextn_predict_layers, "num_nextn_predict_layers")
    if layers > 1 and _positive(k, "max_draft_len") != layers:
        raise TreeoptError(f"TensorRT-LLM's vanilla MTP drafts one token per MTP layer: "
                           f"max_draft_len {k} must equal num_nextn_predict_layers {layers}")
    return {"decoding_type": "MTP", "max_draft_len": _positive(k, "max_draft_len")}


def sa_config(*, k: int, max_matching_ngram_size: int = -1, global_pool: bool = False
              ) -> dict[str, Any]:
    """Standalone suffix-automaton drafting (``SADecodingConfig``): ``k`` tokens after the
    longest match (-1) or a fixed ``max_matching_ngram_size``; with ``global_pool`` every active
    request's automaton is searched (then the size is -1 or 1 … 64).

    >>> sa_config(k=4)
    {'decoding_type': 'SA', 'max_draft_len': 4, 'max_matching_ngram_size': -1}
    """
    n = max_matching_ngram_size
    if n == 0 or n < -1:
        raise TreeoptError(f"TensorRT-LLM refuses max_matching_ngram_size {n}: it must be > 0 "
                           "(a fixed n-gram) or -1 (the longest match)")
    if global_pool and n != -1 and not 1 <= n <= 64:
        raise TreeoptError(f"TensorRT-LLM refuses max_matching_ngram_size {n} with the global "
                           "pool: it must be -1 or in 1 … 64")
    doc = {"decoding_type": "SA", "max_draft_len": _positive(k, "max_draft_len"),
           "max_matching_ngram_size": n}
    return {**doc, "enable_global_pool": True} if global_pool else doc


def with_suffix_automaton(config: Mapping[str, Any], *, threshold: int = 4,
                          global_pool: bool = False, generation: str = "main"
                          ) -> dict[str, Any]:
    """``config`` (an MTP, EAGLE-3 or PARD ``speculative_config``) with the suffix automaton
    enhancing its drafts: where the context's suffix matches an earlier occurrence of at least
    ``threshold`` tokens, the automaton's continuation overrides the model's draft. ``main``
    writes ``sa_config`` (``SAEnhancerConfig``); ``use-sa-spec`` writes the flags of the MTP
    path PR #11434 added (``use_sa_spec``, ``sa_spec_threshold``; MTP only, no global pool).
    A dynamic tree refuses it.

    >>> with_suffix_automaton({"decoding_type": "MTP", "max_draft_len": 1})
    {'decoding_type': 'MTP', 'max_draft_len': 1, 'sa_config': {'threshold': 4, 'enable_global_pool': False}}
    """
    host = config.get("decoding_type")
    if generation not in SA_GENERATIONS:
        raise TreeoptError(f"generation must be one of {', '.join(SA_GENERATIONS)}, got "
                           f"{generation!r}")
    if host not in SA_HOSTS or (generation == "use-sa-spec" and host != "MTP"):
        hosts = "MTP" if generation == "use-sa-spec" else ", ".join(SA_HOSTS)
        raise TreeoptError(f"TensorRT-LLM's suffix automaton enhances {hosts} drafts, not "
                           f"decoding_type {host!r}")
    if config.get("use_dynamic_tree"):
        raise TreeoptError("TensorRT-LLM's dynamic tree refuses the suffix automaton "
                           "(Eagle3OneModelDynamicTreeWorker)")
    _positive(threshold, "the suffix automaton's threshold")
    if generation == "use-sa-spec":
        if global_pool:
            raise TreeoptError("use_sa_spec has no global pool: write generation 'main'")
        return {**config, "use_sa_spec": True, "sa_spec_threshold": threshold}
    return {**config, "sa_config": {"threshold": threshold, "enable_global_pool": global_pool}}


def attention_kind(config: Mapping[str, Any]) -> str:
    """The attention of a model from its transformers ``config.json``: ``mla`` (a
    ``kv_lora_rank``), ``sliding-window`` (a ``sliding_window`` in use, or ``layer_types`` with
    sliding layers) or ``full``.

    >>> attention_kind({"kv_lora_rank": 512}), attention_kind({"sliding_window": 4096})
    ('mla', 'sliding-window')
    >>> attention_kind({"sliding_window": 32768, "use_sliding_window": False})
    'full'
    """
    text = config.get("text_config")
    if isinstance(text, Mapping):
        return attention_kind(text)
    if config.get("kv_lora_rank"):
        return "mla"
    if any("sliding" in str(t) for t in config.get("layer_types") or ()):
        return "sliding-window"
    if config.get("sliding_window") and config.get("use_sliding_window", True):
        return "sliding-window"
    return "full"


def eagle3_dynamic_tree_problems(s: DynamicSettings) -> list[str]:
    """What TensorRT-LLM refuses or changes in dynamic settings ``s`` for EAGLE-3's dynamic tree
    (empty: it runs them as given)."""
    problems = []
    if s.is_chain:
        problems.append("top-k 1 is a chain: TensorRT-LLM runs its linear EAGLE-3 path "
                        "(no dynamic tree)")
    if not s.steps <= s.nodes <= s.topk * s.steps:
        problems.append(f"max_total_draft_tokens {s.nodes} must be in [max_draft_len "
                        f"({s.steps}), dynamic_tree_max_topK × max_draft_len "
                        f"({s.topk * s.steps})]")
    return problems


def eagle3_dynamic_tree_config(s: DynamicSettings, *, speculative_model: str,
                               attention: str = "full") -> dict[str, Any]:
    """``Eagle3DecodingConfig`` with the dynamic tree (EAGLE-2's expansion, PR #13081):
    ``dynamic_tree_max_topK`` = top-k, ``max_draft_len`` = steps (the tree's depth),
    ``max_total_draft_tokens`` = drafted nodes. Its growth per step
    (``Eagle3OneModelDynamicTreeWorker`` in eagle3_dynamic_tree.py at 057c8a65: the root's
    top-K, then per level the K frontier nodes' top-K children by product of probabilities, all
    K·K kept in the history and the best K the next frontier; the best
    ``max_total_draft_tokens`` of the history verified) is SGLang's and treeopt's, so
    :mod:`treeopt.dynamic.simulate` prices it as it prices SGLang's settings
    (tests/test_trtllm_dynamic_tree.py replays both rules). ``attention`` is the target model's
    (:func:`attention_kind`): TensorRT-LLM runs no dynamic tree for MLA or sliding-window models.

    >>> eagle3_dynamic_tree_config(DynamicSettings(4, 3, 10), speculative_model="E")
    {'decoding_type': 'Eagle3', 'speculative_model': 'E', 'max_draft_len': 3, 'use_dynamic_tree': True, 'dynamic_tree_max_topK': 4, 'max_total_draft_tokens': 9}
    >>> eagle3_dynamic_tree_config(DynamicSettings(4, 3, 10), speculative_model="E", attention="mla")
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: TensorRT-LLM runs no EAGLE-3 dynamic tree for a model with MLA attention (nor sliding-window attention): use a static or linear draft
    """
    if attention not in ATTENTION_KINDS:
        raise TreeoptError(f"attention must be one of {', '.join(ATTENTION_KINDS)}, got "
                           f"{attention!r}")
    if attention != "full":
        other = "sliding-window" if attention == "mla" else "MLA"
        name = "MLA" if attention == "mla" else "sliding-window"
        raise TreeoptError(f"TensorRT-LLM runs no EAGLE-3 dynamic tree for a model with {name} "
                           f"attention (nor {other} attention): use a static or linear draft")
    problems = eagle3_dynamic_tree_problems(s)
    if problems:
        raise TreeoptError(f"TensorRT-LLM's EAGLE-3 dynamic tree: {problems[0]}")
    return {"decoding_type": "Eagle3", "speculative_model": speculative_model,
            "max_draft_len": s.steps, "use_dynamic_tree": True,
            "dynamic_tree_max_topK": s.topk, "max_total_draft_tokens": s.nodes}


def eagle3_dynamic_tree_text(s: DynamicSettings, *, speculative_model: str = "DRAFT") -> str:
    """The ``--extra_llm_api_options`` YAML of the dynamic tree's settings, written even where
    TensorRT-LLM would refuse or change them (:func:`eagle3_dynamic_tree_problems` says so)."""
    doc = {"decoding_type": "Eagle3", "speculative_model": speculative_model,
           "max_draft_len": s.steps, "use_dynamic_tree": True,
           "dynamic_tree_max_topK": s.topk, "max_total_draft_tokens": s.nodes}
    return yaml_text({"speculative_config": doc})
