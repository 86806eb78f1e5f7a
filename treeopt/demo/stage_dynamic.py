"""The dynamic stage of a demo build: dynamic trees for the EAGLE drafter
(:data:`~treeopt.demo.layout.DYNAMIC_KIND`) — its dynamic traces, live dynamic decoding of a
few settings beside the traces' predictions, its dynamic step profile and ``select
--dynamic``'s recommendation priced from it."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from treeopt.demo.context import Context
from treeopt.demo.evidence import measured_by_batch
from treeopt.demo.layout import DYNAMIC_KIND
from treeopt.demo.stage_timing import demo_costs, has_profiler, threads
from treeopt.files import write_json


def dynamic(ctx: Context) -> dict[str, Any]:
    """Dynamic trees for the EAGLE drafter: its dynamic traces (calibration and held-out), live
    dynamic decoding of a few settings against both traces' predictions, and ``select
    --dynamic``'s recommendation per batch from the EAGLE step profile."""
    from treeopt.decoding.calibrate import continued
    from treeopt.decoding.dynamic_rank_pass import simulate_dynamic

    c = ctx.config
    if DYNAMIC_KIND not in c.kinds:
        return {"skipped": "no EAGLE drafter in the build's kinds"}
    drafter = ctx.heads(DYNAMIC_KIND)
    out: dict[str, Any] = {"traces": {}}
    traces: dict[str, dict[int, Any]] = {}
    for part in ("calibration", "heldout"):
        prompts = ctx.prompt_ids(part)
        prompts = prompts[: c.dynamic_prompts if part == "calibration"
                          else c.dynamic_heldout_prompts]  # (None: every held-out prompt)
        # the greedy traces' own continuations, decoded once (the same chunks, the same tokens)
        sequences = continued(ctx.model, prompts, ctx.trace_config(), store=ctx.continuations)
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


def dynamic_timing(ctx: Context, traces: dict[int, Any] | None = None) -> dict[str, Any]:
    """What the dynamic stage measures of dynamic drafting's speed: the dynamic step profile and
    the recommendation priced from it (``traces``: the calibration dynamic traces by top-k, read
    from the demo's files when not given)."""
    from treeopt.dynamic.simulate import DynamicTrace

    c = ctx.config
    if not has_profiler() or not ctx.paths.step_profile(DYNAMIC_KIND, c.device).exists():
        return {}
    if traces is None:
        traces = {k: DynamicTrace.load(ctx.paths.dynamic_trace("calibration", k))
                  for k in c.dynamic_topk}
    return {"step_profile": _dynamic_step_profile(ctx),
            "selection": _dynamic_selection(ctx, traces)}


def _dynamic_step_profile(ctx: Context) -> dict[str, Any]:
    """The live dynamic step of the EAGLE drafter, profiled phase by phase at every live batch
    size over a design set of settings: what prices dynamic drafting."""
    from treeopt.model.dynamic_settings import DynamicSettings
    from treeopt.profiling.step import profile_steps

    c = ctx.config
    out = ctx.paths.dynamic_step_profile(c.device)
    prompts = ctx.prompt_ids("calibration")[: max(c.live_batches)]
    with threads(c.live_threads):
        profile = profile_steps(ctx.model, ctx.heads(DYNAMIC_KIND), None, prompts,
                                batch=list(c.live_batches), out=out,
                                max_new_tokens=c.live_new_tokens, measure=c.measurement("step"),
                                measure_at=c.measurements("step"),
                                shared=c.step_shared_reference,
                                dynamic=[DynamicSettings(*s) for s in c.dynamic_profile],
                                log=lambda line: ctx.log(f"  {line}"))
    return {"file": out.name, "records": len(profile.records),
            "measurement": asdict(c.measurement("step")), **measured_by_batch(c, "step")}


def _dynamic_check(ctx: Context, traces: dict[str, dict[int, Any]]) -> dict[str, Any]:
    """Live dynamic decoding of the check settings on held-out prompts: lossless, and E[L]
    beside the calibration trace's walk and the held-out trace's walk of the same prompts."""
    from treeopt.decoding.loop import Decoder
    from treeopt.model.dynamic_settings import DynamicSettings
    from treeopt.model.tree import Tree

    c = ctx.config
    prompts = ctx.prompt_ids("heldout")[: c.dynamic_check_prompts]
    decoder = Decoder(ctx.model, ctx.heads(DYNAMIC_KIND))
    reference = [t for i in range(0, len(prompts), 8) for t in decoder.decode(
        Tree(()), prompts[i: i + 8], config=_greedy(ctx)).tokens]
    rows = []
    for k, steps, n in c.dynamic_check:
        s = DynamicSettings(k, steps, n)
        runs = [decoder.decode(s, prompts[i: i + 8], config=_greedy(ctx))
                for i in range(0, len(prompts), 8)]
        lengths = [x for r in runs for x in r.stats.accept_lengths]
        held = traces["heldout"][k].as_run(c.max_new_tokens, len(prompts))
        rows.append({**s.to_dict(), "lossless": [t for r in runs for t in r.tokens] == reference,
                     "live_expected_accept_length": float(np.mean(lengths)),
                     "calibration_walk": traces["calibration"][k].walk(s).mean_accept_length,
                     "heldout_walk": held.walk(s).mean_accept_length})
        ctx.log(f"  dynamic {s.label}: live E[L] {rows[-1]['live_expected_accept_length']:.3f}, "
                f"calibration walk {rows[-1]['calibration_walk']:.3f}, lossless "
                f"{rows[-1]['lossless']}")
    return {"prompts": len(prompts), "settings": rows}


def _greedy(ctx: Context) -> Any:
    """Greedy decoding of the demo's continuation length, each row stopped at the tokenizer's
    EOS as the dynamic traces' continuations are."""
    from treeopt.decoding.config import DecodeConfig

    return DecodeConfig(max_new_tokens=ctx.config.max_new_tokens,
                        eos_token_id=ctx.tokenizer.eos_token_id)


def _dynamic_selection(ctx: Context, traces: dict[int, Any]) -> dict[str, Any]:
    """``select --dynamic`` on the demo: the EAGLE step profile prices every setting and the
    static growth's trees at every profiled batch."""
    from treeopt.dynamic.report import dynamic_selection
    from treeopt.model.growth import Growth
    from treeopt.pricing.throughput import select

    c = ctx.config
    costs = demo_costs(ctx, ctx.paths.step_profile(DYNAMIC_KIND, c.device))
    static = select(Growth.load(ctx.paths.growth(DYNAMIC_KIND)), costs.verify, draft=costs.draft,
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
