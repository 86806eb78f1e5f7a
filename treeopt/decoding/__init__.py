"""Decoding with a base model (torch): the tree-verification forward and its cache, acceptance
rules, the live loop, the tree-vs-autoregressive comparison, and calibration's rank traces.

Modules, from the bottom up: :mod:`~treeopt.decoding.models` (what treeopt reads of a Hugging
Face causal LM), :mod:`~treeopt.decoding.cache`, :mod:`~treeopt.decoding.plan` (a tree's index
tensors), :mod:`~treeopt.decoding.tree_forward`, :mod:`~treeopt.decoding.probe` (the support
probe and a model's verifier), :mod:`~treeopt.decoding.loading` (a model ready to decode),
:mod:`~treeopt.decoding.accept`, the live loop's parts (:mod:`~treeopt.decoding.tree_sources`,
:mod:`~treeopt.decoding.drafting`, :mod:`~treeopt.decoding.prefill`,
:mod:`~treeopt.decoding.prefixes`, :mod:`~treeopt.decoding.batch_rows`,
:mod:`~treeopt.decoding.clocks`, :mod:`~treeopt.decoding.batch_run`,
:mod:`~treeopt.decoding.batching`), :mod:`~treeopt.decoding.loop`,
:mod:`~treeopt.decoding.compare`, :mod:`~treeopt.decoding.verify`, :mod:`~treeopt.decoding.rank_pass`,
:mod:`~treeopt.decoding.calibrate`. Importing this package imports nothing else.

Layer: torch; may import the numpy layer.
"""
