"""Dynamic traces from a model and its EAGLE drafter: at every position of calibration text,
where the true continuation stands in the dynamic candidate pool
(:meth:`~treeopt.decoding.drafter.Drafter.rank_dynamic`, teacher-forced, batched over
positions). :class:`~treeopt.dynamic.simulate.DynamicTrace` holds the result and simulates
every setting from it without torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import torch

from treeopt.decoding.drafter import Drafter, no_dynamic_trees, pick_features
from treeopt.decoding.models import model_device
from treeopt.decoding.rank_pass import cut_to_run, positions_range
from treeopt.dynamic.simulate import DynamicTrace
from treeopt.errors import TreeoptError

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def simulate_dynamic(model: PreTrainedModel, drafter: Drafter,
                     sequences: Sequence[Sequence[int]], starts: Sequence[int], *,
                     topk: int, steps: int, batch_size: int = 4, to_end: bool = True,
                     progress: Callable[[int, int], None] | None = None) -> DynamicTrace:
    """The :class:`DynamicTrace` of ``topk`` with up to ``steps`` steps over ``sequences``
    (prompt + continuation; position ``starts[i]`` is the one whose root is the first
    continuation token), ``batch_size`` sequences per pass: at every position a live run of
    the continuation starts a step at, a true node at or past its last token never drafted
    (:func:`~treeopt.decoding.rank_pass.cut_to_run`); without ``to_end``, at the positions where every depth has its true
    token."""
    if not drafter.kind.dynamic:
        raise no_dynamic_trees(drafter.kind)
    device = model_device(model)
    chunks, done = [], 0
    for i in range(0, len(sequences), batch_size):
        part = sequences[i: i + batch_size]
        T = max(len(s) for s in part) + (steps if to_end else 0)  # to_end: past the end
        ids = torch.zeros(len(part), T, dtype=torch.long, device=device)
        for j, s in enumerate(part):
            ids[j, : len(s)] = torch.tensor(list(s), device=device)
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=False, output_hidden_states=True,
                        logits_to_keep=1)
            hidden = pick_features(out.hidden_states, drafter.feature_layers)
            places = drafter.rank_dynamic(hidden, ids, topk=topk, steps=steps).cpu().numpy()
        for j, (s, st) in enumerate(zip(part, starts[i: i + batch_size], strict=True)):
            chunks.append(cut_to_run(places[j, st:], len(s), st) if to_end
                          else places[j, positions_range(len(s), st, steps)])
        done += len(part)
        if progress is not None:
            progress(done, len(sequences))
    lengths = tuple(len(c) for c in chunks)
    if not sum(lengths):
        raise TreeoptError(f"the sequences are too short for {steps} steps: no position has "
                           f"every depth's true token")
    return DynamicTrace(topk, np.concatenate(chunks).astype(np.int16), lengths,
                        {"drafter": drafter.config.to_dict(), "steps": steps,
                         "sequences": len(sequences)})
