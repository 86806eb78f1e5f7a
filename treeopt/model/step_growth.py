"""Grow trees by the per-step walk: at each size, add the frontier node that most raises the mean
accepted length of the steps decoding takes (:func:`treeopt.model.simulation.step_walk`).

The growth order (:mod:`treeopt.model.growth`) maximises E[L] with every trace position weighted
alike. Decoding starts a step only where the last one ended, so the n-node tree whose steps accept
most can differ from the growth order's: a node accepted where long acceptances cluster is worth
less per step than its count says. This greedy growth prices every candidate node by the walk
itself. It is a heuristic, not an optimum — the per-step mean is not even monotone in the tree (a
longer acceptance can land the next step on a poor position) — so
:func:`treeopt.pricing.throughput.select` prices it beside the growth order and takes the faster tree.

A size costs one walk of every (candidate, sequence) pair the candidate changes — a pair is walked
again only where the last node added changed its sequence — all pairs advancing together: loops
over steps and candidates, never over positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Path, Tree

GROWTH_ORDER = "growth order"  # the families select prices: the growth's own trees,
PER_STEP_GREEDY = "per-step greedy"  # and this module's
FAMILIES = (GROWTH_ORDER, PER_STEP_GREEDY)
SHAPES = ("none", "contiguous", "grounded")


@dataclass(frozen=True, eq=False)
class StepGrowth:
    """Nested trees T_n = the first n paths of ``order``, and the per-step mean accepted length
    of each of T_0 … T_N on the trace they were grown on."""

    order: tuple[Path, ...]
    accept_length: npt.NDArray[np.float64]  # [N + 1]

    def tree(self, n: int) -> Tree:
        return Tree.from_choices(self.order[:n])


def grow_per_step(trace: RankTrace, *, max_nodes: int, max_depth: int | None = None,
                  max_rank: int | None = None, constraint: str = "none") -> StepGrowth:
    """Trees of 0 … ``max_nodes`` nodes, each the last plus the frontier node whose tree's
    per-step walk of ``trace`` accepts most per step (ties: shallower, then the lexicographically
    smaller path). ``constraint`` as in :func:`treeopt.model.growth.grow` (``none``, ``contiguous``
    or ``grounded``); the growth stops early where no frontier node is ever reached.

    >>> tr = RankTrace(np.array([[0], [1], [1], [1]], np.int16), {"sequence_positions": [4]})
    >>> g = grow_per_step(tr, max_nodes=2)
    >>> g.order, g.accept_length.tolist()
    (((1,), (0,)), [1.0, 1.6666666666666667, 2.0])
    """
    if constraint not in SHAPES:
        raise TreeoptError(f"the per-step greedy growth grows nested trees ({', '.join(SHAPES)}), "
                           f"not constraint {constraint!r}")
    walker = _Walker(trace, max_depth=trace.heads if max_depth is None else max_depth,
                     max_rank=max(trace.top_k, 1) if max_rank is None else max_rank,
                     ordered=constraint != "none", grounded=constraint == "grounded")
    means = [walker.mean]
    while len(walker.paths) <= max_nodes and walker.add_best():
        means.append(walker.mean)
    return StepGrowth(tuple(walker.paths[1:]), np.asarray(means, dtype=np.float64))


class _Walker:
    """The tree grown so far: where each position's walk through it ends, and decoding's steps
    under it (which positions start a step, the steps before each, each sequence's steps and
    where its last step ends, past the sequence where it overran)."""

    def __init__(self, trace: RankTrace, *, max_depth: int, max_rank: int, ordered: bool,
                 grounded: bool) -> None:
        counts = trace.meta.get("sequence_positions")
        if not counts or sum(counts) != trace.positions:
            raise TreeoptError("the per-step greedy growth walks the trace's sequences step by "
                               "step and needs its 'sequence_positions' (recorded by treeopt "
                               "calibrate); this trace has none")
        self.ranks = trace.ranks  # [positions, heads]
        self.max_depth, self.max_rank = min(max_depth, trace.heads), max_rank
        self.ordered, self.grounded = ordered, grounded
        lengths = np.asarray(counts, dtype=np.int64)
        self.ends = np.cumsum(lengths)  # [sequences]
        self.starts = self.ends - lengths
        self.sequence = np.repeat(np.arange(len(lengths)), lengths)  # [positions]
        self.accepted = np.ones(trace.positions, dtype=np.int64)  # under the tree so far
        self.node = np.zeros(trace.positions, dtype=np.int64)  # where each walk ends (0: root)
        self.paths: list[Path] = [()]
        self.index: dict[Path, int] = {(): 0}
        self.depth = np.zeros(1, dtype=np.int64)  # [nodes]
        self.children = np.zeros(1, dtype=np.int64)
        self.may_branch = np.ones(1, dtype=bool)  # grounded: its first child may be added
        self.is_start = np.ones(trace.positions, dtype=bool)  # T_0 steps at every position
        self.before = np.arange(trace.positions) - self.starts[self.sequence]
        self.steps, self.end = lengths.copy(), self.ends.copy()  # [sequences]
        self.known = np.zeros(0, dtype=np.int64)  # walks priced already: sorted pair codes,
        self.known_end = self.known_steps = np.zeros(0, dtype=np.int64)  # and their results

    @property
    def mean(self) -> float:
        return int((self.end - self.starts).sum()) / int(self.steps.sum())

    def add_best(self) -> bool:
        """Add the candidate whose tree accepts most per step; False where there is none."""
        keys, hits, reach = self._candidates()
        if not keys.size:
            return False
        positions, sequences = len(self.node), len(self.starts)
        pairs = np.unique(hits // positions * sequences + self.sequence[hits % positions])
        pair_key, pair_sequence = pairs // sequences, pairs % sequences  # the walks it changes
        end, steps = self._priced(pairs, hits)
        which = np.searchsorted(keys, pair_key)  # [pairs] → candidate
        tokens = np.bincount(which, end - self.end[pair_sequence], minlength=keys.size)
        more = np.bincount(which, steps - self.steps[pair_sequence], minlength=keys.size)
        total_t, total_s = int((self.end - self.starts).sum()), int(self.steps.sum())
        best, best_rank = 0, None
        for i, key in enumerate(keys.tolist()):  # one candidate node at a time
            path = self.paths[key // self.max_rank] + (key % self.max_rank,)
            rank = (-(total_t + int(tokens[i])) / (total_s + int(more[i])), len(path), path)
            if best_rank is None or rank < best_rank:
                best, best_rank = i, rank
        reached = reach == keys[best]
        self._add(int(keys[best]), reached)
        self._walk_base(pair_sequence[which == best])
        changed = np.isin(self.known % sequences, np.unique(self.sequence[reached]))
        self.known, self.known_end, self.known_steps = (
            self.known[~changed], self.known_end[~changed], self.known_steps[~changed])
        return True

    def _priced(self, pairs: npt.NDArray[np.int64],
                hits: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], ...]:
        """:meth:`_walk` of each (candidate · sequences + sequence) pair, walked again only
        where the last size changed the sequence: a walk reads its own sequence alone."""
        sequences = len(self.starts)
        at = np.minimum(np.searchsorted(self.known, pairs), max(self.known.size - 1, 0))
        have = (self.known[at] == pairs) if self.known.size else np.zeros(pairs.size, bool)
        end, steps = np.zeros_like(pairs), np.zeros_like(pairs)
        end[have], steps[have] = self.known_end[at[have]], self.known_steps[at[have]]
        new = ~have
        end[new], steps[new] = self._walk(pairs[new] // sequences, pairs[new] % sequences, hits)
        self.known, self.known_end, self.known_steps = pairs, end, steps
        return end, steps

    def _candidates(self) -> tuple[npt.NDArray[np.int64], ...]:
        """Candidate keys (parent node · max_rank + rank), sorted; each step start's candidate
        as key · positions + position, sorted; and the candidate each position's walk would
        reach next (-1: none)."""
        node_depth = self.depth[self.node]
        live = np.flatnonzero(node_depth < self.max_depth)
        rank = np.full(self.node.shape, -1, dtype=np.int64)
        rank[live] = self.ranks[live, node_depth[live]]
        ok = (rank >= 0) & (rank < self.max_rank)
        bridges = np.zeros(0, dtype=np.int64)
        if self.ordered:  # a node's children come in rank order, ranks 0 … m-1
            nxt = self.children[self.node]
            ok &= self.may_branch[self.node]
            later = ok & (rank > nxt)  # reached only through a node no position reaches yet
            bridges = np.unique(self.node[later] * self.max_rank + nxt[later])
            ok &= rank == nxt
        reach = np.where(ok, self.node * self.max_rank + rank, -1)
        at = np.flatnonzero(ok & self.is_start)
        hits = np.sort(reach[at] * len(self.node) + at)
        return np.union1d(reach[ok], bridges), hits, reach

    def _walk(self, key: npt.NDArray[np.int64], sequence: npt.NDArray[np.int64],
              hits: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], ...]:
        """Where each pair's sequence's last step ends, and its steps, with the pair's candidate
        in the tree. All pairs step together. On the tree's own steps a pair jumps to the next
        of them that reaches its candidate, or, with none left, to the tree's own end."""
        positions = len(self.node)
        parent, rank = key // self.max_rank, key % self.max_rank
        depth = self.depth[parent]
        at, end = self.starts[sequence].copy(), self.ends[sequence]
        steps = np.zeros_like(at)
        running = np.arange(at.size)
        while running.size:
            now, k, s = at[running], key[running], sequence[running]
            code = k * positions + now
            hit = hits[np.minimum(np.searchsorted(hits, code), hits.size - 1)]
            on = self.is_start[now]
            jump = on & (hit >= code) & (hit // positions == k) & (hit % positions < end[running])
            rest = on & ~jump  # the tree's own steps from here to the end
            to = np.where(jump, hit % positions, now)
            reached = (self.node[to] == parent[running]) & (
                self.ranks[to, depth[running]] == rank[running])
            steps[running] += np.where(rest, self.steps[s] - self.before[now],
                                       np.where(jump, self.before[to] - self.before[now], 0) + 1)
            at[running] = np.where(rest, self.end[s], to + self.accepted[to] + reached)
            running = running[at[running] < end[running]]
        return at, steps

    def _walk_base(self, sequences: npt.NDArray[np.int64]) -> None:
        """Walk ``sequences`` again under the tree as it now is."""
        self.is_start[np.isin(self.sequence, sequences)] = False
        at, steps = self.starts[sequences].copy(), np.zeros(len(sequences), dtype=np.int64)
        running = np.arange(len(sequences))
        while running.size:  # one iteration per step
            now = at[running]
            self.is_start[now] = True
            self.before[now] = steps[running]
            steps[running] += 1
            at[running] = now + self.accepted[now]
            running = running[at[running] < self.ends[sequences[running]]]
        self.steps[sequences], self.end[sequences] = steps, at

    def _add(self, key: int, reached: npt.NDArray[np.bool_]) -> None:
        parent, rank = divmod(key, self.max_rank)
        path = self.paths[parent] + (rank,)
        new = len(self.paths)
        self.paths.append(path)
        self.index[path] = new
        self.children[parent] += 1
        left = self.index.get(path[:-1] + (rank - 1,)) if rank else None
        branches = not self.grounded or rank == 0 or (left is not None
                                                      and self.children[left] > 0)
        self.depth = np.append(self.depth, len(path))
        self.children = np.append(self.children, 0)
        self.may_branch = np.append(self.may_branch, branches)
        if rank == 0 and len(path) > 1:  # a first child lets its parent's right sibling branch
            right = self.index.get(path[:-2] + (path[-2] + 1,))
            if right is not None:
                self.may_branch[right] = True
        self.accepted[reached] += 1
        self.node[reached] = new
