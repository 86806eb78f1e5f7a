"""The warm-up: what the pages read from a demo, computed in the background once a page has run,
in the order of the navigation, so that the next page a person opens finds it ready — and out
of the way of the pages' own runs.

Both run in one interpreter, which runs one thread at a time (the GIL): a page's run that meets
the warm-up mid-computation shares the interpreter with it whatever the threads' CPU priorities,
and on one core a page opened during the warm-up took 2–6× its own time
(`benchmarks/bench_app.py`). So the warm-up starts each step only while no page runs
(:func:`page_run` marks a run), and a step is small: one drafter's pricing, table, walk or
growth, one replay.
"""

from __future__ import annotations

import ast
import functools
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from app_pages.cache import (
    ROOFLINE_DEFAULT,
    fastest_on_gpu,
    grown,
    growth_pair,
    held_out_curve,
    per_step_growth,
    step_curve,
)
from app_pages.state import (
    current_root,
    demo,
    demo_adaptive,
    demo_dataset,
    demo_dynamic_selection,
    demo_overview,
    demo_pricing,
)
from treeopt.model.step_growth import PER_STEP_GREEDY
from treeopt.pricing.selection import Selection
from treeopt.workbench.plots import load_tree_layout
from treeopt.workbench.trees import TreeSettings, families_for, pick_choice

_WARMED_ROOTS: set[str] = set()  # the demos a warm-up was started for
_RUNS = threading.Condition()
_running = 0  # page runs in progress
PAGE_WAIT_S = 30.0  # the longest a step waits for the pages to finish (a run left hanging)
WARM_UP_SWITCH_INTERVAL = 0.0005  # seconds; CPython's default is 0.005


@contextmanager
def page_run() -> Iterator[None]:
    """Mark a page's run: no warm-up step starts until it ends."""
    global _running
    with _RUNS:
        _running += 1
    try:
        yield
    finally:
        with _RUNS:
            _running -= 1
            _RUNS.notify_all()


def _between_runs() -> None:
    """Wait until no page runs (at most :data:`PAGE_WAIT_S`)."""
    with _RUNS:
        _RUNS.wait_for(lambda: _running == 0, timeout=PAGE_WAIT_S)


def warm_up(root: str | None = None) -> None:
    """Start the warm-up of the demo at ``root`` (default: the chosen one), once per server and
    demo, in a background thread at the lowest CPU priority. A failure here is left for the page
    to show. (It imports no third-party module a page may be importing meanwhile but networkx,
    which imports none: plotly reads pandas off sys.modules, and would find one half
    imported.)"""
    root = root or current_root()
    if root in _WARMED_ROOTS:
        return
    _WARMED_ROOTS.add(root)
    serialize_ast_parse()
    threading.Thread(target=_warm, args=(root,), name="treeopt-warm-up", daemon=True).start()


_AST_LOCK = threading.Lock()


def serialize_ast_parse() -> None:
    """Let one thread at a time run :func:`ast.parse` (idempotent). CPython 3.11 counts the depth
    of the syntax tree it converts to Python objects in one counter for all threads: two threads
    converting at once (Streamlit's magic parsing a page while another thread's garbage
    collection hands the interpreter over) fail with "SystemError: AST constructor recursion
    depth mismatch" (CPython gh-106905; seen here once, in a page's test under load).
    Streamlit's magic and pytest's assertion rewriting call ``ast.parse`` by its module
    attribute, so the lock covers them."""
    if sys.version_info >= (3, 13) or getattr(ast.parse, "_treeopt_serialized", False):
        return
    parse = ast.parse

    @functools.wraps(parse)
    def serialized(*args: object, **kwargs: object) -> ast.AST:
        with _AST_LOCK:
            return parse(*args, **kwargs)  # type: ignore[arg-type]

    serialized._treeopt_serialized = True  # type: ignore[attr-defined]
    ast.parse = serialized  # type: ignore[assignment]


def _warm(root: str) -> None:
    _lowest_priority()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, WARM_UP_SWITCH_INTERVAL))
    try:
        made = steps(root)
        while True:
            _between_runs()  # the next step is made, and run, between the pages' runs
            step = next(made, None)
            if step is None:
                break
            try:
                step()
            except Exception:  # noqa: BLE001, S112 — the page that needs the value raises it
                continue
    except Exception:  # noqa: BLE001, S110 — a step that cannot be made: the pages make it
        pass
    finally:
        sys.setswitchinterval(interval)


def _lowest_priority() -> None:
    """Give the calling thread the lowest CPU priority (nice 19) on Linux, where a thread has
    its own (its native id names it to setpriority); elsewhere that id may name a process, so
    the thread is left as it is."""
    if not sys.platform.startswith("linux"):
        return
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except OSError:  # not permitted here: the warm-up runs at the server's priority
        pass


def steps(root: str) -> Iterator[Callable[[], object]]:
    """The warm-up's steps on the demo at ``root``, in the order the pages need them: every
    drafter's pricing and the Overview (every page's pick), the Heads page's tables, the
    Drafters page's per-step walks (the Trees and Hardware pages' other drafters read theirs off
    them), the Trees page's first view, the Hardware page's roofline view, the Live page's
    dynamic selection and first replay, what the Trees page's first widgets show next, and the
    Live page's other replays. Each step is
    made once the ones before it have run."""
    from treeopt.workbench.adaptive import WORKLOADS

    bundle = demo(root)
    for kind in bundle.traces:
        yield lambda k=kind: demo_pricing(k, root=root)
    yield lambda: demo_overview(root)
    data = demo_dataset(root)
    for label in data.sources:
        yield lambda k=label: data.table(k)
    for kind in bundle.growths:
        if kind in bundle.traces:
            yield lambda k=kind: step_curve(bundle.growths[k], bundle.traces[k])
    yield load_tree_layout  # networkx, which the Trees page's tree figure lays out with
    yield from trees_first_view(root)
    yield from hardware_first_view(root)
    yield lambda: demo_dynamic_selection(root)
    first, *rest = WORKLOADS
    yield lambda: demo_adaptive(first, root=root)
    yield from trees_next_views(root)
    for workload in rest:
        yield lambda w=workload: demo_adaptive(w, root=root)


def recommended(root: str) -> tuple[str, int, TreeSettings] | None:
    """The drafter, batch size and Trees page settings of the Overview's recommendation on the
    demo at ``root`` (:func:`app_pages.choice.recommended` at no batch), None where it has
    none."""
    view = demo_overview(root)
    traces = demo(root).traces
    answers = [a for a in view.answers if a.tree.size and a.drafter in traces] if view else []
    if not answers or view is None:
        return None
    answer = answers[0]
    return answer.drafter, answer.batch, _pick_settings(root, answer.drafter, answer.batch,
                                                        view.evidence[answer.drafter].selection)


def _pick_settings(root: str, label: str, batch: int,
                   selection: Selection | None = None) -> TreeSettings | None:
    """The Trees page settings of select's pick for ``label`` at ``batch`` (the smallest
    batch where not priced) and the smallest context (:func:`app_pages.choice.demo_pick`)."""
    if selection is None:
        priced = demo_pricing(label, root=root)
        if priced is None:
            return None
        selection = priced.selection
    batches = selection.batches
    point = selection.point(batch if batch in batches else batches[0], selection.contexts[0])
    return pick_choice(label, point, heads=demo(root).traces[label].heads).settings


def trees_view(root: str, label: str, s: TreeSettings, *, temperature: float = 0.0,
               others: bool = False) -> list[Callable[[], object]]:
    """The growths the Trees page draws for drafter ``label`` with settings ``s`` at
    ``temperature``: the pair (and per-step greedy growth, where the settings pick one), the
    greedy-grown tree at ``temperature``, the held-out curve and, with ``others``, every other
    drafter grown to the same size."""
    data = demo_dataset(root)
    source, held = data.at_temperature(label, temperature)
    depth = min(s.max_depth, source.heads)
    caps = dict(max_nodes=s.max_nodes, max_depth=depth, max_rank=s.max_rank,
                constraint=s.constraint)
    made: list[Callable[[], object]] = [lambda: growth_pair(source, **caps)]
    if temperature:
        greedy = data.sources[label]
        made.append(lambda: held_out_curve(growth_pair(greedy, **caps)["empirical"], source))
    if held is not None:
        made.append(lambda: held_out_curve(growth_pair(source, **caps)[s.method], held))
    if others:
        made += [lambda o=o: grown(data.sources[o], method="empirical", max_nodes=s.max_nodes,
                                   constraint=s.constraint)
                 for o in data.sources if o != label and data.has_trace(o)]
    if s.family == PER_STEP_GREEDY and PER_STEP_GREEDY in families_for(source, s.constraint):
        made.append(lambda: per_step_growth(source, **caps))
    return made


def trees_first_view(root: str) -> Iterator[Callable[[], object]]:
    """The Trees page's first view on the demo at ``root``: the recommended drafter's growths,
    and every other drafter grown to the same size."""
    found = recommended(root)
    if found is not None:
        label, _, settings = found
        yield from trees_view(root, label, settings, others=True)


def hardware_first_view(root: str) -> Iterator[Callable[[], object]]:
    """The Hardware page's roofline view as it first opens on the demo at ``root``: the
    recommended drafter's fastest trees for the page's first model and GPU."""
    from treeopt.roofline import load_hardware, preset

    found = recommended(root)
    if found is not None:
        label = found[0]
        data = demo_dataset(root)
        model, gpu = ROOFLINE_DEFAULT
        yield lambda: fastest_on_gpu(data.sources[label], label, data.methods(label)[0],
                                     model=preset(model), hardware=load_hardware(gpu))


def trees_next_views(root: str) -> Iterator[Callable[[], object]]:
    """What the Trees page shows next from its first view, as its first widgets move to their
    first other option: the first other drafter in the selectbox at the same batch size
    (select's pick), then, for it and for the recommended drafter, the next batch size's pick
    and that pick at each sampling temperature. (Every drafter's would double the warm-up, which
    shares the interpreter with the pages meanwhile; the rest are grown when chosen.)"""
    found = recommended(root)
    if found is None:
        return
    label, batch, _ = found
    data, traces = demo_dataset(root), demo(root).traces
    first = [o for o in data.sources if o != label and o in traces][:1]
    for other in first:
        picked = _pick_settings(root, other, batch)
        if picked is not None:
            yield from trees_view(root, other, picked)
    for drafter in first + [label]:
        priced = demo_pricing(drafter, root=root)
        later = [b for b in priced.selection.batches if b > batch] if priced else []
        picked = _pick_settings(root, drafter, later[0] if later else batch)
        if picked is None:
            continue
        if later:
            yield from trees_view(root, drafter, picked)
        for temperature in data.temperatures(drafter):
            yield from trees_view(root, drafter, picked, temperature=temperature)


__all__ = ["page_run", "recommended", "serialize_ast_parse", "steps", "trees_view", "warm_up"]
