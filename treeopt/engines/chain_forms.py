"""MTP and suffix-decoding drafters routed to the engines' forms. The engines run neither as a
static tree: each drafts a chain of K tokens per step (vLLM drafts chains only; TensorRT-LLM's
MTP and suffix automaton draft chains; SGLang's NEXTN with top-k 1 drafts one), so what an
engine needs is K and the drafter's settings, not a tree:

| method   | ``vllm``                 | ``trtllm-yaml``                 | ``sglang``              |
|----------|--------------------------|---------------------------------|-------------------------|
| ``mtp``  | ``method: mtp``: the     | ``MTPDecodingConfig``           | ``NEXTN`` flags, top-k 1|
|          | target's own MTP layers  | (:func:`~treeopt.engines.trtllm.| (:func:`~treeopt.engines|
|          | (no draft model)         | configs.mtp_config`)            | .sglang.flags.nextn_flags`)|
| ``suffix`` | ``method: suffix`` with| ``SADecodingConfig``, the       | none: SGLang has no     |
|          | the recorded settings    | suffix automaton (standalone)   | suffix decoding         |

K is the tree's size where the tree is a chain, else its depth (the engine drafts the chain as
deep as the tree; its other branches are not drafted). The forms are the engine modules'
(:mod:`treeopt.engines.vllm.chains`, :mod:`treeopt.engines.trtllm.configs`,
:mod:`treeopt.engines.sglang.flags`).

>>> print(export_chain("mtp", "sglang", Tree.chain(2), drafter={"num_layers": 1}), end="")
--speculative-algorithm NEXTN --speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from treeopt.engines.sglang import flags as sglang
from treeopt.engines.trtllm import configs as trtllm
from treeopt.engines.vllm import forms as vllm_forms
from treeopt.engines.vllm.chains import drafter_config
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree

CHAIN_METHODS: tuple[str, ...] = ("mtp", "suffix")  # vLLM methods exported as chain configs
CHAIN_FORMATS: tuple[str, ...] = ("vllm", "trtllm-yaml", "sglang")
TITLES = {"vllm": "vLLM", "trtllm-yaml": "TRT-LLM YAML", "sglang": "SGLang"}
EXTENSIONS = {"vllm": "json", "trtllm-yaml": "yaml", "sglang": "txt"}  # file name endings
ENGINE_TEXT = {
    ("mtp", "vllm"): "vLLM --speculative-config, method mtp — read from vllm/config/"
                     "speculative.py at 002e77c1 (SpeculativeConfig.__post_init__)",
    ("mtp", "trtllm-yaml"): "TensorRT-LLM LLM API, MTPDecodingConfig — read from tensorrt_llm/"
                            "llmapi/llm_args.py at 00043967 and _torch/speculative/utils.py",
    ("mtp", "sglang"): "SGLang NEXTN server flags — read from the 0.5.23 wheel's "
                       "srt/arg_groups/speculative_hook.py",
    ("suffix", "vllm"): "vLLM --speculative-config, method suffix (SuffixDecoding) — read from "
                        "vllm/config/speculative.py at 002e77c1 (_validate_suffix_decoding)",
    ("suffix", "trtllm-yaml"): "TensorRT-LLM LLM API, SADecodingConfig (suffix automaton) — "
                               "read from tensorrt_llm/llmapi/llm_args.py at 00043967",
    ("suffix", "sglang"): "SGLang server flags",
}
NOTES = {
    ("mtp", "vllm"): ("vLLM runs the target checkpoint's own MTP layers: give no draft model",),
    ("mtp", "trtllm-yaml"): ("with one MTP layer TensorRT-LLM replays it K times (MTP-EAGLE); "
                             "with more it drafts one token per layer, so K must equal the "
                             "layer count",),
    ("mtp", "sglang"): ("NEXTN's draft model defaults to the target checkpoint's own MTP layer",),
    ("suffix", "vllm"): ("vLLM's suffix decoding needs arctic-inference installed; K "
                         "(num_speculative_tokens) caps each step's speculation",),
    ("suffix", "trtllm-yaml"): ("TensorRT-LLM's suffix automaton matches the request's own "
                                "context (the longest match), not SuffixDecoding's tree of "
                                "earlier requests' outputs: its acceptance is not what was "
                                "priced",),
}


def exports_chains(method: str) -> bool:
    """Whether a drafter of vLLM ``method`` is exported as chain configs (MTP, suffix decoding)
    rather than as a tree.

    >>> exports_chains("mtp"), exports_chains("eagle")
    (True, False)
    """
    return method in CHAIN_METHODS


def chain_k(tree: Tree) -> int:
    """K of the chain an engine drafts for ``tree``: its size if a chain, else its depth.

    >>> chain_k(Tree.chain(3)), chain_k(Tree.from_choices([[0], [1], [0, 0]]))
    (3, 2)
    """
    if tree.size == 0:
        raise TreeoptError("the tree is empty: speculation is off, there is nothing to export")
    return tree.size if tree.is_chain else tree.depth


def export_chain(method: str, fmt: str, tree: Tree, *, drafter: Mapping[str, Any]) -> str:
    """The text ``fmt``'s engine reads to draft ``tree``'s chain with ``method`` and the settings
    ``drafter`` records; refused in one line where the engine has no such drafter or would refuse
    the settings."""
    if method not in CHAIN_METHODS:
        raise TreeoptError(f"method {method!r} is exported as a tree, not as chain configs")
    if fmt not in CHAIN_FORMATS:
        raise TreeoptError(f"an {'MTP' if method == 'mtp' else 'suffix-decoding'} drafter is "
                           f"exported as a chain config: choose the format "
                           f"{', '.join(CHAIN_FORMATS)}, not {fmt}")
    k = chain_k(tree)
    if fmt == "vllm":
        return vllm_forms.config_text(drafter_config(method, k=k, drafter=drafter)) + "\n"
    if method == "mtp":
        layers = drafter.get("num_layers")
        if not isinstance(layers, int):
            raise TreeoptError("the drafter record has no num_layers (the MTP layers, "
                               "num_nextn_predict_layers): calibrate again to record it")
        if fmt == "trtllm-yaml":
            return trtllm.yaml_text({"speculative_config": trtllm.mtp_config(
                k=k, num_nextn_predict_layers=layers)})
        return sglang.nextn_flags(steps=k) + "\n"
    if fmt == "trtllm-yaml":
        return trtllm.yaml_text({"speculative_config": trtllm.sa_config(k=k)})
    raise TreeoptError("SGLang has no suffix decoding (its NGRAM drafter is a trie of recent "
                       "request tails): export vllm or trtllm-yaml")


def chain_notes(method: str, fmt: str, tree: Tree) -> tuple[str, ...]:
    """What a user must know beside the chain config: the engine's own notes, and where the
    tree branches, that only its chain as deep as it is drafted."""
    branches = tree.size > 0 and tree.paths != Tree.chain(tree.size).paths
    cut = (f"the engines draft {'MTP' if method == 'mtp' else 'suffix-decoding'} chains: this "
           f"tree of {tree.size} nodes is drafted as the chain of its depth {tree.depth}; "
           "select's vllm_per_batch prices the best chain per batch size",) if branches else ()
    return NOTES.get((method, fmt), ()) + cut
