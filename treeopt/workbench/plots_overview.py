"""The Overview page's figure: per batch size, the chosen drafter's predicted speed-up beside the
one measured live (error bar: the spread over rounds) and the dynamic alternative. A pure
function of :class:`treeopt.workbench.overview.Overview`."""

from __future__ import annotations

import plotly.graph_objects as go

from treeopt.workbench.overview import Overview
from treeopt.workbench.style import drafter_colour

_LAYOUT = dict(template="plotly_white", margin=dict(l=60, r=20, t=60, b=50), height=420)
PREDICTED, MEASURED, DYNAMIC = "predicted (select)", "measured (sweep)", "dynamic (select --dynamic)"
AS_SWEPT = "predicted as swept (its prompts, profile alongside)"


def predicted_vs_measured(view: Overview) -> go.Figure:
    """Per batch size (categorical x): the chosen tree's predicted speed-up (bars, in the
    drafter's colour), its measurement (points; error bar: the rounds' spread, centred on the
    median; hollow where the sweep measured another size), the same tree priced as the sweep
    ran it (crosses, where the sweep took a profile alongside) and the dynamic alternative
    (diamonds), with sources on hover and a dashed line at 1 (autoregressive)."""
    answers = view.answers
    x = [f"batch {a.batch}" for a in answers]
    fig = go.Figure()
    fig.add_trace(go.Bar(
        x=x, y=[a.predicted.speedup for a in answers], name=PREDICTED,
        marker_color=[drafter_colour(a.drafter) for a in answers],
        text=[f"{a.drafter}<br>{a.tree_label}" for a in answers], textposition="inside",
        insidetextanchor="start",
        hovertext=[f"{a.drafter}, {a.tree_label}: {a.predicted.speedup:.2f}× predicted, "
                   f"{a.predicted.tokens_per_s:.0f} tokens/s<br>{a.predicted.source}"
                   for a in answers], hoverinfo="text"))
    measured = [a.measured for a in answers]
    fig.add_trace(go.Scatter(
        x=x, y=[m.speedup if m else None for m in measured], mode="markers", name=MEASURED,
        error_y=dict(type="data", array=[m.spread * m.speedup / 2 if m else 0 for m in measured],
                     visible=True, color="black"),
        marker=dict(size=12, color=["black" if m and m.same_tree else "white" for m in measured],
                    line=dict(color="black", width=2)),
        hovertext=[f"{m.speedup:.2f}× {m.label}, spread {m.spread:.1%}<br>{m.source}" if m
                   else "not measured" for m in measured], hoverinfo="text"))
    as_swept = [m.predicted_as_swept if m else None for m in measured]
    if any(v is not None for v in as_swept):
        fig.add_trace(go.Scatter(
            x=x, y=as_swept, mode="markers", name=AS_SWEPT,
            marker=dict(symbol="x-thin", size=12, line=dict(color="black", width=2)),
            hovertext=[f"{v:.2f}× predicted as the sweep ran: its prompts' acceptance, the step "
                       f"profile taken alongside its points ({v / m.speedup - 1:+.1%} of the "
                       "measurement)" if v is not None and m else ""
                       for v, m in zip(as_swept, measured, strict=True)], hoverinfo="text"))
    dynamic = [a.dynamic for a in answers]
    if any(dynamic):
        fig.add_trace(go.Scatter(
            x=x, y=[d.speedup if d else None for d in dynamic], mode="markers", name=DYNAMIC,
            marker=dict(symbol="diamond", size=11,
                        color=[drafter_colour(d.drafter) if d else None for d in dynamic],
                        line=dict(color="black", width=1)),
            hovertext=[f"{d.drafter}, dynamic: {d.settings}: {d.speedup:.2f}× predicted<br>"
                       f"{d.source}" if d else "" for d in dynamic], hoverinfo="text"))
    fig.add_hline(y=1.0, line=dict(color="black", dash="dash", width=1),
                  annotation_text="autoregressive", annotation_position="top left")
    fig.update_layout(title=f"Chosen drafter and tree per batch size: predicted vs measured "
                            f"(context {view.context})",
                      xaxis=dict(type="category", title="batch size (sequences decoded together)"),
                      yaxis=dict(title="speed-up over autoregressive decoding (×)",
                                 rangemode="tozero"), **_LAYOUT)
    return fig


__all__ = ["AS_SWEPT", "DYNAMIC", "MEASURED", "PREDICTED", "predicted_vs_measured"]
