"""The tree select picks on an MoE model and on a dense model of the same active size, per batch.

The dense twin keeps the MoE preset's attention, embeddings and layers and gives every layer one
dense MLP of width k·m (k experts of width m per token): the same active parameters, less the
router. Both are priced by the roofline on one hardware row, with the demo's Hydra growth and the
Hydra heads' predicted drafting cost. Prints one row per batch size and writes the figure as a
self-contained SVG (docs/img/roofline_moe.svg) and, with ``--html``, as a Plotly page.
Run: ``python benchmarks/bench_roofline_moe.py [--preset qwen3-30b-a3b] [--html FILE]``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from treeopt.model.growth import Growth
from treeopt.pricing.sources import roofline_selection
from treeopt.roofline import ModelConfig, load_hardware, preset
from treeopt.roofline.params import parameter_count

BATCH = [1, 2, 4, 8, 16, 32, 64]
GROWTH = Path("data/demo/growth/hydra.json")
SVG = Path("docs/img/roofline_moe.svg")


def dense_twin(moe: ModelConfig) -> ModelConfig:
    """The MoE config with every layer's MLP dense, of the width one token's experts add up to."""
    assert moe.moe is not None, f"{moe.name} has no experts"
    width = moe.moe.experts_per_token * moe.moe.intermediate_size + moe.moe.shared_intermediate_size
    return ModelConfig(**{**moe.to_json(), "name": f"{moe.name} dense twin", "moe": None,
                          "intermediate_size": width})


def picks(cfg: ModelConfig, growth: Growth, hardware: str, context: int) -> list[tuple[int, float]]:
    """(best tree size, speed-up over autoregressive) per batch size."""
    sel = roofline_selection(growth, model=cfg, hardware=load_hardware(hardware), batch=BATCH,
                             context=[context], draft_kind="hydra")
    return [(p.best_size, p.speedup) for p in (sel.point(b, context) for b in BATCH)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="qwen3-30b-a3b")
    ap.add_argument("--hardware", default="h100-sxm")
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--svg", default=str(SVG))
    ap.add_argument("--html", help="also write the Plotly figure as an HTML page")
    args = ap.parse_args()
    moe = preset(args.preset)
    twin = dense_twin(moe)
    growth = Growth.load(GROWTH)
    rows = {cfg.name: picks(cfg, growth, args.hardware, args.context) for cfg in (moe, twin)}
    active = parameter_count(moe).active / 1e9
    print(f"{moe.name} ({active:.2f}B active) vs its dense twin "
          f"({parameter_count(twin).total / 1e9:.2f}B): {GROWTH} on {args.hardware}, "
          f"context {args.context}, Hydra drafting priced by the roofline")
    print(f"{'batch':>5}  {'MoE size':>8} {'MoE speed-up':>12}  {'dense size':>10} "
          f"{'dense speed-up':>14}")
    for b, (m, d) in zip(BATCH, zip(*rows.values(), strict=True), strict=True):
        print(f"{b:>5}  {m[0]:>8} {m[1]:>11.2f}x  {d[0]:>10} {d[1]:>13.2f}x")
    Path(args.svg).parent.mkdir(parents=True, exist_ok=True)
    Path(args.svg).write_text(svg(rows), encoding="utf-8")
    print(f"wrote {args.svg}")
    if args.html:
        figure(rows).write_html(args.html, include_plotlyjs="cdn")
        print(f"wrote {args.html}")


def figure(rows: dict[str, list[tuple[int, float]]]):
    """The Plotly figure: selected tree size per batch size, one line per model."""
    import plotly.graph_objects as go

    fig = go.Figure([go.Scatter(x=BATCH, y=[r[0] for r in v], name=k, mode="lines+markers",
                                text=[f"{r[1]:.2f}x" for r in v]) for k, v in rows.items()])
    fig.update_layout(xaxis={"type": "log", "title": "batch size"},
                      yaxis={"title": "selected tree size (nodes)"})
    return fig


def svg(rows: dict[str, list[tuple[int, float]]], width: int = 640, height: int = 360) -> str:
    """The same figure as a small self-contained SVG (log2 batch axis, linear size axis)."""
    left, right, top, bottom = 60, 200, 20, 50
    top_size = max(max(r[0] for r in v) for v in rows.values()) or 1
    x = {b: left + i * (width - left - right) / (len(BATCH) - 1) for i, b in enumerate(BATCH)}

    def y(size: float) -> float:
        return top + (1 - size / top_size) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for b in BATCH:
        out.append(f'<text x="{x[b]:.1f}" y="{height - bottom + 18}" text-anchor="middle">{b}</text>')
    for frac in (0, 0.25, 0.5, 0.75, 1):
        v = round(frac * top_size)
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="#ddd"/><text x="{left - 6}" y="{y(v) + 4:.1f}" '
                   f'text-anchor="end">{v}</text>')
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 10}" '
               f'text-anchor="middle">batch size</text>')
    out.append(f'<text x="14" y="{(top + height - bottom) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 14 {(top + height - bottom) / 2})">selected tree size</text>')
    for (name, v), color in zip(rows.items(), ("#d62728", "#1f77b4"), strict=False):
        pts = " ".join(f"{x[b]:.1f},{y(r[0]):.1f}" for b, r in zip(BATCH, v, strict=True))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"/>')
        for b, r in zip(BATCH, v, strict=True):
            out.append(f'<circle cx="{x[b]:.1f}" cy="{y(r[0]):.1f}" r="3" fill="{color}">'
                       f'<title>batch {b}: {r[0]} nodes, {r[1]:.2f}x</title></circle>')
        ly = top + 20 + 20 * list(rows).index(name)
        out.append(f'<line x1="{width - right + 10}" x2="{width - right + 30}" y1="{ly}" '
                   f'y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{width - right + 36}" '
                   f'y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
