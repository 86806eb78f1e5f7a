"""Suffix decoding as a :class:`~treeopt.decoding.drafter.Drafter`: each step's speculation
tree, over the request's prompt tree and a global tree of the responses of the requests served
before it (:mod:`treeopt.drafters.suffix_tree`, the rule of Arctic Inference and of vLLM's
``method: suffix``).

It reads no hidden states and runs no forward. Live, a run keeps one
:class:`~treeopt.drafters.suffix_tree.SuffixCache` (the global tree) for all its rows and every
prompt they take, and one :class:`~treeopt.drafters.suffix_tree.Request` per row: a row enters
the cache after its prefill, with its first token, and each step's accepted tokens and next root
go into its prompt tree and its cached response at once (Arctic's ``add_active_response``);
when its request ends the cached response becomes exactly its output
(:meth:`SuffixDrafter.finish`: cut at the budget and EOS). A step fills each node of the static
tree with the candidate of its rank at its parent's path, or -1 (a hole).

**Order.** At batch 1 the run serves its prompts one after another, so request i meets the
responses of requests 0 … i-1, as calibration ranks them
(:meth:`SuffixDrafter.rank_requests`, in the prompts' order): the walk over the trace equals
live decoding step by step. At batch b > 1 the rows enter the cache as they take prompts (the
first b at the prefill, in row order; then each as a finished row takes the next prompt) and
their responses grow step by step side by side, so a request also meets the partial responses
of the requests decoding beside it, as in vLLM; a trace in request order does not see those,
and prices batch b as though each request met only the complete responses of those before it.

On the command line the drafter is a spec (:func:`parse_suffix_spec`): ``suffix`` or
``suffix:depth=16,max-tree-depth=24,max-spec-factor=1.0,min-token-prob=0.1,
max-cached-requests=10000`` (and ``max-spec-offset``); a directory whose ``drafter.json`` is of
kind ``suffix`` holds the same settings (:func:`load_suffix`). ``depth`` is the longest draft
(vLLM's ``num_speculative_tokens``), which also bounds the path scores that choose the match.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

from treeopt.decoding.drafter import Drafter
from treeopt.drafters.draft_model import DRAFTER_FILE, DRAFTER_FORMAT
from treeopt.drafters.prompt_lookup import (
    drafted_rows,
    read_drafter_settings,
    spec_integer,
    spec_settings,
)
from treeopt.drafters.suffix_tree import Request, SuffixCache, SuffixRule, request_ranks
from treeopt.errors import TreeoptError
from treeopt.files import write_json
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan

SPEC_NAME = "suffix"
DEFAULTS: dict[str, int | float] = {"depth": 16, "max-tree-depth": 24, "max-spec-factor": 1.0,
                                    "max-spec-offset": 0.0, "min-token-prob": 0.1,
                                    "max-cached-requests": 10000}
_FLOATS = ("max-spec-factor", "max-spec-offset", "min-token-prob")


@dataclass(eq=False)
class SuffixState:
    """A run's global cache and each row's request."""

    cache: SuffixCache
    rows: list[Request]
    fresh: bool = True  # nothing read yet: the prefill's tokens are all new

    def take_row(self, row: int, new: SuffixState) -> None:
        """Row ``row`` becomes ``new``'s one request, entering this run's cache."""
        self.rows[row] = new.rows[0]
        self.rows[row].begin(self.cache)


class SuffixDrafter(Drafter):
    """A tree of up to ``depth`` levels per step, read from the request's prompt tree or the
    global tree of earlier responses, whichever scores higher."""

    kind = KINDS["suffix"]

    def __init__(self, *, depth: int, max_tree_depth: int = 24, max_spec_factor: float = 1.0,
                 max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                 max_cached_requests: int = 10000, vocab_size: int) -> None:
        super().__init__()
        if depth < 1:
            raise TreeoptError(f"a suffix drafter's depth must be ≥ 1, got {depth}")
        self.rule = SuffixRule(max_spec_tokens=depth, max_tree_depth=max_tree_depth,
                               max_spec_factor=max_spec_factor, max_spec_offset=max_spec_offset,
                               min_token_prob=min_token_prob,
                               max_cached_requests=max_cached_requests)
        self.config = HeadsConfig(kind=SPEC_NAME, num_heads=depth, hidden_size=1,
                                  vocab_size=vocab_size, min_match=1, max_match=max_tree_depth,
                                  max_spec_factor=max_spec_factor,
                                  max_spec_offset=max_spec_offset, min_token_prob=min_token_prob,
                                  max_cached_requests=max_cached_requests)

    @classmethod
    def from_config(cls, cfg: HeadsConfig) -> SuffixDrafter:
        return cls(depth=cfg.num_heads, max_tree_depth=cfg.max_match,
                   max_spec_factor=cfg.max_spec_factor, max_spec_offset=cfg.max_spec_offset,
                   min_token_prob=cfg.min_token_prob,
                   max_cached_requests=cfg.max_cached_requests, vocab_size=cfg.vocab_size)

    def settings(self) -> dict[str, int | float]:
        """Its settings as ``drafter.json`` and the engines' exports name them."""
        r = self.rule
        return {"depth": r.max_spec_tokens, "max_tree_depth": r.max_tree_depth,
                "max_spec_factor": r.max_spec_factor, "max_spec_offset": r.max_spec_offset,
                "min_token_prob": r.min_token_prob,
                "max_cached_requests": r.max_cached_requests}

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write ``drafter.json`` with the settings (read back by :func:`load_suffix`)."""
        write_json(Path(directory) / DRAFTER_FILE,
                   {"format": DRAFTER_FORMAT, "kind": SPEC_NAME, **self.settings()})

    def rank_depths(self, hidden: torch.Tensor | None, stream: torch.Tensor, *, top_k: int,
                    ) -> torch.Tensor:
        raise TreeoptError("suffix decoding's ranks depend on the requests served before: "
                           "calibration ranks it request by request, in order (rank_requests)")

    def request_cache(self) -> SuffixCache:
        return SuffixCache(self.rule)

    def rank_requests(self, cache: SuffixCache, sequences: Sequence[Sequence[int]],
                      starts: Sequence[int], *, top_k: int,
                      drafted: list[npt.NDArray[np.int16]] | None = None,
                      ) -> list[npt.NDArray[np.int16]]:
        """Each request's ranks in turn through ``cache`` (see
        :func:`~treeopt.drafters.suffix_tree.request_ranks`), which keeps its response: at the
        positions a live run of it visits; ``drafted`` receives each request's top-1 chain
        lengths."""
        K, out = self.config.num_heads, []
        for seq, start in zip(sequences, starts, strict=True):
            lengths: list[int] = []
            out.append(request_ranks(cache, seq, start + 1, K, top_k=top_k, to_end=True,
                                     drafted=lengths))
            if drafted is not None:
                drafted.append(np.array(lengths, dtype=np.int16))
        return out

    def remember_requests(self, cache: SuffixCache, sequences: Sequence[Sequence[int]],
                          starts: Sequence[int]) -> None:
        for seq, start in zip(sequences, starts, strict=True):
            request = Request(cache)
            request.prompt(seq[: start + 1])
            request.begin()
            request.respond(seq[start + 1:])

    def start(self, *, batch: int, capacity: int) -> SuffixState:
        cache = SuffixCache(self.rule)
        return SuffixState(cache, [Request(cache) for _ in range(batch)])

    def advance(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                count: torch.Tensor, next_root: torch.Tensor, state: SuffixState,
                ) -> tuple[torch.Tensor, SuffixState]:
        """After the prefill: each row's prompt, then it enters the cache with its first token;
        after a step: each row's accepted tokens (after the root it read last step), then its
        next root."""
        accepted = tokens.gather(1, index).tolist()
        for row, n, root, ids in zip(state.rows, count.tolist(), next_root.tolist(), accepted,
                                     strict=True):
            if n == 0:  # a stopped row reads nothing
                continue
            if state.fresh:
                row.prompt(ids[:n])
                row.begin()
                row.respond([root])
            else:
                row.respond([*ids[1:n], root])
        state.fresh = False
        return hidden[:, :1], state

    def finish(self, state: SuffixState, row: int, output: Sequence[int]) -> None:
        """The row's cached response becomes its output (the tokens a step accepted past the
        budget or EOS, or not read once every row had stopped, set right)."""
        state.rows[row].finish(output)

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: SuffixState | None = None) -> torch.Tensor:
        """The root, then each node's candidate of its rank at its parent's path, per row (-1
        where there is none)."""
        if state is None:
            raise TreeoptError("a suffix drafter drafts from its live state (start, then "
                               "advance)")
        return drafted_rows(state.rows, plan.tree, root)


def _spec_value(text: str, key: str, value: str) -> int | float:
    if key not in _FLOATS:
        return spec_integer(text, key, value)
    try:
        return float(value)
    except ValueError:
        raise TreeoptError(f"drafter spec {text!r}: {key} must be a number, "
                           f"got {value!r}") from None


def parse_suffix_spec(text: str, *, vocab_size: int) -> SuffixDrafter | None:
    """The drafter a ``--drafter`` spec names, or None when ``text`` is not a suffix spec.

    >>> d = parse_suffix_spec("suffix:depth=6,min-token-prob=0.2", vocab_size=100)
    >>> (d.config.num_heads, d.rule.max_tree_depth, d.rule.min_token_prob)
    (6, 24, 0.2)
    >>> parse_suffix_spec("ngram-trie", vocab_size=100) is None
    True
    """
    values = spec_settings(text, SPEC_NAME, DEFAULTS,
                           forms=", ".join(f"{k}={'X' if k in _FLOATS else 'N'}"
                                           for k in DEFAULTS),
                           convert=lambda key, value: _spec_value(text, key, value))
    if values is None:
        return None
    return _from_settings(values, source=f"drafter spec {text!r}", vocab_size=vocab_size)


def load_suffix(directory: str | os.PathLike[str], *, vocab_size: int) -> SuffixDrafter | None:
    """The suffix drafter a directory's ``drafter.json`` describes; None when the directory
    holds another kind of drafter."""
    found = read_drafter_settings(directory, SPEC_NAME, DEFAULTS)
    if found is None:
        return None
    settings, path = found
    return _from_settings(settings, source=str(path), vocab_size=vocab_size)


def _from_settings(settings: dict[str, int | float], *, source: str, vocab_size: int,
                   ) -> SuffixDrafter:
    """The drafter of a spec's or a ``drafter.json``'s settings (keys of :data:`DEFAULTS`);
    invalid ones are refused, naming ``source``."""
    try:
        return SuffixDrafter(depth=int(settings["depth"]),
                             max_tree_depth=int(settings["max-tree-depth"]),
                             max_spec_factor=float(settings["max-spec-factor"]),
                             max_spec_offset=float(settings["max-spec-offset"]),
                             min_token_prob=float(settings["min-token-prob"]),
                             max_cached_requests=int(settings["max-cached-requests"]),
                             vocab_size=vocab_size)
    except (TreeoptError, ValueError) as exc:
        raise TreeoptError(f"{source}: {exc}") from None
