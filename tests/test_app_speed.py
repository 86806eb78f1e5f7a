"""What keeps the app fast, checked for correctness (no timings here: benchmarks/bench_app.py
times it): the shipped Streamlit config turns file watching off, no page imports torch until a
decoding runs, the app's loaders and cached computations hand back the same objects, and the
one-pass walk that pricing uses equals simulating each tree."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from treeopt.demo.layout import default_root
from treeopt.errors import TreeoptError
from treeopt.model.growth import grow
from treeopt.model.simulation import nested_step_means, simulate
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / ".streamlit" / "config.toml"
HAS_DEMO = (default_root() / "manifest.json").exists()
needs_demo = pytest.mark.skipif(not HAS_DEMO, reason=f"no built demo at {default_root()}")


# ----- the shipped config -------------------------------------------------------------------

def test_the_shipped_config_turns_file_watching_off():
    """.streamlit/config.toml is shipped, and `streamlit config show`, run where `streamlit run
    app.py` runs, reports its settings: no file watching, headless, no usage statistics, no
    rerun on save (so the option names are ones this Streamlit knows)."""
    assert CONFIG.is_file()
    shown = subprocess.run([sys.executable, "-m", "streamlit", "config", "show"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120, check=True).stdout
    settings = {line.split(" = ")[0]: line.split(" = ", 1)[1] for line in shown.splitlines()
                if " = " in line and not line.startswith("#")}
    assert settings["fileWatcherType"] == '"none"'
    assert settings["headless"] == "true"
    assert settings["gatherUsageStats"] == "false"
    assert settings["runOnSave"] == "false"


# ----- no torch until a page decodes ----------------------------------------------------------

VISIT_EVERY_PAGE = """
import ast, json, sys
from pathlib import Path
from streamlit.testing.v1 import AppTest

from treeopt.demo.load import load
load(with_model=False)
import treeopt.workbench.datasets, treeopt.workbench.live, treeopt.workbench.demo_pricing
import treeopt.workbench.plots, treeopt.workbench.trees
library = sorted(m for m in ("torch", "transformers") if m in sys.modules)

at = AppTest.from_file(str(Path("app.py").resolve()), default_timeout=300)
at.run()
visited, problems = [], []
tree = ast.parse(Path("app.py").read_text(encoding="utf-8"))
pages = [node.args[0].value for node in ast.walk(tree)
         if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "Page"]
for page in pages:
    at.switch_page(page).run()
    visited.append(Path(page).stem)
    problems += [str(e.value) for e in (*at.exception, *at.error)]
print(json.dumps({"library": library, "visited": visited, "problems": problems,
                  "after_pages": sorted(m for m in ("torch", "transformers") if m in sys.modules)}))
"""


@needs_demo
def test_no_page_imports_torch_until_it_decodes():
    """Every page of app.py's navigation opened on the demo, and the library modules the pages
    use, in a fresh interpreter: neither torch nor transformers gets imported (the model loads when
    Verify decodes)."""
    run = subprocess.run([sys.executable, "-c", VISIT_EVERY_PAGE], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["library"] == []
    assert {"data", "heads", "trees", "drafters", "hardware", "export",
            "verify"} <= set(result["visited"])
    assert result["problems"] == []
    assert result["after_pages"] == []


# ----- cached loaders and computations -------------------------------------------------------

@pytest.fixture(scope="module")
def state():
    if not HAS_DEMO:
        pytest.skip(f"no built demo at {default_root()}")
    from app_pages import state

    return state


@pytest.fixture(scope="module")
def cache(state):
    from app_pages import cache

    return cache


def test_loaders_hand_back_the_same_objects(state):
    bundle = state.demo()
    assert state.demo() is bundle
    assert bundle.model is None and bundle.heads == {}  # no model for pages that do not decode
    assert state.demo_dataset() is state.demo_dataset()
    assert state.demo_dataset().sources["medusa"] is bundle.traces["medusa"]
    for kind in bundle.kinds:
        assert state.demo_pricing(kind) is state.demo_pricing(kind)
    dynamic = state.demo_dynamic_selection()
    assert dynamic is None or state.demo_dynamic_selection() is dynamic


def test_cached_computations_are_keyed_by_their_inputs(state, cache):
    from treeopt.roofline import load_hardware, preset

    traces = state.demo().traces
    caps = dict(max_nodes=32, max_depth=3, max_rank=8, constraint="none")
    pair = cache.growth_pair(traces["medusa"], **caps)
    assert cache.growth_pair(traces["medusa"], **caps) is pair
    assert cache.growth_pair(traces["hydra"], **caps) is not pair
    assert cache.growth_pair(traces["medusa"], **{**caps, "max_nodes": 24}) is not pair
    expected = grow(traces["medusa"], method="empirical", **caps)
    assert pair["empirical"].order == expected.order
    assert np.array_equal(pair["empirical"].expected_accept_length,
                          expected.expected_accept_length)
    with pytest.raises(TypeError):
        pair["empirical"] = expected  # read-only: every session shares it

    curve = cache.held_out_curve(pair["empirical"], state.demo().heldout_traces["medusa"])
    assert cache.held_out_curve(pair["empirical"], state.demo().heldout_traces["medusa"]) is curve
    assert np.array_equal(curve, pair["empirical"].evaluate_headline(
        state.demo().heldout_traces["medusa"]))  # per step: both traces record their sequences
    assert not curve.flags.writeable

    stepped = cache.per_step_growth(traces["medusa"], **caps)
    assert cache.per_step_growth(traces["medusa"], **caps) is stepped
    assert cache.per_step_growth(traces["medusa"], **{**caps, "max_nodes": 24}) is not stepped

    growth = cache.grown(traces["hydra"], method="empirical", max_nodes=16)
    assert cache.grown(traces["hydra"], method="empirical", max_nodes=16) is growth
    args = dict(model=preset("llama-2-7b"), hardware=load_hardware("h100-sxm"), batch=(1, 8),
                context=(512,), draft_kind="hydra", draft_heads=4)
    selection = cache.roofline_selection(growth, **args)
    assert cache.roofline_selection(growth, **args) is selection
    assert cache.roofline_selection(growth, **{**args, "batch": (1, 16)}) is not selection


def test_the_warm_up_prices_the_hardware_pages_first_roofline_view(state, cache):
    """The warm-up's Hardware step leaves in the cache the very selection the page's roofline
    view asks for first: the recommended drafter, the page's first model and GPU, its grid."""
    from app_pages import warm
    from treeopt.roofline import load_hardware, preset

    root = state.current_root()
    label = warm.recommended(root)[0]
    made = [step() for step in warm.hardware_first_view(root)]
    assert len(made) == 1
    data = state.demo_dataset(root)
    model, gpu = preset(cache.ROOFLINE_DEFAULT[0]), load_hardware(cache.ROOFLINE_DEFAULT[1])
    page = cache.fastest_on_gpu(data.sources[label], label, data.methods(label)[0], model=model,
                                hardware=gpu)
    assert page is made[0]
    assert page.batches == list(cache.ROOFLINE_BATCHES)
    assert page.contexts == list(cache.roofline_contexts(model))
    assert 4096 not in cache.roofline_contexts(preset("llama-2-7b"))  # 4,096 positions: no room


def test_identity_keys_are_never_reused(cache):
    """Two objects alive together get different keys; an object made after another is gone
    gets a new key even where Python reuses the old one's id."""
    first = RankTrace(np.zeros((4, 2), np.int16))
    key = cache.identity(first)
    assert cache.identity(first) == key
    assert cache.identity(RankTrace(np.zeros((4, 2), np.int16))) != key
    keys = set()
    for _ in range(50):
        keys.add(cache.identity(RankTrace(np.zeros((4, 2), np.int16))))  # freed at once
    assert len(keys) == 50


def _same_growth(mine, ref):
    assert (mine.method, mine.constraint, mine.order, mine.caps) == \
        (ref.method, ref.constraint, ref.order, ref.caps)
    assert mine.expected_accept_length.tolist() == ref.expected_accept_length.tolist()
    assert mine.per_step_accept_length.tolist() == ref.per_step_accept_length.tolist()
    assert {**mine.meta, "created": None} == {**ref.meta, "created": None}


def test_growths_share_their_walks_and_equal_grow(cache):
    """The app's growths equal grow's in every field but the creation time, whether their
    per-step walk is computed or read off a longer walk of the same first paths (a random
    trace; each size checked against grow itself)."""
    rng = np.random.default_rng(3)
    counts = [int(c) for c in rng.integers(5, 40, size=6)]
    trace = RankTrace(rng.integers(-1, 5, size=(sum(counts), 3)).astype(np.int16),
                      {"sequence_positions": counts, "top_k": 5})
    largest = cache.grown(trace, method="empirical", max_nodes=30)
    _same_growth(largest, grow(trace, method="empirical", max_nodes=30))
    walked = cache.step_means(largest.order, trace, sizes=31)
    for n in (1, 7, 30):  # prefixes of the largest growth: its walk, sliced
        assert cache.step_means(largest.order[:n], trace, sizes=n + 1).tolist() == \
            walked[:n + 1].tolist()
        _same_growth(cache.grown(trace, method="empirical", max_nodes=n),
                     grow(trace, method="empirical", max_nodes=n))
    capped = cache.growth_pair(trace, max_nodes=12, max_depth=2, max_rank=3, constraint="none")
    for method, growth in capped.items():
        _same_growth(growth, grow(trace, method=method, max_nodes=12, max_depth=2, max_rank=3))
    assert not walked.flags.writeable
    with pytest.raises(TreeoptError, match="not nested"):  # the walk's own checks still hold
        cache.step_means([(0, 0), (0,)], trace, sizes=3)


@needs_demo
def test_adaptive_replays_share_one_static_pricing():
    """The Live page's replays, their static trees priced once for every workload and batch
    size, equal adaptive_report's own, which prices each batch size's (a short replay)."""
    from treeopt.adaptive.report import adaptive_report
    from treeopt.adaptive.workload import ChainAcceptance, by_difficulty
    from treeopt.demo.load import load
    from treeopt.model.runs import as_runs
    from treeopt.workbench.adaptive import demo_adaptive, demo_static_trees

    demo = load(with_model=False)
    static = demo_static_trees(demo, sequences=8, positions=16)
    trace = as_runs(demo.heldout_traces["eagle"], [17] * 8)  # as runs of 17 tokens see them
    costs = demo.step_costs("eagle")  # the verify step shared, as the page prices
    for workload in ("steady", "shifting"):
        mine = demo_adaptive(demo, workload=workload, sequences=8, positions=16, static=static)
        acceptance = ChainAcceptance.from_rank_trace(trace, source="eagle held-out")
        if workload == "shifting":
            acceptance = by_difficulty(acceptance, easy_first=True)
        batches = [b for b in (1, 2, 4, 8) if b in costs.verify.batches]
        own = adaptive_report(acceptance, costs, batches=batches, growth=demo.growths["eagle"],
                              static_trace=trace)
        assert [s.static for s in mine.report.sides] == [s.static for s in own.sides]
        assert all(s.static is not None for s in own.sides)
        assert [s.to_json() for s in mine.report.sides] == [s.to_json() for s in own.sides]
        assert (mine.report.tuned, mine.report.vllm) == (own.tuned, own.vllm)


@needs_demo
def test_dataset_tables_are_computed_once():
    from treeopt.demo.load import load
    from treeopt.model.accuracy import AccuracyTable
    from treeopt.workbench.datasets import demo_dataset

    data = demo_dataset(load(with_model=False))
    table = data.table("hydra")
    assert data.table("hydra") is table
    assert np.array_equal(table.marginal, AccuracyTable.from_trace(data.sources["hydra"]).marginal)


# ----- the one-pass walk pricing uses ---------------------------------------------------------

def _walk_one_by_one(paths, trace, sizes):
    return [simulate(Tree.from_choices(paths[:n]), trace, per_step=True).mean_accept_length
            for n in range(sizes)]


def test_nested_step_means_equal_simulating_each_tree():
    rng = np.random.default_rng(0)
    for _ in range(20):
        heads = int(rng.integers(1, 5))
        counts = [int(c) for c in rng.integers(1, 30, size=int(rng.integers(1, 6)))]
        ranks = rng.integers(-1, 4, size=(sum(counts), heads)).astype(np.int16)
        trace = RankTrace(ranks, {"sequence_positions": counts})
        order = list(grow(trace, method="empirical", max_nodes=12).order)
        for cap in (None, 1, 2):
            paths = [p for p in order if cap is None or len(p) <= cap]
            sizes = len(paths) + 1
            assert nested_step_means(paths, trace, sizes=sizes).tolist() == \
                _walk_one_by_one(paths, trace, sizes)


@needs_demo
def test_nested_step_means_equal_simulating_each_tree_on_the_demo():
    from treeopt.demo.load import load

    demo = load(with_model=False)
    for kind in ("medusa", "eagle"):
        order = list(demo.growths[kind].order)
        for cap in (None, 2):
            paths = [p for p in order if cap is None or len(p) <= cap]
            assert nested_step_means(paths, demo.traces[kind], sizes=25).tolist() == \
                _walk_one_by_one(paths, demo.traces[kind], 25)


def test_nested_step_means_refuse_trees_that_are_not_nested():
    trace = RankTrace(np.zeros((4, 2), np.int16), {"sequence_positions": [4]})
    with pytest.raises(TreeoptError, match="not nested"):
        nested_step_means([(0, 0), (0,)], trace, sizes=3)
    with pytest.raises(TreeoptError, match="sequence_positions"):
        nested_step_means([(0,)], RankTrace(np.zeros((4, 2), np.int16)), sizes=2)


def test_figures_are_built_once_per_set_of_inputs(state, cache):
    from treeopt.workbench import plots, plots_dynamic

    figures = cache.CachedFigures(plots)
    table = state.demo_dataset().table("medusa")
    heatmap = figures.accuracy_heatmap(table, kind="marginal", max_rank=6)
    assert figures.accuracy_heatmap(table, kind="marginal", max_rank=6) is heatmap
    assert figures.accuracy_heatmap(table, kind="cumulative", max_rank=6) is not heatmap
    assert (figures.accuracy_heatmap(state.demo_dataset().table("hydra"), kind="marginal",
                                     max_rank=6) is not heatmap)
    assert heatmap.to_dict() == plots.accuracy_heatmap(table, kind="marginal",
                                                       max_rank=6).to_dict()
    curve = figures.growth_curves({"a": np.array([1.0, 1.5])}, points={"p": (1, 1.5)})
    assert figures.growth_curves({"a": np.array([1.0, 1.5])}, points={"p": (1, 1.5)}) is curve
    assert figures.growth_curves({"a": np.array([1.0, 1.6])}, points={"p": (1, 1.5)}) is not curve
    # names that are not figure functions are the module's own
    assert figures.ACCURACY_KINDS is plots.ACCURACY_KINDS
    assert cache.CachedFigures(plots_dynamic).contexts is plots_dynamic.contexts
    # two builders of one name are two keys; inputs the cache cannot key still give the figure
    builders = [lambda c, _: plots.growth_curves(c), lambda c, _: plots.widths_figure(c)]
    assert builders[0].__qualname__ == builders[1].__qualname__
    shown = [cache.figure(b, {"a": [1, 2]}, 0).to_dict() for b in builders]
    assert shown == [plots.growth_curves({"a": [1, 2]}).to_dict(),
                     plots.widths_figure({"a": [1, 2]}).to_dict()]
    lock = threading.Lock()  # Streamlit cannot hash it
    assert cache.figure(builders[0], {"a": [1, 2]}, lock).to_dict() == shown[0]


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="the shared AST counter is 3.11's")
def test_threads_parse_one_at_a_time():
    """The warm-up thread's interpreter shares ast.parse with the pages' magic: once the app has
    started it, a parse waits while another thread parses (CPython gh-106905)."""
    import ast

    from app_pages import warm

    warm.serialize_ast_parse()
    wrapped = ast.parse
    warm.serialize_ast_parse()
    assert ast.parse is wrapped  # once
    assert ast.dump(ast.parse("x = [1, (2, 3)]")) == ast.dump(
        compile("x = [1, (2, 3)]", "<s>", "exec", ast.PyCF_ONLY_AST))
    done = threading.Event()
    with warm._AST_LOCK:  # another thread mid-parse
        worker = threading.Thread(target=lambda: (ast.parse("y = 1"), done.set()))
        worker.start()
        assert not done.wait(0.2)
    worker.join(5)
    assert done.is_set()
