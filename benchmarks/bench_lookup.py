"""Prompt lookup on the shipped demo: its held-out trace's walk against live decoding, step by
step, and losslessness, greedy and sampled (never a test).

For each mode (greedy; sampling at ``--temperature``): calibrate the prompt-lookup drafter on
the demo's held-out prompts (``treeopt.decoding.calibrate``, as ``treeopt calibrate --drafter
prompt-lookup:…`` does), then decode every prompt live at batch 1 with a chain of ``--chain``
tokens, and with no tree (the reference, same sampling stream). Printed:

- how many prompts' live accepted lengths equal the trace's walk (``simulate.step_lengths``)
  step by step, and E[L] of the walk beside live E[L] over the same steps — the issue's goal is
  agreement within 0.2%. The walk stops where the trace's positions stop (the last ``depth``
  tokens of a sequence have no full set of targets), so live steps after that are not compared;
- how many prompts decode to exactly the reference's tokens (goal: all of them).

Run: ``python benchmarks/bench_lookup.py [--prompts 192] [--new-tokens 256] [--chain 10]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def check(demo, lookup, prompts, *, chain: int, new_tokens: int, temperature: float) -> None:
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.exactness import walk_against_live
    from treeopt.model.tree import Tree

    eos = demo.tokenizer.eos_token_id
    sampled = {"temperature": temperature, "seed": 0} if temperature else {}
    with tempfile.TemporaryDirectory() as tmp:
        trace, _ = calibrate(demo.model, lookup, prompts, Path(tmp) / "t.npz",
                             config=CalibrateConfig(top_k=4, max_new_tokens=new_tokens,
                                                    batch_size=16, eos_token_id=eos, **sampled))
    cfg = DecodeConfig(max_new_tokens=new_tokens, eos_token_id=eos,
                       **({"mode": "sample", **sampled} if temperature else {}))
    found = walk_against_live(demo.model, lookup, Tree.chain(chain), prompts, trace, cfg)
    mode = f"sampled at T = {temperature:g}" if temperature else "greedy"
    print(found.describe(mode) + f"; goal within 0.2%: "
          f"{'met' if abs(found.gap) <= 0.002 else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=192, help="held-out prompts (default all 192)")
    ap.add_argument("--new-tokens", type=int, default=256, help="new tokens each (default 256)")
    ap.add_argument("--chain", type=int, default=10, help="chain length decoded (default 10)")
    ap.add_argument("--depth", type=int, default=16, help="depths the trace records (default 16)")
    ap.add_argument("--max-n", type=int, default=3, help="longest n-gram matched (default 3)")
    ap.add_argument("--temperature", type=float, default=0.7,
                    help="the sampled run's temperature (default 0.7)")
    args = ap.parse_args(argv)

    import torch

    from treeopt.demo import load
    from treeopt.drafters.prompt_lookup import PromptLookup

    torch.set_num_threads(1)
    demo = load(threads=1)
    prompts = [demo.tokenizer(t)["input_ids"] for t in demo.prompts[: args.prompts]]
    lookup = PromptLookup(depth=args.depth, max_n=args.max_n, vocab_size=len(demo.tokenizer))
    print(f"prompt lookup (n-grams 1…{args.max_n}), chain of {args.chain}, {len(prompts)} "
          f"held-out prompts × {args.new_tokens} new tokens, batch 1")
    for temperature in (0.0, args.temperature):
        check(demo, lookup, prompts, chain=args.chain, new_tokens=args.new_tokens,
              temperature=temperature)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
