"""Prompt lookup (n-gram drafting): propose the tokens that followed the context's last n tokens
where they occurred before. No weights, no model forward: a dictionary lookup on the host.

The rule is the engines' own, read from their code:

- Hugging Face transformers 5.23.0, ``generation/candidate_generator.py``,
  ``PromptLookupCandidateGenerator.get_candidates``: n runs from ``min(max_matching_ngram_size,
  L-1)`` down to 1; at the first n with an occurrence of the last n tokens that has a
  continuation, the *earliest* such occurrence wins (it may overlap the suffix), and the proposal
  is the next ``prompt_lookup_num_tokens`` tokens, fewer where the context ends first, cut before
  the first EOS (a proposal that this leaves empty proposes nothing; no other match is tried).
- vLLM v1, ``vllm/v1/spec_decode/ngram_proposer.py`` (``_find_longest_matched_ngram_and_
  propose_tokens``): the longest suffix match of length ``prompt_lookup_min`` …
  ``prompt_lookup_max``, ties to the earliest occurrence (overlap allowed), proposing the next
  ``num_speculative_tokens`` tokens, fewer where the context ends first. The same choice as
  Hugging Face's with ``min_n = 1``, less the EOS cut.

:class:`LookupRule` is that rule (``min_n`` … ``max_n``, and the EOS cut when ``eos_token_id`` is
set); :func:`propose` applies it by scanning the context (the readable reference);
:class:`NgramIndex` applies it in O(max_n) per step by keeping each n-gram's earliest occurrence,
as live drafting and calibration do; :func:`chain_ranks` is a sequence's rank trace.

A chain drafter proposes one token per depth, so its trace's rank at (t, k) is 0 where the k-th
proposed token after the root at t+1 is the true token ``x[t+2+k]``, else -1 (no candidate, or
the wrong one). The proposal at the root does not depend on the depth asked for (a shorter chain
is a prefix of a longer one), so one trace of depth K prices every chain length k ≤ K.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError


@dataclass(frozen=True)
class LookupRule:
    """Which suffix matches count: lengths ``min_n`` … ``max_n``, longest first, earliest
    occurrence; with ``eos_token_id`` the proposal is cut before the first EOS (Hugging Face).

    >>> LookupRule(min_n=1, max_n=3).describe()
    'n-gram 1…3'
    """

    min_n: int = 1
    max_n: int = 3
    eos_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.min_n < 1:
            raise TreeoptError(f"min_n must be ≥ 1, got {self.min_n}")
        if self.max_n < self.min_n:
            raise TreeoptError(f"max_n must be ≥ min_n ({self.min_n}), got {self.max_n}")

    def describe(self) -> str:
        return f"n-gram {self.min_n}…{self.max_n}" if self.min_n < self.max_n else \
            f"n-gram {self.max_n}"


def propose(context: Sequence[int], rule: LookupRule, depth: int) -> list[int]:
    """Up to ``depth`` tokens proposed after ``context`` (its last token is the step's root),
    by scanning every window: the reference :class:`NgramIndex` is checked against.

    >>> propose([1, 2, 3, 4, 2, 3], LookupRule(min_n=2, max_n=3), 4)  # vLLM's docstring example
    [4, 2, 3]
    >>> propose([5, 6, 7, 5, 6], LookupRule(min_n=1, max_n=2), 2), propose([1, 2], LookupRule(), 3)
    ([7, 5], [])
    """
    ids, L = list(context), len(context)
    for n in range(min(rule.max_n, L - 1), rule.min_n - 1, -1):
        suffix = ids[L - n:]
        for i in range(L - n):  # every occurrence but the suffix itself, earliest first
            if ids[i: i + n] == suffix:
                return _cut(ids[i + n: i + n + depth], rule)
    return []


def _cut(span: list[int], rule: LookupRule) -> list[int]:
    if rule.eos_token_id is not None and rule.eos_token_id in span:
        return span[: span.index(rule.eos_token_id)]
    return span


class NgramIndex:
    """One growing token sequence and the earliest start of each of its n-grams, ``min_n`` ≤ n ≤
    ``max_n``: :meth:`propose` equals :func:`propose` over :attr:`tokens`, at O(max_n) a step.

    >>> index = NgramIndex(LookupRule(min_n=1, max_n=2))
    >>> index.extend([5, 6, 7, 5, 6]); index.propose(2)
    [7, 5]
    """

    def __init__(self, rule: LookupRule) -> None:
        self.rule = rule
        self.tokens: list[int] = []
        self._first: dict[tuple[int, ...], int] = {}

    def extend(self, tokens: Iterable[int]) -> None:
        lo, hi = self.rule.min_n, self.rule.max_n
        ids, first = self.tokens, self._first
        for token in tokens:
            ids.append(int(token))
            end = len(ids)
            for n in range(lo, min(hi, end) + 1):
                first.setdefault(tuple(ids[end - n:]), end - n)

    def propose(self, depth: int) -> list[int]:
        ids, L = self.tokens, len(self.tokens)
        for n in range(min(self.rule.max_n, L - 1), self.rule.min_n - 1, -1):
            i = self._first.get(tuple(ids[L - n:]))
            if i is not None and i < L - n:  # an occurrence before the suffix itself
                return _cut(ids[i + n: i + n + depth], self.rule)
        return []


def chain_ranks(sequence: Sequence[int], start: int, rule: LookupRule, depth: int,
                ) -> npt.NDArray[np.int16]:
    """The rank trace ``[positions, depth]`` of a prompt-lookup chain over ``sequence`` (prompt
    and continuation), for the positions t = ``start`` … ``len - 2 - depth`` (those of
    :func:`treeopt.decoding.rank_pass.positions_range`): 0 where the k-th token proposed after the
    root ``sequence[t+1]`` is ``sequence[t+2+k]``, else -1.

    >>> chain_ranks([1, 2, 3, 1, 2, 3, 1, 2], 2, LookupRule(min_n=1, max_n=2), 2).tolist()
    [[0, 0], [0, 0], [0, 0]]
    """
    index = NgramIndex(rule)
    out = np.full((max(0, len(sequence) - 1 - depth - start), depth), -1, dtype=np.int16)
    for row, truth in forced_positions(sequence, start, depth, index):
        for k, token in enumerate(index.propose(depth)):
            if token == truth[k]:
                out[row, k] = 0
    return out


def chain_lengths(sequence: Sequence[int], start: int, rule: LookupRule, depth: int,
                  ) -> npt.NDArray[np.int16]:
    """How many tokens the prompt-lookup chain of ``depth`` holds at each position of
    :func:`chain_ranks` (teacher-forced along ``sequence``): 0 where no n-gram matched.

    >>> chain_lengths([1, 2, 3, 1, 2, 3, 1, 2], 2, LookupRule(min_n=1, max_n=2), 2).tolist()
    [2, 2, 2]
    >>> chain_lengths([1, 2, 3, 4, 5, 6], 0, LookupRule(min_n=1, max_n=2), 2).tolist()
    [0, 0, 0]
    """
    index = NgramIndex(rule)
    return np.array([len(index.propose(depth))
                     for _ in forced_positions(sequence, start, depth, index)], dtype=np.int16)


class Extendable(Protocol):
    """A token index grown one token at a time (:class:`NgramIndex`, a trie's index)."""

    def extend(self, tokens: Iterable[int]) -> None: ...


def forced_positions(sequence: Sequence[int], start: int, depth: int, index: Extendable,
                     ) -> Iterator[tuple[int, list[int]]]:
    """Teacher forcing over ``sequence``: for t = ``start`` … ``len - 2 - depth``, grow
    ``index`` through the root ``sequence[t+1]`` and yield (t - start, the ``depth`` true
    tokens after the root). ``index`` starts empty.

    >>> index = NgramIndex(LookupRule())
    >>> [(row, truth, len(index.tokens)) for row, truth in forced_positions([1, 2, 3, 4], 0, 1,
    ...                                                                     index)]
    [(0, [3], 2), (1, [4], 3)]
    """
    ids = [int(x) for x in sequence]
    index.extend(ids[: start + 1])
    for row, t in enumerate(range(start, max(start, len(ids) - 1 - depth))):
        index.extend(ids[t + 1: t + 2])  # the context through the root x[t+1]
        yield row, ids[t + 2: t + 2 + depth]
