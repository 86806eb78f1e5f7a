"""Plotly figures comparing drafters (Medusa, Hydra, EAGLE, a draft model, the n-gram drafters)
on the same base model and hardware: acceptance by tree size and by prompt set (code, prose),
drafting cost by depth, and predicted (and, where swept, measured) throughput per batch size with
the drafter ``choose_drafter`` picks. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go

from treeopt.documents.sweep import Sweep
from treeopt.pricing.costs import StepCosts
from treeopt.pricing.selection import Selection, choose_drafter
from treeopt.workbench import style
from treeopt.workbench.numbers import ACCEPT_LENGTH_FORMAT, SPEEDUP_FORMAT


def acceptance_by_size(curves: Mapping[str, npt.ArrayLike]) -> go.Figure:
    """E[L] of each drafter's growth against tree size (per step on the calibration trace, as
    the Trees page and the pricing read it), on a log axis ticked 1, 2, 4, 8 … (0 nodes,
    autoregressive with E[L] = 1, is in the hover but off the log axis)."""
    fig = go.Figure()
    largest = 1
    for name, ell in curves.items():
        y = np.asarray(ell, dtype=float)
        fig.add_trace(go.Scatter(x=list(range(len(y))), y=y.tolist(), mode="lines", name=name,
                                 line=dict(color=style.drafter_colour(name), width=2),
                                 hovertemplate=f"{name}: %{{x}}-node tree, E[L] "
                                               f"%{{y:{ACCEPT_LENGTH_FORMAT}}}<extra></extra>"))
        largest = max(largest, len(y) - 1)
    fig.update_layout(xaxis=style.log_axis("tree size (nodes)", [1, largest], base=2),
                      yaxis_title="E[L] (tokens per step)",
                      **style.layout(title="Expected accepted length by tree size "
                                           "(calibration trace)"))
    return fig


def drafting_cost_by_depth(costs: Mapping[str, StepCosts], *, batch: int,
                           depth: int) -> go.Figure:
    """Milliseconds a step spends drafting a chain of each depth (one node per depth), as the
    step-cost model fitted to each drafter's profiled live steps prices it, beside the verify
    step of that chain (dotted)."""
    fig = go.Figure()
    depths = list(range(1, depth + 1))
    for name, c in costs.items():
        draft = [c.draft.seconds(batch, tuple([1] * d)) * 1e3 for d in depths]
        fig.add_trace(go.Scatter(x=depths, y=draft, mode="lines+markers", name=name,
                                 line=dict(color=style.drafter_colour(name), width=2),
                                 hovertemplate=f"{name}: depth %{{x}}, %{{y:.3f}} ms drafting"
                                               "<extra></extra>"))
    first = next(iter(costs.values()), None)
    if first is not None:
        context = first.verify.contexts[len(first.verify.contexts) // 2]
        verify = (first.verify.seconds(batch, context, np.array(depths) + 1) * 1e3).tolist()
        fig.add_trace(go.Scatter(x=depths, y=verify, mode="lines", name="verify step",
                                 line=dict(color="black", dash="dot")))
    fig.update_layout(xaxis=dict(title="tree depth (tokens below the root)", dtick=1),
                      yaxis_title="time per step (ms)",
                      **style.layout(title=f"Drafting cost per step by depth, batch {batch} "
                                           "(step-cost model)"))
    return fig


def throughput_by_batch(selections: Mapping[str, Selection], *, context: int,
                        sweeps: Mapping[str, Sweep | None] | None = None) -> go.Figure:
    """Predicted speed-up over autoregressive decoding of each drafter's best tree per batch size
    (bars; tokens/s on hover), the measured best of its live sweep where there is one
    (diamonds, each over its drafter's bar), and a star over the drafter chosen (``none``: no
    tree pays), one trace per batch size."""
    fig = go.Figure()
    chosen = {c.batch: c for c in choose_drafter(dict(selections)) if c.context == context}
    batches = sorted(chosen)
    labels = [str(b) for b in batches]
    heights = [1.0]
    for name, sel in selections.items():
        pts = [sel.point(b, context) for b in batches]
        colour = style.drafter_colour(name)
        fig.add_trace(go.Bar(x=labels, y=[p.speedup for p in pts], name=name,
                             marker_color=colour, offsetgroup=name,
                             customdata=[[p.tree.size, p.tokens_per_s] for p in pts],
                             hovertemplate=f"{name}, batch %{{x}}: %{{y:{SPEEDUP_FORMAT}}}× "
                                           "autoregressive predicted, a %{customdata[0]}-node "
                                           "tree, %{customdata[1]:.0f} tokens/s"
                                           "<extra></extra>"))
        sweep = (sweeps or {}).get(name)
        if sweep is not None:
            measured = [sweep.best(b).speedup if b in sweep.batches else None for b in batches]
            heights += [m for m in measured if m is not None]
            fig.add_trace(_diamonds(name, labels, measured))
    for i, (b, label) in enumerate(zip(batches, labels, strict=True)):
        top = max(chosen[b].speedups.values()) * 1.04
        heights.append(top)
        fig.add_trace(_star(chosen[b].drafter, label, top, grouped=chosen[b].drafter in
                            selections, legend=i == 0))
    fig.add_hline(y=1.0, line=dict(color=style.REFERENCE, dash="dot"),
                  annotation_text="autoregressive", annotation_position="bottom left",
                  annotation_bgcolor="rgba(255,255,255,0.8)")
    # scattermode group: a marker sits over its own drafter's bar, not over the group's middle
    fig.update_layout(barmode="group", scattermode="group", xaxis_title="batch size (sequences)",
                      yaxis=dict(title="speed-up over autoregressive (×)",
                                 range=[0, max(heights) * 1.15]),  # room for the stars' names
                      **style.layout(title="Best tree's speed-up per drafter and batch size "
                                           f"(context {context})"))
    return fig


def _diamonds(name: str, labels: list[str], measured: list[float | None]) -> go.Scatter:
    """The measured best of ``name``'s live sweep per batch size, over its bars."""
    colour = style.drafter_colour(name)
    return go.Scatter(x=labels, y=measured, mode="markers", offsetgroup=name,
                      name=f"{name} measured best", showlegend=False,
                      marker=dict(symbol="diamond", size=10, color="white",
                                  line=dict(color=colour, width=2)),
                      hovertemplate=f"{name}, batch %{{x}}: %{{y:{SPEEDUP_FORMAT}}}× measured "
                                    "(best tree of the sweep)<extra></extra>")


def _star(drafter: str, label: str, top: float, *, grouped: bool, legend: bool) -> go.Scatter:
    """The star naming the drafter chosen at batch ``label``, over its bar where it has one."""
    return go.Scatter(x=[label], y=[top], mode="markers+text", text=[drafter],
                      textposition="top center", name="chosen", legendgroup="chosen",
                      showlegend=legend, offsetgroup=drafter if grouped else None,
                      marker=dict(symbol="star", size=14, color="gold",
                                  line=dict(color="black", width=1)),
                      hoverinfo="skip")


PROMPT_SETS = (("heldout_code_expected_accept_length", "held-out code", "#4c78a8"),
               ("code_grown_expected_accept_length", "prose, the code-grown tree", "#f58518"),
               ("expected_accept_length", "prose, a tree grown on prose", "#f2b880"))


def acceptance_by_prompt_set(record: Mapping[str, Mapping[str, Mapping[str, float]]], *,
                             size: int) -> go.Figure:
    """Each drafter's E[L] at ``size`` nodes on the held-out code prompts and on the prose ones
    (the demo's ``prose`` stage record: drafter → what it measured; sizes as JSON keys), the
    code-grown tree's and a prose-grown tree's: where a drafter that copies loses. The record
    holds position-weighted E[L] (every position alike), above the per-step figures of the
    other charts where drafts run long: the axis says so."""
    kinds = [k for k, v in record.items() if isinstance(v, Mapping) and
             str(size) in v.get("expected_accept_length", {})]
    fig = go.Figure()
    for key, label, colour in PROMPT_SETS:
        values = [float(record[k][key][str(size)]) for k in kinds]
        fig.add_trace(go.Bar(x=kinds, y=values, name=label, marker_color=colour,
                             hovertemplate=f"%{{x}}, {label}: E[L] "
                                           f"%{{y:{ACCEPT_LENGTH_FORMAT}}}<extra></extra>"))
    fig.update_layout(barmode="group", yaxis_title="E[L], position-weighted (tokens)",
                      xaxis_title="drafter",
                      **style.layout(title=f"E[L] with {size}-node trees: code against prose "
                                           "prompts (position-weighted)"))
    return fig
