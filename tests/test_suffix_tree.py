"""Suffix decoding's trees (torch-free): the tree grown token by token and cut by eviction equals
one counted from scratch, the speculation equals the slow reference (every match length, both
trees, Arctic's choice rule), hand-worked ranks, the cache's FIFO eviction, and a drafted tree
holding each node's candidate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.drafters.suffix_reference import reference_candidates
from treeopt.drafters.suffix_tree import (
    Request,
    SuffixCache,
    SuffixRule,
    SuffixTree,
    request_ranks,
    speculate,
)
from treeopt.errors import TreeoptError

SEQS = st.lists(st.integers(0, 3), min_size=1, max_size=24)
RULES = st.builds(SuffixRule, max_spec_tokens=st.integers(1, 6), max_tree_depth=st.integers(2, 6),
                  max_spec_factor=st.sampled_from([0.5, 1.0, 2.0]),
                  max_spec_offset=st.sampled_from([0.0, 1.0]),
                  min_token_prob=st.sampled_from([0.0, 0.1, 0.3, 0.6]),
                  max_cached_requests=st.sampled_from([-1, 0, 2]))


def _counts(tree: SuffixTree) -> dict[tuple[int, ...], int]:
    out, stack = {}, [((), tree.root)]
    while stack:
        path, node = stack.pop()
        for token, child in node.children.items():
            out[(*path, token)] = child.count
            stack.append(((*path, token), child))
    return out


def _from_scratch(seqs: list[list[int]], depth: int) -> dict[tuple[int, ...], int]:
    out: dict[tuple[int, ...], int] = {}
    for s in seqs:
        for i in range(len(s)):
            for j in range(i + 1, min(len(s), i + depth) + 1):
                out[tuple(s[i:j])] = out.get(tuple(s[i:j]), 0) + 1
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(SEQS, min_size=1, max_size=4), st.integers(2, 6), st.data())
def test_the_tree_grown_in_pieces_and_cut_by_eviction_counts_every_path_from_scratch(
        seqs, depth, data):
    tree = SuffixTree(depth)
    for n, s in enumerate(seqs):
        cut = data.draw(st.integers(0, len(s)))
        tree.extend(n, s[:cut])
        tree.extend(n, s[cut:])
    assert _counts(tree) == _from_scratch(seqs, depth)
    gone = data.draw(st.integers(0, len(seqs) - 1))
    tree.remove(gone)
    assert _counts(tree) == _from_scratch([s for n, s in enumerate(seqs) if n != gone], depth)


@settings(max_examples=300, deadline=None)
@given(SEQS, st.lists(SEQS, max_size=3), st.lists(st.integers(0, 3), max_size=3), RULES)
def test_the_speculation_equals_the_slow_reference(prompt, responses, path, rule):
    cache = SuffixCache(rule)
    for r in responses:
        cache.extend(cache.start(), r)
    local = SuffixTree(rule.max_tree_depth)
    local.extend(0, prompt)
    spec = speculate([local, cache.tree], prompt, rule)
    held = [responses[i] for i in cache.held]
    want = reference_candidates([prompt], held, prompt, path, rule)
    assert spec.candidates(path, 10) == want
    assert spec.candidates(path, 1) == want[:1]


@settings(max_examples=150, deadline=None)
@given(SEQS, st.lists(SEQS, max_size=2), RULES,
       st.lists(st.tuples(st.integers(-1, 6), st.integers(0, 2)), min_size=1, max_size=8))
def test_a_drafted_tree_holds_the_candidate_of_each_nodes_rank(prompt, responses, rule, shape):
    parents = [min(p, i - 1) for i, (p, _) in enumerate(shape)]  # parents precede children
    ranks = [r for _, r in shape]
    cache = SuffixCache(rule)
    for r in responses:
        cache.extend(cache.start(), r)
    request = Request(cache)
    request.prompt(prompt)
    tokens = request.draft(parents, ranks)
    spec = request.speculation()
    for i, (p, r) in enumerate(zip(parents, ranks, strict=True)):
        path, q = [], p
        while q >= 0:
            path.insert(0, tokens[q])
            q = parents[q]
        listed = spec.candidates(path, r + 1) if -1 not in path else []
        assert tokens[i] == (listed[r] if r < len(listed) else -1)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), SEQS), min_size=1, max_size=3), RULES,
       st.integers(1, 3))
def test_request_ranks_rank_each_true_token_on_the_true_path_of_the_cache_so_far(
        requests, rule, top_k):
    cache = SuffixCache(rule)
    earlier: list[list[int]] = []
    for plen, body in requests:
        seq = [3, 2, 1, 0][:plen] + body
        K = rule.max_spec_tokens
        got = request_ranks(cache, seq, plen, K, top_k=top_k)
        assert got.shape == (max(0, len(seq) - 1 - K - (plen - 1)), K)
        cached = earlier[len(earlier) + 1 - rule.max_cached_requests:] if (
            rule.max_cached_requests > 0) else earlier
        for row, t in enumerate(range(plen - 1, plen - 1 + got.shape[0])):
            for k in range(K):
                truth = seq[t + 2: t + 2 + k]
                listed = reference_candidates([seq[: t + 2]], [*cached, seq[plen: t + 2]],
                                              seq[: t + 2], truth, rule)[:top_k]
                above = got[row, :k].tolist()
                want = (listed.index(seq[t + 2 + k]) if seq[t + 2 + k] in listed else -1)
                assert got[row, k] == (want if -1 not in above else -1)
        earlier.append(seq[plen:])


def test_hand_worked_speculation_prefers_the_better_score_and_tree():
    """Prompt tree [1, 2, 3, 1, 2, 4, 1, 2]: 3 paths pass [2] and [1, 2] (one ends at the
    context's end), 3 and 4 followed once each: 1/3 each, 3 first (equal counts: token order).
    A match of one token drafts one token (score 1/3), of two tokens two (3, then 1: 1/3 +
    1/3), and longer matches end where the context does (score 0): the match of 2 wins. A
    global tree holding [1, 2, 9] three times scores 1 (9, then nothing) > 2/3 and is chosen."""
    rule = SuffixRule(max_spec_tokens=4)
    local = SuffixTree(24)
    local.extend(0, [1, 2, 3, 1, 2, 4, 1, 2])
    spec = speculate([local, None], [1, 2, 3, 1, 2, 4, 1, 2], rule)
    assert (spec.match_len, spec.limit, round(spec.score, 4)) == (2, 2, 0.6667)
    spec = speculate([local, None], [5, 1, 2], rule)
    assert (spec.match_len, spec.limit, spec.candidates([], 4)) == (2, 2, [3, 4])
    assert spec.candidates([3], 4) == [1] and spec.candidates([3, 1], 4) == []  # limit 2
    glob = SuffixTree(24)
    for n in range(3):
        glob.extend(n, [1, 2, 9])
    spec = speculate([local, glob], [5, 1, 2], rule)
    assert (spec.node is glob.node([1, 2]), spec.candidates([], 4)) == (True, [9])


def test_the_least_probability_and_the_match_length_bound_the_speculation():
    tree = SuffixTree(24)
    tree.extend(0, [7, 1] * 3 + [7, 2] + [7, 3] * 6 + [7])  # after 7: 3 ×6, 1 ×3, 2 ×1
    wide = speculate([tree], [7], SuffixRule(max_spec_tokens=4, min_token_prob=0.0))
    assert wide.match_len == 0  # a one-token context matches nothing (m < its length)
    ctx = [3, 7]
    assert speculate([tree], ctx, SuffixRule(max_spec_tokens=4, min_token_prob=0.0)
                     ).candidates([], 9) == [3, 1, 2]
    assert speculate([tree], ctx, SuffixRule(max_spec_tokens=4)).candidates([], 9) == [3, 1]
    assert speculate([tree], ctx, SuffixRule(max_spec_tokens=4, min_token_prob=0.35)
                     ).candidates([], 9) == [3]
    half = speculate([tree], ctx, SuffixRule(max_spec_tokens=4, max_spec_factor=0.5))
    assert half.limit == 0 and half.candidates([], 9) == []  # ⌊1 × 0.5⌋ = 0 tokens


def test_the_cache_evicts_the_oldest_response_first_and_never_the_new_one():
    cache = SuffixCache(SuffixRule(max_spec_tokens=2, max_tree_depth=3, max_cached_requests=2))
    for n, tokens in enumerate(([1, 2], [3, 4], [5, 6])):
        seq = cache.start()
        cache.extend(seq, tokens)
        assert seq == n
    assert cache.held == [1, 2] and cache.tree.node([1]) is None and cache.tree.node([3, 4])
    cache.replace(2, [5, 6, 7])  # a finished request's output
    assert cache.tree.node([6, 7]).count == 1
    cache.extend(0, [9])  # an evicted response grows no more
    assert cache.tree.node([9]) is None
    off = SuffixCache(SuffixRule(max_spec_tokens=2, max_cached_requests=0))
    assert off.tree is None and off.start() == 0 and off.held == []


def test_each_request_sees_the_responses_before_it_and_not_their_prompts():
    cache = SuffixCache(SuffixRule(max_spec_tokens=2))
    first = request_ranks(cache, [50, 51, 1, 2, 3, 4], 2, 2, top_k=4)
    assert first.tolist() == [[-1, -1], [-1, -1]]
    again = request_ranks(cache, [60, 1, 2, 3, 4], 1, 2, top_k=4)
    assert again.tolist() == [[0, -1], [0, 0]]  # root 1: a match of 1 drafts 1; root 2: of 2, 2
    prompt = request_ranks(cache, [70, 50, 51, 8], 1, 2, top_k=4)
    assert prompt.tolist() == [[-1, -1]]  # 50 51 was a prompt: never in the global tree


def test_bad_settings_are_refused_naming_the_setting():
    for kwargs, message in [({"max_spec_tokens": 0}, "max_spec_tokens must be ≥ 1, got 0"),
                            ({"max_tree_depth": 1}, "max_tree_depth must be ≥ 2, got 1"),
                            ({"min_token_prob": 1.5}, "min_token_prob must be in 0 … 1"),
                            ({"max_spec_factor": -1.0}, "max_spec_factor must be ≥ 0"),
                            ({"max_cached_requests": -2}, "max_cached_requests must be ≥ -1")]:
        with pytest.raises(TreeoptError, match=message):
            SuffixRule(**{"max_spec_tokens": 2, **kwargs})
    with pytest.raises(TreeoptError, match="a request of 2 tokens cannot have a prompt of 3"):
        request_ranks(SuffixCache(SuffixRule(max_spec_tokens=2)), [1, 2], 3, 2, top_k=2)
