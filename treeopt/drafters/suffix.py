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

**History.** ``history=FILE`` (a responses file, :mod:`treeopt.model.responses`; in a drafter
directory, ``history.npz`` beside ``drafter.json``) starts every global tree — calibration's and
each live run's — from the responses of requests served before, oldest first: the cache of a
server that has served them. Without it the cache starts empty, as a server just started.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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
from treeopt.model.responses import RESPONSES_FILE, History, read_responses, write_responses
from treeopt.model.trace import prompt_digest
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan

SPEC_NAME = "suffix"
DEFAULTS: dict[str, int | float | str] = {"depth": 16, "max-tree-depth": 24,
                                          "max-spec-factor": 1.0, "max-spec-offset": 0.0,
                                          "min-token-prob": 0.1, "max-cached-requests": 10000,
                                          "history": ""}
_FLOATS = ("max-spec-factor", "max-spec-offset", "min-token-prob")
_FORMS = {**dict.fromkeys(_FLOATS, "X"), "history": "FILE"}  # the spec's forms, besides N


@dataclass(eq=False)
class SuffixState:
    """A run's global cache and each row's request. The rows read so far enter the cache when it
    is next read, in order (``pending``). A run's state has its cache from the start
    (:meth:`SuffixDrafter.start`); a new prompt's, whose row a running batch takes
    (:meth:`take_row`), never builds one (``make_cache``: only were it read)."""

    make_cache: Callable[[SuffixState], SuffixCache]
    rows: list[Request]
    history: History = History()  # the cache's first responses (ids 0 … n-1)
    fresh: bool = True  # nothing read yet: the prefill's tokens are all new
    # rows to enter the cache, in order, with their prompts' digests
    pending: list[tuple[Request, str]] = field(default_factory=list)
    _cache: SuffixCache | None = None

    @property
    def cache(self) -> SuffixCache:
        if self._cache is None:
            self._cache = self.make_cache(self)
        return self._cache

    def enter_rows(self) -> None:
        """The rows read so far into the cache (built where it is not yet), in order."""
        for row, prompt in self.pending:
            self._enter(row, prompt)
        self.pending.clear()
        _ = self.cache

    def _enter(self, row: Request, prompt: str) -> None:
        """``row`` into the cache, the history's answers to its prompt forgotten first."""
        forget_answers(self.cache, self.history, prompt)
        row.begin(self.cache)

    def take_row(self, row: int, new: SuffixState) -> None:
        """Row ``row`` becomes ``new``'s one request, entering this run's cache."""
        self.rows[row] = new.rows[0]
        self._enter(self.rows[row], new.pending[0][1] if new.pending else "")


class SuffixDrafter(Drafter):
    """A tree of up to ``depth`` levels per step, read from the request's prompt tree or the
    global tree of earlier responses, whichever scores higher."""

    kind = KINDS["suffix"]

    def __init__(self, *, depth: int, max_tree_depth: int = 24, max_spec_factor: float = 1.0,
                 max_spec_offset: float = 0.0, min_token_prob: float = 0.1,
                 max_cached_requests: int = 10000, vocab_size: int,
                 history: History | Sequence[Sequence[int]] = ()) -> None:
        super().__init__()
        self.history = (history if isinstance(history, History)
                        else History(tuple(tuple(r) for r in history)))
        # the last live run's warm cache and that run's state: reused once the state is gone
        self._spare: tuple[weakref.ref[SuffixState], SuffixCache] | None = None
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
                                  max_cached_requests=max_cached_requests,
                                  history=self.history.digest())

    @classmethod
    def from_config(cls, cfg: HeadsConfig) -> SuffixDrafter:
        if cfg.history:
            raise TreeoptError(f"a suffix drafter's config names its history ({cfg.history}) "
                               f"but not its responses: load the drafter from its directory "
                               f"or spec")
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

    def at_depth(self, depth: int) -> SuffixDrafter:
        """The same drafter (settings and history) drafting up to ``depth`` tokens."""
        return replace_history(self, self.history, depth=depth)

    def cold(self) -> SuffixDrafter:
        """The same settings with no history: a cache that starts empty."""
        return replace_history(self, History())

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write ``drafter.json`` with the settings, and its history as ``history.npz`` beside
        it (read back by :func:`load_suffix`)."""
        history = {}
        if self.history:
            write_responses(Path(directory) / RESPONSES_FILE, self.history)
            history = {"history": RESPONSES_FILE}
        write_json(Path(directory) / DRAFTER_FILE,
                   {"format": DRAFTER_FORMAT, "kind": SPEC_NAME, **self.settings(), **history})

    def rank_depths(self, hidden: torch.Tensor | None, stream: torch.Tensor, *, top_k: int,
                    ) -> torch.Tensor:
        raise TreeoptError("suffix decoding's ranks depend on the requests served before: "
                           "calibration ranks it request by request, in order (rank_requests)")

    def request_cache(self) -> SuffixCache:
        """A global tree holding the history's responses (none without one)."""
        cache = SuffixCache(self.rule)
        for response in self.history.responses:
            cache.extend(cache.start(), response)
        return cache

    def rank_requests(self, cache: SuffixCache, sequences: Sequence[Sequence[int]],
                      starts: Sequence[int], *, top_k: int,
                      drafted: list[npt.NDArray[np.int16]] | None = None,
                      ) -> list[npt.NDArray[np.int16]]:
        """Each request's ranks in turn through ``cache`` (see
        :func:`~treeopt.drafters.suffix_tree.request_ranks`), which keeps its response, the
        history's answers to its prompt forgotten first: at the positions a live run of it
        visits; ``drafted`` receives each request's top-1 chain lengths."""
        K, out = self.config.num_heads, []
        for seq, start in zip(sequences, starts, strict=True):
            forget_answers(cache, self.history, prompt_digest(seq[: start + 1]))
            lengths: list[int] = []
            out.append(request_ranks(cache, seq, start + 1, K, top_k=top_k, to_end=True,
                                     drafted=lengths))
            if drafted is not None:
                drafted.append(np.array(lengths, dtype=np.int16))
        return out

    def remember_requests(self, cache: SuffixCache, sequences: Sequence[Sequence[int]],
                          starts: Sequence[int]) -> None:
        for seq, start in zip(sequences, starts, strict=True):
            forget_answers(cache, self.history, prompt_digest(seq[: start + 1]))
            request = Request(cache)
            request.prompt(seq[: start + 1])
            request.begin()
            request.respond(seq[start + 1:])

    def start(self, *, batch: int, capacity: int) -> SuffixState:
        """A run's state: its global tree, the history alone (built here, before the run is
        timed), and each row's request, entering it when :meth:`advance` reads its prompt."""
        state = self.start_row(capacity=capacity, batch=batch)
        state.enter_rows()
        return state

    def start_row(self, *, capacity: int, batch: int = 1) -> SuffixState:
        """A new prompt's state, whose row enters the cache of the run that takes it."""
        unbound = SuffixCache(self.rule)  # rules only: each row begins in the state's cache
        return SuffixState(self._run_cache, [Request(unbound) for _ in range(batch)],
                           self.history)

    def _run_cache(self, state: SuffixState) -> SuffixCache:
        """``state``'s cache: the history alone. Building it costs about 0.6 s per 10,000
        history tokens, so the last run's is reused once no state holds it, reset to the
        history (a run decoding alongside gets its own)."""
        spare = self._spare
        if (spare is not None and spare[0]() is None
                and spare[1].reset(self.history.responses)):
            cache = spare[1]
        else:
            cache = self.request_cache()
        if self.history:
            self._spare = (weakref.ref(state), cache)
        return cache

    def advance(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                count: torch.Tensor, next_root: torch.Tensor, state: SuffixState,
                ) -> tuple[torch.Tensor, SuffixState]:
        """After the prefill: each row's prompt and first token, the row entering the cache when
        the state's cache is first read (:class:`SuffixState`); after a step: each row's
        accepted tokens (after the root it read last step), then its next root."""
        if not state.fresh:
            state.enter_rows()  # before they grow
        accepted = tokens.gather(1, index).tolist()
        for row, n, root, ids in zip(state.rows, count.tolist(), next_root.tolist(), accepted,
                                     strict=True):
            if n == 0:  # a stopped row reads nothing
                continue
            if state.fresh:  # the row enters the cache when it is first read, with its root
                row.prompt(ids[:n])
                state.pending.append((row, prompt_digest(ids[:n])))
                row.respond([root])
            else:
                row.respond([*ids[1:n], root])
        state.fresh = False
        return hidden[:, :1], state

    def finish(self, state: SuffixState, row: int, output: Sequence[int]) -> None:
        """The row's cached response becomes its output (the tokens a step accepted past the
        budget or EOS, or not read once every row had stopped, set right)."""
        state.enter_rows()  # a row that never drafted enters first
        state.rows[row].finish(output)

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: SuffixState | None = None) -> torch.Tensor:
        """The root, then each node's candidate of its rank at its parent's path, per row (-1
        where there is none)."""
        if state is None:
            raise TreeoptError("a suffix drafter drafts from its live state (start, then "
                               "advance)")
        state.enter_rows()
        return drafted_rows(state.rows, plan.tree, root)


def forget_answers(cache: SuffixCache, history: History, prompt: str) -> None:
    """The history's responses to the prompt of digest ``prompt`` out of ``cache`` (a request
    never meets its own answer: leave-one-out)."""
    for i in history.answered(prompt):
        cache.forget(i)


def replace_history(drafter: SuffixDrafter, history: History, *,
                    depth: int | None = None) -> SuffixDrafter:
    """``drafter``'s settings with ``history`` (and ``depth``, where given)."""
    r = drafter.rule
    return SuffixDrafter(depth=r.max_spec_tokens if depth is None else depth,
                         max_tree_depth=r.max_tree_depth, max_spec_factor=r.max_spec_factor,
                         max_spec_offset=r.max_spec_offset, min_token_prob=r.min_token_prob,
                         max_cached_requests=r.max_cached_requests,
                         vocab_size=drafter.config.vocab_size, history=history)


def _spec_value(text: str, key: str, value: str) -> int | float | str:
    if key == "history":
        return value
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
                           forms=", ".join(f"{k}={_FORMS.get(k, 'N')}" for k in DEFAULTS),
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
    return _from_settings(settings, source=str(path), vocab_size=vocab_size, folder=path.parent)


def _from_settings(settings: dict[str, int | float | str], *, source: str, vocab_size: int,
                   folder: Path | None = None) -> SuffixDrafter:
    """The drafter of a spec's or a ``drafter.json``'s settings (keys of :data:`DEFAULTS`;
    a history file relative to ``folder``, the drafter directory, when given); invalid ones are
    refused, naming ``source``."""
    try:
        name = str(settings["history"])
        history = (read_responses(folder / name if folder else Path(name), vocab_size=vocab_size)
                   if name else History())
        return SuffixDrafter(depth=int(settings["depth"]),
                             max_tree_depth=int(settings["max-tree-depth"]),
                             max_spec_factor=float(settings["max-spec-factor"]),
                             max_spec_offset=float(settings["max-spec-offset"]),
                             min_token_prob=float(settings["min-token-prob"]),
                             max_cached_requests=int(settings["max-cached-requests"]),
                             vocab_size=vocab_size, history=history)
    except (TreeoptError, ValueError) as exc:
        raise TreeoptError(f"{source}: {exc}") from None
