"""The demo's shipped selections (:mod:`treeopt.demo.selections`): what ``select --demo KIND``
computes, read back while the files it was priced from are unchanged, and priced afresh once one
changes."""

from __future__ import annotations

import json

import pytest
from conftest import demo_copy, differences

from treeopt.demo import load
from treeopt.demo.layout import DemoPaths, default_root
from treeopt.demo.selections import (
    PRICING,
    priced_selection,
    selection_inputs,
    shipped_selection,
)
from treeopt.pricing.drafted import DRAFTED_CHAIN
from treeopt.pricing.sources import price
from treeopt.workbench.demo_pricing import demo_pricing, unswept_picks


def test_the_shipped_demo_ships_what_select_demo_computes_for_every_drafter(demo_cli):
    paths = DemoPaths(default_root())
    for kind, computed in demo_cli["selections"].items():
        shipped = json.loads(paths.selection(kind).read_text())
        assert not differences(shipped["points"], computed["points"]), kind
        assert not differences(shipped.get("chains"), computed.get("chains")), kind
        assert shipped_selection(paths, kind, "cpu") is not None, f"{kind}: inputs changed"


def test_the_real_models_demo_ships_what_pricing_computes_now_drafted_chains_included():
    """SmolLM2's shipped selections (no weights needed) are read back, as priced now, and its
    lookup drafters' batch-1 picks are chains verified as drafted."""
    from treeopt.demo.layout import demo_root

    demo = load(demo_root("smollm2"), with_model=False)
    for kind in demo.kinds:
        shipped = shipped_selection(demo.paths, kind, "cpu")
        assert shipped is not None, f"{kind}: priced otherwise, or an input changed"
        priced = priced_selection(demo.growths[kind], demo.traces[kind],
                                  demo.step_costs(kind))
        assert not differences(shipped.to_json()["points"], priced.to_json()["points"]), kind
        drafted = demo.traces[kind].drafted is not None
        assert (shipped.point(1, shipped.contexts[0]).family == DRAFTED_CHAIN) == drafted, kind


def unmeasured_picks(root) -> list[str]:
    """Where the demo at ``root`` ships a pick (its selection's tree per batch size) that its
    sweep does not mark as select's pick, measured: the app would show a neighbour's speed-up.
    A chain verified as drafted is looked for in the drafted sweep."""
    demo = load(root, with_model=False)
    return [f"{kind} batch {p.batch}: the {p.tree.size}-node {p.family} tree"
            for kind in demo.kinds if (pricing := demo_pricing(demo, kind)) is not None
            and pricing.sweep is not None
            for drafted in (False, True) for p in unswept_picks(pricing, drafted=drafted)]


def test_the_tiny_demos_unswept_picks_are_the_per_step_trees_its_old_sweeps_lack():
    """The shipped tiny demo's sweeps predate per-step greedy points and steps that count the
    tokens kept: the picks they lack are said, every one (the Live page says so too)."""
    assert unmeasured_picks(default_root()) == [
        "medusa batch 1: the 6-node per-step greedy tree",
        "medusa batch 2: the 3-node per-step greedy tree",
        "medusa batch 4: the 3-node per-step greedy tree",
        "eagle batch 1: the 13-node per-step greedy tree",
        "eagle batch 2: the 6-node per-step greedy tree",
        "prompt-lookup batch 1: the 13-node growth order tree",
        "prompt-lookup batch 2: the 7-node growth order tree"]


def test_every_pick_the_real_models_demo_ships_is_measured_in_its_drafters_sweep():
    """Every pick SmolLM2's selections make, per drafter and batch size, is the point its sweep
    marks as select's, measured (chains verified as drafted included). (The tiny demo's sweeps
    were measured by an earlier treeopt, whose steps counted otherwise: the build leaves them
    as they are, and its picks of per-step greedy trees are unmeasured there.)"""
    from treeopt.demo.layout import demo_root

    assert unmeasured_picks(demo_root("smollm2")) == []


def test_a_build_measures_the_picks_it_ships(tiny, tiny_demos):
    """A build's last measuring step (:mod:`treeopt.demo.stage_picks`) sweeps again the drafters
    swept before every drafter was profiled: each pick the build ships is measured and marked,
    the manifest's sweep records are the new sweeps', and nothing is left stale: the resumed
    build after it sweeps nothing again."""
    assert unmeasured_picks(tiny) == []
    first = json.loads((tiny_demos.before / "manifest.json").read_text())
    swept = first["picks"]["swept_again"]
    assert swept and set(swept) <= set(first["config"]["kinds"])  # the heads, swept early
    for kind, why in swept.items():
        assert why and all(isinstance(line, str) for line in why)
        record = (first["sweep"][kind] if kind in first["sweep"]
                  else first["drafters"][kind]["sweep"])
        shipped = json.loads((tiny_demos.before / "sweep" / record["file"]).read_text())
        assert record["summary"] == shipped["summary"]
    assert json.loads((tiny / "manifest.json").read_text())["picks"]["swept_again"] == {}


@pytest.fixture(scope="module")
def tiny(tiny_demos, tmp_path_factory):
    return demo_copy(tiny_demos.after, tmp_path_factory.mktemp("selections"))[0]


def test_a_build_ships_every_drafter_with_a_step_profile_priced_as_here(tiny):
    demo = load(tiny, with_model=False)
    profiled = [k for k in demo.kinds if demo.step_profile(k) is not None]
    assert profiled
    manifest = json.loads((tiny / "manifest.json").read_text())
    assert sorted(k for k in manifest["selections"]) == sorted(profiled)
    for kind in profiled:
        shipped = shipped_selection(demo.paths, kind, "cpu")
        assert shipped == priced_selection(demo.growths[kind], demo.traces[kind],
                                           demo.step_costs(kind)), kind


def test_a_lookup_drafters_shipped_selection_prices_its_chains_as_drafted_too(tiny):
    demo = load(tiny, with_model=False)
    lookup = [k for k in demo.kinds if demo.traces[k].drafted is not None]
    assert lookup, "the tiny demo's lookup drafters record how far they drafted"
    for kind in demo.kinds:
        if demo.step_profile(kind) is None:
            continue
        shipped = shipped_selection(demo.paths, kind, "cpu")
        doc = json.loads(demo.paths.selection(kind).read_text())
        drafted = kind in lookup
        assert bool(shipped.growth.get("drafted_only")) == drafted, kind
        assert doc["command"] == f"treeopt select --demo {kind}", kind  # its default
        if drafted:  # each point is the faster of the whole trees and the drafted chains
            costs = demo.step_costs(kind)
            whole = price(demo.growths[kind], costs.verify, draft=costs.draft,
                          overhead=costs.overhead, trace=demo.traces[kind])
            for p, w in zip(shipped.points, whole.points, strict=True):
                assert p.tokens_per_s >= w.tokens_per_s * (1 - 1e-12), (kind, p.batch)
                assert (p.family == DRAFTED_CHAIN) == (p.tokens_per_s > w.tokens_per_s * (
                    1 + 1e-12)), (kind, p.batch)


def test_a_selection_shipped_priced_otherwise_is_priced_afresh(tiny, tmp_path):
    root = demo_copy(tiny, tmp_path)[0]
    paths = DemoPaths(root)
    kind = next(k for k in paths.kinds() if paths.step_profile(k).is_file())
    doc = json.loads(paths.selection(kind).read_text())
    assert doc["pricing"] == PRICING
    paths.selection(kind).write_text(json.dumps({**doc, "pricing": "an earlier version's"}))
    assert shipped_selection(paths, kind, "cpu") is None


def test_a_changed_input_is_priced_afresh_and_the_answer_is_the_same(tiny, tmp_path):
    root = demo_copy(tiny, tmp_path)[0]
    paths = DemoPaths(root)
    kind = next(k for k in paths.kinds() if paths.step_profile(k).is_file())
    demo = load(root, with_model=False)  # (loading checks the files against the manifest)
    before = demo_pricing(demo, kind).selection
    for role, path in selection_inputs(paths, kind, "cpu").items():
        if role == "trace":
            continue
        original = path.read_bytes()
        path.write_text(json.dumps(json.loads(original)))  # the same document, other bytes
        assert shipped_selection(paths, kind, "cpu") is None, role
        assert demo_pricing(demo, kind).selection == before, role
        path.write_bytes(original)
        assert shipped_selection(paths, kind, "cpu") == before


def test_a_selection_file_that_is_not_a_shipped_one_is_priced_afresh(tiny, tmp_path):
    root = demo_copy(tiny, tmp_path)[0]
    paths = DemoPaths(root)
    kind = next(k for k in paths.kinds() if paths.step_profile(k).is_file())
    doc = json.loads(paths.selection(kind).read_text())
    del doc["inputs"]
    paths.selection(kind).write_text(json.dumps(doc))
    assert shipped_selection(paths, kind, "cpu") is None
    paths.selection(kind).write_text("{")
    assert shipped_selection(paths, kind, "cpu") is None


# ----- the tuned adaptive configs the Live page replays -----------------------------------------
def test_a_build_ships_the_tuned_config_a_search_finds_now_for_every_workload(tiny):
    from treeopt.adaptive.workload import WORKLOADS
    from treeopt.workbench import adaptive

    demo = load(tiny, with_model=False)
    manifest = json.loads((tiny / "manifest.json").read_text())
    assert sorted(manifest["adaptive_configs"]) == sorted(WORKLOADS)
    for workload in WORKLOADS:
        shipped = adaptive.demo_adaptive(demo, workload=workload)
        assert shipped.report.tuned.label == "tuned"  # read back, not searched
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(adaptive, "shipped_tuned", lambda *a, **k: None)
            searched = adaptive.demo_adaptive(demo, workload=workload)
        assert shipped.report.tuned == searched.report.tuned
        assert [s.tuned.tokens_per_s for s in shipped.report.sides] == [
            s.tuned.tokens_per_s for s in searched.report.sides]


def test_a_tuned_config_for_another_window_or_changed_inputs_is_searched_again(tiny, tmp_path):
    from treeopt.demo.adaptive_configs import (
        REPLAY_BATCHES,
        REPLAY_POSITIONS,
        REPLAY_SEQUENCES,
        config_path,
        shipped_tuned,
    )

    root = demo_copy(tiny, tmp_path)[0]
    paths = DemoPaths(root)
    batches = tuple(json.loads(config_path(paths, "steady", "cpu").read_text())["batches"])
    assert set(batches) <= set(REPLAY_BATCHES)
    window = dict(sequences=REPLAY_SEQUENCES, positions=REPLAY_POSITIONS, batches=batches)
    assert shipped_tuned(paths, "eagle", "steady", "cpu", **window) is not None
    assert shipped_tuned(paths, "eagle", "steady", "cpu", **{**window, "positions": 16}) is None
    assert shipped_tuned(paths, "hydra", "steady", "cpu", **window) is None
    profile = paths.step_profile("eagle")
    profile.write_text(json.dumps(json.loads(profile.read_text())))
    assert shipped_tuned(paths, "eagle", "steady", "cpu", **window) is None
