"""The stages of a demo build, in order (:data:`PIPELINE`); each returns the JSON record the
manifest keeps. The stages live in modules of one concern each, and this module re-exports
their names:

- :mod:`~treeopt.demo.stage_model`: the tokenizer, the prompts, the base model;
- :mod:`~treeopt.demo.stage_training`: the head data, the heads, a drafter's training;
- :mod:`~treeopt.demo.stage_traces`: rank traces, growths, sampled traces;
- :mod:`~treeopt.demo.stage_quality`: live decoding checks and repetition;
- :mod:`~treeopt.demo.stage_timing`: latency table, step profiles, sweeps;
- :mod:`~treeopt.demo.stage_drafters`: the drafters beyond heads, each end to end;
- :mod:`~treeopt.demo.stage_dynamic`: EAGLE's dynamic trees;
- :mod:`~treeopt.demo.stage_prose`: the second prompt set and the choice per set;
- :mod:`~treeopt.demo.stage_resume`: the files each stage writes, kind scopes, redoing the
  timing and the quality checks;
- :mod:`~treeopt.demo.stage_kinds`: which drafters each stage makes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from treeopt.demo.context import Context
from treeopt.demo.stage_drafters import drafters
from treeopt.demo.stage_dynamic import dynamic, dynamic_timing
from treeopt.demo.stage_kinds import HEAD_KINDS, KIND_STAGES, NEW_KINDS, lacking, trained_kinds
from treeopt.demo.stage_model import base_model, corpus_and_tokenizer, prompts
from treeopt.demo.stage_prose import kind_prose, prose
from treeopt.demo.stage_quality import kind_quality, quality, read_jsonl
from treeopt.demo.stage_resume import (
    KIND_SETTINGS,
    RECHECK_MARKER,
    RUNS,
    RUNS_STAGES,
    TIMING,
    TIMING_STAGES,
    keep_training,
    kind_outputs,
    kind_scope,
    merge_kinds,
    outputs,
    recheck_quality,
    retime,
    runs_kept,
    timing_outputs,
    without_batches,
)
from treeopt.demo.stage_timing import (
    demo_costs,
    drafter_timing,
    kind_step_profile,
    kind_sweep,
    latency,
    sweep,
    threads,
)
from treeopt.demo.stage_traces import (
    SIZES,
    greedy_trace,
    growths,
    kind_growths,
    kind_sampled,
    kind_traces,
    sampled,
    traces,
)
from treeopt.demo.stage_training import DRAFTERS, head_data, heads, ngram_drafter, train_drafter

PIPELINE: tuple[tuple[str, Callable[[Context], dict[str, Any]]], ...] = (
    ("tokenizer", corpus_and_tokenizer), ("prompts", prompts), ("base", base_model),
    ("head_data", head_data), ("heads", heads), ("traces", traces), ("growth", growths),
    ("quality", quality), ("latency", latency), ("sweep", sweep), ("sampled", sampled),
    ("drafters", drafters), ("dynamic", dynamic), ("prose", prose))

__all__ = [
    "DRAFTERS", "HEAD_KINDS", "KIND_SETTINGS", "KIND_STAGES", "NEW_KINDS", "PIPELINE",
    "RECHECK_MARKER", "RUNS", "RUNS_STAGES", "SIZES", "TIMING", "TIMING_STAGES", "Context",
    "base_model", "corpus_and_tokenizer", "demo_costs", "drafter_timing", "drafters",
    "dynamic", "dynamic_timing", "greedy_trace", "growths", "head_data", "heads",
    "keep_training", "kind_growths", "kind_outputs", "kind_prose", "kind_quality",
    "kind_sampled", "kind_scope", "kind_step_profile", "kind_sweep", "kind_traces", "lacking",
    "latency", "merge_kinds", "ngram_drafter", "outputs", "prompts", "prose",
    "quality", "read_jsonl", "recheck_quality", "retime", "runs_kept", "sampled", "sweep",
    "threads", "timing_outputs", "traces", "train_drafter", "trained_kinds", "without_batches",
]
