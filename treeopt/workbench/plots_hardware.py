"""Plotly figures of latency, rooflines and throughput-optimal selection. Pure functions."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from treeopt.documents.sweep import Sweep, SweepPoint
from treeopt.pricing.selection import Selection
from treeopt.workbench import style
from treeopt.workbench.numbers import (
    SPEEDUP_FORMAT,
    accept_length_text,
    nodes_text,
    speedup_text,
)

_HEIGHT = 440


def roofline_figure(records: dict[str, Any], *, peak_flops: float, vector_flops: float,
                    bandwidth: float, title: str) -> go.Figure:
    """Operators of one (b, s, q) step as points on intensity × attained FLOP/s, with the roofs.

    ``records`` is one entry of :meth:`roofline.Roofline.records`; FLOP/s attained = flops / time.
    """
    ops = [o for o in records["operators"] if o["intensity"] and o["time_s"] > 0]
    x = np.array([o["intensity"] for o in ops])
    y = np.array([o["flops"] / o["time_s"] for o in ops]) / 1e12
    lo, hi = min(x.min(initial=1.0), 0.1) / 2, max(x.max(initial=1.0), peak_flops / bandwidth) * 4
    grid = np.geomspace(lo, hi, 200)
    fig = go.Figure([
        go.Scatter(x=grid, y=np.minimum(peak_flops, grid * bandwidth) / 1e12, mode="lines",
                   name="matmul roof", line=dict(color="black")),
        go.Scatter(x=grid, y=np.minimum(vector_flops, grid * bandwidth) / 1e12, mode="lines",
                   name="vector roof", line=dict(color="grey", dash="dash")),
        go.Scatter(x=x, y=y, mode="markers", name="operators",
                   marker=dict(size=10 + 20 * np.sqrt([o["time_s"] / records["time_s"]
                                                       for o in ops]),
                               color=["#d62728" if o["bound"] == "memory" else "#1f77b4"
                                      for o in ops]),
                   hovertext=[f"{o['name']} ×{o['count']} ({o['class']})<br>"
                              f"{o['flops'] / 1e9:.3g} GFLOP, {o['bytes'] / 1e6:.3g} MB<br>"
                              f"intensity {o['intensity']:.3g} FLOP/B, {o['bound']}-bound<br>"
                              f"{style.format_seconds(o['time_s'])}" for o in ops], hoverinfo="text"),
    ])
    ridge = peak_flops / bandwidth
    top = peak_flops / 1e12
    fig.add_trace(go.Scatter(x=[ridge, ridge], y=[top / 1e4, top], mode="lines+text",
                             line=dict(color="grey", dash="dot"), name="ridge point",
                             text=["", f"ridge {ridge:.0f} FLOP/B"], textposition="top left",
                             hoverinfo="skip"))
    fig.update_layout(xaxis=style.log_axis("operational intensity (FLOP/byte)", [lo, hi],
                                           range=[np.log10(lo), np.log10(hi)]),
                      yaxis=style.log_axis("attained throughput (TFLOP/s)",
                                           [*y, top / 1e4, top]),
                      **style.layout(height=_HEIGHT, title=title))
    return fig


def throughput_curves(selection: Selection, *, context: int, drafter: str = "") -> go.Figure:
    """Predicted tokens/s vs tree size, one curve per batch size (shades of ``drafter``'s
    colour, darker with the batch), best sizes marked."""
    fig = go.Figure()
    points = [p for p in selection.points if p.context == context]
    for p, colour in zip(points, style.shades(drafter, len(points)), strict=True):
        fig.add_trace(go.Scatter(x=list(p.curve.size), y=list(p.curve.tokens_per_s), mode="lines",
                                 name=f"batch {p.batch}", line=dict(color=colour)))
        fig.add_trace(go.Scatter(x=[p.best_size], y=[p.tokens_per_s], mode="markers",
                                 marker=dict(size=12, symbol="star", color=colour,
                                             line=dict(color="black", width=1)),
                                 showlegend=False,
                                 hovertext=f"batch {p.batch}: best {nodes_text(p.best_size)}, "
                                           f"{speedup_text(p.speedup)} autoregressive",
                                 hoverinfo="text"))
    rates = [r for p in points for r in p.curve.tokens_per_s]
    fig.update_layout(xaxis_title="tree size (nodes; 0 = autoregressive)",
                      yaxis=style.log_axis("throughput (tokens/s, whole batch)", rates),
                      **style.layout(height=_HEIGHT, title="Predicted throughput vs tree size "
                                                           f"(context {context})"))
    return fig


def best_size_heatmap(selection: Selection) -> go.Figure:
    """Best tree size over (batch, context); 0 means speculation does not pay."""
    batch, context = selection.batches, selection.contexts
    size = np.zeros((len(context), len(batch)))
    speed = np.zeros_like(size)
    for p in selection.points:
        i, j = context.index(p.context), batch.index(p.batch)
        size[i, j], speed[i, j] = p.best_size, p.speedup
    fig = go.Figure(go.Heatmap(z=size, x=[str(b) for b in batch], y=[str(s) for s in context],
                               customdata=speed, texttemplate="%{z}", textfont=dict(size=13),
                               colorscale="Blues", colorbar=dict(title="best size (nodes)"),
                               hovertemplate="batch %{x}, context %{y}: best a %{z}-node "
                                             "tree, %{customdata:" + SPEEDUP_FORMAT + "}× "
                                             "autoregressive<extra></extra>"))
    fig.update_layout(xaxis_title="batch size (sequences)", yaxis_title="context length (tokens)",
                      **style.layout(height=_HEIGHT, title="Best tree size (hover: speed-up "
                                                           "over autoregressive)"))
    return fig


def sweep_figure(sweep: Sweep, *, title: str, drafter: str = "") -> go.Figure:
    """Measured speed-up over autoregressive decoding against tree size per batch size (points,
    with the spread over rounds; shades of ``drafter``'s colour, darker with the batch) over
    what the step-cost model predicted for the same trees (dashed), a star at the measured best
    and a diamond at the tree select picked — the Hydra paper's Fig. 7–9 for this setup.

    The y axis is the quantity :meth:`Sweep.best` ranks by: each point's tokens/s over the
    autoregressive tokens/s measured interleaved with it, which the machine's drift between
    points cancels out of (the tokens/s themselves are on hover)."""
    fig = go.Figure()
    batches = sweep.batches
    sizes = [p.size for p in sweep.points if p.size > 0] or [1]
    for b, colour in zip(batches, style.shades(drafter, len(batches)), strict=True):
        pts = sorted((p for p in sweep.points if p.batch == b and p.max_depth is None
                      and p.family is None),
                     key=lambda p: p.size)  # the uncapped growth order: the growth's T_n
        x = [p.size for p in pts]
        fig.add_trace(go.Scatter(
            x=x, y=[p.speedup for p in pts], mode="markers+lines",
            name=f"batch {b} measured", line=dict(color=colour, width=1),
            marker=dict(color=colour, size=8),
            error_y=dict(type="data", array=[p.spread * p.speedup / 2 for p in pts],
                         visible=True, thickness=1),
            customdata=[[p.tree_tokens_per_s, p.autoregressive_tokens_per_s, _accepted(p),
                         _timed(p)] for p in pts],
            hovertemplate=f"batch {b}, a %{{x}}-node tree: %{{y:{SPEEDUP_FORMAT}}}× "
                          "autoregressive "
                          "(%{customdata[0]:.0f} against %{customdata[1]:.0f} tokens/s), "
                          "%{customdata[2]}%{customdata[3]}<extra></extra>"))
        if all(p.predicted_speedup is not None for p in pts):
            fig.add_trace(go.Scatter(
                x=x, y=[p.predicted_speedup for p in pts], mode="lines",
                name=f"batch {b} predicted", line=dict(color=colour, dash="dash")))
        for marker in _marked(sweep, b, colour):
            fig.add_trace(marker)
    fig.add_hline(y=1.0, line=dict(color=style.REFERENCE, dash="dot", width=1),
                  annotation_text="autoregressive", annotation_position="bottom right")
    fig.update_layout(xaxis=style.log_axis("tree size (nodes)", sizes, base=2),
                      yaxis_title=style.axis_title("measured speed-up over autoregressive", "×"),
                      **style.layout(height=_HEIGHT, title=title))
    return fig


def _marked(sweep: Sweep, batch: int, colour: str) -> list[go.Scatter]:
    """The star at ``batch``'s measured best and the diamond at select's pick, each at its
    measured speed-up."""
    best = sweep.best(batch)
    marks = [go.Scatter(
        x=[best.size], y=[best.speedup], mode="markers", showlegend=False,
        name=f"batch {batch} measured best",
        marker=dict(symbol="star", size=16, color=colour, line=dict(color="black", width=1)),
        hovertext=f"batch {batch}: measured best, {nodes_text(best.size)}{_capped(best)}, "
                  f"{speedup_text(best.speedup)}", hoverinfo="text")]
    pick = sweep.selected(batch)
    if pick is not None:
        marks.append(go.Scatter(
            x=[pick.size], y=[pick.speedup], mode="markers", showlegend=False,
            name=f"batch {batch} select's pick",
            marker=dict(symbol="diamond-open", size=15, color="black",
                        line=dict(color="black", width=2)),
            hovertext=f"batch {batch}: select's pick, {nodes_text(pick.size)}{_capped(pick)}, "
                      f"{speedup_text(pick.speedup)} measured" + _raced(sweep, batch),
            hoverinfo="text"))
    return marks


def _capped(point: SweepPoint) -> str:
    """A point's depth cap and family, for its hover (the uncapped growth order's points have
    neither)."""
    cap = "" if point.max_depth is None else f" (depth cap {point.max_depth})"
    return cap + ("" if point.family is None else f", a tree of the {point.family} growth")


def _accepted(point: SweepPoint) -> str:
    """A point's E[L], for its hover: per row and steady step (what its tokens/s counts) beside
    the one priced, where the sweep recorded them.

    >>> from dataclasses import replace
    >>> p = SweepPoint(4, 8, None, 3, ((0,),), 1.0, 1.0, 1.2, 0.01, 2.17, True)
    >>> _accepted(p), _accepted(replace(p, steady_accept_length=2.27, predicted_accept_length=2.3))
    ('E[L] 2.17', 'E[L] 2.27 per row and steady step (priced 2.30)')
    """
    if point.steady_accept_length is None:
        return f"E[L] {accept_length_text(point.mean_accept_length)}"
    priced = (f" (priced {accept_length_text(point.predicted_accept_length)})"
              if point.predicted_accept_length is not None else "")
    return (f"E[L] {accept_length_text(point.steady_accept_length)} per row and steady "
            f"step{priced}")


def _timed(point: SweepPoint) -> str:
    """How a point was timed, for its hover: rounds and the speed-up's standard error."""
    rounds = f", {point.rounds} rounds" if point.rounds is not None else ""
    se = f", ± {point.se:.1%} (standard error)" if point.se is not None else ""
    return rounds + se


def _raced(sweep: Sweep, batch: int) -> str:
    """The pick's share of the best when the two were raced head to head, for its hover."""
    race = sweep.race(batch)
    return "" if race is None else f"; raced against the best: {race.selected_over_best:.1%} of it"
