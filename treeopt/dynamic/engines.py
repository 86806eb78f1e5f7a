"""Dynamic settings as each engine takes them, and what an engine refuses or changes.

- ``sglang``: the server's flags (``python -m sglang.launch_server``): ``--speculative-num-steps``
  (the tree's depth), ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens`` (verified
  tokens, the root included). With top-k 1 SGLang drafts a chain and sets the draft tokens to
  steps + 1 whatever is given; a tree (top-k > 1) is refused with ``--page-size`` > 1 except
  on the flashinfer attention backend, and on the trtllm_mha backend (``server_args.py``).
- ``eagle2``: EAGLE-2's reference code (``EaModel.from_pretrained`` keywords): ``top_k``,
  ``depth`` (expansions after the first level: steps − 1) and ``total_token`` (the verified
  tokens, the root included: its drafter sets ``total_tokens = total_token − 1`` nodes and
  keeps that many of the pool by cumulative log-probability). Read from the reference code's
  drafting loop (``Model.topK_genrate`` in ``eagle/model/cnets.py``), not checked against a run
  of it.
- ``trtllm``: TensorRT-LLM's PyTorch backend, ``speculative_config`` of the LLM API
  (``EagleDecodingConfig``): ``use_dynamic_tree: true``, ``dynamic_tree_max_topK`` (top-k),
  ``max_draft_len`` (the depth) and ``max_total_draft_tokens`` (drafted nodes), as its own
  dynamic-tree tests set them (``max_draft_len=4``, ``dynamic_tree_max_topK=10``,
  ``max_total_draft_tokens=63``).
"""

from __future__ import annotations

import json

from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings

ENGINES: tuple[str, ...] = ("sglang", "eagle2", "trtllm")


def export_dynamic(s: DynamicSettings, engine: str, *, draft_model: str | None = None) -> str:
    """The text a user pastes: SGLang's flags, EAGLE-2's keywords (JSON) or TensorRT-LLM's
    ``--extra_llm_api_options`` YAML.

    >>> print(export_dynamic(DynamicSettings(4, 3, 16), "sglang"))
    --speculative-algorithm EAGLE --speculative-draft-model-path DRAFT --speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 16
    >>> export_dynamic(DynamicSettings(4, 3, 16), "eagle2")
    '{"top_k": 4, "depth": 2, "total_token": 16}'
    """
    model = draft_model or "DRAFT"
    if engine == "sglang":
        return (f"--speculative-algorithm EAGLE --speculative-draft-model-path {model} "
                f"--speculative-num-steps {s.steps} --speculative-eagle-topk {s.topk} "
                f"--speculative-num-draft-tokens {s.draft_tokens}")
    if engine == "eagle2":
        return json.dumps({"top_k": s.topk, "depth": s.steps - 1,
                           "total_token": s.draft_tokens})
    if engine == "trtllm":
        return ("speculative_config:\n  decoding_type: Eagle\n"
                f"  speculative_model_dir: {json.dumps(model)}\n"
                f"  max_draft_len: {s.steps}\n  use_dynamic_tree: true\n"
                f"  dynamic_tree_max_topK: {s.topk}\n"
                f"  max_total_draft_tokens: {s.nodes}\n")
    raise TreeoptError(f"engine {engine!r} is unknown; expected one of {', '.join(ENGINES)}")


def check_dynamic(s: DynamicSettings, engine: str) -> list[str]:
    """What ``engine`` would refuse or change in ``s`` (empty: it runs them as given).

    >>> check_dynamic(DynamicSettings(1, 3, 3), "sglang")
    ['top-k 1 drafts a chain: SGLang sets --speculative-num-draft-tokens to steps + 1 = 4']
    """
    problems = []
    if engine not in ENGINES:
        raise TreeoptError(f"engine {engine!r} is unknown; expected one of {', '.join(ENGINES)}")
    if engine == "sglang" and s.is_chain and s.draft_tokens != s.steps + 1:
        problems.append(f"top-k 1 drafts a chain: SGLang sets --speculative-num-draft-tokens "
                        f"to steps + 1 = {s.steps + 1}")
    if engine == "sglang" and not s.is_chain:
        problems.append("top-k > 1 drafts a tree: SGLang refuses it with --page-size > 1 unless "
                        "--attention-backend flashinfer, and on the trtllm_mha backend")
    if engine == "trtllm" and s.is_chain:
        problems.append("top-k 1 is a chain: use TensorRT-LLM's linear EAGLE (no dynamic tree)")
    return problems
