"""A step profile taken at a sweep's own moments: each point's tree profiled right before the
point is measured (``tune``'s ``before_point``).

A step profile taken before a sweep predicts points measured minutes later. On a shared host the
steps' costs relative to the autoregressive step move over those minutes: on the demo's 2-core
host, records of the same trees moved by up to 7–9% between a profile taken before a batch
size's sweep points and one taken right after them (Hydra, 2026-11-27), and the points'
prediction errors were about twice what the rounds' own noise explains. Profiled right before
its point, a tree's record meets the machine as its point does, so what is left between
prediction and measurement is the model (E[L], the step-cost model's terms) and the two
measurements' noise, not the host's drift.

Each call profiles the point's tree beside the autoregressive reference at the point's batch
(:func:`profiling.step.batch_records`: the decoder's own loop, phase by phase, in rounds until
``target_se``) and adds the tree's record to the file. A batch size's autoregressive record is
the one measured with its first tree; every later record is rescaled to it (its step over its
own reference is what was measured), so the records of a batch share one reference and price
as one profile: :func:`treeopt.costs.step_costs` reads the file like any other step profile.
Written atomically after each record; a tree already recorded at a batch is not measured again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from treeopt.profiling.step import batch_records, resume_document
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.loop import Decoder
from treeopt.errors import TreeoptError
from treeopt.files import write_json
from treeopt.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.drafters.base import Drafter

PHASES = ("ms_draft", "ms_verify", "ms_bookkeeping")
TIMING = ("each tree profiled right before its sweep point, beside an autoregressive reference; "
          "one reference per batch")  # the file's meta.timing, which says how it was taken


class AlongsideProfile:
    """Callable as ``tune(before_point=...)``: ``(batch, depth cap, tree)`` → that tree's step
    profiled now into ``out`` (see the module's docstring)."""

    def __init__(self, model: PreTrainedModel, heads: Drafter,
                 prompts: Sequence[Sequence[int]], *, out: str | os.PathLike[str],
                 max_new_tokens: int = 64, rounds: int = 3, sequences: int = 8,
                 min_seconds: float = 0.0, target_se: float = 0.0) -> None:
        if rounds < 1 or sequences < 1:
            raise TreeoptError(f"--rounds and --sequences must be ≥ 1, got {rounds} and "
                               f"{sequences}")
        self.prompts = [list(p) for p in prompts]
        self.out = out
        self.settings = {"rounds": rounds, "sequences": sequences, "min_seconds": min_seconds,
                         "target_se": target_se}
        self.config = DecodeConfig(max_new_tokens=max_new_tokens)
        self.decoder = Decoder(model, heads)
        self.doc: dict[str, Any] = resume_document(out, model, heads, self.prompts,
                                                   max_new_tokens, False).to_json()
        if self.doc["records"] and self.doc["meta"].get("timing") != TIMING:
            raise TreeoptError(f"{out}: a step profile not taken alongside a sweep; name a file "
                               "of its own")
        self.doc["meta"]["timing"] = TIMING

    def __call__(self, batch: int, cap: int | None, tree: Tree) -> None:
        if tree.size == 0 or self.recorded(batch, cap, tree):
            return
        if batch > len(self.prompts):
            raise TreeoptError(f"--batch {batch} is larger than the {len(self.prompts)} prompts")
        reference, record = batch_records(self.decoder, [(None, Tree(())), (cap, tree)],
                                          self.prompts, batch, config=self.config,
                                          **self.settings)
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
        return any(r["batch"] == batch and r["max_depth"] == cap and r["size"] == tree.size
                   and r["q"] == tree.num_tokens for r in self.doc["records"])


def step_ms(record: dict[str, Any]) -> float:
    """A record's whole step: draft + verify + bookkeeping milliseconds."""
    return sum(record[k] for k in PHASES)
