"""The latency table: measured verify-step latencies, one record per (batch, context, tokens).

``"format": "treeopt.latency/1"`` with ``device``, ``dtype``, ``model`` (the shape fields of
:class:`roofline.ModelConfig`), ``meta`` (method, versions, warm-up, device name) and ``records``
of ``{batch, context, tokens, ms_median, ms_p10, ms_p90, repeats}`` or ``{…, error}``. The file is
rewritten atomically after each measured group, so an interrupted sweep keeps every finished point
and resumes where it stopped. Importing this module needs numpy only.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from treeopt.errors import TreeoptError
from treeopt.files import read_tagged_json, write_json
from treeopt.pricing.costs import StepLatency
from treeopt.roofline.config import ModelConfig

LATENCY_FORMAT = "treeopt.latency/1"
Key = tuple[int, int, int]


@dataclass(frozen=True)
class LatencyRecord:
    """One measured point, or the error that stopped it (such as out-of-memory).

    >>> LatencyRecord(1, 128, 4, ms_median=2.0, ms_p10=1.9, ms_p90=2.2, repeats=20).spread
    0.15
    """

    batch: int
    context: int
    tokens: int
    ms_median: float | None = None
    ms_p10: float | None = None
    ms_p90: float | None = None
    repeats: int = 0
    error: str | None = None

    @property
    def key(self) -> Key:
        return (self.batch, self.context, self.tokens)

    @property
    def ok(self) -> bool:
        return self.error is None and self.ms_median is not None

    @property
    def spread(self) -> float | None:
        """Repeat-to-repeat spread: (p90 − p10) / median."""
        if not self.ok or self.ms_p10 is None or self.ms_p90 is None:
            return None
        return round((self.ms_p90 - self.ms_p10) / self.ms_median, 6)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"batch": self.batch, "context": self.context, "tokens": self.tokens}
        if self.error is not None:
            doc["error"] = self.error
        else:
            doc.update(ms_median=self.ms_median, ms_p10=self.ms_p10, ms_p90=self.ms_p90,
                       repeats=self.repeats, spread=self.spread)
        return doc

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str) -> LatencyRecord:
        try:
            rec = cls(int(doc["batch"]), int(doc["context"]), int(doc["tokens"]),
                      _opt_float(doc.get("ms_median")), _opt_float(doc.get("ms_p10")),
                      _opt_float(doc.get("ms_p90")), int(doc.get("repeats", 0)), doc.get("error"))
        except (KeyError, TypeError, ValueError) as exc:
            raise TreeoptError(f"{source}: malformed latency record {doc!r} ({exc!r})") from None
        if rec.error is None and (rec.ms_median is None or rec.ms_median <= 0):
            raise TreeoptError(f"{source}: record {doc!r} has neither a positive ms_median nor an "
                               "error")
        for name in ("ms_median", "ms_p10", "ms_p90"):
            value = getattr(rec, name)
            if value is not None and not math.isfinite(value):
                raise TreeoptError(f"{source}: record (batch {rec.batch}, context {rec.context}, "
                                   f"tokens {rec.tokens}) has {name} {value}; expected a finite "
                                   "number of milliseconds")
        return rec


@dataclass(frozen=True, eq=False)
class LatencyTable:
    """Measured step latencies of one model on one device and dtype."""

    device: str
    dtype: str
    model: ModelConfig
    records: tuple[LatencyRecord, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict)

    def by_key(self) -> dict[Key, LatencyRecord]:
        return {r.key: r for r in self.records}

    def points(self) -> list[tuple[int, int, int, float]]:
        """``(batch, context, tokens, seconds)`` of every measured (not failed) record."""
        return [(r.batch, r.context, r.tokens, r.ms_median / 1e3) for r in self.records if r.ok]

    def latency(self, *, source: str) -> StepLatency:
        """The verify latency the table measured, named ``source``, for pricing trees."""
        return StepLatency.from_points(self.points(), source, device=self.device,
                                       dtype=self.dtype, model=self.model.name)

    def with_records(self, records: list[LatencyRecord]) -> LatencyTable:
        """A table with ``records`` added (replacing any record of the same key)."""
        merged = self.by_key()
        merged.update({r.key: r for r in records})
        return replace(self, records=tuple(merged[k] for k in sorted(merged)))

    def check_matches(self, *, model: ModelConfig | None = None, dtype: str | None = None,
                      device: str | None = None, source: str = "latency table") -> None:
        """Raise unless the table was measured for this model shape, dtype and device."""
        if model is not None and not self.model.same_shape(model):
            raise TreeoptError(f"{source}: measured for model {self.model.name!r} "
                               f"({_shape(self.model)}), not {model.name!r} ({_shape(model)})")
        if dtype is not None and dtype != self.dtype:
            raise TreeoptError(f"{source}: measured in {self.dtype}, not {dtype}")
        if device is not None and device != self.device:
            raise TreeoptError(f"{source}: measured on {self.device!r}, not {device!r}")

    def to_json(self) -> dict[str, Any]:
        return {"format": LATENCY_FORMAT, "device": self.device, "dtype": self.dtype,
                "model": self.model.to_json(), "meta": self.meta,
                "records": [r.to_json() for r in self.records]}

    def save(self, path: str | os.PathLike[str]) -> None:
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> LatencyTable:
        source = str(path)
        doc = read_tagged_json(path, LATENCY_FORMAT)
        missing = [k for k in ("device", "dtype", "model", "records") if k not in doc]
        if missing:
            raise TreeoptError(f"{source}: missing field(s) {', '.join(missing)}")
        try:
            model = ModelConfig(**doc["model"])
        except TypeError as exc:
            raise TreeoptError(f"{source}: malformed 'model' ({exc})") from None
        recs = [LatencyRecord.from_json(r, source=source) for r in doc["records"]]
        return cls(str(doc["device"]), str(doc["dtype"]), model, (), dict(doc.get("meta", {}))
                   ).with_records(recs)

    @classmethod
    def load_if_exists(cls, path: str | os.PathLike[str]) -> LatencyTable | None:
        return cls.load(path) if Path(path).exists() else None


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _shape(cfg: ModelConfig) -> str:
    return (f"hidden {cfg.hidden_size}, {cfg.num_layers} layers, {cfg.num_heads}/"
            f"{cfg.num_kv_heads} heads, vocab {cfg.vocab_size}")
