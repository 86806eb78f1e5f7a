"""TensorRT-LLM's ``draft_len_schedule`` (PyTorch backend): its one encoder, and how each
version reads it.

The schedule maps batch sizes to draft lengths; the versions read its keys differently:

| reading       | versions                   | a key is…                 | above the largest key |
|---------------|----------------------------|---------------------------|-----------------------|
| ``release-1.2`` | release 1.2 (PR #8194)   | a lower threshold: the    | the largest key's     |
|               |                            | largest key ≤ the batch   | length                |
|               |                            | size applies; key 1 is    |                       |
|               |                            | required                  |                       |
| ``main``      | main after PR #10860       | an upper end: the         | 0 (speculation off)   |
|               | (2026-03-13)               | smallest key ≥ the batch  |                       |
|               |                            | size applies              |                       |

Release 1.2: ``Drafter.get_draft_len_for_batch_size`` in tensorrt_llm/_torch/speculative/
drafter.py (``bisect_right``, the largest threshold ≤ the batch size) and
``validate_draft_len_schedule_and_sort`` in tensorrt_llm/llmapi/llm_args.py (keys ≥ 1, lengths
≥ 0, key 1 required and valued ``max_draft_len``, no length above it). Main, read at
011d0933dcb5e592f5fa2626beaf42a96324c578 (tensorrt_llm/_torch/speculative/utils.py,
``get_draft_len_for_batch_size``: ``bisect_left``, the first key ≥ the batch size; above every
key ``min_draft_len``, 0 unless the drafter keeps state) and
0004396720054fd8e205cbf616f21f0b57c6b412 (llm_args.py: the smallest key valued
``max_draft_len``; exclusive with ``max_concurrency``). The first tagged release with main's
reading is not confirmed; :data:`DEFAULT_READING` is the newest stable release's.

>>> s = encode([(1, 2, 4), (3, 8, 2)], reading="release-1.2")
>>> dict(s.schedule), s.max_draft_len
({1: 4, 3: 2, 9: 0}, 4)
>>> dict(encode([(1, 2, 4), (3, 8, 2)], reading="main").schedule)
{2: 4, 8: 2}
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from treeopt.engines.rules import Controller, EngineFile
from treeopt.errors import TreeoptError

READINGS: tuple[str, ...] = ("release-1.2", "main")
DEFAULT_READING = "release-1.2"
CONTROLLERS: tuple[Controller, ...] = (
    Controller(
        "trtllm", "TRTLLMSchedule(reading='release-1.2')",
        "release 1.2 (two-model drafters, NGram)",
        "tensorrt_llm/_torch/speculative/drafter.py (Drafter.get_draft_len_for_batch_size) and "
        "llmapi/llm_args.py (validate_draft_len_schedule_and_sort), PR #8194",
        ("keys are lower thresholds; key 1 is required and equals max_draft_len",)),
    Controller(
        "trtllm", "TRTLLMSchedule(reading='main')", "main after PR #10860 (2026-03-13); "
        "the first tagged release is not confirmed",
        "tensorrt_llm/_torch/speculative/utils.py (get_draft_len_for_batch_size) at 011d0933",
        ("keys are upper ends; above the largest key speculation is off",
         "the smallest key's value equals max_draft_len; exclusive with max_concurrency",
         "vanilla MTP with more than one MTP module ignores the schedule")),
)


def check_reading(reading: str) -> str:
    """``reading`` if it is one of :data:`READINGS`; anything else is refused."""
    if reading not in READINGS:
        raise TreeoptError(f"reading must be one of {', '.join(READINGS)}, got {reading!r}")
    return reading


@dataclass(frozen=True)
class DraftLenSchedule:
    """A ``draft_len_schedule`` with its ``max_draft_len``, as TensorRT-LLM's ``reading``
    validates and reads it (the batch size is the round's active requests).

    >>> s = DraftLenSchedule(((1, 4), (4, 2), (8, 0)), max_draft_len=4)
    >>> [s.lookup(b) for b in (1, 3, 4, 7, 8, 20)]
    [4, 4, 2, 2, 0, 0]
    >>> up = DraftLenSchedule(((4, 4), (8, 2), (32, 1)), max_draft_len=4, reading="main")
    >>> [up.lookup(b) for b in (1, 4, 5, 8, 9, 32, 33)]
    [4, 4, 2, 2, 1, 1, 0]
    """

    schedule: tuple[tuple[int, int], ...]
    max_draft_len: int
    reading: str = DEFAULT_READING

    def __post_init__(self) -> None:
        check_reading(self.reading)
        pairs = tuple(sorted((int(k), int(v)) for k, v in self.schedule))
        if not pairs:
            raise TreeoptError("draft_len_schedule is empty")
        for key, value in pairs:
            if key < 1:
                raise TreeoptError(f"draft_len_schedule: batch size threshold must be ≥ 1, got "
                                   f"{key}")
            if not 0 <= value <= self.max_draft_len:
                raise TreeoptError(f"draft_len_schedule: draft length {value} at batch size "
                                   f"{key} must be in 0 … max_draft_len ({self.max_draft_len})")
        if self.reading == "release-1.2" and pairs[0][0] != 1:
            raise TreeoptError("draft_len_schedule must include batch_size=1 (release 1.2 "
                               "refuses a schedule without it)")
        if pairs[0][1] != self.max_draft_len:
            raise TreeoptError(f"draft_len_schedule: the value at its smallest key {pairs[0][0]} "
                               f"is {pairs[0][1]}; it must equal max_draft_len "
                               f"({self.max_draft_len})")
        object.__setattr__(self, "schedule", pairs)

    @property
    def label(self) -> str:
        return f"trtllm draft_len_schedule {dict(self.schedule)} ({self.reading})"

    def lookup(self, batch: int) -> int:
        """The draft length TensorRT-LLM drafts at ``batch`` active requests."""
        if batch < 1:
            raise TreeoptError(f"batch size {batch}: must be ≥ 1")
        keys = [k for k, _ in self.schedule]
        if self.reading == "release-1.2":
            return self.schedule[bisect.bisect_right(keys, batch) - 1][1]
        i = bisect.bisect_left(keys, batch)
        return self.schedule[i][1] if i < len(keys) else 0

    def as_dict(self) -> dict[int, int]:
        return dict(self.schedule)


def encode(ranges: Sequence[tuple[int, int | None, int]], *,
           reading: str = DEFAULT_READING) -> DraftLenSchedule:
    """The one encoder of ``draft_len_schedule``: ``ranges`` (lo, hi, draft length), contiguous
    from batch size 1, as ``reading`` reads keys; above the last range speculation is off, or
    the last range's length holds on where its hi is None (``release-1.2`` only: ``main``
    switches speculation off above its largest key). Neighbours of one length merge; a schedule
    TensorRT-LLM refuses (a length above the first range's, which is ``max_draft_len``) is
    refused in one line.

    >>> encode([(1, 1, 2), (2, 4, 3)])
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: TensorRT-LLM's draft_len_schedule needs its longest draft at its smallest batch size (max_draft_len), but batch sizes 2-4 draft 3, more than batch size 1's 2
    >>> dict(encode([(1, 4, 3), (5, None, 1)]).schedule)
    {1: 3, 5: 1}
    """
    check_reading(reading)
    rows = [(int(lo), None if hi is None else int(hi), int(k)) for lo, hi, k in ranges]
    if not rows or rows[0][0] != 1:
        raise TreeoptError("draft_len_schedule ranges must start at batch size 1")
    for (_, hi, _), (lo, _, _) in zip(rows[:-1], rows[1:], strict=True):
        if hi is None or lo != hi + 1:
            raise TreeoptError("draft_len_schedule ranges must be contiguous (each starting "
                               "one above the last)")
    first = rows[0][2]
    for lo, hi, k in rows[1:]:
        if k > first:
            span = f"{lo}-{hi}" if hi != lo else str(lo)
            raise TreeoptError(f"TensorRT-LLM's draft_len_schedule needs its longest draft at "
                               f"its smallest batch size (max_draft_len), but batch sizes {span} "
                               f"draft {k}, more than batch size 1's {first}")
    merged: list[list[Any]] = []
    for lo, hi, k in rows:
        if merged and merged[-1][2] == k:
            merged[-1][1] = hi
        else:
            merged.append([lo, hi, k])
    if reading == "release-1.2":
        pairs = [(lo, k) for lo, _, k in merged]
        last_hi, last_k = merged[-1][1], merged[-1][2]
        if last_hi is not None and last_k:
            pairs.append((last_hi + 1, 0))
    else:
        if merged[-1][1] is None:
            raise TreeoptError("TensorRT-LLM main switches speculation off above the largest "
                               "key: give the last range's largest batch size")
        pairs = [(hi, k) for _, hi, k in merged]
    return DraftLenSchedule(tuple(pairs), max_draft_len=first, reading=reading)


def schedule_json(s: DraftLenSchedule) -> dict[str, Any]:
    """The schedule's keys as a report or selection records them (keys as strings)."""
    return {"reading": s.reading, "max_draft_len": s.max_draft_len,
            "draft_len_schedule": {str(k): v for k, v in s.schedule}}


def schedule_or_refusal(ranges: Sequence[tuple[int, int | None, int]], *,
                        reading: str = DEFAULT_READING) -> dict[str, Any]:
    """:func:`schedule_json` of :func:`encode`, or ``{"reading", "refused": why}`` where
    TensorRT-LLM takes no schedule of these ranges."""
    try:
        return schedule_json(encode(ranges, reading=reading))
    except TreeoptError as exc:
        return {"reading": reading, "refused": str(exc)}


def schedule_yaml_lines(s: DraftLenSchedule, *, indent: str = "  ") -> list[str]:
    """The schedule as YAML lines under ``speculative_config``."""
    return [f"{indent}draft_len_schedule:", *(f"{indent}  {k}: {v}" for k, v in s.schedule)]


def adaptive_file(s: DraftLenSchedule, path: str, *, draft_model: str = "DRAFT",
                  decoding_type: str = "Eagle3") -> EngineFile:
    """TensorRT-LLM's LLM-API options (PyTorch backend) of ``s`` at ``path``, and the flag that
    reads them (``speculative_model_dir``: the name releases before December 2025 read, which
    main still takes as an alias of ``speculative_model``).

    >>> print(adaptive_file(DraftLenSchedule(((1, 3), (8, 1)), max_draft_len=3), "o.yaml").text)
    speculative_config:
      decoding_type: Eagle3
      speculative_model_dir: "DRAFT"
      max_draft_len: 3
      draft_len_schedule:
        1: 3
        8: 1
    <BLANKLINE>
    """
    lines = ["speculative_config:", f"  decoding_type: {decoding_type}",
             f"  speculative_model_dir: {json.dumps(draft_model)}",
             f"  max_draft_len: {s.max_draft_len}", *schedule_yaml_lines(s)]
    return EngineFile("trtllm", "\n".join(lines) + "\n", f"--extra_llm_api_options {path}")
