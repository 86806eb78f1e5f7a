"""vLLM: everything its ``--speculative-config`` takes, and the versions that take it.

- :mod:`treeopt.engines.vllm.forms`: a fixed tree (0.10.1 – 0.20.2), model drafters' chains,
  ``ngram``, ``suffix`` and ``mtp`` configs, each refused as vLLM refuses it;
- :mod:`treeopt.engines.vllm.per_batch`: ``num_speculative_tokens_per_batch_size`` (0.24.0 and
  later): the one writer of the table, how vLLM reads it, and the table vLLM's own profiler
  rule picks from measured acceptance and latency;
- :mod:`treeopt.engines.vllm.chains`: a chain drafter's config from what its growth records,
  the draft lengths each method takes, and that config switched by batch size.
"""

from treeopt.engines.vllm.chains import (
    drafter_config,
    per_batch_drafter_config,
    per_batch_entry,
    takes_k,
)
from treeopt.engines.vllm.forms import (
    ENGINES,
    chain_config,
    mtp_config,
    ngram_config,
    suffix_config,
    tree_config,
)
from treeopt.engines.vllm.per_batch import (
    CONTROLLER,
    BatchTable,
    per_batch_config,
    profiler_choice,
    profiler_table,
    table_rows,
)

__all__ = ["CONTROLLER", "ENGINES", "BatchTable", "chain_config", "drafter_config", "mtp_config",
           "ngram_config", "per_batch_config", "per_batch_drafter_config", "per_batch_entry",
           "profiler_choice", "profiler_table", "suffix_config", "table_rows", "takes_k", "tree_config"]
