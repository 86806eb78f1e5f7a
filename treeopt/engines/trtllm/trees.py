"""The static trees TensorRT-LLM builds: its rules (read off its C++ runtime, its Python
runtime's ``_medusa_setup`` and the PyTorch backend's ``SpecTreeManager``) and the three texts
that carry a tree: the run script's ``--medusa_choices``/``--eagle_choices`` flag, the LLM API's
``speculative_config`` YAML and the Triton backend's brace form.

TensorRT-LLM's C++ runtime (speculativeChoicesUtils.cpp) serves the run script, the Triton
backend and ``MedusaDecodingConfig``: the TensorRT engine backend, whose last release is
1.3.0rc20 (last stable 1.2.1); 1.3.0rc21 removed it. ``EagleDecodingConfig``'s YAML goes to the
PyTorch backend, which builds the tree from the choices list itself (SpecTreeManager, no keys).

>>> run_script_flag(Tree.from_choices([[0], [0, 0]]), draft="medusa")
'--medusa_choices="[[0], [0, 0]]"'
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from treeopt.engines.rules import (
    NONEMPTY,
    Engine,
    Rule,
    contiguous,
    depth_at_most,
    path_name,
    rank_below,
)
from treeopt.engines.trtllm.keys import MAX_ORDERS, cpp_difference, order_count
from treeopt.errors import FieldError, TreeoptError
from treeopt.model.tree import Tree

DRAFTS: tuple[str, ...] = ("medusa", "eagle")
TRTLLM_MAX_RANK = 16  # TensorRT-LLM's C++ runtime refuses a larger rank (computePrefix)
TRTLLM_MAX_LEVELS = 16  # ... and a deeper path: its 64-bit keys hold 16 levels of 4 bits
FLAG = re.compile(r"^--(medusa|eagle)_choices\s*=?\s*")


def _cpp_built(*, eagle1: bool) -> Callable[[Tree], str | None]:
    """The problem of a tree TensorRT-LLM's C++ runtime builds differently
    (:mod:`treeopt.engines.trtllm.keys`).

    Only trees the runtime accepts (ranks ≤ 16, 16 levels) and, for EAGLE-1, whose children are
    ranks 0..k-1 are replayed: the other rules speak for the rest.
    """
    drafter = "EAGLE-1" if eagle1 else "Medusa"

    def problem(tree: Tree) -> str | None:
        if (not tree.size or tree.max_rank > TRTLLM_MAX_RANK or tree.depth > TRTLLM_MAX_LEVELS
                or (eagle1 and not tree.is_contiguous())):
            return None
        if order_count(tree) > MAX_ORDERS:
            return (f"TensorRT-LLM's C++ runtime gives so many nodes a shared key that the "
                    f"orders it may sort them in ({order_count(tree)}) are more than treeopt "
                    f"replays ({MAX_ORDERS}): it may build another tree")
        diff = cpp_difference(tree, eagle1=eagle1)
        if diff is None:
            return None
        action = (f"build {path_name(diff.built)} where the tree has {path_name(diff.missing)}"
                  if diff.built else
                  f"draft the token of {path_name(diff.missing)} under one node and verify it "
                  f"under another")
        if diff.shared:
            cause = (f"gives {path_name(diff.shared[0])} and {path_name(diff.shared[1])} the "
                     f"same key (4 bits per level, shifted in 32 bits) and sorts equal keys in "
                     f"no fixed order, so for {drafter} it may")
        else:
            cause = ("orders each depth by keys (4 bits per level, shifted in 32 bits) that "
                     f"wrap past 8 levels, and {drafter} drafts in that order, so it would")
        return f"TensorRT-LLM's C++ runtime {cause} {action}: another tree"

    return problem


TRTLLM_RANKS = rank_below(TRTLLM_MAX_RANK + 1, "TensorRT-LLM's C++ runtime refuses a rank "
                                                f"above {TRTLLM_MAX_RANK}")
TRTLLM_DEPTH = depth_at_most(TRTLLM_MAX_LEVELS, "TensorRT-LLM's C++ runtime refuses a path "
                                                f"longer than {TRTLLM_MAX_LEVELS} (its 64-bit keys "
                                                f"hold {TRTLLM_MAX_LEVELS} levels of 4 bits)")
TRTLLM_MEDUSA_KEYS = Rule("Medusa tree from the keys", _cpp_built(eagle1=False),
                          "--max-rank 16 --max-depth 9")
TRTLLM_PY_ROOT = contiguous("TensorRT-LLM's Python runtime (_medusa_setup) reads the depth-1 "
                            "ranks as 0..m-1", depth_one_only=True)
EAGLE1_TOPK = contiguous("TensorRT-LLM's EAGLE-1 drafter (C++ runtime) fills the children of a "
                         "node with its top-k tokens in order, so they must be ranks 0..k-1")
EAGLE1_KEYS = Rule("EAGLE-1 tree from the keys", _cpp_built(eagle1=True),
                   "--max-rank 16 --max-depth 8")
EAGLE_TOPK = contiguous("TensorRT-LLM's PyTorch backend (SpecTreeManager) drafts the top-k "
                        "children of every node of its static EAGLE tree in order, so they must "
                        "be ranks 0..k-1")

TRT_BACKEND = "TensorRT-LLM 0.9 – 1.2.1 stable / 1.3.0rc20 (TensorRT backend, removed in 1.3.0rc21)"
TRT_GONE = ("the TensorRT engine backend that reads this flag is gone from TensorRT-LLM "
            "1.3.0rc21 on; use a release up to 1.2.1 (or 1.3.0rc20)")
EAGLE1_ENGINE = ("EAGLE-1 requires the tree's depth to equal the engine's max_draft_len (its EAGLE "
                 "layers), and at most max_non_leaves_per_layer nodes with children at any depth")
TRT_MEDUSA = (NONEMPTY, TRTLLM_RANKS, TRTLLM_DEPTH, TRTLLM_MEDUSA_KEYS)
TRT_EAGLE1 = (NONEMPTY, TRTLLM_RANKS, TRTLLM_DEPTH, EAGLE1_TOPK, EAGLE1_KEYS)
ENGINES: tuple[Engine, ...] = (
    Engine("trtllm", "medusa", "TensorRT-LLM run script --medusa_choices",
           TRT_BACKEND + "; C++ runtime and Python runtime (_medusa_setup)",
           (*TRT_MEDUSA, TRTLLM_PY_ROOT), (TRT_GONE,)),
    Engine("trtllm", "eagle", "TensorRT-LLM run script --eagle_choices (EAGLE-1, C++ runtime)",
           TRT_BACKEND + "; C++ runtime and its EAGLE-1 drafter (eagleDecodingKernels.cu)",
           TRT_EAGLE1, (TRT_GONE, EAGLE1_ENGINE)),
    Engine("trtllm-yaml", "medusa", "TensorRT-LLM LLM API, MedusaDecodingConfig",
           TRT_BACKEND, TRT_MEDUSA,
           ("MedusaDecodingConfig runs on the TensorRT backend only: the last releases that "
            "accept it are 1.2.1 (stable) and 1.3.0rc20",
            "num_medusa_heads overrides the checkpoint's head count: it is --num-heads")),
    Engine("trtllm-yaml", "eagle", "TensorRT-LLM LLM API, EagleDecodingConfig static tree "
                                   "(PyTorch backend)",
           "TensorRT-LLM 1.1 – 1.3 (llmapi/llm_args.py, _torch/speculative/spec_tree_manager.py; "
           "eagle_choices removed in 1.4.0rc1)", (NONEMPTY, EAGLE_TOPK),
           ("eagle_choices is deprecated: TensorRT-LLM announced its removal for release 1.4, "
            "and 1.4.0rc1 no longer has it",
            "speculative_model is the EAGLE checkpoint (releases before December 2025 call it "
            "speculative_model_dir)",
            "this YAML is for the PyTorch backend (the LLM API's default): the TensorRT engine "
            "backend builds eagle_choices by the rules of export --format trtllm --draft eagle")),
    Engine("triton", "medusa", "TensorRT-LLM Triton backend (medusa_choices parameter)",
           TRT_BACKEND, TRT_MEDUSA),
    Engine("triton", "eagle", "TensorRT-LLM Triton backend (eagle_choices parameter, EAGLE-1)",
           TRT_BACKEND + "; triton_backend/inflight_batcher_llm/src/model_instance_state.cc",
           TRT_EAGLE1, (EAGLE1_ENGINE,)),
)


def run_script_flag(tree: Tree, *, draft: str) -> str:
    """The run script's ``--medusa_choices=`` or ``--eagle_choices=`` flag."""
    return f'--{draft}_choices="{json.dumps(tree.as_choices())}"'


def triton_text(tree: Tree) -> str:
    """The Triton backend's brace form: ``{0}, {1}, {0, 0}``."""
    return ", ".join("{" + ", ".join(map(str, p)) + "}" for p in tree.paths)


def static_tree_yaml(tree: Tree, *, draft: str, num_heads: int | None,
                     speculative_model: str | None) -> str:
    """TensorRT-LLM's ``speculative_config`` (the LLM API's ``extra_llm_api_options`` YAML) of
    a static tree: ``MedusaDecodingConfig`` or ``EagleDecodingConfig``'s ``eagle_choices``."""
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
        parents = {p[:-1] for p in tree.paths}
        non_leaves = [sum(1 for p in parents if len(p) == d) for d in range(tree.depth)]
        lines = ["speculative_config:", "  decoding_type: Eagle",
                 f"  speculative_model: {json.dumps(speculative_model)}",
                 f"  max_draft_len: {tree.depth}",
                 f"  max_total_draft_tokens: {tree.size}",
                 f"  max_non_leaves_per_layer: {max(non_leaves)}",
                 f"  eagle_choices: {choices}"]
    return "\n".join(lines) + "\n"


def strip_flag(text: str) -> str:
    """``text`` without a leading ``--medusa_choices=`` / ``--eagle_choices=`` and its quotes."""
    flag = FLAG.match(text)
    return text[flag.end():].strip().strip("'\"") if flag else text


def is_yaml(text: str) -> bool:
    """Whether ``text`` is a ``speculative_config`` YAML."""
    return text.startswith("speculative_config")


def choices_from_yaml(text: str) -> list[Any]:
    """The choices list of a ``speculative_config`` YAML (``yaml.safe_load``)."""
    import yaml

    doc = yaml.safe_load(text)
    cfg = doc.get("speculative_config", doc) if isinstance(doc, dict) else None
    for key in ("medusa_choices", "eagle_choices"):
        if isinstance(cfg, dict) and key in cfg:
            return list(cfg[key])
    raise TreeoptError("YAML has no speculative_config.medusa_choices or eagle_choices")


def choices_from_object(doc: dict[str, Any]) -> list[Any] | None:
    """The choices list of a JSON object naming ``medusa_choices`` or ``eagle_choices``."""
    for key in ("medusa_choices", "eagle_choices"):
        if key in doc:
            return list(doc[key])
    return None
