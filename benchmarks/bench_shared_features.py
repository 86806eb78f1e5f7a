"""The greedy traces of the demo's drafters that read the base model's features (Medusa, Hydra,
EAGLE, as the build makes them): each ranked over a teacher-forced forward of its own, against
one forward per batch shared through a :class:`treeopt.decoding.features.FeatureCache`.

    python benchmarks/bench_shared_features.py [--demo smollm2] [--prompts 16]

The continuations are decoded first, once, into a store (as the build's traces share them);
the traces are then timed each way and checked identical. One torch thread; pin it
(``taskset -c 0``); nothing is written outside a temporary directory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FEATURE_KINDS = ("medusa", "hydra", "eagle")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--demo", help="a demo in data/ (smollm2: after `treeopt fetch`) or its "
                                   "directory; default: the shipped data/demo")
    ap.add_argument("--prompts", type=int, default=16, help="held-out prompts traced")
    args = ap.parse_args()

    import numpy as np

    from treeopt.decoding.calibrate import CalibrateConfig, calibrate, continued
    from treeopt.decoding.continuations import ContinuationStore, weights_digest
    from treeopt.decoding.features import FeatureCache
    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.documents.prompts import encode, read_texts
    from treeopt.errors import TreeoptError

    demo = load(demo_root(args.demo), threads=1)
    kinds = [k for k in FEATURE_KINDS if k in demo.kinds]
    if len(kinds) < 2:
        raise TreeoptError(f"{demo.paths.root}: {len(kinds)} drafter that reads the base "
                           "model's features; sharing them needs two")
    c = demo.manifest["config"]
    prompts = encode(demo.tokenizer, read_texts([demo.paths.prompts("heldout")]))[: args.prompts]
    config = CalibrateConfig(top_k=c["top_k"], max_new_tokens=c["max_new_tokens"],
                             batch_size=c["calibration_batch"],
                             eos_token_id=demo.tokenizer.eos_token_id)
    with tempfile.TemporaryDirectory() as scratch:
        store = ContinuationStore(Path(scratch) / weights_digest(demo.model))
        continued(demo.model, prompts, config, store=store)  # decoded once, as in the build
        seconds, traces = {}, {}
        for way, features in (("own", None), ("shared", FeatureCache())):
            begin = time.perf_counter()
            traces[way] = [calibrate(demo.model, demo.heads[k], prompts,
                                     Path(scratch) / f"{way}-{k}.npz", config=config,
                                     continuations=store, features=features)[0]
                           for k in kinds]
            seconds[way] = time.perf_counter() - begin
    same = all(np.array_equal(a.ranks, b.ranks)
               for a, b in zip(traces["own"], traces["shared"], strict=True))
    print(f"{demo.paths.root.name}: {', '.join(kinds)} greedy traces of {len(prompts)} held-out "
          f"prompts × {c['max_new_tokens']} tokens, {next(demo.model.parameters()).dtype}, "
          f"1 thread: {seconds['own']:.1f} s each over its own forward, {seconds['shared']:.1f} s "
          f"sharing one ({seconds['own'] / seconds['shared']:.2f}×); identical: {same}")
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
