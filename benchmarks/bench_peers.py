"""treeopt against the decoders a user would pick instead, on the shipped demo (never a test).

On the same held-out prompts, in one process with one torch thread, the decoders run in turn,
prompt after prompt (the order rotated each prompt, so a shared host's drifting speed meets them
all alike), for ``--rounds`` rounds:

- Hugging Face ``generate``: plain greedy; prompt lookup with ``prompt_lookup_num_tokens`` 4
  and 10 (``max_matching_ngram_size`` left at its default, 2); assisted generation with the
  demo's draft model as the assistant (its own defaults: 20 assistant tokens, heuristic
  schedule);
- treeopt: autoregressive decoding in its own loop; for each drafter the demo ships, the tree
  ``treeopt select --demo KIND`` picks at batch 1; the drafter ``treeopt choose-drafter``
  recommends at batch 1 (its pick again, labelled). A demo built before prompt lookup was added
  ships no prompt-lookup pricing: then prompt-lookup chains of 4 and 10 tokens run instead (the
  settings of Hugging Face's two runs), labelled as fixed settings.

Every decoder stops at the tokenizer's EOS, as ``generate`` does by default. Every output is
checked equal to Hugging Face's plain greedy output of the same prompt (a
decoder whose output differs is reported as lossy and ranked out). Printed: each decoder's
tokens/s (new tokens over its own seconds, prefill included, as ``generate`` is timed), its ratio
to HF plain greedy, and the ratio of treeopt's recommendation to the best Hugging Face option
— the issue's goal is ≥ 1.2×.

Run: ``python benchmarks/bench_peers.py [--prompts 16] [--new-tokens 128] [--rounds 2]
[--out peers.json]`` on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

Decode = Callable[[list[int]], list[int]]


@dataclass
class Peer:
    """One decoder: its label, who makes it, and what it has done so far."""

    name: str
    family: str  # "hf" or "treeopt"
    run: Decode
    kind: str | None = None  # treeopt's drafter kind, where a drafter drafts
    seconds: float = 0.0
    tokens: int = 0
    lossy: list[int] = field(default_factory=list)  # prompts whose output differed from greedy

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def hf_peers(model, draft_dir: Path | None, new_tokens: int, eos: int | None) -> list[Peer]:
    """Hugging Face ``generate`` as a user would call it (greedy throughout, stopping at
    ``eos``)."""
    import torch

    def generate(**extra) -> Decode:
        def run(ids: list[int]) -> list[int]:
            x = torch.tensor([ids])
            out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                                 max_new_tokens=new_tokens, eos_token_id=eos,
                                 pad_token_id=model.config.pad_token_id or 0, **extra)
            return out[0, len(ids):].tolist()
        return run

    peers = [Peer("HF generate, plain greedy", "hf", generate()),
             Peer("HF prompt lookup, 4 tokens", "hf", generate(prompt_lookup_num_tokens=4)),
             Peer("HF prompt lookup, 10 tokens", "hf", generate(prompt_lookup_num_tokens=10))]
    if draft_dir is not None and (draft_dir / "config.json").is_file():
        from transformers import AutoModelForCausalLM

        assistant = AutoModelForCausalLM.from_pretrained(
            draft_dir, local_files_only=True, dtype=torch.float32).eval()
        peers.append(Peer("HF assisted generation, the demo's draft model", "hf",
                          generate(assistant_model=assistant)))
    return peers


def treeopt_peers(demo, new_tokens: int, eos: int | None) -> tuple[list[Peer], str | None]:
    """treeopt's loop: autoregressive, each drafter's batch-1 pick, and the recommendation
    (stopping at ``eos``, as ``generate`` does)."""
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.loop import Decoder
    from treeopt.selection import choose_drafter
    from treeopt.tree import Tree
    from treeopt.workbench.pricing import demo_pricing

    cfg = DecodeConfig(max_new_tokens=new_tokens, eos_token_id=eos)

    def decoder(heads, tree: Tree) -> Decode:
        dec = Decoder(demo.model, heads if tree.size else None)
        return lambda ids: list(dec.decode(tree, [ids], config=cfg).tokens[0])

    peers = [Peer("treeopt autoregressive", "treeopt", decoder(None, Tree(())))]
    selections = {}
    for kind in demo.kinds:
        priced = demo_pricing(demo, kind)
        if priced is None:
            continue
        selections[kind] = priced.selection
        tree = priced.selection.tree_at(1, min(priced.selection.contexts))
        peers.append(Peer(f"treeopt {kind}, select's pick ({tree.size} nodes, depth "
                          f"{tree.depth})", "treeopt", decoder(demo.heads[kind], tree), kind))
    if "prompt-lookup" not in selections:  # a demo built before prompt lookup was added
        from treeopt.drafters.prompt_lookup import PromptLookup

        lookup = PromptLookup(depth=10, max_n=2, vocab_size=len(demo.tokenizer))
        for k in (4, 10):
            peers.append(Peer(f"treeopt prompt lookup, chain of {k} (fixed setting)", "treeopt",
                              decoder(lookup, Tree.chain(k))))
    choice = next((c for c in choose_drafter(selections) if c.batch == 1), None)
    drafter = choice.drafter if choice is not None else None
    return peers, next((p.name for p in peers if p.kind == drafter), None)


def race(peers: Sequence[Peer], prompts: Sequence[list[int]], reference: Sequence[list[int]],
         rounds: int) -> None:
    """Every peer decodes every prompt ``rounds`` times, peers in turn, order rotated."""
    n = len(peers)
    for r in range(rounds):
        for i, ids in enumerate(prompts):
            for j in range(n):
                peer = peers[(i + r + j) % n]
                start = time.perf_counter()
                out = peer.run(ids)
                peer.seconds += time.perf_counter() - start
                peer.tokens += len(out)
                if out != reference[i] and i not in peer.lossy:
                    peer.lossy.append(i)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=16, help="held-out prompts (default 16)")
    ap.add_argument("--new-tokens", type=int, default=128, help="new tokens each (default 128)")
    ap.add_argument("--rounds", type=int, default=2, help="passes over the prompts (default 2)")
    ap.add_argument("--out", type=Path, help="also write the figures as JSON here")
    args = ap.parse_args(argv)

    import torch
    from transformers.utils import logging

    from treeopt.demo import load

    logging.set_verbosity_error()
    torch.set_num_threads(1)
    demo = load(threads=1)
    eos = demo.tokenizer.eos_token_id
    prompts = [demo.tokenizer(t)["input_ids"] for t in demo.prompts[: args.prompts]]
    hf = hf_peers(demo.model, demo.paths.heads("draft-model"), args.new_tokens, eos)
    ours, recommended = treeopt_peers(demo, args.new_tokens, eos)
    peers = [*hf, *ours]
    reference = [hf[0].run(ids) for ids in prompts]  # HF plain greedy: what every output must be
    for peer in peers:  # warm up every code path once, untimed
        peer.run(prompts[0][:8])
    race(peers, prompts, reference, args.rounds)

    plain = hf[0].tokens_per_s
    honest = [p for p in peers if not p.lossy]
    best_hf = max((p for p in honest if p.family == "hf"), key=lambda p: p.tokens_per_s)
    print(f"{args.prompts} held-out prompts × {args.new_tokens} new tokens, {args.rounds} "
          f"rounds, one thread, greedy; every output compared with HF plain greedy")
    print(f"{'decoder':62} {'tokens/s':>9} {'vs HF plain':>12}  output")
    for p in peers:
        mark = " ← recommended" if p.name == recommended else ""
        said = "equal" if not p.lossy else f"DIFFERS on prompts {p.lossy}"
        print(f"{p.name:62} {p.tokens_per_s:9.1f} {p.tokens_per_s / plain:11.2f}×  {said}{mark}")
    print(f"best Hugging Face option: {best_hf.name} ({best_hf.tokens_per_s:.1f} tokens/s)")
    doc = {"prompts": args.prompts, "new_tokens": args.new_tokens, "rounds": args.rounds,
           "peers": [{"name": p.name, "family": p.family, "tokens_per_s": p.tokens_per_s,
                      "lossless": not p.lossy} for p in peers],
           "best_hf": best_hf.name, "recommended": recommended}
    if recommended is not None:
        rec = next(p for p in peers if p.name == recommended)
        ratio = rec.tokens_per_s / best_hf.tokens_per_s
        verdict = "met" if ratio >= 1.2 and not rec.lossy else "NOT met"
        print(f"treeopt's recommendation / best HF option: {ratio:.2f}× (goal ≥ 1.20×: {verdict})")
        doc["recommended_over_best_hf"] = ratio
    else:
        print("choose-drafter made no recommendation at batch 1 (no step profiles)")
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
