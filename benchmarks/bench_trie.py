"""SGLang's trie drafter (``ngram-trie``) on the shipped demo: E[L] of its grown trees against
prompt lookup's chains, and its exactness live (never a test; writes nothing in data/demo).

1. Calibrate both n-gram drafters (``treeopt.decoding.calibrate``, as ``treeopt calibrate
   --drafter ngram-trie:… / prompt-lookup:depth=10`` do) on the first ``--prompts`` calibration
   prompts and on as many held-out prompts, greedy, ``--new-tokens`` each.
2. Grow the trie's trees on the calibration trace (``treeopt.model.growth``, empirical) and print, for
   tree sizes 4, 8, 16 and 32, E[L] on the calibration trace (in sample) and on the held-out
   trace (``Growth.evaluate``), beside prompt lookup's chain of the same size (capped at its
   depth) and its best chain, on the same held-out prompts. E[L] here is the mean over every
   position of the tokens a step starting there would emit (what ``grow`` reports); the walk
   E[L] (steps as live decoding takes them, ``simulate.step_lengths``) is printed beside it.
3. On the first ``--check`` held-out prompts, greedy and sampled: decode live at batch 1 with the
   grown ``--check-size``-node tree, and with no tree; print how many prompts' accepted lengths
   equal the held-out trace's walk step by step, walk and live E[L], and how many decode to
   exactly the plain decoder's tokens.

Run: ``python benchmarks/bench_trie.py [--prompts 64] [--new-tokens 128] [--match bfs]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = (4, 8, 16, 32)


def traces(demo, drafter, prompts, *, new_tokens: int, top_k: int, temperature: float = 0.0):
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate

    sampled = {"temperature": temperature, "seed": 0} if temperature else {}
    with tempfile.TemporaryDirectory() as tmp:
        trace, _ = calibrate(demo.model, drafter, prompts, Path(tmp) / "t.npz",
                             config=CalibrateConfig(top_k=top_k, max_new_tokens=new_tokens,
                                                    batch_size=16,
                                                    eos_token_id=demo.tokenizer.eos_token_id,
                                                    **sampled))
    return trace


def walk_mean(tree, trace) -> float:
    from treeopt.model.simulation import step_lengths

    return float(step_lengths(tree, trace).mean())


def compare(growth, calib, held, lookup_held) -> None:
    from treeopt.model.simulation import accept_lengths
    from treeopt.model.tree import Tree

    in_sample, out = growth.expected_accept_length, growth.evaluate(held)
    chains = {k: float(accept_lengths(Tree.chain(k), lookup_held).mean())
              for k in range(1, lookup_held.heads + 1)}
    best = max(chains, key=chains.__getitem__)
    print("E[L] position-weighted, and per step (walk) on the held-out trace")
    print(f"{'nodes':>5}  {'trie E[L] calib':>15}  {'held-out':>8}  {'walk':>6}  "
          f"{'lookup chain':>12}  {'walk':>6}")
    for n in SIZES:
        m = min(n, growth.max_nodes)
        tree, k = growth.tree(m), min(n, lookup_held.heads)
        print(f"{n:>5}  {in_sample[m]:>15.4f}  {out[m]:>8.4f}  {walk_mean(tree, held):>6.3f}  "
              f"{chains[k]:>12.4f}  {walk_mean(Tree.chain(k), lookup_held):>6.3f}"
              + (f"   (grown to {m} nodes: no more have a non-zero acceptance)" if m < n else "")
              + (f"   (chain capped at its depth {k})" if k < n else ""))
    print(f"prompt lookup's best chain on the held-out prompts: {best} tokens, E[L] "
          f"{chains[best]:.4f}")


def check(demo, drafter, tree, prompts, *, new_tokens: int, top_k: int,
          temperature: float) -> None:
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.exactness import walk_against_live

    trace = traces(demo, drafter, prompts, new_tokens=new_tokens, top_k=top_k,
                   temperature=temperature)
    sampled = {"mode": "sample", "temperature": temperature, "seed": 0} if temperature else {}
    cfg = DecodeConfig(max_new_tokens=new_tokens, eos_token_id=demo.tokenizer.eos_token_id,
                       **sampled)
    found = walk_against_live(demo.model, drafter, tree, prompts, trace, cfg)
    mode = f"sampled at T = {temperature:g}" if temperature else "greedy"
    print(found.describe(f"{mode}, tree of {tree.size} nodes"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=64, help="prompts of each set (default 64)")
    ap.add_argument("--new-tokens", type=int, default=128, help="new tokens each (default 128)")
    ap.add_argument("--depth", type=int, default=10, help="depths both traces record (10)")
    ap.add_argument("--max-trie-depth", type=int, default=18, help="the trie's depth (18)")
    ap.add_argument("--match", choices=("bfs", "prob"), default="bfs", help="children order")
    ap.add_argument("--top-k", type=int, default=8, help="ranks the trie's trace keeps (8)")
    ap.add_argument("--check", type=int, default=8, help="held-out prompts checked live (8)")
    ap.add_argument("--check-size", type=int, default=16, help="nodes of the tree checked (16)")
    ap.add_argument("--temperature", type=float, default=0.7, help="the sampled check's T")
    args = ap.parse_args(argv)

    import torch

    from treeopt.demo import demo_paths, load
    from treeopt.documents.prompts import read_texts
    from treeopt.drafters.prompt_lookup import PromptLookup
    from treeopt.drafters.trie_drafter import TrieDrafter
    from treeopt.model.growth import grow

    torch.set_num_threads(1)
    demo = load(threads=1)
    encode = lambda texts: [demo.tokenizer(t)["input_ids"] for t in texts[: args.prompts]]  # noqa: E731
    held = encode(demo.prompts)
    calib = encode(read_texts([demo_paths().prompts("calibration")]))
    vocab = len(demo.tokenizer)
    trie = TrieDrafter(depth=args.depth, max_trie_depth=args.max_trie_depth, match=args.match,
                       vocab_size=vocab)
    lookup = PromptLookup(depth=args.depth, vocab_size=vocab)
    print(f"n-gram trie ({trie.rule.describe()}, top-{args.top_k}) against prompt lookup "
          f"(n-grams 1…3), depth {args.depth}; {len(calib)} calibration and {len(held)} "
          f"held-out prompts × {args.new_tokens} new tokens, greedy")
    kw = {"new_tokens": args.new_tokens, "top_k": args.top_k}
    calib_trace, held_trace = traces(demo, trie, calib, **kw), traces(demo, trie, held, **kw)
    growth = grow(calib_trace, method="empirical", max_nodes=max(SIZES))
    compare(growth, calib_trace, held_trace, traces(demo, lookup, held, **kw))
    tree = growth.tree(min(args.check_size, growth.max_nodes))
    print(f"checked tree: {[list(p) for p in tree.paths]}")
    for temperature in (0.0, args.temperature):
        check(demo, trie, tree, held[: args.check], temperature=temperature, **kw)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
