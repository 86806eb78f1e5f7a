"""TensorRT-LLM: everything it takes, and the versions that take it.

- :mod:`treeopt.engines.trtllm.keys`: what its C++ runtime builds from a choices list (node keys
  replayed);
- :mod:`treeopt.engines.trtllm.trees`: static trees (run script, LLM-API YAML, Triton) and the
  rules they keep;
- :mod:`treeopt.engines.trtllm.schedule`: ``draft_len_schedule``, its one encoder and each
  version's reading;
- :mod:`treeopt.engines.trtllm.configs`: ``NGram``, ``MTP``, the suffix automaton and EAGLE-3's
  dynamic tree.
"""

from treeopt.engines.trtllm.configs import (
    attention_kind,
    eagle3_dynamic_tree_config,
    mtp_config,
    ngram_config,
    sa_config,
    with_suffix_automaton,
    yaml_text,
)
from treeopt.engines.trtllm.schedule import (
    CONTROLLERS,
    DEFAULT_READING,
    READINGS,
    DraftLenSchedule,
    encode,
)
from treeopt.engines.trtllm.trees import ENGINES

__all__ = ["CONTROLLERS", "DEFAULT_READING", "ENGINES", "READINGS", "DraftLenSchedule",
           "attention_kind", "eagle3_dynamic_tree_config", "encode", "mtp_config",
           "ngram_config", "sa_config", "with_suffix_automaton", "yaml_text"]
