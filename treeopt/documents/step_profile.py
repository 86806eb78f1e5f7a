"""The step profile: what a live decoding step costs, phase by phase, for the trees (or dynamic
settings) of a design set at each batch size (``treeopt profile step`` writes it,
:func:`treeopt.pricing.costs.step_costs` prices with it). Numpy-free: select and pricing read it
without torch.

File: ``"format": "treeopt.step-profile/1"`` with the setup its figures hold for — ``device``,
``dtype``, ``attention``, ``model`` (architecture and shape), ``threads``, ``heads`` (the
drafter's config) —, how it was measured — ``prompts``, ``max_new_tokens``, ``compile``,
``design`` (``"trees"`` or ``"dynamic"``), ``steps`` (``"steady"``: the steps during which every
row of the batch ran; ``"all"``: every step) —, ``meta`` and ``records`` (:class:`StepRecord`).
Absent setup fields are unrecorded (and not compared); an absent ``design`` reads as
``"trees"``, an absent ``steps`` as ``"all"``.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from treeopt.documents.dtypes import recorded_dtype
from treeopt.documents.fields import (
    flag,
    integer,
    integers,
    listed,
    mapping,
    number,
    optional,
    text,
)
from treeopt.errors import TreeoptError
from treeopt.files import read_tagged_json, write_json
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.registry.kinds import KIND_NAMES

STEP_FORMAT = "treeopt.step-profile/1"
DESIGNS = ("trees", "dynamic")
STEPS = ("steady", "all")
SETUP = ("device", "dtype", "attention", "model")  # what a profile's figures depend on
# what a step's cost depends on: profiles pooled together must agree on all of it
POOLED_ALIKE = ("device", "dtype", "attention", "model", "threads", "heads", "compile", "design")


@dataclass(frozen=True)
class StepRecord:
    """One profiled step at one batch size: the tree's shape (``size`` nodes, ``depth``,
    ``q`` tokens verified, nodes ``expanded`` per depth, the depth cap ``max_depth`` of the
    family it came from; ``dynamic``: the settings, for dynamic drafting), the mean
    ``context``, the milliseconds per step of each phase, and how it was measured (``rounds``,
    the ``seconds`` its decodes took, the relative standard error ``se`` of its step over its
    reference's).

    >>> r = StepRecord(1, 1, 1, 2, (1,), 84.5, 0.4, 5.6, 0.2, max_depth=None, rounds=8)
    >>> StepRecord.from_json(r.to_json(), where="p.json") == r
    True
    """

    batch: int
    size: int
    depth: int
    q: int
    expanded: tuple[int, ...]
    context: float
    ms_draft: float
    ms_verify: float
    ms_bookkeeping: float
    max_depth: int | None = None
    dynamic: DynamicSettings | None = None
    rounds: int | None = None
    seconds: float | None = None
    se: float | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"batch": self.batch, "max_depth": self.max_depth,
                               "size": self.size, "depth": self.depth, "q": self.q,
                               "expanded": list(self.expanded)}
        if self.dynamic is not None:
            doc["dynamic"] = self.dynamic.to_dict()
        doc.update(context=self.context, ms_draft=self.ms_draft, ms_verify=self.ms_verify,
                   ms_bookkeeping=self.ms_bookkeeping)
        for key in ("rounds", "seconds", "se"):
            if getattr(self, key) is not None:
                doc[key] = getattr(self, key)
        return doc

    @classmethod
    def from_json(cls, doc: Any, *, where: str) -> StepRecord:
        """A record read back, every field checked (``where``: the file and the record)."""
        doc = mapping(doc, where)
        record = cls(
            integer(doc, "batch", where, minimum=1), integer(doc, "size", where, minimum=0),
            integer(doc, "depth", where, minimum=0), integer(doc, "q", where, minimum=1),
            integers(doc, "expanded", where, minimum=1),
            number(doc, "context", where, minimum=0),
            number(doc, "ms_draft", where, minimum=0), number(doc, "ms_verify", where,
                                                              positive=True),
            number(doc, "ms_bookkeeping", where, minimum=0),
            optional(integer, doc, "max_depth", where, minimum=1), _dynamic(doc, where),
            optional(integer, doc, "rounds", where, minimum=1),
            optional(number, doc, "seconds", where, minimum=0),
            optional(number, doc, "se", where, minimum=0))
        if record.q != record.size + 1 or len(record.expanded) != record.depth:
            raise TreeoptError(f"{where}: a step of {record.size} nodes verifies "
                               f"{record.size + 1} tokens and expands nodes at each of its "
                               f"{record.depth} depths, not q {record.q} and expanded "
                               f"{list(record.expanded)}")
        return record


def _dynamic(doc: dict[str, Any], where: str) -> DynamicSettings | None:
    if doc.get("dynamic") is None:
        return None
    try:
        return DynamicSettings.from_dict(mapping(doc["dynamic"], f"{where}: 'dynamic'"))
    except TreeoptError as exc:
        raise TreeoptError(f"{where}: {exc}") from None


@dataclass(frozen=True)
class StepProfile:
    """A step profile (see the module's docstring); ``sources``: the files it was read from
    (several when pooled, :meth:`pool`)."""

    heads: dict[str, Any]  # the drafter's config (HeadsConfig.to_dict()): kind, num_heads, …
    records: tuple[StepRecord, ...] = ()
    device: str | None = None
    dtype: str | None = None
    attention: str | None = None
    model: dict[str, Any] | None = None
    threads: int | None = None
    prompts: int | None = None
    max_new_tokens: int | None = None
    compile: bool | None = None
    design: str = "trees"
    steps: str = "all"
    meta: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = field(default=(), compare=False)

    @property
    def kind(self) -> str:
        """The drafter's kind (a name of :data:`treeopt.registry.kinds.KIND_NAMES`)."""
        return str(self.heads["kind"])

    @property
    def batches(self) -> list[int]:
        """The batch sizes with records, ascending."""
        return sorted({r.batch for r in self.records})

    def with_records(self, records: Iterable[StepRecord]) -> StepProfile:
        """The profile with ``records`` added after its own."""
        return replace(self, records=(*self.records, *records))

    def without_batches(self, batches: Collection[int]) -> StepProfile:
        """The profile less its records at ``batches``: what profiling those batch sizes again
        starts from."""
        return replace(self, records=tuple(r for r in self.records if r.batch not in batches))

    def differences(self, other: StepProfile, keys: Sequence[str]) -> list[str]:
        """The fields of ``keys`` on which the two profiles differ."""
        return [k for k in keys if getattr(self, k) != getattr(other, k)]

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"format": STEP_FORMAT}
        for key in ("device", "dtype", "attention", "model", "threads", "heads", "prompts",
                    "max_new_tokens", "compile"):
            if getattr(self, key) is not None:
                doc[key] = getattr(self, key)
        doc.update(design=self.design, steps=self.steps, meta=dict(self.meta),
                   records=[r.to_json() for r in self.records])
        return doc

    def save(self, path: str | os.PathLike[str]) -> None:
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> StepProfile:
        """The profile at ``path``, its tag, setup and every record checked."""
        return cls.from_json(read_tagged_json(path, STEP_FORMAT), source=str(path))

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str) -> StepProfile:
        heads = doc.get("heads")
        if not isinstance(heads, dict) or heads.get("kind") not in KIND_NAMES:
            raise TreeoptError(f"{source}: 'heads' must be an object whose kind is one of "
                               f"{list(KIND_NAMES)}")
        records = tuple(StepRecord.from_json(r, where=f"{source}: records[{i}]")
                        for i, r in enumerate(listed(doc, "records", source)))
        profile = cls(
            heads, records, optional(text, doc, "device", source),
            recorded_dtype(optional(text, doc, "dtype", source)),  # torch's names: aliases
            optional(text, doc, "attention", source),
            None if doc.get("model") is None else mapping(doc["model"], f"{source}: 'model'"),
            optional(integer, doc, "threads", source, minimum=1),
            optional(integer, doc, "prompts", source, minimum=1),
            optional(integer, doc, "max_new_tokens", source, minimum=1),
            optional(flag, doc, "compile", source),
            doc.get("design", "trees"), doc.get("steps", "all"),
            mapping(doc.get("meta", {}), f"{source}: 'meta'"), (source,))
        for key, valid in (("design", DESIGNS), ("steps", STEPS)):
            if getattr(profile, key) not in valid:
                raise TreeoptError(f"{source}: '{key}' must be one of {list(valid)}, got "
                                   f"{getattr(profile, key)!r}")
        return profile

    @property
    def cpu_matmul(self) -> str | None:
        """The matrix instructions of the CPU it was measured on (``meta["cpu"]["matmul"]``, as
        :func:`treeopt.profiling.host.cpu_identity` records it; None where not recorded)."""
        cpu = self.meta.get("cpu")
        return cpu.get("matmul") if isinstance(cpu, dict) else None

    @classmethod
    def pool(cls, paths: Sequence[str | os.PathLike[str]]) -> StepProfile:
        """The profiles at ``paths`` as one: the first one's setup with every file's records,
        which the step-cost fit averages (profiles of one setup taken before and after a sweep
        describe a host whose speed drifts better than either alone). Refuses profiles that
        differ in anything a step's cost depends on (:data:`POOLED_ALIKE`)."""
        if not paths:
            raise TreeoptError("no step profile to pool")
        profiles = [cls.load(p) for p in paths]
        first = profiles[0]
        for path, profile in zip(paths[1:], profiles[1:], strict=True):
            differ = first.differences(profile, POOLED_ALIKE)
            if differ:
                raise TreeoptError(f"{path}: profiled with other {', '.join(differ)} than "
                                   f"{paths[0]}; only profiles of one setup can be pooled")
            if (theirs := profile.cpu_matmul) and (ours := first.cpu_matmul) and theirs != ours:
                raise TreeoptError(f"{path}: profiled on a CPU with {theirs}, {paths[0]} on one "
                                   f"with {ours}; only profiles of one setup can be pooled")
        return replace(first, records=tuple(r for p in profiles for r in p.records),
                       sources=tuple(str(p) for p in paths))


__all__ = ["POOLED_ALIKE", "SETUP", "STEP_FORMAT", "StepProfile", "StepRecord"]
