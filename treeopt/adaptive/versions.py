"""Which engine versions decide the draft length as the policies of
:mod:`treeopt.adaptive.policies` do: one entry per controller, with the files it was read from.

SGLang and vLLM were read from their released wheels (PyPI), TensorRT-LLM from its repository
(no wheel of it is on PyPI), as the entries say.

>>> [c.engine for c in CONTROLLERS]
['sglang', 'vllm', 'trtllm', 'trtllm']
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Controller:
    """One engine's step controller as treeopt replays it."""

    engine: str
    policy: str  # the class in treeopt.adaptive.policies
    versions: str  # the releases that decide exactly so
    source: str  # where the rule was read
    notes: tuple[str, ...] = ()


CONTROLLERS: tuple[Controller, ...] = (
    Controller(
        "sglang", "SGLangPolicy", "0.5.14 – 0.5.23 (the newest on PyPI)",
        "sglang/srt/speculative/adaptive_spec_params.py (AdaptiveStepSlot, "
        "AdaptiveSpeculativeParams, _load_adaptive_config) and adaptive_runtime_state.py, "
        "0.5.23 wheel",
        ("0.5.11 – 0.5.12: one flat slot, default [1, 3, 7], steps ≥ 1, the up-walk also after "
         "a down-walk: not replayed",
         "0.5.13: slots by batch size, steps ≥ 1, default {1: [1,3,7], 8: [1,3], 32: [1]}",
         "0.5.14 – 0.5.19: the rule replayed here; default slot 1 is [1, 3, 7]",
         "0.5.20 – 0.5.23: default slot 1 is [1, 3, 5, 7]",
         "the throughput-aware strategy (PR #28045) and context buckets (PR #31716) are not "
         "released",
         "--speculative-eagle-topk must be 1: chains only")),
    Controller(
        "vllm", "VLLMSchedule", "0.24.0 – 0.33.0",
        "vllm/v1/spec_decode/dynamic/utils.py (validate_and_normalize_dynamic_sd_schedule, "
        "build_dynamic_sd_schedule_lookup) and Scheduler.schedule in "
        "vllm/v1/core/sched/scheduler.py",
        ("a table, no feedback; the draft length follows the batch size of the drafting step",
         "0.26.0+: dropped under data parallelism; adaptive K (PR #47111) is not released")),
    Controller(
        "trtllm", "TRTLLMSchedule(reading='drafter')", "release 1.2 (two-model drafters, NGram)",
        "tensorrt_llm/_torch/speculative/drafter.py (Drafter.get_draft_len_for_batch_size) and "
        "llmapi/llm_args.py (validate_draft_len_schedule_and_sort), PR #8194",
        ("keys are lower thresholds; key 1 is required and equals max_draft_len",)),
    Controller(
        "trtllm", "TRTLLMSchedule(reading='one-model')", "main after PR #10860 (2026-03-13); "
        "the first tagged release is not confirmed",
        "tensorrt_llm/_torch/speculative/utils.py (get_draft_len_for_batch_size)",
        ("keys are upper bounds; above the largest key speculation is off",
         "the smallest key's value equals max_draft_len; exclusive with max_concurrency")),
)
