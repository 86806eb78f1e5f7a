"""Predicted verify-step latency: per-operator FLOPs and bytes of a decoder of any family
:mod:`roofline.families` reads (dense, sliding-window, MLA, MoE), bounded by a hardware row's peak
FLOP/s and bandwidth (numpy only; formulas in :mod:`roofline.model`, :mod:`roofline.mla` and
:mod:`roofline.moe`).

Layer: numpy; may import ``errors``, ``files`` and ``registry``.
"""

from treeopt.roofline.config import ModelConfig, load_config, preset, preset_names
from treeopt.roofline.fit import Fit, fit_efficiency
from treeopt.roofline.hardware import Hardware, hardware_names, load_hardware
from treeopt.roofline.mla import MLA
from treeopt.roofline.model import Efficiency, Precision, operators
from treeopt.roofline.moe import MoE, expected_experts
from treeopt.roofline.params import ParameterCount, kv_bytes_per_token, parameter_count
from treeopt.roofline.step_times import Roofline, roofline

__all__ = [
    "Efficiency",
    "Fit",
    "Hardware",
    "MLA",
    "ModelConfig",
    "MoE",
    "ParameterCount",
    "Precision",
    "Roofline",
    "expected_experts",
    "fit_efficiency",
    "hardware_names",
    "kv_bytes_per_token",
    "load_config",
    "load_hardware",
    "operators",
    "parameter_count",
    "preset",
    "preset_names",
    "roofline",
]
