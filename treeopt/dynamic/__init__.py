"""Dynamic trees: the tree is chosen at run time, every step, from the drafter's own scores.

Engines today draft this way (EAGLE-2; SGLang's ``--speculative-eagle-topk``,
``--speculative-num-steps``, ``--speculative-num-draft-tokens``; TensorRT-LLM's dynamic tree).
One step, for settings (topk k, steps S, draft tokens N):

1. level 1: the root's top-k children, each scored by its draft log-probability;
2. levels 2 … S: the k best nodes of the previous level (by cumulative score: the sum of the
   log-probabilities along the path) are fed to the drafter, each gets its top-k children;
   every child joins the candidate pool (k + (S−1)·k² nodes);
3. the N−1 best candidates by cumulative score (ties: the shallower, then the earlier) are
   verified as a tree, the root in front (N tokens).

A child's score never exceeds its parent's, so the chosen nodes always include their ancestors.

This package simulates and recommends.

- :mod:`treeopt.model.dynamic_settings`: the three settings and the named policies (with the
  model, as step profiles and the decoder read them);
- :mod:`treeopt.dynamic.simulate`: accepted lengths of every setting from a dynamic trace;
- :mod:`treeopt.dynamic.recommend` and :mod:`treeopt.dynamic.report`: the fastest settings per
  batch size, priced by the step-cost model;
- :mod:`treeopt.engines.dynamic_trees`: the settings as each engine takes them (the engine
  modules' rules).

Live dynamic drafting runs in :mod:`treeopt.decoding`: one step's expansion and selection
(:mod:`treeopt.decoding.dynamic_drafting`), acceptance over trees that differ from row to row
(:func:`treeopt.decoding.accept.accept_rows`) and the dynamic trace of calibration text
(:mod:`treeopt.decoding.dynamic_rank_pass`).

Layer: numpy; may import ``errors``, ``files``, ``model``, ``documents``, ``registry``,
``engines`` and ``pricing``.
"""
