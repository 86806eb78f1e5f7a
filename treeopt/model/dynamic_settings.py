"""The settings of dynamic drafting, named as SGLang names them, and the policies that read them.

``topk`` (k): children drafted per expanded node, and nodes expanded per level;
``steps`` (S): drafter forwards per step, which is the depth of the tree;
``draft_tokens`` (N): tokens verified per step, the root included (SGLang's
``--speculative-num-draft-tokens``); N − 1 drafted nodes.

Policies (the same expansion; :mod:`treeopt.dynamic` describes it):

- ``sglang``: SGLang's EAGLE worker. Scores are products of probabilities.
- ``eagle2``: EAGLE-2's reference code. Scores are sums of log-probabilities (the same order);
  its ``depth`` counts the levels after the first (``depth = steps − 1``) and its
  ``total_token`` counts the verified tokens, the root included (``total_token =
  draft_tokens``: its drafter keeps ``total_token − 1`` nodes).

treeopt drafts both with cumulative log-probabilities in float32; the two engines order nodes
alike except where products and sums round differently.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from treeopt.errors import FieldError, TreeoptError

POLICIES: tuple[str, ...] = ("sglang", "eagle2")


@dataclass(frozen=True, order=True)
class DynamicSettings:
    """One dynamic-drafting configuration.

    >>> s = DynamicSettings(topk=4, steps=3, draft_tokens=16)
    >>> s.pool, s.nodes, s.label
    (36, 15, 'topk 4, steps 3, draft tokens 16')
    >>> DynamicSettings(topk=1, steps=3, draft_tokens=4).is_chain
    True
    """

    topk: int
    steps: int
    draft_tokens: int  # verified per step, the root included
    policy: str = "sglang"

    def __post_init__(self) -> None:
        if self.topk < 1:
            raise FieldError("topk", f"must be ≥ 1, got {self.topk}")
        if self.steps < 1:
            raise FieldError("steps", f"must be ≥ 1, got {self.steps}")
        if self.draft_tokens < 2:
            raise FieldError("draft_tokens",
                             f"must be ≥ 2 (the root and a node), got {self.draft_tokens}")
        if self.draft_tokens - 1 > self.pool:
            raise FieldError(
                "draft_tokens", f"{self.draft_tokens}: topk {self.topk} and steps {self.steps} "
                f"draft only {self.pool} candidates, so at most {self.pool + 1} tokens")
        if self.policy not in POLICIES:
            raise TreeoptError(f"policy {self.policy!r}: expected one of {', '.join(POLICIES)}")

    @property
    def pool(self) -> int:
        """Candidates drafted per step: k at level 1, k² at each later level."""
        return self.topk + (self.steps - 1) * self.topk * self.topk

    @property
    def nodes(self) -> int:
        """Drafted nodes verified per step."""
        return self.draft_tokens - 1

    @property
    def is_chain(self) -> bool:
        """top-k 1: a single chain of ``steps`` nodes (SGLang then needs N = S + 1)."""
        return self.topk == 1

    @property
    def label(self) -> str:
        return f"topk {self.topk}, steps {self.steps}, draft tokens {self.draft_tokens}"

    def to_dict(self) -> dict[str, Any]:
        return {"topk": self.topk, "steps": self.steps, "draft_tokens": self.draft_tokens,
                "policy": self.policy}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> DynamicSettings:
        try:
            return cls(int(doc["topk"]), int(doc["steps"]), int(doc["draft_tokens"]),
                       str(doc.get("policy", "sglang")))
        except (KeyError, TypeError, ValueError) as exc:
            raise TreeoptError(f"dynamic settings {doc!r}: {exc}") from None


def grid(topks: tuple[int, ...], steps: tuple[int, ...], draft_tokens: tuple[int, ...],
         ) -> list[DynamicSettings]:
    """Every valid combination (a draft-token count beyond a (topk, steps) pool is skipped).

    >>> [s.draft_tokens for s in grid((1,), (2,), (2, 3, 4, 8))]
    [2, 3]
    """
    out = []
    for k in topks:
        for s in steps:
            pool = k + (s - 1) * k * k
            out += [DynamicSettings(k, s, n) for n in draft_tokens if 2 <= n <= pool + 1]
    return out
