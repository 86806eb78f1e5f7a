"""The report of ``treeopt verify``: one tree decoded live beside autoregressive decoding, as a
frozen type; ``to_json`` is the file format and ``load`` reads it back, checked.

File: ``"format": "treeopt.verify/1"``: ``tree`` (size, depth, choices), ``heads`` (the drafter's
kind), ``mode``, ``prompts`` (decoded), ``max_new_tokens``, the comparison (``batch``,
``rounds``, ``tree_decoding``, ``autoregressive``, ``speedup``, ``speedup_spread``,
``speedup_se``, ``round_speedups``, ``end_to_end_speedup``; ``sampled_batches`` when the prompts
were sampled; ``outputs_match`` and ``mismatched_prompts`` under greedy and sample modes),
``support_probe``, ``model_generate`` (greedy), ``lossless``, ``predicted`` (with a trace:
:func:`treeopt.decoding.verify.prediction` — its ``mean_accept_length`` the per-step walk where
the trace records its sequences, ``acceptance`` says which), and where it ran (``model``,
``heads_dir``, ``device``, ``dtype``, ``attention``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from treeopt.documents import fields
from treeopt.documents.sweep import BATCHINGS
from treeopt.errors import TreeoptError
from treeopt.files import read_tagged_json
from treeopt.model.tree import Tree

VERIFY_FORMAT = "treeopt.verify/1"
RUN_KEYS = ("model", "heads_dir", "device", "dtype", "attention")  # where the report was made
_PROBE = ("prefix_tokens", "max_abs_hidden_diff", "tolerance")
_RENAMED = {"max_abs_hidden_diff": "max_abs_logit_diff"}  # the probe compared logits once



@dataclass(frozen=True)
class VerifyReport:
    """Measured acceptance, throughput and losslessness of one tree, beside autoregressive
    decoding of the same prompts and, with a trace, the predicted E[L] (per step where the trace
    records its sequences)."""

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
    speedup_se: float | None  # relative standard error of the median speed-up (None: one round)
    round_speedups: tuple[float, ...]
    end_to_end_speedup: float
    support_probe: dict[str, float]  # prefix_tokens, max_abs_hidden_diff, tolerance
    lossless: bool | None  # None under typical acceptance
    mismatched_prompts: tuple[int, ...] | None = None  # None under typical acceptance
    sampled_batches: int | None = None  # the prompts were sampled: the speed-up is over these
    model_generate: dict[str, Any] | None = None  # greedy: against the model's own generate
    predicted: dict[str, Any] | None = None  # what the trace predicts
    run: dict[str, Any] = field(default_factory=dict)  # where it ran: RUN_KEYS
    batching: str = "static"  # or "continuous": every prompt in one run of ``batch`` rows
    # greedy outputs that differ from autoregressive decoding: where each parted, and the
    # model's own logits of the two tokens there (treeopt.decoding.divergence.Divergence)
    divergences: tuple[dict[str, Any], ...] | None = None

    @property
    def lossless_up_to_ties(self) -> bool | None:
        """Lossless, or every output that differs parted at a tie the dtype cannot resolve (the
        model's own logits of both tokens within one step of the dtype); None when unknown."""
        if self.lossless:
            return True
        if self.divergences is None:  # typical acceptance, or a report from before them
            return None
        return bool(self.divergences) and all(bool(d.get("at_tie")) for d in self.divergences)

    def verdict(self) -> str:
        """What a person reads first: the speed-up, acceptance live beside the prediction (and,
        where the trace holds the decoded prompts' own positions, live beside the walk there),
        and whether the outputs are lossless, in one line.

        >>> r = VerifyReport(Tree.chain(2), "prompt-lookup", "greedy", 8, 48, 1, 3,
        ...     {"mean_accept_length": 2.02}, {}, 1.895, 0.01, 0.005, (1.9,), 1.8, {}, False, (7,),
        ...     predicted={"mean_accept_length": 1.98, "acceptance": "per step", "inside_trace":
        ...                {"sequences": 8, "mean_accept_length": 2.05, "measured": 2.05}},
        ...     divergences=({"prompt": 7, "position": 21, "at_tie": True},))
        >>> print(r.verdict())
        1.895× over autoregressive decoding (se 0.5%, 3 rounds); E[L] 2.02 live, 1.98 predicted per step (+2.0%), 2.05 live and 2.05 walked inside the trace for these 8 prompts (+0.0%); outputs equal on 7 of 8 prompts, prompt 7 parted at new token 22 on a tie the dtype cannot resolve: lossless up to ties
        """
        se = f"se {self.speedup_se:.1%}, " if self.speedup_se is not None else ""
        parts = [f"{self.speedup:.3f}× over autoregressive decoding ({se}{self.rounds} rounds)"]
        live = self.tree_decoding.get("mean_accept_length")
        predicted = self.predicted or {}
        if live is not None:
            text = f"E[L] {live:.2f} live"
            if want := predicted.get("mean_accept_length"):
                how = f" {predicted['acceptance']}" if predicted.get("acceptance") else ""
                text += f", {want:.2f} predicted{how} ({live / want - 1:+.1%})"
            inside = predicted.get("inside_trace") or {}
            if inside.get("prompts_match") is False:
                text += f"; {inside['note']}"
            elif inside.get("mean_accept_length") and inside.get("measured") is not None:
                got, walked = inside["measured"], inside["mean_accept_length"]
                text += (f", {got:.2f} live and {walked:.2f} walked inside the trace for these "
                         f"{inside['sequences']} prompts ({got / walked - 1:+.1%})")
                if inside.get("served_as_ranked") is False:
                    text += f" ({inside['note']})"
            parts.append(text)
        if self.mismatched_prompts is None:
            parts.append("typical acceptance: not lossless by design")
        elif not self.mismatched_prompts:
            parts.append(f"outputs equal on all {self.prompts} prompts: lossless")
        else:
            parted = "; ".join(
                f"prompt {d.get('prompt')} parted at new token {int(d.get('position', -1)) + 1}"
                + (" on a tie the dtype cannot resolve" if d.get("at_tie") else "")
                for d in self.divergences or ())
            equal = self.prompts - len(self.mismatched_prompts)
            verdict = ("lossless up to ties" if self.lossless_up_to_ties
                       else "NOT lossless")
            parts.append(f"outputs equal on {equal} of {self.prompts} prompts"
                         + (f", {parted}" if parted else "") + f": {verdict}")
        return "; ".join(parts)

    @property
    def outputs_match(self) -> bool | None:
        """Every tree output equals the autoregressive one (None under typical acceptance)."""
        return None if self.mismatched_prompts is None else not self.mismatched_prompts

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "format": VERIFY_FORMAT, "tree": {"size": self.tree.size, "depth": self.tree.depth,
                                              "choices": self.tree.as_choices()},
            "heads": self.heads, "mode": self.mode, "prompts": self.prompts,
            "max_new_tokens": self.max_new_tokens, "batch": self.batch,
            "batching": self.batching, "rounds": self.rounds,
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
        if self.divergences is not None:
            doc["divergences"] = list(self.divergences)
            doc["lossless_up_to_ties"] = self.lossless_up_to_ties
        if self.predicted is not None:
            doc["predicted"] = self.predicted
        return {**doc, **self.run}

    @classmethod
    def from_json(cls, doc: dict[str, Any], *, source: str = "verify report") -> VerifyReport:
        """A report read back: every field present with its kind, every number finite."""
        doc = fields.mapping(doc, source)
        fields.all_finite(doc, source)
        probe = fields.mapping(doc.get("support_probe"), f"{source}: support_probe")
        tree = fields.mapping(doc.get("tree"), f"{source}: tree")
        try:
            shape = Tree.from_choices(fields.listed(tree, "choices", f"{source}: tree"))
        except (TypeError, ValueError) as exc:
            raise TreeoptError(f"{source}: tree: {exc}") from None
        mismatched = fields.optional(fields.integers, doc, "mismatched_prompts", source)
        return cls(
            shape, fields.text(doc, "heads", source), fields.text(doc, "mode", source),
            fields.integer(doc, "prompts", source, minimum=0),
            fields.integer(doc, "max_new_tokens", source, minimum=1),
            fields.integer(doc, "batch", source, minimum=1),
            fields.integer(doc, "rounds", source, minimum=1),
            _object(doc, "tree_decoding", source), _object(doc, "autoregressive", source),
            fields.number(doc, "speedup", source), fields.number(doc, "speedup_spread", source),
            fields.optional(fields.number, doc, "speedup_se", source),
            tuple(float(v) for v in fields.numbers(doc, "round_speedups", source)),
            fields.number(doc, "end_to_end_speedup", source),
            _probe(probe, source),
            fields.optional(fields.flag, doc, "lossless", source), mismatched,
            fields.optional(fields.integer, doc, "sampled_batches", source, minimum=1),
            _object(doc, "model_generate", source, optional=True),
            _object(doc, "predicted", source, optional=True),
            {k: doc[k] for k in RUN_KEYS if k in doc},
            _batching(doc, source), _divergences(doc, source))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> VerifyReport:
        return cls.from_json(read_tagged_json(path, VERIFY_FORMAT), source=str(path))


def _divergences(doc: dict[str, Any], source: str) -> tuple[dict[str, Any], ...] | None:
    """The report's divergences, each an object (a report without the key: None)."""
    if "divergences" not in doc:
        return None
    found = fields.listed(doc, "divergences", source)
    return tuple(fields.mapping(d, f"{source}: divergences[{i}]") for i, d in enumerate(found))


def _batching(doc: dict[str, Any], source: str) -> str:
    """How the report's batches ran (a report from before the key: static)."""
    value = doc.get("batching", "static")
    if value not in BATCHINGS:
        raise TreeoptError(f"{source}: batching {value!r}: expected static or continuous")
    return str(value)


def _probe(probe: Mapping[str, Any], source: str) -> dict[str, float]:
    """The support probe's figures; a report written before the probe compared hidden states
    names its difference ``max_abs_logit_diff``, read as the same field."""
    probe = {new: probe[old] for new, old in _RENAMED.items() if new not in probe and old in probe
             } | dict(probe)
    return {k: fields.number(probe, k, f"{source}: support_probe") for k in _PROBE}


def _object(doc: dict[str, Any], key: str, source: str, *,
            optional: bool = False) -> dict[str, Any] | None:
    """The JSON object at ``key`` (None where it is absent and ``optional``)."""
    if optional and doc.get(key) is None:
        return None
    return fields.mapping(doc.get(key), f"{source}: {key!r}")
