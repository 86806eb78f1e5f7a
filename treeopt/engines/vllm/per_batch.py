"""vLLM's draft length per batch size: the ``num_speculative_tokens_per_batch_size`` table
(0.24.0 and later), how vLLM reads it, and the table vLLM's own profiler rule picks.

The table is ``[lo, hi, K]`` rows. vLLM (vllm/v1/spec_decode/dynamic/utils.py,
``validate_and_normalize_dynamic_sd_schedule`` and ``build_dynamic_sd_schedule_lookup``, read
in the 0.24.0 – 0.33.0 wheels and on main at 14b450ca590cbff96e7004bdb147a5d3acf5a4f6) refuses
rows that are not positive, ``lo > hi``, a negative K, overlapping rows or a first row not
starting at 1; it fills a dense table for batch sizes 1 … ``max_num_seqs``: a row's K over its
range, a gap and everything above the last row carry the row before, every K capped at
``num_speculative_tokens``. (Main also takes 5-item rows with context ranges; treeopt writes
3-item rows.) tests/test_engine_wheels.py runs :func:`check_rows` and :class:`BatchTable` against
the 0.33.0 wheel's own two functions.

The profiler rule (vllm/v1/spec_decode/dynamic/generate_config.py at
116e76b5f78ff176f834811fbe93d5b1f33c78c7 measures; ``DynamicSpeculativeDecodingManager`` in
manager.py at 594dc0f84996b72c38a3d58ff36d63cd751d1de9 picks): per-position acceptance rates
``a_i`` and the median inter-token latency ``itl[b][k]`` at batch sizes {1, 4, 16, 64, 256} ×
K {0 (no speculation), 1, 3, 5}. For every batch size b in 1 … the largest measured, the
latencies are interpolated linearly between the nearest measured batch sizes below and above
(the nearest one beyond either end), then in K between the nearest measured K; vLLM picks the
K of 0 … len(a) with the largest ``(1 + a_0 + … + a_{K-1}) / itl(b, K)``, the smaller K on a tie.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from treeopt.engines.rules import Controller, EngineFile
from treeopt.engines.vllm.forms import config_text, launch_flag
from treeopt.errors import TreeoptError

PROFILER_BATCH_SIZES: tuple[int, ...] = (1, 4, 16, 64, 256)  # generate_config.py's defaults
PROFILER_KS: tuple[int, ...] = (1, 3, 5)
Row = tuple[int, int, int]

CONTROLLER = Controller(
    "vllm", "VLLMSchedule", "0.24.0 – 0.33.0",
    "vllm/v1/spec_decode/dynamic/utils.py (validate_and_normalize_dynamic_sd_schedule, "
    "build_dynamic_sd_schedule_lookup) and Scheduler.schedule in vllm/v1/core/sched/scheduler.py",
    ("a table, no feedback; the draft length follows the batch size of the drafting step",
     "0.26.0+: dropped under data parallelism; adaptive K (PR #47111) is not released"))


def check_rows(rows: Sequence[Sequence[int]]) -> tuple[Row, ...]:
    """The rows sorted, refused as vLLM refuses them (one line naming the row).

    >>> check_rows([(5, 8, 2), (1, 4, 3)])
    ((1, 4, 3), (5, 8, 2))
    >>> check_rows([(2, 4, 3)])
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: num_speculative_tokens_per_batch_size: the first batch-size range must start at 1 so every batch size has a draft length
    """
    where = "num_speculative_tokens_per_batch_size"
    if not rows:
        raise TreeoptError(f"{where} must be a non-empty list of [lo, hi, k]")
    out = []
    for entry in rows:
        if len(entry) != 3:
            raise TreeoptError(f"{where} entry {list(entry)} must have exactly 3 items "
                               "[lo, hi, k]")
        lo, hi, k = (int(x) for x in entry)
        if lo <= 0 or hi <= 0:
            raise TreeoptError(f"{where} batch-size range ({lo}, {hi}) must be positive")
        if lo > hi:
            raise TreeoptError(f"{where} batch-size range ({lo}, {hi}) has lo > hi")
        if k < 0:
            raise TreeoptError(f"{where} draft length {k} of ({lo}, {hi}) must be ≥ 0")
        out.append((lo, hi, k))
    out.sort()
    for (_, hi, _), (lo, _, _) in zip(out[:-1], out[1:], strict=True):
        if lo <= hi:
            raise TreeoptError(f"{where} batch-size ranges must be non-overlapping and sorted")
    if out[0][0] != 1:
        raise TreeoptError(f"{where}: the first batch-size range must start at 1 so every "
                           "batch size has a draft length")
    return tuple(out)


@dataclass(frozen=True)
class BatchTable:
    """A ``num_speculative_tokens_per_batch_size`` table as vLLM reads it, with the server's
    ``num_speculative_tokens`` (the cap of every K) and ``max_num_seqs``.

    >>> t = BatchTable(((1, 2, 5), (5, 8, 2)), num_speculative_tokens=4)
    >>> [t.lookup(n) for n in (1, 2, 3, 4, 5, 8, 9)]
    [4, 4, 4, 4, 2, 2, 2]
    """

    ranges: tuple[Row, ...]
    num_speculative_tokens: int
    max_num_seqs: int = 256

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranges", check_rows(self.ranges))
        if self.num_speculative_tokens <= 0:
            raise TreeoptError(f"num_speculative_tokens must be > 0 (the cap of every k), got "
                               f"{self.num_speculative_tokens}")
        if self.max_num_seqs <= 0:
            raise TreeoptError(f"max_num_seqs must be > 0, got {self.max_num_seqs}")

    @property
    def label(self) -> str:
        return f"vllm per-batch-size {self.rows()}"

    def lookup(self, batch: int) -> int:
        """The dense table's entry at ``batch`` (1 … ``max_num_seqs``)."""
        if not 1 <= batch <= self.max_num_seqs:
            raise TreeoptError(f"batch size {batch} is outside 1 … max_num_seqs "
                               f"({self.max_num_seqs})")
        k = 0
        for lo, _, value in self.ranges:
            if lo > batch:
                break
            k = value
        return min(self.num_speculative_tokens, k)

    def rows(self) -> list[list[int]]:
        """The table as the config's list of ``[lo, hi, k]``."""
        return [list(r) for r in self.ranges]


def table_rows(ranges: Sequence[Sequence[int]], *, off_above: bool) -> list[list[int]]:
    """The one writer of ``num_speculative_tokens_per_batch_size``: ``ranges`` (lo, hi, k) as
    vLLM's rows; with ``off_above`` a row of 0 just above the last range switches speculation off
    for every larger batch (vLLM carries the last row's K to them otherwise).

    >>> table_rows([(1, 2, 3), (3, 8, 1)], off_above=True)
    [[1, 2, 3], [3, 8, 1], [9, 9, 0]]
    >>> table_rows([(1, 2, 3), (3, 8, 1)], off_above=False)
    [[1, 2, 3], [3, 8, 1]]
    """
    rows = [list(r) for r in check_rows(ranges)]
    if off_above and rows[-1][2]:
        rows.append([rows[-1][1] + 1, rows[-1][1] + 1, 0])
    return rows


def per_batch_config(base: Mapping[str, Any], ranges: Sequence[Sequence[int]], *,
                     off_above: bool) -> dict[str, Any]:
    """``base`` (a config of :mod:`treeopt.engines.vllm.forms`) switched by batch size: its
    ``num_speculative_tokens`` the largest K, the table beside it (vLLM 0.24.0 and later).

    >>> per_batch_config({"method": "ngram", "prompt_lookup_max": 3}, [(1, 4, 3), (5, 8, 1)],
    ...                  off_above=False)
    {'method': 'ngram', 'prompt_lookup_max': 3, 'num_speculative_tokens': 3, 'num_speculative_tokens_per_batch_size': [[1, 4, 3], [5, 8, 1]]}
    """
    rows = table_rows(ranges, off_above=off_above)
    k_max = max(r[2] for r in rows)
    if k_max < 1:
        raise TreeoptError("num_speculative_tokens_per_batch_size drafts nothing at any batch "
                           "size: run vLLM without speculation")
    return {**base, "num_speculative_tokens": k_max,
            "num_speculative_tokens_per_batch_size": rows}


def adaptive_file(table: BatchTable, path: str, *, method: str = "eagle",
                  draft_model: str = "DRAFT") -> EngineFile:
    """vLLM's speculative config (0.24.0+) of ``table`` at ``path``, and the ``vllm serve`` flag
    that reads it.

    >>> f = adaptive_file(BatchTable(((1, 3, 4), (4, 4, 2)), num_speculative_tokens=4), "s.json")
    >>> f.text, f.flags
    ('{"method": "eagle", "model": "DRAFT", "num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 3, 4], [4, 4, 2]]}\\n', '--speculative-config "$(cat s.json)"')
    """
    doc = {"method": method, "model": draft_model,
           "num_speculative_tokens": table.num_speculative_tokens,
           "num_speculative_tokens_per_batch_size": table.rows()}
    return EngineFile("vllm", config_text(doc) + "\n", launch_flag(path))


def table_json(table: BatchTable) -> dict[str, Any]:
    """The table's keys as a report records them."""
    return {"num_speculative_tokens": table.num_speculative_tokens,
            "num_speculative_tokens_per_batch_size": table.rows()}


# ----- the profiler rule ----------------------------------------------------------------------
def _between(points: Sequence[int], x: int) -> tuple[int, int]:
    """The nearest measured points at or below and at or above ``x`` (the end beyond either)."""
    below = [p for p in points if p <= x]
    above = [p for p in points if p >= x]
    return (below[-1] if below else points[0]), (above[0] if above else points[-1])


def _linear(x: int, x0: int, x1: int, y0: float, y1: float) -> float:
    return y0 if x1 == x0 else y0 + (x - x0) / (x1 - x0) * (y1 - y0)


def profiler_itl(itl_ms: Mapping[int, Mapping[int, float]], batch: int, k: int) -> float:
    """The inter-token latency vLLM's rule uses at ``batch`` and ``k``: linear between the
    measured batch sizes, then between the measured K.

    >>> profiler_itl({1: {0: 10.0, 1: 12.0, 3: 16.0}, 4: {0: 20.0, 1: 30.0, 3: 40.0}}, 2, 2)
    21.0
    """
    sizes = sorted(itl_ms)
    lo, hi = _between(sizes, batch)
    ks = sorted(itl_ms[lo])
    if k > ks[-1]:
        raise TreeoptError(f"K {k} is above the largest measured K {ks[-1]}: vLLM's rule "
                           "interpolates between measured K only")
    k0, k1 = _between(ks, k)
    at = {b: _linear(k, k0, k1, itl_ms[b][k0], itl_ms[b][k1]) for b in (lo, hi)}
    return _linear(batch, lo, hi, at[lo], at[hi])


def check_profile(acceptance_rate_per_pos: Sequence[float],
                  itl_ms: Mapping[int, Mapping[int, float]]) -> None:
    """Refuse what ``DynamicSpeculativeDecodingManager`` asserts: rates in [0, 1], at least one;
    batch size 1 measured; every batch size with K 0 and 1 and the same K throughout."""
    if not acceptance_rate_per_pos:
        raise TreeoptError("acceptance_rate_per_pos must hold at least one position")
    if any(not 0 <= a <= 1 for a in acceptance_rate_per_pos):
        raise TreeoptError(f"acceptance_rate_per_pos {list(acceptance_rate_per_pos)}: every rate "
                           "must be in [0, 1]")
    if 1 not in itl_ms:
        raise TreeoptError(f"batch size 1 is not measured (measured: {sorted(itl_ms)})")
    ks = sorted(itl_ms[1])
    for b, row in itl_ms.items():
        if b < 1 or 0 not in row or 1 not in row or sorted(row) != ks:
            raise TreeoptError(f"batch size {b}: measure K 0 and 1 and the same K as batch 1 "
                               f"({ks}), got {sorted(row)}")


def profiler_choice(acceptance_rate_per_pos: Sequence[float],
                    itl_ms: Mapping[int, Mapping[int, float]]) -> dict[int, int]:
    """The K vLLM's profiler rule picks at every batch size 1 … the largest measured.

    >>> profiler_choice([0.8, 0.5], {1: {0: 10.0, 1: 11.0, 2: 12.0}, 3: {0: 10.0, 1: 20.0, 2: 30.0}})
    {1: 2, 2: 1, 3: 0}
    """
    check_profile(acceptance_rate_per_pos, itl_ms)
    out = {}
    for b in range(1, max(itl_ms) + 1):
        best, pick = -1.0, 0
        for k in range(len(acceptance_rate_per_pos) + 1):
            goodput = (1 + sum(acceptance_rate_per_pos[:k])) / profiler_itl(itl_ms, b, k)
            if goodput > best:
                best, pick = goodput, k
        out[b] = pick
    return out


def rows_of(choice: Mapping[int, int]) -> list[list[int]]:
    """A dense batch → K mapping (1 … N) as table rows, equal neighbours merged.

    >>> rows_of({1: 2, 2: 1, 3: 1, 4: 0})
    [[1, 1, 2], [2, 3, 1], [4, 4, 0]]
    """
    rows: list[list[int]] = []
    for b in sorted(choice):
        if rows and rows[-1][2] == choice[b] and rows[-1][1] == b - 1:
            rows[-1][1] = b
        else:
            rows.append([b, b, choice[b]])
    return rows


def profiler_table(acceptance_rate_per_pos: Sequence[float],
                   itl_ms: Mapping[int, Mapping[int, float]]) -> list[list[int]]:
    """The ``num_speculative_tokens_per_batch_size`` rows of vLLM's profiler rule."""
    return rows_of(profiler_choice(acceptance_rate_per_pos, itl_ms))


def acceptance_rate_per_pos(accepted: Sequence[int], k: int) -> list[float]:
    """vLLM's per-position acceptance (``num_accepted_tokens_per_pos / num_draft_tokens_per_pos``)
    of steps that each drafted ``k`` tokens and accepted ``accepted[j]`` of them: the share of
    steps that accepted at least i + 1.

    >>> acceptance_rate_per_pos([0, 1, 3, 2], 3)
    [0.75, 0.5, 0.25]
    """
    if not accepted:
        raise TreeoptError("no steps to measure acceptance on")
    return [sum(1 for a in accepted if a > i) / len(accepted) for i in range(k)]
