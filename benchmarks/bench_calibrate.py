"""Calibration cost: the one-pass rank trace vs a plain forward and vs a decoding loop.

Prints, for every drafter kind on a randomly initialised Llama (random weights cost the same
time as trained ones): Medusa and Hydra heads, an EAGLE and an EAGLE-3 drafter (one decoder
layer each) and a draft model (the base model's shape with one layer):

- rank trace / plain teacher-forced forward over the same tokens (target for heads: ≤ about
  1.3×); for the draft model against one plain forward of base + draft (target ≤ 1.3×); for
  EAGLE against one base forward plus (depth + 1) plain passes of the drafter, each its layer
  and its LM-head logits over every position (target ≤ 1×);
- step-by-step loop (one token at a time with a KV cache, the drafter run at every step as it
  runs live — heads as Medusa's heads_accuracy.py does, the draft model and EAGLE along the true
  path from their own caches) / rank trace (target: ≥ 10×), and the fraction of equal ranks.

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
from treeopt.decoding.drafter import pick_features
from treeopt.decoding.rank_pass import rank_batch
from treeopt.decoding.token_order import rank_of
from treeopt.decoding.tree_forward import forward_with_cache
from treeopt.drafters.heads import build_heads
from treeopt.registry.drafter_configs import HeadsConfig, default_feature_layers


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


def loop_ranks_draft_model(model, drafter, seq, start, top_k):
    """Decode with the base model one token at a time; at each step run the draft model along the
    true path from its own cache (K cached steps), then roll its cache back."""
    K, device = drafter.config.num_heads, seq.device
    lm, cache, dcache, rows = drafter.lm, new_cache(model), new_cache(drafter.lm), []
    with torch.inference_mode():
        forward_with_cache(model, seq[None, : start + 1], cache=cache,
                           position_ids=torch.arange(start + 1, device=device)[None])
        forward_with_cache(lm, seq[None, : start + 1], cache=dcache,
                           position_ids=torch.arange(start + 1, device=device)[None])
        for t in range(start, seq.shape[0] - 1 - K):
            row = []
            for k in range(K):  # feed x_{t+1+k}: its logits rank x_{t+2+k}
                j = t + 1 + k
                logits, _ = forward_with_cache(lm, seq[None, j: j + 1], cache=dcache,
                                               position_ids=torch.tensor([[j]], device=device))
                r = int(rank_of(logits[0, -1], seq[t + 2 + k]))
                row.append(r if r < top_k else -1)
            rows.append(row)
            if K > 1:
                dcache.crop(-(K - 1))  # keep the prefix and x_{t+1}
            forward_with_cache(model, seq[None, t + 1: t + 2], cache=cache,
                               position_ids=torch.tensor([[t + 1]], device=device))
    return np.asarray(rows, dtype=np.int16)


def loop_ranks_eagle(model, drafter, seq, start, top_k):
    """Decode with the base model one token at a time; at each step feed the drafter the new true
    entry from its cache, then run its chain along the true path (K - 1 more calls), as live."""
    K, device = drafter.config.num_heads, seq.device
    cache, rows = new_cache(model), []
    state = drafter.start(batch=1, capacity=seq.shape[0] + K + 2)
    one = torch.ones(1, dtype=torch.long, device=device)
    with torch.inference_mode():
        _, h = forward_with_cache(model, seq[None, : start + 1], cache=cache,
                                  position_ids=torch.arange(start + 1, device=device)[None],
                                  layers=drafter.feature_layers)
        index = torch.arange(start + 1, device=device)[None]
        count = torch.tensor([start + 1], device=device)
        for t in range(start, seq.shape[0] - 1 - K):
            drafter.advance(h, seq[None, : h.shape[1]] if t == start else seq[None, t: t + 1],
                            index, count, seq[t + 1: t + 2], state)
            g = drafter._catch_up(state)  # noqa: SLF001  (the live step's first call)
            row = []
            for k in range(K):
                r = int(rank_of(drafter.logits(g)[0], seq[t + 2 + k]))
                row.append(r if r < top_k else -1)
                if k + 1 < K:
                    x = drafter.entries(seq[None, None, t + 2 + k], g[:, None])
                    g = drafter._forward(  # noqa: SLF001
                        state, x, k, torch.ones(1, k + 1, dtype=torch.bool, device=device),
                        positions=state.lengths[:, None] + k)[:, 0]
            rows.append(row)
            _, h = forward_with_cache(model, seq[None, t + 1: t + 2], cache=cache,
                                      position_ids=torch.tensor([[t + 1]], device=device),
                                      layers=drafter.feature_layers)
            index, count = torch.zeros(1, 1, dtype=torch.long, device=device), one
    return np.asarray(rows, dtype=np.int16)


def make_drafter(kind, model, args, device):
    """A drafter of ``kind`` for ``model``, its weights perturbed from their initial values."""
    import copy

    from treeopt.drafters.draft_model import DraftModel

    if kind == "draft-model":
        cfg = copy.deepcopy(model.config)
        cfg.num_hidden_layers = 1
        return DraftModel(LlamaForCausalLM(cfg).to(device).eval(), depth=args.heads)
    drafter = build_heads(HeadsConfig(kind=kind, num_heads=args.heads, hidden_size=args.hidden,
                                      vocab_size=args.vocab, share_lm_head=kind == "eagle",
                                      attention_heads=max(1, args.hidden // 64),
                                      feature_layers=default_feature_layers(args.layers)
                                      if kind == "eagle3" else ()),
                          lm_head=model.lm_head, embeddings=model.model.embed_tokens)
    drafter.to(device).eval()
    with torch.no_grad():
        for p in drafter.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.02)
    return drafter


def reference_cost(kind, drafter, model, ids, base, device, repeats):
    """What the rank trace is measured against: one plain forward of the base model (heads), of
    base + draft model, or of base + (depth + 1) plain passes of the EAGLE drafter."""
    if kind == "draft-model":
        def draft():
            with torch.inference_mode():
                drafter.lm(input_ids=ids, use_cache=False)

        return base + timed(draft, device, repeats)[0], "base + draft forward"
    if kind in ("eagle", "eagle3"):
        with torch.inference_mode():
            hidden = pick_features(model(input_ids=ids, output_hidden_states=True).hidden_states,
                                   drafter.feature_layers)

        def one_pass():  # what one drafter call does live: its layer and its LM-head logits
            with torch.inference_mode():
                drafter.logits(drafter.chains(hidden, ids, 1)[0])

        passes = drafter.config.num_heads + 1
        return base + passes * timed(one_pass, device, repeats)[0], \
            f"base forward + {passes} drafter passes"
    return base, "plain forward"


# the drafters measured, as the docstring names them (the registry's other kinds — MTP, the
# weightless n-gram drafters, the hybrids — are not built by make_drafter nor walked by a loop here)
KINDS_MEASURED = ("medusa", "hydra", "eagle", "eagle3", "draft-model")
GOALS = {"eagle": 1.0, "eagle3": 1.0}  # × the reference; heads and the draft model: 1.3×
LOOPS = {"draft-model": loop_ranks_draft_model, "eagle": loop_ranks_eagle,
         "eagle3": loop_ranks_eagle}


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
    for kind in KINDS_MEASURED:
        heads = make_drafter(kind, model, args, device)
        t_rank, lo, hi = timed(lambda h=heads: rank_batch(model, h, seqs, starts, top_k=16),
                               device, args.repeats)
        reference, what = reference_cost(kind, heads, model, ids, base, device, args.repeats)
        fast = np.concatenate(rank_batch(model, heads, seqs, starts, top_k=16))
        loop = LOOPS.get(kind, loop_ranks)
        t0 = time.perf_counter()
        slow = np.concatenate([loop(model, heads, ids[i], starts[i], 16)
                               for i in range(args.batch)])
        t_loop = time.perf_counter() - t0
        print(f"{kind:11s} rank trace: {t_rank * 1e3:.1f} ms (min {lo * 1e3:.1f}, max "
              f"{hi * 1e3:.1f}) = {t_rank / reference:.2f}× {what} | step-by-step loop: "
              f"{t_loop * 1e3:.0f} ms = {t_loop / t_rank:.1f}× the rank trace | "
              f"{fast.size} ranks, {np.mean(fast == slow) * 100:.2f}% equal")
        limit = GOALS.get(kind, 1.3)
        print(f"{'':11s} goals: ≤ {limit:g}× {what}: "
              f"{'met' if t_rank / reference <= limit else 'NOT met'}; ≥ 10× faster than the "
              f"loop: {'met' if t_loop / t_rank >= 10 else 'NOT met'}")


if __name__ == "__main__":
    main()
