"""The rank-trace model: trees, rank traces, acceptance, growth, simulation, and the settings of
dynamic trees.

Layer: numpy, the bottom; may import ``errors``, ``files`` and ``version``.
"""
