"""The demos the app can open: the shipped one (``data/demo``, or ``$TREEOPT_DEMO``) and every
other built demo beside it in ``data/`` (``data/smollm2``: the real model's), each with the base
model it was built on and, for a pretrained base whose weights are not fetched here, the one
command that fetches them. Pure paths and manifests, no torch."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treeopt.assets.registry import ASSETS, fetched, missing_hint
from treeopt.demo.layout import default_root
from treeopt.files import read_json
from treeopt.profiling.host import other_cpu


@dataclass(frozen=True)
class DemoEntry:
    """A built demo the app can open: its name (its directory's), where it is, and its base."""

    name: str
    root: Path
    base_model: str  # as the Overview names it

    @property
    def label(self) -> str:
        """The chooser's text: the name and the base, short enough for the sidebar.

        >>> DemoEntry("smollm2", Path("data/smollm2"), "smollm2-135m-instruct (pretrained)").label
        'smollm2 · smollm2-135m-instruct'
        >>> DemoEntry("demo", Path("data/demo"), "a 3.9M-parameter model trained for the demo "
        ...           "(16 layers, hidden size 128)").label
        'demo · a 3.9M-parameter model'
        """
        return f"{self.name} · {self.base_model.split(' (')[0].split(' trained')[0]}"


def build_host(manifest: Mapping[str, Any]) -> str:
    """The machine a demo's figures were measured on, as its manifest records it: the CPU and
    its matrix instructions (a CPU step profile holds on CPUs of that class), and the threads.

    >>> build_host({"environment": {"threads": 1, "cpu": {"name": "AMD EPYC",
    ...                                                   "matmul": "avx512_bf16"}}})
    'the machine that built it (AMD EPYC, avx512_bf16; 1 thread)'
    >>> build_host({"environment": {"threads": 2}})
    'the machine that built it'
    """
    env = manifest.get("environment", {})
    cpu, threads = env.get("cpu"), env.get("threads")
    if not isinstance(cpu, dict) or not cpu.get("name"):
        return "the machine that built it"
    what = ", ".join(str(v) for v in (cpu.get("name"), cpu.get("matmul")) if v)
    if isinstance(threads, int):
        what += f"; {threads} thread{'s' if threads != 1 else ''}"
    return f"the machine that built it ({what})"


def timed_elsewhere(manifest: Mapping[str, Any], here: dict[str, Any] | None = None,
                    ) -> str | None:
    """One line where the demo's speed figures were measured on a CPU of another matrix class
    than this host's (``here``, default this one): the speed-ups it predicts may not hold for a
    live run here, though its acceptance does; None where the class is the same or not known.

    >>> xeon = {"environment": {"cpu": {"name": "Intel Xeon", "matmul": "amx_bf16"}}}
    >>> timed_elsewhere(xeon, {"name": "AMD EPYC", "matmul": "avx512_bf16"})[:62]
    "This demo's speed figures were measured on a CPU with amx_bf16"
    >>> timed_elsewhere(xeon, {"name": "another Xeon", "matmul": "amx_bf16"}) is None
    True
    """
    why = other_cpu(manifest.get("environment", {}).get("cpu"), here)
    if why is None:
        return None
    return (f"This demo's speed figures were {why}: a live speed-up here may differ from the "
            "predicted one (acceptance does not depend on the CPU). `treeopt demo build --redo "
            "timing` measures them on this host.")


def emulated_here(dtype: str) -> str | None:
    """One line where decoding in ``dtype`` (either vocabulary: ``bfloat16`` or ``bf16``) is
    emulated on this CPU, with what to choose instead; None where it is not."""
    from treeopt.documents.dtypes import dtype_name
    from treeopt.profiling.host import emulated_bf16

    why = emulated_bf16(dtype_name(dtype), "cpu")
    return None if why is None else f"{why[0].upper()}{why[1:]}: float32 is faster here."


def base_model_name(manifest: Mapping[str, Any]) -> str:
    """The base model a demo's manifest records, as a person reads it: the pretrained asset's
    name, or the small model the build trained.

    >>> base_model_name({"config": {"base_model": "smollm2-135m-instruct"}})
    'smollm2-135m-instruct (pretrained)'
    >>> base_model_name({"config": {"base": {"num_layers": 16, "hidden_size": 128}},
    ...                  "base": {"parameters": 3936384}})
    'a 3.9M-parameter model trained for the demo (16 layers, hidden size 128)'
    """
    config = manifest.get("config", {})
    base = config.get("base_model")
    if base:
        return f"{base} (pretrained)"
    shape = config.get("base", {})
    count = manifest.get("base", {}).get("parameters")
    size = f"a {count / 1e6:.1f}M-parameter model" if isinstance(count, int) else "a small model"
    layers = (f" ({shape['num_layers']} layers, hidden size {shape['hidden_size']})"
              if {"num_layers", "hidden_size"} <= set(shape) else "")
    return f"{size} trained for the demo{layers}"


def weights_missing(manifest: Mapping[str, Any]) -> str | None:
    """One line naming the command that fetches the demo's pretrained base, when the base is an
    asset that is not fetched here; None when its weights are at hand (its own model, or a
    fetched or local pretrained one).

    >>> weights_missing({"config": {}}) is None
    True
    """
    base = manifest.get("config", {}).get("base_model")
    if not base or base not in ASSETS:
        return None
    return None if fetched(base) is not None else missing_hint(base)


def available_demos() -> list[DemoEntry]:
    """The shipped demo first, then every other directory beside it holding a built demo (a
    ``manifest.json``), by name."""
    shipped = default_root()
    found = sorted(d for d in shipped.parent.glob("*")
                   if d != shipped and (d / "manifest.json").is_file())
    roots = ([shipped] if (shipped / "manifest.json").is_file() else []) + found
    return [DemoEntry(r.name, r, base_model_name(read_json(r / "manifest.json"))) for r in roots]


__all__ = ["DemoEntry", "available_demos", "base_model_name", "build_host", "emulated_here",
           "timed_elsewhere", "weights_missing"]
