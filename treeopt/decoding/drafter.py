"""The interface every drafter offers the decoder, calibration and the profiler: :class:`Drafter`.

The implementations (Medusa and Hydra heads, EAGLE drafters, a draft model) live in
:mod:`treeopt.drafters`; what the rest of treeopt knows about a kind without torch — including
whether it drafts dynamic trees — is its :class:`~treeopt.registry.kinds.DrafterKind` in the
registry.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from treeopt.errors import TreeoptError
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS, DrafterKind

if TYPE_CHECKING:
    from treeopt.decoding.dynamic_drafting import RowPlan
    from treeopt.decoding.plan import TreePlan
    from treeopt.model.dynamic_settings import DynamicSettings

LiveState = Any  # a kind's own state across live steps (Hydra++: its prefix layer's cache)
RequestCache = Any  # a kind's cache of requests' outputs across calibration chunks


class Drafter(nn.Module):
    """What proposes a live step's tree and what calibration ranks: the one interface every
    stage uses (calibration, live decoding, profiling), whatever the kind.

    - :meth:`rank_depths`: teacher-forced ranks of every depth over already generated text;
    - :meth:`start`, :meth:`advance`: the live state, and the features read next, for a batch of
      rows that accept ragged numbers of tokens;
    - :meth:`draft`: a live step's tree tokens for every row, batched;
    - :meth:`draft_dynamic`, :meth:`rank_dynamic`: the same for dynamic trees, in the kinds
      whose ``kind.dynamic`` is true;
    - :meth:`drafted_depths`: a lookup drafter's chain length at every position, teacher-forced;
    - :meth:`request_cache`, :meth:`rank_requests`, :meth:`remember_requests`: calibration
      of a kind whose drafts read earlier requests' outputs (``kind.request_cache``), request
      by request in order; :meth:`finish`: a live request's end, the output such a kind keeps;
    - ``config``: its :class:`~treeopt.registry.drafter_configs.HeadsConfig` (``num_heads``: the depths it
      drafts), written beside every trace and profile.
    """

    kind: ClassVar[DrafterKind]
    config: HeadsConfig

    def cold(self) -> Drafter:
        """The drafter with nothing served before it (suffix decoding without its history: a
        server just started). Itself for every other kind."""
        return self

    def at_depth(self, depth: int) -> Drafter:
        """The same drafter drafting up to ``depth`` levels (a lookup drafter: its settings at
        another depth)."""
        return type(self).from_config(replace(self.config, num_heads=depth))

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The base model's ``hidden_states`` it reads, concatenated (empty: the last one)."""
        return self.config.feature_layers

    def rank_depths(self, hidden: torch.Tensor | None, stream: torch.Tensor, *, top_k: int,
                    ) -> torch.Tensor:
        """Teacher-forced ranks of every depth at every position, in one pass per depth.

        ``hidden`` ``[b, T, d]``: the base model's last hidden states over ``stream`` ``[b, T]``
        (the tokens the drafter is ranked against); None for a kind that reads no features
        (``kind.reads_features`` false), which ranks from the tokens alone. Position t's root is ``stream[t+1]``; depth k
        (0-based) proposes ``stream[t+2+k]`` and reads the true path ``stream[t+1 … t+1+k]``.
        Returns int16 ``[b, T-1-K, K]``: the rank, or -1 beyond ``top_k``.
        """
        raise NotImplementedError

    def drafted_depths(self, sequence: Sequence[int], start: int) -> npt.NDArray[np.int16] | None:
        """How many tokens its own top-1 chain holds at each position :meth:`rank_depths`
        records from ``start`` (0 … K, teacher-forced along ``sequence``): a lookup drafter's,
        whose chain may end early (the rest holes); None for a kind that always drafts all K."""
        return None

    def request_cache(self) -> RequestCache:
        """An empty cache of requests' outputs, for a kind that drafts from one
        (``kind.request_cache``: suffix decoding's global tree); calibration passes it to
        :meth:`rank_requests` chunk after chunk."""
        raise TreeoptError(f"a {self.kind.title.lower()} keeps no cache of requests")

    def rank_requests(self, cache: RequestCache, sequences: Sequence[Sequence[int]],
                      starts: Sequence[int], *, top_k: int,
                      drafted: list[npt.NDArray[np.int16]] | None = None,
                      ) -> list[npt.NDArray[np.int16]]:
        """Teacher-forced ranks of requests in order, each seeing ``cache`` as the requests
        before it left it, then adding its own output: per sequence (prompt and continuation,
        the prompt ``starts[i] + 1`` tokens) int16 ``[positions, K]`` for the positions a live
        run of the continuation visits from ``starts[i]``, a target at or past its last token a
        miss (:func:`~treeopt.decoding.rank_pass.cut_to_run`; kinds with
        ``kind.request_cache``: the ranks of the others do not depend on the order).
        ``drafted``, when given, receives each request's chain length at those positions (as
        :meth:`drafted_depths` gives a lookup drafter's)."""
        raise TreeoptError(f"a {self.kind.title.lower()} keeps no cache of requests")

    def remember_requests(self, cache: RequestCache, sequences: Sequence[Sequence[int]],
                          starts: Sequence[int]) -> None:
        """Add requests' outputs to ``cache`` as :meth:`rank_requests` does, without ranking
        them (a resumed calibration's finished chunks)."""
        raise TreeoptError(f"a {self.kind.title.lower()} keeps no cache of requests")

    def distill_terms(self, hidden: torch.Tensor, ids: torch.Tensor, teacher: torch.Tensor,
                      ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """Self-distillation on a batch: per depth k, (loss, logits ``[b, n, V]``, teacher
        distribution ``[b, n, V]``), from the base model's hiddens ``[b, T, d]`` and next-token
        distributions ``teacher`` ``[b, T, V]`` over ``ids`` ``[b, T]`` (training)."""
        raise TreeoptError(f"a {self.kind.title.lower()} is not trained by treeopt")

    def start(self, *, batch: int, capacity: int) -> LiveState:
        """The live state of a batch of ``batch`` rows of up to ``capacity`` tokens."""
        return None

    def start_row(self, *, capacity: int) -> LiveState:
        """The live state of one new prompt whose row a running batch takes (:meth:`take_row`,
        continuous batching): :meth:`start` of one row, for every kind whose run-wide state
        (suffix decoding's cache) is not built again for it."""
        return self.start(batch=1, capacity=capacity)

    def advance(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                count: torch.Tensor, next_root: torch.Tensor, state: LiveState,
                ) -> tuple[torch.Tensor, LiveState]:
        """After a step (or the prefill): the features ``[b, 1, d]`` the drafter reads next,
        and its state. Each row just accepted ``count[row]`` tokens, ``tokens[row, index[row,
        :count[row]]]`` with base hidden states ``hidden[row, index[row, :count[row]]]``
        (``hidden`` ``[b, t, d]``, ``tokens`` ``[b, t]``); ``next_root`` ``[b]`` is the token the
        base model chose after them, the next step's root. A row that accepted nothing, having
        stopped, gets features it never uses."""
        last = index.gather(1, (count - 1).clamp_min(0)[:, None])  # [b, 1]
        rows = torch.arange(hidden.shape[0], device=hidden.device)[:, None]
        return hidden[rows, last], state

    def prime(self, state: LiveState) -> None:
        """Feed what :meth:`advance` queued for a new row (its prompt) but the last entry, in
        place, so that the next step's catch-up feeds no more than a step's: a batch whose
        finished row took a new prompt (continuous batching) keeps that prompt's drafter
        prefill out of its steps, as it keeps the base model's. For kinds that feed everything
        in :meth:`advance`, or keep no state, there is nothing to do."""

    def finish(self, state: LiveState, row: int, output: Sequence[int]) -> None:
        """Row ``row``'s request has ended with ``output``, its new tokens cut at its budget and
        EOS (what the run returns for it). A kind whose state outlives a request (a cache of
        requests' outputs) keeps exactly that; the others have nothing to do."""

    def take_row(self, state: LiveState, row: int, new: LiveState) -> LiveState:
        """``state`` with ``row`` replaced by the one row of ``new`` (the live state of a new
        prompt, :meth:`start` for one row, :meth:`advance` after its prefill, :meth:`prime`),
        in place where it can be: a finished row taking the next prompt."""
        if state is None:
            return None
        state.take_row(row, new)
        return state

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: LiveState = None) -> torch.Tensor:
        """Tree tokens ``[b, n+1]`` (root first) from features ``[b, 1, d]``, roots ``[b]`` and
        the live state (which a drafter with a cache of its own updates in place)."""
        raise NotImplementedError

    def draft_dynamic(self, settings: DynamicSettings, hidden: torch.Tensor, root: torch.Tensor,
                      state: LiveState = None) -> tuple[torch.Tensor, RowPlan]:
        """A dynamic step (:mod:`treeopt.decoding.dynamic_drafting`): tree tokens ``[b, N]`` and the
        rows' trees, from the same inputs as :meth:`draft`."""
        raise no_dynamic_trees(self.kind)

    def rank_dynamic(self, hidden: torch.Tensor, stream: torch.Tensor, *, topk: int,
                     steps: int) -> torch.Tensor:
        """Where the true path stands in the dynamic candidate pool at every position, teacher
        forced as :meth:`rank_depths` is: int16 ``[b, T-1-S, S, S]``
        (:class:`~treeopt.dynamic.simulate.DynamicTrace` holds what it returns)."""
        raise no_dynamic_trees(self.kind)


def take_queued_row(state: Any, row: int, new: Any, caches: tuple[torch.Tensor, torch.Tensor],
                    queues: tuple[str, ...]) -> None:
    """:meth:`Drafter.take_row` for a kind whose state queues entries (``count``, ``lengths``,
    ``lens``, and the ``[b, P, …]`` fields ``queues``): row ``row`` of ``state`` becomes ``new``'s
    one row — its cache (``caches``: the state's ``[…, …, b, …]`` and ``new``'s), length and
    queued entries, at most as many as a row of the batch queues (a primed new row queues one)."""
    queued, width = int(new.count[0]), getattr(state, queues[0]).shape[1]
    if queued > width:
        raise TreeoptError(f"a new row queues {queued} entries, a row of the batch at most {width}")
    caches[0][:, :, row] = caches[1][:, :, 0]
    state.lengths, state.count = state.lengths.clone(), state.count.clone()  # the loop's own
    state.lengths[row], state.lens[row], state.count[row] = new.lengths[0], new.lens[0], queued
    for name in queues:
        getattr(state, name)[row, :queued] = getattr(new, name)[0, :queued]


def feed_all_but_last(state: Any, catch_up: Callable[[Any], object],
                      queues: tuple[str, ...]) -> None:
    """:meth:`Drafter.prime` for a kind whose state queues entries until a step's catch-up
    feeds them: feed each row's queued entries but its last through ``catch_up`` (the kind's
    own), then keep only that last one queued in each of the state's ``queues`` fields
    (``[b, P, …]``), ``count`` 1 per row (0 for a row that queued nothing)."""
    last = (state.count - 1).clamp_min(0)
    queued = state.count
    state.count = last
    if int(last.max()):
        catch_up(state)
    rows = torch.arange(last.shape[0], device=last.device)
    for name in queues:
        setattr(state, name, getattr(state, name)[rows, last][:, None])
    state.count = (queued > 0).long()


def no_dynamic_trees(kind: DrafterKind) -> TreeoptError:
    """The error of asking a kind that drafts no dynamic trees for one, naming those that do.

    >>> from treeopt.registry.kinds import drafter_kind
    >>> str(no_dynamic_trees(drafter_kind("hydra")))
    'dynamic trees need an EAGLE drafter, an EAGLE-3 drafter or an MTP drafter, not Hydra heads'
    """
    *some, last = [f"an {k.title}" for k in KINDS.values() if k.dynamic]
    able = f"{', '.join(some)} or {last}" if some else last
    return TreeoptError(f"dynamic trees need {able}, not {kind.title}")


def pick_features(hidden_states: tuple[torch.Tensor, ...] | list[torch.Tensor],
                  layers: tuple[int, ...]) -> torch.Tensor:
    """A drafter's features from a forward's ``hidden_states``: the last (after the final norm)
    when ``layers`` is empty, else those layers' concatenated ``[b, t, len(layers)·d]``."""
    if not layers:
        return hidden_states[-1]
    return torch.cat([hidden_states[i] for i in layers], dim=-1)
