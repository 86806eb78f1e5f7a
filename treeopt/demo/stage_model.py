"""The first stages of a demo build, in order: the corpus's tokenizer, the calibration and
held-out prompts, and the base model (trained here, or a pretrained one recorded). Each returns
the JSON record the manifest keeps."""

from __future__ import annotations

from typing import Any

import numpy as np

from treeopt.demo.context import Context
from treeopt.files import read_json, write_json


def corpus_and_tokenizer(ctx: Context) -> dict[str, Any]:
    from treeopt.demo.tokenizer import train_tokenizer

    if ctx.config.base_model is not None:  # the pretrained base's own tokenizer
        from treeopt.demo.pretrained import tokenizer_stage

        return tokenizer_stage(ctx)
    tok = train_tokenizer([f.text for f in ctx.corpus.train], vocab_size=ctx.config.vocab_size)
    tok.save_pretrained(str(ctx.paths.model))
    ctx.reload("tokenizer")
    counts = {part: int(len(ctx.stream(part))) for part in ("train", "calibration", "heldout")}
    return {"corpus": ctx.corpus.summary(), "vocab_size": len(tok), "tokens": counts}


def prompts(ctx: Context) -> dict[str, Any]:
    from treeopt.demo.corpus_prompts import sample_prompts, write_prompts

    c, out = ctx.config, {}
    if c.prompt_set is not None:  # a prompt set of its own, copied
        from treeopt.demo.pretrained import prompts_stage

        return prompts_stage(ctx)
    pool = ctx.corpus.calibration + ctx.corpus.heldout  # files no training step has seen
    found = sample_prompts(pool, ctx.tokenizer, count=c.calibration_prompts + c.heldout_prompts,
                           min_tokens=c.prompt_tokens[0], max_tokens=c.prompt_tokens[1],
                           seed=c.seed + 11)  # in random order, every prompt at its own place
    for part, chosen in (("calibration", found[: c.calibration_prompts]),
                         ("heldout", found[c.calibration_prompts:])):
        write_prompts(ctx.paths.prompts(part), chosen)
        out[part] = {"count": len(chosen), "file": ctx.paths.prompts(part).name,
                     "files": len({p["source"] for p in chosen})}
    return out


def base_model(ctx: Context) -> dict[str, Any]:
    import torch

    from treeopt.demo.base_model import heldout_loss, new_model, train_base

    c = ctx.config
    if c.base_model is not None:  # recorded, not trained, never copied
        from treeopt.demo.pretrained import base_stage

        return base_stage(ctx)
    model = new_model(c.base, len(ctx.tokenizer), seed=c.seed)
    bar = ctx.bar(c.base.steps, "base model")
    checkpoint = ctx.scratch / "base-checkpoint.pt"  # an interrupted training resumes from it
    ditto_file = ctx.scratch / "base-before-ditto.json"
    # held-out loss when the DITTO phase starts: its cost (kept on disk across a resume)
    before_ditto: dict[str, float] = read_json(ditto_file) if ditto_file.exists() else {}

    def tick(step: int, loss: float) -> None:
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}")
        if step % max(1, c.base.steps // 10) == 0:
            ctx.log(f"  base step {step}/{c.base.steps} loss {loss:.3f}")
        if step == c.base.ditto_start < c.base.steps:
            before_ditto.update(heldout_loss(model, ctx.stream("heldout"), seq_len=c.base.seq_len))
            write_json(ditto_file, before_ditto)
            ctx.log(f"  held-out loss {before_ditto['loss']:.3f} before the DITTO phase")

    if checkpoint.exists():
        ctx.log("  resuming the base model's training from its last checkpoint")
    losses = train_base(model, ctx.stream("train"), c.base, seed=c.seed, device=c.device,
                        progress=tick, checkpoint=checkpoint)
    bar.close()
    model.to(torch.float16).save_pretrained(str(ctx.paths.model))
    checkpoint.unlink(missing_ok=True)
    ctx.reload("model")
    heldout = heldout_loss(ctx.model, ctx.stream("heldout"), seq_len=c.base.seq_len)
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "train_tokens": c.base.train_tokens,
            "loss_first": losses[0], "loss_last_10": float(np.mean(losses[-10:])),
            "heldout": heldout, "heldout_before_ditto": before_ditto or None}
