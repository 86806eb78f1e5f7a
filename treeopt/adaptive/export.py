"""A tuned setup in each engine's own file, with the launch flags that read it.

- ``sglang``: the ``--speculative-adaptive-config`` JSON (:meth:`SGLangConfig.to_json`), run
  with ``--speculative-adaptive`` (:func:`treeopt.adaptive.sglang.launch_flags`);
- ``vllm``: the ``--speculative-config`` JSON with ``num_speculative_tokens_per_batch_size``;
- ``trtllm``: the ``extra_llm_api_options`` YAML with ``speculative_config.draft_len_schedule``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from treeopt.adaptive.policies import TRTLLMSchedule, VLLMSchedule
from treeopt.adaptive.sglang import SGLangConfig, launch_flags
from treeopt.errors import TreeoptError
from treeopt.files import dumps

ENGINES: tuple[str, ...] = ("sglang", "vllm", "trtllm")


@dataclass(frozen=True)
class EngineFile:
    """The text of the engine's file and the flags that launch the engine with it."""

    engine: str
    text: str
    flags: str


def sglang_file(config: SGLangConfig, path: str, *, draft_model: str = "DRAFT") -> EngineFile:
    """SGLang's adaptive config at ``path``, and its server flags."""
    return EngineFile("sglang", dumps(config.to_json()) + "\n",
                      launch_flags(config, path, draft_model=draft_model))


def vllm_file(schedule: VLLMSchedule, path: str, *, method: str = "eagle",
              draft_model: str = "DRAFT") -> EngineFile:
    """vLLM's speculative config (0.24.0+) at ``path``, and the ``vllm serve`` flag that reads
    it.

    >>> f = vllm_file(VLLMSchedule(((1, 3, 4), (4, 4, 2)), num_speculative_tokens=4), "s.json")
    >>> json.loads(f.text)["num_speculative_tokens_per_batch_size"], f.flags
    ([[1, 3, 4], [4, 4, 2]], '--speculative-config "$(cat s.json)"')
    """
    doc = {"method": method, "model": draft_model,
           "num_speculative_tokens": schedule.num_speculative_tokens,
           "num_speculative_tokens_per_batch_size": [list(r) for r in schedule.ranges]}
    return EngineFile("vllm", json.dumps(doc) + "\n", f'--speculative-config "$(cat {path})"')


def trtllm_file(schedule: TRTLLMSchedule, path: str, *, draft_model: str = "DRAFT",
                decoding_type: str = "Eagle3") -> EngineFile:
    """TensorRT-LLM's LLM-API options (PyTorch backend) at ``path``, and the flag that reads
    them.

    >>> print(trtllm_file(TRTLLMSchedule(((1, 3), (8, 1)), max_draft_len=3), "o.yaml").text)
    speculative_config:
      decoding_type: Eagle3
      speculative_model_dir: "DRAFT"
      max_draft_len: 3
      draft_len_schedule:
        1: 3
        8: 1
    <BLANKLINE>
    """
    rows = "".join(f"    {k}: {v}\n" for k, v in schedule.schedule)
    text = (f"speculative_config:\n  decoding_type: {decoding_type}\n"
            f"  speculative_model_dir: {json.dumps(draft_model)}\n"
            f"  max_draft_len: {schedule.max_draft_len}\n  draft_len_schedule:\n{rows}")
    return EngineFile("trtllm", text, f"--extra_llm_api_options {path}")


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise TreeoptError(f"engine {engine!r}: expected one of {', '.join(ENGINES)}")
    return engine
