"""Calibration cost: the one-pass rank trace vs a plain forward and vs a decoding loop.

Prints, for Medusa and Hydra heads on a randomly initialised Llama (random weights cost the same
time as trained ones):

- rank trace / plain teacher-forced forward over the same tokens (target: ≤ about 1.3×);
- step-by-step loop (one token at a time with a KV cache, the heads run at every step, as
  Medusa's heads_accuracy.py does) / rank trace (target: ≥ 10×), and the fraction of equal ranks.

Usage: python benchmarks/bench_calibrate.py [--device cpu|cuda] [--hidden 384 --layers 8 --vocab 2048]
The default shape keeps Llama-7B's proportions (body ≫ K vocabulary projections).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from treeopt.decoding.cache import new_cache
from treeopt.decoding.ranks import rank_batch
from treeopt.decoding.tree_forward import forward_with_cache
from treeopt.drafters import KIND_NAMES, build_heads
from treeopt.drafters.config import HeadsConfig
from treeopt.drafters.ranking import rank_of


def timed(fn, device, repeats):
    """Median and spread of ``repeats`` runs after one warm-up, synchronising on CUDA."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times), max(times)


def loop_ranks(model, heads, seq, start, top_k):
    """heads_accuracy.py style: decode the sequence one token at a time, run the heads each step."""
    K, device = heads.config.num_heads, seq.device
    cache, rows = new_cache(model), []
    with torch.inference_mode():
        _, h = forward_with_cache(model, seq[None, : start + 1], cache=cache,
                                  position_ids=torch.arange(start + 1, device=device)[None])
        for t in range(start, seq.shape[0] - 1 - K):
            hidden = heads.features(h)[0][:, -1:]
            row = []
            for k in range(K):
                logits = heads.head_logits(k, hidden, seq[t + 1: t + 2 + k][None, None])[0, 0]
                r = int(rank_of(logits, seq[t + 2 + k]))
                row.append(r if r < top_k else -1)
            rows.append(row)
            _, h2 = forward_with_cache(model, seq[None, t + 1: t + 2], cache=cache,
                                       position_ids=torch.tensor([[t + 1]], device=device))
            h = torch.cat([h, h2], dim=1) if heads.config.prefix_attention else h2
    return np.asarray(rows, dtype=np.int16)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                      intermediate_size=int(args.hidden * 8 / 3), num_hidden_layers=args.layers,
                      num_attention_heads=max(1, args.hidden // 64),
                      max_position_embeddings=4 * args.tokens)
    model = LlamaForCausalLM(cfg).to(device).eval()
    ids = torch.randint(0, args.vocab, (args.batch, args.tokens), device=device)
    seqs = ids.tolist()
    starts = [15] * args.batch
    print(f"model: hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}; "
          f"{args.batch} × {args.tokens} tokens; {args.heads} heads; device {device}; "
          f"torch threads {torch.get_num_threads()}")

    def plain():
        with torch.inference_mode():
            model(input_ids=ids, use_cache=False)

    base, lo, hi = timed(plain, device, args.repeats)
    print(f"plain teacher-forced forward: {base * 1e3:.1f} ms (min {lo * 1e3:.1f}, "
          f"max {hi * 1e3:.1f})")
    for kind in KIND_NAMES:
        heads = build_heads(HeadsConfig(kind=kind, num_heads=args.heads, hidden_size=args.hidden,
                                        vocab_size=args.vocab),
                            lm_head=model.lm_head, embeddings=model.model.embed_tokens)
        heads.to(device).eval()
        with torch.no_grad():
            for p in heads.parameters():
                if p.requires_grad:
                    p.add_(torch.randn_like(p) * 0.02)
        t_rank, lo, hi = timed(lambda h=heads: rank_batch(model, h, seqs, starts, top_k=16),
                               device, args.repeats)
        fast = np.concatenate(rank_batch(model, heads, seqs, starts, top_k=16))
        t0 = time.perf_counter()
        slow = np.concatenate([loop_ranks(model, heads, ids[i], starts[i], 16)
                               for i in range(args.batch)])
        t_loop = time.perf_counter() - t0
        print(f"{kind:6s} rank trace: {t_rank * 1e3:.1f} ms (min {lo * 1e3:.1f}, max "
              f"{hi * 1e3:.1f}) = {t_rank / base:.2f}× plain forward | step-by-step loop: "
              f"{t_loop * 1e3:.0f} ms = {t_loop / t_rank:.1f}× the rank trace | "
              f"{fast.size} ranks, {np.mean(fast == slow) * 100:.2f}% equal")


if __name__ == "__main__":
    main()
