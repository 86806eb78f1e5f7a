"""Accuracy tables of draft heads: marginal, cumulative and conditional top-i, with counts.

``marginal[k, i]`` = P(ρ_k = i): the true token is head k's i-th candidate. This is all that
Medusa's independence model needs; it can come from a rank trace (with sample counts) or from the
cumulative top-i accuracies that training logs report (CSV ``head,top1,…,topK`` or JSON).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError
from treeopt.files import check_format, read_text
from treeopt.model.trace import RankTrace

ACCURACY_FORMAT = "treeopt.accuracies/1"
_TOLERANCE = 1e-9


@dataclass(frozen=True, eq=False)
class AccuracyTable:
    """Per-head top-i accuracies. ``counts[k]`` is head k's sample size (None if unknown).

    >>> t = AccuracyTable.from_trace(RankTrace(np.array([[0, 1], [0, 0], [1, -1], [-1, 0]], np.int16)))
    >>> t.marginal.tolist()
    [[0.5, 0.25], [0.5, 0.25]]
    >>> t.cumulative.tolist()
    [[0.5, 0.75], [0.5, 0.75]]
    >>> t.conditional.tolist()  # head 2 given head 1 ranked 0: positions 0 and 1
    [[0.5, 0.25], [0.5, 0.5]]
    """

    marginal: npt.NDArray[np.float64]  # [heads, top_k]
    counts: npt.NDArray[np.int64] | None = None  # [heads]
    conditional: npt.NDArray[np.float64] | None = None  # [heads, top_k]
    conditional_counts: npt.NDArray[np.int64] | None = None  # [heads]
    source: str = "accuracy table"

    def __post_init__(self) -> None:
        m = np.asarray(self.marginal, dtype=np.float64)
        _validate_probabilities(m, self.source, kind="marginal")
        if np.any(m.sum(axis=1) > 1 + 1e-6):
            bad = int(np.argmax(m.sum(axis=1)))
            raise TreeoptError(
                f"{self.source}: head {bad + 1}'s top-i accuracies add up to "
                f"{m.sum(axis=1)[bad]:.4f} > 1"
            )
        m.setflags(write=False)
        object.__setattr__(self, "marginal", m)

    @property
    def heads(self) -> int:
        return int(self.marginal.shape[0])

    @property
    def top_k(self) -> int:
        return int(self.marginal.shape[1])

    @property
    def cumulative(self) -> npt.NDArray[np.float64]:
        """``cumulative[k, i]`` = P(ρ_k ≤ i), the top-(i+1) accuracy."""
        return np.cumsum(self.marginal, axis=1)

    @classmethod
    def from_trace(cls, trace: RankTrace, *, top_k: int | None = None) -> AccuracyTable:
        """Count ranks per head; conditional accuracies condition on every earlier head ranking 0."""
        if trace.positions == 0:
            raise TreeoptError("accuracy table: the rank trace is empty (0 positions)")
        k = top_k or max(trace.top_k, 1)
        r = trace.ranks  # [positions, heads]
        marginal = _rank_histogram(r, k) / trace.positions
        # rows where every earlier head ranked 0: a running product over heads
        top1_so_far = np.ones_like(r, dtype=bool)
        top1_so_far[:, 1:] = np.logical_and.accumulate(r[:, :-1] == 0, axis=1)
        cond_counts = top1_so_far.sum(axis=0)  # [heads]
        cond_hits = np.stack([_rank_histogram(r[top1_so_far[:, h], h:h + 1], k)[0]
                              for h in range(trace.heads)])
        conditional = cond_hits / np.maximum(cond_counts, 1)[:, None]
        counts = np.full(trace.heads, trace.positions, dtype=np.int64)
        return cls(marginal, counts, conditional, cond_counts.astype(np.int64), "rank trace")

    @classmethod
    def from_cumulative(cls, cumulative: Any, *, source: str = "accuracy table",
                        counts: Any = None) -> AccuracyTable:
        """Build from cumulative top-i accuracies ``[heads, K]``, checking they never decrease."""
        c = np.asarray(cumulative, dtype=np.float64)
        _validate_probabilities(c, source, kind="cumulative")
        diffs = np.diff(c, axis=1)
        if np.any(diffs < -_TOLERANCE):
            k, i = np.argwhere(diffs < -_TOLERANCE)[0]
            raise TreeoptError(
                f"{source}: head {k + 1}'s cumulative accuracy decreases from top{i + 1} "
                f"({c[k, i]:.4f}) to top{i + 2} ({c[k, i + 1]:.4f})"
            )
        marginal = np.clip(np.diff(c, axis=1, prepend=0.0), 0.0, None)
        cnt = None if counts is None else np.asarray(counts, dtype=np.int64)
        return cls(marginal, cnt, source=source)

    def to_json(self) -> dict[str, Any]:
        """A ``treeopt.accuracies/1`` document (what ``treeopt accuracies`` prints)."""
        out: dict[str, Any] = {
            "format": ACCURACY_FORMAT,
            "heads": self.heads,
            "top_k": self.top_k,
            "marginal": _rounded(self.marginal),
            "cumulative": _rounded(self.cumulative),
            "counts": None if self.counts is None else self.counts.tolist(),
        }
        if self.conditional is not None:
            out["conditional"] = _rounded(self.conditional)
            out["conditional_counts"] = (
                None if self.conditional_counts is None else self.conditional_counts.tolist())
        return out


def read_accuracies(path: str | os.PathLike[str]) -> AccuracyTable:
    """Read an accuracy table from CSV (``head,top1,…,topK``, cumulative) or JSON."""
    p = Path(path)
    kind = "JSON" if p.suffix.lower() == ".json" else "CSV"
    return parse_accuracies(read_text(p, expected=f"a text {kind} file"), source=str(p))


def parse_accuracies(text: str, *, source: str) -> AccuracyTable:
    """Parse accuracy-table text: JSON when ``source`` ends in .json, else CSV."""
    text = text.removeprefix("\ufeff")  # a byte-order mark, as spreadsheets save UTF-8 CSV
    if source.lower().endswith(".json"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TreeoptError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        return _from_json(obj, source)
    return _from_csv(text, source)


def _from_csv(text: str, source: str) -> AccuracyTable:
    rows = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    if not rows:
        raise TreeoptError(f"{source}: empty CSV; expected a header 'head,top1,…,topK'")
    header = [h.strip().lower() for h in rows[0]]
    expected = ["head"] + [f"top{i}" for i in range(1, len(header))]
    if len(header) < 2 or header != expected:
        raise TreeoptError(
            f"{source}: header is {','.join(header)!r}, expected {','.join(expected[:4])},…"
        )
    values: list[list[float]] = []
    first = 0 if rows[1:] and rows[1][0].strip() == "0" else 1  # heads numbered from 0 or from 1
    for line_no, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise TreeoptError(f"{source}: line {line_no} has {len(row)} fields, expected {len(header)}")
        _check_head(row[0], first + len(values), line_no, source, first=first)
        try:
            values.append([float(cell) for cell in row[1:]])
        except ValueError:
            raise TreeoptError(f"{source}: line {line_no} has a non-numeric accuracy: {row!r}") from None
    if not values:
        raise TreeoptError(f"{source}: no head rows after the header")
    return AccuracyTable.from_cumulative(values, source=source)


def _check_head(cell: str, expected: int, line_no: int, source: str, *, first: int = 1) -> None:
    """Rows list heads in order, each once, numbered from ``first`` (0 or 1, as the first row
    does): a row's accuracies belong to its head."""
    try:
        head = int(cell.strip())
    except ValueError:
        raise TreeoptError(f"{source}: line {line_no} has head {cell!r}; expected the head "
                           f"number {expected}") from None
    if head != expected:
        raise TreeoptError(f"{source}: line {line_no} is head {head}, expected head {expected} "
                           f"(rows must list heads {first}, {first + 1}, … in order, none "
                           "missing)")


def _from_json(obj: Any, source: str) -> AccuracyTable:
    doc = check_format(obj, ACCURACY_FORMAT, source)
    counts = doc.get("counts")
    if "marginal" in doc:
        try:
            return AccuracyTable(np.asarray(doc["marginal"], dtype=np.float64),
                                 None if counts is None else np.asarray(counts, np.int64),
                                 source=source)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, TreeoptError):
                raise
            raise TreeoptError(f"{source}: 'marginal' is not a [heads, top_k] number array") from None
    if "cumulative" in doc:
        try:
            return AccuracyTable.from_cumulative(doc["cumulative"], source=source, counts=counts)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, TreeoptError):
                raise
            raise TreeoptError(f"{source}: 'cumulative' is not a [heads, top_k] number array") from None
    raise TreeoptError(f"{source}: needs a 'marginal' or 'cumulative' array")


def _validate_probabilities(a: npt.NDArray[np.float64], source: str, *, kind: str) -> None:
    if a.ndim != 2 or a.shape[0] == 0 or a.shape[1] == 0:
        raise TreeoptError(f"{source}: {kind} accuracies must be a non-empty [heads, top_k] table, "
                           f"got shape {a.shape}")
    if np.isnan(a).any():
        k, i = np.argwhere(np.isnan(a))[0]
        raise TreeoptError(f"{source}: head {k + 1} top{i + 1} accuracy is NaN")
    if (a < -_TOLERANCE).any() or (a > 1 + _TOLERANCE).any():
        k, i = np.argwhere((a < -_TOLERANCE) | (a > 1 + _TOLERANCE))[0]
        raise TreeoptError(f"{source}: head {k + 1} top{i + 1} accuracy {a[k, i]} is outside [0, 1]")


def _rank_histogram(ranks: npt.NDArray[np.int16], k: int) -> npt.NDArray[np.float64]:
    """``[heads, k]`` counts of each rank 0..k-1 per column (misses and ranks ≥ k ignored)."""
    out = np.zeros((ranks.shape[1], k), dtype=np.float64)
    for h in range(ranks.shape[1]):
        col = ranks[:, h]
        out[h] = np.bincount(col[(col >= 0) & (col < k)], minlength=k)[:k]
    return out


def _rounded(a: npt.NDArray[np.float64]) -> list[list[float]]:
    return [[round(float(x), 6) for x in row] for row in a]
