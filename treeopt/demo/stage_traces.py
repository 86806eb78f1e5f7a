"""The trace stages of a demo build: each drafter's greedy rank traces (calibration and held-out
prompts), its growths from them, and its traces and growths of sampled continuations at the
config's temperatures; E[L] at :data:`SIZES` in their records. Every continuation stops at the
tokenizer's end of sequence, as live decoding does: a trace never walks past it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from treeopt.demo.context import Context

if TYPE_CHECKING:

    from treeopt.decoding.drafter import Drafter
    from treeopt.drafters.suffix import SuffixDrafter
    from treeopt.model.trace import RankTrace

SIZES = (1, 4, 16, 64)  # tree sizes the manifest reports E[L] at


def traces(ctx: Context) -> dict[str, Any]:
    return {kind: kind_traces(ctx, kind) for kind in ctx.kinds}


def kind_traces(ctx: Context, kind: str) -> dict[str, Any]:
    """The greedy rank traces of the ``kind`` drafter on the calibration and held-out prompts."""
    out = {}
    for part in ("calibration", "heldout"):
        trace = greedy_trace(ctx, kind, part, ctx.paths.trace(kind, heldout=part == "heldout"))
        out[part] = {"positions": trace.positions, "sequences": int(trace.meta["sequences"])}
    return out


def greedy_trace(ctx: Context, kind: str, part: str, out: Path, *,
                 heads: Drafter | None = None, responses: Path | None = None) -> RankTrace:
    """The ``kind`` drafter's greedy rank trace on the ``part`` prompts, written to ``out``
    (resumed when a run was interrupted): the demo's top-k, continuation length and batch.
    ``heads``: the drafter (default the demo's); ``responses``: where suffix decoding writes
    the responses it served."""
    from treeopt.decoding.calibrate import calibrate

    c, cal = ctx.config, ctx.trace_config()
    prompts = ctx.prompt_ids(part)
    bar = ctx.bar(-(-len(prompts) // c.calibration_batch), f"{kind} {part} trace")
    trace, _ = calibrate(ctx.model, heads or ctx.heads(kind), prompts, out,
                         config=cal,
                         meta={"model": "treeopt demo", "prompts": f"prompts/{part}.jsonl"},
                         progress=lambda i, n, bar=bar: bar.update(1),
                         continuations=ctx.continuations, features=ctx.features,
                         responses=responses)
    bar.close()
    return trace


def warmed_drafter(ctx: Context, drafter: SuffixDrafter) -> SuffixDrafter:
    """Suffix decoding as the demo ships it: ``drafter``'s cache warmed by the calibration
    prompts' responses, as a server's that served them first. They are decoded here, in order
    from an empty cache (a trace kept in the build's scratch), which writes the history into the
    drafter's directory; every trace of the demo is then ranked through it, a calibration
    problem with every other one's response (leave-one-out, :mod:`treeopt.model.responses`)."""
    from treeopt.drafters.suffix import replace_history
    from treeopt.model.responses import RESPONSES_FILE, read_responses

    kind = drafter.kind.name
    served = ctx.paths.heads(kind) / RESPONSES_FILE
    greedy_trace(ctx, kind, "calibration", ctx.scratch / f"{kind}-cold.npz",
                 heads=drafter.cold(), responses=served)
    return replace_history(drafter, read_responses(served, vocab_size=ctx.vocab_size))


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
    from treeopt.decoding.calibrate import calibrate
    from treeopt.model.growth import Growth, grow

    c, cal = ctx.config, ctx.trace_config(t)
    made = {}
    for part in ("calibration", "heldout"):
        prompts = ctx.prompt_ids(part)
        bar = ctx.bar(-(-len(prompts) // c.calibration_batch), f"{kind} {part} T={t}")
        made[part], _ = calibrate(
            ctx.model, ctx.heads(kind), prompts,
            ctx.paths.trace(kind, heldout=part == "heldout", temperature=t), config=cal,
            meta={"model": "treeopt demo", "prompts": f"prompts/{part}.jsonl"},
            progress=lambda i, n, bar=bar: bar.update(1), continuations=ctx.continuations,
            features=ctx.features)
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
