"""Plotly figures of heads, trees and growth curves. Pure functions: data in, figure out.

Used by the Streamlit pages; they never compute, only pass library results here and render.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go

from treeopt.model.accuracy import AccuracyTable
from treeopt.model.tree import Tree
from treeopt.workbench import style

ACCURACY_KINDS: tuple[str, ...] = ("marginal", "cumulative", "conditional")
_DASHES = ("solid", "dash", "dot", "dashdot")
_SYMBOLS = ("diamond", "x", "square")


def accuracy_heatmap(table: AccuracyTable, *, kind: str = "marginal", title: str = "",
                     max_rank: int = 10, drafter: str | None = None) -> go.Figure:
    """Depth × rank heatmap of ``kind`` accuracies (percent; value and count on hover), its
    colours spanning the values shown (see :func:`~treeopt.workbench.style.heat_scale`), its
    rows ``head k`` or ``depth k`` as ``drafter``'s kind drafts them."""
    if kind == "conditional" and table.conditional is None:
        values = np.full_like(table.marginal, np.nan)
    else:
        values = {"marginal": table.marginal, "cumulative": table.cumulative,
                  "conditional": table.conditional}[kind]
    values = np.asarray(values)[:, :max_rank] * 100
    counts = table.conditional_counts if kind == "conditional" else table.counts
    rows = [style.position_label(drafter, k + 1) for k in range(table.heads)]
    ranks = [f"top{i + 1}" if kind == "cumulative" else f"rank {i}" for i in range(values.shape[1])]
    hover = [[f"{rows[k]}, {ranks[i]}: {values[k, i]:.2f}%"
              + ("" if counts is None else f"<br>n = {int(counts[k]):,}")
              for i in range(values.shape[1])] for k in range(values.shape[0])]
    scale = style.heat_scale(values)
    fig = go.Figure(go.Heatmap(z=scale.z(values), x=ranks, y=rows, colorscale="Viridis",
                               zmin=scale.zmin, zmax=scale.zmax, text=np.round(values, 1),
                               texttemplate="%{text}", hovertext=hover, hoverinfo="text",
                               colorbar=scale.colorbar(
                                   "accuracy (%, log scale)" if scale.log else "accuracy (%)")))
    fig.update_layout(title=title or f"{kind.capitalize()} accuracy per depth and rank",
                      xaxis_title="candidate rank" if kind != "cumulative" else "top-i",
                      yaxis_title=style.position_noun(drafter),
                      yaxis_autorange="reversed", **style.layout())
    return fig


def growth_curves(curves: Mapping[str, npt.ArrayLike], *,
                  points: Mapping[str, tuple[int, float]] | None = None,
                  title: str = "Expected accepted length vs tree size") -> go.Figure:
    """E[L]-vs-size curves (index = number of nodes), plus single trees as labelled points.
    A curve named ``drafter · …`` takes the drafter's colour; a drafter's further curves dash."""
    fig = go.Figure()
    seen: dict[str, int] = {}
    for name, values in curves.items():
        y = np.asarray(values, dtype=float)
        drafter = style.drafter_of(name)
        repeat = seen[drafter] = seen.get(drafter, -1) + 1
        fig.add_trace(go.Scatter(x=np.arange(y.size), y=y, mode="lines", name=name,
                                 line=dict(color=style.drafter_colour(drafter),
                                           dash=_DASHES[repeat % len(_DASHES)]),
                                 hovertemplate="%{x} nodes: E[L] = %{y:.4f}<extra>" + name
                                 + "</extra>"))
    for i, (name, (size, ell)) in enumerate((points or {}).items()):
        fig.add_trace(go.Scatter(x=[size], y=[ell], mode="markers+text", name=name,
                                 text=[name], textposition="top center",
                                 marker=dict(size=12, symbol=_SYMBOLS[i % len(_SYMBOLS)],
                                             color="#222222")))
    fig.update_layout(title=title, xaxis_title="tree size (nodes, root excluded)",
                      yaxis_title="E[L] (tokens per step)", **style.layout())
    return fig


def gap_curve(calibration: npt.ArrayLike, held_out: npt.ArrayLike) -> go.Figure:
    """Calibration minus held-out E[L] per size: how much the grown trees overfit."""
    cal, held = np.asarray(calibration, float), np.asarray(held_out, float)
    n = min(cal.size, held.size)
    fig = go.Figure(go.Scatter(x=np.arange(n), y=cal[:n] - held[:n], mode="lines",
                               name="gap", hovertemplate="%{x} nodes: gap %{y:.4f}<extra></extra>"))
    fig.add_hline(y=0, line_dash="dot", line_color=style.REFERENCE)
    fig.update_layout(title="Held-out gap (calibration − held-out E[L])",
                      xaxis_title="tree size (nodes)", yaxis_title="gap (tokens per step)",
                      **style.layout())
    return fig


def tree_figure(tree: Tree, probabilities: Sequence[float] | None = None, *,
                title: str = "") -> go.Figure:
    """Interactive drawing: depth down the page, colour and size by acceptance probability."""
    xy = np.stack([tidy_x(tree), -tree.position_offsets.astype(float)], axis=1)
    prob = np.concatenate([[1.0], np.asarray(probabilities if probabilities is not None
                                             else np.full(tree.size, np.nan), dtype=float)])
    edge_x, edge_y = [], []
    for i, parent in enumerate(tree.parents.tolist()):
        edge_x += [xy[parent + 1, 0], xy[i + 1, 0], None]
        edge_y += [xy[parent + 1, 1], xy[i + 1, 1], None]
    labels = ["root (base model token)"] + [
        f"path {list(p)}<br>depth {len(p)}, rank {p[-1]}<br>P(accepted) = {prob[i + 1]:.4f}"
        for i, p in enumerate(tree.paths)]
    finite = np.nan_to_num(prob, nan=0.5)
    fig = go.Figure([
        go.Scatter(x=edge_x, y=edge_y, mode="lines", line=dict(color="#bbb", width=1),
                   hoverinfo="skip", showlegend=False),
        go.Scatter(x=xy[:, 0], y=xy[:, 1], mode="markers", hovertext=labels, hoverinfo="text",
                   showlegend=False,
                   marker=dict(size=8 + 22 * np.sqrt(finite), color=finite, colorscale="Viridis",
                               cmin=0, cmax=1, line=dict(color="#333", width=0.5),
                               colorbar=dict(title="P(accepted)"))),
    ])
    fig.update_layout(title=title or f"Tree of {tree.size} nodes, depth {tree.depth}",
                      xaxis=dict(visible=False),
                      yaxis=dict(title="depth (tokens below the root)",
                                 tickvals=-np.arange(tree.depth + 1),
                                 ticktext=[str(d) for d in range(tree.depth + 1)]),
                      **style.layout(height=460))
    return fig


def tidy_x(tree: Tree) -> npt.NDArray[np.float64]:
    """x of each token (root first): leaves evenly spaced in depth-first rank order, every
    parent centred over its children — a networkx post-order walk of the tree.

    >>> tidy_x(Tree.from_choices([[0], [1], [0, 0], [0, 1]])).tolist()
    [1.25, 0.5, 2.0, 0.0, 1.0]
    """
    import networkx as nx

    graph = nx.DiGraph()
    graph.add_node(0)
    # canonical order inserts siblings in rank order, so the walk visits them left to right
    graph.add_edges_from((int(p) + 1, i + 1) for i, p in enumerate(tree.parents.tolist()))
    x = np.zeros(tree.num_tokens)
    next_leaf = 0.0
    for token in nx.dfs_postorder_nodes(graph, 0):
        kids = list(graph.successors(token))
        if kids:
            x[token] = float(np.mean(x[kids]))
        else:
            x[token], next_leaf = next_leaf, next_leaf + 1.0
    return x


def widths_figure(widths: Mapping[str, Sequence[int]]) -> go.Figure:
    """Nodes per depth, one bar group per tree."""
    fig = go.Figure([go.Bar(x=list(range(1, len(w) + 1)), y=list(w), name=name)
                     for name, w in widths.items()])
    fig.update_layout(title="Width per depth", xaxis=dict(title="depth (tokens below the root)",
                                                          dtick=1),
                      yaxis_title="width (nodes)", barmode="group", **style.layout())
    return fig


def accept_histogram(histograms: Mapping[str, Sequence[int]]) -> go.Figure:
    """Accepted-length histograms (index = accepted tokens per step), as shares of steps."""
    fig = go.Figure()
    for name, hist in histograms.items():
        h = np.asarray(hist, dtype=float)
        share = h / max(h.sum(), 1.0) * 100
        fig.add_trace(go.Bar(x=np.arange(h.size)[1:], y=share[1:], name=name,
                             hovertemplate="%{x} tokens: %{y:.1f}% of steps<extra></extra>"))
    fig.update_layout(title="Accepted tokens per step",
                      xaxis_title="accepted length (tokens per step)",
                      yaxis_title="share of steps (%)", barmode="group", **style.layout())
    return fig


def time_split(ms_per_step: Mapping[str, float]) -> go.Figure:
    """Where a decoding step's time goes (drafting, verification, bookkeeping), per step."""
    fig = go.Figure(go.Bar(x=list(ms_per_step), y=list(ms_per_step.values()),
                           hovertemplate="%{x}: %{y:.3f} ms per step<extra></extra>"))
    fig.update_layout(title="Time per step, by phase (a profiled pass)", xaxis_title="phase",
                      yaxis_title="time per step (ms)", **style.layout())
    return fig
