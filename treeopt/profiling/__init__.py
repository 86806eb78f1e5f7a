"""Measured latency: verify-step sweeps over (batch, context, tree tokens), the draft heads' own
cost, and device micro-benchmarks. Importing the package needs numpy only; the measuring modules
(:mod:`profiling.verify`, :mod:`profiling.drafting`, :mod:`profiling.device`) import torch.
"""

from treeopt.profiling.table import LATENCY_FORMAT, LatencyRecord, LatencyTable

__all__ = ["LATENCY_FORMAT", "LatencyRecord", "LatencyTable"]
