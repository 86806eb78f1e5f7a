"""One look for every figure and metric of the app: a drafter's colour, how a speed-up, a
duration and a drafter's k-th depth read, titles that fit, and axes with units and readable log
ticks (the numbers' precision: :mod:`treeopt.workbench.numbers`).

- :func:`drafter_colour`: one colour per drafter label on every page (the registered kinds fixed,
  any other label a stable pick from :data:`OTHER_COLOURS`); :func:`shades` of it for series of
  one drafter (batch sizes, top-k);
- :func:`speedup_delta`: a speed-up as a metric's delta, a slowdown (below 1) red and down;
- :func:`format_seconds`: a duration in the unit its magnitude needs (ns, µs, ms, s);
- :func:`position_label`: ``head k`` or ``depth k``, as the drafter registry says;
- :func:`axis_title`, :func:`log_axis`, :func:`log_ticks`: axis titles with units, log axes
  with explicit ticks (1, 2, 4, 8 … or 1, 2, 5, 10 …);
- :func:`heat_scale`: a heatmap's colour range over the values it shows (log when they span
  ten times or more);
- :func:`layout`, :func:`wrap_title`: the layout every figure starts from, its title broken into
  lines that fit a half-width column at 1400 px, its axes' margins grown to fit their labels.
"""

from __future__ import annotations

import math
import textwrap
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from treeopt.registry.kinds import HYBRID_SUFFIX, KINDS, DrafterKind
from treeopt.workbench.numbers import speedup_text

# the one mapping of colours, keyed by the registry's kinds that are not hybrids: a kind's colour
# and, for a model drafter, the lighter one of its hybrid with prompt lookup (``<kind>+lookup``)
_KIND_COLOURS: dict[str, tuple[str, ...]] = {
    "medusa": ("#1f77b4", "#aec7e8"), "hydra": ("#ff7f0e", "#ffbb78"),
    "eagle": ("#2ca02c", "#98df8a"), "eagle3": ("#17becf", "#9edae5"),
    "mtp": ("#393b79", "#9c9ede"),
    "draft-model": ("#9467bd", "#c5b0d5"), "prompt-lookup": ("#bcbd22",),
    "ngram-trie": ("#d62728",), "suffix": ("#b5cf6b",)}


def _kind_colour(kind: DrafterKind) -> str | None:
    """The colour of a registered kind: its own, or for a hybrid its model drafter's lighter
    one; None where the mapping has none (a test holds that every kind has one).

    >>> _kind_colour(KINDS["hydra"]), _kind_colour(KINDS["hydra+lookup"])
    ('#ff7f0e', '#ffbb78')
    >>> set(DRAFTER_COLOURS) == set(KINDS) and set(_KIND_COLOURS) <= set(KINDS)
    True
    """
    if kind.hybrid:
        model = _KIND_COLOURS.get(kind.name.removesuffix(HYBRID_SUFFIX), ())
        return model[1] if len(model) > 1 else None
    own = _KIND_COLOURS.get(kind.name, ())
    return own[0] if own else None


# every registered kind's colour, in the registry's order
DRAFTER_COLOURS: dict[str, str] = {
    name: colour for name, kind in KINDS.items() if (colour := _kind_colour(kind)) is not None}
OTHER_COLOURS: tuple[str, ...] = ("#8c564b", "#e377c2", "#6b6ecf", "#843c39", "#637939")
REFERENCE = "#7f7f7f"  # autoregressive and other reference lines
LABEL_SEPARATOR = " · "  # series names read "drafter · what"


TITLE_CHARS = 48  # a title line's most characters: a half-width column at 1400 px shows them
_TITLE_LINE_PX = 24  # the height of one title line (plotly_white's 17 px font, spaced)


def wrap_title(text: str, chars: int = TITLE_CHARS) -> str:
    """``text`` broken at spaces into lines of at most ``chars`` characters (a word longer than
    that stays whole), joined by ``<br>``; line breaks already in it are kept.

    >>> wrap_title("eagle at batch 1: steps chosen and E[L] per round (steady workload)")
    'eagle at batch 1: steps chosen and E[L] per<br>round (steady workload)'
    >>> wrap_title("short<br>lines")
    'short<br>lines'
    """
    return "<br>".join(line for part in text.split("<br>")
                       for line in textwrap.wrap(part, chars, break_long_words=False,
                                                 break_on_hyphens=False) or [""])


def layout(*, height: int = 420, title: str | None = None) -> dict[str, Any]:
    """The layout every figure of the app starts from: its axes' margins grown to fit their tick
    labels and titles, and ``title`` (wrapped by :func:`wrap_title`) with room for its lines.

    >>> lay = layout(title="a " * 30)
    >>> lay["title"]["text"].count("<br>"), lay["margin"]["t"]
    (1, 76)
    """
    lines = 0 if title is None else wrap_title(title).count("<br>") + 1
    spec: dict[str, Any] = dict(
        template="plotly_white", height=height + _TITLE_LINE_PX * max(lines - 1, 0),
        margin=dict(l=60, r=20, t=max(60, 28 + _TITLE_LINE_PX * lines), b=50),
        xaxis_automargin=True, yaxis_automargin=True)
    if title is not None:  # hung from the figure's top edge: its first line is never cut off
        spec["title"] = dict(text=wrap_title(title), yref="container", y=1, yanchor="top",
                             pad=dict(t=12))
    return spec


def drafter_of(name: str) -> str:
    """The drafter a series name belongs to: its part before ``" · "``.

    >>> drafter_of("hydra · empirical"), drafter_of("eagle")
    ('hydra', 'eagle')
    """
    return name.split(LABEL_SEPARATOR, 1)[0]


def drafter_colour(label: str) -> str:
    """The colour of drafter ``label`` on every page: fixed for the registered kinds, else
    picked from :data:`OTHER_COLOURS` by a checksum of the label (the same in every process).

    >>> drafter_colour("medusa"), drafter_colour("vicuna") == drafter_colour("vicuna")
    ('#1f77b4', True)
    """
    if label in DRAFTER_COLOURS:
        return DRAFTER_COLOURS[label]
    return OTHER_COLOURS[zlib.crc32(label.encode("utf-8")) % len(OTHER_COLOURS)]


def _mix(colour: str, towards: str, share: float) -> str:
    """``colour`` moved ``share`` of the way to ``towards`` (both ``#rrggbb``)."""
    a = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(towards[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * share):02x}" for x, y in zip(a, b, strict=True))


def shades(label: str, n: int) -> list[str]:
    """``n`` shades of ``label``'s colour, light to dark, for series of one drafter.

    >>> shades("medusa", 1)
    ['#1f77b4']
    >>> len(set(shades("eagle", 4)))
    4
    """
    base = drafter_colour(label)
    if n <= 1:
        return [base] * n
    steps = np.linspace(-0.45, 0.45, n)  # odd n: the middle one is the colour itself
    return [_mix(base, "#ffffff", -t) if t < 0 else _mix(base, "#000000", t) for t in steps]


def position_noun(drafter: str | None) -> str:
    """What proposes each depth of ``drafter``: ``head`` where each depth has its own head,
    ``depth`` where one network runs once per depth (the registry's ``DrafterKind.position``);
    ``head`` for labels the registry does not know.

    >>> position_noun("medusa"), position_noun("draft-model"), position_noun(None)
    ('head', 'depth', 'head')
    """
    kind = KINDS.get(drafter or "")
    return kind.position if kind is not None else "head"


def position_label(drafter: str | None, k: int) -> str:
    """Depth ``k`` (1-based) of ``drafter`` as figures label it: ``head k`` or ``depth k``.

    >>> position_label("hydra", 1), position_label("eagle", 2), position_label("vicuna", 3)
    ('head 1', 'depth 2', 'head 3')
    """
    return f"{position_noun(drafter)} {k}"


@dataclass(frozen=True)
class SpeedupDelta:
    """A speed-up as a metric's delta: its text, colour and arrow (``st.metric``'s
    ``delta``, ``delta_color``, ``delta_arrow``)."""

    text: str
    colour: Literal["green", "red", "gray"]
    arrow: Literal["up", "down", "off"]

    def metric(self) -> dict[str, str]:
        """The keyword arguments of ``st.metric`` that show it."""
        return {"delta": self.text, "delta_color": self.colour, "delta_arrow": self.arrow}


def speedup_delta(speedup: float, *, over: str = "autoregressive") -> SpeedupDelta:
    """``speedup`` (tokens/s over ``over``'s) as a delta: below 1 (as shown, two decimals) a
    slowdown, red and down; above 1 green and up; 1.00 grey, no arrow.

    >>> speedup_delta(0.87)
    SpeedupDelta(text='0.87× autoregressive (slower)', colour='red', arrow='down')
    >>> speedup_delta(1.2)
    SpeedupDelta(text='1.20× autoregressive (faster)', colour='green', arrow='up')
    >>> speedup_delta(0.999).colour
    'gray'
    """
    shown = round(speedup, 2)
    if shown < 1:
        return SpeedupDelta(f"{speedup_text(shown)} {over} (slower)", "red", "down")
    if shown > 1:
        return SpeedupDelta(f"{speedup_text(shown)} {over} (faster)", "green", "up")
    return SpeedupDelta(f"{speedup_text(shown)} {over} (no gain)", "gray", "off")


_TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def format_seconds(seconds: float) -> str:
    """A duration to three significant figures in the largest unit that keeps it ≥ 1.

    >>> format_seconds(0.003968), format_seconds(2.1e-5), format_seconds(0.0009997)
    ('3.97 ms', '21.0 µs', '1.00 ms')
    >>> format_seconds(1.5), format_seconds(4e-10)
    ('1.50 s', '0.400 ns')
    """
    unit, value = next(((u, v) for u, scale in _TIME_UNITS
                        if (v := float(f"{seconds / scale:.3g}")) >= 1 or u == "ns"))
    digits = max(0, 2 - math.floor(math.log10(value))) if value > 0 else 2
    return f"{value:.{digits}f} {unit}"


def axis_title(quantity: str, unit: str) -> str:
    """An axis title with its unit: ``quantity (unit)``.

    >>> axis_title("batch size", "sequences")
    'batch size (sequences)'
    """
    return f"{quantity} ({unit})"


def tick_text(value: float) -> str:
    """A tick's label: whole numbers with thousands separators, fractions as they are.

    >>> [tick_text(v) for v in (0.5, 2, 1000, 0.001)]
    ['0.5', '2', '1,000', '0.001']
    """
    return f"{value:,.0f}" if value >= 1 and float(value).is_integer() else f"{value:g}"


def log_ticks(lo: float, hi: float, *, base: int = 10) -> list[float]:
    """Tick values of a log axis over [``lo``, ``hi``] (``lo`` > 0), widened to whole ticks:
    powers of two for ``base=2``; else 1-2-5 per decade over up to three decades, 1-3 over up
    to five, and decades beyond.

    >>> log_ticks(1, 100, base=2)
    [1, 2, 4, 8, 16, 32, 64, 128]
    >>> log_ticks(30, 900)
    [20, 50, 100, 200, 500, 1000]
    >>> log_ticks(0.05, 4000)
    [0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000]
    """
    if not 0 < lo <= hi:
        raise ValueError(f"a log axis needs 0 < lo <= hi, got {lo}, {hi}")
    if base == 2:
        first, last = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
        return [2 ** e if e >= 0 else 2.0 ** e for e in range(first, last + 1)]
    decades = math.log10(hi / lo)
    steps = (1, 2, 5) if decades <= 3 else (1, 3) if decades <= 5 else (1,)
    ticks = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1,
                                         math.ceil(math.log10(hi)) + 1) for m in steps]
    below = max((t for t in ticks if t <= lo * (1 + 1e-9)), default=ticks[0])
    above = min((t for t in ticks if t >= hi * (1 - 1e-9)), default=ticks[-1])
    return [_tidy(t) for t in ticks if below <= t <= above]


def _tidy(value: float) -> float:
    """``value`` without float noise (0.30000000000000004 → 0.3; 20.0 → 20)."""
    tidy = float(f"{value:.6g}")
    return int(tidy) if tidy >= 1 and tidy.is_integer() else tidy


def log_axis(title: str, values: Sequence[float] | npt.ArrayLike, *, base: int = 10,
             **extra: Any) -> dict[str, Any]:
    """A Plotly log axis titled ``title`` with explicit ticks over the positive ``values``."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    axis = dict(type="log", title=title, **extra)
    if v.size:
        ticks = log_ticks(float(v.min()), float(v.max()), base=base)
        axis.update(tickmode="array", tickvals=ticks, ticktext=[tick_text(t) for t in ticks])
    return axis


@dataclass(frozen=True)
class HeatScale:
    """A heatmap's colour range over the values it shows: linear, or log10 when they span ten
    times or more (``zmin``/``zmax`` then in log10 units; the colour bar reads the values)."""

    log: bool
    zmin: float | None
    zmax: float | None
    floor: float = 0.0  # log scales: the smallest positive value, where zeros are coloured

    def z(self, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
        """The values as the heatmap colours them."""
        v = np.asarray(values, dtype=float)
        return np.log10(np.maximum(v, self.floor)) if self.log else v

    def colorbar(self, title: str, unit: str = "%") -> dict[str, Any]:
        """The colour bar, ticked in the values' own terms, its title along it (a title across
        it is wider than the bar and is cut at a narrow figure's edge)."""
        bar: dict[str, Any] = dict(title=dict(text=title, side="right"))
        if self.log and self.zmin is not None and self.zmax is not None:
            ticks = [t for t in log_ticks(10 ** self.zmin, 10 ** self.zmax)
                     if self.zmin - 1e-9 <= math.log10(t) <= self.zmax + 1e-9]
            bar.update(tickmode="array", tickvals=[math.log10(t) for t in ticks],
                       ticktext=[f"{tick_text(t)}{unit}" for t in ticks])
        return bar


def heat_scale(values: npt.ArrayLike) -> HeatScale:
    """The colour range of ``values`` (NaN ignored): their minimum to their maximum, on a log
    scale when the positive ones span ten times or more.

    >>> heat_scale([[20.0, 80.0]])
    HeatScale(log=False, zmin=20.0, zmax=80.0, floor=0.0)
    >>> s = heat_scale([[50.0, 5.0, 0.5]]); s.log, s.zmin, s.zmax
    (True, -0.3010299956639812, 1.6989700043360187)
    """
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if not v.size:
        return HeatScale(False, None, None)
    positive = v[v > 0]
    if positive.size and positive.max() >= 10 * positive.min():
        floor = float(positive.min())
        return HeatScale(True, math.log10(floor), math.log10(float(positive.max())), floor)
    return HeatScale(False, float(v.min()), float(v.max()))


__all__ = ["DRAFTER_COLOURS", "OTHER_COLOURS", "REFERENCE", "TITLE_CHARS", "HeatScale",
           "SpeedupDelta", "axis_title", "drafter_colour", "drafter_of", "format_seconds",
           "heat_scale", "layout", "log_axis", "log_ticks", "position_label", "position_noun",
           "shades", "speedup_delta", "tick_text", "wrap_title"]
