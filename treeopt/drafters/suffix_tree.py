"""SuffixDecoding's trees (Oliaro et al., NeurIPS 2025, arXiv 2411.04975): suffix trees of token
sequences with counts, and the speculation they grow. No weights, no model forward: dictionary
walks on the host.

The rule is Arctic Inference's (the library vLLM's ``method: suffix`` imports), read from
``snowflakedb/ArcticInference`` at commit ``9d464388`` — ``csrc/suffix_decoding/suffix_tree.cc``
(``SuffixTree::append``, ``speculate``, ``_match_context``, ``_speculate_path``,
``_speculate_tree``) and ``arctic_inference/suffix_decoding/cache.py``
(``SuffixDecodingCache``) — and from vLLM's ``vllm/v1/spec_decode/suffix_decoding.py`` at
commit ``044ac3a0`` (``SuffixDecodingProposer.propose``):

- **Trees.** A tree holds sequences; each position i of a sequence is the start of a path of up
  to ``max_tree_depth`` tokens (D, vLLM's ``suffix_decoding_max_tree_depth``, default 24), and
  every node counts the paths through it (Arctic compresses single-child runs; the counts are
  those of this uncompressed tree). A request's *prompt tree* holds its prompt followed by its
  response so far; the *global tree* holds the responses (not the prompts) of the cached
  requests, the active ones' growing as they are generated (``add_active_response``).
- **Cache.** A request enters the global cache when it starts (vLLM: at its first proposal,
  after the prefill's token); the cache then holds at most ``max_cached_requests`` responses
  (vLLM's default 10,000; -1: no limit; 0: no global tree), the oldest evicted first (FIFO,
  never the new one). A finished request's response stays cached until evicted.
- **Match.** The context is the last D tokens (prompt, response, the step's root). For each
  match length m = 1, 2, … (m < the context's length, as Arctic's loop bounds it; stopping at
  the first suffix the tree lacks), the node of the context's last m tokens yields a draft of at
  most ``min(max_spec_tokens, ⌊m · max_spec_factor + max_spec_offset⌋)`` tokens (vLLM: factor
  1.0, offset 0, ``max_spec_tokens`` its ``num_speculative_tokens``).
- **Probability.** A child's probability is its count over its parent's, a node's the product
  along its path from the matched node; a token is drafted only at probability ≥
  ``min_token_prob`` (0.1).
- **Path (what vLLM and Arctic's vLLM plugin verify).** From the matched node, follow the
  most-counted child while the length and probability allow; the draft's *score* is the sum of
  its tokens' probabilities. The best score over m wins (ties: the longer match); then the
  prompt tree's draft if its score is ≥ the global tree's, else the global tree's.

treeopt turns this into a rank trace, as it does SGLang's trie (:mod:`treeopt.drafters.
ngram_trie`): the step's *speculation tree* is the subtree below the chosen tree's matched node,
restricted to nodes within the length limit and at probability ≥ ``min_token_prob``; the
candidates at a node are its children there, most counted first (ties: smaller token id first).
A token's rank is its index among them. The rank-0 path is exactly the path draft vLLM verifies
(a chain), so a chain walked over the trace prices vLLM's ``suffix`` method; a branching static
tree over the same ranks is treeopt's tree of the same speculation (no engine verifies one:
Arctic's best-first ``use_tree_spec`` runs in its simulator only, and is not modelled here).

**Where this differs from Arctic, and why.** Equal counts: Arctic keeps siblings in a list whose
order among equal counts follows the history of increments (``_increment_count``); here they
are ordered by token id, so a node's order is a function of its counts. Probabilities are
computed in double precision (Arctic: float32), which can only differ at a probability within
float32 rounding of ``min_token_prob``. The choice between trees and match lengths uses the
path scores also for treeopt's branching trees. A finished request's cached response is exactly
its output (cut at the budget and EOS); vLLM adds each step's sampled tokens as it proposes,
which may leave there the few tokens a last step sampled past the stop.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError


@dataclass(frozen=True)
class SuffixRule:
    """SuffixDecoding's settings, with vLLM's defaults (``SpeculativeConfig``'s
    ``suffix_decoding_*``); ``max_spec_tokens``: the longest draft (vLLM's
    ``num_speculative_tokens``; treeopt's drafter depth).

    >>> SuffixRule(max_spec_tokens=8).describe()
    'tree depth 24, factor 1.0, min prob 0.1, 10000 requests cached, 8 tokens at most'
    """

    max_spec_tokens: int
    max_tree_depth: int = 24
    max_spec_factor: float = 1.0
    max_spec_offset: float = 0.0
    min_token_prob: float = 0.1
    max_cached_requests: int = 10000

    def __post_init__(self) -> None:
        if self.max_spec_tokens < 1:
            raise TreeoptError(f"max_spec_tokens must be ≥ 1, got {self.max_spec_tokens}")
        if self.max_tree_depth < 2:  # a depth-1 tree matches one token and proposes none
            raise TreeoptError(f"max_tree_depth must be ≥ 2, got {self.max_tree_depth}")
        if not self.max_spec_factor >= 0:
            raise TreeoptError(f"max_spec_factor must be ≥ 0, got {self.max_spec_factor}")
        if not 0 <= self.min_token_prob <= 1:
            raise TreeoptError(f"min_token_prob must be in 0 … 1, got {self.min_token_prob}")
        if self.max_cached_requests < -1:
            raise TreeoptError(f"max_cached_requests must be ≥ -1 (-1: no limit, 0: no global "
                               f"tree), got {self.max_cached_requests}")

    def describe(self) -> str:
        cached = "all" if self.max_cached_requests < 0 else str(self.max_cached_requests)
        offset = f" + {self.max_spec_offset}" if self.max_spec_offset else ""
        return (f"tree depth {self.max_tree_depth}, factor {self.max_spec_factor}{offset}, "
                f"min prob {self.min_token_prob}, {cached} requests cached, "
                f"{self.max_spec_tokens} tokens at most")

    def length_limit(self, match_len: int) -> int:
        """The most tokens a match of ``match_len`` tokens may draft (Arctic adds 1e-6 before
        flooring).

        >>> SuffixRule(max_spec_tokens=8, max_spec_factor=0.5).length_limit(5)
        2
        """
        by_match = int(match_len * self.max_spec_factor + self.max_spec_offset + 1e-6)
        return max(0, min(self.max_spec_tokens, by_match))


class _Node:
    """A tree node: its children by token and how many paths pass through it."""

    __slots__ = ("children", "count")

    def __init__(self) -> None:
        self.children: dict[int, _Node] = {}
        self.count = 0


class SuffixTree:
    """Sequences (by id) and the counted tree of their paths of up to ``depth`` tokens, grown
    in O(depth) per token; a sequence can be removed (evicted) again.

    >>> tree = SuffixTree(3)
    >>> tree.extend(0, [1, 2, 1, 2, 3]); tree.node([1, 2]).count, sorted(tree.node([1, 2]).children)
    (2, [1, 3])
    >>> tree.remove(0); tree.node([1]) is None
    True
    """

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.root = _Node()
        self.seqs: dict[int, list[int]] = {}
        self._ends: dict[int, list[_Node]] = {}  # per sequence: its suffixes of 0 … D-1 tokens

    def extend(self, seq: int, tokens: Iterable[int]) -> None:
        """Append ``tokens`` to sequence ``seq`` (a new one starts empty): each token ends a
        path from each of the last D starts."""
        ids = self.seqs.setdefault(seq, [])
        ends = self._ends.setdefault(seq, [self.root])
        for token in tokens:
            token = int(token)
            ids.append(token)
            grown = [self.root]
            for n, node in enumerate(ends):  # node: the sequence's suffix of n tokens
                child = node.children.get(token)
                if child is None:
                    child = node.children[token] = _Node()
                child.count += 1
                if n + 1 < self.depth:
                    grown.append(child)
            ends = grown
        self._ends[seq] = ends

    def remove(self, seq: int) -> None:
        """Take sequence ``seq`` out: every path it added is counted down, emptied nodes
        dropped."""
        ids = self.seqs.pop(seq)
        del self._ends[seq]
        for i in range(len(ids)):
            node = self.root
            for token in ids[i: i + self.depth]:
                child = node.children[token]
                child.count -= 1
                if child.count == 0:  # its subtree holds nothing else either
                    del node.children[token]
                    break
                node = child

    def node(self, path: Sequence[int]) -> _Node | None:
        """The node of ``path`` from the root, or None where the tree lacks it."""
        node: _Node | None = self.root
        for token in path:
            node = node.children.get(int(token))
            if node is None:
                return None
        return node


@dataclass(frozen=True)
class Speculation:
    """A step's speculation tree: the matched ``node`` of the chosen tree (None: nothing to
    draft), how many tokens may be drafted below it (``limit``) and the least probability
    (``min_prob``); ``match_len`` and ``score`` as Arctic reports them."""

    node: _Node | None
    limit: int
    min_prob: float
    match_len: int = 0
    score: float = 0.0

    def candidates(self, path: Sequence[int], limit: int) -> list[int]:
        """The first ``limit`` candidates at the speculation node ``path`` (tokens below the
        matched node): its children within the length limit and at probability ≥ the least,
        most counted first; empty where ``path`` leaves the speculation tree."""
        node, prob = self._walk(path)
        if node is None or len(path) >= self.limit:
            return []
        out = []
        for token, child in _ordered(node):
            if prob * child.count / node.count < self.min_prob or len(out) >= limit:
                break  # ordered by count: every later child is less probable
            out.append(token)
        return out

    def chain_length(self, depth: int) -> int:
        """How many tokens its top-1 chain of at most ``depth`` holds (each the first candidate
        below the one before it)."""
        path: list[int] = []
        while len(path) < depth and (first := self.candidates(path, 1)):
            path.append(first[0])
        return len(path)

    def ranks_along(self, truth: Sequence[int], top_k: int) -> list[int]:
        """The ranks of ``truth`` (depth 1 first), each among the candidates at the true path
        above it: -1 where it is not among the first ``top_k`` (or the path has left)."""
        out = []
        for k, token in enumerate(truth):
            listed = self.candidates(truth[:k], top_k) if not out or out[-1] >= 0 else []
            out.append(listed.index(token) if token in listed else -1)
        return out

    def _walk(self, path: Sequence[int]) -> tuple[_Node | None, float]:
        """The node at ``path`` below the matched node and its probability (None: absent or
        below the least probability)."""
        node, prob = self.node, 1.0
        for token in path:
            if node is None:
                break
            child = node.children.get(int(token))
            if child is None:
                return None, 0.0
            prob *= child.count / node.count
            node = child
        if node is None or prob < self.min_prob:
            return None, 0.0
        return node, prob


def _ordered(node: _Node) -> list[tuple[int, _Node]]:
    """A node's children, most counted first, ties by token id."""
    return sorted(node.children.items(), key=lambda item: (-item[1].count, item[0]))


def _path_score(node: _Node, limit: int, min_prob: float) -> float:
    """The score of Arctic's path draft from ``node``: the sum of the probabilities of the
    most-counted children followed while at most ``limit`` tokens and probability ≥
    ``min_prob``."""
    score, prob = 0.0, 1.0
    for _ in range(limit):
        if not node.children:
            break
        best = min(node.children.items(), key=lambda item: (-item[1].count, item[0]))[1]
        prob *= best.count / node.count
        if prob < min_prob:
            break
        score += prob
        node = best
    return score


def speculate(trees: Sequence[SuffixTree | None], context: Sequence[int], rule: SuffixRule,
              ) -> Speculation:
    """The speculation of ``context`` over ``trees`` (the prompt tree first, then the global
    tree; None: no such tree): per tree the best path score over match lengths (ties: the
    longer match), then the first tree whose score no later one beats.

    >>> tree = SuffixTree(4); tree.extend(0, [1, 2, 3, 1, 2, 4, 1, 2])
    >>> s = speculate([tree], [1, 2], SuffixRule(max_spec_tokens=3))
    >>> s.match_len, s.limit, s.candidates([], 4)
    (1, 1, [3, 4])
    """
    tail = [int(t) for t in context][-rule.max_tree_depth:]
    chosen = Speculation(None, 0, rule.min_token_prob)
    for n, tree in enumerate(trees):
        if tree is None:
            continue
        best = Speculation(None, 0, rule.min_token_prob)
        for m in range(1, len(tail)):
            node = tree.node(tail[len(tail) - m:])
            if node is None:
                break
            limit = rule.length_limit(m)
            score = _path_score(node, limit, rule.min_token_prob)
            if score >= best.score:
                best = Speculation(node, limit, rule.min_token_prob, m, score)
        if n == 0 or best.score > chosen.score:
            chosen = best
    return chosen


class SuffixCache:
    """The global tree and which requests' responses it holds, oldest first: Arctic's
    ``SuffixDecodingCache`` less the prompt trees (each :class:`Request` keeps its own).
    ``max_cached_requests``: at most that many responses (-1: no limit; 0: no global tree).

    >>> cache = SuffixCache(SuffixRule(max_spec_tokens=4, max_cached_requests=2))
    >>> a, b, c = cache.start(), cache.start(), cache.start(); cache.held
    [1, 2]
    """

    def __init__(self, rule: SuffixRule) -> None:
        self.rule = rule
        self.tree = SuffixTree(rule.max_tree_depth) if rule.max_cached_requests else None
        self.held: list[int] = []  # the cached responses' ids, oldest first
        self._next = 0

    def start(self) -> int:
        """A new request's response id: the oldest others evicted while more than the limit
        are held (Arctic's ``_maybe_evict_requests``)."""
        seq, self._next = self._next, self._next + 1
        if self.tree is None:
            return seq
        self.held.append(seq)
        limit = self.rule.max_cached_requests
        while limit > 0 and len(self.held) > limit:
            oldest = self.held.pop(0)
            if oldest in self.tree.seqs:
                self.tree.remove(oldest)
        return seq

    def forget(self, seq: int) -> None:
        """Response ``seq`` out of the cache, as though it had never been served."""
        if seq in self.held:
            self.held.remove(seq)
            if self.tree is not None and seq in self.tree.seqs:
                self.tree.remove(seq)

    def reset(self, responses: Sequence[Sequence[int]]) -> bool:
        """Hold ``responses`` alone again, as ids 0 … n-1, oldest first, after a run that began
        with them: the responses served since forgotten, any of them forgotten since put back.
        False, changing nothing, where the limit cannot hold them all (a cache built afresh
        evicts some)."""
        n, limit = len(responses), self.rule.max_cached_requests
        if self.tree is None or 0 < limit < n:
            return False
        for seq in [s for s in self.held if s >= n]:
            self.forget(seq)
        kept = set(self.held)
        for seq in range(n):
            if seq not in kept and responses[seq]:
                self.tree.extend(seq, responses[seq])
        self.held, self._next = list(range(n)), n
        return True

    def extend(self, seq: int, tokens: Sequence[int]) -> None:
        """Append to response ``seq`` while it is cached (an evicted one grows no more)."""
        if self.tree is not None and tokens and seq in self.held:
            self.tree.extend(seq, tokens)

    def replace(self, seq: int, tokens: Sequence[int]) -> None:
        """Response ``seq`` becomes ``tokens`` (its output, once the request has finished)."""
        if self.tree is None or seq not in self.held:
            return
        if self.tree.seqs.get(seq, []) != list(tokens):
            if seq in self.tree.seqs:
                self.tree.remove(seq)
            self.tree.extend(seq, tokens)


class Request:
    """One request's side of the cache: its prompt tree (prompt, then response), the context's
    last D tokens, and its response in ``cache`` once :meth:`begin` has entered it."""

    def __init__(self, cache: SuffixCache) -> None:
        self.cache, self.rule = cache, cache.rule
        self.local = SuffixTree(cache.rule.max_tree_depth)
        self.tail: deque[int] = deque(maxlen=cache.rule.max_tree_depth)
        self.response: list[int] = []
        self.seq: int | None = None

    def prompt(self, tokens: Sequence[int]) -> None:
        """The prompt: into the prompt tree and the context, not the global tree."""
        self.local.extend(0, tokens)
        self.tail.extend(int(t) for t in tokens)

    def begin(self, cache: SuffixCache | None = None) -> None:
        """Enter the global cache (``cache``: another one than this request was made with),
        with the response so far."""
        if cache is not None:
            self.cache = cache
        self.seq = self.cache.start()
        self.cache.extend(self.seq, self.response)

    def respond(self, tokens: Sequence[int]) -> None:
        """Response tokens: into the prompt tree, the context and the global tree."""
        tokens = [int(t) for t in tokens]
        self.local.extend(0, tokens)
        self.tail.extend(tokens)
        self.response += tokens
        if self.seq is not None:
            self.cache.extend(self.seq, tokens)

    def finish(self, output: Sequence[int]) -> None:
        """The request's final response ``output`` (its cut output): what the cache keeps."""
        if self.seq is not None:
            self.cache.replace(self.seq, output)

    def speculation(self) -> Speculation:
        """This step's speculation, over the prompt tree and the global tree."""
        return speculate([self.local, self.cache.tree], self.tail, self.rule)

    def draft(self, parents: Sequence[int], ranks: Sequence[int]) -> list[int]:
        """A static tree's tokens (node i: parent ``parents[i]``, -1 the root; rank
        ``ranks[i]``; parents first), -1 where the node has no candidate."""
        spec = self.speculation()
        paths: list[list[int] | None] = []
        lists: dict[int, list[int]] = {}
        need: dict[int, int] = {}
        for p, r in zip(parents, ranks, strict=True):
            need[p] = max(need.get(p, 0), r + 1)
        out = []
        for p, r in zip(parents, ranks, strict=True):
            above = [] if p < 0 else paths[p]
            if above is None:
                token = -1
            else:
                if p not in lists:
                    lists[p] = spec.candidates(above, need[p])
                token = lists[p][r] if r < len(lists[p]) else -1
            out.append(token)
            paths.append(None if token < 0 or above is None else [*above, token])
        return out


def request_ranks(cache: SuffixCache, sequence: Sequence[int], prompt_len: int, depth: int, *,
                  top_k: int, to_end: bool = False, drafted: list[int] | None = None,
                  ) -> npt.NDArray[np.int16]:
    """Teacher-forced ranks ``[positions, depth]`` of one request (``sequence``: prompt and
    response, the prompt ``prompt_len`` tokens) for t = ``prompt_len - 1`` … ``len - 2 -
    depth``, seen through ``cache`` as it stands (the earlier requests' responses), which then
    keeps this response: at t the prompt tree holds ``sequence[: t+2]``, the global tree the
    response through the root ``sequence[t+1]``, and depth k ranks ``sequence[t+2+k]``.
    ``to_end``: the positions a live run of the response visits instead, a target at or past
    its last token a miss (:func:`treeopt.decoding.rank_pass.cut_to_run`). ``drafted``, when
    given, receives each position's :meth:`Speculation.chain_length` of ``depth``.

    >>> cache = SuffixCache(SuffixRule(max_spec_tokens=2))
    >>> request_ranks(cache, [7, 1, 2, 3], 1, 2, top_k=4).tolist()
    [[-1, -1]]
    >>> request_ranks(cache, [8, 1, 2, 3, 9], 1, 2, top_k=4).tolist()
    [[0, -1], [0, -1]]
    >>> request_ranks(cache, [8, 1, 2, 3, 9], 1, 2, top_k=4, to_end=True).tolist()
    [[0, -1], [0, -1], [-1, -1]]
    """
    ids = [int(x) for x in sequence]
    if not 1 <= prompt_len <= len(ids):
        raise TreeoptError(f"a request of {len(ids)} tokens cannot have a prompt of {prompt_len}")
    request = Request(cache)
    request.prompt(ids[:prompt_len])
    request.begin()
    start = prompt_len - 1
    rows = max(0, len(ids) - 2 - start if to_end else len(ids) - 1 - depth - start)
    last = len(ids) - 1 if to_end else len(ids)  # to_end: no target at or past the last token
    out = np.full((rows, depth), -1, dtype=np.int16)
    for row, t in enumerate(range(start, start + rows)):
        request.respond(ids[t + 1: t + 2])  # the context through the root x[t+1]
        truth = ids[t + 2: min(t + 2 + depth, last)]
        out[row, : len(truth)] = (spec := request.speculation()).ranks_along(truth, top_k)
        if drafted is not None:
            drafted.append(spec.chain_length(depth))
    request.respond(ids[prompt_len + len(request.response):])  # the rest, for later requests
    return out
