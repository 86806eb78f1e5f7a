"""Exactness of a rank trace against live decoding, prompt by prompt: the trace's walk
(:func:`treeopt.model.simulation.step_lengths`) against the accepted lengths of the same tree
decoded live, step by step, and the live output against plain decoding with the same sampling
stream.

A trace calibrated on prompts ``i = 0 …`` with sampling seed s draws prompt i's continuation
from stream i (:func:`treeopt.decoding.sampling.stream_keys`); decoding the prompts in turn in
one row, prompt i on stream i, draws the same one, so greedy and sampled traces are checked
alike; a drafter that keeps a cache of requests' outputs (suffix decoding) meets the earlier
prompts' outputs as its trace ranked them. A trace
calibrated with the run's budget and EOS holds every position the run visits, each step counting
what the run keeps (:func:`treeopt.decoding.rank_pass.cut_to_run`), so every live step is
compared; where a trace holds fewer positions (one recorded before treeopt recorded a run's),
the live steps after them are not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from treeopt.model.simulation import step_lengths
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.drafter import Drafter


@dataclass(frozen=True)
class Exactness:
    """How many of ``prompts`` decode step by step as the trace's walk says (``step_equal``,
    over ``steps`` walked steps), E[L] of the walk and of live decoding over those steps, and how
    many prompts' outputs equal plain decoding's (``lossless``).

    >>> e = Exactness(prompts=2, step_equal=2, steps=10, walk_sum=30, live_sum=30, lossless=2)
    >>> e.describe("greedy")
    'greedy: 2/2 prompts step by step equal to the walk (10 steps); E[L] walk 3.0000, live 3.0000 (+0.00%); lossless 2/2'
    """

    prompts: int
    step_equal: int
    steps: int
    walk_sum: int
    live_sum: int
    lossless: int

    @property
    def walk_mean(self) -> float:
        return self.walk_sum / self.steps if self.steps else float("nan")

    @property
    def live_mean(self) -> float:
        return self.live_sum / self.steps if self.steps else float("nan")

    @property
    def gap(self) -> float:
        """Live E[L] over the walk's, less one (0: equal)."""
        return self.live_sum / self.walk_sum - 1 if self.walk_sum else 0.0

    def describe(self, mode: str) -> str:
        return (f"{mode}: {self.step_equal}/{self.prompts} prompts step by step equal to the "
                f"walk ({self.steps} steps); E[L] walk {self.walk_mean:.4f}, live "
                f"{self.live_mean:.4f} ({self.gap:+.2%}); lossless {self.lossless}/{self.prompts}")


def walk_against_live(model: PreTrainedModel, drafter: Drafter, tree: Tree,
                      prompts: Sequence[Sequence[int]], trace: RankTrace,
                      config: DecodeConfig) -> Exactness:
    """Decode the prompts one after another in one run of one row, with ``tree`` and with no
    tree (``config``, prompt i on sampling stream i: each decodes as it does alone, and a
    drafter with a cache of requests' outputs meets the earlier prompts' as calibration ranked
    them), and compare with ``trace``, calibrated on the same prompts in the same order with
    the same sampling (it must record ``sequence_positions``)."""
    from treeopt.decoding.loop import Decoder

    counts = trace.sequences(len(prompts)).meta["sequence_positions"]
    live = Decoder(model, drafter).decode(tree, prompts, config=config, batch=1)
    ref = Decoder(model).decode(Tree(()), prompts, config=config, batch=1)
    start = equal = walked = walk_sum = live_sum = 0
    for i, steps_i in enumerate(live.stats.sequence_accept_lengths):
        one = RankTrace(trace.ranks[start: start + counts[i]],
                        {**trace.meta, "sequence_positions": [counts[i]]})
        start += counts[i]
        walk = step_lengths(tree, one).tolist() if counts[i] else []
        steps = list(steps_i[: len(walk)])
        equal += steps == walk
        walked, walk_sum, live_sum = walked + len(walk), walk_sum + sum(walk), live_sum + sum(steps)
    lossless = sum(a == b for a, b in zip(live.tokens, ref.tokens, strict=True))
    return Exactness(len(prompts), equal, walked, walk_sum, live_sum, lossless)
