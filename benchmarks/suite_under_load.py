"""The README's test command under load: N busy loops beside it, K runs, each must pass.

A shared host's speed moves while the tests time live decoding; this checks that the suite does
not depend on a quiet machine. It starts ``--busy`` processes that spin (default 2, one per core
of a 2-core host), runs ``python -m pytest`` ``--runs`` times one after the other (default 5),
prints each run's outcome, time and pytest summary line, stops the busy loops, and exits non-zero
if any run failed.

    python benchmarks/suite_under_load.py [--busy 2] [--runs 5] [--pytest-args "tests/test_tune.py -q"]
"""

from __future__ import annotations

import argparse
import multiprocessing
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def spin() -> None:
    """Keep one core busy until terminated."""
    x = 0
    while True:
        x = (x * 1103515245 + 12345) % 2147483648


def run_suite(python: str, pytest_args: list[str]) -> tuple[int, float, str]:
    """One run of the test command from the repository root: exit status, seconds, the last
    line of its output (pytest's summary)."""
    started = time.perf_counter()
    proc = subprocess.run([python, "-m", "pytest", *pytest_args], cwd=ROOT, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - started
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode, seconds, lines[-1] if lines else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the suite (2)")
    parser.add_argument("--runs", type=int, default=5, help="runs of the suite (5)")
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"),
                        help="the interpreter of the README's command (.venv/bin/python)")
    parser.add_argument("--pytest-args", default="", metavar="ARGS",
                        help="arguments to pytest, e.g. 'tests/test_tune.py -q' (default: none, "
                             "the whole suite as the README runs it)")
    args = parser.parse_args()
    if args.busy < 0 or args.runs < 1:
        parser.error(f"--busy must be ≥ 0 and --runs ≥ 1, got {args.busy} and {args.runs}")
    pytest_args = shlex.split(args.pytest_args)
    loops = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for loop in loops:
        loop.start()
    failed = 0
    try:
        print(f"{args.busy} busy loops; {args.python} -m pytest {' '.join(pytest_args)}",
              flush=True)
        for i in range(1, args.runs + 1):
            code, seconds, summary = run_suite(args.python, pytest_args)
            failed += code != 0
            print(f"run {i}/{args.runs}: {'pass' if code == 0 else f'FAIL (exit {code})'} "
                  f"in {seconds:.0f} s — {summary}", flush=True)
    finally:
        for loop in loops:
            loop.terminate()
            loop.join()
    print(f"{args.runs - failed} of {args.runs} runs passed with {args.busy} busy loops")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
