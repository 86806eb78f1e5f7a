"""Drafters (torch): what proposes a tree's candidate tokens — Medusa and Hydra heads, EAGLE
drafters, a draft model, prompt lookup, an n-gram trie; imports the numpy layer and
:mod:`treeopt.decoding`, whose :class:`~treeopt.decoding.drafter.Drafter` interface they
implement. Two modules are torch-free and sit in the numpy layer: the registry of kinds
(:mod:`treeopt.drafters.kinds`) and the heads' settings (:mod:`treeopt.drafters.config`)."""
