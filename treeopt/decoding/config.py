"""Decoding options (torch-free: the CLI builds them before any model loads)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from treeopt.errors import FieldError, TreeoptError

MODES = ("greedy", "sample", "typical")
ATTENTIONS = ("auto", "exact", "sdpa", "eager")  # --attention (treeopt.decoding.attention)


@dataclass(frozen=True)
class DecodeConfig:
    """Decoding options.

    ``mode``: ``greedy``; ``sample`` — lossless sample-and-match at ``temperature`` with ``top_k``
    (0: off) and ``top_p`` (1: off), per-position seeded by ``seed`` (:mod:`treeopt.decoding.
    sampling`); ``typical`` — Medusa's typical acceptance (ε ``posterior_threshold``, α
    ``posterior_alpha``, None meaning √ε as in the Medusa paper), not lossless.
    ``drafted_only``: a lookup drafter's chain (prompt lookup, the n-gram trie, suffix
    decoding) is verified only as deep as it was drafted, not at its full depth with holes.
    """

    max_new_tokens: int = 128
    mode: str = "greedy"
    temperature: float = 0.7
    top_k: int = 0
    top_p: float = 1.0
    posterior_threshold: float = 0.09
    posterior_alpha: float | None = None
    eos_token_id: int | None = None
    seed: int = 0
    drafted_only: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TreeoptError(f"decode mode {self.mode!r} is unknown; expected one of {MODES}")
        if self.max_new_tokens < 1:
            raise FieldError("max_new_tokens", f"must be ≥ 1, got {self.max_new_tokens}")
        if self.mode != "greedy" and not self.temperature > 0:  # NaN fails too
            raise FieldError("mode", f"{self.mode} needs {{temperature}} > 0, got "
                             f"{self.temperature}")
        if not 0 < self.top_p <= 1:
            raise FieldError("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise FieldError("top_k", f"must be ≥ 0 (0: off), got {self.top_k}")
        if not 0 < self.posterior_threshold <= 1:  # a probability; NaN fails too
            raise FieldError("posterior_threshold",
                             f"must be in (0, 1], got {self.posterior_threshold}")
        if self.posterior_alpha is not None and not 0 < self.posterior_alpha < math.inf:
            raise FieldError("posterior_alpha", f"must be > 0 and finite, got {self.posterior_alpha}")

    @property
    def alpha(self) -> float:
        a = self.posterior_alpha
        return math.sqrt(self.posterior_threshold) if a is None else a
