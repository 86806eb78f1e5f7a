"""Where each part of a demo directory lives, and the pretrained base a demo reads; pure paths,
importable without torch."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treeopt.assets.registry import ASSETS, asset_dir, fetched, missing_hint
from treeopt.errors import TreeoptError
from treeopt.files import read_json
from treeopt.registry.kinds import KINDS as REGISTRY

DEMO_FORMAT = "treeopt.demo/1"
# the drafters a demo ships, in the registry's order: the kinds a stage of the build makes
# (``DrafterKind.demo_stage``; a demo built before a kind was added lacks it: Demo.kinds)
KINDS: tuple[str, ...] = tuple(k.name for k in REGISTRY.values() if k.demo_stage)
# the drafter whose dynamic trees a demo measures: the first of them that drafts dynamic trees
DYNAMIC_KIND: str = next(k for k in KINDS if REGISTRY[k].dynamic)
ENV_VAR = "TREEOPT_DEMO"
# the named demos the docs describe that are built on request: name → the build's own flags
BUILDS = {"smollm2": "--base-model smollm2-135m-instruct "
                      "--kinds prompt-lookup,ngram-trie,suffix,medusa,hydra,eagle"}


def default_root() -> Path:
    """``$TREEOPT_DEMO`` if set, else ``data/demo`` of the repository treeopt runs from."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "data" / "demo"


@dataclass(frozen=True)
class DemoPaths:
    """The files of a demo directory (see docs/demo.md).

    >>> p = DemoPaths(Path("data/demo"))
    >>> p.heads("hydra").as_posix(), p.trace("medusa").as_posix(), p.growth("hydra").as_posix()
    ('data/demo/heads/hydra', 'data/demo/traces/medusa.npz', 'data/demo/growth/hydra.json')
    >>> p.trace("hydra", temperature=0.7).name, p.growth("hydra", temperature=1.0).name
    ('hydra-t0.7.npz', 'hydra-t1.0.json')
    >>> p.prose_trace("prompt-lookup").name, p.prose_growth("eagle").name, p.prompts("prose").name
    ('prompt-lookup-prose.npz', 'eagle-prose.json', 'prose.jsonl')
    """

    root: Path

    def inside(self, path: Path) -> str:
        """``path``'s name inside the demo, as its records name files (a build's work directory
        is not where the demo is read).

        >>> DemoPaths(Path("d")).inside(Path("d/latency/step-eagle-cpu.json"))
        'latency/step-eagle-cpu.json'
        """
        return path.relative_to(self.root).as_posix()

    @property
    def manifest(self) -> Path:
        return self.root / "manifest.json"

    @property
    def model(self) -> Path:
        """The demo's own base model directory (config, fp16 weights, tokenizer); a demo on a
        pretrained base has none (:func:`base_model_dir`)."""
        return self.root / "model"

    def heads(self, kind: str) -> Path:
        """The drafter's directory (prompt lookup: its settings in ``drafter.json``)."""
        return self.root / "heads" / _kind(kind)

    def kinds(self) -> tuple[str, ...]:
        """The drafters this demo ships: those of :data:`KINDS` with a calibration trace."""
        return tuple(k for k in KINDS if self.trace(k).is_file())

    def trace(self, kind: str, *, heldout: bool = False, temperature: float = 0.0) -> Path:
        """The calibration rank trace of ``kind`` (or the one on the held-out prompts); with a
        ``temperature``, the trace of continuations sampled at it."""
        return self.root / "traces" / (f"{_kind(kind)}{_temperature(temperature)}"
                                       f"{'-heldout' if heldout else ''}.npz")

    def growth(self, kind: str, *, method: str = "empirical", temperature: float = 0.0) -> Path:
        suffix = "" if method == "empirical" else f"-{method}"
        return self.root / "growth" / f"{_kind(kind)}{_temperature(temperature)}{suffix}.json"

    def prose_trace(self, kind: str) -> Path:
        """The greedy rank trace of ``kind`` on the prose prompts (``prompts("prose")``)."""
        return self.root / "traces" / f"{_kind(kind)}-prose.npz"

    def prose_growth(self, kind: str) -> Path:
        """The empirical growth of ``kind`` from its prose trace."""
        return self.root / "growth" / f"{_kind(kind)}-prose.json"

    def prompts(self, part: str = "heldout") -> Path:
        """Prompts JSONL: ``heldout`` (verification), ``calibration``, or ``prose`` (docstrings
        and comments of the same files: natural language, where repeats are rare)."""
        if part not in ("heldout", "calibration", "prose"):
            raise TreeoptError(f"demo prompts {part!r}: expected heldout, calibration or prose")
        return self.root / "prompts" / f"{part}.jsonl"

    def latency(self, device: str = "cpu") -> Path:
        """The verify-step latency table measured on ``device``."""
        return self.root / "latency" / f"{device}.json"

    def dtype_probe(self, device: str = "cpu") -> Path:
        """``--dtype auto``'s measurement of the base model's step in each dtype on ``device``
        (:mod:`treeopt.profiling.dtype_probe`)."""
        return self.root / "latency" / f"dtype-{device}.json"

    def step_profile(self, kind: str, device: str = "cpu") -> Path:
        """The live step of the ``kind`` heads' trees profiled phase by phase on ``device``."""
        return self.root / "latency" / f"step-{_kind(kind)}-{device}.json"

    def other_step_profiles(self, kind: str, device: str = "cpu") -> list[Path]:
        """The step profiles on ``device`` of the demo's drafters other than ``kind``, which
        ``kind``'s verify step is priced from beside its own (:mod:`treeopt.demo.step_costs`;
        their dynamic profiles aside: they time another loop)."""
        return [p for k in self.kinds() if k != kind
                if (p := self.step_profile(k, device)).is_file()]

    def sweep(self, kind: str, device: str = "cpu") -> Path:
        """The live throughput sweep of the ``kind`` heads' trees on ``device``."""
        return self.root / "sweep" / f"{_kind(kind)}-{device}.json"

    def drafted_sweep(self, kind: str, device: str = "cpu") -> Path:
        """The live sweep of the ``kind`` lookup drafter's chains verified only as far as they
        were drafted (``tune --drafted-only``), as its selection's picks decode, on ``device``."""
        return self.root / "sweep" / f"{_kind(kind)}-drafted-{device}.json"

    def alongside_profile(self, kind: str, device: str = "cpu") -> Path:
        """The step profile taken alongside the ``kind`` drafter's sweep on ``device``: each
        point's tree profiled right before the point (beside the sweep, not among the step
        profiles ``select`` prices with)."""
        return self.root / "sweep" / f"{_kind(kind)}-alongside-{device}.json"

    def selection(self, kind: str, device: str = "cpu") -> Path:
        """``treeopt select --demo KIND``'s answer on ``device``, shipped
        (:mod:`treeopt.demo.selections`).

        >>> DemoPaths(Path("d")).selection("eagle").as_posix()
        'd/selections/eagle-cpu.json'
        """
        return self.root / "selections" / f"{_kind(kind)}-{device}.json"

    def dynamic_trace(self, part: str, topk: int) -> Path:
        """The EAGLE drafter's dynamic trace of ``topk`` on ``part`` (calibration, heldout).

        >>> DemoPaths(Path("d")).dynamic_trace("heldout", 2).as_posix()
        'd/dynamic/eagle-heldout-topk2.npz'
        """
        return self.root / "dynamic" / f"{DYNAMIC_KIND}-{part}-topk{topk}.npz"

    def dynamic_step_profile(self, device: str = "cpu") -> Path:
        """The EAGLE drafter's dynamic steps profiled phase by phase on ``device``.

        >>> DemoPaths(Path("d")).dynamic_step_profile("cuda").name
        'step-eagle-dynamic-cuda.json'
        """
        return self.root / "latency" / f"step-{DYNAMIC_KIND}-dynamic-{device}.json"

    def dynamic_selection(self, device: str = "cpu") -> Path:
        """``select --dynamic``'s document for the EAGLE drafter on ``device``."""
        return self.root / "dynamic" / f"selection-{device}.json"

    def require(self) -> DemoPaths:
        """Raise a TreeoptError unless the directory holds a built demo."""
        if not self.manifest.exists():
            raise TreeoptError(f"{self.root}: no demo here (no manifest.json); build one with "
                               f"`treeopt demo build --out {self.root}`")
        return self


def demo_paths(root: str | os.PathLike[str] | None = None) -> DemoPaths:
    """Paths of the demo at ``root`` (default: the shipped one), checked to exist."""
    return DemoPaths(Path(root) if root is not None else default_root()).require()


def named_demo(name: str) -> Path:
    """The demo directory called ``name``: ``data/<name>`` beside the default demo (beside
    ``$TREEOPT_DEMO`` when set), checked to hold a built demo; the error lists the demos there
    and, for a named demo not built yet, the command that builds it."""
    root = default_root().parent / name
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) and (root / "manifest.json").is_file():
        return root
    built = sorted(d.name for d in root.parent.glob("*") if (d / "manifest.json").is_file())
    how = (f"; build it with `treeopt demo build {BUILDS[name]} --out {root}`"
           if name in BUILDS else "")
    raise TreeoptError(f"no demo {name!r} in {root.parent}{how}; the demos there: "
                       f"{', '.join(built) or 'none'}")


def demo_root(text: str | os.PathLike[str] | None) -> Path:
    """The demo that ``text`` names: a demo directory (one holding ``manifest.json``), else a
    demo in ``data/`` (:func:`named_demo`: ``smollm2``); None → the shipped demo. The
    benchmarks' ``--demo`` takes it."""
    if text is None:
        return default_root()
    path = Path(text)
    return path if (path / "manifest.json").is_file() else named_demo(str(text))


def base_dir(name: str, *, required: bool = True) -> Path:
    """The model directory of the pretrained base ``name``: an asset's directory in the asset
    cache, or ``name`` itself, a local Hugging Face model directory. When it is missing a
    TreeoptError says in one line how to get it — unless not ``required``: then the directory
    it would be in."""
    if name in ASSETS:
        found = fetched(name)
        if found is None and required:
            raise TreeoptError(missing_hint(name))
        return found or asset_dir(name)
    path = Path(name)
    if required and not (path / "config.json").is_file():
        models = ", ".join(n for n, a in ASSETS.items() if a.kind == "model")
        raise TreeoptError(f"base model {name!r}: no Hugging Face model directory there (no "
                           f"config.json) and no such asset; the model assets are {models}")
    return path


def base_model_dir(paths: DemoPaths, manifest: dict[str, Any] | None = None, *,
                   required: bool = True) -> Path:
    """The base model directory of the demo at ``paths``: its own ``model/``, or the pretrained
    base its manifest names, where it was fetched — a one-line TreeoptError saying which
    command fetches it when it is not there, unless not ``required`` (then where it would be)."""
    doc = manifest if manifest is not None else read_json(paths.require().manifest)
    base = doc.get("config", {}).get("base_model")
    return paths.model if base is None else base_dir(base, required=required)


def demo_dtype(manifest: dict[str, Any]) -> str:
    """What the demo of ``manifest`` ran its base model in (its build's ``dtype``; fp32 for a
    demo built before the setting existed): the dtype its traces, profiles and sweeps describe.

    >>> demo_dtype({"config": {"dtype": "bf16"}}), demo_dtype({"format": "treeopt.demo/1"})
    ('bf16', 'fp32')
    """
    return manifest.get("config", {}).get("dtype") or "fp32"


def _temperature(t: float) -> str:
    """The file-name tag of a sampling temperature (greedy: none)."""
    return "" if t == 0 else f"-t{float(t):g}" if float(t) != int(t) else f"-t{float(t):.1f}"


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise TreeoptError(f"demo head kind {kind!r} is unknown; expected one of {KINDS}")
    return kind


def demo_defaults(kind: str | None = None, root: str | os.PathLike[str] | None = None, *,
                  model: bool = True, device: str | None = None) -> dict[str, str | list[str]]:
    """What ``--demo [DEMO:]KIND`` stands for in other sub-commands: flag name → path.

    A sub-command fills each flag the user left unset: ``--model`` (the demo's base model: its
    own, or the pretrained base where it was fetched; left out when not ``model``) and with it
    ``--dtype`` (``dtype``: what the demo ran the model in, its manifest's — bf16 on SmolLM2 —
    or fp32 where a manifest records none),
    ``--heads``, ``--trace``, ``--held-out`` (the held-out trace), ``--growth``, ``--prompts``,
    ``--step-profile`` (the drafter's live step, profiled where the demo was built, or on
    ``device``'s kind — ``cuda`` for ``cuda:1`` — where the demo ships that) — or, without
    one, ``--latency`` (the verify-step table), with ``--shared-verify`` (the other drafters'
    step profiles on that device, which share the base model's verify step) — and, for an
    EAGLE drafter,
    ``--speculative-model`` (its directory, what an engine loads). ``kind`` defaults to hydra,
    or to the first drafter a demo without Hydra heads ships.
    """
    from treeopt.registry.kinds import engine_draft

    p = demo_paths(root)
    shipped = p.kinds()
    if kind is None:
        kind = "hydra" if not shipped or "hydra" in shipped else shipped[0]
    if shipped and kind not in shipped:
        raise TreeoptError(f"the demo in {p.root} ships no {kind} drafter (it "
                           f"was built before treeopt added it; `treeopt demo build` adds it); "
                           f"it ships {', '.join(shipped)}")
    if model:
        manifest = read_json(p.require().manifest)
        doc: dict[str, str | list[str]] = {"model": str(base_model_dir(p, manifest)),
                                           "dtype": demo_dtype(manifest)}
    else:
        doc = {}
    doc.update({"heads": str(p.heads(kind)), "trace": str(p.trace(kind)),
                "held_out": str(p.trace(kind, heldout=True)), "growth": str(p.growth(kind)),
                "prompts": str(p.prompts("heldout"))})
    steps = sorted((p.root / "latency").glob(f"step-{_kind(kind)}-*.json"))
    tables = sorted(f for f in (p.root / "latency").glob("*.json")
                    if not f.name.startswith("step-"))
    if engine_draft(kind) != "medusa":  # an EAGLE drafter: the checkpoint engines load
        doc["speculative_model"] = str(p.heads(kind))
    profile = p.step_profile(kind, device.split(":")[0]) if device else None
    if profile is None or not profile.is_file():
        profile = steps[0] if steps else None
    if profile is not None:
        doc["step_profile"] = str(profile)
        # the other drafters' on its device (the last word of step-KIND-DEVICE.json)
        others = p.other_step_profiles(kind, profile.stem.rsplit("-", 1)[1])
        if others:
            doc["shared_verify"] = [str(f) for f in others]
    elif tables:
        doc["latency"] = str(tables[0])
    return doc
