"""Options of head training (torch-free, so the CLI can list them without loading torch)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from treeopt.errors import TreeoptError

if TYPE_CHECKING:
    from treeopt.heads import HeadsConfig


@dataclass(frozen=True)
class TrainConfig:
    """Head shape and optimiser settings; CLI flags map one-to-one onto these fields."""

    kind: str = "medusa"
    num_heads: int = 4
    num_layers: int = 1
    share_lm_head: bool = False
    prefix_attention: bool = False
    steps: int = 200
    batch_size: int = 8
    seq_len: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: int = 10
    decay: float = 0.8
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len"):
            if getattr(self, name) < 1:
                raise TreeoptError(f"--{name.replace('_', '-')} must be ≥ 1")
        if self.seq_len < self.num_heads + 2:
            raise TreeoptError(f"--seq-len {self.seq_len} leaves no targets for "
                               f"{self.num_heads} heads (needs ≥ {self.num_heads + 2})")

    def heads_config(self, hidden_size: int, vocab_size: int) -> HeadsConfig:
        from treeopt.heads import HeadsConfig

        return HeadsConfig(kind=self.kind, num_heads=self.num_heads, hidden_size=hidden_size,
                           vocab_size=vocab_size, num_layers=self.num_layers,
                           share_lm_head=self.share_lm_head,
                           prefix_attention=self.prefix_attention)
