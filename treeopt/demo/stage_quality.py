"""The quality stage of a demo build: live greedy decoding of each drafter's trees on the
held-out prompts (lossless against autoregressive decoding, the accepted length beside the
traces' prediction), and the repetition of the base model's text beside that of the real text
and of a looping untrained model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from treeopt.demo.context import Context


def quality(ctx: Context) -> dict[str, Any]:
    prompt_ids = ctx.prompt_ids("heldout")
    reference, ar = ctx.reference()
    live = {kind: kind_quality(ctx, kind, reference) for kind in ctx.kinds}
    return {"autoregressive": ar, "repetition_8gram": ar["repetition_8gram"],
            "heldout_text_repetition_8gram": _text_repetition(ctx),
            "looping_reference": _looping_reference(ctx, prompt_ids), "live": live}


def kind_quality(ctx: Context, kind: str, reference: Any) -> dict[str, Any]:
    """Live greedy decoding of the held-out prompts with the ``kind`` drafter's trees of the
    evaluation sizes: lossless against ``reference`` (the autoregressive outputs), and the
    accepted length measured beside the calibration trace's prediction."""
    from treeopt.decoding.loop import Decoder
    from treeopt.demo.quality import acceptance_run, prediction, quality_decodings
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace

    c, out = ctx.config, {}
    decoder = Decoder(ctx.model, ctx.heads(kind))
    growth = Growth.load(ctx.paths.growth(kind))
    cal = RankTrace.load(ctx.paths.trace(kind))
    held = RankTrace.load(ctx.paths.trace(kind, heldout=True))
    prompts = ctx.prompt_ids("heldout")
    positions = held.sequences(len(prompts)).meta["sequence_positions"]
    for n in c.eval_sizes:
        tree = growth.tree(min(n, growth.max_nodes))
        with ctx.bar(quality_decodings(len(prompts)), f"{kind} live check, {tree.size} nodes"
                     ) as bar:
            run = acceptance_run(decoder, tree, prompts, max_new_tokens=c.max_new_tokens,
                                 reference=reference, positions=positions,
                                 progress=lambda bar=bar: bar.update(1),
                                 eos_token_id=ctx.tokenizer.eos_token_id,
                                 timed_threads=c.live_threads)
        run.update(prediction(run, tree, calibration=cal, heldout=held,
                              position_mean=float(growth.expected_accept_length[tree.size])))
        out[str(n)] = run
        ctx.log(f"  {kind} n={n}: measured {run['mean_accept_length']:.3f}, predicted "
                f"{run['predicted']['step_walk']:.3f} ({run['fidelity']:+.1%} "
                f"± {run['fidelity_stderr']:.1%}), {run['seconds_median']:.2f} s, "
                f"lossless {run['lossless_prompts']}; inside the held-out trace "
                f"{run['inside_trace']['mean_accept_length']:.4f}, its walk "
                f"{run['predicted']['heldout_trace_step_walk']:.4f}")
    return out


def _looping_reference(ctx: Context, prompt_ids: list[list[int]]) -> dict[str, Any]:
    """Greedy 8-gram repetition of the same architecture untrained (same seed): a looping model
    (not for a pretrained base, whose own repetition is its own)."""
    from treeopt.demo.base_model import new_model
    from treeopt.demo.quality import greedy_repetition

    c = ctx.config
    if c.base_model is not None:
        return {"skipped": "a pretrained base", "repetition_8gram": None}
    model = new_model(c.base, len(ctx.tokenizer), seed=c.seed).eval().to(c.device)
    share = greedy_repetition(model, prompt_ids, max_new_tokens=c.max_new_tokens)
    return {"model": "untrained, same architecture and seed", "repetition_8gram": share}


def _text_repetition(ctx: Context) -> float | None:
    """8-gram repetition of the real held-out text that follows each prompt (same length);
    None for prompts that are not cut from the corpus (a prompt set of its own)."""
    from treeopt.demo.quality import repetition_share

    rows = read_jsonl(ctx.paths.prompts("heldout"))
    if any("source" not in row for row in rows):
        return None
    files = {f.path: f.text for f in ctx.corpus.calibration + ctx.corpus.heldout}
    shares = []
    for row in rows:
        lines = files[row["source"]].splitlines(keepends=True)
        after = "".join(lines[row["line"] - 1:])[len(row["prompt"]):]  # from the newline on
        ids = ctx.tokenizer(after)["input_ids"][: ctx.config.max_new_tokens]
        shares.append(repetition_share(ids))
    return float(np.mean(shares))


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
