"""Plotly figures of ``select --dynamic``'s document (``treeopt.dynamic-selection/1``): the best
static tree, the best dynamic settings and the best chain per batch size, and every dynamic
setting priced at one batch size. Pure functions of the JSON document."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import plotly.graph_objects as go

from treeopt.errors import TreeoptError
from treeopt.workbench import style
from treeopt.workbench.numbers import accept_length_text, nodes_text, speedup_text

Doc = Mapping[str, Any]

STATIC, DYNAMIC, CHAIN = "best static tree", "best dynamic settings", "best chain (top-k 1)"
SELECTED = "select's pick (Drafters page)"  # the static tree the other pages price
SPEEDUP_TITLE = style.axis_title("speed-up over autoregressive", "×")


def drafter(doc: Doc) -> str:
    """The drafter kind the document's settings draft with ("" when it names none)."""
    draft = doc.get("draft")
    return str(draft.get("kind") or "") if isinstance(draft, Mapping) else ""


def colours(doc: Doc) -> dict[str, str]:
    """The three series' colours: shades of the document's drafter (light: the chain; its own
    colour: the dynamic settings; dark: the static tree).

    >>> colours({"draft": {"kind": "eagle"}})[DYNAMIC] == style.drafter_colour("eagle")
    True
    """
    return dict(zip((CHAIN, DYNAMIC, STATIC), style.shades(drafter(doc), 3), strict=True))


def settings_label(p: Mapping[str, Any]) -> str:
    """A priced dynamic setting as ``topk 4, steps 4, draft tokens 16``.

    >>> settings_label({"topk": 4, "steps": 4, "draft_tokens": 16})
    'topk 4, steps 4, draft tokens 16'
    """
    return f"topk {p['topk']}, steps {p['steps']}, draft tokens {p['draft_tokens']}"


def contexts(doc: Doc) -> list[int]:
    """The contexts the document's points are priced at, ascending."""
    return sorted({int(p["context"]) for p in doc["points"]})


def points_at(doc: Doc, context: int | None = None) -> list[Mapping[str, Any]]:
    """The document's points at ``context`` (default: its smallest), by batch size."""
    if not doc.get("points"):
        raise TreeoptError("the dynamic selection holds no points")
    ctx = contexts(doc)[0] if context is None else context
    found = sorted((p for p in doc["points"] if p["context"] == ctx), key=lambda p: p["batch"])
    if not found:
        raise TreeoptError(f"the dynamic selection has no point at context {ctx} (has "
                           f"{contexts(doc)})")
    return found


def point(doc: Doc, batch: int, context: int | None = None) -> Mapping[str, Any]:
    """The document's point at (``batch``, ``context``)."""
    for p in points_at(doc, context):
        if p["batch"] == batch:
            return p
    raise TreeoptError(f"the dynamic selection has no point at batch {batch} (has "
                       f"{[p['batch'] for p in points_at(doc, context)]})")


def _series(name: str, batches: list[str], speedups: list[float | None],
            hover: list[str], symbol: str, colour: str) -> go.Scatter:
    dash = {CHAIN: "dot", STATIC: "dash"}.get(name, "solid")
    return go.Scatter(x=batches, y=speedups, mode="lines+markers", name=name,
                      line=dict(color=colour, dash=dash),
                      marker=dict(symbol=symbol, size=10, color=colour),
                      hovertext=hover, hoverinfo="text")


def static_vs_dynamic(doc: Doc, *, context: int | None = None) -> go.Figure:
    """Predicted speed-up over autoregressive decoding per batch size (categorical x): the best
    static tree, the best dynamic settings and the best chain, with each one's settings on
    hover and a dashed line at 1 (autoregressive)."""
    pts = points_at(doc, context)
    batches = [str(p["batch"]) for p in pts]
    static = [p["static"] for p in pts]
    best = [p["best"] for p in pts]
    chain = [p.get("best_chain") for p in pts]
    colour = colours(doc)
    fig = go.Figure([
        _series(STATIC, batches, [s["speedup"] for s in static],
                [f"batch {b}: static tree of {nodes_text(s['size'])} ({s['tokens']} tokens), "
                 f"E[L] {accept_length_text(s['expected_accept_length'])}, "
                 f"{speedup_text(s['speedup'])}"
                 for b, s in zip(batches, static, strict=True)], "square", colour[STATIC]),
        _series(DYNAMIC, batches, [d["speedup"] for d in best],
                [f"batch {b}: {settings_label(d)}, E[L] "
                 f"{accept_length_text(d['expected_accept_length'])}, "
                 f"{speedup_text(d['speedup'])}; {speedup_text(p['dynamic_over_static'])} the "
                 "static tree's tokens/s" for b, d, p in zip(batches, best, pts, strict=True)], "circle",
                colour[DYNAMIC]),
        _series(CHAIN, batches, [c["speedup"] if c else None for c in chain],
                [f"batch {b}: {settings_label(c)} (steps only), "
                 f"E[L] {accept_length_text(c['expected_accept_length'])}, "
                 f"{speedup_text(c['speedup'])}" if c else
                 f"batch {b}: no chain in the grid" for b, c in zip(batches, chain, strict=True)],
                "diamond", colour[CHAIN]),
    ])
    fig.add_hline(y=1.0, line=dict(color="black", dash="dash", width=1),
                  annotation_text="autoregressive", annotation_position="bottom right")
    fig.update_layout(xaxis=dict(type="category", title="batch size (sequences)"),
                      yaxis_title=SPEEDUP_TITLE,
                      **style.layout(height=440, title="Predicted speed-up per batch size "
                                                       f"(context {pts[0]['context']})"))
    return fig


def best_per_topk(grid: Sequence[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    """Per top-k, the fastest steps at each draft-token count, by draft tokens.

    >>> g = [{"topk": 2, "steps": s, "draft_tokens": 4, "speedup": x}
    ...      for s, x in ((2, 1.1), (3, 1.3))]
    >>> [(p["steps"], p["speedup"]) for p in best_per_topk(g)[2]]
    [(3, 1.3)]
    """
    best: dict[tuple[int, int], Mapping[str, Any]] = {}
    for p in grid:
        key = (int(p["topk"]), int(p["draft_tokens"]))
        if key not in best or p["speedup"] > best[key]["speedup"]:
            best[key] = p
    out: dict[int, list[Mapping[str, Any]]] = {}
    for (k, _), p in sorted(best.items()):
        out.setdefault(k, []).append(p)
    return out


def dynamic_grid(doc: Doc, batch: int, *, context: int | None = None) -> go.Figure:
    """At one batch size: predicted speed-up vs draft tokens (log₂ x), one line per top-k at its
    fastest number of steps (on hover; shades of the drafter's colour, darker with k), a star
    at the recommended setting and a dashed line at the static tree's speed-up."""
    p = point(doc, batch, context)
    lines = best_per_topk(p["grid"])
    fig = go.Figure()
    for (k, row), colour in zip(lines.items(), style.shades(drafter(doc), len(lines)),
                                strict=True):
        fig.add_trace(go.Scatter(
            x=[q["draft_tokens"] for q in row], y=[q["speedup"] for q in row],
            mode="lines+markers", name=f"topk {k}", line=dict(color=colour),
            marker=dict(color=colour, size=8),
            hovertext=[f"{settings_label(q)}: E[L] "
                       f"{accept_length_text(q['expected_accept_length'])}, "
                       f"{speedup_text(q['speedup'])}" for q in row], hoverinfo="text"))
    best = p["best"]
    fig.add_trace(go.Scatter(
        x=[best["draft_tokens"]], y=[best["speedup"]], mode="markers", name="recommended",
        marker=dict(symbol="star", size=18, color="gold", line=dict(color="black", width=1)),
        hovertext=f"recommended: {settings_label(best)}, {speedup_text(best['speedup'])}",
        hoverinfo="text"))
    ticks = sorted({int(q["draft_tokens"]) for q in p["grid"]})
    static = p["static"]
    fig.add_hline(y=static["speedup"], line=dict(color=colours(doc)[STATIC], dash="dash",
                                                 width=1),
                  annotation_text=f"static tree, {nodes_text(static['size'])}",
                  annotation_position="bottom right")
    fig.add_hline(y=1.0, line=dict(color=style.REFERENCE, dash="dot", width=1))
    fig.update_layout(xaxis=dict(type="log", tickvals=ticks, ticktext=[str(t) for t in ticks],
                                 title="draft tokens verified per step (tokens, root included)"),
                      yaxis_title=SPEEDUP_TITLE,
                      **style.layout(height=440, title=f"Batch {batch}: dynamic settings (each "
                                                       "top-k at its fastest steps)"))
    return fig


def recommended_rows(doc: Doc, *, context: int | None = None,
                     selected: Mapping[int, tuple[int, float]] | None = None
                     ) -> list[dict[str, Any]]:
    """The recommended settings per batch size beside the document's best static tree, one
    table row each, numbers as the app writes them; ``selected``: select's pick per batch size
    (nodes, predicted speed-up), as the Drafters page and the Overview show it, for a last
    column (a dash where it has none).

    >>> doc = {"points": [{"batch": 1, "context": 64, "dynamic_over_static": 0.866,
    ...     "best": {"topk": 2, "steps": 4, "draft_tokens": 8, "speedup": 1.616},
    ...     "static": {"size": 6, "speedup": 1.867}}]}
    >>> recommended_rows(doc, selected={1: (13, 1.7406)})[0]  # doctest: +NORMALIZE_WHITESPACE
    {'batch': 1, 'topk': 2, 'steps': 4, 'draft tokens': 8, 'predicted speed-up': '1.62×',
     'static tree here': '6 nodes', 'static speed-up here': '1.87×',
     'dynamic / static speed-up': '0.87×', "select's pick (Drafters page)": '13 nodes, 1.74×'}
    """
    rows = []
    for p in points_at(doc, context):
        row = {"batch": p["batch"], "topk": p["best"]["topk"], "steps": p["best"]["steps"],
               "draft tokens": p["best"]["draft_tokens"],
               "predicted speed-up": speedup_text(p["best"]["speedup"]),
               "static tree here": nodes_text(p["static"]["size"]),
               "static speed-up here": speedup_text(p["static"]["speedup"]),
               "dynamic / static speed-up": speedup_text(p["dynamic_over_static"])}
        if selected is not None:
            pick = selected.get(p["batch"])
            row[SELECTED] = (f"{nodes_text(pick[0])}, {speedup_text(pick[1])}" if pick
                             else None)
        rows.append(row)
    return rows
