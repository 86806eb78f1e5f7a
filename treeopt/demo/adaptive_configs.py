"""The demo's tuned adaptive configs, shipped: for each workload the Live page replays
(:data:`~treeopt.adaptive.workload.WORKLOADS`), the SGLang config that ``treeopt adaptive``'s
search finds for the demo's EAGLE drafter over its first :data:`REPLAY_SEQUENCES` held-out
sequences × :data:`REPLAY_POSITIONS` positions, priced by its step profile at the batch sizes
profiled — written when a build finishes, beside the SHA-256 of the held-out trace and the step
profile (:mod:`treeopt.demo.digests`).

The search replays about a thousand configs a workload, 3–6 s on the build host, which the Live
page would otherwise pay on its first view and on every change of workload. With the config
shipped, the page replays the default and the tuned config alone (the same replays, so the same
figures), and searches again only where the shipped one no longer fits: another workload window,
other batch sizes, or an input that changed. Numpy only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from treeopt.adaptive.report import adaptive_report
from treeopt.adaptive.workload import WORKLOADS, replay_workload
from treeopt.demo.digests import inputs_record, inputs_unchanged, remove_stale
from treeopt.demo.layout import DYNAMIC_KIND, DemoPaths
from treeopt.demo.step_costs import demo_step_costs
from treeopt.engines.sglang.adaptive import SGLangConfig
from treeopt.errors import TreeoptError
from treeopt.files import read_tagged_json, write_json
from treeopt.model.trace import RankTrace

FORMAT = "treeopt.demo-adaptive-config/1"
REPLAY_SEQUENCES, REPLAY_POSITIONS = 48, 64  # the held-out share replayed (a quick first view)
REPLAY_BATCHES = (1, 2, 4, 8)  # the batch sizes replayed, where the step profile has them


def config_path(paths: DemoPaths, workload: str, device: str) -> Path:
    """``adaptive/sglang-{workload}-{device}.json`` in the demo."""
    return paths.root / "adaptive" / f"sglang-{workload}-{device}.json"


def config_inputs(paths: DemoPaths, kind: str, device: str) -> dict[str, Path]:
    """The files a tuned config is searched from, by role."""
    return {"heldout_trace": paths.trace(kind, heldout=True),
            "step_profile": paths.step_profile(kind, device),
            **{f"verify_profile {p.stem}": p for p in paths.other_step_profiles(kind, device)}}


def ship_adaptive_configs(paths: DemoPaths, device: str, *,
                          kind: str = DYNAMIC_KIND) -> dict[str, Any]:
    """Search and write the tuned config of every workload (none, and any left from before
    removed, where the demo has no step profile or held-out trace of ``kind``); return what the
    manifest keeps: each workload's file and tuned slots."""
    inputs = config_inputs(paths, kind, device)
    made: dict[str, Any] = {}
    if all(p.is_file() for p in inputs.values()):
        heldout = RankTrace.load(inputs["heldout_trace"])
        costs = demo_step_costs(paths, kind, device)
        for workload in WORKLOADS:
            _, acceptance = replay_workload(heldout, workload, sequences=REPLAY_SEQUENCES,
                                            positions=REPLAY_POSITIONS, source="shipped")
            batches = tuple(b for b in REPLAY_BATCHES
                            if b in costs.verify.batches and b <= acceptance.sequences)
            tuned = adaptive_report(acceptance, costs, batches=batches).tuned
            out = config_path(paths, workload, device)
            write_json(out, {"format": FORMAT, "kind": kind, "workload": workload,
                             "sequences": REPLAY_SEQUENCES, "positions": REPLAY_POSITIONS,
                             "batches": list(batches), "num_steps": tuned.num_steps,
                             "sglang": tuned.to_json(), "inputs": inputs_record(paths, inputs)})
            made[workload] = {"file": paths.inside(out), "sglang": tuned.to_json()}
    remove_stale(paths.root / "adaptive", f"sglang-*-{device}.json",
                 {config_path(paths, w, device) for w in made})
    return made


def shipped_tuned(paths: DemoPaths, kind: str, workload: str, device: str, *, sequences: int,
                  positions: int, batches: tuple[int, ...]) -> SGLangConfig | None:
    """The shipped tuned config of ``workload``, where it was searched for this drafter, window
    and batch sizes from the files the demo holds now; None otherwise (then search)."""
    path = config_path(paths, workload, device)
    if not path.is_file():
        return None
    try:
        doc = read_tagged_json(path, FORMAT)
        fits = (doc.get("kind") == kind and doc.get("sequences") == sequences
                and doc.get("positions") == positions and doc.get("batches") == list(batches))
        if not fits or not inputs_unchanged(paths, doc.get("inputs"),
                                            config_inputs(paths, kind, device)):
            return None
        default = SGLangConfig.default()
        return SGLangConfig.from_json(doc["sglang"], source="tuned", num_steps=doc["num_steps"],
                                      cuda_graph_bs=default.cuda_graph_bs,
                                      overlap=default.overlap)
    except (TreeoptError, KeyError, TypeError):  # not a config this module wrote
        return None


__all__ = ["FORMAT", "REPLAY_BATCHES", "REPLAY_POSITIONS", "REPLAY_SEQUENCES", "config_path",
           "ship_adaptive_configs", "shipped_tuned"]
