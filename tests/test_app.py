"""Every app page on the shipped demo through Streamlit's AppTest: no exception, no error box, and
the figures each page shows equal to what the library computes here from the same demo files."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pytest

from treeopt.demo.layout import KINDS, default_root

if not (default_root() / "manifest.json").exists():
    pytest.skip(f"no built demo at {default_root()} (build it with `treeopt demo build`)",
                allow_module_level=True)

from apptest import assert_clean, figures, live_section, open_page  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402

from treeopt.engines.forms import export  # noqa: E402
from treeopt.engines.registry import FORMATS, engine_problems  # noqa: E402
from treeopt.errors import TreeoptError  # noqa: E402
from treeopt.model.acceptance import expected_accept_length  # noqa: E402
from treeopt.model.growth import grow  # noqa: E402
from treeopt.model.simulation import simulate  # noqa: E402
from treeopt.model.step_growth import GROWTH_ORDER, PER_STEP_GREEDY, grow_per_step  # noqa: E402
from treeopt.workbench.datasets import dataset_from_upload  # noqa: E402


@pytest.fixture(scope="module")
def demo():
    """The demo's traces and prompts, loaded here without the model (the expected values)."""
    from treeopt.demo.load import load

    return load(with_model=False)


@pytest.fixture(scope="module")
def view(demo):
    """The Overview's answers on the demo: the pick every page starts from."""
    from treeopt.workbench.overview import demo_overview

    return demo_overview(demo)


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def demo_pick(demo, kind):
    """The tree select picks at batch 1 from the demo's step profile (None without one)."""
    from treeopt.workbench.demo_pricing import demo_pricing

    priced = demo_pricing(demo, kind)
    return None if priced is None else min(priced.selection.points, key=lambda p: p.batch)


def trees_page_tree(trace, *, size: int = 64, max_depth: int | None = None,
                    family: str = GROWTH_ORDER):
    """The tree the Trees page chooses at these widget values."""
    if family == PER_STEP_GREEDY:
        grown = grow_per_step(trace, max_nodes=128, max_depth=max_depth or trace.heads,
                              max_rank=10)
        return grown.tree(min(size, len(grown.order)))
    growth = grow(trace, method="empirical", max_nodes=128, max_depth=max_depth or trace.heads,
                  max_rank=10, constraint="none")
    return growth.tree(min(size, growth.max_nodes))


def page_accept_length(tree, trace) -> str:
    """The E[L] the Trees page shows for ``tree``: per step on a trace of sequences, at the
    app's one precision for an accepted length (two decimals)."""
    if "sequence_positions" in trace.meta:
        return f"{simulate(tree, trace, per_step=True).mean_accept_length:.2f}"
    return f"{expected_accept_length(tree, trace, method='empirical'):.2f}"


def values(array) -> list:
    """A figure's array as the browser reads it: Plotly sends a numpy array as typed bytes."""
    if isinstance(array, dict) and "bdata" in array:
        return np.frombuffer(base64.b64decode(array["bdata"]), array["dtype"]).tolist()
    return list(array)


def recommended(view):
    """The Overview's answer the pages start with: the smallest batch size's with a tree."""
    return next(a for a in view.answers if a.tree.size)


def test_data_page_lists_the_demo_trace_sizes(demo):
    at = open_page("data")
    assert [t.value for t in at.title] == ["Data"]
    assert [s.value for s in at.subheader] == ["demo"]
    items = [m.value for m in at.markdown if m.value.startswith("- **")]
    assert items == [f"- **{kind}**: drafts {demo.traces[kind].heads} deep, "
                     f"{demo.traces[kind].positions:,} calibration positions; held-out trace of "
                     f"{demo.heldout_traces[kind].positions:,} positions" for kind in demo.kinds]


def test_data_page_shows_bad_uploads_as_errors_and_loads_good_ones():
    at = open_page("data")
    at.radio(key="data_source").set_value("Upload a file").run()
    for name, data in [("bad.npz", b"not a zip archive"), ("bad.csv", b"head,top1\n0,abc\n"),
                       ("bad.json", b"\xff\xfe")]:
        at.file_uploader(key="data_upload").set_value((name, data, "application/octet-stream"))
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert [e.value[:len(name) + 1] for e in at.error] == [f"{name}:"], (name, at.error)
    table_csv = b"head,top1,top2\n0,0.5,0.7\n1,0.25,0.4\n"
    at.file_uploader(key="data_upload").set_value(("vicuna.csv", table_csv, "text/csv"))
    at.run()
    assert_clean(at)
    assert [s.value for s in at.success] == ["Loaded vicuna.csv."]
    assert "- **vicuna**: drafts 2 deep, accuracy table" in [m.value for m in at.markdown]
    with pytest.raises(TreeoptError, match="expected a rank trace"):  # the uploader refuses it
        dataset_from_upload("bad.txt", b"0.5")
    # the other pages now work on the uploaded table (independent model)
    at.switch_page("app_pages/trees.py").run()
    assert_clean(at)
    from treeopt.model.accuracy import parse_accuracies

    table = parse_accuracies(table_csv.decode(), source="vicuna.csv")
    growth = grow(table, method="independent", max_nodes=128, max_depth=2, max_rank=10)
    tree = growth.tree(min(64, growth.max_nodes))
    value = expected_accept_length(tree, table, method="independent")
    assert metrics(at)["E[L] of the chosen tree"] == f"{value:.2f}"


def test_heads_page_draws_every_drafter_on_one_colour_scale(demo):
    from treeopt.workbench.style import heat_scale

    at = open_page("heads")
    (fig,) = figures(at)  # one figure: every drafter in one panel, one colour bar
    assert fig["layout"]["title"]["text"] == "Marginal accuracy per head or depth and rank (%)"
    (heat,) = fig["data"]  # one trace: every drafter's rows, on the figure's colour axis
    assert heat["coloraxis"] == "coloraxis"
    shown = np.concatenate([np.stack([(demo.traces[k].ranks == r).mean(axis=0)
                                      for r in range(10)], axis=1).ravel() * 100
                            for k in demo.kinds])
    scale = heat_scale(shown)  # the marginal accuracies of every drafter, ranks 0 … 9
    axis = fig["layout"]["coloraxis"]
    assert (axis["cmin"], axis["cmax"]) == pytest.approx((scale.zmin, scale.zmax))
    noun = {k: "depth" if k in ("eagle", "eagle3", "draft-model", "prompt-lookup", "ngram-trie")
            else "head" for k in demo.kinds}
    row = 0
    for kind in demo.kinds:
        ranks = demo.traces[kind].ranks  # [positions, heads]
        top1 = (ranks[:, 0] == 0).mean() * 100
        assert heat["hovertext"][row][0] == (f"{kind} · {noun[kind]} 1, rank 0: {top1:.1f}%"
                                             f"<br>n = {len(ranks):,} positions")
        assert heat["y"][row:row + ranks.shape[1]] == [f"{kind} · {noun[kind]} {k + 1}"
                                                       for k in range(ranks.shape[1])]
        row += ranks.shape[1]
    assert len(heat["y"]) == row and not fig["layout"].get("annotations")


def test_trees_page_shows_the_exact_expected_accept_length(demo, view):
    at = open_page("trees")
    kind = recommended(view).drafter
    trace = demo.traces[kind]
    tree = recommended(view).tree
    pick = demo_pick(demo, kind)
    family = at.radio(key="trees_family").value
    assert family == pick.family  # the page's widgets reproduce select's pick exactly
    assert tree == trees_page_tree(trace, size=pick.tree.size, max_depth=pick.max_depth,
                                   family=family)
    assert metrics(at) == {"E[L] of the chosen tree": page_accept_length(tree, trace),
                           "E[L] held out, per step":
                               f"{recommended(view).held_out.accept_length:.2f}",
                           "Nodes / depth": f"{tree.size} / {tree.depth}",
                           "Tokens verified per step": f"{tree.size + 1}"}
    assert len(figures(at)) == 4  # growth curves, tree, widths, held-out gap

    at.slider(key="trees_size").set_value(32).run()
    at.slider(key="trees_depth").set_value(trace.heads).run()
    assert_clean(at)
    small = trees_page_tree(trace, size=32, family=family)
    assert metrics(at)["E[L] of the chosen tree"] == page_accept_length(small, trace)
    at.radio(key="trees_family").set_value(GROWTH_ORDER).run()
    assert_clean(at)
    assert metrics(at)["E[L] of the chosen tree"] == page_accept_length(
        trees_page_tree(trace, size=32), trace)


def test_trees_page_grows_every_other_drafter_under_its_own_depth(demo):
    """Medusa chosen and capped at depth 2: every other drafter's curve is still its own
    growth's, to its own size (prompt lookup's ends where its trees stop gaining), the curve
    the Drafters page draws."""
    at = open_page("trees")
    at.selectbox(key="trees_label").set_value("medusa").run()
    at.slider(key="trees_depth").set_value(2).run()
    assert_clean(at)
    curves = {t["name"]: t for t in figures(at)[0]["data"]}
    drafters = {t["name"]: t["y"] for t in figures(open_page("drafters"))[0]["data"]}
    for other in (k for k in demo.kinds if k != "medusa"):
        own = grow(demo.traces[other], method="empirical", max_nodes=128)
        curve = curves[f"{other} · empirical"]
        assert values(curve["x"]) == list(range(own.max_nodes + 1))
        assert values(curve["y"]) == pytest.approx(own.headline_accept_length.tolist())
        assert drafters[other] == pytest.approx(values(curve["y"]))
    capped = grow(demo.traces["medusa"], method="empirical", max_nodes=128, max_depth=2,
                  max_rank=at.slider(key="trees_rank").value)
    assert values(curves["medusa · empirical"]["y"]) == pytest.approx(
        capped.headline_accept_length.tolist())  # the caps hold for the chosen drafter


def test_trees_page_shows_a_bad_pasted_tree_as_an_error():
    at = open_page("trees")
    at.text_area(key="trees_pasted").set_value("[[0], [0, 0, 0, 0, 0, 0, 0, 0, 0]]").run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.error) == 1 and "pasted tree" in at.error[0].value


def expected_exports(tree, num_heads: int | None = None) -> list[str]:
    """What the Export page shows (st.code strips the final newline) for a drafter of
    ``num_heads`` heads (default: the tree's depth, what a bare tree tells)."""
    heads = max(num_heads or 0, tree.depth)
    return [export(tree, fmt, num_heads=heads, draft="medusa").strip() for fmt in FORMATS
            if not engine_problems(tree, fmt, num_heads=heads)]


def expected_tabs(demo, kind, tree):
    """The Export page's tabs for the demo's ``kind`` drafter and ``tree`` (the library's)."""
    from treeopt.workbench.export_tabs import lookup_tabs, tree_tabs

    drafter = {**demo.growths[kind].drafter, "kind": kind}
    return lookup_tabs(tree, drafter) or tree_tabs(
        tree, num_heads=max(tree.depth, demo.traces[kind].heads), draft="medusa",
        speculative_model=None, method="eagle")


def test_export_page_exports_the_overviews_pick_at_every_batch_in_every_tab(demo, view):
    """The Overview's pick at each batch size, chosen with "Use this tree", on Export: every
    tab holds the engine's file or one line saying why not (0 blank tabs), the files are the
    library's, and the page names the drafter by its own kind."""
    from treeopt.registry.kinds import KINDS as REGISTRY

    at = open_page()
    for a in (a for a in view.answers if a.tree.size):
        at.button(key=f"overview_use_{a.batch}").click().run()
        at.switch_page("app_pages/export.py").run()
        assert_clean(at)
        tabs = expected_tabs(demo, a.drafter, a.tree)
        if REGISTRY[a.drafter].dynamic:  # EAGLE: its dynamic and adaptive tabs besides
            assert len(at.tabs) >= len(tabs)
        else:
            assert [t.label for t in at.tabs] == [t.title for t in tabs]
        assert [c.value for c in at.code][:sum(t.text is not None for t in tabs)] == [
            t.text for t in tabs if t.text is not None]
        for tab in at.tabs:  # each: a file, or why there is none
            assert len(tab.code) + len(tab.warning) == 1, tab.label
        assert any(t.text for t in tabs)
        words = "n-gram trie" if a.drafter == "ngram-trie" else REGISTRY[a.drafter].title
        assert any(words in m.value for m in at.markdown), a.drafter
        if a.drafter == "ngram-trie":
            assert not any("Prompt lookup drafts" in m.value for m in at.markdown)
        at.switch_page("app_pages/overview.py").run()


def test_every_drafters_pick_at_every_batch_exports_somewhere(demo):
    """Every drafter the Overview can recommend: its pick at each batch size gives every
    engine tab a file or a one-line reason, and at least one engine a file."""
    from treeopt.workbench.demo_pricing import demo_pricing

    for kind in demo.kinds:
        priced = demo_pricing(demo, kind)
        for point in priced.selection.points:
            if not point.tree.size:
                continue
            tabs = expected_tabs(demo, kind, point.tree)
            assert all((t.text is None) != (t.problem is None) for t in tabs), kind
            assert any(t.text for t in tabs), (kind, point.batch)
            assert all(t.problem is None or "\n" not in t.problem for t in tabs)


def test_export_page_follows_the_tree_chosen_on_the_trees_page(demo):
    at = open_page("trees")
    at.selectbox(key="trees_label").set_value(KINDS[0]).run()
    at.slider(key="trees_size").set_value(20).run()
    at.slider(key="trees_depth").set_value(demo.traces[KINDS[0]].heads).run()
    family = at.radio(key="trees_family").value
    at.switch_page("app_pages/export.py").run()
    assert_clean(at)
    assert [c.value for c in at.code] == expected_exports(
        trees_page_tree(demo.traces[KINDS[0]], size=20, family=family),
        demo.traces[KINDS[0]].heads)


def test_hardware_page_prices_the_demos_pick_on_this_machine_first(demo, view):
    from treeopt.workbench.demo_pricing import demo_pricing

    at = open_page("hardware")
    a = recommended(view)
    assert at.radio(key="hw_where").value.startswith("this demo on this machine")
    assert at.selectbox(key="hw_measured_label").value == a.drafter
    curves, sizes = figures(at)
    selection = demo_pricing(demo, a.drafter).selection
    stars = [t for t in curves["data"] if t["mode"] == "markers"]
    assert [(t["x"][0], t["y"][0]) for t in stars] == [
        (p.best_size, p.tokens_per_s) for p in selection.points]
    assert sizes["data"][0]["x"] == [str(b) for b in selection.batches]  # the measured grid


def test_hardware_page_draws_its_charts():
    at = open_page("hardware")
    at.radio(key="hw_where").set_value("a model on a GPU (roofline)").run()
    figs = figures(at)
    assert figs[0]["layout"]["title"]["text"].startswith("llama-2-7b on h100-sxm, b=1, s=512, q=64")
    assert len(figs) == 3  # the roofline, throughput by tree size, the best size per batch
    at.selectbox(key="hw_model").set_value("vicuna-7b-v1.3").run()  # 2,048 positions
    assert_clean(at)
    assert at.select_slider(key="hw_s").options == ["128", "512", "1024"]


def test_live_page_draws_the_demos_evidence(demo, view):
    at = open_page("live")
    figs = figures(at)
    sweep = demo.sweep(recommended(view).drafter)  # the chosen drafter's sweep first
    dynamic = demo.paths.dynamic_selection(demo.latency.stem if demo.latency else "cpu")
    adaptive = demo.step_profile("eagle") is not None  # the replay: rounds, strategies
    assert at.segmented_control(key="live_section").value == "The live sweep"
    assert len(figs) == (1 if sweep is not None else 0)  # one section at a time
    assert len(figures(live_section(at, "Adaptive speculation"))) == (2 if adaptive else 0)
    assert len(figures(live_section(at, "Dynamic trees"))) == (2 if dynamic.exists() else 0)
    at = open_page("live")
    if sweep is not None:  # measured points: exactly the sweep's speed-ups at batch 1, the
        from treeopt.documents.sweep import (
            Sweep,  # quantity its measured best (the star) is ranked by
        )

        swept = Sweep.load(sweep)
        points = sorted((p for p in swept.points if p.batch == 1 and p.max_depth is None
                         and p.family is None), key=lambda p: p.size)
        measured = figs[0]["data"][0]
        assert measured["name"] == "batch 1 measured"
        assert measured["y"] == [p.speedup for p in points]
        star = next(t for t in figs[0]["data"] if t.get("name") == "batch 1 measured best")
        assert star["y"] == [swept.best(1).speedup] and star["marker"]["symbol"] == "star"


def test_live_page_names_one_node_in_the_singular_and_fits_its_titles(demo):
    from treeopt.documents.sweep import Sweep
    from treeopt.workbench.style import TITLE_CHARS

    at = open_page("live")
    kinds = at.radio(key="live_kind").options
    for kind in kinds:
        at.radio(key="live_kind").set_value(kind).run()
        assert_clean(at)
        said = " ".join([c.value for c in at.caption] + [m.value for m in at.markdown])
        assert not re.search(r"(?<![\d,])1 nodes", said)
        sweep = demo.sweep(kind)
        if sweep is None:
            continue
        for row in Sweep.load(sweep).summary():
            if "selected_size" in row:
                n = row["selected_size"]
                assert f"batch {row['batch']}: {n} node{'' if n == 1 else 's'}, " in said
        for fig in figures(at):
            lines = fig["layout"]["title"]["text"].split("<br>")
            assert all(len(line) <= TITLE_CHARS for line in lines), lines
    for section in ("Adaptive speculation", "Dynamic trees"):
        for fig in figures(live_section(at, section)):
            lines = fig["layout"]["title"]["text"].split("<br>")
            assert all(len(line) <= TITLE_CHARS for line in lines), lines


def test_live_page_says_which_picks_its_sweep_lacks(demo):
    """The shipped demo's Medusa sweep predates the per-step greedy trees select now picks at
    batch 1, 2 and 4: the Live page names them under the figure; Hydra's sweep holds every
    pick, and its page says nothing of the kind."""
    at = open_page("live")
    at.radio(key="live_kind").set_value("medusa").run()
    said = [c.value for c in at.caption if c.value.startswith("Not among these points")]
    assert said == ["Not among these points: the demo's pick at batch 1 (6 nodes, per-step "
                    "greedy); batch 2 (3 nodes, per-step greedy); batch 4 (3 nodes, per-step "
                    "greedy): the sweep was measured before select picked so (◇ is its pick "
                    "then); `treeopt demo build --redo sweep` measures it anew, the picks with "
                    "it."]
    at.radio(key="live_kind").set_value("hydra").run()
    assert not any(c.value.startswith("Not among these points") for c in at.caption)


def test_live_page_sets_select_s_pick_beside_the_dynamic_documents_static_tree(demo):
    """EAGLE at batch 1: the dynamic document prices its own static tree (its step profile,
    its E[L]); the Drafters page prices select's pick. The Live table shows both, labelled,
    and the pick's figure is the Drafters page's bar."""
    from treeopt.workbench.demo_pricing import demo_pricing
    from treeopt.workbench.numbers import nodes_text, speedup_text

    path = demo.paths.dynamic_selection(demo.latency.stem if demo.latency else "cpu")
    priced = demo_pricing(demo, "eagle")
    if not path.exists() or priced is None:
        pytest.skip("the demo has no dynamic selection of its EAGLE drafter")
    at = live_section(open_page("live"), "Dynamic trees")
    table = at.table[-1].value
    doc = json.loads(path.read_text())
    context = sorted({p["context"] for p in doc["points"]})[0]
    for batch, shown in zip(table["batch"].tolist(), table["select's pick (Drafters page)"],
                            strict=True):
        pick = priced.selection.point(int(batch), context)
        assert shown == f"{nodes_text(pick.tree.size)}, {speedup_text(pick.speedup)}"
    drafters = figures(open_page("drafters"))[2]  # the best tree's speed-up per drafter
    bar = next(t for t in drafters["data"] if t["name"] == "eagle")
    assert speedup_text(bar["y"][0]) == table["select's pick (Drafters page)"][0].split(", ")[1]
    assert any("Select's pick, the static tree the Drafters page" in c.value for c in at.caption)


def test_verify_page_live_run_is_lossless_and_reports_figures(demo, view):
    at = open_page("verify")
    assert not at.metric  # nothing runs before the button
    assert at.selectbox(key="verify_kind").value == recommended(view).drafter
    assert at.slider(key="verify_count").value == 4  # several held-out prompts by default
    at.slider(key="verify_tokens").set_value(32)  # the default 128 checks nothing more, 4× longer
    at.button(key="verify_run").click().run()
    assert_clean(at)
    assert [s.value for s in at.success] == [
        "Lossless: every prompt's output equals the model's own greedy `generate` and "
        "treeopt's plain greedy decoding token for token."]
    shown = metrics(at)
    # the held-out trace walked over what each prompt decoded is exact: the prediction is
    # the measurement, to the last digit shown
    assert shown["Predicted accepted length"] == shown["Measured mean accepted length"]
    assert float(shown["Measured mean accepted length"]) >= 1.0
    assert not at.info  # no single-prompt note on a run of held-out prompts
    for label in ("Tree decoding", "Autoregressive"):
        assert shown[label].endswith(" tokens/s") and float(shown[label].split()[0]) > 0
    assert len(figures(at)) == 2  # accepted-length histogram, time split
    html = at.main.get("html")  # the sidebar holds the Plotly preload (app_pages/preload.py)
    assert len(html) == 1 and 'title="step 0"' in html[0].proto.body


def test_verify_page_decodes_a_drafted_pick_as_drafted(demo, monkeypatch):
    """A choice of a lookup drafter's chain verified as drafted (select's pick where its trace
    records drafted lengths) is decoded so on Verify: steps cut to the draft, still lossless."""
    from treeopt.model.tree import Tree
    from treeopt.workbench import live
    from treeopt.workbench.trees import PICKED, Choice, TreeSettings

    calls = []
    real = live.live_run
    monkeypatch.setattr(live, "live_run",
                        lambda *a, **kw: calls.append(kw["drafted"]) or real(*a, **kw))
    at = open_page("verify")
    at.session_state["choice"] = Choice(
        "prompt-lookup", 1, Tree.chain(4), "prompt-lookup · select's pick on cpu at batch 1 · "
        "4 nodes, depth 4, verified as drafted, 1.50× predicted", PICKED,
        TreeSettings(4, 4, max_rank=1), drafted=True)
    at.run()
    at.selectbox(key="verify_kind").set_value("prompt-lookup")
    at.slider(key="verify_tokens").set_value(32)
    at.button(key="verify_run").click().run()
    assert_clean(at)
    assert calls == [True]
    assert any("verified as drafted" in c.value for c in at.caption)
    assert [s.value for s in at.success] == [
        "Lossless: every prompt's output equals the model's own greedy `generate` and "
        "treeopt's plain greedy decoding token for token."]
    shown = metrics(at)
    assert shown["Predicted accepted length"] == shown["Measured mean accepted length"]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_verify_page_decodes_a_batch_losslessly(demo, dtype):
    at = open_page("verify")
    at.radio(key="verify_dtype").set_value(dtype)
    at.select_slider(key="verify_batch").set_value(2)
    at.slider(key="verify_tokens").set_value(32)
    at.button(key="verify_run").click().run()
    assert_clean(at)
    assert [s.value for s in at.success] == [
        "Lossless: every prompt's output equals the model's own greedy `generate` and "
        "treeopt's plain greedy decoding token for token."]
    assert "batch of 2" in next(m.help for m in at.metric if m.label == "Tree decoding")


def test_export_page_exports_a_selection_files_pick_per_batch():
    import numpy as np

    from treeopt.files import dumps
    from treeopt.model.growth import Growth
    from treeopt.pricing.costs import StepLatency
    from treeopt.pricing.throughput import select

    growth = Growth("empirical", "none", ((0,), (0, 0), (1,)), np.array([1.0, 1.8, 2.4, 2.5]), {})
    ms = {1: [10, 10, 11, 20], 4: [10, 10, 10, 10]}
    latency = StepLatency.from_points([(b, 64, q + 1, row[q] / 1e3) for b, row in ms.items()
                                       for q in range(4)], "hand-made")
    selection = select(growth, latency, batch=[1, 4], context=[64])
    at = open_page("export")
    at.radio(key="export_source").set_value("A selection file").run()
    at.file_uploader(key="export_selection").set_value(
        ("sel.json", dumps(selection.to_json()).encode(), "application/json")).run()
    assert_clean(at)
    assert at.code[0].value == "[[0], [0, 0]]"  # batch 1: the depth-2 chain
    at.selectbox(key="export_batch").set_value(4).run()
    assert_clean(at)
    assert [c.value for c in at.code] == expected_exports(selection.point(4, 64).tree)
    at.file_uploader(key="export_selection").set_value(
        ("growth.json", b'{"format": "treeopt.growth/1"}', "application/json")).run()
    assert not at.exception and len(at.error) == 1
    assert at.error[0].value.startswith("growth.json: not a selection")


def test_export_page_writes_each_engines_ngram_settings_for_a_prompt_lookup_pick():
    import numpy as np

    from treeopt.engines.lookup import FORMS, export_lookup
    from treeopt.files import dumps
    from treeopt.model.growth import Growth
    from treeopt.model.tree import Tree
    from treeopt.pricing.costs import StepLatency
    from treeopt.pricing.throughput import select

    meta = {"trace_meta": {"head_kind": "prompt-lookup", "num_heads": 3, "heads_config": {
        "kind": "prompt-lookup", "num_heads": 3, "min_match": 2, "max_match": 4}}}
    growth = Growth("empirical", "none", ((0,), (0, 0), (0, 0, 0)),
                    np.array([1.0, 1.8, 2.4, 2.6]), {}, meta=meta)
    latency = StepLatency.from_points([(1, 64, q + 1, 0.01) for q in range(4)], "hand-made")
    selection = select(growth, latency, batch=[1], context=[64])
    at = open_page("export")
    at.radio(key="export_source").set_value("A selection file").run()
    at.file_uploader(key="export_selection").set_value(
        ("sel.json", dumps(selection.to_json()).encode(), "application/json")).run()
    assert_clean(at)
    assert [c.value for c in at.code] == [
        export_lookup(Tree.chain(3), f.format, min_n=2, max_n=4).strip() for f in FORMS]
    assert '"method": "ngram"' in at.code[0].value
    assert any("matches down to n = 1" in c.value for c in at.caption)  # HF's note on min n


def test_verify_page_samples_losslessly_with_the_sampled_trace(demo):
    if 0.7 not in demo.temperatures:
        pytest.skip("the demo ships no trace sampled at T = 0.7")
    at = open_page("verify")
    at.radio(key="verify_mode").set_value("sample").run()
    at.slider(key="verify_tokens").set_value(32)
    at.slider(key="verify_count").set_value(1)
    at.button(key="verify_run").click().run()
    assert_clean(at)
    assert [s.value for s in at.success] == [
        "Lossless: the tree's output equals plain sampling at T = 0.7 with seed 0 token for "
        "token."]
    assert float(metrics(at)["Predicted accepted length"]) >= 1.0  # the sampled trace's walk


def test_verify_page_labels_a_single_prompt_run(demo):
    at = open_page("verify")
    at.radio(key="verify_prompts").set_value("one prompt").run()
    at.slider(key="verify_tokens").set_value(16)
    at.button(key="verify_run").click().run()
    assert_clean(at)
    assert metrics(at)["Predicted accepted length"] == "—"
    assert [i.value for i in at.info] == [
        "Single prompt: a tree on its own prompt can show any figure — what it accepts depends "
        "on how much this one text repeats. The held-out prompts are what the other pages "
        "predict for."]


def test_trees_page_grows_for_a_sampling_temperature(demo):
    if 1.0 not in demo.temperatures:
        pytest.skip("the demo ships no trace sampled at T = 1.0")
    at = open_page("trees")
    at.radio(key="trees_temperature").set_value(1.0).run()
    assert_clean(at)
    sampled = demo.sampled_traces(at.selectbox(key="trees_label").value)[1.0][0]
    size = at.slider(key="trees_size").value
    depth = at.slider(key="trees_depth").value
    tree = trees_page_tree(sampled, size=size, max_depth=depth,
                           family=at.radio(key="trees_family").value)
    assert metrics(at)["E[L] of the chosen tree"] == page_accept_length(tree, sampled)
    names = [t["name"] for t in figures(at)[0]["data"]]
    assert any("greedy-grown, at T = 1" in n for n in names)


def test_drafters_page_compares_every_drafter_and_names_the_one_chosen(demo):
    from treeopt.pricing.selection import choose_drafter
    from treeopt.workbench.demo_pricing import demo_pricing

    at = open_page("drafters")
    ell, cost, speed, *by_set = figures(at)
    assert [t["name"] for t in ell["data"]] == list(demo.kinds)
    for trace in ell["data"]:  # per step, as the Trees page and the pricing read E[L]
        growth, walked = demo.growths[trace["name"]], demo.traces[trace["name"]]
        want = growth.evaluate_per_step(walked)
        assert trace["y"] == pytest.approx(list(want if want is not None
                                                else growth.headline_accept_length))
    assert [t["name"] for t in cost["data"]] == [*demo.kinds, "verify step"]
    priced = {k: demo_pricing(demo, k) for k in demo.kinds}
    context = sorted(priced[KINDS[0]].selection.contexts)[0]
    chosen = [c for c in choose_drafter({k: p.selection for k, p in priced.items()})
              if c.context == context]
    bars = {t["name"]: t["y"] for t in speed["data"] if t["type"] == "bar"}
    assert list(bars) == list(demo.kinds)
    for k, p in priced.items():
        assert bars[k] == pytest.approx([p.selection.point(c.batch, context).speedup
                                         for c in chosen])
    stars = [t for t in speed["data"] if t["name"] == "chosen"]  # one per batch size, each
    assert [t["text"] for t in stars] == [[c.drafter] for c in chosen]  # over its drafter's bar
    assert [t.get("offsetgroup") for t in stars] == [
        c.drafter if c.drafter in priced else None for c in chosen]
    assert speed["layout"]["scattermode"] == "group"  # diamonds sit on their own bars too
    prose = demo.manifest.get("prose")
    assert len(by_set) == (1 if prose else 0)  # code against prose, when the demo has the set
    if prose:
        size = str(at.select_slider(key="drafters_prose_size").value)
        code = by_set[0]["data"][0]
        assert code["y"] == pytest.approx([prose[k]["heldout_code_expected_accept_length"][size]
                                           for k in code["x"]])


def priced_setting(topk: int, steps: int, draft_tokens: int, *, batch: int,
                   speedup: float) -> dict:
    """One dynamic setting priced at ``batch`` as the dynamic selection records it (made up:
    the autoregressive rate is 100 tokens/s per sequence)."""
    plain = 100.0 * batch
    return {"topk": topk, "steps": steps, "draft_tokens": draft_tokens, "policy": "sglang",
            "batch": batch, "context": 64, "expected_accept_length": 1.0 + steps * 0.5,
            "stderr": 0.01, "verify_ms": 1.0, "draft_ms": 0.5, "overhead_ms": 0.1,
            "tokens_per_s": speedup * plain, "autoregressive_tokens_per_s": plain,
            "speedup": speedup}


def dynamic_selection_doc() -> dict:
    """A small ``treeopt.dynamic-selection/1`` document: batches 1 and 4, five settings each;
    at batch 1 a tree wins (topk 2, steps 3, 8 tokens), at batch 4 the chain (topk 1, steps 2)."""
    from treeopt.dynamic.recommend import FORMAT
    from treeopt.dynamic.report import engine_settings
    from treeopt.model.dynamic_settings import DynamicSettings

    settings = [(1, 1, 2), (1, 2, 3), (2, 2, 4), (2, 3, 4), (2, 3, 8)]
    speedups = {1: [1.10, 1.20, 1.40, 1.45, 1.50], 4: [1.05, 1.15, 1.00, 0.95, 0.80]}
    static = {1: (7, 1.30), 4: (3, 1.10)}
    points = []
    for batch, ups in speedups.items():
        grid = [priced_setting(*s, batch=batch, speedup=x)
                for s, x in zip(settings, ups, strict=True)]
        best = max(grid, key=lambda p: p["speedup"])
        chain = max((p for p in grid if p["topk"] == 1), key=lambda p: p["speedup"])
        size, up = static[batch]
        points.append({
            "batch": batch, "context": 64, "best": best, "best_chain": chain,
            "chain_gain": best["tokens_per_s"] / chain["tokens_per_s"],
            "static": {"size": size, "tokens": size + 1, "expected_accept_length": 2.0,
                       "tokens_per_s": up * 100.0 * batch, "speedup": up},
            "dynamic_over_static": best["speedup"] / up,
            "engines": engine_settings(DynamicSettings.from_dict(best)), "grid": grid})
    return {"format": FORMAT, "traces": {}, "latency": {"source": "made-up", "device": "cpu"},
            "draft": {"kind": "eagle", "source": "made-up"}, "overhead": {"source": "made-up"},
            "grid": {"topk": [1, 2], "steps": [1, 2, 3], "draft_tokens": [2, 3, 4, 8]},
            "static_growth": {}, "points": points}


def test_dynamic_figures_plot_the_selection_documents_values():
    from treeopt.workbench import plots_dynamic

    doc = dynamic_selection_doc()
    fig = plots_dynamic.static_vs_dynamic(doc)
    assert [(t.name, list(t.x), list(t.y)) for t in fig.data] == [
        ("best static tree", ["1", "4"], [1.30, 1.10]),
        ("best dynamic settings", ["1", "4"], [1.50, 1.15]),
        ("best chain (top-k 1)", ["1", "4"], [1.20, 1.15])]
    assert fig.data[1].hovertext[0].startswith("batch 1: topk 2, steps 3, draft tokens 8, ")
    assert fig.data[0].hovertext[1].startswith("batch 4: static tree of 3 nodes (4 tokens)")
    assert [(s.y0, s.y1, s.line.dash) for s in fig.layout.shapes] == [(1.0, 1.0, "dash")]

    grid = plots_dynamic.dynamic_grid(doc, 1)  # topk 2 at 4 tokens: steps 3 (1.45) beats 2
    assert [(t.name, list(t.x), list(t.y)) for t in grid.data] == [
        ("topk 1", [2, 3], [1.10, 1.20]), ("topk 2", [4, 8], [1.45, 1.50]),
        ("recommended", [8], [1.50])]
    assert grid.data[1].hovertext[0].startswith("topk 2, steps 3, draft tokens 4")
    assert grid.data[2].marker.symbol == "star"
    assert sorted(s.y0 for s in grid.layout.shapes) == [1.0, 1.30]  # autoregressive, static
    at4 = plots_dynamic.dynamic_grid(doc, 4)
    assert (list(at4.data[-1].x), list(at4.data[-1].y)) == ([3], [1.15])
    with pytest.raises(TreeoptError, match="no point at batch 2"):
        plots_dynamic.dynamic_grid(doc, 2)

    assert [(r["batch"], r["topk"], r["steps"], r["draft tokens"], r["predicted speed-up"],
             r["static speed-up here"]) for r in plots_dynamic.recommended_rows(doc)] == [
        (1, 2, 3, 8, "1.50×", "1.30×"), (4, 1, 2, 3, "1.15×", "1.10×")]
    beside = plots_dynamic.recommended_rows(doc, selected={1: (13, 1.7406)})
    assert [r[plots_dynamic.SELECTED] for r in beside] == ["13 nodes, 1.74×", None]


def use_dynamic_selection(monkeypatch, path: Path) -> None:
    """Make the demo's dynamic selection the file at ``path`` (present or not)."""
    from treeopt.demo.layout import DemoPaths

    monkeypatch.setattr(DemoPaths, "dynamic_selection", lambda self, device="cpu": path)


def test_live_page_shows_static_vs_dynamic_per_batch(tmp_path, monkeypatch):
    doc = dynamic_selection_doc()
    path = tmp_path / "selection-cpu.json"
    path.write_text(json.dumps(doc))
    use_dynamic_selection(monkeypatch, path)
    at = live_section(open_page("live"), "Dynamic trees")
    assert "Dynamic trees (EAGLE): static vs dynamic per batch size" in [h.value
                                                                        for h in at.header]
    compare, grid = figures(at)[-2:]
    assert [(t["name"], t["y"]) for t in compare["data"]] == [
        ("best static tree", [1.30, 1.10]), ("best dynamic settings", [1.50, 1.15]),
        ("best chain (top-k 1)", [1.20, 1.15])]
    assert grid["data"][-1]["name"] == "recommended" and grid["data"][-1]["x"] == [8]
    table = at.table[-1].value  # every cell as the page writes it
    assert table["batch"].tolist() == ["1", "4"]
    assert table[["topk", "steps", "draft tokens"]].values.tolist() == [["2", "3", "8"],
                                                                         ["1", "2", "3"]]
    assert table["predicted speed-up"].tolist() == ["1.50×", "1.15×"]  # the app's precision
    assert table["static tree here"].tolist() == ["7 nodes", "3 nodes"]
    assert table["static speed-up here"].tolist() == ["1.30×", "1.10×"]
    engines = doc["points"][0]["engines"]
    assert [c.value for c in at.code] == [e["text"].rstrip("\n") for e in engines.values()]
    assert [w.value for w in at.warning] == [  # a tree: SGLang's page-size condition, and
        "sglang: top-k > 1 drafts a tree: SGLang refuses it with --page-size > 1 unless "
        "--attention-backend flashinfer, and on the trtllm_mha backend",  # 7 nodes > 2 × 3
        "trtllm: max_total_draft_tokens 7 must be in [max_draft_len (3), "
        "dynamic_tree_max_topK × max_draft_len (6)]"]

    at.selectbox(key="live_dyn_batch").set_value(4).run()
    assert_clean(at)
    assert figures(at)[-1]["data"][-1]["x"] == [3]
    engines = doc["points"][1]["engines"]
    assert [c.value for c in at.code] == [e["text"].rstrip("\n") for e in engines.values()]
    assert [w.value for w in at.warning] == [f"{name}: {problem}"
                                             for name, e in engines.items()
                                             for problem in e["problems"]]
    assert at.warning  # the chain: TensorRT-LLM takes the linear EAGLE instead


def test_live_page_without_a_dynamic_selection_says_so(tmp_path, monkeypatch):
    use_dynamic_selection(monkeypatch, tmp_path / "missing.json")
    at = live_section(open_page("live"), "Dynamic trees")
    assert any(i.value.startswith("The demo holds no dynamic selection") for i in at.info)
    assert not at.table


def test_every_page_asks_the_browser_for_plotlys_bundle_the_pinned_streamlit_ships():
    """The Overview draws no Plotly chart (its figure is Vega-Lite, for a fast first view); the
    sidebar's script then imports Streamlit's own Plotly bundle once the tab is idle, so the
    next page's charts find it loaded. The bundle's name is Streamlit's: the pinned version
    must ship exactly one."""
    from app_pages.preload import plotly_bundle, preload_script

    bundle = plotly_bundle()
    assert bundle is not None and bundle.startswith("PlotlyChart.") and bundle.endswith(".js")
    at = open_page()
    assert not at.get("plotly_chart")
    (script,) = [h.proto.body for h in at.sidebar.get("html")]
    assert script == preload_script(bundle)
    assert f'new URL("{bundle}", entry.src)' in script and "import(bundle)" in script


def test_the_sidebar_chooses_among_the_built_demos_and_the_overview_names_the_base():
    from treeopt.workbench.demos import available_demos, base_model_name

    at = open_page()
    chooser = at.sidebar.selectbox(key="demo_chooser")
    demos = available_demos()
    assert chooser.options == [d.label for d in demos] and chooser.index == 0
    assert demos[0].root == default_root()
    from treeopt.files import read_json

    base = base_model_name(read_json(default_root() / "manifest.json"))
    assert any(f"base model: **{base}**" in m.value for m in at.markdown)


def test_available_demos_lists_every_built_demo_beside_the_shipped_one(tmp_path, monkeypatch):
    import json as jsonlib

    from treeopt.workbench.demos import available_demos

    for name, config in (("demo", {}), ("smollm2", {"base_model": "smollm2-135m-instruct"})):
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(jsonlib.dumps({"config": config}))
    (tmp_path / "examples").mkdir()  # no manifest: not a demo
    monkeypatch.setenv("TREEOPT_DEMO", str(tmp_path / "demo"))
    assert [(d.name, d.base_model) for d in available_demos()] == [
        ("demo", "a small model trained for the demo"),
        ("smollm2", "smollm2-135m-instruct (pretrained)")]


def test_verify_says_which_command_fetches_missing_weights(monkeypatch):
    from treeopt.assets.registry import missing_hint
    from treeopt.workbench import demos

    monkeypatch.setattr(demos, "weights_missing",
                        lambda manifest: missing_hint("smollm2-135m-instruct"))
    at = open_page("verify")
    assert [i.value for i in at.info] == [
        f"Decoding needs the base model's weights: {missing_hint('smollm2-135m-instruct')}."]
    assert "treeopt fetch smollm2-135m-instruct" in at.info[0].value
    assert at.button(key="verify_run").disabled


@pytest.mark.parametrize("host, warned", [("amx_bf16", True), ("avx512_bf16", False)])
def test_verify_warns_where_this_cpu_is_of_another_class_than_the_demos_profiles(
        monkeypatch, host, warned):
    """data/smollm2 records the CPU its figures were measured on; a host of another matrix class
    is told that a live speed-up may differ from the prediction, one of the same class is not."""
    from treeopt.demo.layout import demo_root
    from treeopt.files import read_json
    from treeopt.profiling import host as host_cpu

    built = read_json(demo_root("smollm2") / "manifest.json")["environment"]["cpu"]
    here = {"name": "a test CPU", "matmul": host if warned else built["matmul"]}
    monkeypatch.setattr(host_cpu, "cpu_identity", lambda cpuinfo=None: here)
    at = open_page("verify")
    chooser = at.sidebar.selectbox(key="demo_chooser")
    (option,) = [o for o in chooser.options if o.startswith("smollm2")]
    chooser.set_value(option).run(timeout=300)
    assert_clean(at)
    notes = [i.value for i in at.info if "speed figures were measured on a CPU" in i.value]
    assert notes == ([f"This demo's speed figures were measured on a CPU with {built['matmul']} "
                      f"({built['name']}), this one has {host} (a test CPU): a live speed-up "
                      "here may differ from the predicted one (acceptance does not depend on "
                      "the CPU). `treeopt demo build --redo timing` measures them on this host."]
                     if warned else [])


def test_live_on_a_demo_without_eagle_says_so_instead_of_asking_for_its_profile(tmp_path,
                                                                               monkeypatch):
    """A demo of the weightless drafters alone (data/smollm2 without its trained drafters'
    files and EAGLE's dynamic and adaptive records: a demo ships the drafters it holds traces
    of), chosen beside the shipped demo."""
    import shutil

    from treeopt.demo.layout import default_root, demo_root
    from treeopt.files import read_json, write_json

    (tmp_path / "demo").symlink_to(default_root())
    weightless = tmp_path / "weightless"
    shutil.copytree(demo_root("smollm2"), weightless)
    manifest = read_json(weightless / "manifest.json")
    kept = ("prompt-lookup", "ngram-trie")
    for entry in manifest["files"]:
        folder, name = entry["path"].split("/", 1)  # traces/KIND….npz, heads/KIND/…
        if (folder in ("traces", "heads") and not name.startswith(kept)
                or folder in ("dynamic", "adaptive")):
            (weightless / entry["path"]).unlink()
    manifest["files"] = [e for e in manifest["files"] if (weightless / e["path"]).exists()]
    for section in ("dynamic", "adaptive_configs"):
        manifest.pop(section, None)
    write_json(weightless / "manifest.json", manifest)
    monkeypatch.setenv("TREEOPT_DEMO", str(tmp_path / "demo"))
    at = open_page("live")
    chooser = at.sidebar.selectbox(key="demo_chooser")
    (option,) = [o for o in chooser.options if o.startswith("weightless")]
    chooser.set_value(option).run(timeout=300)
    assert_clean(at)
    infos = [i.value for i in live_section(at, "Adaptive speculation").info]
    assert any("ships no eagle drafter, so it has no adaptive controller" in v for v in infos)
    infos = [i.value for i in live_section(at, "Dynamic trees").info]
    assert any("ships no eagle drafter, so it has no dynamic trees" in v for v in infos)


def test_live_page_draws_a_lookup_drafters_chains_swept_as_drafted(tiny_demos, monkeypatch):
    """Where the demo swept a lookup drafter's chains verified as drafted too (the tiny demo
    does), the Live page offers both sweeps and draws the one chosen; a drafter swept once
    offers no choice."""
    from treeopt.demo.layout import DemoPaths
    from treeopt.documents.sweep import Sweep

    monkeypatch.setenv("TREEOPT_DEMO", str(tiny_demos.after))
    paths = DemoPaths(tiny_demos.after)
    at = open_page("live")
    at.radio(key="live_kind").set_value("prompt-lookup").run()
    assert_clean(at)
    for verified, sweep in (("as drafted", paths.drafted_sweep("prompt-lookup")),
                            ("whole", paths.sweep("prompt-lookup"))):
        at.radio(key="live_verified").set_value(verified).run()
        assert_clean(at)
        fig = figures(at)[0]
        assert ("verified as drafted" in fig["layout"]["title"]["text"]) == (
            verified == "as drafted")
        points = sorted((p for p in Sweep.load(sweep).points
                         if p.batch == 1 and p.max_depth is None), key=lambda p: p.size)
        measured = next(t for t in fig["data"] if t.get("name") == "batch 1 measured")
        assert measured["y"] == [p.speedup for p in points]
    at.radio(key="live_kind").set_value("medusa").run()
    assert_clean(at)
    assert "live_verified" not in [r.key for r in at.radio]
