"""Replay a step policy over a chain-acceptance table, round by round, as an engine serving a
batch of ``batch`` requests runs it.

The batch model: ``batch`` rows advance in lockstep rounds. The workload is the table's
sequences in order; row i starts on sequence i; when a row's sequence ends (its position
reaches the sequence's end; the last step may run past it, as live decoding's does) the row
takes the next sequence not yet started, from the next round on (rows finishing in the same
round take them in row order). In each round the policy decides one step count k for every
row (:meth:`~treeopt.adaptive.policies.Policy.decide`, with the running rows as the batch
size), each row at position t accepts ``accepted[t, k]`` drafts and moves on by that + 1, and
the policy observes the rows' accepted drafts (:meth:`~treeopt.adaptive.policies.Policy.
observe`). The replay ends after the first round in which a row finishes with no sequence left
to take, so every round runs ``batch`` rows (a server at a steady load); with ``drain`` the rows
run on until all finish, and the batch the policy sees shrinks.

A round costs one chain step of k at the replay's ``batch`` (:func:`chain_step_seconds`; with
``drain``, stopped rows are priced as rows, as treeopt's live loop runs them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from treeopt.adaptive.policies import Policy, RoundState
from treeopt.adaptive.workload import ChainAcceptance
from treeopt.errors import TreeoptError
from treeopt.pricing.costs import StepCosts, throughput


def chain_step_seconds(costs: StepCosts, *, batch: int, context: int | None = None,
                       max_steps: int) -> npt.NDArray[np.float64]:
    """Seconds of one step of a chain of k draft steps, k = 0 … ``max_steps`` (0: an
    autoregressive step): verify k + 1 tokens, draft k nodes one per depth, and the loop's
    overhead, each from the step profile."""
    context = costs.context(context)
    ks = range(max_steps + 1)
    t = throughput(np.ones(max_steps + 1), tokens=[k + 1 for k in ks],
                   expanded=[(1,) * k for k in ks], verify=costs.verify, draft=costs.draft,
                   overhead=costs.overhead, batch=batch, context=context)
    seconds = t.verify_s + t.draft_s + t.overhead_s
    if np.isnan(seconds).any():
        raise TreeoptError(f"{costs.verify.source}: does not price a chain of {max_steps} "
                           f"steps ({max_steps + 1} tokens) at batch {batch}")
    return seconds


@dataclass(frozen=True, eq=False)
class Replay:
    """A policy replayed at one batch size: per round, the steps drafted, the running rows and
    E[L] (the rows' mean accepted drafts + 1); the tokens emitted and the predicted seconds."""

    policy: str
    batch: int
    steps: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int64]
    accept_length: npt.NDArray[np.float64]
    tokens: int
    seconds: float

    @property
    def rounds(self) -> int:
        return int(self.steps.size)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")

    @property
    def mean_accept_length(self) -> float:
        """Tokens per row-step over the whole replay."""
        return self.tokens / int(self.rows.sum())

    def step_counts(self) -> dict[int, int]:
        """Rounds drafted at each step count."""
        return dict(sorted(Counter(self.steps.tolist()).items()))

    def to_json(self, *, per_round: bool = True) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "policy": self.policy, "batch": self.batch, "rounds": self.rounds,
            "tokens": self.tokens, "seconds": self.seconds, "tokens_per_s": self.tokens_per_s,
            "mean_accept_length": self.mean_accept_length,
            "step_counts": {str(k): v for k, v in self.step_counts().items()}}
        if per_round:
            doc["per_round"] = {"steps": self.steps.tolist(), "rows": self.rows.tolist(),
                                "accept_length": self.accept_length.tolist()}
        return doc


def replay(policy: Policy, acceptance: ChainAcceptance, *, batch: int,
           costs: StepCosts | npt.NDArray[np.float64], context: int | None = None,
           drain: bool = False) -> Replay:
    """Run ``policy`` over ``acceptance`` with ``batch`` rows (the module docstring's model);
    ``costs``: a step profile, or the seconds of a chain step of each k already priced
    (:func:`chain_step_seconds`)."""
    if batch < 1 or batch > acceptance.sequences:
        raise TreeoptError(f"batch {batch}: the workload has {acceptance.sequences} sequences, "
                           "and a batch needs one per row")
    seconds = (chain_step_seconds(costs, batch=batch, context=context,
                                  max_steps=acceptance.max_steps)
               if isinstance(costs, StepCosts) else np.asarray(costs, dtype=np.float64))
    rows, spans = acceptance.rows, acceptance.bounds()
    at = [spans[i][0] for i in range(batch)]  # each row's position and end
    end = [spans[i][1] for i in range(batch)]
    running, queue = list(range(batch)), batch
    steps, alive, means, previous = [], [], [], None
    tokens, steady = 0, True
    while running and (steady or drain):
        state = RoundState(len(steps), len(running), previous)
        k = policy.decide(state)
        if not 0 <= k <= acceptance.max_steps:
            raise TreeoptError(f"{policy.label}: chose {k} steps in round {state.round} at "
                               f"batch {state.batch}; {acceptance.source} records chains of "
                               f"0 … {acceptance.max_steps} steps (use a deeper trace, or "
                               "candidate steps it covers)")
        accepted = [rows[at[i]][k] for i in running]
        policy.observe(state, accepted)
        steps.append(k)
        alive.append(len(running))
        total = sum(accepted) + len(accepted)
        means.append(total / len(accepted))
        tokens += total
        previous, still = len(running), []
        for i, a in zip(running, accepted, strict=True):
            at[i] += a + 1
            if at[i] < end[i]:
                still.append(i)
            elif queue < len(spans):
                at[i], end[i] = spans[queue]
                queue += 1
                still.append(i)
            else:
                steady = False
        running = still
    steps_a = np.array(steps, dtype=np.int64)
    return Replay(policy.label, batch, steps_a, np.array(alive, dtype=np.int64),
                  np.array(means), tokens, float(seconds[steps_a].sum()))
