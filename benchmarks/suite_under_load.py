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


def run_suite(python: str, pytest_args: list[str], log: Path) -> tuple[int, float, list[str]]:
    """One run of the test command from the repository root, its whole output kept in ``log``:
    exit status, seconds, and the lines to show (the FAILED/ERROR lines of pytest's short
    summary, then its last line)."""
    started = time.perf_counter()
    proc = subprocess.run([python, "-m", "pytest", "-rfE", *pytest_args], cwd=ROOT,
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    output = proc.stdout + proc.stderr
    log.write_text(output, encoding="utf-8")
    lines = output.strip().splitlines()
    shown = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return proc.returncode, seconds, shown + lines[-1:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the suite (2)")
    parser.add_argument("--runs", type=int, default=5, help="runs of the suite (5)")
    parser.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"),
                        help="the interpreter of the README's command (.venv/bin/python)")
    parser.add_argument("--pytest-args", default="", metavar="ARGS",
                        help="arguments to pytest, e.g. 'tests/test_tune.py -q' (default: none, "
                             "the whole suite as the README runs it)")
    parser.add_argument("--logs", default=str(ROOT / "suite-under-load"), metavar="DIR",
                        help="where each run's whole output is kept (run-N.log)")
    args = parser.parse_args()
    if args.busy < 0 or args.runs < 1:
        parser.error(f"--busy must be ≥ 0 and --runs ≥ 1, got {args.busy} and {args.runs}")
    pytest_args = shlex.split(args.pytest_args)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    loops = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for loop in loops:
        loop.start()
    failed = 0
    try:
        print(f"{args.busy} busy loops; {args.python} -m pytest {' '.join(pytest_args)}",
              flush=True)
        for i in range(1, args.runs + 1):
            log = logs / f"run-{i}.log"
            code, seconds, shown = run_suite(args.python, pytest_args, log)
            failed += code != 0
            print(f"run {i}/{args.runs}: {'pass' if code == 0 else f'FAIL (exit {code})'} "
                  f"in {seconds:.0f} s ({log}) — {shown[-1] if shown else ''}", flush=True)
            for line in shown[:-1]:
                print(f"  {line}", flush=True)
    finally:
        for loop in loops:
            loop.terminate()
            loop.join()
    print(f"{args.runs - failed} of {args.runs} runs passed with {args.busy} busy loops")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
