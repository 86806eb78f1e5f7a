"""Plotly figures of heads, trees and growth curves. Pure functions: data in, figure out.

Used by the Streamlit pages; they never compute, only pass library results here and render.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go

from treeopt.errors import TreeoptError
from treeopt.model.accuracy import AccuracyTable
from treeopt.model.tree import Tree
from treeopt.workbench import style
from treeopt.workbench.numbers import ACCEPT_LENGTH_FORMAT, PERCENT_FORMAT, nodes_text

ACCURACY_KINDS: tuple[str, ...] = ("marginal", "cumulative", "conditional")
_DASHES = ("solid", "dash", "dot", "dashdot")
_SYMBOLS = ("diamond", "x", "square")
_ROW_PX = 24  # a heatmap's height per head or depth
_WRITTEN_RANKS = 12  # up to this many ranks a heatmap writes each cell's value in it


def accuracy_values(table: AccuracyTable, kind: str, max_rank: int) -> npt.NDArray[np.float64]:
    """``kind`` accuracies of ``table`` in percent, ``[heads, ranks]`` up to ``max_rank`` ranks
    (NaN where the table has no conditional accuracies)."""
    if kind not in ACCURACY_KINDS:
        raise TreeoptError(f"accuracy kind {kind!r}: expected one of {', '.join(ACCURACY_KINDS)}")
    values = {"marginal": table.marginal, "cumulative": table.cumulative,
              "conditional": table.conditional}[kind]
    if values is None:
        values = np.full_like(table.marginal, np.nan)
    return np.asarray(values, dtype=float)[:, :max_rank] * 100


def _cells(table: AccuracyTable, values: npt.NDArray[np.float64], *, kind: str,
           drafter: str | None) -> tuple[list[str], list[list[str]]]:
    """One drafter's rows of the heatmap: their labels, and each cell's hover text (value and
    the positions it is measured on)."""
    counts = table.conditional_counts if kind == "conditional" else table.counts
    rows = [row_label(drafter, style.position_label(drafter, k + 1))
            for k in range(values.shape[0])]
    first = 1 if kind == "cumulative" else 0  # top-1 … or rank 0 …
    ranks = [f"top{i + first}" if kind == "cumulative" else f"rank {i}"
             for i in range(values.shape[1])]
    hover = [[f"{rows[k]}, {ranks[i]}: {values[k, i]:{PERCENT_FORMAT}}%"
              + ("" if counts is None else f"<br>n = {int(counts[k]):,} positions")
              for i in range(values.shape[1])] for k in range(values.shape[0])]
    return rows, hover


def row_label(drafter: str | None, position: str) -> str:
    """A heatmap row's label: the drafter and its head or depth.

    >>> row_label("hydra", "head 2"), row_label(None, "head 2")
    ('hydra · head 2', 'head 2')
    """
    return f"{drafter}{style.LABEL_SEPARATOR}{position}" if drafter else position


def accuracy_heatmaps(tables: Mapping[str, AccuracyTable], *, kind: str = "marginal",
                      max_rank: int = 10) -> go.Figure:
    """Depth × rank heatmap of ``kind`` accuracies (percent) of every drafter (``label →
    table``), in one panel: each drafter's rows (``head k`` or ``depth k`` as the label's kind
    drafts) under the one before, a line between drafters, every rank in the same column, on
    one colour scale with one colour bar: a colour reads the same accuracy in every row (see
    :func:`~treeopt.workbench.style.heat_scale`, over every drafter's values). One panel and
    one trace, not a panel per drafter: headless chromium drew the demo's six drafters in one
    panel in 0.26 s against 0.44 s in six, and redrew them in 0.14 against 0.23 s (medians of
    three, one core of the 2-core host, 2026-12-03)."""
    if not tables:
        raise TreeoptError("no accuracy tables to draw")
    values = {label: accuracy_values(t, kind, max_rank) for label, t in tables.items()}
    scale = style.heat_scale(np.concatenate([v.ravel() for v in values.values()]))
    cells = [_cells(tables[label], values[label], kind=kind, drafter=label) for label in tables]
    width = max(v.shape[1] for v in values.values())
    z = np.vstack([np.pad(v, ((0, 0), (0, width - v.shape[1])), constant_values=np.nan)
                   for v in values.values()])
    first = 1 if kind == "cumulative" else 0
    written = z.shape[1] <= _WRITTEN_RANKS  # cells wide enough to hold their value
    fig = go.Figure(go.Heatmap(
        z=scale.z(z), x=[str(i + first) for i in range(z.shape[1])],
        y=[row for rows, _ in cells for row in rows], coloraxis="coloraxis",
        text=[[f"{v:{PERCENT_FORMAT}}" for v in row] for row in z] if written else None,
        texttemplate="%{text}" if written else None,
        hovertext=[row for _, hover in cells for row in hover], hoverinfo="text"))
    ends = np.cumsum([v.shape[0] for v in values.values()])
    for end in ends[:-1]:  # a line between one drafter's rows and the next's
        fig.add_hline(y=float(end) - 0.5, line=dict(color="white", width=3))
    fig.update_yaxes(title_text=f"drafter · {_positions(list(tables))}", autorange="reversed",
                     automargin=True, type="category")
    fig.update_xaxes(title_text="top-i (the first i candidates)" if kind == "cumulative"
                     else "candidate rank (0: the first candidate)", automargin=True)
    bar = scale.colorbar("accuracy (%, log scale)" if scale.log else "accuracy (%)")
    lay = style.layout(height=_ROW_PX * int(ends[-1]) + 190,
                       title=f"{kind.capitalize()} accuracy per {_positions(list(tables))} and "
                             "rank (%)")
    fig.update_layout(coloraxis=dict(colorscale="Viridis", cmin=scale.zmin, cmax=scale.zmax,
                                     colorbar=bar), **lay)
    return fig


def accuracy_heatmap(table: AccuracyTable, *, kind: str = "marginal", max_rank: int = 10,
                     drafter: str | None = None) -> go.Figure:
    """One drafter's rows of :func:`accuracy_heatmaps`."""
    return accuracy_heatmaps({drafter or "": table}, kind=kind, max_rank=max_rank)


def _positions(labels: Sequence[str]) -> str:
    """``head``, ``depth`` or ``head or depth``: what the panels' rows are, in the panels'
    order."""
    return " or ".join(dict.fromkeys(style.position_noun(label or None) for label in labels))


def growth_curves(curves: Mapping[str, npt.ArrayLike], *,
                  points: Mapping[str, tuple[int, float]] | None = None,
                  title: str = "Expected accepted length vs tree size") -> go.Figure:
    """E[L]-vs-size curves (index = number of nodes), plus single trees as points, named in the
    legend (a label beside a point is cut off at the plot's edge). A curve named ``drafter · …`` takes the drafter's colour; a drafter's further curves dash."""
    fig = go.Figure()
    seen: dict[str, int] = {}
    for name, values in curves.items():
        y = np.asarray(values, dtype=float)
        drafter = style.drafter_of(name)
        repeat = seen[drafter] = seen.get(drafter, -1) + 1
        fig.add_trace(go.Scatter(x=np.arange(y.size), y=y, mode="lines", name=name,
                                 line=dict(color=style.drafter_colour(drafter),
                                           dash=_DASHES[repeat % len(_DASHES)]),
                                 hovertemplate="%{x}-node tree: E[L] %{y:"
                                 + ACCEPT_LENGTH_FORMAT + "}<extra>" + name + "</extra>"))
    for i, (name, (size, ell)) in enumerate((points or {}).items()):
        fig.add_trace(go.Scatter(x=[size], y=[ell], mode="markers", name=name,
                                 marker=dict(size=12, symbol=_SYMBOLS[i % len(_SYMBOLS)],
                                             color="#222222")))
    fig.update_layout(xaxis_title="tree size (nodes, root excluded)",
                      yaxis_title="E[L] (tokens per step)", **style.layout(title=title))
    return fig


def gap_curve(calibration: npt.ArrayLike, held_out: npt.ArrayLike) -> go.Figure:
    """Calibration minus held-out E[L] per size: how much the grown trees overfit."""
    cal, held = np.asarray(calibration, float), np.asarray(held_out, float)
    n = min(cal.size, held.size)
    fig = go.Figure(go.Scatter(x=np.arange(n), y=cal[:n] - held[:n], mode="lines",
                               name="gap", hovertemplate="%{x}-node tree: gap %{y:"
                               + ACCEPT_LENGTH_FORMAT + "} tokens per step<extra></extra>"))
    fig.add_hline(y=0, line_dash="dot", line_color=style.REFERENCE)
    fig.update_layout(xaxis_title="tree size (nodes)", yaxis_title="gap (tokens per step)",
                      **style.layout(title="Held-out gap (calibration − held-out E[L])"))
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
        f"path {list(p)}<br>depth {len(p)}, rank {p[-1]}<br>P(accepted) = {prob[i + 1] * 100:{PERCENT_FORMAT}}%"
        for i, p in enumerate(tree.paths)]
    finite = np.nan_to_num(prob, nan=0.5)
    fig = go.Figure([
        go.Scatter(x=edge_x, y=edge_y, mode="lines", line=dict(color="#bbb", width=1),
                   hoverinfo="skip", showlegend=False),
        go.Scatter(x=xy[:, 0], y=xy[:, 1], mode="markers", hovertext=labels, hoverinfo="text",
                   showlegend=False,
                   marker=dict(size=8 + 22 * np.sqrt(finite), color=finite, colorscale="Viridis",
                               cmin=0, cmax=1, line=dict(color="#333", width=0.5),
                               colorbar=dict(title=dict(text="P(accepted)", side="right")))),
    ])
    fig.update_layout(xaxis=dict(visible=False),
                      yaxis=dict(title="depth (tokens below the root)",
                                 tickvals=-np.arange(tree.depth + 1),
                                 ticktext=[str(d) for d in range(tree.depth + 1)]),
                      **style.layout(height=460, title=title or f"Tree of "
                                     f"{nodes_text(tree.size)}, depth {tree.depth}"))
    return fig


def load_tree_layout() -> None:
    """Import networkx, which :func:`tidy_x` lays trees out with (0.4 s on the reference host),
    ahead of the first tree figure; it imports neither numpy's dependants nor pandas."""
    import networkx  # noqa: F401


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
    fig.update_layout(xaxis=dict(title="depth (tokens below the root)", dtick=1),
                      yaxis_title="width (nodes)", barmode="group",
                      **style.layout(title="Width per depth"))
    return fig


def accept_histogram(histograms: Mapping[str, Sequence[int]]) -> go.Figure:
    """Accepted-length histograms (index = accepted tokens per step), as shares of steps."""
    fig = go.Figure()
    for name, hist in histograms.items():
        h = np.asarray(hist, dtype=float)
        share = h / max(h.sum(), 1.0) * 100
        fig.add_trace(go.Bar(x=np.arange(h.size)[1:], y=share[1:], name=name,
                             hovertemplate="%{x} tokens: %{y:" + PERCENT_FORMAT
                                           + "}% of steps<extra></extra>"))
    fig.update_layout(xaxis_title="accepted length (tokens per step)",
                      yaxis_title="share of steps (%)", barmode="group",
                      **style.layout(title="Accepted tokens per step"))
    return fig


def time_split(ms_per_step: Mapping[str, float]) -> go.Figure:
    """Where a decoding step's time goes (drafting, verification, bookkeeping), per step."""
    fig = go.Figure(go.Bar(x=list(ms_per_step), y=list(ms_per_step.values()),
                           hovertemplate="%{x}: %{y:.3f} ms per step<extra></extra>"))
    fig.update_layout(xaxis_title="phase", yaxis_title="time per step (ms)",
                      **style.layout(title="Time per step, by phase (a profiled pass)"))
    return fig
