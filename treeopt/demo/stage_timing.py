"""The timing stages of a demo build: the verify-step latency table, each drafter's live step
profile, its live throughput sweep (and the errors of the profile taken alongside it); the step
costs a demo profile prices with, and the torch threads every timing runs with."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treeopt.demo.context import Context
from treeopt.demo.evidence import measured_by_batch
from treeopt.demo.stage_kinds import HEAD_KINDS

if TYPE_CHECKING:

    from treeopt.documents.sweep import Sweep
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace
    from treeopt.pricing.costs import StepCosts


def latency(ctx: Context) -> dict[str, Any]:
    """The verify-step table (batch 1, the profiler's own sweep) and, for each head kind, the
    live step profiled phase by phase in the decoder's loop: what ``select`` prices with."""
    if not has_profiler():
        return {"skipped": "the profiler is not available (treeopt.profiling is not importable)"}
    c = ctx.config
    steps = {kind: kind_step_profile(ctx, kind) for kind in ctx.kinds}
    if ctx.kinds != HEAD_KINDS and ctx.paths.latency(c.device).exists():
        return {"step_profiles": steps}  # one kind made again: the model's table is the same
    with threads(c.live_threads):
        table = _verify_table(ctx)
    return {"device": table.device, "file": ctx.paths.latency(c.device).name,
            "records": len(table.records), "step_profiles": steps}


def _verify_table(ctx: Context) -> Any:
    """The model's verify-step table at batch 1, the profiler's own sweep."""
    from treeopt.profiling.verify_latency import profile_verify
    from treeopt.roofline.config import load_config

    c = ctx.config
    return profile_verify(load_config(ctx.model_dir), out=ctx.paths.latency(c.device),
                          device=c.device, dtype=c.dtype, batch=[1],
                          context=list(c.latency_context), tokens=list(c.latency_tokens),
                          repeats=c.latency_repeats, warmup=2, weights_dir=str(ctx.model_dir),
                          log=lambda line: ctx.log(f"  {line}"))


def kind_step_profile(ctx: Context, kind: str) -> dict[str, Any]:
    """The ``kind`` drafter's live step, profiled phase by phase for its growth's trees."""
    from treeopt.model.growth import Growth
    from treeopt.profiling.step import profile_steps

    c = ctx.config
    out = ctx.paths.step_profile(kind, c.device)
    prompts = ctx.prompt_ids("calibration")[: max(c.live_batches)]
    start = time.perf_counter()
    with threads(c.live_threads):
        profile = profile_steps(ctx.model, ctx.heads(kind),
                                Growth.load(ctx.paths.growth(kind)), prompts,
                                batch=list(c.live_batches), sizes=list(c.step_sizes), out=out,
                                max_new_tokens=c.live_new_tokens, measure=c.measurement("step"),
                                measure_at=c.measurements("step"),
                                shared=c.step_shared_reference,
                                log=lambda line: ctx.log(f"  {line}"))
    return {"file": out.name, "records": len(profile.records),
            "measurement": asdict(c.measurement("step")),
            **measured_by_batch(c, "step"),
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
    with threads(ctx.config.live_threads):
        return _kind_sweep(ctx, kind)


@dataclass(frozen=True, eq=False)
class SweepPlan:
    """What a drafter's sweep measures and prices with: the growth and the sizes swept, the
    swept prompts' own held-out trace over the tokens decoded (each point's E[L]: the sweep
    shows the step-cost model's error, not the sampling error of a handful of prompts), the
    calibration trace select picks with (as a user's select does before any live run), and
    the demo's step costs, the verify step shared with the drafters profiled so far."""

    growth: Growth
    sizes: list[int]
    own: RankTrace
    select_trace: RankTrace
    costs: StepCosts


def sweep_plan(ctx: Context, kind: str) -> SweepPlan:
    """The ``kind`` drafter's :class:`SweepPlan`, from the demo's files (no model)."""
    from treeopt.demo.step_costs import demo_step_costs
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace

    c = ctx.config
    growth = Growth.load(ctx.paths.growth(kind))
    profile = ctx.paths.step_profile(kind, c.device)
    return SweepPlan(growth, [n for n in c.sweep_sizes if n <= growth.max_nodes],
                     RankTrace.load(ctx.paths.trace(kind, heldout=True)).sequences(
                         c.sweep_prompts, positions=c.live_new_tokens),
                     RankTrace.load(ctx.paths.trace(kind)),
                     demo_step_costs(ctx.paths, kind, c.device,
                                     source=ctx.paths.inside(profile)))


def _kind_sweep(ctx: Context, kind: str) -> dict[str, Any]:
    from treeopt.decoding.live_sweep import tune
    from treeopt.demo.evidence import alongside_profile, sweep_method

    c = ctx.config
    prompts = ctx.prompt_ids("heldout")[: c.sweep_prompts]
    path = ctx.paths.sweep(kind, c.device)
    plan = sweep_plan(ctx, kind)
    growth, sizes, own = plan.growth, plan.sizes, plan.own
    alongside = alongside_profile(ctx.model, ctx.heads(kind), prompts, config=c,
                                  out=ctx.paths.alongside_profile(kind, c.device))
    start = time.perf_counter()
    bar = ctx.bar(len(sizes) * len(c.live_batches), f"{kind} sweep")
    result = tune(ctx.model, ctx.heads(kind), growth, prompts, batch=list(c.live_batches),
                  sizes=sizes, out=path, measure=c.measurement("sweep"),
                  measure_at=c.measurements("sweep"),
                  config=_sweep_decoding(ctx), costs=plan.costs, trace=own,
                  select_trace=plan.select_trace,
                  meta={"model": "treeopt demo", "device": c.device,
                        "alongside": sweep_method(c, ctx.paths, kind)["alongside"]},
                  race_best=c.sweep_race, before_point=alongside,
                  continuous=c.sweep_batching == "continuous", together=c.sweep_together,
                  progress=lambda i, n, bar=bar: bar.update(i - bar.n))
    bar.close()
    _log_summary(ctx, kind, result)
    record = {"file": path.name, "summary": result.summary(),
              "method": sweep_method(c, ctx.paths, kind),
              "seconds": round(time.perf_counter() - start, 1)}  # this run's (a resumed one's part)
    if alongside is not None:
        record["alongside"] = _alongside_errors(ctx, kind, result, growth, own)
    chains = drafted_chain_sizes(growth, sizes, own, ctx.config.drafted_sweep)
    if chains is not None:
        record["drafted"] = _drafted_sweep(ctx, kind, prompts, growth, chains, plan.costs, own,
                                           plan.select_trace)
    return record


def drafted_chain_sizes(growth: Growth, sizes: list[int], trace: RankTrace,
                        how: str) -> list[int] | None:
    """The swept sizes whose trees are chains a lookup drafter verifies as far as it drafted,
    swept so beside select's pick (``how``, :attr:`~treeopt.demo.config.DemoConfig.drafted_sweep`:
    "pick", none but the pick); None where the trace records no drafted lengths (no lookup
    drafter, or an older trace): no such sweep."""
    from treeopt.decoding.live_sweep import family_tree

    if trace.drafted is None:
        return None
    if how == "pick":
        return []
    return [n for n in sizes if family_tree(growth, n, None).is_chain]


def _drafted_sweep(ctx: Context, kind: str, prompts: list[list[int]], growth: Growth,
                   sizes: list[int], costs: StepCosts, own: RankTrace,
                   select_trace: RankTrace) -> dict[str, Any]:
    """The lookup drafter's chains of ``sizes`` swept verified only as far as they were drafted,
    as its selection's picks decode (``tune --drafted-only``), and select's drafted pick per
    batch: the same prompts, tokens and timing as the whole trees' sweep."""
    from treeopt.decoding.live_sweep import tune

    c = ctx.config
    path = ctx.paths.drafted_sweep(kind, c.device)
    start = time.perf_counter()
    bar = ctx.bar((len(sizes) + 1) * len(c.live_batches), f"{kind} drafted sweep")
    result = tune(ctx.model, ctx.heads(kind), growth, prompts, batch=list(c.live_batches),
                  sizes=sizes, out=path, measure=c.measurement("sweep"),
                  measure_at=c.measurements("sweep"),
                  config=_sweep_decoding(ctx), costs=costs, trace=own, select_trace=select_trace,
                  meta={"model": "treeopt demo", "device": c.device},
                  continuous=c.sweep_batching == "continuous", drafted=True,
                  together=c.sweep_together,
                  progress=lambda i, n, bar=bar: bar.update(i - bar.n))
    bar.close()
    _log_summary(ctx, f"{kind} (verified as drafted)", result)
    return {"file": path.name, "swept": c.drafted_sweep, "summary": result.summary(),
            "seconds": round(time.perf_counter() - start, 1)}


def _sweep_decoding(ctx: Context) -> Any:
    """How a sweep decodes: the live new tokens, rows stopping at EOS as traced."""
    from treeopt.decoding.config import DecodeConfig

    return DecodeConfig(max_new_tokens=ctx.config.live_new_tokens,
                        eos_token_id=ctx.tokenizer.eos_token_id)


def _log_summary(ctx: Context, name: str, sweep: Sweep) -> None:
    for row in sweep.summary():
        ctx.log(f"  {name} batch {row['batch']}: best {row['best_size']} nodes "
                f"{row['best_speedup']:.2f}×; select picks {row.get('selected_size')} "
                f"({row.get('selected_share_of_best', float('nan')):.0%} of the best)")


def _alongside_errors(ctx: Context, kind: str, sweep: Sweep, growth: Growth, own: RankTrace,
                      ) -> dict[str, Any]:
    """The sweep's points predicted from the profile taken alongside them, per batch."""
    from treeopt.demo.evidence import alongside_errors
    from treeopt.model.runs import as_run

    path = ctx.paths.alongside_profile(kind, ctx.config.device)
    errors = alongside_errors(sweep, growth, demo_costs(ctx, path),
                              as_run(own, ctx.config.live_new_tokens))
    return {"file": path.name, "errors": errors}


def drafter_timing(ctx: Context, kind: str) -> dict[str, Any]:
    """What the drafters stage measures of a ``kind`` drafter's speed (its step profile and live
    sweep; nothing without the profiler)."""
    if not has_profiler():
        return {}
    return {"step_profile": kind_step_profile(ctx, kind), "sweep": kind_sweep(ctx, kind)}


def has_profiler() -> bool:
    """Whether the profiler (:mod:`treeopt.profiling`) can be imported here: without it the
    timing stages record that they were skipped."""
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


@contextmanager
def threads(n: int) -> Iterator[None]:
    """Time with ``n`` torch threads, as the app and the benchmarks run, then give the build its
    own threads back: training, tracing and checking need no timing and use every thread the
    build was given (their results do not depend on the count: a model's logits are bitwise
    the same on one thread and on two)."""
    from treeopt.decoding.models import torch_threads

    with torch_threads(n):
        yield
