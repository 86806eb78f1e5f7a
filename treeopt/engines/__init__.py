"""The engines, one module per engine: everything each accepts (static trees and their rules,
chains, per-batch schedules, n-gram, suffix and MTP configs, adaptive controller files,
dynamic-tree settings) and which versions do what, with the source file and commit cited.

- :mod:`treeopt.engines.vllm`, :mod:`treeopt.engines.sglang`, :mod:`treeopt.engines.trtllm`:
  the serving engines;
- :mod:`treeopt.engines.papers`: the papers' reference code (Medusa, Hydra, Sequoia's
  growmap, EAGLE-2); :mod:`treeopt.engines.huggingface`: ``generate``'s prompt lookup;
- :mod:`treeopt.engines.rules`: the registry's types and the tree rules engines share;
  :mod:`treeopt.engines.registry`: every engine's entries; :mod:`treeopt.engines.forms`: a
  tree's export and import routed to the engine modules; :mod:`treeopt.engines.lookup`:
  prompt-lookup settings routed so; :mod:`treeopt.engines.dynamic_trees`: dynamic settings
  routed so.

No module outside this package knows an engine's rules (``tests/test_engine_knowledge.py``).
The engine modules take plain data (numbers, mappings, trees, dynamic settings) and import no
pricing, dynamic or adaptive module: those call them.

Layer: numpy; may import ``errors``, ``files``, ``model``, ``documents`` and ``registry``.
"""
