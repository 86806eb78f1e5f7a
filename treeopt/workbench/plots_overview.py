"""The Overview page's figure: per batch size, the chosen drafter's predicted speed-up beside the
one measured live (error bar: the spread over rounds) and the dynamic alternative. A pure
function of :class:`treeopt.workbench.overview.Overview`.

It is the app's one Vega-Lite figure (every other figure is Plotly): the Overview is the page a
new tab lands on, and there Streamlit's Plotly bundle (4.7 MB of JavaScript) costs every tab
about 0.9 s of the browser's main thread on the 2-core reference host, where its Vega-Lite
bundle costs about 0.2 s (`benchmarks/bench_app.py`'s warm first view, target 1.5 s). The spec
is a plain dict (``st.vega_lite_chart`` draws it; no altair), in the app's look: drafter
colours from :mod:`treeopt.workbench.style`, axes with units, every figure's source on hover.
"""

from __future__ import annotations

from typing import Any

from treeopt.workbench.overview import BatchAnswer, Overview
from treeopt.workbench.style import REFERENCE, drafter_colour

PREDICTED, MEASURED = "predicted (held-out prompts, per step)", "measured (sweep)"
DYNAMIC = "dynamic (select --dynamic)"
AS_SWEPT = "predicted as swept (its prompts, profile alongside)"
HEIGHT = 420
# A marker's shape per figure (Vega-Lite symbol names, or an SVG path in a unit square).
SHAPES: dict[str, str] = {MEASURED: "circle", AS_SWEPT: "M-1,-1L1,1M-1,1L1,-1",
                          DYNAMIC: "diamond"}


def predicted_vs_measured(view: Overview) -> dict[str, Any]:
    """The Vega-Lite spec: per batch size (categorical x), the chosen tree's predicted speed-up
    (held out where it is priced so, else as ``select`` priced it; a bar in the drafter's colour, labelled with drafter and tree), its measurement (a point;
    error bar: the rounds' spread, centred on the median; hollow where the sweep measured
    another size), the same tree priced as the sweep ran it (a cross, where the sweep took a
    profile alongside) and the dynamic alternative (a diamond in its drafter's colour), with
    sources on hover and a dashed line at 1 (autoregressive)."""
    answers = view.answers
    order = [_batch(a) for a in answers]
    x = {"field": "batch", "type": "nominal", "sort": order,
         "title": "batch size (sequences decoded together)",
         "axis": {"labelAngle": 0}}
    y_title = "speed-up over autoregressive decoding (×)"
    drafters = list(dict.fromkeys(a.drafter for a in answers))
    bars = [{"batch": _batch(a), "drafter": a.drafter, "speedup": p.speedup,
             "label": f"{a.drafter}\n{a.tree_label}",
             "hover": f"{a.drafter}, {a.tree_label}: {p.speedup:.2f}× predicted, "
                      f"{p.tokens_per_s:.0f} tokens/s — {p.source}"}
            for a in answers for p in [a.held_out or a.predicted]]
    markers = [m for a in answers for m in _markers(a)]
    spreads = [{"batch": _batch(a), "low": a.measured.speedup * (1 - a.measured.spread / 2),
                "high": a.measured.speedup * (1 + a.measured.spread / 2)}
               for a in answers if a.measured is not None]
    figures = [f for f in (MEASURED, AS_SWEPT, DYNAMIC) if any(m["figure"] == f for m in markers)]
    layers: list[dict[str, Any]] = [
        {"data": {"values": bars}, "mark": {"type": "bar", "opacity": 0.6},
         "encoding": {"x": x, "y": {"field": "speedup", "type": "quantitative", "title": y_title,
                                    "scale": {"zero": True}},
                      "color": {"field": "drafter", "type": "nominal",
                                "title": "drafter (bars: predicted)",
                                "scale": {"domain": drafters,
                                          "range": [drafter_colour(d) for d in drafters]}},
                      "tooltip": [{"field": "hover", "type": "nominal", "title": PREDICTED}]}},
        {"data": {"values": bars}, "mark": {"type": "text", "baseline": "bottom", "dy": -6,
                                            "lineBreak": "\n", "color": "black"},
         "encoding": {"x": x, "y": {"datum": 0, "type": "quantitative"}, "text": {"field": "label"}}},
        {"data": {"values": [{"y": 1.0, "label": "autoregressive"}]},  # a line, named
         "encoding": {"y": {"field": "y", "type": "quantitative"}},
         "layer": [{"mark": {"type": "rule", "strokeDash": [6, 4], "color": REFERENCE}},
                   {"mark": {"type": "text", "align": "left", "baseline": "bottom", "dy": -2,
                             "x": 4, "color": "black"},
                    "encoding": {"text": {"field": "label"}}}]},
    ]
    if spreads:
        layers.append({"data": {"values": spreads}, "mark": {"type": "rule", "color": "black",
                                                             "strokeWidth": 2},
                       "encoding": {"x": x, "y": {"field": "low", "type": "quantitative"},
                                    "y2": {"field": "high"}}})
    if markers:
        layers.append({
            "data": {"values": markers},
            "mark": {"type": "point", "size": 160, "strokeWidth": 2, "opacity": 1},
            "encoding": {
                "x": x, "y": {"field": "speedup", "type": "quantitative"},
                "shape": {"field": "figure", "type": "nominal", "title": "markers",
                          "scale": {"domain": figures, "range": [SHAPES[f] for f in figures]}},
                "fill": {"field": "fill", "type": "nominal", "scale": None, "legend": None},
                "stroke": {"value": "black"},
                "tooltip": [{"field": "hover", "type": "nominal", "title": "figure"}]}})
    return {
        "title": f"Chosen drafter and tree per batch size: predicted vs measured "
                 f"(context {view.context})",
        "height": HEIGHT,
        "layer": layers,
        "resolve": {"legend": {"color": "independent", "shape": "independent"}},
        "config": {"legend": {"labelLimit": 360}},
    }


def _batch(a: BatchAnswer) -> str:
    return f"batch {a.batch}"


def _markers(a: BatchAnswer) -> list[dict[str, Any]]:
    """The points drawn over ``a``'s bar: measured, predicted as swept, dynamic."""
    out: list[dict[str, Any]] = []
    m, d = a.measured, a.dynamic
    if m is not None:
        out.append({"batch": _batch(a), "figure": MEASURED, "speedup": m.speedup,
                    "fill": "black" if m.same_tree else "white",
                    "hover": f"{m.speedup:.2f}× {m.label}, spread {m.spread:.1%} — {m.source}"})
        if m.predicted_as_swept is not None:
            v = m.predicted_as_swept
            out.append({"batch": _batch(a), "figure": AS_SWEPT, "speedup": v, "fill": "black",
                        "hover": f"{v:.2f}× predicted as the sweep ran: its prompts' acceptance, "
                                 f"the step profile taken alongside its points "
                                 f"({v / m.speedup - 1:+.1%} of the measurement)"})
    if d is not None:
        out.append({"batch": _batch(a), "figure": DYNAMIC, "speedup": d.speedup,
                    "fill": drafter_colour(d.drafter),
                    "hover": f"{d.drafter}, dynamic: {d.settings}: {d.speedup:.2f}× predicted "
                             f"— {d.source}"})
    return out


__all__ = ["AS_SWEPT", "DYNAMIC", "MEASURED", "PREDICTED", "SHAPES", "predicted_vs_measured"]
