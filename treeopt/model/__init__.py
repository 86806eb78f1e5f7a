"""The rank-trace model: trees, rank traces, acceptance, growth, simulation, the settings of
dynamic trees, and the responses that warm suffix decoding's cache.

Layer: numpy, the bottom; may import ``errors``, ``files`` and ``version``.
"""
