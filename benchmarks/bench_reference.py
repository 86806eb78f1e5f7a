"""The demo build's autoregressive reference (what every live check is compared against):
decoded whole, against read from the continuation store that the held-out greedy traces fill
(treeopt's way: only the prompts timed alone are decoded again).

    python benchmarks/bench_reference.py [--demo smollm2]

Fills a fresh store first, as the traces stage does (its seconds printed), then times the
reference each way and checks the two equal. One torch thread; pin it (``taskset -c 0``);
nothing is written outside a temporary directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", help="a demo in data/ (smollm2: after `treeopt fetch`) or its "
                                   "directory; default: the shipped data/demo")
    args = ap.parse_args()

    from treeopt.decoding.calibrate import CalibrateConfig, continued
    from treeopt.decoding.continuations import ContinuationStore, weights_digest
    from treeopt.decoding.loop import Decoder
    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.demo.quality import autoregressive_run
    from treeopt.documents.prompts import encode, read_texts

    demo = load(demo_root(args.demo), threads=1)
    c = demo.manifest["config"]
    prompts = encode(demo.tokenizer, read_texts([demo.paths.prompts("heldout")]))
    eos = demo.tokenizer.eos_token_id
    traced = CalibrateConfig(top_k=c["top_k"], max_new_tokens=c["max_new_tokens"],
                             batch_size=c["calibration_batch"], eos_token_id=eos)
    with tempfile.TemporaryDirectory() as scratch:
        store = ContinuationStore(Path(scratch) / weights_digest(demo.model))
        begin = time.perf_counter()
        continued(demo.model, prompts, traced, store=store)  # as the greedy traces leave it
        filled = time.perf_counter() - begin

        def reference(*, stored: bool) -> tuple[list[tuple[int, ...]], float]:
            begin = time.perf_counter()
            outputs = None
            if stored:
                read = continued(demo.model, prompts, traced, store=store)
                outputs = [tuple(s[len(p):]) for s, p in zip(read, prompts, strict=True)]
            ref, _ = autoregressive_run(Decoder(demo.model), prompts,
                                        max_new_tokens=c["max_new_tokens"], eos_token_id=eos,
                                        timed_threads=1, outputs=outputs)
            return ref, time.perf_counter() - begin

        whole, whole_s = reference(stored=False)
        read, read_s = reference(stored=True)
    print(f"{demo.paths.root.name}: {len(prompts)} held-out prompts × {c['max_new_tokens']} "
          f"tokens, {next(demo.model.parameters()).dtype}, 1 thread; the traces' decoding "
          f"(filling the store) {filled:.1f} s")
    print(f"autoregressive reference: {read_s:.1f} s read from the store, {whole_s:.1f} s "
          f"decoded whole ({whole_s / read_s:.1f}×); identical: {read == whole}")
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
