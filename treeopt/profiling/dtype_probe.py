"""Which dtype decodes a model fastest on this host, measured rather than assumed.

Speculative decoding runs two steps: the autoregressive step of one token, and the verify step
of a tree's tokens. The profiler's verify table (:func:`~treeopt.profiling.verify_latency.
profile_verify`) times both in each candidate dtype, and the dtype whose two steps have the
smaller geometric mean wins: a dtype that is much cheaper for the tree and a little dearer for
one token (bf16 with AMX) wins, one that is emulated (bf16 where the CPU has no bf16 matrix
instructions) loses. On SmolLM2-135M, one thread (docs/demo.md): with AMX an 8-token bf16 step
costs about a one-token step; with AVX512-BF16, 1.3×; on an AVX2-only AMD EPYC (2026-12-05)
8 tokens cost 242 ms in bf16 against 117 ms in fp32, and one token 47 against 50 — fp32 there.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treeopt.errors import TreeoptError

FORMAT = "treeopt.dtype-probe/1"
CANDIDATES: tuple[str, ...] = ("bf16", "fp32")
TOKENS: tuple[int, ...] = (1, 8)  # the autoregressive step and a tree's


@dataclass(frozen=True)
class DtypeProbe:
    """The measured median step (ms) per dtype and tokens at batch 1, and the dtype it picks.

    >>> p = DtypeProbe({"bf16": {1: 49.0, 8: 293.0}, "fp32": {1: 52.0, 8: 105.0}})
    >>> p.dtype, round(p.score("bf16"), 1), round(p.score("fp32"), 1)
    ('fp32', 119.8, 73.9)
    >>> DtypeProbe({"bf16": {1: 74.0, 8: 76.0}, "fp32": {1: 66.0, 8: 130.0}}).dtype
    'bf16'
    """

    step_ms: Mapping[str, Mapping[int, float]]
    context: int = 64
    device: str = "cpu"

    def score(self, dtype: str) -> float:
        """The geometric mean of ``dtype``'s steps (ms)."""
        steps = list(self.step_ms[dtype].values())
        return math.exp(sum(math.log(ms) for ms in steps) / len(steps))

    @property
    def dtype(self) -> str:
        """The faster dtype (ties: the first candidate measured)."""
        return min(self.step_ms, key=self.score)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "dtype": self.dtype, "device": self.device,
                "context": self.context, "batch": 1,
                "rule": "the smaller geometric mean of the steps of these token counts",
                "step_ms": {d: {str(q): round(ms, 3) for q, ms in steps.items()}
                            for d, steps in self.step_ms.items()},
                "score_ms": {d: round(self.score(d), 3) for d in self.step_ms}}

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], *, source: str = "dtype probe") -> DtypeProbe:
        if doc.get("format") != FORMAT:
            raise TreeoptError(f"{source}: not a dtype probe (format {doc.get('format')!r}, "
                               f"expected {FORMAT})")
        return cls({d: {int(q): float(ms) for q, ms in steps.items()}
                    for d, steps in doc["step_ms"].items()},
                   context=int(doc["context"]), device=str(doc["device"]))

    def line(self) -> str:
        """One line: each dtype's steps and the pick."""
        parts = [f"{d} " + " / ".join(f"{ms:.0f}" for ms in steps.values()) + " ms"
                 for d, steps in self.step_ms.items()]
        tokens = " and ".join(str(q) for q in next(iter(self.step_ms.values())))
        return f"steps of {tokens} tokens: {'; '.join(parts)} → {self.dtype}"


def probe_dtypes(cfg: Any, weights_dir: str, *, device: str = "cpu",
                 candidates: Sequence[str] = CANDIDATES, tokens: Sequence[int] = TOKENS,
                 context: int = 64, repeats: int = 5,
                 log: Callable[[str], None] | None = None) -> DtypeProbe:
    """Time the verify step of each of ``tokens`` at batch 1 after ``context`` tokens, in each
    of ``candidates``, with the model's weights from ``weights_dir`` (``cfg``: its
    :class:`~treeopt.roofline.config.ModelConfig`), on the torch threads set now."""
    from treeopt.profiling.verify_latency import profile_verify

    step_ms: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dtype in candidates:
            table = profile_verify(cfg, out=Path(tmp) / f"{dtype}.json", device=device,
                                   dtype=dtype, batch=[1], context=[context],
                                   tokens=list(tokens), repeats=repeats, warmup=2,
                                   weights_dir=weights_dir, log=log or (lambda _: None))
            steps = {r.tokens: float(r.ms_median) for r in table.records if r.ok}
            if len(steps) == len(tokens):  # a dtype the device cannot run is no candidate
                step_ms[dtype] = steps
    if not step_ms:
        raise TreeoptError(f"no dtype of {', '.join(candidates)} ran the model's step on "
                           f"{device}")
    return DtypeProbe(step_ms, context=context, device=device)


__all__ = ["CANDIDATES", "FORMAT", "TOKENS", "DtypeProbe", "probe_dtypes"]
