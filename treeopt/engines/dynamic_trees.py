"""Dynamic-tree settings (top-k, steps, draft tokens) routed to the engines that take them:
SGLang's EAGLE flags (:mod:`treeopt.engines.sglang.flags`), EAGLE-2's reference keywords
(:mod:`treeopt.engines.papers`) and TensorRT-LLM's EAGLE-3 dynamic tree
(:mod:`treeopt.engines.trtllm.configs`).

>>> export_dynamic(DynamicSettings(4, 3, 16), "eagle2")
'{"top_k": 4, "depth": 2, "total_token": 16}'
"""

from __future__ import annotations

import json

from treeopt.engines import papers
from treeopt.engines.sglang import flags as sglang
from treeopt.engines.trtllm import configs as trtllm
from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings

ENGINES: tuple[str, ...] = ("sglang", "eagle2", "trtllm")


def _check(engine: str) -> None:
    if engine not in ENGINES:
        raise TreeoptError(f"engine {engine!r} is unknown; expected one of {', '.join(ENGINES)}")


def export_dynamic(s: DynamicSettings, engine: str, *, draft_model: str | None = None) -> str:
    """The text a user pastes: SGLang's flags, EAGLE-2's keywords (JSON) or TensorRT-LLM's
    ``--extra_llm_api_options`` YAML (written even where the engine would refuse or change the
    settings: :func:`check_dynamic` says so)."""
    _check(engine)
    model = draft_model or "DRAFT"
    if engine == "sglang":
        return sglang.dynamic_flags(s, draft_model=model)
    if engine == "eagle2":
        return json.dumps(papers.eagle2_kwargs(s))
    return trtllm.eagle3_dynamic_tree_text(s, speculative_model=model)


def attention_notes(engine: str, attention: str | None) -> list[str]:
    """What to know where the target model's attention is not known (None) and ``engine``
    refuses some: TensorRT-LLM's EAGLE-3 dynamic tree is not run for MLA or sliding-window
    models (its speculative-decoding feature page, PR #13081).

    >>> attention_notes("trtllm", None)
    ["the model's attention is not known (give its config.json): TensorRT-LLM runs no EAGLE-3 dynamic tree for a model with MLA or sliding-window attention"]
    >>> attention_notes("trtllm", "full"), attention_notes("sglang", None)
    ([], [])
    """
    _check(engine)
    if engine != "trtllm" or attention is not None:
        return []
    return ["the model's attention is not known (give its config.json): TensorRT-LLM runs no "
            "EAGLE-3 dynamic tree for a model with MLA or sliding-window attention"]


def check_dynamic(s: DynamicSettings, engine: str, *, attention: str | None = None
                  ) -> list[str]:
    """What ``engine`` would refuse or change in ``s`` (empty: it runs them as given);
    ``attention`` is the target model's (:func:`treeopt.engines.trtllm.configs.attention_kind`;
    None: not known).

    >>> check_dynamic(DynamicSettings(1, 3, 3), "sglang")
    ['top-k 1 drafts a chain: SGLang sets --speculative-num-draft-tokens to steps + 1 = 4']
    """
    _check(engine)
    if engine == "sglang":
        return sglang.dynamic_problems(s)
    if engine == "trtllm":
        refused = ([f"TensorRT-LLM runs no EAGLE-3 dynamic tree for a model with {attention} "
                    "attention"] if attention not in (None, "full") else [])
        return [*refused, *trtllm.eagle3_dynamic_tree_problems(s)]
    return []
