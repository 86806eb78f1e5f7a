"""The Overview's headline of one batch size, as a person reads it: the tree's speed-up
predicted for held-out prompts (the held-out trace walked step by step, priced by the step
costs ``select`` uses) at the precision the measurement supports; the measured speed-up beside
it, coloured by whether the run was faster than autoregressive decoding (never by its sign
against the prediction); and, in one sentence, how the calibration prompts' prediction differs.
"""

from __future__ import annotations

from dataclasses import dataclass

from treeopt.workbench.overview import BatchAnswer, Measured, Overview

TOLERANCE = 0.05  # a headline within 5% of its measurement needs no explanation


@dataclass(frozen=True)
class Headline:
    """One batch size's card (an ``st.metric``): ``label`` ``batch B``, ``value`` the predicted
    speed-up, ``delta`` the measured one, ``tone`` its colour (``green``: faster than
    autoregressive decoding, ``red``: slower, ``gray``: not measured) and ``arrow`` its arrow;
    ``gap``: the calibration prompts' prediction in one sentence; ``help``: every source."""

    label: str
    value: str
    delta: str
    tone: str
    arrow: str
    gap: str
    help: str


def decimals(measured: Measured | None) -> int:
    """How many decimals a speed-up is shown with: two, one where the measurement's standard
    error (else its spread over rounds) reaches 0.05×, none where it reaches 0.5×.

    >>> m = Measured(2.28, 0.008, 0.0025, 228.0, 11, None, True, "sweep")
    >>> decimals(m), decimals(None)
    (2, 2)
    >>> decimals(Measured(1.5, 0.16, None, 150.0, 6, None, True, "sweep"))
    1
    """
    if measured is None:
        return 2
    error = measured.speedup * (measured.se if measured.se is not None else measured.spread)
    return 2 if error < 0.05 else 1 if error < 0.5 else 0


def headline(a: BatchAnswer) -> Headline:
    """The card of answer ``a``: ``2.30× predicted`` (held out, where ``a`` has it) beside
    ``2.28× measured``, green above 1×.

    >>> from treeopt.model.tree import Tree
    >>> from treeopt.workbench.overview import Predicted
    >>> cal = Predicted(2.57, 257.0, 100.0, "select", 3.57)
    >>> held = Predicted(2.30, 230.0, 100.0, "held out", 3.20)
    >>> m = Measured(2.28, 0.008, 0.0025, 228.0, 3, None, True, "sweep")
    >>> h = headline(BatchAnswer(1, 64, "ngram-trie", Tree.chain(3), None, cal, {}, m, None, held))
    >>> h.value, h.delta, h.tone
    ('2.30× predicted', '2.28× measured', 'green')
    >>> h.gap
    'On the calibration prompts the tree was grown on it is predicted at 2.57× (E[L] 3.57 per step): held-out prompts accept less (E[L] 3.20), so 2.30× is the figure to expect.'
    """
    m = a.measured
    shown = a.held_out or a.predicted
    digits = decimals(m)
    sources = [f"{a.drafter if a.tree.size else 'no tree'} ({a.tree_label}): "
               f"{shown.speedup:.{digits}f}× predicted, {shown.tokens_per_s:.0f} tokens/s — "
               f"{shown.source}"]
    if m is None:
        delta, tone, arrow = "not measured", "gray", "off"
    else:
        where = ("" if m.same_tree else " verifying the whole chain" if m.whole_chain
                 else f" at {m.size} nodes (nearest swept)")
        delta = f"{m.speedup:.{digits}f}× measured{where}"
        tone, arrow = (("green", "up") if m.speedup > 1 else ("red", "down") if m.speedup < 1
                       else ("gray", "off"))
        sources.append(f"{m.speedup:.{digits}f}× ({m.tokens_per_s:.0f} tokens/s), spread over "
                       f"rounds {m.spread:.1%} — {m.source}")
    if a.held_out is not None:
        sources.append(f"on the calibration prompts: {a.predicted.speedup:.{digits}f}× — "
                       f"{a.predicted.source}")
    if a.dynamic is not None:
        d = a.dynamic
        sources.append(f"dynamic alternative ({d.drafter}): {d.settings}, {d.speedup:.2f}× "
                       f"({d.over_static:.2f}× the static tree's speed-up in the same document) "
                       f"— {d.source}")
    return Headline(f"batch {a.batch}", f"{shown.speedup:.{digits}f}× predicted", delta, tone,
                    arrow, gap_sentence(a, digits=digits), "\n\n".join(sources))


def gap_sentence(a: BatchAnswer, *, digits: int = 2) -> str:
    """One sentence: the calibration prompts' prediction against the held-out one (empty
    without a held-out prediction), and why the headline misses its measurement by more than
    :data:`TOLERANCE` where it does."""
    held, cal = a.held_out, a.predicted
    if held is None or a.tree.size == 0:
        return ""
    said = f"On the calibration prompts the tree was grown on it is predicted at {cal.speedup:.{digits}f}×"
    if cal.accept_length is not None and held.accept_length is not None:
        more = "less" if held.accept_length < cal.accept_length else "more"
        said += (f" (E[L] {cal.accept_length:.2f} per step): held-out prompts accept {more} "
                 f"(E[L] {held.accept_length:.2f})")
    said += f", so {held.speedup:.{digits}f}× is the figure to expect."
    return said + miss_sentence(a)


def miss_sentence(a: BatchAnswer) -> str:
    """`` The measurement …``: why the headline misses the measurement of the same tree by more
    than :data:`TOLERANCE` (empty where it does not, or nothing comparable was measured)."""
    m, held = a.measured, a.held_out
    if m is None or held is None or not m.same_tree:
        return ""
    off = held.speedup / m.speedup - 1
    if abs(off) <= TOLERANCE:
        return ""
    why = "the step-cost model misses here"
    if m.predicted_as_swept is not None and abs(m.predicted_as_swept / m.speedup - 1) <= TOLERANCE:
        why = ("priced with the step profile taken alongside the sweep it is within 5%, so the "
               "machine ran at other step costs than the profile select prices with")
    return f" The measurement is {-off / (1 + off):+.1%} off it, beyond 5%: {why}."


def detail(view: Overview) -> list[str]:
    """What the Overview's expander says, one paragraph per batch size: every figure's
    source, and where the calibration prediction and the measurement disagree, why."""
    out = []
    for a in view.answers:
        text = f"**Batch {a.batch}**\n\n" + headline(a).help
        if a.disagreement:
            text += "\n\n" + a.disagreement
        out.append(text)
    return out


__all__ = ["TOLERANCE", "Headline", "decimals", "detail", "gap_sentence", "headline",
           "miss_sentence"]
