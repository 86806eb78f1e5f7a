"""Does ``choose-drafter`` pick the drafter that measures fastest? On the shipped demo, per
prompt set and batch size (never a test).

The demo has two prompt sets: its held-out code prompts, full of repeats, and prose (docstrings
and comments), where repeats are rare. For each set, each drafter's selection is made as
``choose-drafter --prompt-set`` makes it (the set's growth, E[L] the per-step walk of the set's
trace, priced by the drafter's step profile; :func:`treeopt.demo.prompt_sets.
prompt_set_selections`). Then, at each batch size, every drafter's picked tree and plain
decoding decode the set's first ``--prompts`` prompts live, their steps interleaved
(:func:`treeopt.decoding.loop.decode_alongside`, one torch thread), every output checked equal to
plain decoding's. ``--batching continuous`` (the default) decodes them as a serving engine does:
``batch`` rows, a finished row taking the next prompt, throughput over the steps while every
row runs; ``static``: consecutive batches, each until its first row finishes — which leaves out
the ends of continuations, where n-gram drafters accept most (on the demo, at batch 8 they
measured 25–33% below their prediction that way).

Printed per set and batch size: each drafter's predicted and measured speed-up over plain
decoding, the drafter measured fastest (one whose pick is no tree decodes plainly, so it
counts as ``none``), ``choose-drafter``'s pick for the set and the robust
pick across both sets, and the pick's measured share of the fastest (the goal: the pick is the
fastest; where it is not, the share says by how much it misses). With ``--rounds R`` > 1 the
race runs R times, each figure is the median of the rounds' speed-ups, and the share has its
standard error over the rounds (the pick's speed over the fastest's, round by round): a pick
short of the fastest by less than two of them is a tie the race cannot tell apart, and the
last line counts those. Under each row, each drafter's
E[L] predicted (the whole set's walk) → the raced prompts' own walk (equal to live when the
trace holds every step their runs take: the set's prompts differ from these few) → live, and the
speed-up's miss split in two (speed-up = E[L] × autoregressive
step / tree step): acceptance, and step cost — a step profile taken on a day the host ran at
another speed or shape misses in the second factor alone.

Run: ``python benchmarks/bench_choose.py [--prompts 16] [--new-tokens 128] [--batches 1,2,4,8]
[--sets code,prose] [--rounds 1]``
on a quiet machine, after a demo build with the ``prose`` stage; ``--demo smollm2`` on the real
model's demo (its weights fetched with ``treeopt fetch smollm2-135m-instruct``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def set_prompts(demo, name: str, count: int) -> list[list[int]]:
    """The first ``count`` prompts of the demo's ``name`` set, as token ids."""
    from treeopt.documents.prompts import encode, read_texts

    part = "heldout" if name == "code" else name
    return encode(demo.tokenizer, read_texts([demo.paths.prompts(part)])[:count])


def race(demo, trees: dict[str, object], prompts: list[list[int]], batch: int,
         new_tokens: int, *, continuous: bool, drafted: frozenset[str] = frozenset(),
         ) -> tuple[dict[str, float], dict[str, bool], dict[str, float], dict[str, float],
                    tuple[int, ...]]:
    """Each drafter's tree and plain decoding over ``prompts`` with ``batch`` rows (continuous
    batching, or consecutive batches), interleaved, each run stopping at the tokenizer's EOS as
    a served request does: per drafter (and ``none``) its steady tokens/s, whether its outputs
    equal plain decoding's, its mean accepted length per step, and that of the steady window
    its tokens/s counts; and the tokens each prompt's plain output holds. The drafters in ``drafted`` verify their chains only as far as they
    drafted them (their pick is a drafted chain)."""
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder, race_in_batches
    from treeopt.model.tree import Tree

    names = [*trees, "none"]
    runs = [(Decoder(demo.model, demo.heads[k]), trees[k]) for k in trees]
    totals = race_in_batches([*runs, (Decoder(demo.model), Tree(()))], prompts, batch=batch,
                             config=DecodeConfig(max_new_tokens=new_tokens, eos_token_id=getattr(
                                 demo.tokenizer, "eos_token_id", None)),
                             continuous=continuous,
                             drafted_runs={i for i, k in enumerate(trees) if k in drafted})
    return ({n: t.tokens_per_s for n, t in zip(names, totals, strict=True)},
            {n: t.same_as_reference for n, t in zip(names, totals, strict=True)},
            {n: sum(t.accept_lengths) / max(1, len(t.accept_lengths))
             for n, t in zip(names, totals, strict=True)},
            {n: t.steady_accept_length for n, t in zip(names, totals, strict=True)},
            totals[-1].emitted)


def raced(demo, trees: dict[str, object], prompts: list[list[int]], batch: int,
           new_tokens: int, *, rounds: int, continuous: bool, drafted: frozenset[str],
           ) -> tuple[list[dict[str, float]], dict[str, bool], dict[str, float],
                      dict[str, float], tuple[int, ...]]:
    """:func:`race` ``rounds`` times: each round's speed-ups over plain decoding (per drafter
    and ``none``), whether every round's outputs equal plain decoding's, and the last round's
    accepted lengths and plain output lengths (greedy: the same every round)."""
    speedups, equal = [], None
    for _ in range(rounds):
        speed, same, accepted, window, emitted = race(demo, trees, prompts, batch, new_tokens,
                                                      continuous=continuous, drafted=drafted)
        speedups.append({k: speed[k] / speed["none"] for k in speed})
        equal = same if equal is None else {k: equal[k] and same[k] for k in same}
    assert equal is not None
    return speedups, equal, accepted, window, emitted


def share_noise(rounds: list[dict[str, float]], pick: str, fastest: str) -> float | None:
    """The standard error of the pick's speed over the fastest's, over the rounds (None for
    one round).

    >>> round(share_noise([{"a": 1.0, "b": 1.0}, {"a": 0.98, "b": 1.0}], "a", "b"), 3)
    0.01
    """
    if len(rounds) < 2:
        return None
    shares = np.array([r[pick] / r[fastest] for r in rounds])
    return float(shares.std(ddof=1) / np.sqrt(len(shares)))


def walked(demo, name: str, trees: dict[str, object], emitted: tuple[int, ...],
           new_tokens: int) -> dict[str, float]:
    """Each drafter's E[L] on the raced prompts' own trace (the set's first sequences, each as
    its prompt's live run kept it: ``emitted`` tokens, at most ``new_tokens``), walked step by
    step over every step: what its live steps must accept, exactly."""
    from treeopt.model.runs import as_runs
    from treeopt.model.simulation import simulate
    from treeopt.model.trace import RankTrace

    out = {}
    for kind, tree in trees.items():
        trace = (demo.heldout_traces[kind] if name == "code"
                 else RankTrace.load(demo.paths.prose_trace(kind)))
        runs = as_runs(trace, [min(n, new_tokens) for n in emitted])
        out[kind] = simulate(tree, runs, per_step=True).mean_accept_length if tree.size else 1.0
    return out


def split_error(predicted: float, measured: float, el_predicted: float,
                el_live: float) -> tuple[float, float]:
    """A speed-up's miss split into its two factors, speed-up = E[L] × (autoregressive step /
    tree step): the live E[L] over the predicted one, and the live step-cost ratio over the
    predicted one (their product is measured / predicted).

    >>> [round(x, 3) for x in split_error(2.0, 1.8, 2.5, 2.5)]  # acceptance right, step dearer
    [1.0, 0.9]
    """
    acceptance = el_live / el_predicted
    return acceptance, (measured / predicted) / acceptance


def main(argv: list[str] | None = None) -> int:
    from treeopt.cli.common import int_list

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16, help="prompts per set (default 16)")
    ap.add_argument("--new-tokens", type=int, default=128, help="new tokens each (default 128)")
    ap.add_argument("--batches", type=int_list("--batches"), default=[1, 2, 4, 8],
                    help="batch sizes (default 1,2,4,8)")
    ap.add_argument("--batching", choices=("continuous", "static"), default="continuous",
                    help="continuous: a finished row takes the next prompt (default); static: "
                         "consecutive batches")
    ap.add_argument("--demo", help="a demo in data/ (smollm2: the real model's, after "
                                   "`treeopt fetch`) or its directory; default the shipped one")
    ap.add_argument("--dtype", help="the model's dtype (fp32, bf16; default the demo build's)")
    ap.add_argument("--sets", default="code,prose",
                    help="the prompt sets raced, of code and prose (default both)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="races per point; with 2 or more, medians and the share's standard "
                         "error (default 1)")
    args = ap.parse_args(argv)
    sets_raced = args.sets.split(",")
    if not set(sets_raced) <= {"code", "prose"} or args.rounds < 1:
        ap.error(f"--sets {args.sets} --rounds {args.rounds}: sets of code and prose, at "
                 "least one round")
    continuous = args.batching == "continuous"
    bad = [b for b in args.batches if args.prompts % b]
    if bad and not continuous:
        ap.error(f"--prompts {args.prompts} is not a multiple of batch size {bad[0]}")

    short = [b for b in args.batches if continuous and args.prompts < 4 * b]
    if short:
        print(f"note: --prompts {args.prompts} on {short[0]} rows: the timed window ends once no "
              "prompt is left to take and a row stops, so it holds only each continuation's "
              f"first steps; give at least {4 * max(short)} prompts to time whole runs",
              file=sys.stderr)

    import torch

    from treeopt.demo import load
    from treeopt.demo.layout import demo_root
    from treeopt.demo.prompt_sets import PROMPT_SETS, prompt_set_selections
    from treeopt.pricing.selection import choose_drafter_per_set

    torch.set_num_threads(1)
    started = time.perf_counter()
    demo = load(demo_root(args.demo), threads=1, dtype=args.dtype)
    kinds = [k for k in demo.kinds if demo.step_profile(k) is not None]
    for line in demo.profiled_elsewhere():
        print(line, file=sys.stderr)
    if not demo.paths.prompts("prose").exists():
        print("the demo has no prose prompts: build it with the prose stage "
              "(treeopt demo build)", file=sys.stderr)
        return 2
    sets = prompt_set_selections(demo.paths, kinds)
    choices = {c.batch: c for c in choose_drafter_per_set(sets)}
    print(f"demo drafters {', '.join(kinds)}; {args.prompts} prompts per set × "
          f"{args.new_tokens} new tokens; {args.batching} batching; one thread, greedy; "
          "speed-ups over plain decoding in the same run")
    hits = total = ties = 0
    for name in (n for n in PROMPT_SETS if n in sets_raced):
        prompts = set_prompts(demo, name, args.prompts)
        print(f"\nprompt set {name}")
        print(f"{'batch':>5}  " + "  ".join(f"{k:>18}" for k in kinds)
              + f"  {'fastest':>14}  {'pick':>14}  {'robust':>14}  share")
        for b in args.batches:
            choice = choices[b]
            context = choice.context
            trees = {k: sets[name][k].tree_at(b, context) for k in kinds}
            drafted = frozenset(k for k in kinds if sets[name][k].point(b, context).drafted)
            rounds, equal, accepted, window, emitted = raced(
                demo, trees, prompts, b, args.new_tokens, rounds=args.rounds,
                continuous=continuous, drafted=drafted)
            measured = {k: float(np.median([r[k] for r in rounds])) for k in [*kinds, "none"]}
            predicted = choice.choices[name].speedups
            drafting = [k for k in kinds if trees[k].size]  # a 0-node pick decodes plainly
            fastest = max([*drafting, "none"], key=measured.__getitem__)
            pick = choice.drafters[name]
            share = measured[pick] / measured[fastest]
            noise = share_noise(rounds, pick, fastest)
            hits += pick == fastest
            ties += pick != fastest and noise is not None and 1 - share <= 2 * noise
            total += 1
            cells = "  ".join(
                f"{predicted.get(k, 1.0):5.2f}→{measured[k]:5.2f}×{'' if equal[k] else '!'}"
                f"{trees[k].size:>4}{'d' if k in drafted else 'n'}" for k in kinds)
            print(f"{b:5d}  {cells}  {fastest:>14}  {pick:>14}  {choice.robust:>14}  "
                  f"{share:5.1%}" + (f" ± {noise:.1%}" if noise is not None and pick != fastest
                                     else ""))
            priced = {k: sets[name][k].point(b, context).expected_accept_length for k in kinds}
            walk = walked(demo, name, trees, emitted, args.new_tokens)
            timed = {k: window[k] if trees[k].size else 1.0 for k in kinds}
            splits = {k: split_error(predicted.get(k, 1.0), measured[k], priced[k], timed[k])
                      for k in kinds}
            print(f"{'E[L]':>5}  " + "  ".join(
                f"{f'{priced[k]:.2f}→{walk[k]:.2f}→{accepted[k]:.2f}':>18}" for k in kinds))
            print(f"{'timed':>5}  " + "  ".join(f"{timed[k]:18.2f}" for k in kinds))
            print(f"{'miss':>5}  " + "  ".join(
                f"{f'{a - 1:+.1%} {c - 1:+.1%}':>18}" for a, c in (splits[k] for k in kinds)))
            lossy = [k for k in kinds if not equal[k]]
            if lossy:
                print(f"       outputs DIFFER from plain decoding: {', '.join(lossy)}")
    print(f"\n(each cell: predicted→measured speed-up, the tree's nodes (d: a chain verified "
          f"as drafted); ! marks an output that "
          f"differs; E[L] per step: predicted (the set's walk select priced) → these prompts' "
          f"own walk → live, over every step; timed: live E[L] in the steady window the "
          f"tokens/s counts, which ends where a row stops with no prompt left (with as many "
          f"prompts as rows: each continuation's first steps); miss: "
          f"the speed-up's miss split into acceptance (timed/predicted E[L]) and step cost "
          f"(predicted/live tree-step over autoregressive-step ratio), each −1)"
          f"\nchoose-drafter's pick measured fastest at {hits} of {total} (set, batch) "
          f"points" + (f", and within two standard errors of the fastest at {ties} more"
                       if args.rounds > 1 else "")
          + f" ({args.rounds} round{'s' if args.rounds > 1 else ''}; "
            f"{time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    from entry import run

    run(main)
