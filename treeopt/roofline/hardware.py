"""Hardware specs: peak matmul FLOP/s and memory bandwidth, each row with its source.

Three kinds of rows, one type:
- the built-in table ``treeopt/roofline/gpus.csv`` (vendor datasheets, dense — not sparse — peaks);
- "this machine, measured": the JSON that ``treeopt profile device`` writes;
- any user-supplied JSON of the same format (``"format": "treeopt.hardware/1"``).

``tflops_bf16`` is the dense BF16/FP16 tensor-core peak used for matmuls in 16-bit dtypes;
``tflops_fp32`` is the FP32 non-tensor (vector) peak, used for FP32 matmuls and for every
element-wise operation (norms, RoPE, softmax, SiLU), which do not run on tensor cores.
"""

from __future__ import annotations

import csv
import functools
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from treeopt.errors import FieldError, TreeoptError
from treeopt.files import check_format, read_json, write_json

HARDWARE_FORMAT = "treeopt.hardware/1"
HARDWARE_CSV = Path(__file__).resolve().parent / "gpus.csv"
COMPUTE_DTYPES = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Hardware:
    """One accelerator's peaks.

    >>> hw = Hardware("toy", tflops_bf16=100.0, tflops_fp32=10.0, bandwidth_gbs=1000.0)
    >>> hw.matmul_flops("bf16"), hw.vector_flops, hw.bandwidth
    (100000000000000.0, 10000000000000.0, 1000000000000.0)
    >>> hw.ridge("bf16")  # FLOPs per byte where compute and memory time are equal
    100.0
    """

    name: str
    tflops_bf16: float
    tflops_fp32: float
    bandwidth_gbs: float
    memory_gb: float | None = None
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("tflops_bf16", "tflops_fp32", "bandwidth_gbs", "memory_gb"):
            value = getattr(self, field)
            if value is None and field == "memory_gb":
                continue
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not 0 < value < math.inf):
                raise TreeoptError(f"hardware {self.name!r}: {field} must be a positive finite "
                                   f"number, got {value!r}")

    def matmul_flops(self, dtype: str) -> float:
        """Peak matmul FLOP/s in the compute dtype."""
        if dtype not in COMPUTE_DTYPES:
            raise FieldError("dtype", f"{dtype!r} is not a compute dtype; choose one of "
                             f"{', '.join(COMPUTE_DTYPES)}")
        return (self.tflops_fp32 if dtype == "fp32" else self.tflops_bf16) * 1e12

    @property
    def vector_flops(self) -> float:
        """Peak FP32 non-tensor FLOP/s, for element-wise work."""
        return self.tflops_fp32 * 1e12

    @property
    def bandwidth(self) -> float:
        """Memory bandwidth in bytes/s."""
        return self.bandwidth_gbs * 1e9

    def ridge(self, dtype: str) -> float:
        """Operational intensity (FLOPs/byte) at which a matmul turns compute-bound."""
        return self.matmul_flops(dtype) / self.bandwidth

    def to_json(self) -> dict[str, Any]:
        return {"format": HARDWARE_FORMAT, **asdict(self)}

    def save(self, path: str | os.PathLike[str]) -> None:
        write_json(path, self.to_json())

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str) -> Hardware:
        check_format(doc, HARDWARE_FORMAT, source)
        missing = [f for f in ("name", "tflops_bf16", "tflops_fp32", "bandwidth_gbs") if f not in doc]
        if missing:
            raise TreeoptError(f"{source}: missing field(s) {', '.join(missing)}")
        try:
            return cls(name=str(doc["name"]), tflops_bf16=doc["tflops_bf16"],
                       tflops_fp32=doc["tflops_fp32"], bandwidth_gbs=doc["bandwidth_gbs"],
                       memory_gb=doc.get("memory_gb"), source=str(doc.get("source", source)))
        except TreeoptError as exc:
            raise TreeoptError(f"{source}: {exc}") from None


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Hardware]:
    if not HARDWARE_CSV.is_file():
        raise TreeoptError(f"hardware table {HARDWARE_CSV} is missing; pass a hardware JSON file")
    rows: dict[str, Hardware] = {}
    with HARDWARE_CSV.open(newline="", encoding="utf-8") as fh:
        for line, row in enumerate(csv.DictReader(fh), start=2):
            try:
                hw = Hardware(name=row["name"], tflops_bf16=float(row["tflops_bf16"]),
                              tflops_fp32=float(row["tflops_fp32"]),
                              bandwidth_gbs=float(row["bandwidth_gbs"]),
                              memory_gb=float(row["memory_gb"]) if row["memory_gb"] else None,
                              source=row["source"])
            except (KeyError, TypeError, ValueError) as exc:
                raise TreeoptError(f"{HARDWARE_CSV}:{line}: malformed row ({exc})") from None
            if not hw.source:
                raise TreeoptError(f"{HARDWARE_CSV}:{line}: row {hw.name!r} has no source")
            rows[hw.name] = hw
    return rows


def hardware_names() -> list[str]:
    """Names in the built-in hardware table."""
    return list(_table())


def load_hardware(name_or_path: str) -> Hardware:
    """A built-in row by name (case-insensitive), or a hardware JSON file by path."""
    text = str(name_or_path)
    if text.endswith(".json") or os.sep in text or Path(text).is_file():
        return Hardware.from_json(read_json(text), source=text)
    table = _table()
    key = text.strip().lower()
    if key not in table:
        raise FieldError("hardware", f"{{hardware}}: unknown hardware {text!r}; known: "
                         f"{', '.join(table)}, or a JSON file written by 'treeopt profile device'",
                         inline=True)
    return table[key]
