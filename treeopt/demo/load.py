"""Loading a built demo in one call: model, tokenizer, heads, traces, growths and prompts."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from treeopt.demo.layout import DEMO_FORMAT, DemoPaths, base_model_dir, demo_paths
from treeopt.errors import TreeoptError
from treeopt.files import read_tagged_json
from treeopt.model.growth import Growth
from treeopt.model.trace import RankTrace

if TYPE_CHECKING:
    from treeopt.pricing.costs import StepCosts


@dataclass(frozen=True, eq=False)
class Demo:
    """A loaded demo. ``heads``, ``traces``, ``heldout_traces`` and ``growths`` are keyed by
    drafter kind (those the demo ships, :attr:`kinds`); ``prompts`` are the held-out prompt
    texts."""

    paths: DemoPaths
    manifest: dict[str, Any]
    model: Any
    tokenizer: Any
    heads: dict[str, Any]
    traces: dict[str, RankTrace]
    heldout_traces: dict[str, RankTrace]
    growths: dict[str, Growth]
    prompts: list[str]

    @property
    def kinds(self) -> tuple[str, ...]:
        """The drafters the demo ships, in :data:`~treeopt.demo.layout.KINDS` order."""
        return tuple(self.traces)

    @property
    def latency(self) -> Path | None:
        """The verify-step latency table measured where the demo was built, if there is one."""
        found = sorted(f for f in (self.paths.root / "latency").glob("*.json")
                       if not f.name.startswith("step-"))
        return found[0] if found else None

    def step_profile(self, kind: str) -> Path | None:
        """The ``kind`` heads' live step profile, measured on the latency table's device."""
        table = self.latency
        path = self.paths.step_profile(kind, device=table.stem) if table else None
        return path if path is not None and path.exists() else None

    def step_costs(self, kind: str) -> StepCosts | None:
        """The ``kind`` drafter's step costs, its verify step shared with the demo's other
        drafters' profiles (:func:`~treeopt.demo.step_costs.demo_step_costs`); None without a
        step profile."""
        from treeopt.demo.step_costs import demo_step_costs

        table = self.latency
        if table is None or self.step_profile(kind) is None:
            return None
        return demo_step_costs(self.paths, kind, table.stem)

    def profiled_elsewhere(self) -> list[str]:
        """One line per step profile measured on a CPU of another matrix class than this host's
        (:func:`~treeopt.profiling.host.other_cpu`): its predictions may not hold here."""
        from treeopt.documents.step_profile import StepProfile
        from treeopt.profiling.host import other_cpu

        lines = []
        for kind in self.kinds:
            path = self.step_profile(kind)
            if path is not None and (why := other_cpu(StepProfile.load(path).meta.get("cpu"))):
                lines.append(f"warning: {path}: {why}; its predictions may "
                             f"not hold here (treeopt demo build --redo timing measures this host)")
        return lines

    @property
    def temperatures(self) -> tuple[float, ...]:
        """The sampling temperatures the demo ships traces and growths for."""
        wanted = self.manifest.get("config", {}).get("sample_temperatures", ())
        return tuple(float(t) for t in wanted
                     if all(self.paths.trace(k, temperature=t).exists() for k in self.kinds))

    def sampled_traces(self, kind: str) -> dict[float, tuple[RankTrace, RankTrace | None]]:
        """Per temperature, the ``kind`` heads' sampled calibration trace and its held-out twin
        (read from disk on each call)."""
        out = {}
        for t in self.temperatures:
            held = self.paths.trace(kind, heldout=True, temperature=t)
            out[t] = (RankTrace.load(self.paths.trace(kind, temperature=t)),
                      RankTrace.load(held) if held.exists() else None)
        return out

    def live_quality(self, kind: str) -> dict[str, Any]:
        """The build's live check of the ``kind`` drafter's trees, by size: lossless, measured
        and predicted mean accepted length (the heads' stage or the drafters stage recorded it)."""
        drafters = self.manifest.get("drafters", {})
        if kind in drafters:
            return dict(drafters[kind]["quality"])
        return dict(self.manifest.get("quality", {}).get("live", {}).get(kind, {}))

    def sweep(self, kind: str, *, drafted: bool = False) -> Path | None:
        """The live throughput sweep of the ``kind`` heads, on the latency table's device
        (``drafted``: of a lookup drafter's chains verified as drafted); None where the demo has
        none."""
        table = self.latency
        where = self.paths.drafted_sweep if drafted else self.paths.sweep
        path = where(kind, device=table.stem) if table else None
        return path if path is not None and path.exists() else None


def read_manifest(paths: DemoPaths) -> dict[str, Any]:
    """The manifest, checked: format tag, and every listed file present with its size."""
    manifest = read_tagged_json(paths.require().manifest, DEMO_FORMAT)
    for entry in manifest.get("files", []):
        p = paths.root / entry["path"]
        if not p.is_file() or p.stat().st_size != entry["bytes"]:
            raise TreeoptError(f"{paths.root}: {entry['path']} is missing or has changed since "
                               f"the build; rebuild with `treeopt demo build`")
    return manifest


def load(root: str | os.PathLike[str] | None = None, *, device: str = "cpu",
         dtype: str | None = None, with_model: bool = True, threads: int | None = None) -> Demo:
    """The demo at ``root`` (default: the shipped ``data/demo``), loaded; ``dtype``: what the
    model computes in (default: the build's, ``fp32`` for the demo's own model); ``threads``:
    CPU threads for torch (the demo model is tiny: one decodes fastest).

    ``with_model=False`` skips the model, tokenizer and heads (traces and growths only, no
    torch, no weights needed: a demo on a pretrained base loads so before its base is
    fetched); :func:`attach_model` adds them later.
    """
    from treeopt.documents.prompts import read_texts

    paths = demo_paths(root)
    manifest = read_manifest(paths)
    kinds = paths.kinds()
    files = Demo(
        paths=paths, manifest=manifest, model=None, tokenizer=None, heads={},
        traces={kind: RankTrace.load(paths.trace(kind)) for kind in kinds},
        heldout_traces={kind: RankTrace.load(paths.trace(kind, heldout=True)) for kind in kinds},
        growths={kind: Growth.load(paths.growth(kind)) for kind in kinds},
        prompts=read_texts([paths.prompts("heldout")]))
    return attach_model(files, device=device, dtype=dtype, threads=threads) if with_model else files


def attach_model(demo: Demo, *, device: str = "cpu", dtype: str | None = None,
                 threads: int | None = None) -> Demo:
    """``demo`` with its model, tokenizer and every drafter loaded (torch imported here); the
    traces, growths and prompts are ``demo``'s own objects, not read again. A pretrained base
    is loaded from the asset cache; when it is not there, a one-line TreeoptError says which
    command fetches it."""
    from treeopt.decoding.loading import ModelSpec, load_model
    from treeopt.drafters.checkpoints import load_heads_for

    where = base_model_dir(demo.paths, demo.manifest)
    dtype = dtype or demo.manifest.get("config", {}).get("dtype", "fp32")
    model, tokenizer = load_model(ModelSpec(path=str(where), device=device, dtype=dtype,
                                            threads=threads))
    heads = {kind: load_heads_for(model, demo.paths.heads(kind)) for kind in demo.kinds}
    return replace(demo, model=model, tokenizer=tokenizer, heads=heads)
