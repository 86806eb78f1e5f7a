"""The stages of a demo build, in order; each returns the JSON record the manifest keeps."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from treeopt.demo.config import DemoConfig
from treeopt.demo.context import Context
from treeopt.demo.layout import KINDS, DemoPaths
from treeopt.demo.stage_kinds import HEAD_KINDS, NEW_KINDS, lacking, trained_kinds
from treeopt.demo.stage_kinds import KIND_STAGES as KIND_STAGES  # the build reads it here
from treeopt.files import read_json, write_json

DRAFTERS = KINDS
# settings that touch one head kind's work alone: changing one redoes that kind's part of the
# kind stages and keeps everything else of a finished demo
KIND_SETTINGS: dict[str, tuple[str, ...]] = {"medusa_head_layers": ("medusa",)}

if TYPE_CHECKING:

    from treeopt.documents.sweep import Sweep
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace
    from treeopt.pricing.costs import StepCosts

SIZES = (1, 4, 16, 64)  # tree sizes the manifest reports E[L] at


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
    from treeopt.demo.prompts import sample_prompts, write_prompts

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


def head_data(ctx: Context) -> dict[str, Any]:
    """Self-distillation data: train-part prompts continued greedily by the base model, so the
    heads learn on the text they will draft for (Medusa-2's and Hydra's recipe)."""
    from treeopt.decoding.ranks import greedy_continuations
    from treeopt.demo.prompts import sample_prompts

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
    """The demo's n-gram drafter of ``kind`` (prompt lookup or the n-gram trie) and its
    settings, as its stage record keeps them."""
    if kind == "prompt-lookup":
        from treeopt.drafters.prompt_lookup import PromptLookup

        return (PromptLookup(depth=c.lookup_depth, max_n=c.lookup_max_n, vocab_size=vocab_size),
                {"depth": c.lookup_depth, "min_n": 1, "max_n": c.lookup_max_n})
    from treeopt.drafters.trie_drafter import TrieDrafter

    return (TrieDrafter(depth=c.trie_depth, max_trie_depth=c.trie_max_depth,
                        vocab_size=vocab_size),
            {"depth": c.trie_depth, "max_trie_depth": c.trie_max_depth, "match": "bfs"})


def train_drafter(ctx: Context, kind: str) -> dict[str, Any]:
    """Train the ``kind`` drafter on the head data (self-distillation) and ship it in 16 bits:
    heads and EAGLE as heads directories, a draft model as a Hugging Face model directory;
    n-gram drafters have no weights: their settings are written (``drafter.json``)."""
    import torch

    from treeopt.drafters.checkpoints import save_heads
    from treeopt.drafters.kinds import drafter_kind
    from treeopt.drafters.training import TrainConfig, distill_draft_model, train_heads

    c = ctx.config
    if drafter_kind(kind).lookup:  # n-gram drafting: settings, nothing to train
        ctx.paths.heads(kind).mkdir(parents=True, exist_ok=True)
        drafter, settings = ngram_drafter(kind, c, vocab_size=ctx.vocab_size)
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
                      lr=c.head_lr, warmup=max(1, c.head_steps // 20),
                      seed=c.seed + 1 + DRAFTERS.index(kind))
    bar = ctx.bar(c.head_steps, f"{kind} drafter")

    def tick(step: int, total: int, loss: float) -> None:
        bar.update(1)

    checkpoint = ctx.scratch / f"train-{kind}-checkpoint.pt"  # an interruption resumes here
    if drafter_kind(kind).trained:
        trained, history = train_heads(ctx.model, rows, cfg, progress=tick,
                                       checkpoint=checkpoint)
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


def traces(ctx: Context) -> dict[str, Any]:
    return {kind: kind_traces(ctx, kind) for kind in ctx.kinds}


def kind_traces(ctx: Context, kind: str) -> dict[str, Any]:
    """The greedy rank traces of the ``kind`` drafter on the calibration and held-out prompts."""
    out = {}
    for part in ("calibration", "heldout"):
        trace = greedy_trace(ctx, kind, part, ctx.paths.trace(kind, heldout=part == "heldout"))
        out[part] = {"positions": trace.positions, "sequences": int(trace.meta["sequences"])}
    return out


def greedy_trace(ctx: Context, kind: str, part: str, out: Path) -> RankTrace:
    """The ``kind`` drafter's greedy rank trace on the ``part`` prompts, written to ``out``
    (resumed when a run was interrupted): the demo's top-k, continuation length and batch."""
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate

    c = ctx.config
    cal = CalibrateConfig(top_k=c.top_k, max_new_tokens=c.max_new_tokens,
                          batch_size=c.calibration_batch)
    prompts = ctx.prompt_ids(part)
    bar = ctx.bar(-(-len(prompts) // c.calibration_batch), f"{kind} {part} trace")
    trace, _ = calibrate(ctx.model, ctx.heads(kind), prompts, out, config=cal,
                         meta={"model": "treeopt demo", "prompts": f"prompts/{part}.jsonl"},
                         progress=lambda i, n, bar=bar: bar.update(1),
                         continuations=ctx.continuations)
    bar.close()
    return trace


def growths(ctx: Context) -> dict[str, Any]:
    ell, held = {}, {}
    for kind in ctx.kinds:
        ell[kind], held[kind] = kind_growths(ctx, kind)
    return {"max_nodes": ctx.config.max_nodes, "expected_accept_length": ell,
            "heldout_expected_accept_length": held}


def kind_growths(ctx: Context, kind: str) -> tuple[dict[int, float], dict[int, float]]:
    """Grow the ``kind`` drafter's trees (empirical and independent); E[L] by size on the
    calibration trace and on the held-out one."""
    from treeopt.model.growth import grow
    from treeopt.model.trace import RankTrace

    trace = RankTrace.load(ctx.paths.trace(kind))
    for method in ("independent", "empirical"):
        g = grow(trace, method=method, max_nodes=ctx.config.max_nodes)
        g.save(ctx.paths.growth(kind, method=method))
    test = g.evaluate(RankTrace.load(ctx.paths.trace(kind, heldout=True)))
    return ({n: float(g.expected_accept_length[n]) for n in SIZES if n <= g.max_nodes},
            {n: float(test[n]) for n in SIZES if n <= g.max_nodes})


def sampled(ctx: Context) -> dict[str, Any]:
    """Lossless sampling at each of the config's temperatures: traces of continuations sampled
    from the base model (calibration and held-out prompts, per-position seeded), the growth for
    each temperature, and what a greedy-grown tree gives up there."""
    out: dict[str, Any] = {}
    for t in ctx.config.sample_temperatures:
        out[f"{t:g}"] = {kind: kind_sampled(ctx, kind, t) for kind in ctx.kinds}
    return out


def kind_sampled(ctx: Context, kind: str, t: float) -> dict[str, Any]:
    """The ``kind`` drafter's traces of continuations sampled at temperature ``t`` (calibration
    and held-out prompts), the growth for ``t``, and what the greedy-grown tree gives up there."""
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate
    from treeopt.model.growth import Growth, grow

    c = ctx.config
    cal = CalibrateConfig(top_k=c.top_k, max_new_tokens=c.max_new_tokens,
                          batch_size=c.calibration_batch, temperature=t, seed=c.seed)
    heads = ctx.heads(kind)
    made = {}
    for part in ("calibration", "heldout"):
        prompts = ctx.prompt_ids(part)
        bar = ctx.bar(-(-len(prompts) // c.calibration_batch), f"{kind} {part} T={t}")
        made[part], _ = calibrate(
            ctx.model, heads, prompts,
            ctx.paths.trace(kind, heldout=part == "heldout", temperature=t), config=cal,
            meta={"model": "treeopt demo", "prompts": f"prompts/{part}.jsonl"},
            progress=lambda i, n, bar=bar: bar.update(1), continuations=ctx.continuations)
        bar.close()
    g = grow(made["calibration"], method="empirical", max_nodes=c.max_nodes)
    g.save(ctx.paths.growth(kind, temperature=t))
    greedy = Growth.load(ctx.paths.growth(kind)).evaluate(made["calibration"])
    held = g.evaluate(made["heldout"])
    return {
        "positions": made["calibration"].positions,
        "expected_accept_length": {n: float(g.expected_accept_length[n]) for n in SIZES
                                   if n <= g.max_nodes},
        "heldout_expected_accept_length": {n: float(held[n]) for n in SIZES
                                           if n <= g.max_nodes},
        "greedy_grown_expected_accept_length": {n: float(greedy[n]) for n in SIZES
                                                if n <= g.max_nodes and n < len(greedy)}}


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
    from treeopt.demo.quality import acceptance_run, prediction
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
        run = acceptance_run(decoder, tree, prompts, max_new_tokens=c.max_new_tokens,
                             reference=reference, positions=positions)
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


def latency(ctx: Context) -> dict[str, Any]:
    """The verify-step table (batch 1, the profiler's own sweep) and, for each head kind, the
    live step profiled phase by phase in the decoder's loop: what ``select`` prices with."""
    if not _has_profiler():
        return {"skipped": "the profiler is not available (treeopt.profiling is not importable)"}
    from treeopt.profiling.verify import profile_verify
    from treeopt.roofline.config import load_config

    c = ctx.config
    threads(c.live_threads)
    steps = {kind: kind_step_profile(ctx, kind) for kind in ctx.kinds}
    if ctx.kinds != HEAD_KINDS and ctx.paths.latency(c.device).exists():
        return {"step_profiles": steps}  # one kind made again: the model's table is the same
    table = profile_verify(load_config(ctx.model_dir), out=ctx.paths.latency(c.device),
                           device=c.device, dtype=c.dtype, batch=[1],
                           context=list(c.latency_context), tokens=list(c.latency_tokens),
                           repeats=c.latency_repeats, warmup=2, weights_dir=str(ctx.model_dir),
                           log=lambda line: ctx.log(f"  {line}"))
    return {"device": table.device, "file": ctx.paths.latency(c.device).name,
            "records": len(table.records), "step_profiles": steps}


def kind_step_profile(ctx: Context, kind: str) -> dict[str, Any]:
    """The ``kind`` drafter's live step, profiled phase by phase for its growth's trees."""
    from treeopt.model.growth import Growth
    from treeopt.profiling.step import profile_steps

    c = ctx.config
    threads(c.live_threads)
    out = ctx.paths.step_profile(kind, c.device)
    prompts = ctx.prompt_ids("calibration")[: max(c.live_batches)]
    start = time.perf_counter()
    profile = profile_steps(ctx.model, ctx.heads(kind), Growth.load(ctx.paths.growth(kind)),
                            prompts, batch=list(c.live_batches), sizes=list(c.step_sizes),
                            out=out, max_new_tokens=c.live_new_tokens,
                            measure=c.measurement("step"),
                            log=lambda line: ctx.log(f"  {line}"))
    return {"file": out.name, "records": len(profile.records),
            "measurement": asdict(c.measurement("step")),
            "seconds": round(time.perf_counter() - start, 1)}  # this run's (a resumed one's part)


def sweep(ctx: Context) -> dict[str, Any]:
    """The live throughput sweep of each head kind's trees on the held-out prompts, beside the
    step-cost model's prediction and with the tree select picks: the Hardware page's figure."""
    return {kind: kind_sweep(ctx, kind) for kind in ctx.kinds}


def kind_sweep(ctx: Context, kind: str) -> dict[str, Any]:
    """The live throughput sweep of the ``kind`` drafter's trees on held-out prompts, measured
    as the config says (:meth:`DemoConfig.measurement`, a race of select's pick against the
    measured best, a step profile alongside), with the tree ``treeopt select --demo`` picks at
    each batch: select over the whole growth, E[L] from the calibration trace, priced by the
    demo's step profile of the drafter, which also predicts every point."""
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.live_sweep import tune
    from treeopt.demo.evidence import alongside_profile, sweep_method
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace

    c = ctx.config
    threads(c.live_threads)
    prompts = ctx.prompt_ids("heldout")[: c.sweep_prompts]
    # E[L] from the same prompts' own trace, over the tokens decoded live: the sweep shows the
    # step-cost model's error, not the sampling error of a handful of prompts; select picks with
    # the calibration trace, as a user's select does before any live run
    path = ctx.paths.sweep(kind, c.device)
    growth = Growth.load(ctx.paths.growth(kind))
    sizes = [n for n in c.sweep_sizes if n <= growth.max_nodes]
    own = RankTrace.load(ctx.paths.trace(kind, heldout=True)).sequences(
        c.sweep_prompts, positions=c.live_new_tokens)
    alongside = alongside_profile(ctx.model, ctx.heads(kind), prompts, config=c,
                                  out=ctx.paths.alongside_profile(kind, c.device))
    start = time.perf_counter()
    bar = ctx.bar(len(sizes) * len(c.live_batches), f"{kind} sweep")
    result = tune(ctx.model, ctx.heads(kind), growth, prompts, batch=list(c.live_batches),
                  sizes=sizes, out=path, measure=c.measurement("sweep"),
                  config=DecodeConfig(max_new_tokens=c.live_new_tokens),
                  costs=demo_costs(ctx, ctx.paths.step_profile(kind, c.device)), trace=own,
                  select_trace=RankTrace.load(ctx.paths.trace(kind)),
                  meta={"model": "treeopt demo", "device": c.device,
                        "alongside": sweep_method(c, ctx.paths, kind)["alongside"]},
                  race_best=c.sweep_race, before_point=alongside,
                  continuous=c.sweep_batching == "continuous",
                  progress=lambda i, n, bar=bar: bar.update(i - bar.n))
    bar.close()
    for row in result.summary():
        ctx.log(f"  {kind} batch {row['batch']}: best {row['best_size']} nodes "
                f"{row['best_speedup']:.2f}×; select picks {row.get('selected_size')} "
                f"({row.get('selected_share_of_best', float('nan')):.0%} of the best)")
    record = {"file": path.name, "summary": result.summary(),
              "method": sweep_method(c, ctx.paths, kind),
              "seconds": round(time.perf_counter() - start, 1)}  # this run's (a resumed one's part)
    if alongside is not None:
        record["alongside"] = _alongside_errors(ctx, kind, result, growth, own)
    return record


def _alongside_errors(ctx: Context, kind: str, sweep: Sweep, growth: Growth, own: RankTrace,
                      ) -> dict[str, Any]:
    """The sweep's points predicted from the profile taken alongside them, per batch."""
    from treeopt.demo.evidence import alongside_errors

    path = ctx.paths.alongside_profile(kind, ctx.config.device)
    errors = alongside_errors(sweep, growth, demo_costs(ctx, path),
                              own.first_positions(ctx.config.live_new_tokens))
    return {"file": path.name, "errors": errors}


def drafters(ctx: Context) -> dict[str, Any]:
    """The drafters beyond heads — an EAGLE drafter, a one-layer draft model and prompt lookup —
    trained on the same data (prompt lookup: nothing to train), then calibrated, grown, decoded
    live, profiled, swept and sampled exactly as the heads' stages do for Medusa and Hydra (their
    records, per kind). A finished demo's record keeps its kinds: only those it lacks are made
    (a drafter added to treeopt since the demo was built, or to the config's kinds)."""
    c = ctx.config
    out = dict(_record(ctx, "drafters"))  # the kinds a finished demo has (one added since runs)
    todo = lacking("drafters", out, c.kinds)
    if not todo:
        return out
    reference, _ = ctx.reference()
    for kind in todo:
        done = ctx.scratch / f"drafters-{kind}.json"
        if done.exists():  # finished before an interruption
            out[kind] = json.loads(done.read_text())
            continue
        trained = ctx.scratch / f"train-{kind}.json"  # training is the long part: kept apart
        if not trained.exists():
            write_json(trained, train_drafter(ctx, kind))
        record: dict[str, Any] = {"training": json.loads(trained.read_text())}
        record["traces"] = kind_traces(ctx, kind)
        ell, held = kind_growths(ctx, kind)
        record["growth"] = {"expected_accept_length": ell, "heldout_expected_accept_length": held}
        record["quality"] = kind_quality(ctx, kind, reference)
        record.update(drafter_timing(ctx, kind))
        record["sampled"] = {f"{t:g}": kind_sampled(ctx, kind, t) for t in c.sample_temperatures}
        write_json(done, record)
        out[kind] = json.loads(done.read_text())
    return out


def _record(ctx: Context, name: str) -> dict[str, Any]:
    """Stage ``name``'s record from an earlier run ({} when there is none)."""
    path = ctx.scratch / f"{name}.json"
    return {k: v for k, v in read_json(path).items() if k != "seconds"} if path.exists() else {}


def dynamic(ctx: Context) -> dict[str, Any]:
    """Dynamic trees for the EAGLE drafter: its dynamic traces (calibration and held-out), live
    dynamic decoding of a few settings against both traces' predictions, and ``select
    --dynamic``'s recommendation per batch from the EAGLE step profile."""
    from treeopt.decoding.dynamic_ranks import simulate_dynamic
    from treeopt.decoding.ranks import greedy_continuations

    c = ctx.config
    if "eagle" not in c.kinds:
        return {"skipped": "no EAGLE drafter in the build's kinds"}
    drafter = ctx.heads("eagle")
    out: dict[str, Any] = {"traces": {}}
    traces: dict[str, dict[int, Any]] = {}
    for part in ("calibration", "heldout"):
        prompts = ctx.prompt_ids(part)
        if part == "calibration":
            prompts = prompts[: c.dynamic_prompts]
        sequences = greedy_continuations(ctx.model, prompts, max_new_tokens=c.max_new_tokens)
        starts = [len(p) - 1 for p in prompts]
        traces[part] = {}
        for k in c.dynamic_topk:
            bar = ctx.bar(len(sequences), f"dynamic {part} top-k {k}")
            trace = simulate_dynamic(ctx.model, drafter, sequences, starts, topk=k,
                                     steps=c.dynamic_steps,
                                     progress=lambda i, n, bar=bar: bar.update(i - bar.n))
            bar.close()
            meta = {**trace.meta, "prompts": f"{part} ({len(prompts)})",
                    "max_new_tokens": c.max_new_tokens}
            type(trace)(k, trace.places, trace.lengths, meta).save(
                ctx.paths.dynamic_trace(part, k))
            traces[part][k] = trace
        out["traces"][part] = {"prompts": len(prompts), "positions": sum(trace.lengths)}
    out["live"] = _dynamic_check(ctx, traces)
    out.update(dynamic_timing(ctx, traces["calibration"]))
    return out


def prose(ctx: Context) -> dict[str, Any]:
    """A second prompt set where repeats are rare: requests people wrote (``prose_set``, e.g.
    ShareGPT's, in the base model's chat template: :func:`treeopt.demo.pretrained.chat_prompts`),
    else docstrings and comments of the files no training step has seen
    (:func:`treeopt.demo.prompts.sample_prose`). For every drafter the
    demo ships, its greedy rank trace on them (as on the held-out prompts) and the growth from
    it; E[L] at a few sizes beside the held-out code prompts'; and, priced by each drafter's
    step profile, the fastest drafter per batch size on each set (``choose-drafter
    --prompt-set``). A trace and growth already on disk for the same drafter and prompts are
    reused (an interrupted stage, or a kind made again beside kept ones: ``outputs`` and
    ``kind_outputs`` name the files to remove first)."""
    from treeopt.demo.pretrained import chat_prompts
    from treeopt.demo.prompts import sample_prose, write_prompts

    c = ctx.config
    if c.prose_set is not None:  # a prompt set of requests people wrote (``sharegpt``)
        found = chat_prompts(c.prose_set, ctx.tokenizer, c.prose_prompts)
    else:
        pool = ctx.corpus.calibration + ctx.corpus.heldout  # files no training step has seen
        found = sample_prose(pool, ctx.tokenizer, count=c.prose_prompts,
                             min_tokens=c.prompt_tokens[0], max_tokens=c.prompt_tokens[1],
                             seed=c.seed + 17)
    write_prompts(ctx.paths.prompts("prose"), found)
    kinds = ctx.paths.kinds()
    out: dict[str, Any] = {
        "prompts": {"count": len(found), "file": ctx.paths.prompts("prose").name,
                    "set": c.prose_set or "the corpus's docstrings and comments",
                    "files": len({p["source"] for p in found}),
                    "kinds": {k: sum(p["kind"] == k for p in found)
                              for k in dict.fromkeys(p["kind"] for p in found)}},
        "max_nodes": c.max_nodes, **{kind: kind_prose(ctx, kind) for kind in kinds}}
    if not (ctx.scratch / "retime.json").exists():  # else priced once the speed is measured
        choice = prose_choice(ctx, kinds)                # again (:func:`retime`)
        if choice:
            out["choice"] = choice
    return out


def kind_prose(ctx: Context, kind: str) -> dict[str, Any]:
    """The ``kind`` drafter's greedy trace on the prose prompts and its growth; the position-mean
    E[L] by size of that growth on prose, of the code-grown trees on prose, and of the code-grown
    trees on the held-out code prompts."""
    from treeopt.model.growth import Growth, grow
    from treeopt.model.trace import RankTrace

    trace = greedy_trace(ctx, kind, "prose", ctx.paths.prose_trace(kind))
    path = ctx.paths.prose_growth(kind)
    if not path.exists():  # else grown from this trace before (a kind made again beside kept
        grow(trace, method="empirical", max_nodes=ctx.config.max_nodes).save(path)  # ones)
    g = Growth.load(path)  # E[L] as the file has it, grown now or before
    code = Growth.load(ctx.paths.growth(kind))
    on_prose = code.evaluate(trace)
    on_code = code.evaluate(RankTrace.load(ctx.paths.trace(kind, heldout=True)))
    sizes = [n for n in SIZES if n <= g.max_nodes and n < len(on_prose)]
    ctx.log(f"  {kind}: E[L] on prose {g.expected_accept_length[sizes[-1]]:.3f}, held-out code "
            f"{on_code[sizes[-1]]:.3f} ({sizes[-1]} nodes)")
    return {"positions": trace.positions, "sequences": int(trace.meta["sequences"]),
            "expected_accept_length": {n: float(g.expected_accept_length[n]) for n in sizes},
            "code_grown_expected_accept_length": {n: float(on_prose[n]) for n in sizes},
            "heldout_code_expected_accept_length": {n: float(on_code[n]) for n in sizes}}


def prose_choice(ctx: Context, kinds: tuple[str, ...]) -> dict[str, Any]:
    """The fastest drafter per batch size on the held-out code prompts and on the prose ones,
    and the robust pick across both (:func:`treeopt.pricing.selection.choose_drafter_per_set`): each
    drafter's growth for the set, E[L] the per-step walk of the set's trace, priced by the
    drafter's step profile. Nothing when a drafter has no step profile."""
    from treeopt.demo.prompt_sets import prompt_set_selections
    from treeopt.pricing.selection import choose_drafter_per_set

    device = ctx.config.device
    if not all(ctx.paths.step_profile(k, device).exists() for k in kinds):
        return {}
    sets = prompt_set_selections(ctx.paths, kinds, device=device)
    points = [c.to_json() for c in choose_drafter_per_set(sets)]
    for p in points:
        ctx.log(f"  batch {p['batch']}: fastest on code {p['fastest']['code']}, on prose "
                f"{p['fastest']['prose']}; across both {p['robust']}")
    return {"acceptance": "per-step walk of each set's trace (held-out code, prose)",
            "points": points}


def drafter_timing(ctx: Context, kind: str) -> dict[str, Any]:
    """What the drafters stage measures of a ``kind`` drafter's speed (its step profile and live
    sweep; nothing without the profiler)."""
    if not _has_profiler():
        return {}
    return {"step_profile": kind_step_profile(ctx, kind), "sweep": kind_sweep(ctx, kind)}


def dynamic_timing(ctx: Context, traces: dict[int, Any] | None = None) -> dict[str, Any]:
    """What the dynamic stage measures of dynamic drafting's speed: the dynamic step profile and
    the recommendation priced from it (``traces``: the calibration dynamic traces by top-k, read
    from the demo's files when not given)."""
    from treeopt.dynamic.simulate import DynamicTrace

    c = ctx.config
    if not _has_profiler() or not ctx.paths.step_profile("eagle", c.device).exists():
        return {}
    if traces is None:
        traces = {k: DynamicTrace.load(ctx.paths.dynamic_trace("calibration", k))
                  for k in c.dynamic_topk}
    return {"step_profile": _dynamic_step_profile(ctx),
            "selection": _dynamic_selection(ctx, traces)}


TIMING = "timing"  # --redo timing: every speed measurement of the demo, nothing trained or traced
TIMING_STAGES = ("latency", "sweep")  # stages that only measure speed, redone whole


def timing_outputs(paths: DemoPaths, config: DemoConfig, *,
                   kinds: tuple[str, ...] | None = None) -> list[Path]:
    """The files of the speed measurements inside the drafters and dynamic stages (``kinds``:
    those of these drafters alone)."""
    if kinds is not None:
        return [*(paths.step_profile(k, config.device) for k in kinds),
                *_files_of("sweep", kinds, paths, config)]
    return [*timing_outputs(paths, config, kinds=NEW_KINDS),
            paths.dynamic_step_profile(config.device), paths.dynamic_selection(config.device)]


def retime(ctx: Context, results: dict[str, Any]) -> None:
    """Measure the drafters' and dynamic drafting's speed again (their files removed first by
    the caller) and update those stages' results and records in place, and the prose stage's
    choice, priced by the drafters' step profiles. Each drafter measured is named in the
    re-measurement's marker (``retime.json``) as it finishes: a stopped run measures the rest,
    the one it stopped in resumed from its files (the step profile and the sweep are written as
    they go, so a file on disk may be part of a measurement)."""
    marker = ctx.scratch / "retime.json"
    state = read_json(marker) if marker.exists() else {}
    done = list(state.get("done", []))
    for kind in NEW_KINDS:
        if kind in done or kind not in results["drafters"]:
            continue
        results["drafters"][kind].update(drafter_timing(ctx, kind))
        write_json(ctx.scratch / "drafters.json", results["drafters"])
        done.append(kind)
        write_json(marker, {**state, "done": done})
    ctx.log("[drafters] speed measured again")
    results["dynamic"].update(dynamic_timing(ctx))
    write_json(ctx.scratch / "dynamic.json", results["dynamic"])
    ctx.log("[dynamic] speed measured again")
    if "prose" in results:
        results["prose"].pop("choice", None)
        choice = prose_choice(ctx, ctx.paths.kinds())
        if choice:
            results["prose"]["choice"] = choice
        write_json(ctx.scratch / "prose.json", results["prose"])
        ctx.log("[prose] the choice per prompt set priced again")


RECHECK_MARKER = "requality.json"  # --redo quality: until the drafters' quality is checked again


def recheck_quality(ctx: Context, results: dict[str, Any]) -> None:
    """Check the drafters' quality again (``--redo quality``: the quality stage checks the
    heads', the drafters stage holds the drafters' own) and update their records in place. Each
    drafter checked is named in the marker (:data:`RECHECK_MARKER`) as it finishes: a stopped
    run checks the rest."""
    marker = ctx.scratch / RECHECK_MARKER
    state = read_json(marker) if marker.exists() else {}
    done = list(state.get("done", []))
    todo = [k for k in NEW_KINDS if k not in done and k in results["drafters"]]
    if todo:
        reference, _ = ctx.reference()
    for kind in todo:
        results["drafters"][kind]["quality"] = kind_quality(ctx, kind, reference)
        write_json(ctx.scratch / "drafters.json", results["drafters"])
        done.append(kind)
        write_json(marker, {**state, "done": done})
    ctx.log("[drafters] quality checked again")


def _dynamic_step_profile(ctx: Context) -> dict[str, Any]:
    """The live dynamic step of the EAGLE drafter, profiled phase by phase at every live batch
    size over a design set of settings: what prices dynamic drafting."""
    from treeopt.model.dynamic_settings import DynamicSettings
    from treeopt.profiling.step import profile_steps

    c = ctx.config
    threads(c.live_threads)
    out = ctx.paths.dynamic_step_profile(c.device)
    prompts = ctx.prompt_ids("calibration")[: max(c.live_batches)]
    profile = profile_steps(ctx.model, ctx.heads("eagle"), None, prompts,
                            batch=list(c.live_batches), out=out, max_new_tokens=c.live_new_tokens,
                            measure=c.measurement("step"),
                            dynamic=[DynamicSettings(*s) for s in c.dynamic_profile],
                            log=lambda line: ctx.log(f"  {line}"))
    return {"file": out.name, "records": len(profile.records),
            "measurement": asdict(c.measurement("step"))}


def _dynamic_check(ctx: Context, traces: dict[str, dict[int, Any]]) -> dict[str, Any]:
    """Live dynamic decoding of the check settings on held-out prompts: lossless, and E[L]
    beside the calibration trace's walk and the held-out trace's walk of the same prompts."""
    from treeopt.decoding.loop import Decoder
    from treeopt.dynamic.simulate import DynamicTrace
    from treeopt.model.dynamic_settings import DynamicSettings
    from treeopt.model.tree import Tree

    c = ctx.config
    prompts = ctx.prompt_ids("heldout")[: c.dynamic_check_prompts]
    decoder = Decoder(ctx.model, ctx.heads("eagle"))
    reference = [t for i in range(0, len(prompts), 8) for t in decoder.decode(
        Tree(()), prompts[i: i + 8], config=_greedy(c.max_new_tokens)).tokens]
    rows = []
    for k, steps, n in c.dynamic_check:
        s = DynamicSettings(k, steps, n)
        runs = [decoder.decode(s, prompts[i: i + 8], config=_greedy(c.max_new_tokens))
                for i in range(0, len(prompts), 8)]
        lengths = [x for r in runs for x in r.stats.accept_lengths]
        held = traces["heldout"][k]
        held = DynamicTrace(k, held.places[: sum(held.lengths[: len(prompts)])],
                            held.lengths[: len(prompts)])
        rows.append({**s.to_dict(), "lossless": [t for r in runs for t in r.tokens] == reference,
                     "live_expected_accept_length": float(np.mean(lengths)),
                     "calibration_walk": traces["calibration"][k].walk(s).mean_accept_length,
                     "heldout_walk": held.walk(s).mean_accept_length})
        ctx.log(f"  dynamic {s.label}: live E[L] {rows[-1]['live_expected_accept_length']:.3f}, "
                f"calibration walk {rows[-1]['calibration_walk']:.3f}, lossless "
                f"{rows[-1]['lossless']}")
    return {"prompts": len(prompts), "settings": rows}


def _greedy(max_new_tokens: int) -> Any:
    from treeopt.decoding.config import DecodeConfig

    return DecodeConfig(max_new_tokens=max_new_tokens)


def _dynamic_selection(ctx: Context, traces: dict[int, Any]) -> dict[str, Any]:
    """``select --dynamic`` on the demo: the EAGLE step profile prices every setting and the
    static growth's trees at every profiled batch."""
    from treeopt.dynamic.report import dynamic_selection
    from treeopt.model.growth import Growth
    from treeopt.pricing.select import select

    c = ctx.config
    costs = demo_costs(ctx, ctx.paths.step_profile("eagle", c.device))
    static = select(Growth.load(ctx.paths.growth("eagle")), costs.verify, draft=costs.draft,
                    overhead=costs.overhead, batch=costs.verify.batches,
                    context=costs.verify.contexts)
    dyn = demo_costs(ctx, ctx.paths.dynamic_step_profile(c.device))
    doc = dynamic_selection(traces, verify=dyn.verify, draft=dyn.draft,
                            overhead=dyn.overhead, static=static,
                            sources={str(k): ctx.paths.dynamic_trace("calibration", k).name
                                     for k in traces})
    write_json(ctx.paths.dynamic_selection(c.device), doc)
    return {"file": ctx.paths.dynamic_selection(c.device).name,
            "best": [{"batch": p["batch"], **{k: p["best"][k] for k in
                      ("topk", "steps", "draft_tokens", "speedup")},
                      "static_speedup": p["static"]["speedup"]} for p in doc["points"]]}


def _has_profiler() -> bool:
    try:
        import treeopt.profiling.step  # noqa: F401
    except ImportError:
        return False
    return True


def demo_costs(ctx: Context, profile: Path) -> StepCosts:
    """The step costs of a profile of the demo, named by its path inside the demo (a build's
    work directory is not where the demo will be read)."""
    from treeopt.pricing.sources import profiled_costs

    return profiled_costs(profile, source=ctx.paths.inside(profile))


def threads(n: int) -> None:
    """Time with ``n`` torch threads, as the app and the benchmarks run (the build's training
    stages may use more)."""
    from treeopt.decoding.models import set_threads

    set_threads(n)


def outputs(name: str, paths: DemoPaths, config: DemoConfig) -> list[Path]:
    """The files stage ``name`` writes and would resume from: what running it again removes
    first (so a redone stage measures afresh instead of resuming its own finished work)."""
    kinds = NEW_KINDS if name == "drafters" else KINDS if name == "prose" else HEAD_KINDS
    if name == "drafters":
        return [p for stage in ("traces", "growth", "sweep", "sampled")
                for p in _files_of(stage, kinds, paths, config)] + [
            paths.step_profile(k, config.device) for k in kinds] + [
            paths.root / ".stages" / f"{record}-{k}.json" for k in kinds
            for record in ("drafters", "train")]
    return _files_of(name, kinds, paths, config)


def kind_scope(changed: list[str]) -> tuple[str, ...] | None:
    """The head kinds whose work the ``changed`` settings touch, when each of them is one kind's
    own setting (:data:`KIND_SETTINGS`); None when any touches shared work (a fresh build).

    >>> kind_scope(["medusa_head_layers"]), kind_scope(["medusa_head_layers", "seed"])
    (('medusa',), None)
    """
    if not changed or any(name not in KIND_SETTINGS for name in changed):
        return None
    touched = {kind for name in changed for kind in KIND_SETTINGS[name]}
    return tuple(kind for kind in HEAD_KINDS if kind in touched)


def kind_outputs(name: str, kinds: tuple[str, ...], paths: DemoPaths, config: DemoConfig,
                 ) -> list[Path]:
    """The files kind stage ``name`` writes for ``kinds`` alone (not the files all kinds share,
    such as the model's verify table): what making those kinds again removes first."""
    shared = set(_files_of(name, (), paths, config))
    kind_dirs = [paths.heads(k) for k in kinds] if name == "heads" else []
    return [p for p in _files_of(name, kinds, paths, config) if p not in shared] + [
        p for d in kind_dirs if d.is_dir() for p in sorted(d.iterdir())]


def merge_kinds(kept: dict[str, Any], made: dict[str, Any]) -> dict[str, Any]:
    """A kind stage's record: ``kept`` (all kinds, from a finished demo) with the kinds ``made``
    again replaced wherever they appear (the records nest per kind at different depths).

    >>> merge_kinds({"max_nodes": 8, "ell": {"medusa": 1.5, "hydra": 2.0}},
    ...             {"max_nodes": 8, "ell": {"medusa": 1.7}})
    {'max_nodes': 8, 'ell': {'medusa': 1.7, 'hydra': 2.0}}
    """
    out = dict(kept)
    for key, value in made.items():
        nested = isinstance(value, dict) and isinstance(kept.get(key), dict)
        out[key] = merge_kinds(kept[key], value) if nested and key not in KINDS else value
    return out


def _files_of(name: str, kinds: tuple[str, ...], paths: DemoPaths, config: DemoConfig,
              ) -> list[Path]:
    temps = config.sample_temperatures
    files = {
        "traces": [paths.trace(k, heldout=h) for k in kinds for h in (False, True)],
        "growth": [paths.growth(k, method=m) for k in kinds
                   for m in ("empirical", "independent")],
        "latency": [paths.latency(config.device),
                    *(paths.step_profile(k, config.device) for k in kinds)],
        "sweep": [*(paths.sweep(k, config.device) for k in kinds),
                  *(paths.alongside_profile(k, config.device) for k in kinds
                    if config.sweep_alongside)],
        "dynamic": [*(paths.dynamic_trace(part, k) for part in ("calibration", "heldout")
                      for k in config.dynamic_topk), paths.dynamic_step_profile(config.device),
                    paths.dynamic_selection(config.device)],
        "prose": [paths.prompts("prose"), *(p for k in kinds for p in (
            paths.prose_trace(k), paths.prose_growth(k)))],
        "sampled": [p for k in kinds for t in temps
                    for p in (paths.trace(k, temperature=t),
                              paths.trace(k, heldout=True, temperature=t),
                              paths.growth(k, temperature=t))],
    }
    return files.get(name, [])


PIPELINE: tuple[tuple[str, Callable[[Context], dict[str, Any]]], ...] = (
    ("tokenizer", corpus_and_tokenizer), ("prompts", prompts), ("base", base_model),
    ("head_data", head_data), ("heads", heads), ("traces", traces), ("growth", growths),
    ("quality", quality), ("latency", latency), ("sweep", sweep), ("sampled", sampled),
    ("drafters", drafters), ("dynamic", dynamic), ("prose", prose))


