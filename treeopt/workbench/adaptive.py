"""The Hardware page's adaptive speculation: the engines' step controllers replayed on the demo's
held-out text with its drafter's step profile (:func:`demo_adaptive`), and two Plotly figures
of it — the steps SGLang's default and a tuned config choose round by round with the rounds'
E[L] (:func:`rounds_figure`), and the four strategies' predicted tokens/s per batch size
(:func:`strategies_figure`). No Streamlit here; numpy and Plotly only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from treeopt.adaptive.replay import Replay
from treeopt.adaptive.report import AdaptiveReport, BatchSide, StaticTree
from treeopt.adaptive.workload import WORKLOADS, replay_workload, replayed_runs
from treeopt.demo.adaptive_configs import REPLAY_POSITIONS, REPLAY_SEQUENCES, shipped_tuned
from treeopt.demo.load import Demo
from treeopt.errors import TreeoptError
from treeopt.model.growth import Growth
from treeopt.model.trace import RankTrace
from treeopt.pricing.costs import StepCosts
from treeopt.workbench import style
from treeopt.workbench.numbers import ACCEPT_LENGTH_FORMAT, accept_length_text, nodes_text

STRATEGIES = ("SGLang default adaptive", "tuned adaptive", "best fixed chain", "best static tree")
SEQUENCES, POSITIONS = REPLAY_SEQUENCES, REPLAY_POSITIONS  # the held-out share replayed
# the figures sit in half-width columns: a legend beside the plot would squeeze it, so below
_LEGEND_BELOW = dict(orientation="h", yanchor="top", y=-0.18, xanchor="left", x=0)
_LEGEND_PX = 70


@dataclass(frozen=True, eq=False)
class AdaptiveReplay:
    """:func:`~treeopt.adaptive.report.adaptive_report` of the demo's ``kind`` drafter on one
    workload: the four strategies per batch size, and the replays round by round."""

    kind: str
    workload: str
    report: AdaptiveReport
    sequences: int
    positions: int
    profile: str

    @property
    def batches(self) -> list[int]:
        return [s.batch for s in self.report.sides]

    def side(self, batch: int) -> BatchSide:
        for s in self.report.sides:
            if s.batch == batch:
                return s
        raise TreeoptError(f"batch {batch}: the replay covers batch sizes {self.batches}")


def demo_adaptive(demo: Demo, *, kind: str = "eagle", workload: str = "steady",
                  sequences: int = SEQUENCES, positions: int = POSITIONS,
                  batches: tuple[int, ...] = (1, 2, 4, 8),
                  static: Mapping[int, StaticTree] | None = None) -> AdaptiveReplay | None:
    """SGLang's default and tuned configs, the best fixed chain and the best static tree of the
    demo's ``kind`` drafter, replayed over the first ``sequences`` held-out sequences (each as a
    run of ``positions + 1`` new tokens sees it; ``workload`` orders them, :data:`WORKLOADS`) and priced by
    the drafter's step profile at the ``batches`` it profiles. None when the demo holds no step
    profile of ``kind``. ``static``: :func:`demo_static_trees` of the same arguments, where the
    caller has it (every workload shares it)."""
    from treeopt.adaptive.report import adaptive_report

    if workload not in WORKLOADS:
        raise TreeoptError(f"workload {workload!r}: expected one of {', '.join(WORKLOADS)}")
    path, costs = demo.step_profile(kind), demo.step_costs(kind)
    if path is None or costs is None or kind not in demo.heldout_traces:
        return None
    trace, acceptance = replay_workload(demo.heldout_traces[kind], workload,
                                        sequences=sequences, positions=positions,
                                        source=f"{kind} held-out")
    priced = [b for b in batches if b in costs.verify.batches and b <= acceptance.sequences]
    tuned = shipped_tuned(demo.paths, kind, workload, demo.latency.stem, sequences=sequences,
                          positions=positions, batches=tuple(priced))
    report = adaptive_report(acceptance, costs, batches=priced, tuned=tuned)
    if static is None:
        static = static_trees(demo.growths[kind], trace, costs, priced)
    sides = tuple(replace(side, static=static[side.batch]) for side in report.sides)
    return AdaptiveReplay(kind, workload, replace(report, sides=sides), sequences, positions,
                          path.name)


def demo_static_trees(demo: Demo, *, kind: str = "eagle", sequences: int = SEQUENCES,
                      positions: int = POSITIONS,
                      batches: tuple[int, ...] = (1, 2, 4, 8)) -> dict[int, StaticTree] | None:
    """The best static tree of :func:`demo_adaptive`'s replay at each batch size: the same for
    every workload (the workloads reorder the same held-out sequences). None where
    :func:`demo_adaptive` is."""
    costs = demo.step_costs(kind)
    if costs is None or kind not in demo.heldout_traces:
        return None
    trace = replayed_runs(demo.heldout_traces[kind], sequences=sequences, positions=positions)
    sequences_held = len(trace.meta.get("sequence_positions") or ()) or trace.positions
    priced = [b for b in batches if b in costs.verify.batches and b <= sequences_held]
    return static_trees(demo.growths[kind], trace, costs, priced)


def static_trees(growth: Growth, trace: RankTrace, costs: StepCosts,
                 batches: Sequence[int]) -> dict[int, StaticTree]:
    """The best static tree of ``growth`` at each of ``batches`` and the profile's middle
    context: :func:`treeopt.adaptive.report.adaptive_report`'s static side (``select``'s
    pricing of the per-step walk of ``trace``), priced in one selection for every batch — each
    point is priced on its own, so the trees are the same — instead of one per batch."""
    from treeopt.pricing.sources import price

    if not batches:
        return {}
    selection = price(growth, costs.verify, draft=costs.draft, overhead=costs.overhead,
                      batch=list(batches), context=[costs.context(None)], trace=trace)
    return {p.batch: StaticTree(p.best_size, p.expected_accept_length, p.tokens_per_s,
                                tuple(p.tree.paths)) for p in selection.points}


def moving_mean(values: npt.ArrayLike, window: int) -> npt.NDArray[np.float64]:
    """The mean of each value and the ``window − 1`` before it (fewer at the start).

    >>> moving_mean([1.0, 3.0, 2.0, 4.0], 2).tolist()
    [1.0, 2.0, 2.5, 3.0]
    """
    v = np.asarray(values, dtype=np.float64)
    sums = np.cumsum(np.concatenate([[0.0], v]))
    ends = np.arange(1, v.size + 1)
    starts = np.maximum(ends - window, 0)
    return (sums[ends] - sums[starts]) / (ends - starts)


def _rounds_trace(r: Replay, name: str, colour: str, *, window: int) -> list[go.Scatter]:
    rounds = list(range(r.rounds))  # plain lists: the JSON the browser gets reads as numbers
    steps = go.Scatter(x=rounds, y=r.steps.tolist(), name=f"{name}: steps", mode="lines",
                       line=dict(color=colour, shape="hv", width=2), legendgroup=name,
                       hovertemplate="round %{x}: %{y} steps<extra>" + name + "</extra>")
    ell = go.Scatter(x=rounds, y=moving_mean(r.accept_length, window).tolist(), name=f"{name}: E[L]",
                     mode="lines", line=dict(color=colour, width=1.5), legendgroup=name,
                     hovertemplate=("round %{x}: E[L] %{y:" + ACCEPT_LENGTH_FORMAT + "} (mean of "
                                    + str(window)
                                    + " rounds)<extra>" + name + "</extra>"))
    return [steps, ell]


def rounds_figure(replay: AdaptiveReplay, batch: int, *, window: int = 20) -> go.Figure:
    """Round by round at ``batch``: the steps SGLang's default config and the tuned one draft
    (top), and the rounds' E[L] (bottom, each point the mean of ``window`` rounds)."""
    side = replay.side(batch)
    colour = (style.REFERENCE, style.drafter_colour(replay.kind))
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.45, 0.55])
    for r, name, c in ((side.default, STRATEGIES[0], colour[0]),
                       (side.tuned, STRATEGIES[1], colour[1])):
        steps, ell = _rounds_trace(r, name, c, window=window)
        fig.add_trace(steps, row=1, col=1)
        fig.add_trace(ell, row=2, col=1)
    top = max(int(side.default.steps.max()), int(side.tuned.steps.max()))
    fig.update_yaxes(title_text="draft steps", dtick=1, range=[-0.3, top + 0.3], row=1, col=1,
                     automargin=True)
    fig.update_yaxes(title_text="E[L] (tokens per row-step)", row=2, col=1, automargin=True)
    fig.update_xaxes(title_text="round", row=2, col=1, automargin=True)
    fig.update_layout(legend=_LEGEND_BELOW, **style.layout(
        height=480 + _LEGEND_PX, title=f"{replay.kind} at batch {batch}: steps chosen and E[L] "
                                       f"per round ({replay.workload} workload)"))
    return fig


def strategy_rates(replay: AdaptiveReplay) -> dict[str, list[float | None]]:
    """Predicted tokens/s of each of :data:`STRATEGIES` per batch size (None: no static tree)."""
    sides = replay.report.sides
    return {STRATEGIES[0]: [s.default.tokens_per_s for s in sides],
            STRATEGIES[1]: [s.tuned.tokens_per_s for s in sides],
            STRATEGIES[2]: [s.best_fixed.tokens_per_s for s in sides],
            STRATEGIES[3]: [s.static.tokens_per_s if s.static else None for s in sides]}


def _hover(side: BatchSide, strategy: str) -> str:
    if strategy == STRATEGIES[3]:
        return (f"{nodes_text(side.static.size)}, E[L] "
                f"{accept_length_text(side.static.expected_accept_length)}"
                if side.static else "no static tree")
    r = {STRATEGIES[0]: side.default, STRATEGIES[1]: side.tuned,
         STRATEGIES[2]: side.best_fixed}[strategy]
    mix = ", ".join(f"{k}: {n / r.rounds:.0%}" for k, n in r.step_counts().items())
    return f"steps {mix}; E[L] {accept_length_text(r.mean_accept_length)}"


def strategies_figure(replay: AdaptiveReplay) -> go.Figure:
    """Predicted tokens/s per batch size (categorical x) of the four strategies, grouped bars,
    each bar's steps (or tree) and E[L] on hover."""
    batches = [str(b) for b in replay.batches]
    colours = style.shades(replay.kind, len(STRATEGIES))
    bars = [go.Bar(x=batches, y=rates, name=name, marker_color=colour,
                   hovertext=[_hover(s, name) for s in replay.report.sides],
                   hovertemplate="batch %{x}: %{y:.0f} tokens/s<br>%{hovertext}<extra>"
                                 + name + "</extra>")
            for (name, rates), colour in zip(strategy_rates(replay).items(), colours,
                                             strict=True)]
    fig = go.Figure(bars)
    fig.update_layout(barmode="group", legend=_LEGEND_BELOW,
                      xaxis=dict(type="category", title="batch size (sequences)"),
                      yaxis_title=style.axis_title("predicted throughput", "tokens/s"),
                      **style.layout(height=420 + _LEGEND_PX,
                                     title=f"{replay.kind}: predicted tokens/s per batch size "
                                           f"({replay.workload} workload)"))
    return fig
