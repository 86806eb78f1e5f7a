"""The prose stage of a demo build: a second prompt set where repeats are rare, each drafter's
trace and growth on it, and E[L] there beside the held-out code prompts' (the fastest drafter
per batch size on each set is priced last, from the finished files:
:func:`treeopt.demo.prompt_sets.ship_prose_choice`)."""

from __future__ import annotations

from typing import Any

from treeopt.demo.context import Context
from treeopt.demo.stage_traces import SIZES, greedy_trace


def prose(ctx: Context) -> dict[str, Any]:
    """A second prompt set where repeats are rare: requests people wrote (``prose_set``, e.g.
    ShareGPT's, in the base model's chat template: :func:`treeopt.demo.pretrained.chat_prompts`),
    else docstrings and comments of the files no training step has seen
    (:func:`treeopt.demo.corpus_prompts.sample_prose`). For every drafter the
    demo ships, its greedy rank trace on them (as on the held-out prompts) and the growth from
    it; and E[L] at a few sizes beside the held-out code prompts'. A trace and growth already on disk for the same drafter and prompts are
    reused (an interrupted stage, or a kind made again beside kept ones:
    :mod:`~treeopt.demo.stage_resume`'s ``outputs`` and ``kind_outputs`` name the files to remove
    first)."""
    from treeopt.demo.corpus_prompts import sample_prose, write_prompts
    from treeopt.demo.pretrained import chat_prompts

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
    ctx.log(f"  {kind}: E[L] (position-weighted) on prose "
            f"{g.expected_accept_length[sizes[-1]]:.3f}, held-out code {on_code[sizes[-1]]:.3f} "
            f"({sizes[-1]} nodes)")
    return {"positions": trace.positions, "sequences": int(trace.meta["sequences"]),
            "expected_accept_length": {n: float(g.expected_accept_length[n]) for n in sizes},
            "code_grown_expected_accept_length": {n: float(on_prose[n]) for n in sizes},
            "heldout_code_expected_accept_length": {n: float(on_code[n]) for n in sizes}}
