"""Drafters: what proposes a tree's candidate tokens — Medusa and Hydra heads, EAGLE drafters, a
draft model, prompt lookup, an n-gram trie — implementations of the decoder's
:class:`~treeopt.decoding.drafter.Drafter` interface. Their registry of kinds
(:mod:`treeopt.drafters.kinds`) and the heads' settings (:mod:`treeopt.drafters.config`) are
torch-free and form the layout's ``registry``, below the model.

Layer: torch; may import the numpy layer and ``decoding``.
"""
