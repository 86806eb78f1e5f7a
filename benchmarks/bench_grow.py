"""Growth benchmark: 1,000,000 positions × 5 heads of a skewed synthetic trace, on this CPU.

Times empirical growth to 1,000 nodes, independent growth to 1,000 nodes (from the accuracy
table), uniform search, and the papers' greedy re-simulation reference at a size where it
finishes; prints the ratio at equal size and checks both reach the same E[L].

    python benchmarks/bench_grow.py [--positions 1000000] [--reference-nodes 8]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from treeopt.model.accuracy import AccuracyTable
from treeopt.model.growth import grow
from treeopt.model.search_reference import greedy_by_resimulation
from treeopt.model.synthetic import synthetic_trace


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time in seconds over ``repeats`` runs (after one warm-up), and the result."""
    result = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--positions", type=int, default=1_000_000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--reference-nodes", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    trace = synthetic_trace(args.positions, heads=5, top_k=10, seed=0)
    print(f"trace: {trace.positions:,} positions × {trace.heads} heads, top-{trace.top_k}")
    t_emp, g_emp = timed(lambda: grow(trace, method="empirical", max_nodes=args.nodes), args.repeats)
    print(f"empirical growth to {args.nodes} nodes: {t_emp * 1e3:8.1f} ms   "
          f"E[L]({args.nodes}) = {g_emp.expected_accept_length[-1]:.4f}")
    t_acc, table = timed(lambda: AccuracyTable.from_trace(trace), args.repeats)
    t_ind, g_ind = timed(lambda: grow(table, method="independent", max_nodes=args.nodes),
                         args.repeats)
    print(f"independent growth to {args.nodes} nodes: {t_ind * 1e3:6.1f} ms "
          f"(+ {t_acc * 1e3:.1f} ms for the accuracy table from the trace)")
    t_uni, _ = timed(lambda: grow(trace, method="empirical", max_nodes=64, constraint="uniform"), 1)
    print(f"uniform (vLLM) search to 64 nodes, empirical: {t_uni * 1e3:6.1f} ms")

    n = args.reference_nodes
    t_fast, g_small = timed(lambda: grow(trace, method="empirical", max_nodes=n), args.repeats)
    t0 = time.perf_counter()
    _, ref_ell = greedy_by_resimulation(trace, max_nodes=n, max_depth=5, max_rank=10)
    t_ref = time.perf_counter() - t0
    same = np.allclose(ref_ell, g_small.expected_accept_length[: len(ref_ell)], atol=1e-9)
    print(f"reference (re-simulate every frontier candidate) to {n} nodes: {t_ref:8.2f} s")
    print(f"treeopt empirical growth to {n} nodes:                        {t_fast * 1e3:8.1f} ms")
    print(f"speed-up at {n} nodes: {t_ref / t_fast:,.0f}x   same E[L] curve: {same}")


if __name__ == "__main__":
    main()
