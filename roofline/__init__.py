"""Predicted verify-step latency: per-operator FLOPs and bytes of a Llama-family model, bounded by
a hardware row's peak FLOP/s and bandwidth (numpy only; see :mod:`roofline.model` for formulas).
"""

from roofline.config import ModelConfig, load_config, preset, preset_names
from roofline.fit import Fit, fit_efficiency
from roofline.hardware import Hardware, hardware_names, load_hardware
from roofline.model import Efficiency, Precision, operators
from roofline.sweep import Roofline, roofline

__all__ = [
    "Efficiency",
    "Fit",
    "Hardware",
    "ModelConfig",
    "Precision",
    "Roofline",
    "fit_efficiency",
    "hardware_names",
    "load_config",
    "load_hardware",
    "operators",
    "preset",
    "preset_names",
    "roofline",
]
