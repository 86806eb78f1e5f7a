"""Measured latency: verify-step sweeps over (batch, context, tree tokens), the live step phase by
phase, and device micro-benchmarks. Importing the package needs numpy only; the measuring modules
(:mod:`treeopt.profiling.verify_latency`, :mod:`treeopt.profiling.step`, :mod:`treeopt.profiling.device`)
import torch.

Layer: torch; may import the numpy layer, ``decoding`` and ``drafters``.
"""

from treeopt.profiling.table import LATENCY_FORMAT, LatencyRecord, LatencyTable

__all__ = ["LATENCY_FORMAT", "LatencyRecord", "LatencyTable"]
