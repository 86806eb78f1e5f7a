"""Print the architecture matrix as the table docs/byo-model.md carries (``--write`` puts it
there, between the ``architecture-matrix`` markers).

Each family of ``tests/architectures.py`` is built tiny from a config and checked with a Medusa,
a Hydra and an EAGLE drafter — treeopt's loop and tree decoding against the model's own greedy
``generate``, calibration ranks against a step-by-step reference, the trace walk against live
accepted lengths, sampling against plain sampling — or its refusal is quoted. The same checks
``tests/test_architectures.py`` asserts; this script prints what they found.

    python benchmarks/architecture_matrix.py [--write docs/byo-model.md] [--only gemma2,...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import architectures as arch  # noqa: E402
from doc_table import write_between  # noqa: E402


def cell(checks: dict[str, object]) -> str:
    """"exact, E[L] 1.36" when every check held, else the checks that failed."""
    failed = [c for c in arch.CHECKS if checks[c] is not True]
    if failed:
        return "**differs**: " + ", ".join(failed)
    return f"exact, E[L] {checks['E[L]']:.2f}"


def row(family: arch.Family) -> str:
    name = f"`{family.model_type}`"
    if family.refused is not None:
        line = arch.refusal(family) or "**decoded, not refused**"
        return f"| {name} | {family.feature} | refused: {line.split(': ', 1)[-1]} | | |"
    with tempfile.TemporaryDirectory() as tmp:
        found = arch.matrix_row(family, Path(tmp))
    return f"| {name} | {family.feature} | " + " | ".join(cell(found[k]) for k in arch.DRAFTERS) + " |"


def table(families: list[arch.Family]) -> str:
    import torch
    import transformers

    torch.set_num_threads(1)
    head = ["| model_type | what it exercises | Medusa | Hydra | EAGLE |", "|---|---|---|---|---|"]
    lines = []
    for family in families:
        start = time.perf_counter()
        lines.append(row(family))
        print(f"{family.name}: {time.perf_counter() - start:.1f} s", file=sys.stderr)
    note = (f"transformers {transformers.__version__}, torch {torch.__version__}, float32; "
            f"windows and chunks of {arch.WINDOW} tokens, prompts of "
            f"{min(arch.PROMPT_LENGTHS)}–{max(arch.PROMPT_LENGTHS)} tokens in a batch of "
            f"{len(arch.PROMPT_LENGTHS)}, {arch.NEW_TOKENS} new tokens. \"exact\": treeopt's "
            f"loop and tree decoding equal the model's own greedy `generate`, calibration ranks "
            f"equal the step-by-step reference, the trace walk equals every live accepted "
            f"length, and sampling equals plain sampling seed for seed; E[L] is the live mean "
            f"accepted length of a briefly trained drafter.")
    return "\n".join([*head, *lines, "", note])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", metavar="DOC.md", help="replace the table between the markers")
    p.add_argument("--only", default="", help="comma-separated family names")
    args = p.parse_args()
    names = {n for n in args.only.split(",") if n}
    families = [f for f in arch.FAMILIES if not names or f.name in names]
    text = table(families)
    print(text)
    if args.write:
        try:
            write_between(args.write, "architecture-matrix", text)
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
