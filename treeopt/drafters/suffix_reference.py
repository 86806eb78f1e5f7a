"""Suffix decoding's candidates the readable, slow way (:func:`reference_candidates`): the
reference that tests hold :mod:`treeopt.drafters.suffix_tree`'s trees and speculation to."""

from __future__ import annotations

from collections.abc import Sequence

from treeopt.drafters.suffix_tree import SuffixRule


def reference_candidates(prompt: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                         context: Sequence[int], path: Sequence[int], rule: SuffixRule,
                         ) -> list[int]:
    """The candidates at ``path`` after ``context``, the readable, slow way: count every path
    of up to D tokens of the prompt tree's sequences (``prompt``: one, the request's prompt and
    response) and the global tree's (``responses``), then try every match length and tree.

    >>> reference_candidates([[1, 2, 3, 1, 2, 4, 1, 2]], [], [1, 2], [], SuffixRule(max_spec_tokens=3))
    [3, 4]
    """
    def counts(seqs: Sequence[Sequence[int]]) -> dict[tuple[int, ...], int]:
        out: dict[tuple[int, ...], int] = {}
        for s in seqs:
            for i in range(len(s)):
                for j in range(i + 1, min(len(s), i + rule.max_tree_depth) + 1):
                    out[tuple(s[i:j])] = out.get(tuple(s[i:j]), 0) + 1
        return out

    def kids(c: dict[tuple[int, ...], int], node: tuple[int, ...]) -> list[int]:
        return sorted((k[-1] for k in c if len(k) == len(node) + 1 and k[:-1] == node),
                      key=lambda t: (-c[(*node, t)], t))

    def score(c: dict[tuple[int, ...], int], node: tuple[int, ...], limit: int) -> float:
        total, prob = 0.0, 1.0
        for _ in range(limit):
            order = kids(c, node)
            if not order or (prob := prob * c[(*node, order[0])] / c[node]) < rule.min_token_prob:
                break
            total, node = total + prob, (*node, order[0])
        return total

    tail = list(context)[-rule.max_tree_depth:]
    chosen: tuple[float, dict[tuple[int, ...], int], tuple[int, ...], int] | None = None
    for seqs in ([*prompt], [*responses]) if rule.max_cached_requests else ([*prompt],):
        c, best = counts(seqs), None
        for m in range(1, len(tail)):
            node = tuple(tail[len(tail) - m:])
            if node not in c:
                break
            s = score(c, node, rule.length_limit(m))
            if best is None or s >= best[0]:
                best = (s, c, node, rule.length_limit(m))
        if best is not None and (chosen is None or best[0] > chosen[0]):
            chosen = best
    if chosen is None or len(path) >= chosen[3]:
        return []
    _, c, node, _ = chosen
    prob = 1.0
    for token in path:
        if (*node, token) not in c:
            return []
        prob, node = prob * c[(*node, token)] / c[node], (*node, token)
    return [t for t in kids(c, node) if prob * c[(*node, t)] / c[node] >= rule.min_token_prob]
