"""Simulate greedy speculative decoding of a static tree on a rank trace, exactly.

At position t the node with rank path (r_1 … r_k) is accepted iff ρ_1(t) … ρ_k(t) = r_1 … r_k, so
``accept_length(t) = 1 + max{k : (ρ_1(t) … ρ_k(t)) ∈ T}`` (the 1 is the base model's own token).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError
from treeopt.model.accept_stats import AcceptStats
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Path, Tree


def walk(tree: Tree, trace: RankTrace) -> Iterator[npt.NDArray[np.int64]]:
    """Follow every position down the tree; yield, per depth, the token index each position
    reached there (-1 where its walk ended earlier). Loops over depth, never over positions."""
    trace.require(heads=tree.depth, source="simulate")
    table = tree.child_table  # [n+1, max_rank+1]: token index of child of token i with rank r
    token = np.zeros(trace.positions, dtype=np.int64)  # current accepted token, 0 = root
    alive = np.ones(trace.positions, dtype=bool)
    for d in range(tree.depth):
        rank = trace.ranks[:, d].astype(np.int64)
        ok = alive & (rank >= 0) & (rank < table.shape[1])
        child = np.full(trace.positions, -1, dtype=np.int64)
        child[ok] = table[token[ok], rank[ok]]
        alive = child >= 0
        token = np.where(alive, child, 0)
        yield child
        if not alive.any():
            break


def accept_lengths(tree: Tree, trace: RankTrace) -> npt.NDArray[np.int64]:
    """Accepted tokens per step (1 … depth+1) at every trace position.

    >>> tr = RankTrace(np.array([[0, 0], [0, 1], [1, 0], [2, 0], [-1, 0]], np.int16))
    >>> accept_lengths(Tree.from_choices([[0], [1], [0, 0]]), tr).tolist()
    [3, 2, 2, 1, 1]
    """
    length = np.ones(trace.positions, dtype=np.int64)
    for reached in walk(tree, trace):
        length += reached >= 0
    return length


def node_visits(tree: Tree, trace: RankTrace) -> npt.NDArray[np.int64]:
    """Positions at which each node is accepted, in canonical node order.

    >>> tr = RankTrace(np.array([[0, 0], [0, 1], [1, 0], [2, 0], [-1, 0]], np.int16))
    >>> node_visits(Tree.from_choices([[0], [1], [0, 0]]), tr).tolist()
    [2, 1, 1]
    """
    visits = np.zeros(tree.num_tokens, dtype=np.int64)
    for reached in walk(tree, trace):
        visits += np.bincount(reached[reached >= 0], minlength=tree.num_tokens)
    return visits[1:]


def step_walk(tree: Tree, trace: RankTrace) -> tuple[npt.NDArray[np.int64], list[tuple[int, int]]] | None:
    """The steps greedy decoding really takes along each trace sequence: their accepted lengths,
    and each sequence's (accepted tokens, steps).

    A step starts at a position, accepts L tokens, and the next step starts L positions later,
    so decoding skips positions that the position-weighted E[L] counts; where long acceptances
    cluster, the per-step mean is lower. Needs ``sequence_positions`` (positions per calibration
    sequence, in order) in the trace meta; None without it. Loops over steps, never positions,
    and all sequences step together.

    >>> tr = RankTrace(np.array([[0], [0], [-1], [0]], np.int16), {"sequence_positions": [4]})
    >>> lengths, per_sequence = step_walk(Tree.chain(1), tr)
    >>> lengths.tolist(), per_sequence
    ([2, 1, 2], [(5, 3)])
    """
    counts = trace.meta.get("sequence_positions")
    if not counts or sum(counts) != trace.positions:
        return None
    lengths = accept_lengths(tree, trace)
    ends = np.cumsum(np.asarray(counts, dtype=np.int64))
    at = ends - np.asarray(counts, dtype=np.int64)  # each sequence's next step starts here
    seqs, taken = [], []
    running = np.flatnonzero(at < ends)
    while running.size:  # all sequences advance together: one iteration per step, not position
        step = lengths[at[running]]
        seqs.append(running)
        taken.append(step)
        at[running] += step
        running = running[at[running] < ends[running]]
    seq = np.concatenate(seqs) if seqs else np.zeros(0, np.int64)
    val = np.concatenate(taken) if taken else np.zeros(0, np.int64)
    steps = val[np.argsort(seq, kind="stable")]  # sequence by sequence, in step order
    tokens = np.bincount(seq, weights=val, minlength=len(counts)).astype(np.int64)
    per_sequence = list(zip(tokens.tolist(), np.bincount(seq, minlength=len(counts)).tolist(),
                            strict=True))
    return steps.astype(np.int64), per_sequence


def nested_step_means(paths: Sequence[Path], trace: RankTrace, *,
                      sizes: int) -> npt.NDArray[np.float64]:
    """Per-step mean accepted length (:func:`simulate` with ``per_step``) of every tree
    ``Tree.from_choices(paths[:n])``, n = 0 … ``sizes`` − 1, in one pass over the trace.

    Each path's parent must come before it in ``paths`` (a growth order, or one capped in
    depth), so each tree holds the next: a position accepts, under the n-node tree, the nodes of
    its walk through the largest tree whose place in ``paths`` is below n. All trees' steps then
    advance together, one iteration per step.

    >>> tr = RankTrace(np.array([[0, 0], [1, 0], [0, 1], [-1, 0], [1, 0], [0, 0]], np.int16),
    ...                {"sequence_positions": [3, 3]})
    >>> order = [(0,), (0, 0), (1,)]
    >>> nested_step_means(order, tr, sizes=4).tolist()
    [1.0, 1.6, 2.0, 2.0]
    >>> [simulate(Tree.from_choices(order[:n]), tr, per_step=True).mean_accept_length
    ...  for n in range(4)]
    [1.0, 1.6, 2.0, 2.0]
    """
    counts = _per_step_counts(trace)
    place = {tuple(p): i for i, p in enumerate(paths[:sizes - 1])}
    for p, i in place.items():
        if len(p) > 1 and place.get(p[:-1], i) >= i:
            raise TreeoptError(f"path {list(p)} comes before its parent {list(p[:-1])}, or "
                               "without it: the trees are not nested")
    largest = Tree.from_choices(list(place))
    rank = np.array([sizes] + [place[p] for p in largest.paths], dtype=np.int32)  # token → place
    places = np.zeros((0, trace.positions), dtype=np.int32)  # [depth, positions]
    for reached in walk(largest, trace):
        places = np.vstack([places, rank[np.where(reached >= 0, reached, 0)][None, :]])
    chunk = max(1, _CHUNK // max(trace.positions, 1))  # trees walked at once, to bound memory
    means = [_step_means(places, np.arange(lo, min(lo + chunk, sizes)), counts)
             for lo in range(0, sizes, chunk)]
    return np.concatenate(means)


_CHUNK = 1 << 25  # (tree, position) cells a nested walk holds at once


def _step_means(places: npt.NDArray[np.int32], trees: npt.NDArray[np.int64],
                counts: list[int]) -> npt.NDArray[np.float64]:
    """Per-step mean of each n-node tree, n in ``trees``, given the place in the order of the
    node each position reaches at every depth (``places``: [depth, positions])."""
    positions = places.shape[1]
    accepted = np.ones((len(trees), positions),  # [trees, positions]
                       dtype=np.int8 if len(places) < 127 else np.int16)
    for at_depth in places:
        accepted += at_depth[None, :] < trees[:, None]
    lengths = np.asarray(counts, dtype=np.int64)
    ends = np.tile(np.cumsum(lengths), len(trees))  # [trees × sequences], tree-major
    starts = ends - np.tile(lengths, len(trees))
    at, steps = starts.copy(), np.zeros_like(starts)
    row = np.repeat(np.arange(len(trees), dtype=np.int64) * positions, len(lengths))
    flat = accepted.ravel()
    running = np.flatnonzero(at < ends)
    while running.size:  # one iteration per step, every tree and sequence together
        now = at[running]
        now += flat[row[running] + now]
        at[running] = now
        steps[running] += 1
        running = running[now < ends[running]]
    tokens = (at - starts).reshape(len(trees), -1).sum(axis=1)  # steps overrun a sequence's end
    per_tree = steps.reshape(len(trees), -1).sum(axis=1)
    return np.array([t / n if n else 0.0 for t, n in zip(tokens.tolist(), per_tree.tolist(),
                                                         strict=True)])


def _per_step_counts(trace: RankTrace) -> list[int]:
    """Positions per calibration sequence, which a per-step walk needs; an error without them."""
    counts = trace.meta.get("sequence_positions")
    if not counts or sum(counts) != trace.positions:
        raise TreeoptError("per-step simulation needs the trace's 'sequence_positions' "
                           "(recorded by treeopt calibrate); this trace has none")
    return list(counts)


def step_lengths(tree: Tree, trace: RankTrace) -> npt.NDArray[np.int64] | None:
    """Accepted lengths of the steps of :func:`step_walk`, all sequences in order (None without
    ``sequence_positions``).

    >>> tr = RankTrace(np.array([[0], [0], [-1], [0]], np.int16), {"sequence_positions": [4]})
    >>> step_lengths(Tree.chain(1), tr).tolist()
    [2, 1, 2]
    """
    walk = step_walk(tree, trace)
    return None if walk is None else walk[0]


def steps_inside(lengths: Sequence[Sequence[int]], positions: Sequence[int]) -> list[int]:
    """The accepted lengths of the steps that start inside each sequence's first ``positions``
    new tokens: the steps a trace with that many positions per sequence walks (``lengths``: each
    sequence's accepted lengths, step by step).

    >>> steps_inside([(3, 3, 2, 4), (1, 5)], [7, 2])
    [3, 3, 2, 1, 5]
    """
    inside = []
    for steps, count in zip(lengths, positions, strict=True):
        start = 0
        for length in steps:
            if start >= count:
                break
            inside.append(length)
            start += length
    return inside


def _row_walk(tree: Tree, trace: RankTrace,
              ) -> tuple[npt.NDArray[np.int64], list[tuple[int, int]]] | None:
    """:func:`step_walk` for a figure whose rows are the trace's sequences: None without
    ``sequence_positions``, refused where a sequence holds no position."""
    if "sequence_positions" not in trace.meta:
        return None
    trace.sequence_lengths()  # refuses a sequence of 0 positions
    return step_walk(tree, trace)


def batch_window_accept_length(tree: Tree, trace: RankTrace, batch: int) -> float | None:
    """Mean accepted length per row and step that batches of ``batch`` sequences show while all
    their rows run: what a batched live measurement counts (tokens/s in the steady window, which
    ends when a batch's first row finishes). The trace's sequences go in consecutive groups of
    ``batch``, a shorter last group dropped, as the live comparison groups its prompts. Each
    group counts its rows over its first S steps, S being the fewest steps any of its rows takes
    (:func:`step_walk`).

    A row that accepts well then counts as much as one that accepts badly. The pooled per-step
    mean instead weights each sequence by its steps, so where acceptance differs from sequence to
    sequence the window's mean is the higher. At batch 1 the two are the same. Returns None
    without ``sequence_positions``, or with fewer sequences than ``batch``; a sequence of 0
    positions, no row, is refused (:meth:`~treeopt.model.trace.RankTrace.sequence_lengths`).

    >>> tr = RankTrace(np.array([[0], [0], [0], [0], [-1], [-1], [-1], [-1]], np.int16),
    ...                {"sequence_positions": [4, 4]})
    >>> walk = step_walk(Tree.chain(1), tr)
    >>> walk[0].tolist(), walk[1]
    ([2, 2, 1, 1, 1, 1], [(4, 2), (4, 4)])
    >>> batch_window_accept_length(Tree.chain(1), tr, 1), batch_window_accept_length(Tree.chain(1), tr, 2)
    (1.3333333333333333, 1.5)
    """
    return _window_mean(tree, trace, batch, continuous=False)


def continuous_window_accept_length(tree: Tree, trace: RankTrace,
                                    batch: int) -> float | None:
    """Mean accepted length per row and step that continuous batching of ``batch`` rows shows
    while all its rows run: the trace's sequences go to the rows in order, and a row whose
    sequence ends takes the next before the following step, as the live loop's continuous
    batching does (:meth:`treeopt.decoding.loop.Decoder.decode` with ``batch``). The window
    counts every step up to and including the one in which a row ends with no sequence left to
    take. Each sequence's steps are its :func:`step_walk`. Returns None without
    ``sequence_positions``, or with fewer sequences than ``batch``; a sequence of 0 positions,
    no row, is refused (:meth:`~treeopt.model.trace.RankTrace.sequence_lengths`).

    With as many sequences as rows it is :func:`batch_window_accept_length`; with more, a row
    that ends early no longer ends the window, so the rows' long, well-accepted sequences count
    as long as they run.

    >>> tr = RankTrace(np.array([[0], [0], [0], [0], [-1], [-1], [0], [0]], np.int16),
    ...                {"sequence_positions": [4, 2, 2]})
    >>> walk = step_walk(Tree.chain(1), tr)
    >>> walk[0].tolist(), walk[1]
    ([2, 2, 1, 1, 2], [(4, 2), (2, 2), (2, 1)])
    >>> continuous_window_accept_length(Tree.chain(1), tr, 2)  # rows' steps (2, 1), (2, 1): both
    1.5
    >>> continuous_window_accept_length(Tree.chain(1), tr, 1)  # 2, 2, then 1, 1, then 2 (ends)
    1.6
    >>> continuous_window_accept_length(Tree.chain(1), tr, 3) == batch_window_accept_length(
    ...     Tree.chain(1), tr, 3)
    True
    """
    return _window_mean(tree, trace, batch, continuous=True)


def _window_mean(tree: Tree, trace: RankTrace, batch: int, *, continuous: bool) -> float | None:
    """Mean accepted length over the rows and steps of :func:`window_steps`."""
    walk = _row_walk(tree, trace)
    if walk is None or len(walk[1]) < batch:
        return None
    steps, per_sequence = walk
    rows = window_steps([n for _, n in per_sequence], batch, continuous=continuous)
    return float(steps[rows].mean())


def window_steps(counts: Sequence[int], batch: int, *,
                 continuous: bool = False) -> npt.NDArray[np.int64]:
    """The steps a batch of ``batch`` rows takes while all its rows run, as [batch step, row]
    indices into steps listed sequence by sequence (sequence i taking ``counts[i]`` ≥ 1 steps,
    as :func:`step_walk` lists them). Static: consecutive groups of ``batch`` sequences (a
    shorter last group dropped), each over its first S steps, S the fewest any of its rows
    takes. ``continuous``: the sequences go to the rows in order, a row whose sequence ends
    taking the next before the following step, up to and including the step in which a row ends
    with no sequence left to take. Needs at least ``batch`` sequences.

    >>> window_steps([2, 3], 2).tolist()  # steps 0-1 of the first, 2-4 of the second
    [[0, 2], [1, 3]]
    >>> window_steps([1, 3, 1], 2, continuous=True).tolist()
    [[0, 1], [4, 2]]
    """
    if len(counts) < batch or min(counts, default=1) < 1:
        raise TreeoptError(f"a window of {batch} rows over {len(counts)} sequences, each of "
                           "one step at least")
    first = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    if not continuous:
        groups = [range(g * batch, (g + 1) * batch) for g in range(len(counts) // batch)]
        return np.concatenate([first[list(g)] + np.arange(min(counts[i] for i in g))[:, None]
                               for g in groups]).astype(np.int64)
    rows, waiting, taken = [(s, 0) for s in range(batch)], batch, []
    while True:
        taken.append([first[s] + i for s, i in rows])
        ended = False
        for r, (s, i) in enumerate(rows):
            i += 1
            while i == counts[s] and waiting < len(counts):
                s, i, waiting = waiting, 0, waiting + 1
            ended = ended or i == counts[s]
            rows[r] = (s, i)
        if ended:
            return np.asarray(taken, np.int64)


class Simulation(AcceptStats):
    """Acceptance of a tree on a trace: accepted-length statistics over its positions (or, per
    step, over the steps decoding takes), with the position count."""

    @property
    def positions(self) -> int:
        return self.count

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "positions": self.positions}


def simulate(tree: Tree, trace: RankTrace, *, per_step: bool = False) -> Simulation:
    """Simulate ``tree`` on every position of ``trace`` (E[L], positions weighted equally), or,
    with ``per_step``, only at the positions where decoding's steps start (:func:`step_walk`;
    its standard error is then taken over sequences).

    >>> tr = RankTrace(np.array([[0, 0], [0, 1], [1, 0], [2, 0], [-1, 0]], np.int16))
    >>> s = simulate(Tree.from_choices([[0], [1], [0, 0]]), tr)
    >>> s.mean_accept_length, s.histogram
    (1.8, (0, 2, 2, 1))
    """
    if not per_step:
        return Simulation.of(accept_lengths(tree, trace), min_bins=tree.depth + 2)
    walk = step_walk(tree, trace)
    if walk is None:
        _per_step_counts(trace)  # raises: the trace records no sequence_positions
    return Simulation.of(walk[0], min_bins=tree.depth + 2, sequences=walk[1])


@dataclass(frozen=True)
class HeldOut:
    """E[L] of the same tree on the trace it was grown on and on held-out positions."""

    calibration: Simulation
    held_out: Simulation

    @property
    def gap(self) -> float:
        """Calibration E[L] minus held-out E[L]: how much the tree overfits (positive = optimistic)."""
        return self.calibration.mean_accept_length - self.held_out.mean_accept_length

    @property
    def relative_gap(self) -> float:
        return self.gap / self.held_out.mean_accept_length

    def to_json(self) -> dict[str, Any]:
        return {
            "calibration": self.calibration.to_json(),
            "held_out": self.held_out.to_json(),
            "gap": self.gap,
            "relative_gap": self.relative_gap,
        }


def held_out(tree: Tree, calibration: RankTrace, evaluation: RankTrace) -> HeldOut:
    """Evaluate ``tree`` (grown on ``calibration``) on ``calibration`` and on ``evaluation``."""
    if evaluation.heads < tree.depth:
        raise TreeoptError(
            f"held-out trace has {evaluation.heads} heads but the tree needs {tree.depth}")
    return HeldOut(simulate(tree, calibration), simulate(tree, evaluation))
