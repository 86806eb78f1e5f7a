"""Which CPU a measurement ran on, as far as its speed depends on it: the model name and the
widest matrix instructions for 16-bit floats (``amx_bf16`` > ``avx512_bf16`` > ``avx512f`` >
``avx2``). On the same CPU count and dtype, a bf16 step of 9 tokens costs about one token's on
AMX and 1.2–1.3× it on AVX512-BF16 alone (SmolLM2, docs/hardware.md), so a CPU step
profile priced on a host of another matrix class misprices every tree. Read from
``/proc/cpuinfo`` (Linux); elsewhere the platform's processor name and no class."""

from __future__ import annotations

import functools
import platform
from pathlib import Path
from typing import Any

MATMUL_CLASSES = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")  # widest first
BF16_CLASSES = ("amx_bf16", "avx512_bf16")  # the classes with bf16 matrix instructions


def cpu_identity(cpuinfo: str | None = None) -> dict[str, Any]:
    """``{"name": …, "matmul": …}`` of the CPU ``cpuinfo`` describes (default this host's, read
    from ``/proc/cpuinfo`` once per process); ``matmul`` None where unknown.

    >>> cpu_identity("model name\\t: AMD EPYC\\nflags\\t\\t: fpu avx2 avx512f avx512_bf16\\n")
    {'name': 'AMD EPYC', 'matmul': 'avx512_bf16'}
    >>> cpu_identity("flags : sse2\\n")["matmul"] is None
    True
    """
    if cpuinfo is None:
        return dict(_this_host())
    name, flags = platform.processor() or "unknown", set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            name = value.strip()
        elif key.strip() == "flags":
            flags = set(value.split())
    return {"name": name, "matmul": next((c for c in MATMUL_CLASSES if c in flags), None)}


@functools.cache
def _this_host() -> dict[str, Any]:
    """This host's identity, read once per process (a page rerun or a loop asks again)."""
    path = Path("/proc/cpuinfo")
    return cpu_identity(path.read_text(errors="replace") if path.is_file() else "")


def other_cpu(recorded: Any, here: dict[str, Any] | None = None) -> str | None:
    """Why a measurement taken on the ``recorded`` CPU (a document's ``meta["cpu"]``) may not
    hold on this one, in a clause; None when both have the same matrix class or either is
    unknown.

    >>> other_cpu({"name": "Intel Xeon", "matmul": "amx_bf16"},
    ...           {"name": "AMD EPYC", "matmul": "avx512_bf16"})
    'measured on a CPU with amx_bf16 (Intel Xeon), this one has avx512_bf16 (AMD EPYC)'
    >>> other_cpu(None) is None
    True
    """
    if not isinstance(recorded, dict):
        return None
    here = here or cpu_identity()
    theirs, ours = recorded.get("matmul"), here.get("matmul")
    if theirs is None or ours is None or theirs == ours:
        return None
    return (f"measured on a CPU with {theirs} ({recorded.get('name', 'unknown')}), this one has "
            f"{ours} ({here.get('name', 'unknown')})")


def emulated_bf16(dtype: str, device: str, here: dict[str, Any] | None = None) -> str | None:
    """Why ``dtype`` is slow here, in a clause, where it is bf16 on a CPU (``here``, default this
    one) of a known class without bf16 matrix instructions, which emulates it: a step of several
    tokens then costs several times fp32's (SmolLM2 on an AVX2-only EPYC: 8 tokens 242 ms
    against 117); None otherwise.

    >>> emulated_bf16("bf16", "cpu", {"name": "AMD EPYC", "matmul": "avx2"})[:39]
    'this CPU (AMD EPYC, avx2) has no bf16 m'
    >>> emulated_bf16("bf16", "cpu", {"name": "AMD EPYC", "matmul": "avx512_bf16"}) is None
    True
    >>> emulated_bf16("fp32", "cpu", {"matmul": "avx2"}), emulated_bf16("bf16", "cuda")
    (None, None)
    """
    if dtype != "bf16" or not device.startswith("cpu"):
        return None
    here = here or cpu_identity()
    if here.get("matmul") in (None, *BF16_CLASSES):
        return None
    return (f"this CPU ({here.get('name', 'unknown')}, {here['matmul']}) has no bf16 matrix "
            "instructions: bf16 steps of several tokens are emulated and can cost several "
            "times fp32's")


__all__ = ["BF16_CLASSES", "MATMUL_CLASSES", "cpu_identity", "emulated_bf16", "other_cpu"]
