"""RankTrace: per calibration position and draft head, the rank of the base model's greedy token.

``ranks[t, k]`` is the rank of the true token x_{t+2+k} among head k's candidates at position t
(head k fed what it would see during decoding if the path so far were correct), or -1 when that
token is not within the recorded top-k. Under greedy verification this array is an exact
substrate for simulating any static tree (the README's "Why a rank trace makes simulation exact").

A lookup drafter's trace (prompt lookup, the n-gram trie) also records ``drafted[t]``: how many
tokens its own top-1 chain held at position t (0 … heads; the rest of its depths were holes).
A step that verifies only the drafted chain (:attr:`~treeopt.decoding.config.DecodeConfig.
drafted_only`) is priced by it (:mod:`treeopt.pricing.drafted`).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError
from treeopt.files import atomic_write

TRACE_FORMAT = "treeopt.trace/1"
MISS = -1


@dataclass(frozen=True, eq=False)
class RankTrace:
    """Ranks of the true tokens, int16 ``[positions, heads]``, with JSON-serialisable meta.

    >>> tr = RankTrace(np.array([[0, 1], [2, -1]], dtype=np.int16), {"top_k": 4})
    >>> tr.positions, tr.heads, tr.top_k
    (2, 2, 4)
    """

    ranks: npt.NDArray[np.int16]
    meta: dict[str, Any] = field(default_factory=dict)
    drafted: npt.NDArray[np.int16] | None = None  # [positions]: the drafter's chain length

    def __post_init__(self) -> None:
        r = np.asarray(self.ranks)
        if r.ndim != 2:
            raise TreeoptError(f"rank trace: ranks must be 2-D [positions, heads], got shape {r.shape}")
        if not np.issubdtype(r.dtype, np.integer):
            raise TreeoptError(f"rank trace: ranks must be integers, got dtype {r.dtype}")
        if r.size and int(r.min()) < MISS:
            raise TreeoptError(f"rank trace: rank {int(r.min())} is below -1 (the 'missed' sentinel)")
        if r.size and int(r.max()) > np.iinfo(np.int16).max:
            raise TreeoptError("rank trace: ranks exceed the int16 range")
        if r.shape[1] == 0:
            raise TreeoptError("rank trace: it has 0 heads (ranks of shape "
                               f"{list(r.shape)}); a trace needs at least one head")
        r = np.ascontiguousarray(r, dtype=np.int16)
        r.setflags(write=False)
        object.__setattr__(self, "ranks", r)
        if not isinstance(self.meta, dict):
            raise TreeoptError(f"rank trace: meta must be a dict, got {type(self.meta).__name__}")
        _check_top_k(r, self.meta.get("top_k"))
        if self.drafted is not None:
            object.__setattr__(self, "drafted", _checked_drafted(self.drafted, r.shape))
        try:  # meta must be JSON-serialisable; fail early, not at save time
            json.dumps(self.meta)
        except (TypeError, ValueError) as exc:
            raise TreeoptError(f"rank trace: meta is not JSON-serialisable ({exc})") from None

    @property
    def positions(self) -> int:
        return int(self.ranks.shape[0])

    @property
    def heads(self) -> int:
        return int(self.ranks.shape[1])

    @property
    def sampling(self) -> dict[str, Any] | None:
        """The sampling the continuations were drawn with (temperature, top_p, top_k, seed,
        samples_per_prompt); None for a greedy trace."""
        recorded = self.meta.get("sampling")
        return dict(recorded) if isinstance(recorded, dict) else None

    @property
    def top_k(self) -> int:
        """Recorded top-k: from meta, else one more than the largest rank seen."""
        k = self.meta.get("top_k")
        if k is not None:
            return int(k)
        return int(self.ranks.max()) + 1 if self.ranks.size else 0

    @property
    def head_kind(self) -> str | None:
        return self.meta.get("head_kind")

    @property
    def prompt_digests(self) -> list[str] | None:
        """Each sequence's :func:`prompt_digest`, in the trace's order, where it records one per
        sequence (``treeopt calibrate`` does); None else (a trace from before, or one whose
        sequences were regrouped without them)."""
        digests, counts = self.meta.get("prompt_digests"), self.meta.get("sequence_positions")
        if isinstance(digests, list) and counts is not None and len(digests) == len(counts):
            return [str(d) for d in digests]
        return None

    def sequences(self, count: int, *,
                  positions: int | Sequence[int] | None = None) -> RankTrace:
        """The trace of the first ``count`` calibration sequences (needs ``sequence_positions``),
        each cut to its first ``positions`` positions when given (what a live run of that many
        new tokens sees of it; a sequence of them: each sequence's own).

        >>> t = RankTrace(np.arange(5, dtype=np.int16)[:, None], {"sequence_positions": [2, 3]})
        >>> t.sequences(1).positions, t.sequences(1).meta["sequence_positions"]
        (2, [2])
        >>> cut = t.sequences(2, positions=1)
        >>> cut.ranks[:, 0].tolist(), cut.meta["sequence_positions"]
        ([0, 2], [1, 1])
        >>> t.sequences(2, positions=[2, 1]).ranks[:, 0].tolist()
        [0, 1, 2]
        >>> t.sequences(2, positions=[0, 1]).meta["sequence_positions"]
        [0, 1]
        """
        counts = self.meta.get("sequence_positions")
        if not counts or sum(counts) != self.positions:
            raise TreeoptError("rank trace: no 'sequence_positions' in its meta, so its "
                               "sequences cannot be told apart")
        if not 1 <= count <= len(counts):
            raise TreeoptError(f"rank trace: {count} sequences asked for, it has {len(counts)}")
        cuts = ([positions] * count if positions is None or isinstance(positions, int)
                else list(positions))
        if len(cuts) != count:
            raise TreeoptError(f"rank trace: {len(cuts)} cuts for {count} sequences")
        if isinstance(positions, int) and positions < 1:
            raise TreeoptError(f"rank trace: positions must be ≥ 1, got {positions}")
        bad = [c for c in cuts if c is not None and c < 0]  # a sequence may hold none
        if bad:
            raise TreeoptError(f"rank trace: positions must be ≥ 0, got {bad[0]}")
        kept = [n if c is None else min(n, c) for n, c in zip(counts[:count], cuts, strict=True)]
        return of_sequences(self, range(count), kept=kept)

    def sequence_lengths(self, *, source: str | None = None) -> list[int]:
        """Positions per sequence, for a figure that runs each sequence as a row of a batch (a
        live batch's steady window, an adaptive replay): the one reader of them, which refuses
        a trace that does not record them or one of whose sequences holds none (``source``:
        what messages call the trace; default its ``source_path``, else "rank trace").

        >>> t = RankTrace(np.zeros((3, 1), np.int16), {"sequence_positions": [2, 0, 1]})
        >>> try:
        ...     t.sequence_lengths(source="cal.npz")
        ... except TreeoptError as exc:
        ...     print(str(exc).split(" (")[0])
        cal.npz: sequence 1 of 3 has 0 positions
        """
        name = source or str(self.meta.get("source_path") or "rank trace")
        counts = self.meta.get("sequence_positions")
        if not counts or sum(counts) != self.positions:
            raise TreeoptError(f"{name}: no 'sequence_positions' in its meta, so its sequences "
                               "cannot be told apart")
        empty = [i for i, n in enumerate(counts) if n == 0]
        if empty:
            raise TreeoptError(
                f"{name}: sequence {empty[0]} of {len(counts)} has 0 positions (a continuation "
                f"shorter than the {self.heads} heads + 2 tokens), so it is no batch row; leave "
                "such sequences out with RankTrace.nonempty()")
        return [int(n) for n in counts]

    def nonempty(self) -> RankTrace:
        """The trace without its sequences of 0 positions; meta ``empty_sequences`` lists where
        they stood (indices of the trace as recorded). Itself when it has none.

        >>> t = RankTrace(np.zeros((3, 1), np.int16), {"sequence_positions": [2, 0, 1]})
        >>> kept = t.nonempty()
        >>> kept.meta["sequence_positions"], kept.meta["empty_sequences"]
        ([2, 1], [1])
        """
        counts = self.meta.get("sequence_positions")
        if not counts or all(counts):
            return self
        dropped = list(self.meta.get("empty_sequences", []))
        kept = [i for i, n in enumerate(counts) if n]
        digests = self.prompt_digests
        origin = [i for i in range(len(counts) + len(dropped)) if i not in dropped]
        return RankTrace(self.ranks, {
            **self.meta, "sequence_positions": [counts[i] for i in kept],
            "sequences": len(kept),
            "empty_sequences": sorted(dropped + [origin[i] for i, n in enumerate(counts) if not n]),
            **({"prompt_digests": [digests[i] for i in kept]} if digests is not None else {})},
            self.drafted)

    def require(self, *, heads: int, source: str = "rank trace") -> None:
        """Raise unless the trace is non-empty and has at least ``heads`` heads."""
        if self.positions == 0:
            raise TreeoptError(f"{source}: the trace is empty (0 positions)")
        if self.heads < heads:
            raise TreeoptError(
                f"{source}: the trace has {self.heads} heads but the tree needs depth {heads}"
            )

    def split(self, fraction: float, *, seed: int = 0) -> tuple[RankTrace, RankTrace]:
        """Split positions at random into two traces (for held-out evaluation)."""
        if not 0.0 < fraction < 1.0:
            raise TreeoptError(f"split fraction must be in (0, 1), got {fraction}")
        order = np.random.default_rng(seed).permutation(self.positions)
        cut = int(round(fraction * self.positions))
        a, b = np.sort(order[:cut]), np.sort(order[cut:])
        return (RankTrace(self.ranks[a], dict(self.meta), self._drafted_at(a)),
                RankTrace(self.ranks[b], dict(self.meta), self._drafted_at(b)))

    def _drafted_at(self, rows: npt.NDArray[np.int64] | slice) -> npt.NDArray[np.int16] | None:
        """The drafted chain lengths of ``rows`` (None where the trace records none)."""
        return None if self.drafted is None else self.drafted[rows]

    def with_meta(self, meta: dict[str, Any]) -> RankTrace:
        """The same positions (ranks and drafted lengths) with ``meta`` instead."""
        return RankTrace(self.ranks, meta, self.drafted)

    # ----- files --------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write a ``.npz`` (no pickled objects) atomically."""
        meta = {"format": TRACE_FORMAT, **self.meta}
        meta.setdefault("created", datetime.now(timezone.utc).isoformat(timespec="seconds"))

        def write(tmp: Path) -> None:
            extra = {} if self.drafted is None else {"drafted": self.drafted}
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, ranks=self.ranks, meta=np.array(json.dumps(meta)),
                                    **extra)

        return atomic_write(path, write)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> RankTrace:
        """Read a ``.npz`` written by :meth:`save`; never unpickles."""
        p = Path(path)
        try:
            with open(p, "rb") as fh:
                magic = fh.read(6)
            if not magic.startswith((b"PK\x03\x04", b"\x93NUMPY")):
                raise TreeoptError(f"{p}: not a .npz archive (a rank trace is a .npz file written "
                                   "by treeopt calibrate or RankTrace.save)")
            loaded = np.load(p, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise TreeoptError(f"{p}: a single .npy array, not a .npz rank trace "
                                   "(needs arrays 'ranks' and 'meta')")
            with loaded as z:
                files = set(z.files)
                if not {"ranks", "meta"} <= files:
                    raise TreeoptError(
                        f"{p}: not a rank trace (needs arrays 'ranks' and 'meta', has {sorted(files)})"
                    )
                ranks, meta_raw = z["ranks"], z["meta"]
                drafted = z["drafted"] if "drafted" in files else None
        except FileNotFoundError:
            raise TreeoptError(f"{p}: no such file") from None
        except (ValueError, OSError, EOFError, zipfile.BadZipFile) as exc:
            if isinstance(exc, TreeoptError):
                raise
            raise TreeoptError(f"{p}: not a readable .npz rank trace ({exc})") from None
        try:
            meta = json.loads(str(meta_raw))
        except json.JSONDecodeError:
            raise TreeoptError(f"{p}: 'meta' is not a JSON string") from None
        if not isinstance(meta, dict) or meta.get("format") != TRACE_FORMAT:
            tag = meta.get("format") if isinstance(meta, dict) else None
            raise TreeoptError(f"{p}: format is {tag!r}, expected {TRACE_FORMAT!r}")
        if ranks.dtype != np.int16:
            raise TreeoptError(f"{p}: 'ranks' has dtype {ranks.dtype}, expected int16")
        if ranks.ndim != 2:
            raise TreeoptError(f"{p}: 'ranks' has shape {ranks.shape}, expected [positions, heads]")
        meta.pop("format")
        try:
            return cls(ranks, meta, drafted)
        except TreeoptError as exc:
            raise TreeoptError(f"{p}: {exc}") from None


def _checked_drafted(drafted: npt.ArrayLike, shape: tuple[int, ...]) -> npt.NDArray[np.int16]:
    """``drafted`` as a read-only int16 array of one length per position, each 0 … heads.

    >>> _checked_drafted([0, 2], (2, 2)).tolist()
    [0, 2]
    >>> try:
    ...     _checked_drafted([0, 3], (2, 2))
    ... except TreeoptError as exc:
    ...     print(exc)
    rank trace: drafted length 3 at position 1 is outside 0 … 2 (the heads)
    """
    d = np.asarray(drafted)
    if d.shape != shape[:1] or (d.size and not np.issubdtype(d.dtype, np.integer)):
        raise TreeoptError(f"rank trace: 'drafted' must hold one integer per position "
                           f"({shape[0]}), got shape {list(d.shape)} of {d.dtype}")
    bad = np.flatnonzero((d < 0) | (d > shape[1]))
    if bad.size:
        raise TreeoptError(f"rank trace: drafted length {int(d[bad[0]])} at position "
                           f"{int(bad[0])} is outside 0 … {shape[1]} (the heads)")
    d = np.ascontiguousarray(d, dtype=np.int16)
    d.setflags(write=False)
    return d


def _check_top_k(ranks: npt.NDArray[np.int16], top_k: Any) -> None:
    """A recorded ``top_k`` is a positive integer above every rank (a larger rank would be a
    silent miss in every simulation)."""
    if top_k is None:
        return
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
        raise TreeoptError(f"rank trace: meta 'top_k' is {top_k!r}; expected a positive integer")
    if ranks.size and int(ranks.max()) >= top_k:
        row, head = np.argwhere(ranks >= top_k)[0]
        raise TreeoptError(f"rank trace: rank {int(ranks[row, head])} at position {row}, head "
                           f"{head + 1} is not below the recorded top_k {top_k}")


def of_sequences(trace: RankTrace, indices: Sequence[int], *,
                 kept: Sequence[int] | None = None) -> RankTrace:
    """The trace of ``trace``'s sequences at ``indices``, in that order, each cut to its first
    ``kept[j]`` positions when given (:meth:`RankTrace.sequences` takes the first ones; a live
    run's prompts are found by their digests, :attr:`RankTrace.prompt_digests`).

    >>> t = RankTrace(np.arange(5, dtype=np.int16)[:, None], {"sequence_positions": [2, 3]})
    >>> of_sequences(t, [1, 0]).ranks[:, 0].tolist()
    [2, 3, 4, 0, 1]
    """
    counts = trace.meta.get("sequence_positions")
    if not counts or sum(counts) != trace.positions:
        raise TreeoptError("rank trace: no 'sequence_positions' in its meta, so its sequences "
                           "cannot be told apart")
    if any(not 0 <= i < len(counts) for i in indices):
        raise TreeoptError(f"rank trace: sequences {list(indices)} asked for, it has "
                           f"{len(counts)}")
    kept = [counts[i] for i in indices] if kept is None else list(kept)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    rows = np.concatenate([np.arange(starts[i], starts[i] + k, dtype=np.int64)
                           for i, k in zip(indices, kept, strict=True)] + [np.zeros(0, np.int64)])
    digests = trace.prompt_digests
    return RankTrace(trace.ranks[rows], {
        **trace.meta, "sequence_positions": kept, "sequences": len(kept),
        **({"prompt_digests": [digests[i] for i in indices]} if digests is not None else {})},
        None if trace.drafted is None else trace.drafted[rows])


def prompt_digest(ids: Sequence[int]) -> str:
    """What tells a prompt's sequences in a trace: the first 16 hex digits of the SHA-256 of its
    token ids as int64 (a trace records one per sequence; ``verify`` checks the prompts it
    decodes against them before it walks the trace as theirs).

    >>> prompt_digest([1, 2, 3]) == prompt_digest((1, 2, 3)) != prompt_digest([1, 2])
    True
    """
    return hashlib.sha256(np.asarray(list(ids), np.int64).tobytes()).hexdigest()[:16]


def merge_traces(traces: Sequence[RankTrace], *, names: Sequence[str] | None = None) -> RankTrace:
    """Concatenate the shards of one calibration run along positions; head counts, top-k and
    every other record of the run must agree (``names``: what messages call the shards).

    >>> a = RankTrace(np.zeros((2, 3), np.int16), {"top_k": 8, "sequences": 1})
    >>> merge_traces([a, a]).positions, merge_traces([a, a]).meta["sequences"]
    (4, 2)
    """
    if not traces:
        raise TreeoptError("merge: no traces given")
    names = list(names) if names is not None else [f"shard {i}" for i in range(len(traces))]
    first = traces[0]
    for i, t in enumerate(traces[1:], start=1):
        if t.heads != first.heads:
            raise TreeoptError(f"merge: {names[i]} has {t.heads} heads, {names[0]} has {first.heads}")
        if t.meta.get("top_k") != first.meta.get("top_k"):
            raise TreeoptError(
                f"merge: {names[i]} recorded top-{t.meta.get('top_k')}, "
                f"{names[0]} top-{first.meta.get('top_k')}"
            )
        if t.meta.get("head_kind") != first.meta.get("head_kind"):
            raise TreeoptError(f"merge: shards come from different head kinds: {names[0]} "
                               f"{first.meta.get('head_kind')}, {names[i]} {t.meta.get('head_kind')}")
        differences = _run_differences(first.meta, t.meta)
        if differences:
            raise TreeoptError(f"merge: {names[0]} and {names[i]} come from separate calibration "
                               f"runs ({'; '.join(differences)}); merge the shards of one run")
    _check_distinct_shards(traces, names)
    meta = {k: v for k, v in first.meta.items() if k not in ("shard", "created")}
    for key in ("sequences", "tokens"):
        if all(key in t.meta for t in traces):
            meta[key] = sum(int(t.meta[key]) for t in traces)
    if all("sequence_positions" in t.meta for t in traces):  # per sequence, in shard order
        meta["sequence_positions"] = [n for t in traces for n in t.meta["sequence_positions"]]
    else:
        meta.pop("sequence_positions", None)
    digests = [t.prompt_digests for t in traces]
    if all(d is not None for d in digests):  # likewise, where every shard records them
        meta["prompt_digests"] = [d for ds in digests for d in ds]
    else:
        meta.pop("prompt_digests", None)
    meta["merged_shards"] = len(traces)
    drafted = (np.concatenate([t.drafted for t in traces])
               if all(t.drafted is not None for t in traces) else None)
    return RankTrace(np.concatenate([t.ranks for t in traces], axis=0), meta, drafted)


# meta that differs between the shards of one run; everything else describes the run itself
_PER_SHARD = frozenset({"shard", "created", "sequences", "tokens", "positions",
                        "sequence_positions", "prompt_digests", "fingerprint", "merged_shards"})


def _run_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What two shards' meta say differently about their run (the shard count included).

    >>> _run_differences({"model": "m1", "shard": "0/2"}, {"model": "m2", "shard": "1/3"})
    ["model 'm1' vs 'm2'", 'shard count 2 vs 3']
    """
    out = [f"{k} {_brief(a.get(k))} vs {_brief(b.get(k))}" for k in sorted(set(a) | set(b))
           if k not in _PER_SHARD and a.get(k) != b.get(k)]
    counts = [str(m["shard"]).partition("/")[2] for m in (a, b) if "shard" in m]
    if len(counts) == 2 and counts[0] != counts[1]:
        out.append(f"shard count {counts[0]} vs {counts[1]}")
    return out


def _check_distinct_shards(traces: Sequence[RankTrace], names: Sequence[str]) -> None:
    seen: dict[str, int] = {}
    for i, t in enumerate(traces):
        shard = t.meta.get("shard")
        if shard is None:
            continue
        if shard in seen:
            j = seen[shard]
            prints = (traces[j].meta.get("fingerprint"), t.meta.get("fingerprint"))
            why = (f"two separate runs (fingerprints {prints[0]} and {prints[1]})"
                   if prints[0] != prints[1] else "the same shard given twice")
            raise TreeoptError(f"merge: {names[j]} and {names[i]} are both shard {shard}: "
                               f"{why}; merge the shards 0 … n-1 of one run")
        seen[shard] = i


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
