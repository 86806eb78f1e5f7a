"""The report of ``treeopt verify``: one tree decoded live beside autoregressive decoding, as a
frozen type; ``to_json`` is the file format and ``load`` reads it back, checked.

File: ``"format": "treeopt.verify/1"``: ``tree`` (size, depth, choices), ``heads`` (the drafter's
kind), ``mode``, ``prompts`` (decoded), ``max_new_tokens``, the comparison (``batch``,
``rounds``, ``tree_decoding``, ``autoregressive``, ``speedup``, ``speedup_spread``,
``speedup_se``, ``round_speedups``, ``end_to_end_speedup``; ``sampled_batches`` when the prompts
were sampled; ``outputs_match`` and ``mismatched_prompts`` under greedy and sample modes),
``support_probe``, ``model_generate`` (greedy), ``lossless``, ``predicted`` (with a trace), and
where it ran (``model``, ``heads_dir``, ``device``, ``dtype``, ``attention``).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from treeopt.errors import TreeoptError
from treeopt.files import read_tagged_json
from treeopt.tree import Tree

VERIFY_FORMAT = "treeopt.verify/1"
RUN_KEYS = ("model", "heads_dir", "device", "dtype", "attention")  # where the report was made
_NUMBER = (int, float)
# key → the kinds its value may have (None: the key may be missing or null)
_KINDS: dict[str, tuple[type | None, ...]] = {
    "heads": (str,), "mode": (str,), "prompts": (int,), "max_new_tokens": (int,),
    "batch": (int,), "rounds": (int,), "tree_decoding": (dict,), "autoregressive": (dict,),
    "speedup": _NUMBER, "speedup_spread": _NUMBER, "speedup_se": (*_NUMBER, None),
    "round_speedups": (list,), "end_to_end_speedup": _NUMBER,
    "sampled_batches": (int, None), "mismatched_prompts": (list, None),
    "support_probe": (dict,), "model_generate": (dict, None), "lossless": (bool, None),
    "predicted": (dict, None)}
_PROBE = ("prefix_tokens", "max_abs_logit_diff", "tolerance")


@dataclass(frozen=True)
class VerifyReport:
    """Measured acceptance, throughput and losslessness of one tree, beside autoregressive
    decoding of the same prompts and, with a trace, the predicted E[L]."""

    tree: Tree
    heads: str  # the drafter's kind
    mode: str  # greedy, sample or typical
    prompts: int  # prompts decoded
    max_new_tokens: int
    batch: int
    rounds: int
    tree_decoding: dict[str, Any]  # the tree's decode statistics, throughput, phase times
    autoregressive: dict[str, Any]
    speedup: float  # median over rounds of the paired steady-state speed-ups
    speedup_spread: float
    speedup_se: float | None  # relative standard error of the rounds' mean (None: one round)
    round_speedups: tuple[float, ...]
    end_to_end_speedup: float
    support_probe: dict[str, float]  # prefix_tokens, max_abs_logit_diff, tolerance
    lossless: bool | None  # None under typical acceptance
    mismatched_prompts: tuple[int, ...] | None = None  # None under typical acceptance
    sampled_batches: int | None = None  # the prompts were sampled: the speed-up is over these
    model_generate: dict[str, Any] | None = None  # greedy: against the model's own generate
    predicted: dict[str, Any] | None = None  # what the trace predicts
    run: dict[str, Any] = field(default_factory=dict)  # where it ran: RUN_KEYS

    @property
    def outputs_match(self) -> bool | None:
        """Every tree output equals the autoregressive one (None under typical acceptance)."""
        return None if self.mismatched_prompts is None else not self.mismatched_prompts

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": VERIFY_FORMAT, "tree": {"size": self.tree.size, "depth": self.tree.depth,
                                              "choices": self.tree.as_choices()},
            "heads": self.heads, "mode": self.mode, "prompts": self.prompts,
            "max_new_tokens": self.max_new_tokens, "batch": self.batch, "rounds": self.rounds,
            "tree_decoding": self.tree_decoding, "autoregressive": self.autoregressive,
            "speedup": self.speedup, "speedup_spread": self.speedup_spread,
            "speedup_se": self.speedup_se, "round_speedups": list(self.round_speedups),
            "end_to_end_speedup": self.end_to_end_speedup}
        if self.sampled_batches is not None:
            doc["sampled_batches"] = self.sampled_batches
        if self.mismatched_prompts is not None:
            doc["outputs_match"] = self.outputs_match
            doc["mismatched_prompts"] = list(self.mismatched_prompts)
        doc["support_probe"] = self.support_probe
        if self.model_generate is not None:
            doc["model_generate"] = self.model_generate
        doc["lossless"] = self.lossless
        if self.predicted is not None:
            doc["predicted"] = self.predicted
        return {**doc, **self.run}

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str = "verify report") -> VerifyReport:
        """A report read back: every field present with its kind, every number finite."""
        _check_finite(doc, source)
        for key, kinds in _KINDS.items():
            _check_kind(doc, key, kinds, source)
        probe = doc["support_probe"]
        for key in _PROBE:
            _check_kind(probe, key, _NUMBER, f"{source}: support_probe")
        try:
            tree = Tree.from_choices(doc["tree"]["choices"])
            mismatched = doc.get("mismatched_prompts")
            return cls(
                tree, doc["heads"], doc["mode"], doc["prompts"], doc["max_new_tokens"],
                doc["batch"], doc["rounds"], doc["tree_decoding"], doc["autoregressive"],
                float(doc["speedup"]), float(doc["speedup_spread"]),
                None if doc.get("speedup_se") is None else float(doc["speedup_se"]),
                tuple(float(s) for s in doc["round_speedups"]), float(doc["end_to_end_speedup"]),
                {k: probe[k] for k in _PROBE}, doc.get("lossless"),
                None if mismatched is None else tuple(int(i) for i in mismatched),
                doc.get("sampled_batches"), doc.get("model_generate"), doc.get("predicted"),
                {k: doc[k] for k in RUN_KEYS if k in doc})
        except (KeyError, TypeError, ValueError) as exc:
            raise TreeoptError(f"{source}: malformed verify report ({exc!r})") from None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> VerifyReport:
        return cls.from_json(read_tagged_json(path, VERIFY_FORMAT), source=str(path))


def _check_kind(doc: dict[str, Any], key: str, kinds: tuple[type | None, ...],
                source: str) -> None:
    """Raise unless ``doc[key]`` has one of ``kinds`` (None among them: it may be missing or
    null; an int is no bool, and is a float)."""
    value = doc.get(key)
    if value is None:
        if None in kinds:
            return
        raise TreeoptError(f"{source}: {key!r} is missing")
    if isinstance(value, bool) and bool not in kinds or not isinstance(
            value, tuple(k for k in kinds if k is not None)):
        names = " or ".join("null" if k is None else k.__name__ for k in kinds)
        raise TreeoptError(f"{source}: {key!r} is {value!r}, expected {names}")


def _check_finite(value: Any, source: str, where: str = "") -> None:
    """Raise naming the first number in ``value`` (nested) that is NaN or infinite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise TreeoptError(f"{source}: {where or 'the report'} is {value}, not a finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, source, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_finite(v, source, f"{where}[{i}]")
