"""Suffix decoding against prompt lookup and the n-gram trie on a demo, predicted and live (never
a test; writes nothing in data/).

1. Calibrate the three weightless drafters (``treeopt.decoding.calibrate``, as ``treeopt
   calibrate --drafter suffix:… / ngram-trie:… / prompt-lookup:…`` do) on the first
   ``--calibration`` calibration prompts and on the first ``--prompts`` held-out prompts,
   greedy, ``--new-tokens`` each, every trace in its prompts' order (suffix decoding's cache
   runs from request to request).
2. Trees: each drafter's chain of ``--depth`` tokens (for suffix decoding, what vLLM's
   ``method: suffix`` verifies) and, for the trie and suffix decoding, the ``--nodes``-node tree
   grown on the calibration trace (``treeopt.model.growth``, empirical).
3. For each tree: E[L] predicted (the walk over the held-out trace, steps as live decoding takes
   them) and live (the held-out prompts decoded one after another in one row, steps interleaved
   with autoregressive decoding in the same loop), how many prompts' steps equal the walk, live
   tokens/s and the speed-up over autoregressive, and whether every output equals
   autoregressive's (lossless).
4. Suffix decoding's chain sampled at ``--temperature``: walk against live and lossless
   (``treeopt.decoding.exactness``).

``--demo`` names a demo in data/ (default the shipped one; ``smollm2``: the real model's, whose
base model must be under .cache). Run pinned to a core of its own, e.g.
``taskset -c 1 python benchmarks/bench_suffix.py --prompts 8 --new-tokens 64``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_trie import traces as trace_of  # noqa: E402 — the same calibration as the trie's


def live_row(demo, drafter, tree, prompts, trace, config) -> dict:
    """``tree`` decoded live beside autoregressive decoding, one row, the prompts in turn."""
    from treeopt.decoding.loop import Decoder, decode_alongside
    from treeopt.model.simulation import step_lengths
    from treeopt.model.trace import RankTrace
    from treeopt.model.tree import Tree

    with_tree, plain = decode_alongside([(Decoder(demo.model, drafter), tree),
                                         (Decoder(demo.model), Tree(()))], prompts,
                                        config=config, batch=1)
    walks, start = [], 0
    for n in trace.meta["sequence_positions"]:  # each prompt's walk, as live decoding steps
        one = RankTrace(trace.ranks[start: start + n], {**trace.meta, "sequence_positions": [n]})
        walks.append(step_lengths(tree, one).tolist() if n else [])
        start += n
    live = [list(s[: len(w)]) for w, s in zip(walks, with_tree.stats.sequence_accept_lengths,
                                              strict=True)]
    steps = sum(map(len, walks))
    rate = lambda r: r.stats.tokens / r.stats.seconds  # noqa: E731  end to end, prefill in
    return {"walk": sum(map(sum, walks)) / steps, "live": sum(map(sum, live)) / steps,
            "equal": sum(w == x for w, x in zip(walks, live, strict=True)),
            "tokens_per_s": rate(with_tree), "speedup": rate(with_tree) / rate(plain),
            "ar_tokens_per_s": rate(plain), "lossless": with_tree.tokens == plain.tokens}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", help="a demo in data/ or its directory (default the shipped one)")
    ap.add_argument("--prompts", type=int, default=16, help="held-out prompts (default 16)")
    ap.add_argument("--calibration", type=int, default=32, help="calibration prompts (32)")
    ap.add_argument("--new-tokens", type=int, default=128, help="new tokens each (default 128)")
    ap.add_argument("--depth", type=int, default=10, help="each drafter's depth (default 10)")
    ap.add_argument("--nodes", type=int, default=8, help="nodes of the grown trees (default 8)")
    ap.add_argument("--top-k", type=int, default=8, help="ranks the traces keep (8)")
    ap.add_argument("--temperature", type=float, default=0.7, help="the sampled check's T")
    args = ap.parse_args(argv)

    import torch
    from transformers.utils import logging

    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.exactness import walk_against_live
    from treeopt.demo.layout import demo_root
    from treeopt.demo.load import load
    from treeopt.documents.prompts import encode, read_texts
    from treeopt.drafters.prompt_lookup import PromptLookup
    from treeopt.drafters.suffix import SuffixDrafter
    from treeopt.drafters.trie_drafter import TrieDrafter
    from treeopt.model.growth import grow
    from treeopt.model.tree import Tree

    logging.set_verbosity_error()
    torch.set_num_threads(1)
    demo = load(demo_root(args.demo), threads=1)
    held = encode(demo.tokenizer, demo.prompts[: args.prompts])
    calib = encode(demo.tokenizer, read_texts([demo.paths.prompts("calibration")])
                   [: args.calibration])
    vocab, D = len(demo.tokenizer), args.depth
    drafters = {"prompt-lookup": PromptLookup(depth=D, vocab_size=vocab),
                "ngram-trie": TrieDrafter(depth=D, vocab_size=vocab),
                "suffix": SuffixDrafter(depth=D, vocab_size=vocab)}
    kw = {"new_tokens": args.new_tokens, "top_k": args.top_k}
    config = DecodeConfig(max_new_tokens=args.new_tokens, eos_token_id=demo.tokenizer.eos_token_id)
    print(f"demo {demo.paths.root.name}: {len(calib)} calibration and {len(held)} held-out "
          f"prompts × {args.new_tokens} new tokens, greedy, one row, one thread; depth {D}; "
          f"suffix decoding: {drafters['suffix'].rule.describe()}")
    print(f"{'drafter':14} {'tree':14} {'E[L] walk':>9} {'live':>7} {'gap':>7} {'equal':>6} "
          f"{'tok/s':>7} {'AR tok/s':>8} {'× AR':>6}  lossless")
    for kind, drafter in drafters.items():
        held_trace = trace_of(demo, drafter, held, **kw)
        trees = {f"chain {D}": Tree.chain(D)}
        if kind != "prompt-lookup":
            growth = grow(trace_of(demo, drafter, calib, **kw), method="empirical",
                          max_nodes=args.nodes)
            m = min(args.nodes, growth.max_nodes)
            trees[f"grown {m}"] = growth.tree(m)
        for name, tree in trees.items():
            r = live_row(demo, drafter, tree, held, held_trace, config)
            print(f"{kind:14} {name:14} {r['walk']:9.4f} {r['live']:7.4f} "
                  f"{r['live'] / r['walk'] - 1:+7.2%} {r['equal']:>3}/{len(held):<2} "
                  f"{r['tokens_per_s']:7.1f} {r['ar_tokens_per_s']:8.1f} {r['speedup']:5.2f}×  "
                  f"{'yes' if r['lossless'] else 'NO'}")
    suffix = drafters["suffix"]
    sampled = trace_of(demo, suffix, held, temperature=args.temperature, **kw)
    found = walk_against_live(demo.model, suffix, Tree.chain(D), held, sampled,
                              DecodeConfig(max_new_tokens=args.new_tokens, mode="sample",
                                           temperature=args.temperature, seed=0,
                                           eos_token_id=demo.tokenizer.eos_token_id))
    print(found.describe(f"suffix decoding's chain sampled at T = {args.temperature:g}"))
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
