"""A chain drafter's vLLM config from what a growth or selection records of its drafter: the
method (:attr:`treeopt.registry.kinds.DrafterKind.chain_method`) and its settings, through the
forms of :mod:`treeopt.engines.vllm.forms`; the draft lengths a method takes; and the config
switched by batch size (:func:`treeopt.engines.vllm.per_batch.per_batch_config`).

The record's keys (:attr:`treeopt.model.growth.Growth.drafter`): ``checkpoint`` (an EAGLE or
draft model's directory), ``min_match`` / ``max_match`` (prompt lookup's n-gram lengths; suffix
decoding's tree depth), suffix decoding's ``max_spec_factor``, ``max_spec_offset``,
``min_token_prob`` and ``max_cached_requests``, and ``num_layers`` (an MTP drafter's modules,
the checkpoint's ``num_nextn_predict_layers``). vLLM 0.24.0 – 0.33.0 validate the per-batch
table alone (vllm/config/speculative.py keeps it beside any method; the rows' checks are
vllm/v1/spec_decode/dynamic/utils.py's, :func:`treeopt.engines.vllm.per_batch.check_rows`).

>>> drafter_config("mtp", k=2, drafter={"kind": "mtp", "num_layers": 1})
{'method': 'mtp', 'num_speculative_tokens': 2}
>>> takes_k("mtp", 3, {"num_layers": 2}), takes_k("mtp", 4, {"num_layers": 2})
(False, True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from treeopt.engines.vllm.forms import (
    METHODS,
    SUFFIX_DEFAULTS,
    chain_config,
    mtp_config,
    ngram_config,
    suffix_config,
)
from treeopt.engines.vllm.per_batch import per_batch_config
from treeopt.errors import TreeoptError

MODEL_METHODS: tuple[str, ...] = ("eagle", "eagle3", "draft_model")


def _int(drafter: Mapping[str, Any], key: str, what: str) -> int:
    value = drafter.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TreeoptError(f"the drafter record has no {key} ({what}): calibrate again to record "
                           "it")
    return value


def drafter_config(method: str, *, k: int, drafter: Mapping[str, Any]) -> dict[str, Any]:
    """vLLM's config of ``method`` drafting chains of ``k`` with the settings ``drafter``
    records; refused in one line where vLLM would refuse it or a setting is not recorded.

    >>> drafter_config("ngram", k=3, drafter={"min_match": 1, "max_match": 2})
    {'method': 'ngram', 'num_speculative_tokens': 3, 'prompt_lookup_min': 1, 'prompt_lookup_max': 2}
    >>> drafter_config("eagle", k=3, drafter={"checkpoint": "heads/eagle"})
    {'method': 'eagle', 'model': 'heads/eagle', 'num_speculative_tokens': 3}
    """
    if method == "ngram":
        return ngram_config(k=k, min_n=_int(drafter, "min_match", "the shortest n-gram"),
                                  max_n=_int(drafter, "max_match", "the longest n-gram"))
    if method == "suffix":
        return _suffix(k, drafter)
    if method == "mtp":
        return mtp_config(k=k, num_nextn_predict_layers=_int(
            drafter, "num_layers", "the MTP layers, num_nextn_predict_layers"))
    if method in MODEL_METHODS:
        model = drafter.get("checkpoint")
        return chain_config(method=method, k=k, model=str(model) if model else None)
    raise TreeoptError(f"vLLM method {method!r}: expected one of {', '.join(METHODS)}")


def _suffix(k: int, drafter: Mapping[str, Any]) -> dict[str, Any]:
    """SuffixDecoding's config of the recorded settings (vLLM's defaults where none is)."""
    offset = drafter.get("max_spec_offset") or 0
    if offset:
        raise TreeoptError(f"vLLM's suffix decoding has no max_spec_offset (recorded "
                           f"{offset}): calibrate with offset 0 to run what vLLM runs")
    cached = drafter.get("max_cached_requests", SUFFIX_DEFAULTS["max_cached_requests"])
    if cached is not None and cached < 0:
        raise TreeoptError(f"vLLM caches a bounded number of requests (max_cached_requests ≥ 0), "
                           f"and the drafter recorded {cached} (every request)")
    d = SUFFIX_DEFAULTS
    return suffix_config(
        k=k, max_tree_depth=int(drafter.get("max_match") or d["max_tree_depth"]),
        max_cached_requests=int(cached if cached is not None else d["max_cached_requests"]),
        max_spec_factor=float(drafter.get("max_spec_factor", d["max_spec_factor"])),
        min_token_prob=float(drafter.get("min_token_prob", d["min_token_prob"])))


def takes_k(method: str, k: int, drafter: Mapping[str, Any]) -> bool:
    """Whether vLLM drafts ``k`` tokens with ``method`` as recorded: every k ≥ 0, but for MTP
    above the layer count only its multiples (vLLM reuses the layers in turn)."""
    if method != "mtp" or k <= 0:
        return True
    layers = _int(drafter, "num_layers", "the MTP layers, num_nextn_predict_layers")
    return k <= layers or k % layers == 0


def per_batch_drafter_config(method: str, ranges: Sequence[Sequence[int]], *,
                             drafter: Mapping[str, Any], off_above: bool = True
                             ) -> dict[str, Any]:
    """The config of ``method`` switched by batch size over ``ranges`` (lo, hi, k); with
    ``off_above`` speculation is off above the last range (else its K carries on).

    >>> per_batch_drafter_config("eagle3", [(1, 2, 3), (3, 8, 1)], drafter={})
    {'method': 'eagle3', 'num_speculative_tokens': 3, 'num_speculative_tokens_per_batch_size': [[1, 2, 3], [3, 8, 1], [9, 9, 0]]}
    """
    for lo, hi, k in ranges:
        if not takes_k(method, k, drafter):
            raise TreeoptError(f"batches {lo}-{hi}: vLLM's {method} does not draft {k} tokens "
                               f"with {drafter.get('num_layers')} layers")
    k_max = max((int(r[2]) for r in ranges), default=0)
    if k_max < 1:
        raise TreeoptError("the table drafts nothing at any batch size: run vLLM without "
                           "speculation")
    return per_batch_config(drafter_config(method, k=k_max, drafter=drafter), ranges,
                            off_above=off_above)


def per_batch_entry(method: str, ranges: Sequence[Sequence[int]], *,
                    drafter: Mapping[str, Any], off_above: bool = True) -> dict[str, Any]:
    """A report's entry of :func:`per_batch_drafter_config`: ``speculative_config`` (the JSON
    ``--speculative-config`` reads), or ``refused`` and why in one line.

    >>> per_batch_entry("mtp", [(1, 4, 3)], drafter={"num_layers": 2})
    {'refused': "batches 1-4: vLLM's mtp does not draft 3 tokens with 2 layers"}
    """
    try:
        return {"speculative_config": per_batch_drafter_config(method, ranges, drafter=drafter,
                                                               off_above=off_above)}
    except TreeoptError as exc:
        return {"refused": str(exc)}
