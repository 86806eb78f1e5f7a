"""A step policy in treeopt's live loop, and the replay of what that loop runs.

:class:`ChainSource` is a :class:`~treeopt.adaptive.policies.Policy` as the live loop's
:class:`~treeopt.decoding.loop.TreeSource`: each round the policy's k becomes a chain of k draft
tokens (top-1 at every depth; k = 0 the root alone, an autoregressive step), and the rows'
accepted drafts go back to the policy. It records every round, so a live run can be set beside
its replay round by round (:meth:`ChainSource.rounds`).

The live loop batches as the engines do (``Decoder.decode(..., batch=b)``): ``b`` rows, a
finished row taking the next waiting prompt before the next round, until the last row finishes.
:func:`replay_continuous` replays exactly that — :func:`~treeopt.adaptive.replay.replay` of every
sequence with ``drain`` — and its rounds in which all ``b`` rows run are the steady window the
tuning prices (the same replay without ``drain``). Decoded in static batches instead (a finished
row stays stopped until its batch ends), :func:`replay_batches` replays the sequences in
consecutive groups of ``batch``, each drained, the policy carried from one to the next. Either
way every round is priced at ``batch`` rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from treeopt.adaptive.policies import Policy, RoundState
from treeopt.adaptive.replay import Replay, chain_step_seconds, replay
from treeopt.adaptive.workload import ChainAcceptance
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree
from treeopt.pricing.costs import StepCosts

__all__ = ["ChainSource", "Rounds", "replay_batches", "replay_continuous", "steady_tokens_per_s"]


@dataclass(frozen=True, eq=False)
class Rounds:
    """Rounds as decoded: per round the steps drafted, the rows that ran it and E[L] (their mean
    accepted drafts + 1), as :class:`~treeopt.adaptive.replay.Replay` holds them."""

    steps: tuple[int, ...]
    rows: tuple[int, ...]
    accept_length: tuple[float, ...]

    def equals(self, replayed: Replay) -> bool:
        """Whether ``replayed`` chose the same steps for the same rows, round by round, and its
        rows accepted as many drafts (E[L] equal to the last bit: both are one integer sum over
        one integer count)."""
        return (self.steps == tuple(replayed.steps.tolist())
                and self.rows == tuple(replayed.rows.tolist())
                and self.accept_length == tuple(replayed.accept_length.tolist()))

    def first_difference(self, replayed: Replay) -> int | None:
        """The first round at which live and replay differ (None: they agree throughout)."""
        mine = list(zip(self.steps, self.rows, self.accept_length, strict=True))
        theirs = list(zip(replayed.steps.tolist(), replayed.rows.tolist(),
                          replayed.accept_length.tolist(), strict=True))
        for i, (a, b) in enumerate(zip(mine, theirs, strict=False)):
            if a != b:
                return i
        return None if len(mine) == len(theirs) else min(len(mine), len(theirs))


class ChainSource:
    """``policy`` as the live loop's tree source: a chain of the k it decides each round, of at
    most ``max_steps`` steps (the drafter's depth); every round recorded.

    >>> from treeopt.adaptive.policies import FixedSteps
    >>> source = ChainSource(FixedSteps(2), max_steps=3)
    >>> source.tree(RoundState(0, 2)).paths
    ((0,), (0, 0))
    >>> source.verified(RoundState(0, 2), [2, 1])
    >>> source.rounds().accept_length
    (2.5,)
    """

    def __init__(self, policy: Policy, *, max_steps: int) -> None:
        if max_steps < 0:
            raise TreeoptError(f"max_steps must be ≥ 0, got {max_steps}")
        self.policy, self.max_steps = policy, max_steps
        self._chains = (Tree(()), *(Tree.chain(k) for k in range(1, max_steps + 1)))
        self._decided: int | None = None
        self._log: list[tuple[int, int, float]] = []

    @property
    def label(self) -> str:
        return self.policy.label

    @property
    def trees(self) -> tuple[Tree, ...]:
        return self._chains

    def tree(self, state: RoundState) -> Tree:
        k = self.policy.decide(state)
        if not 0 <= k <= self.max_steps:
            raise TreeoptError(f"{self.policy.label}: chose {k} steps in round {state.round} at "
                               f"batch {state.batch}; the drafter drafts chains of 0 … "
                               f"{self.max_steps} steps")
        self._decided = k
        return self._chains[k]

    def verified(self, state: RoundState, accepted: Sequence[int]) -> None:
        if self._decided is None:
            raise TreeoptError("a round verified before its tree was chosen")
        self.policy.observe(state, accepted)
        self._log.append((self._decided, len(accepted),
                          (sum(accepted) + len(accepted)) / len(accepted)))
        self._decided = None

    def rounds(self) -> Rounds:
        """Every round decoded so far, over every run this source drove."""
        steps, rows, ell = zip(*self._log, strict=True) if self._log else ((), (), ())
        return Rounds(tuple(steps), tuple(rows), tuple(ell))


def replay_batches(policy: Policy, acceptance: ChainAcceptance, *, batch: int,
                   costs: StepCosts | npt.NDArray[np.float64], context: int | None = None,
                   ) -> Replay:
    """``policy`` replayed as the live loop decodes ``acceptance``'s sequences (the module
    docstring): consecutive groups of ``batch``, each drained, one policy throughout; ``costs``:
    a step profile or a chain step's seconds of each k at ``batch``."""
    if acceptance.sequences % batch:
        raise TreeoptError(f"batch {batch}: {acceptance.source} has {acceptance.sequences} "
                           f"sequences, not a whole number of batches")
    seconds = (chain_step_seconds(costs, batch=batch, context=context,
                                  max_steps=acceptance.max_steps)
               if isinstance(costs, StepCosts) else np.asarray(costs, dtype=np.float64))
    parts = [replay(policy, acceptance.select(range(g, g + batch)), batch=batch, costs=seconds,
                    drain=True) for g in range(0, acceptance.sequences, batch)]
    return Replay(policy.label, batch, np.concatenate([p.steps for p in parts]),
                  np.concatenate([p.rows for p in parts]),
                  np.concatenate([p.accept_length for p in parts]),
                  sum(p.tokens for p in parts), float(sum(p.seconds for p in parts)))


def replay_continuous(policy: Policy, acceptance: ChainAcceptance, *, batch: int,
                      costs: StepCosts | npt.NDArray[np.float64], context: int | None = None,
                      ) -> Replay:
    """``policy`` replayed as the live loop decodes ``acceptance``'s sequences in ``batch`` rows,
    continuously (the module docstring): each finished row takes the next sequence, then the
    last rows drain; its steady window is the tuning's replay."""
    return replay(policy, acceptance, batch=batch, costs=costs, context=context, drain=True)


def steady_tokens_per_s(replayed: Replay, seconds: npt.NDArray[np.float64]) -> float:
    """Tokens/s over the rounds in which all ``replayed.batch`` rows ran (the live loop's
    steady window, :attr:`~treeopt.decoding.stats.DecodeStats.decode_tokens`), each round
    priced at ``seconds[k]``.

    >>> r = Replay("toy", 2, np.array([1, 1, 0]), np.array([2, 2, 1]), np.array([2.0, 1.5, 1.0]),
    ...            8, 3.0)
    >>> steady_tokens_per_s(r, np.array([0.5, 1.0]))
    3.5
    """
    full = replayed.rows == replayed.batch
    tokens = float((replayed.accept_length[full] * replayed.rows[full]).sum())
    return tokens / float(seconds[replayed.steps[full]].sum())
