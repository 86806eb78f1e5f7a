"""SGLang: everything its server flags take, and the versions that take them.

- :mod:`treeopt.engines.sglang.flags`: NGRAM (prompt-lookup chains, trie trees), EAGLE and NEXTN
  (MTP) dynamic-tree settings, and what SGLang refuses or changes in them;
- :mod:`treeopt.engines.sglang.adaptive`: the ``--speculative-adaptive-config`` file, its
  loader's rules, the built-in defaults per release, slot routing and a slot's decision rule.
"""

from treeopt.engines.sglang.adaptive import (
    CONTROLLER,
    SGLangConfig,
    SGLangSlot,
    SlotState,
    launch_flags,
    loader_problems,
)
from treeopt.engines.sglang.flags import (
    TRIE_NOTES,
    dynamic_flags,
    dynamic_problems,
    nextn_flags,
    ngram_flags,
    trie_flags,
)

__all__ = ["CONTROLLER", "TRIE_NOTES", "SGLangConfig", "SGLangSlot", "SlotState",
           "dynamic_flags", "dynamic_problems", "launch_flags", "loader_problems",
           "nextn_flags", "ngram_flags", "trie_flags"]
