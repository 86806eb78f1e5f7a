"""The README's test command under load: N busy loops beside it, K runs, each must pass.

A shared host's speed moves while the tests run live decoding; this checks that the suite does
not depend on a quiet machine. It starts ``--busy`` processes that spin (default 2, one per core
of a 2-core host), runs the pytest part of the README's test command (read from README.md, e.g.
``.venv/bin/python -m pytest -n auto --dist loadscope``) ``--runs`` times one after the other
(default 5), prints each run's outcome, wall time and pass/fail counts, stops the busy loops, and
exits non-zero if any run failed.

    python benchmarks/suite_under_load.py [--busy 2] [--runs 5] [--pytest-args "tests/test_tune.py"]
"""

from __future__ import annotations

import argparse
import multiprocessing
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")


def spin() -> None:
    """Keep one core busy until terminated."""
    x = 0
    while True:
        x = (x * 1103515245 + 12345) % 2147483648


def readme_pytest_command(readme: Path = ROOT / "README.md") -> list[str]:
    """The pytest step of the README's test command (the first bash block that runs pytest).

    >>> readme_pytest_command()[1:3]
    ['-m', 'pytest']
    """
    for block in re.findall(r"```bash\n(.*?)\n```", readme.read_text(encoding="utf-8"), re.S):
        for step in block.split(" && "):
            if " -m pytest" in step:
                return shlex.split(step)
    raise SystemExit(f"{readme}: no bash block runs `python -m pytest`")


def counts(summary: str) -> dict[str, int]:
    """pytest's last line → its counts.

    >>> counts("=== 1797 passed, 45 skipped, 1 error in 500.1s (0:08:20) ===")
    {'passed': 1797, 'skipped': 45, 'error': 1}
    """
    return {kind: int(n) for n, kind in COUNTS.findall(summary)}


def run_suite(command: list[str], log: Path) -> tuple[int, float, list[str]]:
    """One run of the test command from the repository root, its whole output kept in ``log``:
    exit status, seconds, and the lines to show (the FAILED/ERROR lines of pytest's short
    summary, then its last line)."""
    started = time.perf_counter()
    proc = subprocess.run([*command, "-rfE"], cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    log.write_text(proc.stdout + proc.stderr, encoding="utf-8")
    lines = proc.stdout.strip().splitlines()
    shown = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    # pytest's summary is stdout's last line with counts (stderr may follow it in the log)
    summary = [line for line in lines if line.startswith("=") and COUNTS.search(line)]
    return proc.returncode, seconds, shown + (summary[-1:] or lines[-1:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", type=int, default=2, help="busy loops beside the suite (2)")
    parser.add_argument("--runs", type=int, default=5, help="runs of the suite (5)")
    parser.add_argument("--pytest-args", default="", metavar="ARGS",
                        help="more arguments to the README's pytest command, e.g. "
                             "'tests/test_tune.py' (default: none, the whole suite)")
    parser.add_argument("--logs", default=str(ROOT / "suite-under-load"), metavar="DIR",
                        help="where each run's whole output is kept (run-N.log)")
    args = parser.parse_args()
    if args.busy < 0 or args.runs < 1:
        parser.error(f"--busy must be ≥ 0 and --runs ≥ 1, got {args.busy} and {args.runs}")
    command = readme_pytest_command() + shlex.split(args.pytest_args)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    loops = [multiprocessing.Process(target=spin, daemon=True) for _ in range(args.busy)]
    for loop in loops:
        loop.start()
    failed = 0
    try:
        print(f"{args.busy} busy loops; {shlex.join(command)}", flush=True)
        for i in range(1, args.runs + 1):
            log = logs / f"run-{i}.log"
            code, seconds, shown = run_suite(command, log)
            failed += code != 0
            found = counts(shown[-1]) if shown else {}
            print(f"run {i}/{args.runs}: {'pass' if code == 0 else f'FAIL (exit {code})'} "
                  f"in {seconds:.0f} s, {found.get('passed', 0)} passed, "
                  f"{found.get('failed', 0)} failed, "
                  f"{found.get('error', 0) + found.get('errors', 0)} errors, "
                  f"{found.get('skipped', 0)} skipped ({log})", flush=True)
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
