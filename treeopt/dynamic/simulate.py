"""Accepted lengths of every dynamic setting, from calibration text.

At every position of a calibration sequence (prompt + the base model's greedy continuation),
the drafter runs dynamic drafting on the true prefix (:meth:`~treeopt.drafters.eagle.
EagleDrafter.rank_dynamic`: batched over positions, one pass per level) and records where the
true continuation stands in the candidate pool. One run per top-k gives every number of steps
up to ``steps`` (a tree of fewer steps is the first levels of the pool) and every number of
draft tokens (a threshold on the same order): a step with settings (k, s, N) accepts the root
plus every true node whose place in the s-level pool is below N − 1. A :class:`DynamicTrace`
holds that table (``treeopt.dynamic-trace/1``, an ``.npz`` read without pickle), which
:func:`treeopt.decoding.dynamic_rank_pass.simulate_dynamic` records.

The growth replayed is SGLang's EAGLE top-k tree and TensorRT-LLM's EAGLE-3 dynamic tree
alike (:func:`treeopt.engines.trtllm.configs.eagle3_dynamic_tree_config`), so one trace prices
both engines' settings.

Two readings, as for static trees: the mean over positions (E[L] at a random position), and the
walk, which starts at each sequence's first position and jumps by the accepted length, exactly
as live decoding steps through the same text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError
from treeopt.files import atomic_write
from treeopt.model.accept_stats import AcceptStats
from treeopt.model.dynamic_settings import DynamicSettings
from treeopt.model.runs import past_run_end

FORMAT = "treeopt.dynamic-trace/1"


@dataclass(frozen=True, eq=False)
class DynamicTrace:
    """Pool places ``[positions, S, S]`` of one top-k (:meth:`EagleDrafter.rank_dynamic`:
    ``[t, s-1, i-1]``, -1 where the true node at depth i is not drafted), positions grouped
    into sequences of ``lengths``."""

    topk: int
    places: npt.NDArray[np.int16]
    lengths: tuple[int, ...]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        p = self.places
        if self.topk < 1:
            raise TreeoptError(f"dynamic trace: top-k must be ≥ 1, got {self.topk}")
        if p.ndim != 3 or p.shape[1] != p.shape[2] or not p.shape[1]:
            raise TreeoptError(f"dynamic trace: places must be [positions, S, S] with S ≥ 1, "
                               f"got {p.shape}")
        if not p.shape[0]:
            raise TreeoptError("dynamic trace: no positions (nothing to measure acceptance on)")
        if any(n < 1 for n in self.lengths) or sum(self.lengths) != p.shape[0]:
            raise TreeoptError(f"dynamic trace: sequence lengths must be ≥ 1 and sum to the "
                               f"{p.shape[0]} positions, got {sum(self.lengths)} over "
                               f"{len(self.lengths)} sequences")
        if int(p.min()) < -1:
            raise TreeoptError(f"dynamic trace: pool place {int(p.min())}; a place is ≥ 0, or "
                               "-1 where the true node is not drafted")

    @property
    def steps(self) -> int:
        return self.places.shape[1]

    def settings_ok(self, s: DynamicSettings) -> None:
        if s.topk != self.topk or s.steps > self.steps:
            raise TreeoptError(f"{s.label}: this dynamic trace is top-k {self.topk} with up to "
                               f"{self.steps} steps")

    def accepted(self, s: DynamicSettings) -> npt.NDArray[np.int64]:
        """Tokens a step accepts at every position ``[positions]``: the root plus the true
        nodes kept.

        >>> places = np.array([[[0, -1], [0, 3]], [[-1, -1], [-1, -1]]], dtype=np.int16)
        >>> tr = DynamicTrace(2, places, (2,))
        >>> tr.accepted(DynamicSettings(2, 2, 5)).tolist(), tr.accepted(DynamicSettings(2, 2, 4)).tolist()
        ([3, 1], [2, 1])
        """
        self.settings_ok(s)
        row = self.places[:, s.steps - 1, : s.steps].astype(np.int64)  # [positions, s]
        kept = (row >= 0) & (row < s.nodes)
        return 1 + np.cumprod(kept, axis=1).sum(axis=1)

    def stats(self, s: DynamicSettings) -> AcceptStats:
        """Accepted lengths at every position (E[L] over positions), per sequence."""
        lengths = self.accepted(s)
        ends = np.cumsum(self.lengths)
        per = [(int(lengths[e - n: e].sum()), n) for e, n in zip(ends, self.lengths, strict=True)]
        return AcceptStats.of(lengths, sequences=per)

    def walk(self, s: DynamicSettings) -> AcceptStats:
        """The steps live decoding takes through each sequence: from its first position,
        jumping by the accepted length (the last step of a sequence may reach past its end)."""
        lengths = self.accepted(s)
        steps, per, at = [], [], 0
        for n in self.lengths:
            t, mine = 0, []
            while t < n:
                mine.append(int(lengths[at + t]))
                t += mine[-1]
            steps += mine
            per.append((sum(mine), len(mine)))
            at += n
        return AcceptStats.of(steps, sequences=per)

    def as_run(self, new_tokens: int, sequences: int | None = None) -> DynamicTrace:
        """The first ``sequences`` sequences (all by default) as live runs of ``new_tokens``
        new tokens see them (:func:`treeopt.model.runs.as_runs` for rank traces): the positions
        their steps start at, the first ``new_tokens - 1`` (a sequence that ended earlier, at
        its EOS, as it ended), and a true node at or past the run's last token not drafted.

        >>> tr = DynamicTrace(1, np.zeros((5, 2, 2), np.int16), (3, 2))
        >>> run = tr.as_run(3)
        >>> run.lengths, run.places[:, 1].tolist()
        ((2, 2), [[0, -1], [-1, -1], [0, -1], [-1, -1]])
        """
        if new_tokens < 2:
            raise TreeoptError(f"dynamic trace: a run needs ≥ 2 new tokens to take a step, "
                               f"got {new_tokens}")
        count = len(self.lengths) if sequences is None else sequences
        if not 1 <= count <= len(self.lengths):
            raise TreeoptError(f"dynamic trace: {count} sequences asked, it holds "
                               f"{len(self.lengths)}")
        starts = np.concatenate([[0], np.cumsum(self.lengths)])
        kept = [min(n, new_tokens - 1) for n in self.lengths[:count]]
        places = np.concatenate([self.places[a: a + n]
                                 for a, n in zip(starts[:count], kept, strict=True)])
        missed = np.concatenate([past_run_end(n, self.steps, new_tokens) for n in kept])
        places[np.broadcast_to(missed[:, None, :], places.shape)] = -1  # [t, every s, depth]
        return DynamicTrace(self.topk, places, tuple(kept), self.meta)

    def save(self, path: str | os.PathLike[str]) -> None:
        def write(tmp: Path) -> None:
            with open(tmp, "wb") as f:
                np.savez_compressed(f, places=self.places, topk=np.asarray(self.topk),
                                    lengths=np.asarray(self.lengths, np.int64),
                                    format=np.asarray(FORMAT), meta=np.asarray(_json(self.meta)))

        atomic_write(path, write)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DynamicTrace:
        """The trace at ``path``; a file that is not a whole dynamic trace of integer places
        (truncated, of another format, with NaN or negative places) is refused, naming it."""
        import json
        import zipfile
        import zlib

        try:
            with np.load(path, allow_pickle=False) as z:
                arrays = {k: z[k] for k in ("format", "places", "topk", "lengths", "meta")}
            meta = json.loads(str(arrays["meta"]))
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise TreeoptError(f"{path}: not a dynamic trace ({exc})") from None
        if str(arrays["format"]) != FORMAT:
            raise TreeoptError(f"{path}: format {str(arrays['format'])!r}, expected {FORMAT}")
        for name in ("places", "topk", "lengths"):
            if arrays[name].dtype.kind not in "iu":
                raise TreeoptError(f"{path}: '{name}' must hold integers, not "
                                   f"{arrays[name].dtype}")
        places = arrays["places"]
        if places.size and not -1 <= int(places.min()) <= int(places.max()) < 2 ** 15:
            raise TreeoptError(f"{path}: pool places run {int(places.min())} … "
                               f"{int(places.max())}; a place is in 0 … 32767, or -1 where the "
                               "true node is not drafted")
        if arrays["topk"].size != 1:
            raise TreeoptError(f"{path}: 'topk' must be one integer, got {arrays['topk'].size}")
        try:
            return cls(int(arrays["topk"]), places.astype(np.int16),
                       tuple(int(x) for x in arrays["lengths"].ravel()),
                       meta if isinstance(meta, dict) else {})
        except TreeoptError as exc:
            raise TreeoptError(f"{path}: {exc}") from None


def _json(doc: dict[str, Any]) -> str:
    import json

    return json.dumps(doc, sort_keys=True)
