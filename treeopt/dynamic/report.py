"""``treeopt select --dynamic``'s document: per (batch, context), the best dynamic settings, the
best chain (top-k 1) and the best static tree, each priced by the same step-cost model, and the
recommended settings as each engine takes them (``treeopt.dynamic-selection/1``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from treeopt.dynamic.recommend import FORMAT, recommend
from treeopt.dynamic.simulate import DynamicTrace
from treeopt.model.dynamic_settings import DynamicSettings, grid
from treeopt.pricing.contexts import pick_context
from treeopt.pricing.costs import DraftCost, OverheadCost, StepLatency
from treeopt.pricing.selection import Selection


def default_grid(traces: Mapping[int, DynamicTrace], max_tokens: int, *,
                 topks: Sequence[int] | None = None, steps: Sequence[int] | None = None,
                 draft_tokens: Sequence[int] | None = None) -> list[DynamicSettings]:
    """The settings scanned: the given values, else every top-k traced, 1 … the traces'
    steps, and draft tokens 2, 4, 8, … up to ``max_tokens``.

    >>> import numpy as np
    >>> tr = DynamicTrace(2, np.zeros((1, 2, 2), np.int16), (1,))
    >>> [s.label for s in default_grid({2: tr}, 4)]
    ['topk 2, steps 1, draft tokens 2', 'topk 2, steps 2, draft tokens 2', 'topk 2, steps 2, draft tokens 4']
    """
    most = max(t.steps for t in traces.values())
    tokens = list(draft_tokens or [])
    if not tokens:
        n = 2
        while n <= max_tokens:
            tokens.append(n)
            n *= 2
    return grid(tuple(topks or sorted(traces)), tuple(steps or range(1, most + 1)),
                tuple(tokens))


def engine_settings(s: DynamicSettings, *, attention: str | None = None) -> dict[str, Any]:
    """Each engine's flags or config for ``s`` (SGLang's, EAGLE-2's and TensorRT-LLM's
    EAGLE-3 dynamic tree: the same growth, top-k per level then the best draft tokens by
    cumulative score, :mod:`treeopt.engines.dynamic_trees`), and what an engine would refuse or
    change; ``attention`` is the target model's
    (:func:`treeopt.engines.trtllm.configs.attention_kind`; None: not known, which a note says
    where an engine refuses some)."""
    from treeopt.engines.dynamic_trees import (
        ENGINES,
        attention_notes,
        check_dynamic,
        export_dynamic,
    )

    return {name: {"text": export_dynamic(s, name),
                   "problems": check_dynamic(s, name, attention=attention),
                   **({"notes": notes} if (notes := attention_notes(name, attention)) else {})}
            for name in ENGINES}


def dynamic_selection(traces: Mapping[int, DynamicTrace], *, verify: StepLatency,
                      draft: DraftCost, overhead: OverheadCost, static: Selection,
                      topks: Sequence[int] | None = None, steps: Sequence[int] | None = None,
                      draft_tokens: Sequence[int] | None = None,
                      sources: Mapping[str, str] | None = None,
                      attention: str | None = None) -> dict[str, Any]:
    """The document, for every (batch, context) point of the ``static`` selection;
    ``attention``: the target model's, which decides whether TensorRT-LLM runs the settings."""
    settings = default_grid(traces, verify.max_tokens, topks=topks, steps=steps,
                            draft_tokens=draft_tokens)
    points = []
    for sp in static.points:
        context = pick_context(verify.contexts, sp.context, nearest=True)  # its own profile's
        choice = recommend(traces, settings, verify=verify, draft=draft, overhead=overhead,
                           batch=[sp.batch], context=context)[0]
        doc = choice.to_json()
        doc["static"] = {"size": sp.best_size, "tokens": sp.best_size + 1,
                         "expected_accept_length": sp.expected_accept_length,
                         "tokens_per_s": sp.tokens_per_s, "speedup": sp.speedup,
                         "autoregressive_tokens_per_s": sp.tokens_per_s / sp.speedup}
        # Each design is priced against the autoregressive step of its own profile; comparing
        # the speed-ups cancels any drift between the two profiles' measurements of that step.
        doc["dynamic_over_static"] = choice.best.speedup / sp.speedup
        doc["engines"] = engine_settings(choice.best.settings, attention=attention)
        doc["grid"] = [p.to_json() for p in choice.points]
        points.append(doc)
    return {"format": FORMAT, "traces": dict(sources or {}), "attention": attention,
            "latency": {"source": verify.source, **verify.meta},
            "draft": {"kind": draft.kind, "source": draft.source},
            "overhead": {"source": overhead.source},
            "grid": {"topk": sorted({s.topk for s in settings}),
                     "steps": sorted({s.steps for s in settings}),
                     "draft_tokens": sorted({s.draft_tokens for s in settings})},
            "static_growth": static.growth, "points": points}
