"""What starting a decoding costs: a fresh decoder (as every sweep point, calibration chunk and
live check starts one) decoding one held-out prompt by one token, with the model's support
probe kept from its first decoder (treeopt's way) against probing it again each time (the
reference: every weight cast to float32 and back, the packed weights made again).

    python benchmarks/bench_decode_start.py [--demo smollm2] [--starts 5]

Prints the median seconds of a start each way, the plain forward of the same prompt beside
them (what a start cannot go below), and the ratio. One torch thread; nothing is written.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", help="a demo in data/ (smollm2: after `treeopt fetch`) or its "
                                   "directory; default: the shipped data/demo")
    ap.add_argument("--starts", type=int, default=5, help="starts timed each way")
    args = ap.parse_args()

    import torch

    import treeopt.decoding.probe as probe
    from treeopt.decoding.rank_pass import greedy_continuations
    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.documents.prompts import encode
    from treeopt.errors import TreeoptError

    try:
        demo = load(demo_root(args.demo), threads=1)
    except TreeoptError as e:
        raise SystemExit(f"bench_decode_start: {e}") from None
    prompt = encode(demo.tokenizer, demo.prompts[:1])
    model = demo.model
    greedy_continuations(model, prompt, max_new_tokens=1)  # the first start probes either way

    def start(*, probe_again: bool) -> float:
        if probe_again:
            vars(model).pop(probe._CHECKED, None)
        begin = time.perf_counter()
        greedy_continuations(model, prompt, max_new_tokens=1)
        return time.perf_counter() - begin

    kept = statistics.median(start(probe_again=False) for _ in range(args.starts))
    again = statistics.median(start(probe_again=True) for _ in range(args.starts))
    with torch.inference_mode():
        ids = torch.tensor(prompt)
        forward = statistics.median(
            _timed(lambda: model(input_ids=ids)) for _ in range(args.starts))
    print(f"{demo.paths.root.name}: a decoding's start (one prompt of {len(prompt[0])} tokens, "
          f"one new token, {next(model.parameters()).dtype}, 1 thread), median of "
          f"{args.starts}: {kept:.3f} s with the probe kept, {again:.3f} s probed again "
          f"({again / kept:.1f}×); the prompt's plain forward {forward:.3f} s")


def _timed(fn) -> float:
    begin = time.perf_counter()
    fn()
    return time.perf_counter() - begin


if __name__ == "__main__":
    main()
