"""The trained-drafter stages of a demo build: the self-distillation head data, the heads
stage, and the training of one drafter of a kind (heads, EAGLE, a draft model; an n-gram
drafter's settings, which need no training)."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from treeopt.demo.config import DemoConfig
from treeopt.demo.context import Context
from treeopt.demo.layout import KINDS
from treeopt.demo.stage_kinds import trained_kinds
from treeopt.demo.stage_traces import warmed_drafter
from treeopt.registry.kinds import drafter_kind

DRAFTERS = KINDS  # a drafter's training seed is its place here


def head_data(ctx: Context) -> dict[str, Any]:
    """Self-distillation data: train-part prompts continued greedily by the base model, so the
    heads learn on the text they will draft for (Medusa-2's and Hydra's recipe)."""
    from treeopt.decoding.rank_pass import greedy_continuations
    from treeopt.demo.corpus_prompts import sample_prompts

    c = ctx.config
    if not trained_kinds(c):
        return {"skipped": "no trained drafter in the build's kinds"}
    found = sample_prompts(ctx.corpus.train, ctx.tokenizer, count=c.head_data_prompts,
                           min_tokens=c.prompt_tokens[0], max_tokens=c.prompt_tokens[1],
                           seed=c.seed + 13)
    prompts = [ctx.tokenizer(f["prompt"])["input_ids"] for f in found]
    bar = ctx.bar(-(-len(prompts) // 64), "head data")
    rows = []
    for i in range(0, len(prompts), 64):
        batch = prompts[i: i + 64]
        new = c.head_seq_len - min(len(p) for p in batch)
        rows += [s[: c.head_seq_len] for s in greedy_continuations(ctx.model, batch,
                                                                    max_new_tokens=new)]
        bar.update(1)
    bar.close()
    np.save(ctx.scratch / "head-data.npy", np.asarray(rows, dtype=np.int32))
    return {"sequences": len(rows), "tokens": len(rows) * c.head_seq_len,
            "source": "train-part prompts continued greedily by the base model"}


def heads(ctx: Context) -> dict[str, Any]:
    return {kind: train_drafter(ctx, kind) for kind in ctx.kinds}


def ngram_drafter(kind: str, c: DemoConfig, *, vocab_size: int) -> tuple[Any, dict[str, Any]]:
    """The demo's n-gram drafter of ``kind`` (prompt lookup, the n-gram trie or suffix decoding)
    and its settings, as its stage record keeps them: the config's depth and longest match for
    it, named as the registry's ``max_match`` says, and a trie's first order of children.

    >>> from treeopt.demo.config import TINY
    >>> [ngram_drafter(k, TINY, vocab_size=320)[1] for k in ("prompt-lookup", "ngram-trie")]
    [{'depth': 4, 'min_n': 1, 'max_n': 3}, {'depth': 3, 'max_trie_depth': 18, 'match': 'bfs'}]
    >>> ngram_drafter("suffix", TINY, vocab_size=320)[1]
    {'depth': 3}
    """
    from treeopt.drafters.heads import drafter_class

    spec = drafter_kind(kind)
    if spec.request_cache:  # suffix decoding: the trie's depth, vLLM's defaults otherwise
        settings = {"depth": c.trie_depth}
    elif spec.match_types:  # a trie: its depth and longest path, its first order of children
        settings = {"depth": c.trie_depth, spec.max_match: c.trie_max_depth,
                    "match": spec.match_types[0]}
    else:  # prompt lookup: n-grams of one token up to the longest
        settings = {"depth": c.lookup_depth, "min_n": 1, spec.max_match: c.lookup_max_n}
    return drafter_class(spec)(**settings, vocab_size=vocab_size), settings


FULL_VOCABULARY = 8192  # up to this vocabulary, heads train against the teacher's whole


def teacher_top_k(vocab_size: int) -> int:
    """The teacher's tokens per position a demo's heads train against: every one on a small
    vocabulary (the demo's own 4,096), the 64 most probable on a real one (SmolLM2's 49,152:
    the full softmax cost more than the rest of a step; :mod:`treeopt.drafters.vocabulary`).

    >>> teacher_top_k(4096), teacher_top_k(49152)
    (0, 64)
    """
    return 0 if vocab_size <= FULL_VOCABULARY else 64


def train_drafter(ctx: Context, kind: str) -> dict[str, Any]:
    """Train the ``kind`` drafter on the head data (self-distillation) and ship it in 16 bits:
    heads and EAGLE as heads directories, a draft model as a Hugging Face model directory;
    n-gram drafters have no weights: their settings are written (``drafter.json``; suffix
    decoding's with its history, :func:`~treeopt.demo.stage_traces.warmed_drafter`)."""
    import torch

    from treeopt.drafters.checkpoints import save_heads
    from treeopt.drafters.training import TrainConfig, distill_draft_model, train_heads
    from treeopt.registry.kinds import drafter_kind

    c = ctx.config
    if drafter_kind(kind).lookup:  # n-gram drafting: settings, nothing to train
        ctx.paths.heads(kind).mkdir(parents=True, exist_ok=True)
        drafter, settings = ngram_drafter(kind, c, vocab_size=ctx.vocab_size)
        if drafter.kind.request_cache:  # warmed by the calibration prompts' responses
            drafter = warmed_drafter(ctx, drafter)
            settings["history"] = drafter.config.history
        drafter.save(ctx.paths.heads(kind))
        return {"steps": 0, "weights": 0, **settings}
    path = ctx.scratch / "head-data.npy"
    if not path.exists():  # scratch is not shipped: a build seeded from a finished demo remakes it
        head_data(ctx)
    rows = np.load(path).tolist()
    layers = c.layers_of(kind)
    cfg = TrainConfig(kind=kind, num_heads=c.num_heads, num_layers=layers,
                      share_lm_head=True, steps=c.head_steps, batch_size=c.head_batch,
                      prefix_attention=c.head_prefix_attention
                      and drafter_kind(kind).prefix_attention, seq_len=c.head_seq_len,
                      lr=c.lr_of(kind), warmup=max(1, c.head_steps // 20),
                      seed=c.seed + 1 + DRAFTERS.index(kind),
                      teacher_top_k=teacher_top_k(ctx.vocab_size))
    bar = ctx.bar(c.head_steps, f"{kind} drafter")

    def tick(step: int, total: int, loss: float) -> None:
        bar.update(1)

    checkpoint = ctx.scratch / f"train-{kind}-checkpoint.pt"  # an interruption resumes here
    if drafter_kind(kind).trained:
        teacher = ctx.bar(len(rows), f"{kind} teacher (top {cfg.teacher_top_k})")
        trained, history = train_heads(
            ctx.model, rows, cfg, progress=tick, checkpoint=checkpoint,
            teacher_progress=lambda i, n: teacher.update(i - teacher.n))
        teacher.close()
        save_heads(copy.deepcopy(trained).to(torch.float16), ctx.paths.heads(kind),
                   meta={"training": {**cfg.__dict__},
                         "data": "train-part prompts continued greedily by the base model"})
    else:  # a draft model: a one-layer copy of the base model, distilled
        from treeopt.drafters.draft_model import DraftModel

        lm, history = distill_draft_model(ctx.model, rows, cfg, layers=layers, progress=tick,
                                          checkpoint=checkpoint)
        DraftModel(lm.to(torch.float16), depth=c.num_heads).save(ctx.paths.heads(kind),
                                                                 tokenizer=ctx.tokenizer)
    bar.close()
    checkpoint.unlink(missing_ok=True)
    last = history[-max(1, len(history) // 10):]
    out = {"steps": c.head_steps, "tokens": c.head_steps * c.head_batch * c.head_seq_len,
           "layers": layers, "prefix_attention": cfg.prefix_attention,
           "loss_last": float(np.mean([h["loss"] for h in last])),
           "top1_agreement": np.mean([h["top1_agreement"] for h in last], 0).tolist()}
    ctx.log(f"  {kind}: top-1 agreement per depth {out['top1_agreement']}")
    return out
