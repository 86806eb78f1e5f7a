"""SGLang's trie drafter (``--speculative-algorithm NGRAM``): a trie of the context's n-grams,
matched at every suffix of the context, proposing a *tree* of what followed. No weights, no
model forward: dictionary walks on the host.

The rule is SGLang's newer one (its ``--speculative-ngram-max-trie-depth`` generation), read from
``python/sglang/srt/speculative/cpp_ngram/trie.cpp`` at commit ``0d1d60f5``
(``Trie::insert``, ``Trie::match``, ``buildRecency``, ``buildFrequency``) and
``ngram_worker.py`` (the one with ``max_trie_depth``):

- **Insert.** A token sequence of length L is inserted as the paths ``tokens[i : i + min(L-i,
  D)]`` for i = 0 … L-1 in turn (D = ``max_trie_depth``). Each node on a path counts ``freq``
  and is moved to the front of its parent's recency list (``lru``).
- **Match.** The anchors are the context's suffixes of length 1 … min(L, D) whose trie node
  exists and has children, longest first (every one, not only the longest).
- **Candidates.** ``bfs`` (SGLang's default ``BFS``) reads each node's children in recency
  order, most recently touched first; ``prob`` (``PROB``) by ``freq`` descending, then token id
  ascending (SGLang's ``sorted_children``).

treeopt turns this into a rank trace: the candidates at a tree node whose drafted path below the
root is p are the ordered union, over the anchors a (longest first), of the children of the trie
node a + p (where it exists), each anchor's children in the match type's order, a token already
listed by a longer anchor not repeated. A token's *rank* is its index in that list. The root (the
step's last committed token) is part of the context the anchors are suffixes of.

**Where this differs from SGLang, and why.** SGLang keeps ONE trie shared by every request,
capped at ``capacity`` nodes (least recently used leaves evicted), and after each verify step
inserts only the last D tokens of each request (so most of a prompt is never indexed). Its
trie's state therefore depends on where the step boundaries fell (how many tokens each step
accepted) and on the other requests served, which no teacher-forced trace can reproduce. Here
each row has its own trie over its whole context (prompt, accepted tokens, root), with no
capacity limit: the state is a function of the context alone, so the trace is exact per prompt
and live drafting sees the same trie as calibration. SGLang's own insertion rule (the tails) is
left out for that reason: at no batch size would its trace be exact. SGLang also shapes each
step's tree itself (a breadth per anchor length, ``min``/``max_bfs_breadth``, shrinking per
level; sibling order is hash order); treeopt instead grows a static tree over these ranks.

Recency is well defined: a child's stamp ``last`` is the start i of the latest inserted path that
passed through it (SGLang inserts the paths in order of i, each touch moving the child to the
front), so siblings are ordered by the start of their latest occurrence, descending; siblings
never share a start. Growing the sequence token by token (:class:`TrieIndex`) reaches the same
trie as inserting the whole sequence at once (:func:`reference_candidates`, the slow reference).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from treeopt.drafters.ngram import forced_positions
from treeopt.errors import TreeoptError
from treeopt.registry.kinds import TRIE_MATCH_TYPES

MATCH_TYPES: tuple[str, ...] = TRIE_MATCH_TYPES  # bfs: recency order; prob: frequency


@dataclass(frozen=True)
class TrieRule:
    """The trie's depth ``max_trie_depth`` (SGLang's ``--speculative-ngram-max-trie-depth``,
    default 18) and the order of a node's children, ``match`` (``bfs``: most recent first;
    ``prob``: most frequent first).

    >>> TrieRule().describe(), TrieRule(max_trie_depth=6, match="prob").describe()
    ('trie depth 18, bfs', 'trie depth 6, prob')
    """

    max_trie_depth: int = 18
    match: str = "bfs"

    def __post_init__(self) -> None:
        if self.max_trie_depth < 2:  # a trie of depth 1 has no node with children to match
            raise TreeoptError(f"max_trie_depth must be ≥ 2, got {self.max_trie_depth}")
        if self.match not in MATCH_TYPES:
            raise TreeoptError(f"match must be one of {', '.join(MATCH_TYPES)}, got "
                               f"{self.match!r}")

    def describe(self) -> str:
        return f"trie depth {self.max_trie_depth}, {self.match}"


class _Node:
    """A trie node: its children by token, how many inserted paths passed through it, and the
    start of the latest one."""

    __slots__ = ("children", "freq", "last")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.freq = 0
        self.last = -1


_OrderKey = Callable[[tuple[int, _Node]], Any]  # sorts a node's (token, child) items


def _order_key(match: str) -> _OrderKey:
    if match == "bfs":
        return lambda item: -item[1].last
    return lambda item: (-item[1].freq, item[0])


def _union(nodes: Iterable[_Node], key: _OrderKey, limit: int) -> list[int]:
    """The first ``limit`` tokens of the ordered union of ``nodes``' children."""
    out: list[int] = []
    seen: set[int] = set()
    for node in nodes:
        for token, _ in sorted(node.children.items(), key=key):
            if token not in seen:
                seen.add(token)
                out.append(token)
                if len(out) >= limit:
                    return out
    return out


def _rank(nodes: Iterable[_Node], token: int, key: _OrderKey, limit: int) -> int:
    """``token``'s index in :func:`_union` of ``nodes`` (-1: absent or not below ``limit``),
    by counting rather than listing."""
    listed: set[int] = set()
    for node in nodes:
        children = node.children
        hit = children.get(token)
        if hit is not None:
            mine = key((token, hit))
            ahead = sum(1 for item in children.items()
                        if item[0] not in listed and key(item) < mine)
            rank = len(listed) + ahead
            return rank if rank < limit else -1
        listed.update(children)
        if len(listed) >= limit:
            return -1
    return -1


def _descend(nodes: Iterable[_Node], token: int) -> list[_Node]:
    """Each node's child ``token``, where it has one (order kept)."""
    out = []
    for node in nodes:
        child = node.children.get(token)
        if child is not None:
            out.append(child)
    return out


class TrieIndex:
    """One growing token sequence and the trie of its paths of up to ``max_trie_depth`` tokens,
    updated in O(D) per token: the candidates it lists equal :func:`reference_candidates`.

    >>> index = TrieIndex(TrieRule(max_trie_depth=3))
    >>> index.extend([1, 2, 3, 1, 2, 4, 1]); index.candidates([], 4), index.candidates([2], 4)
    ([2], [4, 3])
    >>> index.rank([], 2, 4), index.rank([2], 3, 4), index.rank([2], 9, 4)
    (0, 1, -1)
    """

    def __init__(self, rule: TrieRule) -> None:
        self.rule = rule
        self.tokens: list[int] = []
        self._key = _order_key(rule.match)
        self._root = _Node()
        self._suffixes: list[_Node] = [self._root]  # the context's suffixes of 0 … D-1 tokens

    def extend(self, tokens: Iterable[int]) -> None:
        """Append ``tokens``: each one ends a path from each of the last D starts."""
        depth = self.rule.max_trie_depth
        for token in tokens:
            token, end = int(token), len(self.tokens)
            self.tokens.append(token)
            grown = [self._root]
            for n, node in enumerate(self._suffixes):  # node: the suffix of n tokens before it
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node()
                child.freq += 1
                child.last = end - n  # the start of the path that touched it
                if n + 1 < depth:
                    grown.append(child)
            self._suffixes = grown

    def anchors(self) -> list[_Node]:
        """The trie nodes of the context's suffixes that have children, longest first."""
        return [node for node in reversed(self._suffixes[1:]) if node.children]

    def candidates(self, path: Sequence[int], limit: int) -> list[int]:
        """The first ``limit`` candidates at the tree node ``path`` (tokens below the root)."""
        nodes = self.anchors()
        for token in path:
            nodes = _descend(nodes, int(token))
        return _union(nodes, self._key, limit)

    def rank(self, path: Sequence[int], token: int, limit: int) -> int:
        """``token``'s rank among the candidates at ``path``; -1 when absent or ≥ ``limit``."""
        nodes = self.anchors()
        for t in path:
            nodes = _descend(nodes, int(t))
        return _rank(nodes, int(token), self._key, limit)

    def draft(self, parents: Sequence[int], ranks: Sequence[int]) -> list[int]:
        """A static tree's tokens (node i: parent ``parents[i]``, -1 the root; rank
        ``ranks[i]``; parents first), -1 where the node has no candidate."""
        reached: list[list[_Node]] = []  # each node's trie nodes, one per anchor still matching
        lists: dict[int, list[int]] = {}  # each parent's candidates (-1: the root)
        need: dict[int, int] = {}
        for p, r in zip(parents, ranks, strict=True):
            need[p] = max(need.get(p, 0), r + 1)
        out = []
        for p, r in zip(parents, ranks, strict=True):
            above = self.anchors() if p < 0 else reached[p]
            if p not in lists:
                lists[p] = _union(above, self._key, need[p])
            token = lists[p][r] if r < len(lists[p]) else -1
            out.append(token)
            reached.append(_descend(above, token) if token >= 0 else [])
        return out

    def ranks_along(self, truth: Sequence[int], top_k: int) -> list[int]:
        """The ranks of ``truth`` (the true tokens after the root, depth 1 first), each among the
        candidates at the true path above it: one rank per depth, -1 where it is not among the
        first ``top_k``."""
        nodes, out = self.anchors(), []
        for token in truth:
            out.append(_rank(nodes, int(token), self._key, top_k) if nodes else -1)
            nodes = _descend(nodes, int(token))
        return out


def reference_candidates(context: Sequence[int], path: Sequence[int], rule: TrieRule,
                         limit: int) -> list[int]:
    """The candidates at ``path`` after ``context``, built the readable, slow way: SGLang's
    ``Trie::insert`` of the whole context (per node: ``freq`` and a recency list with touched
    children moved to the front), then its ``match`` and the ordered union.

    >>> reference_candidates([1, 2, 3, 1, 2, 4, 1], [2], TrieRule(max_trie_depth=3), 4)
    [4, 3]
    """
    children: dict[tuple[int, ...], list[int]] = {(): []}  # node → its children, recent first
    freq: dict[tuple[int, ...], int] = {}
    ids, D = [int(x) for x in context], rule.max_trie_depth
    for i in range(len(ids)):
        for j in range(i + 1, i + min(len(ids) - i, D) + 1):
            node, parent = tuple(ids[i:j]), tuple(ids[i: j - 1])
            if node not in freq:
                children[node] = []
            else:
                children[parent].remove(node[-1])
            children[parent].insert(0, node[-1])
            freq[node] = freq.get(node, 0) + 1
    anchors = [tuple(ids[len(ids) - n:]) for n in range(min(len(ids), D), 0, -1)]
    out: list[int] = []
    for a in anchors:
        if not children.get(a):  # SGLang: the suffix is in the trie and has children
            continue
        node = a + tuple(int(t) for t in path)
        order = children.get(node, [])
        if rule.match == "prob":
            order = sorted(order, key=lambda t, n=node: (-freq[(*n, t)], t))
        out += [t for t in order if t not in out]
    return out[:limit]


def trie_chain_lengths(sequence: Sequence[int], start: int, rule: TrieRule, depth: int,
                       ) -> npt.NDArray[np.int16]:
    """How many tokens the trie's top-1 chain of ``depth`` holds at each position of
    :func:`trie_ranks` (each token the first candidate below the one before it): 0 where the
    context's last token never occurred before.

    >>> trie_chain_lengths([1, 2, 3, 1, 2, 4, 1, 2, 3], 3, TrieRule(max_trie_depth=4), 2).tolist()
    [2, 0, 2]
    """
    index = TrieIndex(rule)
    parents, ranks = list(range(-1, depth - 1)), [0] * depth
    out = []
    for _ in forced_positions(sequence, start, depth, index):
        chain = index.draft(parents, ranks)
        out.append(chain.index(-1) if -1 in chain else depth)
    return np.array(out, dtype=np.int16)


def trie_ranks(sequence: Sequence[int], start: int, rule: TrieRule, depth: int, *,
               top_k: int) -> npt.NDArray[np.int16]:
    """The rank trace ``[positions, depth]`` of the trie drafter over ``sequence`` (prompt and
    continuation) for t = ``start`` … ``len - 2 - depth``: at position t the trie holds
    ``sequence[: t+2]`` (through the root ``sequence[t+1]``) and depth k ranks ``sequence[t+2+k]``
    among the candidates at the true path ``sequence[t+2 … t+1+k]``; -1 where it is not among
    the first ``top_k``.

    >>> trie_ranks([1, 2, 3, 1, 2, 4, 1, 2, 3], 3, TrieRule(max_trie_depth=4), 2, top_k=4).tolist()
    [[-1, -1], [-1, -1], [0, 1]]
    """
    index = TrieIndex(rule)
    out = np.full((max(0, len(sequence) - 1 - depth - start), depth), -1, dtype=np.int16)
    for row, truth in forced_positions(sequence, start, depth, index):
        out[row] = index.ranks_along(truth, top_k)
    return out
