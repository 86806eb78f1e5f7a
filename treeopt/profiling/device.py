"""Device micro-benchmarks: achieved matmul FLOP/s per dtype and memory bandwidth.

Matmul: ``n × n`` by ``n × n`` (2·n³ FLOPs). Bandwidth: copying a large buffer into another
(each byte read once and written once: 2 × size). Both are medians over repeats after warm-up,
timed with CUDA events or ``perf_counter`` (see :mod:`profiling.timing`). The result is a hardware
row — "this machine, measured" — that ``treeopt roofline --hardware FILE`` reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import torch

from treeopt.decoding.models import torch_dtype
from treeopt.documents.dtypes import dtype_name
from treeopt.errors import TreeoptError
from treeopt.profiling.timing import Call, interleaved, summarize
from treeopt.profiling.verify_latency import check_device, device_label
from treeopt.roofline.hardware import HARDWARE_FORMAT


def _defaults(device: str) -> tuple[int, int]:
    """(matmul n, copy MiB): large enough to saturate the device, small enough to be quick."""
    return (8192, 1024) if device.startswith("cuda") else (1024, 64)


def measure_device(*, device: str = "cpu", dtypes: Sequence[str] = ("bf16", "fp32"),
                   matmul_size: int | None = None, copy_mib: int | None = None,
                   repeats: int = 10, warmup: int = 3) -> dict[str, Any]:
    """Measure the device; return a ``treeopt.hardware/1`` document with the raw measurements."""
    for dt in dtypes:
        check_device(device, dt)
    dtypes = [dtype_name(dt) for dt in dtypes]  # the names its rows record
    n, mib = _defaults(device)
    n, mib = matmul_size or n, copy_mib or mib
    if n < 1 or mib < 1 or repeats < 1:
        raise TreeoptError(f"matmul size, copy MiB and repeats must be ≥ 1, got {n}, {mib}, {repeats}")
    calls: dict[str, Call] = {}
    for dt in dtypes:
        a = torch.randn(n, n, device=device, dtype=torch_dtype(dt))
        b = torch.randn(n, n, device=device, dtype=torch_dtype(dt))
        calls[f"matmul_{dt}"] = Call(run=lambda a=a, b=b: a @ b)
    src = torch.empty(mib * 2**20, dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    calls["copy"] = Call(run=lambda: dst.copy_(src))
    with torch.inference_mode():
        times = interleaved(calls, repeats=repeats, warmup=warmup, device=device)
    rows = [_measurement(name, ms, n, mib) for name, ms in times.items()]
    achieved = {r["name"]: r["achieved"] for r in rows}
    half = next((achieved[f"matmul_{d}"] for d in ("bf16", "fp16") if f"matmul_{d}" in achieved), None)
    label = device_label(device)
    return {
        "format": HARDWARE_FORMAT, "name": f"this machine ({label}, measured)",
        "tflops_bf16": half if half is not None else achieved.get("matmul_fp32"),
        "tflops_fp32": achieved.get("matmul_fp32", half),
        "bandwidth_gbs": achieved["copy"],
        "memory_gb": (torch.cuda.get_device_properties(torch.device(device)).total_memory / 1e9
                      if device.startswith("cuda") else None),
        "source": (f"measured by 'treeopt profile device' on {label}, "
                   f"{datetime.now(timezone.utc).date().isoformat()}: matmul n={n}, copy {mib} MiB, "
                   f"median of {repeats} after {warmup} warm-up"),
        "measurements": rows,
    }


def _measurement(name: str, ms: list[float] | str, n: int, mib: int) -> dict[str, Any]:
    if isinstance(ms, str):
        raise TreeoptError(f"device benchmark {name}: {ms}; pass a smaller size")
    median, p10, p90 = summarize(ms)
    if name == "copy":
        work, unit, scale = 2 * mib * 2**20, "GB/s", 1e9
    else:
        work, unit, scale = 2 * n**3, "TFLOP/s", 1e12
    return {"name": name, "ms_median": median, "ms_p10": p10, "ms_p90": p90, "repeats": len(ms),
            "achieved": float(f"{work / (median * 1e-3) / scale:.4g}"), "unit": unit,
            "spread": round((p90 - p10) / median, 6)}
