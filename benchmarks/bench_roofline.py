"""Time the roofline of a full sweep: 7 batch sizes × 6 contexts × 8 tree sizes (336 points).

Prints the median over repeats of (1) the vectorised prediction and (2) building the per-operator
JSON records, beside the 100 ms target. Run: ``python benchmarks/bench_roofline.py``.
"""

from __future__ import annotations

import statistics
import time

from treeopt.roofline import load_hardware, preset, roofline

BATCH = [1, 2, 4, 8, 16, 32, 64]
CONTEXT = [128, 256, 512, 1024, 2048, 4096]
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128]
REPEATS = 20


def main() -> None:
    cfg, hw = preset("llama-3-8b"), load_hardware("h100-sxm")
    roofline(cfg, hw, batch=BATCH, context=CONTEXT, tokens=TOKENS).records()  # warm-up
    predict, records = [], []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        r = roofline(cfg, hw, batch=BATCH, context=CONTEXT, tokens=TOKENS)
        t1 = time.perf_counter()
        r.records()
        t2 = time.perf_counter()
        predict.append((t1 - t0) * 1e3)
        records.append((t2 - t1) * 1e3)
    points = len(BATCH) * len(CONTEXT) * len(TOKENS)
    p, q = statistics.median(predict), statistics.median(records)
    print(f"roofline sweep, {points} points × {len(r.ops.names)} operators "
          f"({cfg.name} on {hw.name}), median of {REPEATS}:")
    print(f"  prediction          {p:8.2f} ms")
    print(f"  + per-operator JSON {q:8.2f} ms")
    print(f"  total               {p + q:8.2f} ms   (target < 100 ms)")
    print(f"  e.g. b=1, s=2048: q=1 {r.seconds(1, 2048, 1) * 1e3:.2f} ms, "
          f"q=64 {r.seconds(1, 2048, 64) * 1e3:.2f} ms; b=64: q=1 "
          f"{r.seconds(64, 2048, 1) * 1e3:.2f} ms, q=64 {r.seconds(64, 2048, 64) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
