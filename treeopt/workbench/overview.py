"""The answer the app opens with: per batch size, which drafter and tree (or dynamic setting) to
use, how fast it is predicted to run, how fast it was measured, and how sure each figure is.

Built from the functions the CLI calls, so the two print one set of numbers: each drafter's
selection is ``treeopt select``'s (:func:`treeopt.pricing.sources.price`; on the demo
:func:`treeopt.workbench.demo_pricing.demo_pricing`, what ``select --demo KIND`` computes), the drafter
is ``treeopt choose-drafter``'s (:func:`treeopt.pricing.selection.choose_drafter`), the measurement
is read by :class:`treeopt.documents.sweep.Sweep`, and the dynamic alternative is read from ``select
--dynamic``'s document as the Hardware page reads it. Every figure carries a source string.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treeopt.documents.sweep import Sweep, SweepPoint
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree
from treeopt.pricing.selection import NO_DRAFTER, DrafterChoice, Selection, choose_drafter
from treeopt.workbench.numbers import nodes_text, speedup_text

if TYPE_CHECKING:
    from treeopt.demo.load import Demo
    from treeopt.workbench.demo_pricing import DemoPricing, HeldOutPricing, SweptPricing


@dataclass(frozen=True)
class Predicted:
    """What the step-cost model predicts for a tree: speed-up over autoregressive decoding and
    tokens/s of the whole batch, and where the prediction comes from."""

    speedup: float
    tokens_per_s: float
    autoregressive_tokens_per_s: float
    source: str
    accept_length: float | None = None  # the E[L] it was priced with, where known


@dataclass(frozen=True)
class Measured:
    """A live sweep's measurement at one batch size: of the same tree when the sweep measured it
    (``same_tree``), else of the measured size nearest to it."""

    speedup: float  # median over rounds of the per-round speed-up
    spread: float  # (largest − smallest round speed-up) / median
    se: float | None  # relative standard error of the median speed-up (None: not recorded)
    tokens_per_s: float
    size: int
    max_depth: int | None
    same_tree: bool
    source: str
    # the speed-up the sweep predicted for this point: the same step profile, E[L] from the
    # swept prompts' own trace (over the steady window at batch > 1); None: not recorded
    predicted_here: float | None = None
    # the point priced as the sweep ran it: the swept prompts' own acceptance and the step
    # profile taken alongside the points (treeopt.workbench.demo_pricing.SweptPricing); None: no
    # profile alongside
    predicted_as_swept: float | None = None
    # a chain picked verified as drafted, measured by the sweep verifying it whole
    whole_chain: bool = False

    @property
    def label(self) -> str:
        """``measured`` for the tree itself, else which tree was measured instead."""
        if self.same_tree:
            return "measured"
        if self.whole_chain:
            return "measured verifying the whole chain (the sweep verifies whole trees)"
        return f"measured at the nearest size swept ({self.other})"

    @property
    def other(self) -> str:
        """What was measured instead of the tree: ``7 nodes, depth ≤ 3``, ``the whole chain``."""
        return "the whole chain" if self.whole_chain else _size(self.size, self.max_depth)


@dataclass(frozen=True)
class DynamicAlternative:
    """``select --dynamic``'s best dynamic setting at one batch size (predicted)."""

    drafter: str
    settings: str  # "topk 2, steps 5, draft tokens 16"
    speedup: float
    tokens_per_s: float
    over_static: float  # its speed-up over that of the static tree the document prices
    source: str


@dataclass(frozen=True)
class BatchAnswer:
    """The answer at one (batch, context): the drafter ``choose-drafter`` picks (``none``: no
    tree pays), its tree (``select``'s pick), predicted (on the calibration prompts, as
    ``select`` prices it) and measured speed-ups, every drafter's predicted speed-up, the
    dynamic alternative, and the same tree predicted for held-out prompts (``held_out``: the
    held-out trace walked step by step, priced by the same step costs; the headline)."""

    batch: int
    context: int
    drafter: str
    tree: Tree
    max_depth: int | None
    predicted: Predicted
    candidates: Mapping[str, float]  # drafter → predicted speed-up of its best tree
    measured: Measured | None
    dynamic: DynamicAlternative | None
    held_out: Predicted | None = None
    drafted: bool = False  # the tree is a chain verified as far as it was drafted

    @property
    def tree_label(self) -> str:
        """``9 nodes, depth 4``, ``7 nodes, depth 7, verified as drafted``, or ``no tree``."""
        if self.tree.size == 0:
            return "no tree"
        drafted = ", verified as drafted" if self.drafted else ""
        return f"{nodes_text(self.tree.size)}, depth {self.tree.depth}{drafted}"

    @property
    def disagreement(self) -> str | None:
        """A sentence when the prediction and the measurement differ by more than the
        measurement's spread over rounds (None when they agree or nothing was measured)."""
        m = self.measured
        if m is None or abs(self.predicted.speedup - m.speedup) <= m.spread * m.speedup:
            return None
        what = ("this tree" if m.same_tree else "the whole chain" if m.whole_chain
                else f"the nearest size swept ({m.other})")
        said = (f"Batch {self.batch}: {self.drafter}'s tree ({self.tree_label}) is predicted at "
                f"{self.predicted.speedup:.2f}× but {what} was measured at {m.speedup:.2f}× "
                f"({self.predicted.speedup / m.speedup - 1:+.1%}), more than the measurement's "
                f"spread over rounds ({m.spread:.1%}). Source: {m.source}.")
        if m.same_tree and m.predicted_here is not None:
            window = " over the rounds in which every row runs" if self.batch > 1 else ""
            here = m.predicted_here / m.speedup - 1
            sample = ("which prompts were decoded and which rounds count" if self.batch > 1
                      else "which prompts were decoded")
            why = (f"so the gap is in the acceptance ({sample}), not in the step costs"
                   if abs(here) <= m.spread else "so the step costs miss too")
            said += (f" Priced by the same step profile with the swept prompts' own acceptance"
                     f"{window}, it is predicted at {m.predicted_here:.2f}× ({here:+.1%}), "
                     f"{why}.")
        if m.same_tree and m.predicted_as_swept is not None:
            swept = m.predicted_as_swept / m.speedup - 1
            holds = ("within the 5% the live benchmark holds every sweep point to: the "
                     "step-cost model holds" if abs(swept) <= MODEL_TOLERANCE
                     else "beyond the 5% the live benchmark holds every sweep point to: the "
                     "step-cost model misses here")
            said += (f" Priced as the sweep ran — those prompts' acceptance and the step "
                     f"profile taken alongside its points — it is predicted at "
                     f"{m.predicted_as_swept:.2f}× ({swept:+.1%}), {holds}.")
        return said


MODEL_TOLERANCE = 0.05  # bench_live's goal: every sweep point predicted within 5%


def rows(view: Overview) -> list[dict[str, Any]]:
    """The answers as table rows: what to use, predicted and measured, the dynamic alternative."""
    out = []
    for a in view.answers:
        m, d = a.measured, a.dynamic
        out.append({
            "batch": a.batch, "drafter": a.drafter, "tree": a.tree_label,
            "predicted, held out": speedup_text(a.held_out.speedup) if a.held_out else None,
            "predicted, calibration": speedup_text(a.predicted.speedup),
            "predicted tokens/s": round(a.predicted.tokens_per_s),
            "measured speed-up": speedup_text(m.speedup) if m else None,
            "spread over rounds": f"{m.spread:.1%}" if m else None,
            "predicted as swept (profile alongside)": (
                speedup_text(m.predicted_as_swept)
                if m and m.predicted_as_swept is not None else None),
            "measured tree": (("the same" if m.same_tree else m.other)
                              if m else "not measured"),
            "dynamic alternative": f"{d.drafter}: {d.settings}" if d else None,
            "dynamic speed-up": speedup_text(d.speedup) if d else None})
    return out


@dataclass(frozen=True)
class DrafterEvidence:
    """One drafter's selection (``treeopt select``), its live sweep, and how to name them."""

    selection: Selection
    sweep: Sweep | None = None
    trace: str | None = None  # the calibration trace whose per-step walk gave E[L], if known
    command: str = "treeopt select"  # what computes the selection on the command line
    as_swept: SweptPricing | None = None  # the sweep's own run priced, if it can be
    held_out: HeldOutPricing | None = None  # the step costs with the held-out walk
    drafted_sweep: Sweep | None = None  # a lookup drafter's chains swept verified as drafted


@dataclass(frozen=True)
class Overview:
    """The answer per batch size at one context, and the drafters' evidence it came from."""

    context: int
    answers: tuple[BatchAnswer, ...]
    evidence: Mapping[str, DrafterEvidence]

    @property
    def warnings(self) -> list[str]:
        """Every batch size's disagreement between prediction and measurement."""
        return [a.disagreement for a in self.answers if a.disagreement]

    def answer(self, batch: int) -> BatchAnswer:
        for a in self.answers:
            if a.batch == batch:
                return a
        raise TreeoptError(f"the overview has no batch {batch}; it has "
                           f"{[a.batch for a in self.answers]}")


def overview(evidence: Mapping[str, DrafterEvidence], *, context: int | None = None,
             dynamic: Mapping[str, Any] | None = None, dynamic_source: str = "",
             root: str | Path | None = None) -> Overview:
    """The answer per batch size at ``context`` (default: the smallest every selection prices),
    from each drafter's evidence (named as ``choose-drafter`` names them) and ``select
    --dynamic``'s document; ``root``: file names in sources are written relative to it."""
    if not evidence:
        raise TreeoptError("no drafter's selection to answer from")
    choices = choose_drafter({k: e.selection for k, e in evidence.items()})
    ctx = min(c.context for c in choices) if context is None else context
    at = [c for c in choices if c.context == ctx]
    if not at:
        raise TreeoptError(f"the selections share no point at context {ctx}; they share "
                           f"{sorted({c.context for c in choices})}")
    answers = tuple(_answer(c, evidence, dynamic, dynamic_source, root)
                    for c in sorted(at, key=lambda c: c.batch))
    return Overview(ctx, answers, dict(evidence))


def _answer(choice: DrafterChoice, evidence: Mapping[str, DrafterEvidence],
            dynamic: Mapping[str, Any] | None, dynamic_source: str,
            root: str | Path | None) -> BatchAnswer:
    point = choice.point
    name = choice.drafter if choice.drafter != NO_DRAFTER else max(
        choice.speedups, key=lambda k: choice.speedups[k])
    given = evidence[name]
    predicted = Predicted(point.speedup, point.tokens_per_s, point.autoregressive_tokens_per_s,
                          prediction_source(given, root=root), point.expected_accept_length)
    drafted = point.drafted
    measured = None
    if drafted and given.drafted_sweep is not None and point.tree.size:  # measured as picked
        measured = measured_for(given.drafted_sweep, choice.batch, point.tree)
    if measured is None and given.sweep is not None and point.tree.size:
        measured = measured_for(given.sweep, choice.batch, point.tree, max_depth=point.max_depth,
                                drafted=drafted)
    if (measured is not None and measured.same_tree and given.as_swept is not None
            and not drafted):  # the alongside profile prices whole trees
        measured = replace(measured, predicted_as_swept=given.as_swept.speedup(point.tree,
                                                                              choice.batch))
    return BatchAnswer(choice.batch, choice.context, choice.drafter, point.tree, point.max_depth,
                       predicted, dict(choice.speedups), measured,
                       dynamic_alternative(dynamic, choice.batch, choice.context,
                                           source=dynamic_source),
                       held_out_prediction(given, point.tree, choice.batch, root=root,
                                           drafted=drafted), drafted=drafted)


def held_out_prediction(evidence: DrafterEvidence, tree: Tree, batch: int, *,
                        root: str | Path | None = None, drafted: bool = False
                        ) -> Predicted | None:
    """``tree`` at ``batch`` priced for the held-out prompts (None without a held-out
    pricing, or for no tree); ``drafted``: a chain verified as far as it was drafted."""
    held = evidence.held_out
    if held is None or tree.size == 0:
        return None
    p = held.predict(tree, batch, drafted=drafted)
    latency = _short(str(evidence.selection.latency.get("source", "?")), root)
    source = (f"E[L]: the held-out trace walked step by step over {held.window}; step costs: "
              f"{latency}{shared_text(evidence.selection.latency)}, as `{evidence.command}` "
              "prices them")
    return Predicted(p.speedup, p.tokens_per_s, p.tokens_per_s / p.speedup, source,
                     p.accept_length)


def prediction_source(evidence: DrafterEvidence, *, root: str | Path | None = None) -> str:
    """Where a selection's prediction comes from: the command, the E[L] (which trace, walked
    how) and the step costs (which file, on which device)."""
    sel = evidence.selection
    how = sel.growth.get("acceptance", "E[L] of the growth")
    ell = f"E[L]: {how} {_short(evidence.trace, root)}" if evidence.trace else f"E[L]: {how}"
    latency = _short(str(sel.latency.get("source", "?")), root)
    device = sel.latency.get("device")
    costs = (f"step costs: {latency}" + (f" on {device}" if device else "")
             + shared_text(sel.latency))
    return f"predicted by `{evidence.command}` — {ell}; {costs}"


def shared_text(latency: dict[str, Any]) -> str:
    """``, the verify step shared with 5 other drafters' profiles`` where the verify step was
    priced from other drafters' profiles too (:mod:`treeopt.pricing.shared_verify`), else ''.

    >>> shared_text({"shared_with": {"1": ["step-eagle-cpu.json"], "8": ["step-hydra-cpu.json"]}})
    ", the verify step shared with 2 other drafters' profiles"
    >>> shared_text({"source": "step.json"})
    ''
    """
    names = {n for names in (latency.get("shared_with") or {}).values() for n in names}
    if not names:
        return ""
    what = "other drafter's profile" if len(names) == 1 else "other drafters' profiles"
    return f", the verify step shared with {len(names)} {what}"


def measured_for(sweep: Sweep, batch: int, tree: Tree, *, max_depth: int | None = None,
                 drafted: bool = False) -> Measured | None:
    """The sweep's measurement of ``tree`` at ``batch``, or of the size measured nearest to it
    (ties: the point the sweep marks ``selected``, then the same depth cap, then the smaller);
    None where the sweep has no point at ``batch``. ``drafted``: ``tree`` is a chain verified
    as far as it was drafted, which a sweep (verifying whole trees) never measures itself."""
    at = [p for p in sweep.points if p.batch == batch]
    if not at:
        return None
    paths = {tuple(path) for path in tree.as_choices()}
    same = [] if drafted else [p for p in at if set(p.choices) == paths]
    point = (max(same, key=lambda p: p.selected) if same else
             min(at, key=lambda p: (abs(p.size - tree.size), not p.selected,
                                    p.max_depth != max_depth, p.size)))
    return Measured(point.speedup, point.spread, point.se, point.tree_tokens_per_s, point.size,
                    point.max_depth, bool(same), _sweep_source(sweep, point),
                    point.predicted_speedup,
                    whole_chain=drafted and set(point.choices) == paths)


def _sweep_source(sweep: Sweep, p: SweepPoint) -> str:
    meta = sweep.meta
    how = (f"{meta.get('prompts', '?')} prompts × {meta.get('max_new_tokens', '?')} tokens, "
           f"{p.rounds or meta.get('rounds', '?')} rounds"
           + (", verified as drafted" if meta.get("verified") == "as drafted" else ""))
    return (f"measured in sweep {Path(sweep.source).name} on {meta.get('device', '?')}: batch "
            f"{p.batch}, {_size(p.size, p.max_depth)}, {how}")


def dynamic_alternative(doc: Mapping[str, Any] | None, batch: int, context: int, *,
                        source: str = "") -> DynamicAlternative | None:
    """``select --dynamic``'s best setting at (``batch``, ``context``), read as the Hardware page
    reads the document (None without a document or a point there)."""
    if doc is None:
        return None
    from treeopt.workbench.plots_dynamic import point, settings_label

    try:
        p = point(doc, batch, context)
    except TreeoptError:
        return None
    best = p["best"]
    latency = doc.get("latency", {})
    where = (f"predicted by `treeopt select --dynamic` ({source or 'its document'}): E[L] of the "
             f"dynamic traces, step costs: {latency.get('source', '?')} on "
             f"{latency.get('device', '?')}")
    return DynamicAlternative(str(doc.get("draft", {}).get("kind", "?")), settings_label(best),
                              float(best["speedup"]), float(best["tokens_per_s"]),
                              float(p["dynamic_over_static"]), where)


def demo_evidence(demo: Demo, *,
                  price: Callable[[str], DemoPricing | None] | None = None
                  ) -> dict[str, DrafterEvidence]:
    """Every demo drafter with a step profile: the selection ``treeopt select --demo KIND``
    computes, the drafter's live sweep and its calibration trace. ``price(kind)``: the demo's
    pricing of a drafter, computed already (default: :func:`~treeopt.workbench.demo_pricing.
    demo_pricing`, computed here)."""
    from treeopt.workbench.demo_pricing import demo_pricing

    out = {}
    for kind in demo.growths:
        priced = price(kind) if price is not None else demo_pricing(demo, kind)
        if priced is not None:
            trace = demo.paths.inside(demo.paths.trace(kind))
            out[kind] = DrafterEvidence(priced.selection, priced.sweep, trace,
                                        f"treeopt select --demo {kind}", priced.as_swept,
                                        priced.held_out, priced.drafted_sweep)
    return out


def demo_overview(demo: Demo, *,
                  price: Callable[[str], DemoPricing | None] | None = None) -> Overview | None:
    """The overview of the demo (None when it holds no step profile to price with); ``price``
    as :func:`demo_evidence` takes it."""
    evidence = demo_evidence(demo, price=price)
    if not evidence:
        return None
    from treeopt.dynamic.recommend import FORMAT
    from treeopt.files import read_tagged_json

    table = demo.latency
    path = demo.paths.dynamic_selection(table.stem if table else "cpu")
    doc = read_tagged_json(path, FORMAT) if path.exists() else None
    source = (demo.paths.inside(path) if path.is_relative_to(demo.paths.root)
              else path.as_posix())  # a selection made elsewhere is named where it is
    return overview(evidence, dynamic=doc, root=demo.paths.root, dynamic_source=source)


def _size(size: int, max_depth: int | None) -> str:
    return nodes_text(size) + (f", depth cap {max_depth}" if max_depth is not None else "")


def _short(path: str, root: str | Path | None) -> str:
    """``path`` relative to ``root`` when it lies under it."""
    if root is None:
        return path
    try:
        return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        return path


__all__ = ["BatchAnswer", "DrafterEvidence", "DynamicAlternative", "Measured",
           "Overview", "Predicted", "demo_evidence", "demo_overview", "dynamic_alternative",
           "held_out_prediction", "measured_for", "overview", "prediction_source", "rows"]
