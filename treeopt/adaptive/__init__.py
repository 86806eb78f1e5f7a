"""Adaptive speculation as engines run it: their step controllers as policy objects, replayed
exactly over rank traces, tuned offline and exported in the engines' own formats (numpy only).

- :mod:`treeopt.adaptive.policies`: SGLang's adaptive controller, vLLM's per-batch-size table,
  TensorRT-LLM's ``draft_len_schedule``, fixed steps;
- :mod:`treeopt.adaptive.replay`: a policy over a chain-acceptance table, batch by batch;
- :mod:`treeopt.adaptive.tune`: configs searched for the best predicted throughput.

The engines' own rules (SGLang's config file and slot walk, vLLM's table, TensorRT-LLM's
schedule readings, which versions decide so) are :mod:`treeopt.engines`'.

Layer: numpy; may import ``errors``, ``files``, ``model``, ``documents``, ``registry``,
``engines``, ``pricing`` and ``dynamic``.
"""

from treeopt.adaptive.policies import (
    FixedSteps,
    Policy,
    RoundState,
    SGLangPolicy,
    TRTLLMSchedule,
    VLLMSchedule,
)
from treeopt.engines.registry import CONTROLLERS
from treeopt.engines.sglang.adaptive import SGLangConfig, SGLangSlot

__all__ = ["CONTROLLERS", "FixedSteps", "Policy", "RoundState", "SGLangConfig", "SGLangPolicy",
           "SGLangSlot", "TRTLLMSchedule", "VLLMSchedule"]
