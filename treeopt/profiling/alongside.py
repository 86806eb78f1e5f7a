"""A step profile taken at a sweep's own moments: each point's tree profiled right before the
point is measured (``tune``'s ``before_point``).

A step profile taken before a sweep predicts points measured minutes later, and on a shared host
the steps' costs relative to the autoregressive step drift over those minutes. Profiled right
before its point, a tree's record meets the machine as its point does, so what is left between
prediction and measurement is the model (E[L], the step-cost model's terms) and the two
measurements' noise, not the host's drift.

Each call profiles the point's tree beside the autoregressive reference at the point's batch
(:func:`treeopt.profiling.step.batch_records`: the decoder's own loop, phase by phase, in rounds
as the :class:`~treeopt.documents.measure.Measurement` says) and adds the tree's record to the file.
A batch size's autoregressive record is the one measured with its first tree; every later record
is rescaled to it (its step over its own reference is what was measured), so the records of a
batch share one reference and price as one profile: :func:`treeopt.pricing.costs.step_costs` reads
the file like any other step profile. Written atomically after each record; a tree already recorded
at a batch (one of the same shape) is not measured again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from treeopt.decoding.compare import check_batch
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.loop import Decoder
from treeopt.documents.measure import Measurement
from treeopt.errors import TreeoptError
from treeopt.files import write_json
from treeopt.model.tree import Tree
from treeopt.profiling.step import batch_records, resume_document, step_shape

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.drafter import Drafter

PHASES = ("ms_draft", "ms_verify", "ms_bookkeeping")
SWEEP_SEQUENCES = 8  # sequences a record of a sweep's alongside profile decodes at least
TIMING = ("each tree profiled right before its sweep point, beside an autoregressive reference; "
          "one reference per batch")  # the file's meta.timing, which says how it was taken


class AlongsideProfile:
    """Callable as ``tune(before_point=...)``: ``(batch, depth cap, tree)`` → that tree's step
    profiled now into ``out`` (see the module's docstring)."""

    def __init__(self, model: PreTrainedModel, heads: Drafter,
                 prompts: Sequence[Sequence[int]], *, out: str | os.PathLike[str],
                 max_new_tokens: int = 64, measure: Measurement | None = None,
                 sequences: int = 8) -> None:
        if sequences < 1:
            raise TreeoptError(f"sequences must be ≥ 1, got {sequences}")
        self.prompts = [list(p) for p in prompts]
        self.out = out
        self.measure = measure or Measurement()
        self.sequences = sequences
        self.config = DecodeConfig(max_new_tokens=max_new_tokens)
        self.decoder = Decoder(model, heads)
        self.doc: dict[str, Any] = resume_document(out, model, heads, self.prompts,
                                                   max_new_tokens, False).to_json()
        if self.doc["records"] and self.doc["meta"].get("timing") != TIMING:
            raise TreeoptError(f"{out}: a step profile not taken alongside a sweep; name a file "
                               "of its own")
        self.doc["meta"]["timing"] = TIMING

    @classmethod
    def for_sweep(cls, model: PreTrainedModel, heads: Drafter, prompts: Sequence[Sequence[int]],
                  *, out: str | os.PathLike[str], max_new_tokens: int, measure: Measurement,
                  batches: Sequence[int]) -> AlongsideProfile:
        """The profile a sweep of ``batches`` measured as ``measure`` says takes alongside its
        points: the points' measurement less its least time (a record needs no more than its
        rounds), at least :data:`SWEEP_SEQUENCES` sequences a record and every batch's."""
        return cls(model, heads, prompts, out=out, max_new_tokens=max_new_tokens,
                   measure=replace(measure, min_seconds=0.0),
                   sequences=max(SWEEP_SEQUENCES, *batches))

    def __call__(self, batch: int, cap: int | None, tree: Tree) -> None:
        if tree.size == 0 or self.recorded(batch, cap, tree):
            return
        check_batch(batch, len(self.prompts))
        reference, record = batch_records(self.decoder, [(None, Tree(())), (cap, tree)],
                                          self.prompts, batch, config=self.config,
                                          measure=self.measure, sequences=self.sequences)
        kept = self.reference(batch)
        if kept is None:
            self.doc["records"].append(reference)
        else:  # the step over its own reference, in terms of the batch's one reference
            scale = step_ms(kept) / step_ms(reference)
            record = {**record, **{k: round(record[k] * scale, 6) for k in PHASES}}
        self.doc["records"].append(record)
        write_json(self.out, self.doc)

    def reference(self, batch: int) -> dict[str, Any] | None:
        """The batch's autoregressive record, once its first tree was profiled."""
        return next((r for r in self.doc["records"]
                     if r["batch"] == batch and r["size"] == 0), None)

    def recorded(self, batch: int, cap: int | None, tree: Tree) -> bool:
        """Whether a tree of ``tree``'s shape (size, depth, tokens, nodes expanded per depth:
        what its step is priced by) was profiled at ``batch`` and ``cap``: a per-step greedy
        tree the size of a growth tree, but shaped otherwise, is a record of its own."""
        shape = step_shape(tree)
        return any(r["batch"] == batch and r["max_depth"] == cap
                   and all(r.get(k) == v for k, v in shape.items())
                   for r in self.doc["records"])


def step_ms(record: dict[str, Any]) -> float:
    """A record's whole step: draft + verify + bookkeeping milliseconds."""
    return sum(record[k] for k in PHASES)
