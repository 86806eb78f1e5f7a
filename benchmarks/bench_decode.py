"""Fidelity and speed of live tree decoding on CPU (or GPU with --device cuda).

1. A small Llama (random weights with a sharpened LM head, so that its greedy text is
   predictable, as a trained model's is) and heads trained by self-distillation on its own
   greedy continuations of a set of training prompts.
2. Calibration on prompts A → rank trace → grow (empirical) → trees T_n.
3. Live greedy decoding on held-out prompts B: measured mean accepted length beside the E[L]
   the trace predicts (target: within 3%), outputs checked identical to autoregressive decoding,
   tokens/s of tree vs autoregressive decoding through the same loop.

Usage: python benchmarks/bench_decode.py [--device cpu] [--kind medusa|hydra|both]
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from treeopt.decoding.calibrate import CalibrateConfig, calibrate
from treeopt.decoding.compare import compare
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.rank_pass import greedy_continuations
from treeopt.drafters.training import TrainConfig, train_heads
from treeopt.model.growth import grow
from treeopt.model.simulation import simulate
from treeopt.registry.kinds import TRAINED_KINDS


def build_model(args, device):
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden,
                      intermediate_size=3 * args.hidden, num_hidden_layers=args.layers,
                      num_attention_heads=max(1, args.hidden // 32), max_position_embeddings=1024)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(args.sharpen)
    return model.to(device)


def prompts(n, length, vocab, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (length,), generator=gen).tolist() for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--kind", default="both", choices=(*TRAINED_KINDS, "both"))
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--sharpen", type=float, default=20.0)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--sizes", default="4,16,48")
    ap.add_argument("--train-steps", type=int, default=300)
    args = ap.parse_args()
    device = torch.device(args.device)
    model = build_model(args, device)
    train_text = greedy_continuations(model, prompts(64, 8, args.vocab, 1),
                                      max_new_tokens=args.new_tokens)
    calib, held_out = prompts(48, 8, args.vocab, 2), prompts(24, 8, args.vocab, 3)
    cfg = DecodeConfig(max_new_tokens=args.new_tokens)
    kinds = ("medusa", "hydra") if args.kind == "both" else (args.kind,)
    print(f"model: hidden {args.hidden}, {args.layers} layers, vocab {args.vocab}, device "
          f"{device}, torch threads {torch.get_num_threads()}; calibration on {len(calib)} "
          f"prompts, decoding {len(held_out)} held-out prompts × {args.new_tokens} tokens")
    for kind in kinds:
        t = time.perf_counter()
        heads, hist = train_heads(model, train_text, TrainConfig(
            kind=kind, num_heads=4, steps=args.train_steps, batch_size=16, seq_len=64, lr=3e-3))
        print(f"\n{kind}: trained {args.train_steps} steps in {time.perf_counter() - t:.0f} s, loss "
              f"{hist[0]['loss']:.2f} → {hist[-1]['loss']:.2f}")
        out = f"/tmp/bench_decode_{kind}_{time.time_ns()}.npz"
        trace, _ = calibrate(model, heads, calib, out,
                             config=CalibrateConfig(top_k=16, max_new_tokens=args.new_tokens,
                                                    batch_size=16))
        growth = grow(trace, method="empirical", max_nodes=max(map(int, args.sizes.split(","))))
        print(f"  trace: {trace.positions} positions")
        for n in map(int, args.sizes.split(",")):
            tree = growth.tree(n)
            result = compare(model, heads, tree, held_out, config=cfg, split=True)
            stats = result.tree_stats
            pred = simulate(tree, trace)
            step_pred = simulate(tree, trace, per_step=True).mean_accept_length
            measured = stats.mean_accept_length
            rel = (measured - pred.mean_accept_length) / pred.mean_accept_length
            split = result.to_dict()["tree_decoding"]["ms_per_step"]
            print(f"  T_{n:<3d} depth {tree.depth}: measured L {measured:.3f} ± {stats.stderr:.3f}"
                  f" | position-weighted E[L] {pred.mean_accept_length:.3f} ({rel * 100:+.1f}%)"
                  f" | per-step walk on the trace {step_pred:.3f} "
                  f"({(measured - step_pred) / step_pred * 100:+.1f}%)")
            print(f"        {stats.tokens_per_s:.1f} tokens/s = {result.speedup:.2f}× AR "
                  f"({result.autoregressive_stats.tokens_per_s:.1f}) | lossless "
                  f"{result.lossless} | ms per step draft/verify/book {split['draft']:.2f}/"
                  f"{split['verify']:.2f}/{split['bookkeeping']:.2f}")

if __name__ == "__main__":
    main()
