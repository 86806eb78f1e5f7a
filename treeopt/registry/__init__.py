"""The registry: what the rest of treeopt needs to know about each kind of drafter, without numpy
or torch — the kinds (:mod:`treeopt.registry.kinds`: names, cost formulas, engine methods,
what a demo build makes of each) and a drafter's settings (:mod:`treeopt.registry.drafter_configs`:
the shape of a set of heads and how to train them). The CLI, the roofline, the pricing and the
engines read a kind here; only :mod:`treeopt.drafters` implements one.

Layer: numpy (free of numpy and torch itself); may import ``errors``.
"""
