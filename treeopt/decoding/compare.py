"""Tree decoding against autoregressive decoding on the same prompts: the one comparison that
``treeopt verify``, the app's Verify page, the demo's quality check and the benchmarks use.

Both run through the same loop. After a short warm-up of each, the two are interleaved prompt by
prompt (tree first on even prompts, autoregressive first on odd ones), so drift of the machine's
speed during the run falls on both alike instead of on whichever ran last. Phase times
(draft / verify / bookkeeping) come from a separate profiled pass, since timing phases costs
time itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.loop import autoregressive, generate
from treeopt.decoding.stats import DecodeResult, DecodeStats, combine
from treeopt.drafters.base import DraftHeads
from treeopt.tree import Tree

SPLIT_PROMPTS = 8  # prompts of the profiled pass that measures the per-step phase times


@dataclass(frozen=True, eq=False)
class Comparison:
    """Per-prompt results of both decodings, and the profiled phase times when asked for."""

    tree: Tree
    config: DecodeConfig
    tree_runs: tuple[DecodeResult, ...]
    autoregressive_runs: tuple[DecodeResult, ...]
    tree_profile: DecodeStats | None = None
    autoregressive_profile: DecodeStats | None = None

    @property
    def tree_stats(self) -> DecodeStats:
        return combine([r.stats for r in self.tree_runs])

    @property
    def autoregressive_stats(self) -> DecodeStats:
        return combine([r.stats for r in self.autoregressive_runs])

    @property
    def speedup(self) -> float | None:
        ar = self.autoregressive_stats.tokens_per_s
        return self.tree_stats.tokens_per_s / ar if ar else None

    @property
    def mismatched(self) -> list[int]:
        """Prompts whose tree output differs from the autoregressive one."""
        return [i for i, (a, b) in enumerate(zip(self.tree_runs, self.autoregressive_runs,
                                                  strict=True)) if a.tokens != b.tokens]

    @property
    def lossless(self) -> bool | None:
        """Greedy: every output identical to autoregressive decoding; typical: None (by design
        the outputs may differ)."""
        return not self.mismatched if self.config.mode == "greedy" else None

    def to_dict(self) -> dict[str, Any]:
        tree_doc, ar_doc = self.tree_stats.to_dict(), self.autoregressive_stats.to_dict()
        for doc, prof in ((tree_doc, self.tree_profile), (ar_doc, self.autoregressive_profile)):
            if prof is not None and prof.split is not None:
                doc["ms_per_step"] = {k: 1e3 * v / max(prof.steps, 1)
                                      for k, v in prof.split.to_dict().items()}
        doc: dict[str, Any] = {"tree_decoding": tree_doc, "autoregressive": ar_doc,
                               "speedup": self.speedup}
        if self.config.mode == "greedy":
            doc["outputs_match"] = not self.mismatched
            doc["mismatched_prompts"] = self.mismatched
        return doc


def compare(model: torch.nn.Module, heads: DraftHeads, tree: Tree,
            prompts: Sequence[Sequence[int]], *, config: DecodeConfig | None = None,
            split: bool = False, warmup_tokens: int = 8) -> Comparison:
    """Decode every prompt with ``tree`` and autoregressively, interleaved after a warm-up."""
    config = config or DecodeConfig()
    warm = replace(config, max_new_tokens=min(warmup_tokens, config.max_new_tokens))
    generate(model, heads, tree, prompts[0], config=warm)
    autoregressive(model, prompts[0], config=warm)
    tree_runs: list[DecodeResult] = []
    ar_runs: list[DecodeResult] = []
    for i, prompt in enumerate(prompts):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            if which == 0:
                tree_runs.append(generate(model, heads, tree, prompt, config=config))
            else:
                ar_runs.append(autoregressive(model, prompt, config=config))
    tree_prof = ar_prof = None
    if split:
        some = prompts[:SPLIT_PROMPTS]
        tree_prof = combine([generate(model, heads, tree, p, config=config, profile=True).stats
                             for p in some])
        ar_prof = combine([autoregressive(model, p, config=config, profile=True).stats
                           for p in some])
    return Comparison(tree, config, tuple(tree_runs), tuple(ar_runs), tree_prof, ar_prof)
