"""Drafters: what proposes a tree's candidate tokens — Medusa and Hydra heads, EAGLE drafters, a
draft model, prompt lookup, an n-gram trie — implementations of the decoder's
:class:`~treeopt.decoding.drafter.Drafter` interface. Their registry of kinds and settings is
its own package, torch-free, below the model (:mod:`treeopt.registry`).

Layer: torch; may import the numpy layer and ``decoding``.
"""
