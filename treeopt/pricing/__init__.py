"""Pricing grown trees: step costs, the latency sources they join, selection per batch size and
context (a selection file records each range's engine forms), and a TREE argument from any file.

Layer: numpy; may import ``errors``, ``files``, ``model``, ``documents``, ``registry``,
``roofline`` and ``engines``.
"""
