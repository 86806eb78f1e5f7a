"""What the benchmarks that time one measurement two ways in one run share
(``bench_ragged_rounds.py``, ``bench_profile_shared.py``): their flags — a demo, its drafters,
batch sizes, and a timing to a target standard error — and the demo and drafters they name."""

from __future__ import annotations

import argparse
from typing import Any


def add_flags(ap: argparse.ArgumentParser, *, batches: str) -> None:
    """``--demo``, ``--kinds``, ``--batches`` (default ``batches``), the timing (``--target-se``,
    ``--rounds``, ``--max-rounds``: the presets' 2% in 2 to 8 rounds) and ``--within``."""
    ap.add_argument("--demo", default="smollm2", help="a demo in data/ or its directory")
    ap.add_argument("--kinds", help="comma-separated drafter kinds (default: the demo's)")
    ap.add_argument("--batches", default=batches, help="comma-separated batch sizes")
    ap.add_argument("--target-se", type=float, default=0.02)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-rounds", type=int, default=8)
    ap.add_argument("--within", type=float, default=0.05)


def demo_and_kinds(args: argparse.Namespace) -> tuple[Any, list[str], Any]:
    """The demo (one torch thread), the drafters of ``--kinds`` (refused in one line where the
    demo lacks one) and the measurement the timing flags say."""
    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.documents.measure import Measurement
    from treeopt.errors import TreeoptError

    demo = load(demo_root(args.demo), threads=1)
    kinds = [k for k in (args.kinds or ",".join(demo.kinds)).split(",") if k]
    if unknown := [k for k in kinds if k not in demo.kinds]:
        raise TreeoptError(f"--kinds: {', '.join(unknown)} not in the demo "
                           f"({', '.join(demo.kinds)})")
    return demo, kinds, Measurement(rounds=args.rounds, target_se=args.target_se,
                                    max_rounds=args.max_rounds)
