"""Adaptive speculation as engines run it: their step controllers as policy objects, replayed
exactly over rank traces, tuned offline and exported in the engines' own formats (numpy only).

- :mod:`treeopt.adaptive.policies`: SGLang's adaptive controller, vLLM's per-batch-size table,
  TensorRT-LLM's ``draft_len_schedule``, fixed steps;
- :mod:`treeopt.adaptive.sglang`: SGLang's config file, its loader's rules, slot routing;
- :mod:`treeopt.adaptive.versions`: which engine versions decide so;
- :mod:`treeopt.adaptive.replay`: a policy over a chain-acceptance table, batch by batch;
- :mod:`treeopt.adaptive.tune`: configs searched for the best predicted throughput.

Layer: numpy; may import ``errors``, ``files``, ``model``, ``documents``, ``registry``,
``pricing`` and ``dynamic``.
"""

from treeopt.adaptive.policies import (
    FixedSteps,
    Policy,
    RoundState,
    SGLangPolicy,
    TRTLLMSchedule,
    VLLMSchedule,
)
from treeopt.adaptive.sglang import SGLangConfig, SGLangSlot
from treeopt.adaptive.versions import CONTROLLERS

__all__ = ["CONTROLLERS", "FixedSteps", "Policy", "RoundState", "SGLangConfig", "SGLangPolicy",
           "SGLangSlot", "TRTLLMSchedule", "VLLMSchedule"]
