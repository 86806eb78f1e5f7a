"""Decoding options (torch-free: the CLI builds them before any model loads)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from treeopt.errors import TreeoptError

MODES = ("greedy", "typical")


@dataclass(frozen=True)
class DecodeConfig:
    """Decoding options. ``posterior_alpha`` None means √ε, as in the Medusa paper."""

    max_new_tokens: int = 128
    mode: str = "greedy"
    temperature: float = 0.7
    posterior_threshold: float = 0.09
    posterior_alpha: float | None = None
    eos_token_id: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TreeoptError(f"decode mode {self.mode!r} is unknown; expected one of {MODES}")
        if self.max_new_tokens < 1:
            raise TreeoptError(f"--max-new-tokens must be ≥ 1, got {self.max_new_tokens}")
        if self.mode == "typical" and self.temperature <= 0:
            raise TreeoptError("typical acceptance needs a temperature > 0")

    @property
    def alpha(self) -> float:
        a = self.posterior_alpha
        return math.sqrt(self.posterior_threshold) if a is None else a
