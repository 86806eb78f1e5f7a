"""SGLang's trie drafter as a :class:`~treeopt.decoding.drafter.Drafter`: a tree of what followed
the context's suffixes, read from a trie of the row's own n-grams
(:mod:`treeopt.drafters.ngram_trie`, the rule of SGLang's ``NGRAM`` with ``max_trie_depth``).

It reads no hidden states and runs no forward. Live, each row's tokens (prompt, every accepted
token and the step's root) are kept on the host in a :class:`~treeopt.drafters.ngram_trie.
TrieIndex`, one per row (the state and :meth:`advance` are prompt lookup's, which only extend
each row's index); a step fills each node of the static tree with the candidate of its rank at
its parent's path, walking the tree parents first. Calibration ranks the true tokens along the
true path in the same trie, grown position by position over the same context
(:func:`~treeopt.drafters.ngram_trie.trie_ranks`), so walking its trace reproduces live
decoding step by step.

A node whose parent path has fewer candidates than its rank is drafted as token -1, "no
candidate" (:data:`~treeopt.drafters.prompt_lookup.NO_CANDIDATE`): it is verified (the tree
keeps its shape) but never accepted, as the trace's -1 says.

On the command line the drafter is a spec (:func:`parse_trie_spec`): ``ngram-trie`` or
``ngram-trie:depth=10,max-trie-depth=18,match=bfs``; a directory whose ``drafter.json`` is of
kind ``ngram-trie`` holds the same settings (:func:`load_trie`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from treeopt.decoding.drafter import Drafter
from treeopt.drafters.draft_model import DRAFTER_FILE, DRAFTER_FORMAT
from treeopt.drafters.ngram_trie import (
    TrieIndex,
    TrieRule,
    trie_chain_lengths,
    trie_ranks,
)
from treeopt.drafters.prompt_lookup import (
    LookupState,
    PromptLookup,
    drafted_rows,
    read_drafter_settings,
    spec_integer,
    spec_settings,
    stacked_ranks,
)
from treeopt.errors import TreeoptError
from treeopt.files import write_json
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan

SPEC_NAME = "ngram-trie"
DEFAULTS: dict[str, int | str] = {"depth": 10, "max-trie-depth": 18, "match": "bfs"}


class TrieDrafter(Drafter):
    """A tree of up to ``depth`` levels per step, read from each row's own n-gram trie."""

    kind = KINDS["ngram-trie"]

    def __init__(self, *, depth: int, max_trie_depth: int = 18, match: str = "bfs",
                 vocab_size: int) -> None:
        super().__init__()
        if depth < 1:
            raise TreeoptError(f"an n-gram trie drafter's depth must be ≥ 1, got {depth}")
        self.rule = TrieRule(max_trie_depth=max_trie_depth, match=match)
        self.config = HeadsConfig(kind=SPEC_NAME, num_heads=depth, hidden_size=1,
                                  vocab_size=vocab_size, min_match=1, max_match=max_trie_depth,
                                  match_type=match)

    @classmethod
    def from_config(cls, cfg: HeadsConfig) -> TrieDrafter:
        return cls(depth=cfg.num_heads, max_trie_depth=cfg.max_match, match=cfg.match_type,
                   vocab_size=cfg.vocab_size)

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write ``drafter.json`` with the settings (read back by :func:`load_trie`)."""
        settings = {"depth": self.config.num_heads, "max_trie_depth": self.rule.max_trie_depth,
                    "match": self.rule.match}
        write_json(Path(directory) / DRAFTER_FILE,
                   {"format": DRAFTER_FORMAT, "kind": SPEC_NAME, **settings})

    def rank_depths(self, hidden: torch.Tensor | None, stream: torch.Tensor, *, top_k: int,
                    ) -> torch.Tensor:
        """The true tokens' ranks at every position of every row (``hidden`` is not read; see
        :func:`~treeopt.drafters.ngram_trie.trie_ranks`). Rows are right-padded; a position
        reads only what precedes it, so padding changes nothing that is kept."""
        K = self.config.num_heads
        return stacked_ranks(stream, K, lambda row: trie_ranks(row, 0, self.rule, K, top_k=top_k))

    def drafted_depths(self, sequence: Sequence[int], start: int) -> npt.NDArray[np.int16]:
        """The trie's top-1 chain length at each recorded position (:func:`~treeopt.drafters.
        ngram_trie.trie_chain_lengths`)."""
        return trie_chain_lengths(sequence, start, self.rule, self.config.num_heads)

    def start(self, *, batch: int, capacity: int) -> LookupState:
        return LookupState([TrieIndex(self.rule) for _ in range(batch)])

    advance = PromptLookup.advance  # extend each row's index: accepted tokens, then the root

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: LookupState | None = None) -> torch.Tensor:
        """The root, then each node's candidate of its rank at its parent's path, per row (-1
        where there is none)."""
        if state is None:
            raise TreeoptError("an n-gram trie drafts from its live state (start, then advance)")
        return drafted_rows(state.rows, plan.tree, root)


def parse_trie_spec(text: str, *, vocab_size: int) -> TrieDrafter | None:
    """The drafter a ``--drafter`` spec names, or None when ``text`` is not an n-gram trie spec.

    >>> d = parse_trie_spec("ngram-trie:depth=6,max-trie-depth=8,match=prob", vocab_size=100)
    >>> (d.config.num_heads, d.rule.max_trie_depth, d.rule.match)
    (6, 8, 'prob')
    >>> parse_trie_spec("prompt-lookup", vocab_size=100) is None
    True
    """
    values = spec_settings(text, SPEC_NAME, DEFAULTS,
                           forms="depth=N, max-trie-depth=N, match=bfs|prob",
                           convert=lambda key, value: value if key == "match" else
                           spec_integer(text, key, value))
    if values is None:
        return None
    return _from_settings(values, source=f"drafter spec {text!r}", vocab_size=vocab_size)


def load_trie(directory: str | os.PathLike[str], *, vocab_size: int) -> TrieDrafter | None:
    """The n-gram trie drafter a directory's ``drafter.json`` describes; None when the directory
    holds another kind of drafter."""
    found = read_drafter_settings(directory, SPEC_NAME, DEFAULTS)
    if found is None:
        return None
    settings, path = found
    return _from_settings(settings, source=str(path), vocab_size=vocab_size)


def _from_settings(settings: dict[str, int | str], *, source: str, vocab_size: int,
                   ) -> TrieDrafter:
    """The drafter of a spec's or a ``drafter.json``'s settings (keys of :data:`DEFAULTS`);
    invalid ones are refused, naming ``source``."""
    try:
        return TrieDrafter(depth=int(settings["depth"]),
                           max_trie_depth=int(settings["max-trie-depth"]),
                           match=str(settings["match"]), vocab_size=vocab_size)
    except (TreeoptError, ValueError) as exc:
        raise TreeoptError(f"{source}: {exc}") from None
