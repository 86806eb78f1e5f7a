"""What a demo rebuilt with another base shape would reach at batch 1, predicted by treeopt itself.

A rebuild costs hours on 2 cores, so its payoff is predicted first, the way a user would price a
model they have not trained yet: a random-weight Llama of the candidate shape (what a step costs
does not depend on the values) and random heads of the shipped demo's heads config, widened to
the shape, go through ``treeopt.profiling.step`` — the live decoder's own step, phase by phase (draft,
verify, bookkeeping), every tree of the shipped growth — and ``select`` prices every tree with
the shipped calibration trace's E[L]. The one assumption, printed with the result: a rebuilt
demo's heads accept as often as the shipped ones do.

The shipped demo's own shape is included as the control: its prediction next to what
``bench_live.py`` measured live says how far to trust the others.

Run: ``python benchmarks/bench_demo_shape.py [--shapes 128x8x384,128x16x384] [--kinds
hydra,medusa]`` (1 torch thread; a few minutes per shape and kind).
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

import torch

from treeopt.demo import load
from treeopt.documents.measure import Measurement
from treeopt.drafters.heads import build_heads
from treeopt.pricing.sources import profiled_costs
from treeopt.pricing.throughput import select
from treeopt.profiling.step import profile_steps

SHAPES = "128x8x384,128x16x384,128x24x384"
SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)


def random_base(shape: str, vocab: int):
    """A random fp32 Llama of ``hidden x layers x mlp`` (64-wide attention heads)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    hidden, layers, mlp = (int(x) for x in shape.split("x"))
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
                         intermediate_size=mlp, num_attention_heads=hidden // 64,
                         num_key_value_heads=hidden // 64, max_position_embeddings=1024,
                         tie_word_embeddings=True, attn_implementation="sdpa")
    torch.manual_seed(0)
    return LlamaForCausalLM(config).eval()


def predict(demo, kind: str, shape: str, out: Path) -> tuple[str, float, float, float]:
    """(pick, predicted speed-up, draft ms, AR step ms) at batch 1 for ``shape``."""
    model = random_base(shape, demo.model.config.vocab_size)
    cfg = dataclasses.replace(demo.heads[kind].config, hidden_size=model.config.hidden_size)
    heads = build_heads(cfg, lm_head=model.get_output_embeddings(),
                        embeddings=model.get_input_embeddings()).eval()
    torch.manual_seed(1)
    with torch.no_grad():  # zero-initialised heads would draft one token forever: no matter
        for p in heads.parameters():
            if p.requires_grad:
                p.normal_(0, 0.02)
    prompts = [demo.tokenizer(p)["input_ids"] for p in demo.prompts[:4]]
    path = out / f"step-{kind}-{shape}.json"
    profile_steps(model, heads, demo.growths[kind], prompts, batch=[1], out=path,
                  sizes=SIZES, max_new_tokens=64, measure=Measurement(rounds=3),
                  log=lambda _: None)
    costs = profiled_costs(path)
    pick = select(demo.growths[kind], costs.verify, draft=costs.draft, overhead=costs.overhead,
                  batch=[1], context=costs.verify.contexts, trace=demo.traces[kind]).points[0]
    ar = 1e3 / pick.autoregressive_tokens_per_s
    what = f"{pick.tree.size} nodes (cap {pick.max_depth})"
    return what, pick.speedup, pick.draft_ms, ar


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help="hidden x layers x mlp, comma-separated")
    ap.add_argument("--kinds", default="hydra,medusa")
    args = ap.parse_args()
    torch.set_num_threads(1)
    demo = load(None, threads=1)
    out = Path(tempfile.mkdtemp(prefix="bench-demo-shape-"))
    print("batch 1, fp32, 1 thread; E[L] from the shipped calibration trace (assumes a rebuilt "
          "demo's heads accept as the shipped ones do); the shipped shape is 128x8x384")
    print(f"{'kind':>7} {'shape':>11}  {'select picks':>18}  {'predicted':>9}  "
          f"{'draft ms':>8}  {'AR step ms':>10}")
    for kind in args.kinds.split(","):
        for shape in args.shapes.split(","):
            what, speedup, draft, ar = predict(demo, kind, shape, out)
            print(f"{kind:>7} {shape:>11}  {what:>18}  {speedup:8.3f}×  {draft:8.3f}  "
                  f"{ar:10.3f}", flush=True)


if __name__ == "__main__":
    main()
