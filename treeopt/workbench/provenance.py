"""What the files ``select`` joins record about the heads and the model they were made with, and
the check that they agree: a growth or trace of one set of heads priced with the latency of
another model, or the drafting cost of other heads, would give a confident wrong answer.

Each file records what it knows (None: not recorded) and only recorded values are compared:

- growth: its trace's meta (``trace_meta``: head kind, head count, heads config);
- rank trace: head kind, head count (its width), heads config (``treeopt calibrate`` writes them);
- step profile: the heads config and the base model's shape;
- dynamic trace: its drafter's kind and shape;
- latency table: the base model's shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from treeopt.errors import FieldError, TreeoptError
from treeopt.model.growth import Growth
from treeopt.model.trace import RankTrace

if TYPE_CHECKING:
    from treeopt.documents.step_profile import StepProfile
    from treeopt.dynamic.simulate import DynamicTrace
    from treeopt.profiling.table import LatencyTable

_LABELS = {"kind": "head kind", "num_heads": "head count", "hidden_size": "hidden size",
           "vocab_size": "vocabulary", "num_layers": "base model layers"}


@dataclass(frozen=True)
class Recorded:
    """The heads and model a file says it was made with.

    >>> Recorded("g.json", kind="hydra", num_heads=4).kind
    'hydra'
    """

    source: str
    kind: str | None = None
    num_heads: int | None = None
    hidden_size: int | None = None
    vocab_size: int | None = None
    num_layers: int | None = None


def _from_trace_meta(meta: dict[str, Any], source: str, *, num_heads: int | None) -> Recorded:
    heads = meta.get("heads_config") if isinstance(meta.get("heads_config"), dict) else {}
    return Recorded(source, kind=meta.get("head_kind") or heads.get("kind"),
                    num_heads=num_heads if num_heads is not None else meta.get("num_heads"),
                    hidden_size=heads.get("hidden_size"), vocab_size=heads.get("vocab_size"))


def recorded_by_growth(growth: Growth, source: str) -> Recorded:
    meta = growth.meta.get("trace_meta")
    if not isinstance(meta, dict):
        return Recorded(source, kind=growth.meta.get("head_kind"))
    return _from_trace_meta(meta, source, num_heads=None)


def recorded_by_trace(trace: RankTrace, source: str) -> Recorded:
    return _from_trace_meta(trace.meta, source, num_heads=trace.heads)


def recorded_by_step_profile(profile: StepProfile, source: str) -> Recorded:
    heads, model = profile.heads, profile.model or {}
    return Recorded(source, kind=heads.get("kind"), num_heads=heads.get("num_heads"),
                    hidden_size=heads.get("hidden_size") or model.get("hidden_size"),
                    vocab_size=heads.get("vocab_size") or model.get("vocab_size"),
                    num_layers=model.get("num_hidden_layers"))


def recorded_by_dynamic_trace(trace: DynamicTrace, source: str) -> Recorded:
    drafter = trace.meta.get("drafter") if isinstance(trace.meta.get("drafter"), dict) else {}
    return Recorded(source, kind=drafter.get("kind"), hidden_size=drafter.get("hidden_size"),
                    vocab_size=drafter.get("vocab_size"))


def recorded_by_table(table: LatencyTable, source: str) -> Recorded:
    return Recorded(source, hidden_size=table.model.hidden_size,
                    vocab_size=table.model.vocab_size, num_layers=table.model.num_layers)


def check_agree(records: Sequence[Recorded]) -> None:
    """Raise when two files record different heads or model shapes.

    >>> check_agree([Recorded("g.json", num_heads=4), Recorded("p.json", num_heads=3)])
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: g.json has head count 4 but p.json has 3: they come from different heads or models
    """
    for name in (f.name for f in fields(Recorded) if f.name != "source"):
        known = [(r.source, getattr(r, name)) for r in records if getattr(r, name) is not None]
        for source, value in known[1:]:
            if value != known[0][1]:
                raise TreeoptError(f"{known[0][0]} has {_LABELS[name]} {known[0][1]} but "
                                   f"{source} has {value}: they come from different heads "
                                   "or models")


def check_draft_heads(growth: Growth, num_heads: int, *, source: str,
                      depth_caps: Sequence[int] | None = None) -> None:
    """Raise when ``num_heads`` heads cannot draft the growth's deepest tree (under the caps)."""
    depth = growth.tree(growth.max_nodes).depth
    if depth_caps:
        depth = min(depth, max(depth_caps))
    if num_heads < depth:
        raise FieldError("draft_heads", f"{num_heads} is smaller than the depth {depth} of the "
                         f"trees in {source}; give at least {depth} (or cap {{max_depths}})")
