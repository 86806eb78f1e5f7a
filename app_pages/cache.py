"""What the app computes and draws, cached by its inputs and shared by every session: the
pages call these in place of the library's functions of the same names. Traces, tables,
growths, selections, sweeps and documents read once are immutable and too big to hash on every
call: they are keyed by identity, with a token that no later object reuses (an id is reused
once its object is gone; a token never is)."""

from __future__ import annotations

import functools
import itertools
import threading
import typing
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import plotly.graph_objects as go
import streamlit as st
from streamlit.runtime.caching.cache_errors import UnhashableParamError

from treeopt.documents.sweep import Sweep
from treeopt.model.acceptance import Method, Source
from treeopt.model.accuracy import AccuracyTable
from treeopt.model.growth import Growth
from treeopt.model.step_growth import StepGrowth
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Path
from treeopt.pricing.costs import StepCosts
from treeopt.pricing.selection import Selection
from treeopt.workbench.adaptive import AdaptiveReplay

if TYPE_CHECKING:
    from treeopt.roofline import Hardware, ModelConfig

_TOKENS: dict[int, int] = {}
_COUNTER = itertools.count()


class Document(dict):  # type: ignore[type-arg]
    """A JSON document read once per server and shared by every session: never changed."""


def identity(obj: object) -> int:
    """A cache key for an immutable object: the same for it while it lives, never another's."""
    key = id(obj)
    token = _TOKENS.get(key)
    if token is None:
        token = _TOKENS[key] = next(_COUNTER)
        weakref.finalize(obj, _TOKENS.pop, key, None)
    return token


BY_IDENTITY = {t: identity for t in (RankTrace, AccuracyTable, Growth, Selection, Sweep,
                                     StepCosts, Document, AdaptiveReplay)}


def figure(build: Callable[..., go.Figure], /, *args: Any, **kwargs: Any) -> go.Figure:
    """``build(*args, **kwargs)``, built once per set of inputs and shared by every session
    (st.plotly_chart copies a figure; pages never change one). Inputs the cache cannot key
    build a fresh figure."""
    try:
        return _figure(build, identity(build), args, kwargs)
    except UnhashableParamError:
        return build(*args, **kwargs)


@st.cache_resource(show_spinner=False, max_entries=256, hash_funcs=BY_IDENTITY)
def _figure(_build: Callable[..., go.Figure], build: int, args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> go.Figure:
    """``_build``'s figure (``build``, its identity, keys it)."""
    return _build(*args, **kwargs)


class CachedFigures:
    """A plots module whose figure functions (those returning a ``go.Figure``) go through
    :func:`figure`; its other names are the module's own."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if callable(value) and _returns_figure(value):
            return functools.partial(figure, value)
        return value


@functools.cache
def _returns_figure(fn: Callable[..., Any]) -> bool:
    try:
        return typing.get_type_hints(fn).get("return") is go.Figure
    except (NameError, TypeError):
        return False


@st.cache_resource(show_spinner=False, max_entries=256, hash_funcs=BY_IDENTITY)
def growth_pair(source: Source, *, max_nodes: int, max_depth: int | None,
                max_rank: int | None, constraint: str) -> Mapping[str, Growth]:
    """:func:`treeopt.workbench.trees.growth_pair`, computed once per source and caps (each
    growth's per-step E[L] from :func:`step_means`)."""
    from treeopt.model.acceptance import methods_for

    return MappingProxyType({m: _grow(source, method=m, max_nodes=max_nodes, max_depth=max_depth,
                                      max_rank=max_rank, constraint=constraint)
                             for m in methods_for(source)})


@st.cache_resource(show_spinner=False, max_entries=256, hash_funcs=BY_IDENTITY)
def grown(source: Source, *, method: Method, max_nodes: int,
          constraint: str = "none") -> Growth:
    """:func:`treeopt.model.growth.grow` with the source's own depth and ranks, computed once
    per source, size and constraint (its per-step E[L] from :func:`step_means`: a prefix of a
    larger growth's walk, such as the demo's own growth's, costs nothing)."""
    return _grow(source, method=method, max_nodes=max_nodes, constraint=constraint)


def _grow(source: Source, *, method: Method, max_nodes: int, max_depth: int | None = None,
          max_rank: int | None = None, constraint: str = "none") -> Growth:
    """:func:`treeopt.model.growth.grow`'s growth, equal to it in every field but its creation
    time: on a rank trace of nested trees, grown without the per-step walk (on the same ranks
    without ``sequence_positions``), then given the walk from :func:`step_means`."""
    from treeopt.model.growth import grow

    walk = isinstance(source, RankTrace) and constraint != "uniform"
    bare = (RankTrace(source.ranks, {k: v for k, v in source.meta.items()
                                     if k != "sequence_positions"}) if walk else source)
    growth = grow(bare, method=method, max_nodes=max_nodes, max_depth=max_depth,
                  max_rank=max_rank, constraint=constraint)  # type: ignore[arg-type]
    if not walk:
        return growth
    assert isinstance(source, RankTrace)
    return replace(growth, meta={**growth.meta, "trace_meta": dict(source.meta)},
                   per_step_accept_length=per_step(growth, source))


_WALKS: dict[int, list[tuple[tuple[Path, ...], npt.NDArray[np.float64]]]] = {}
_WALKS_LOCK = threading.Lock()
WALKS_PER_TRACE = 32  # the walks kept per trace, the longest first


def step_means(order: Sequence[Path], trace: RankTrace, *,
               sizes: int) -> npt.NDArray[np.float64]:
    """:func:`treeopt.model.simulation.nested_step_means` of the first ``sizes`` − 1 paths of
    ``order`` on ``trace``, read-only, walked once per server: E[L] of the n-node tree depends on
    the first n paths only, so a walk of a longer order with the same first paths answers it
    (the Trees page's other drafters are prefixes of the demo's own growths, which the Drafters
    page walks)."""
    from treeopt.model.simulation import nested_step_means

    key, head = identity(trace), tuple(order[:sizes - 1])
    with _WALKS_LOCK:
        walked = list(_WALKS.get(key, ()))
    for done, curve in walked:
        if len(curve) >= sizes and done[:sizes - 1] == head:
            return curve[:sizes]
    curve = nested_step_means(head, trace, sizes=sizes)
    curve.setflags(write=False)
    with _WALKS_LOCK:
        if key not in _WALKS:
            weakref.finalize(trace, _WALKS.pop, key, None)
        kept = sorted([*_WALKS.get(key, ()), (head, curve)], key=lambda w: -len(w[1]))
        _WALKS[key] = kept[:WALKS_PER_TRACE]
    return curve


def per_step(growth: Growth, trace: RankTrace) -> npt.NDArray[np.float64] | None:
    """:meth:`Growth.evaluate_per_step` (the same checks, the same figures), nested trees walked
    by :func:`step_means`."""
    if growth.constraint == "uniform":
        return growth.evaluate_per_step(trace)
    counts = trace.meta.get("sequence_positions")
    if not counts or sum(counts) != trace.positions:
        return None
    trace.require(heads=growth.tree(growth.max_nodes).depth, source="per-step trace")
    return step_means(growth.order, trace, sizes=growth.max_nodes + 1)


@st.cache_resource(show_spinner=False, max_entries=64, hash_funcs=BY_IDENTITY)
def per_step_growth(trace: RankTrace, *, max_nodes: int, max_depth: int, max_rank: int,
                    constraint: str) -> StepGrowth:
    """:func:`treeopt.model.step_growth.grow_per_step`, computed once per trace and caps."""
    from treeopt.model.step_growth import grow_per_step

    return grow_per_step(trace, max_nodes=max_nodes, max_depth=max_depth, max_rank=max_rank,
                         constraint=constraint)


@st.cache_resource(show_spinner=False, max_entries=256, hash_funcs=BY_IDENTITY)
def held_out_curve(growth: Growth, trace: RankTrace) -> npt.NDArray[np.float64]:
    """E[L] of every tree of ``growth`` on ``trace``, per step where both allow it
    (:meth:`Growth.evaluate_headline`), read-only."""
    steps = per_step(growth, trace) if growth.per_step_accept_length is not None else None
    curve = np.array(steps if steps is not None else growth.evaluate(trace), float)
    curve.setflags(write=False)
    return curve


@st.cache_resource(show_spinner=False, max_entries=64, hash_funcs=BY_IDENTITY)
def step_curve(growth: Growth, trace: RankTrace) -> npt.NDArray[np.float64]:
    """E[L] of every tree of ``growth`` on ``trace``, the trace it was grown on, as the Trees
    page reads a curve: per step where ``trace`` records its sequences, even where the growth's
    file holds no per-step figures (a demo built before it did); else position-weighted.
    Read-only."""
    steps = growth.per_step_accept_length
    if steps is None:
        steps = per_step(growth, trace)
    curve = np.array(steps if steps is not None else growth.expected_accept_length, float)
    curve.setflags(write=False)
    return curve


@st.cache_resource(show_spinner=False, max_entries=256, hash_funcs=BY_IDENTITY)
def roofline_selection(growth: Growth, *, model: ModelConfig, hardware: Hardware,
                       batch: tuple[int, ...], context: tuple[int, ...],
                       draft_kind: str | None, draft_heads: int) -> Selection:
    """:func:`treeopt.pricing.sources.roofline_selection` (bf16), computed once per growth, model,
    hardware and grid."""
    from treeopt.pricing.sources import roofline_selection as build

    return build(growth, model=model, hardware=hardware, batch=list(batch),
                 context=list(context), draft_kind=draft_kind, draft_heads=draft_heads)


ROOFLINE_DEFAULT = ("llama-2-7b", "h100-sxm")  # the Hardware page's first model and GPU
ROOFLINE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128)  # its grid of the fastest tree per batch size
ROOFLINE_CONTEXTS = (128, 512, 1024, 2048, 4096)  # … and context
ROOFLINE_NODES = 128  # the largest tree it prices


def roofline_contexts(model: ModelConfig) -> tuple[int, ...]:
    """The grid's contexts that leave the model room for the largest tree (and its root)."""
    room = model.max_positions or 1 << 30
    return tuple(s for s in ROOFLINE_CONTEXTS if s + ROOFLINE_NODES + 1 <= room)


def fastest_on_gpu(source: Source, label: str, method: Method, *, model: ModelConfig,
                   hardware: Hardware) -> Selection:
    """The Hardware page's roofline selection of drafter ``label``'s trees (``source``, grown
    by ``method`` to :data:`ROOFLINE_NODES`) for ``model`` on ``hardware``, over the page's
    grid; its drafting priced where ``label`` is a drafter kind."""
    from treeopt.registry.kinds import KINDS

    growth = grown(source, method=method, max_nodes=ROOFLINE_NODES)
    return roofline_selection(growth, model=model, hardware=hardware, batch=ROOFLINE_BATCHES,
                              context=roofline_contexts(model),
                              draft_kind=label if label in KINDS else None,
                              draft_heads=source.heads)
