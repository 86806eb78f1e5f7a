"""Timing shared by the profilers: warm-up, interleaved repeats, CUDA events or perf_counter.

Configurations are measured round-robin — every round runs each configuration once, starting at a
rotating offset — so clock or thermal drift spreads over all of them instead of biasing the last.
On CUDA each call is bracketed by events and the round is synchronised once at its end; on the CPU
each call is timed with ``perf_counter``. Out-of-memory stops that configuration only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class Call:
    """One configuration: ``run`` is timed, ``reset`` (untimed) restores state after it."""

    run: Callable[[], object]
    reset: Callable[[], object] | None = None


def summarize(ms: list[float]) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile of the repeats, in milliseconds.

    >>> summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    (3.0, 1.4, 4.6)
    """
    arr = np.asarray(ms, dtype=np.float64)
    return (round(float(np.median(arr)), 6), round(float(np.percentile(arr, 10)), 6),
            round(float(np.percentile(arr, 90)), 6))


def is_out_of_memory(exc: BaseException) -> bool:
    """True for CUDA (or CPU allocator) out-of-memory errors."""
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def oom_message(exc: BaseException) -> str:
    return "out of memory: " + (str(exc).strip().splitlines() or ["(no message)"])[0][:200]


def free_memory(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def interleaved(calls: dict[Hashable, Call], *, repeats: int, warmup: int,
                device: str) -> dict[Hashable, list[float] | str]:
    """Milliseconds of ``repeats`` timed runs per configuration, or its out-of-memory message."""
    result: dict[Hashable, list[float] | str] = {key: [] for key in calls}
    live = list(calls)
    for key in list(live):
        try:
            for _ in range(warmup):
                _once(calls[key])
        except RuntimeError as exc:
            _drop_out_of_memory(exc, key, result, live, device)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize(device)
    for round_ in range(repeats):
        order = live[round_ % len(live):] + live[:round_ % len(live)] if live else []
        pending: list[tuple[Hashable, object]] = []
        for key in order:
            try:
                pending.append((key, _timed(calls[key], cuda)))
            except RuntimeError as exc:
                _drop_out_of_memory(exc, key, result, live, device)
        if cuda:
            torch.cuda.synchronize(device)
        for key, handle in pending:
            if isinstance(result[key], list):
                result[key].append(_elapsed(handle))
    return result


def _drop_out_of_memory(exc: RuntimeError, key: Hashable, result: dict[Hashable, Any],
                        live: list[Hashable], device: str) -> None:
    """Record an out-of-memory configuration and stop timing it; re-raise any other error."""
    if not is_out_of_memory(exc):
        raise exc
    result[key] = oom_message(exc)
    live.remove(key)
    free_memory(device)


def _once(call: Call) -> None:
    call.run()
    if call.reset is not None:
        call.reset()


def _timed(call: Call, cuda: bool) -> object:
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call.run()
        end.record()
        handle: object = (start, end)
    else:
        t0 = time.perf_counter()
        call.run()
        handle = (time.perf_counter() - t0) * 1e3
    if call.reset is not None:
        call.reset()
    return handle


def _elapsed(handle: object) -> float:
    if isinstance(handle, tuple):
        start, end = handle
        return float(start.elapsed_time(end))
    return float(handle)  # type: ignore[arg-type]
