"""Honest rendering: one colour per drafter on every figure, a slowdown shown as one, durations
in the unit their size needs, axes with units and readable log ticks, heatmaps scaled to their
data, and drafters labelled head k or depth k — :mod:`treeopt.workbench.style` and the figures
and pages that use it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from treeopt.registry.kinds import KINDS
from treeopt.workbench import style
from treeopt.workbench.style import (
    DRAFTER_COLOURS,
    OTHER_COLOURS,
    drafter_colour,
    format_seconds,
    heat_scale,
    log_ticks,
    position_label,
    shades,
    speedup_delta,
)

ROOT = Path(__file__).resolve().parents[1]
UNIT = re.compile(r"\(.+\)$")  # an axis title ends with its unit in parentheses


# --- style, unit by unit -------------------------------------------------------------------


def test_each_registered_drafter_has_its_own_fixed_colour():
    assert {k: drafter_colour(k) for k in ("medusa", "hydra", "eagle", "draft-model")} == {
        "medusa": "#1f77b4", "hydra": "#ff7f0e", "eagle": "#2ca02c", "draft-model": "#9467bd"}
    assert set(KINDS) <= set(DRAFTER_COLOURS)
    fixed = [drafter_colour(k) for k in KINDS]
    assert len(set(fixed)) == len(fixed)
    assert not set(fixed) & set(OTHER_COLOURS)


def test_other_labels_get_a_palette_colour_stable_across_processes():
    labels = ["vicuna", "my-heads", "upload.npz", ""]
    here = [drafter_colour(label) for label in labels]
    assert all(c in OTHER_COLOURS for c in here)
    assert here == [drafter_colour(label) for label in labels]  # stable across calls
    code = ("from treeopt.workbench.style import drafter_colour; "
            f"print([drafter_colour(x) for x in {labels!r}])")
    for seed in ("0", "12345"):  # not Python's salted hash: the same in every process
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, cwd=ROOT, env={"PYTHONHASHSEED": seed,
                                                        "PYTHONPATH": str(ROOT)})
        assert out.stdout.strip() == str(here)


def test_shades_run_light_to_dark_around_the_drafters_colour():
    three = shades("eagle", 3)
    assert three[1] == drafter_colour("eagle")
    brightness = [sum(int(c[i:i + 2], 16) for i in (1, 3, 5)) for c in shades("medusa", 5)]
    assert brightness == sorted(brightness, reverse=True) and len(set(brightness)) == 5
    assert shades("hydra", 0) == [] and shades("hydra", 1) == ["#ff7f0e"]


def test_a_speedup_below_one_is_a_slowdown_red_and_down():
    slow = speedup_delta(0.87)
    assert (slow.text, slow.colour, slow.arrow) == ("0.87× autoregressive (slower)", "red",
                                                    "down")
    assert slow.metric() == {"delta": "0.87× autoregressive (slower)", "delta_color": "red",
                             "delta_arrow": "down"}
    fast = speedup_delta(1.2)
    assert (fast.text, fast.colour, fast.arrow) == ("1.20× autoregressive (faster)", "green",
                                                    "up")
    assert speedup_delta(0.42).colour == "red"
    even = speedup_delta(0.999)  # shown as 1.00: neither a gain nor a loss
    assert (even.text, even.colour, even.arrow) == ("1.00× autoregressive (no gain)", "gray",
                                                    "off")


def test_durations_take_the_unit_their_size_needs():
    assert [format_seconds(s) for s in (3.229802985e-07, 4.43e-2, 1.2e-5, 2.5, 0.0009996)] == [
        "323 ns", "44.3 ms", "12.0 µs", "2.50 s", "1.00 ms"]


def test_no_model_and_hardware_preset_prints_zero_time():
    from treeopt.roofline import hardware_names, load_hardware, preset, preset_names, roofline

    shown = {format_seconds(roofline(preset(m), load_hardware(g), batch=[b], context=[128],
                                     tokens=[q]).records()[0]["time_s"])
             for m in preset_names() for g in hardware_names() for b, q in ((1, 1), (128, 128))}
    assert all(re.fullmatch(r"[1-9]\d{0,2}(\.\d+)? (ns|µs|ms|s)", s) for s in shown), shown


def test_log_ticks_are_round_numbers_without_clutter():
    assert log_ticks(1, 128, base=2) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert log_ticks(3, 50, base=2) == [2, 4, 8, 16, 32, 64]
    assert log_ticks(0.5, 1, base=2) == [0.5, 1]
    assert log_ticks(120, 2400) == [100, 200, 500, 1000, 2000, 5000]
    assert log_ticks(1e-4, 1e3) == [1e-4, 0.001, 0.01, 0.1, 1, 10, 100, 1000]
    axis = style.log_axis("tree size (nodes)", [0, 1, 9, 64], base=2)
    assert (axis["tickvals"], axis["ticktext"]) == ([1, 2, 4, 8, 16, 32, 64],
                                                    ["1", "2", "4", "8", "16", "32", "64"])
    assert style.log_axis("x (y)", [10, 2000])["ticktext"][-1] == "2,000"
    with pytest.raises(ValueError, match="0 < lo <= hi"):
        log_ticks(0, 8)


def test_drafters_are_labelled_by_what_proposes_each_depth():
    assert [position_label(k, 1) for k in ("medusa", "hydra", "eagle", "eagle3",
                                           "draft-model", "vicuna")] == [
        "head 1", "head 1", "depth 1", "depth 1", "depth 1", "head 1"]
    sequential = {k for k, kind in KINDS.items() if kind.position == "depth"}
    # one network run once per depth, or one lookup proposing a depth's tokens (a hybrid: as
    # its model drafter)
    assert sequential == {"eagle", "eagle3", "mtp", "draft-model", "prompt-lookup", "ngram-trie",
                          "suffix", "eagle+lookup", "eagle3+lookup", "mtp+lookup",
                          "draft-model+lookup"}


def test_the_heat_scale_spans_the_data():
    linear = heat_scale([[60.0, 80.0], [np.nan, 70.0]])
    assert (linear.log, linear.zmin, linear.zmax) == (False, 60.0, 80.0)
    skewed = heat_scale([[50.0, 5.0], [0.0, 0.5]])  # a zero is coloured as the least value
    assert skewed.log and (skewed.zmin, skewed.zmax) == (np.log10(0.5), np.log10(50.0))
    assert skewed.z([[0.0, 50.0]]).tolist() == [[np.log10(0.5), np.log10(50.0)]]
    bar = skewed.colorbar("accuracy")
    assert bar["ticktext"] == ["0.5%", "1%", "2%", "5%", "10%", "20%", "50%"]
    assert bar["tickvals"] == pytest.approx(np.log10([0.5, 1, 2, 5, 10, 20, 50]).tolist())
    empty = heat_scale([[np.nan]])
    assert (empty.zmin, empty.zmax) == (None, None)


# --- figures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo():
    from treeopt.demo.layout import default_root
    from treeopt.demo.load import load

    if not (default_root() / "manifest.json").exists():
        pytest.skip("no built demo")
    return load(with_model=False)


@pytest.fixture(scope="module")
def priced(demo):
    from treeopt.workbench.demo_pricing import demo_pricing

    found = {k: p for k in demo.traces if (p := demo_pricing(demo, k)) is not None}
    if not found:
        pytest.skip("the demo has no step profiles")
    return found


def colour_of(trace) -> str | None:
    """A trace's colour: its line's, else its marker's (bars)."""
    line = getattr(trace, "line", None)
    if line is not None and line.color is not None:
        return line.color
    return trace.marker.color if trace.marker is not None else None


def assert_units(fig, *axes: str) -> None:
    """Each named axis of ``fig`` is titled with its unit in parentheses."""
    for name in axes:
        title = fig.layout[name].title.text
        assert title and UNIT.search(title), (name, title)


def test_the_heatmaps_share_one_colour_scale_and_label_depths(demo):
    from treeopt.model.accuracy import AccuracyTable
    from treeopt.workbench.plots import accuracy_heatmaps, row_label

    tables = {kind: AccuracyTable.from_trace(trace) for kind, trace in demo.traces.items()}
    for which in ("marginal", "cumulative"):
        fig = accuracy_heatmaps(tables, kind=which, max_rank=6)
        shown = {k: np.asarray(getattr(t, which))[:, :6] * 100 for k, t in tables.items()}
        every = np.concatenate([v.ravel() for v in shown.values()])
        scale = heat_scale(every)  # one scale over every drafter's values
        positive = every[every > 0]  # a log scale starts at the smallest positive share
        want = (np.log10(positive.min()), np.log10(positive.max())) if scale.log else (
            every.min(), every.max())
        assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == pytest.approx(want)
        assert fig.layout.coloraxis.colorbar.title.side == "right"  # along the bar: never cut
        (heat,) = fig.data  # one trace: every drafter's rows, none with a scale of its own
        assert heat.coloraxis == "coloraxis"
        assert (heat.zmin, heat.zmax, heat.colorbar.title.text) == (None, None, None)
        row = 0
        for kind, values in shown.items():
            rows = slice(row, row + values.shape[0])
            assert np.asarray(heat.z[rows], dtype=float) == pytest.approx(scale.z(values))
            assert list(heat.y[rows]) == [row_label(kind, position_label(kind, k + 1))
                                          for k in range(values.shape[0])]
            first = heat.hovertext[row][0].split("<br>")
            assert first[0] == (f"{kind} · {position_label(kind, 1)}, "
                                f"{'top1' if which == 'cumulative' else 'rank 0'}: "
                                f"{values[0, 0]:.1f}%")
            assert first[1] == f"n = {int(tables[kind].counts[0]):,} positions"
            assert heat.text[row][0] == f"{values[0, 0]:.1f}"  # at the hover's precision
            row += values.shape[0]
    one = accuracy_heatmaps({"medusa": tables["medusa"], "eagle": tables["eagle"]})
    assert one.layout.yaxis.title.text == (f"drafter · {KINDS['medusa'].position} or "
                                           f"{KINDS['eagle'].position}")
    marginal = tables["medusa"].marginal[:, :10] * 100
    assert heat_scale(marginal).log  # 47% down to 1%: a linear 0-100 scale shows one column


def test_every_drafter_s_rows_share_one_panel_a_line_between_drafters(demo):
    """One panel, one trace (a browser draws six panels' axes and texts in about twice the
    time): every drafter's rows, each rank in one column, a line between drafters."""
    from treeopt.model.accuracy import AccuracyTable
    from treeopt.workbench.plots import accuracy_heatmaps

    tables = {k: AccuracyTable.from_trace(t) for k, t in demo.traces.items()}
    fig = accuracy_heatmaps(tables)
    (heat,) = fig.data
    assert "xaxis2" not in fig.layout and not fig.layout.annotations
    rows = np.cumsum([t.marginal.shape[0] for t in tables.values()])
    assert sorted(shape.y0 for shape in fig.layout.shapes) == [r - 0.5 for r in rows[:-1]]
    assert len(set(heat.y)) == len(heat.y) == rows[-1]  # no two drafters' rows share a label
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis.automargin


def test_drafter_figures_give_each_drafter_its_colour(demo, priced):
    from treeopt.workbench import plots_drafters

    ell = plots_drafters.acceptance_by_size({k: demo.growths[k].expected_accept_length
                                             for k in demo.traces})
    assert {t.name: t.line.color for t in ell.data} == {k: drafter_colour(k) for k in demo.traces}
    assert list(ell.layout.xaxis.tickvals) == log_ticks(1, max(
        len(demo.growths[k].expected_accept_length) - 1 for k in demo.traces), base=2)
    cost = plots_drafters.drafting_cost_by_depth({k: p.costs for k, p in priced.items()},
                                                 batch=1, depth=3)
    assert {t.name: t.line.color for t in cost.data if t.name in priced} == {
        k: drafter_colour(k) for k in priced}
    speed = plots_drafters.throughput_by_batch(
        {k: p.selection for k, p in priced.items()}, context=priced[next(iter(priced))]
        .selection.contexts[0], sweeps={k: p.sweep for k, p in priced.items()})
    for t in speed.data:
        if t.type == "bar":
            assert t.marker.color == drafter_colour(t.name)
        elif t.name.endswith(" measured best"):
            assert t.marker.line.color == drafter_colour(t.name.removesuffix(" measured best"))
    for fig in (ell, cost, speed):
        assert_units(fig, "xaxis", "yaxis")


def test_growth_curves_colour_each_drafter_and_dash_its_second_curve():
    from treeopt.workbench.plots import growth_curves

    fig = growth_curves({"hydra · empirical": [1, 1.5], "hydra · independent": [1, 1.4],
                         "eagle · empirical": [1, 1.7]}, points={"chosen (1 node)": (1, 1.5)})
    assert [(t.name, colour_of(t), t.line.dash) for t in fig.data[:3]] == [
        ("hydra · empirical", "#ff7f0e", "solid"), ("hydra · independent", "#ff7f0e", "dash"),
        ("eagle · empirical", "#2ca02c", "solid")]
    assert_units(fig, "xaxis", "yaxis")


def test_the_sweep_figure_puts_the_measured_best_on_the_speedup_it_ranks_by(demo, priced):
    from treeopt.workbench.plots_hardware import sweep_figure

    for kind, p in priced.items():
        if p.sweep is None:
            continue
        fig = sweep_figure(p.sweep, title=kind, drafter=kind)
        by_name = {t.name: t for t in fig.data}
        colours = shades(kind, len(p.sweep.batches))
        for b, colour in zip(p.sweep.batches, colours, strict=True):
            measured, best = by_name[f"batch {b} measured"], by_name[f"batch {b} measured best"]
            assert colour_of(measured) == colour and best.marker.color == colour
            uncapped = sorted((q for q in p.sweep.points if q.batch == b and q.max_depth is None),
                              key=lambda q: q.size)
            assert list(measured.y) == [q.speedup for q in uncapped]
            at_b = [q.speedup for q in p.sweep.points if q.batch == b]
            assert list(best.y) == [max(at_b)]  # the star is the highest point at its batch
            assert max(measured.y) <= best.y[0]
        assert fig.layout.yaxis.title.text == "measured speed-up over autoregressive (×)"
        assert [s.y0 for s in fig.layout.shapes] == [1.0]  # autoregressive
        assert 8 in fig.layout.xaxis.tickvals and 9 not in fig.layout.xaxis.tickvals
        assert_units(fig, "xaxis", "yaxis")


def test_hardware_figures_have_units_and_the_drafters_shades(demo):
    from treeopt.model.growth import grow
    from treeopt.pricing.sources import roofline_selection
    from treeopt.roofline import load_hardware, preset, roofline
    from treeopt.workbench.plots_hardware import (
        best_size_heatmap,
        roofline_figure,
        throughput_curves,
    )

    cfg, gpu = preset("llama-2-7b"), load_hardware("h100-sxm")
    selection = roofline_selection(grow(demo.traces["hydra"], method="empirical", max_nodes=32),
                                   model=cfg, hardware=gpu, batch=[1, 8, 64], context=[512],
                                   draft_kind="hydra", draft_heads=demo.traces["hydra"].heads)
    curves = throughput_curves(selection, context=512, drafter="hydra")
    lines = [t for t in curves.data if t.mode == "lines"]
    assert [t.line.color for t in lines] == shades("hydra", 3)
    assert curves.layout.yaxis.type == "log" and curves.layout.yaxis.tickvals
    record = roofline(cfg, gpu, batch=[1], context=[512], tokens=[64]).records()[0]
    roof = roofline_figure(record, peak_flops=gpu.matmul_flops("bf16"),
                           vector_flops=gpu.vector_flops, bandwidth=gpu.bandwidth, title="r")
    for axis in (roof.layout.xaxis, roof.layout.yaxis):
        mantissas = {float(f"{v:e}".split("e")[0]) for v in axis.tickvals}
        assert mantissas <= {1.0, 2.0, 3.0, 5.0}, axis.tickvals
    for fig in (curves, roof, best_size_heatmap(selection)):
        assert_units(fig, "xaxis", "yaxis")


def dynamic_doc() -> dict:
    """A two-batch ``treeopt.dynamic-selection/1`` document of an EAGLE drafter (made up)."""
    def setting(topk: int, steps: int, tokens: int, speedup: float) -> dict:
        return {"topk": topk, "steps": steps, "draft_tokens": tokens, "speedup": speedup,
                "expected_accept_length": 1.0 + steps / 2}

    points = []
    for batch, ups in ((1, (1.2, 1.5)), (4, (1.1, 0.9))):
        grid = [setting(1, 2, 3, ups[0]), setting(2, 3, 8, ups[1])]
        points.append({"batch": batch, "context": 64, "grid": grid, "best": max(
            grid, key=lambda g: g["speedup"]), "best_chain": grid[0], "dynamic_over_static": 1.1,
            "static": {"size": 7, "tokens": 8, "expected_accept_length": 2.0, "speedup": 1.3}})
    return {"draft": {"kind": "eagle"}, "points": points}


def test_dynamic_figures_use_shades_of_the_drafters_colour():
    from treeopt.workbench import plots_dynamic

    doc = dynamic_doc()
    fig = plots_dynamic.static_vs_dynamic(doc)
    assert [colour_of(t) for t in fig.data] == [plots_dynamic.colours(doc)[t.name]
                                               for t in fig.data]
    assert colour_of(fig.data[1]) == drafter_colour("eagle")  # the dynamic settings
    assert set(plots_dynamic.colours(doc).values()) == set(shades("eagle", 3))
    grid = plots_dynamic.dynamic_grid(doc, 1)
    assert [t.line.color for t in grid.data if t.name.startswith("topk")] == shades("eagle", 2)
    for f in (fig, grid):
        assert f.layout.yaxis.title.text == "speed-up over autoregressive (×)"
        assert_units(f, "xaxis", "yaxis")


def all_figures(demo, priced) -> dict[str, object]:
    """One of each figure the app draws, on the demo, with the longest titles its pages give."""
    from treeopt.model.accuracy import AccuracyTable
    from treeopt.model.growth import grow
    from treeopt.pricing.sources import roofline_selection
    from treeopt.roofline import load_hardware, preset
    from treeopt.workbench import adaptive, plots, plots_drafters, plots_dynamic, plots_hardware

    trace = demo.traces["hydra"]
    growth = grow(trace, method="empirical", max_nodes=32)
    tree = growth.tree(8)
    swept = next((k, p) for k, p in priced.items() if p.sweep is not None)
    selection = roofline_selection(growth, model=preset("llama-2-7b"),
                                   hardware=load_hardware("h100-sxm"), batch=[1, 8],
                                   context=[512], draft_kind="hydra", draft_heads=trace.heads)
    replay = adaptive.demo_adaptive(demo, sequences=8, positions=16, batches=(1, 2))
    context = priced[next(iter(priced))].selection.contexts[0]
    figs = {
        "heatmaps": plots.accuracy_heatmaps({k: AccuracyTable.from_trace(t)
                                             for k, t in demo.traces.items()}),
        "growth": plots.growth_curves({"hydra · empirical": growth.headline_accept_length}),
        "gap": plots.gap_curve(growth.expected_accept_length, growth.expected_accept_length),
        "tree": plots.tree_figure(tree, title="prompt-lookup: independent tree, 256 nodes, "
                                              "E[L] 10.00"),
        "widths": plots.widths_figure({"8 nodes": tree.widths}),
        "histogram": plots.accept_histogram({"tree": [0, 3, 2]}),
        "split": plots.time_split({"drafting": 1.0}),
        "by size": plots_drafters.acceptance_by_size({"hydra": growth.expected_accept_length}),
        "cost": plots_drafters.drafting_cost_by_depth({k: p.costs for k, p in priced.items()},
                                                      batch=1, depth=3),
        "speed": plots_drafters.throughput_by_batch({k: p.selection for k, p in priced.items()},
                                                    context=context),
        "sweep": plots_hardware.sweep_figure(
            swept[1].sweep, drafter=swept[0], title=f"{swept[0]} on cpu: measured (points, "
            "spread over rounds) and predicted (dashed) speed-up"),
        "throughput": plots_hardware.throughput_curves(selection, context=512),
        "best size": plots_hardware.best_size_heatmap(selection),
        "static vs dynamic": plots_dynamic.static_vs_dynamic(dynamic_doc()),
        "dynamic grid": plots_dynamic.dynamic_grid(dynamic_doc(), 1)}
    if replay is not None:
        figs["rounds"] = adaptive.rounds_figure(replay, 1)
        figs["strategies"] = adaptive.strategies_figure(replay)
    return figs


def test_every_title_fits_a_half_width_column_and_hangs_from_the_top(demo, priced):
    """At 1400 px a half-width column holds 48 characters of a title's 17 px font: every line
    is at most that long, the top margin holds every line, and axes grow their margins to fit
    their tick labels and titles."""
    for name, fig in all_figures(demo, priced).items():
        title = fig.layout.title
        lines = title.text.split("<br>")
        assert all(0 < len(line) <= style.TITLE_CHARS for line in lines), (name, lines)
        assert (title.yref, title.y, title.yanchor) == ("container", 1, "top"), name
        assert fig.layout.margin.t >= 28 + 24 * len(lines), name
        assert fig.layout.xaxis.automargin and fig.layout.yaxis.automargin, name


@given(st.lists(st.text("abcdefgh[]().·×", min_size=1, max_size=70), min_size=1, max_size=12))
def test_a_wrapped_title_keeps_every_word_in_order(words):
    text = " ".join(words)
    lines = style.wrap_title(text).split("<br>")
    assert " ".join(lines).split() == words  # nothing lost, nothing reordered
    assert all(len(line) <= style.TITLE_CHARS or " " not in line for line in lines)


def test_numbers_read_at_one_precision_with_counts_in_the_right_number():
    from treeopt.workbench.numbers import (
        accept_length_text,
        count_text,
        nodes_text,
        percent_text,
        speedup_text,
    )

    assert [speedup_text(x) for x in (1.867056, 1.7406, 2.0)] == ["1.87×", "1.74×", "2.00×"]
    assert [accept_length_text(x) for x in (6.8, 3.5656, 1.0)] == ["6.80", "3.57", "1.00"]
    assert [percent_text(x) for x in (0.9999, 0.0088)] == ["100.0%", "0.9%"]
    assert [nodes_text(n) for n in (0, 1, 2, 1000)] == ["0 nodes", "1 node", "2 nodes",
                                                        "1,000 nodes"]
    assert count_text(1, "batch", "batches") == "1 batch"


# --- pages --------------------------------------------------------------------------------

APP = ROOT / "app.py"


def open_page(page: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=180)
    at.run()
    at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def figure_titles(at) -> list[str]:
    """The page's figure titles as read: a title's lines (it wraps to fit) joined by spaces."""
    return [json.loads(c.proto.spec)["layout"]["title"]["text"].replace("<br>", " ")
            for c in at.get("plotly_chart")]


def test_hardware_page_has_one_context_control_and_no_zero_times(demo):
    at = open_page("hardware")
    at.radio(key="hw_where").set_value("a model on a GPU (roofline)").run()
    contexts = [s for s in at.select_slider if "context" in s.label.lower()]
    assert [s.key for s in contexts] == ["hw_s"]  # the demo's dynamic selection: one context
    at.select_slider(key="hw_s").set_value(1024).run()
    titles = figure_titles(at)
    assert titles[0].startswith("llama-2-7b on h100-sxm, b=1, s=1024, q=64: ")
    assert titles[1] == "Predicted throughput vs tree size (context 1024)"  # the same context
    for gpu in ("h100-sxm", "l4"):
        at.selectbox(key="hw_model").set_value("tiny")
        at.selectbox(key="hw_gpu").set_value(gpu).run()
        assert not at.exception and not at.error
        title = figure_titles(at)[0]
        assert re.search(r": [1-9][\d.]* (ns|µs|ms|s) per verify step", title), title
        assert "0.00" not in title


def test_verify_page_shows_a_slowdown_red_and_down_and_the_tree_grown_for_t(demo, monkeypatch):
    if 0.7 not in demo.temperatures:
        pytest.skip("the demo ships no trace sampled at T = 0.7")
    from treeopt.workbench import live

    def slow_run(*args, **kwargs) -> live.LiveRun:  # the figures Verify showed as a gain
        return live.LiveRun(segments=("a", "b"), accept_lengths=(1,), histogram=(0, 1),
                            mean_accept_length=1.0, stderr=0.0, batch=1,
                            tree_tokens_per_s=87.0, autoregressive_tokens_per_s=100.0,
                            speedup=0.87, outputs_match=True, generate_match=None,
                            predicted_accept_length=None, time_split={"drafting": 1.0})

    monkeypatch.setattr(live, "live_run", slow_run)
    at = open_page("verify")
    at.selectbox(key="verify_kind").set_value("eagle")
    at.radio(key="verify_mode").set_value("sample").run()
    assert [i.value for i in at.info] == [
        "This tree was not grown for sampling at T = 0.7; the demo ships one that was "
        "(eagle-t0.7.json): pick “sampled, T = 0.7” under Decoding on the Trees page."]
    at.button(key="verify_run").click().run()
    metric = next(m for m in at.metric if m.label == "Tree decoding")
    assert metric.proto.delta == "0.87× autoregressive (slower)"
    from streamlit.proto.Metric_pb2 import Metric as MetricProto

    assert metric.proto.color == MetricProto.MetricColor.RED
    assert metric.proto.direction == MetricProto.MetricDirection.DOWN
