"""One tree-verification forward through a Hugging Face model's public ``forward``: the verify
step of live decoding, and exactly what the profiler times.

A batch of rows, each with its own cached prefix (``lengths``: slots ``[0, length_i)`` of a
:class:`~treeopt.decoding.cache.SlotCache`), verifies the tree's q tokens written at
``[frontier, frontier + q)``. Each tree token attends to its row's prefix and to its own
ancestors (a float 4D mask ``[b, 1, q, frontier + q]``: 0 where visible, the dtype's minimum
where not) at positions ``length_i + depth``, narrowed per layer to the model's own sliding
window or chunk (:mod:`treeopt.decoding.layers`). Masks, positions and the cache are
arguments: nothing is patched onto the model.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from treeopt.decoding.blas import BlasChoice
from treeopt.decoding.cache import CacheShape, SlotCache
from treeopt.decoding.drafter import pick_features
from treeopt.decoding.layers import AttentionLayout, Masks, additive
from treeopt.decoding.models import architecture
from treeopt.decoding.plan import TreePlan
from treeopt.errors import TreeoptError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.dynamic_drafting import RowPlan


def mask_dtype(model: PreTrainedModel) -> torch.dtype:
    """The float dtype of the model's activations (its embeddings' dtype)."""
    dtype = model.get_input_embeddings().weight.dtype
    return dtype if dtype.is_floating_point else torch.float32


def step_inputs(plan: TreePlan | RowPlan, lengths: torch.Tensor, frontier: int, *, dtype: torch.dtype,
                width: int | None = None, layout: AttentionLayout | None = None,
                ) -> tuple[torch.Tensor, Masks]:
    """Position ids ``[b, q]`` and the additive mask ``[b, 1, q, frontier + q]`` of a verify step
    whose rows hold ``lengths`` ``[b]`` cached tokens and write the tree at ``frontier``
    (``width``: a mask over that many slots, the rest hidden — a static cache's whole buffer;
    ``layout``: the model's layers, when some see less than the whole prefix — then one mask
    per layer type).

    >>> from treeopt.decoding.plan import tree_plan
    >>> from treeopt.model.tree import Tree
    >>> pos, mask = step_inputs(tree_plan(Tree.from_choices([[0], [1]]), "cpu"),
    ...                         torch.tensor([2, 1]), 2, dtype=torch.float32)
    >>> pos.tolist(), (mask[:, 0] == 0).int().tolist()
    ([[2, 3, 3], [1, 2, 2]], [[[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 1]], [[1, 0, 1, 0, 0], [1, 0, 1, 1, 0], [1, 0, 1, 0, 1]]])
    """
    b, q = lengths.shape[0], plan.offsets.shape[-1]
    positions = lengths[:, None] + plan.offsets  # [b, q] (offsets [q], or per row [b, q])
    slots = torch.arange(frontier, device=lengths.device)
    prefix = slots < lengths[:, None]  # [b, frontier]: each row's own prefix
    parts = [prefix[:, None, :].expand(b, q, frontier), plan.visible.expand(b, q, q)]
    rest = 0 if width is None else width - frontier - q
    if rest:
        parts.append(prefix.new_zeros(b, q, rest))
    visible = torch.cat(parts, dim=-1)  # [b, q, frontier + q (or width)]
    if layout is None or layout.full_only:
        return positions, additive(visible, dtype)[:, None]
    keys = torch.cat([slots.expand(b, frontier), positions.expand(b, q),
                      positions.new_zeros(b, rest)], dim=-1)  # [b, K]: each slot's position
    return positions, layout.masks(visible, positions, keys, dtype=dtype)


def prefix_inputs(lengths: torch.Tensor, longest: int, *, dtype: torch.dtype,
                  width: int | None = None, layout: AttentionLayout | None = None,
                  ) -> tuple[torch.Tensor, Masks]:
    """Position ids ``[b, longest]`` and mask(s) of a prefill of right-padded rows into an
    empty cache (``width``: a static cache's whole buffer): causal, each layer narrowed as
    the model narrows it.

    >>> pos, mask = prefix_inputs(torch.tensor([3]), 3, dtype=torch.float32)
    >>> (mask[0, 0] == 0).int().tolist()
    [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    b, device = lengths.shape[0], lengths.device
    causal = torch.ones(longest, width or longest, dtype=torch.bool, device=device).tril()
    positions = torch.arange(longest, device=device)[None].expand(b, -1)
    if layout is None or layout.full_only:
        return positions, additive(causal, dtype)[None, None].expand(b, 1, -1, -1)
    keys = torch.arange(width or longest, device=device)[None].expand(b, -1)
    return positions, layout.masks(causal[None].expand(b, -1, -1), positions, keys, dtype=dtype)


def forward_with_cache(model: PreTrainedModel, input_ids: torch.Tensor, *, cache: Any,
                       position_ids: torch.Tensor, attention_mask: Masks | None = None,
                       layers: tuple[int, ...] = (), logits_to_keep: int = 0,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits ``[b, q, V]`` (``logits_to_keep``: of the last that many tokens only; 0: all) and
    last hidden states ``[b, q, d]`` (``layers``: those hidden states concatenated, what an
    EAGLE-3 drafter reads) from the model's own forward; the cache takes the q tokens."""
    try:
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    past_key_values=cache, use_cache=True, output_hidden_states=True,
                    **({"logits_to_keep": logits_to_keep} if logits_to_keep else {}))
    except (TypeError, ValueError, RuntimeError, IndexError, AttributeError) as exc:
        if attention_mask is None:
            raise
        raise TreeoptError(
            f"{architecture(model)}: its forward rejects "
            f"{'per-layer 4D attention masks' if isinstance(attention_mask, dict) else 'a 4D attention mask'} "
            f"with position_ids and a cache, so tree verification cannot drive it ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    return out.logits, pick_features(out.hidden_states, layers)


@dataclass(frozen=True)
class SupportProbe:
    """How far treeopt's tree step strays from the model's own forward: the largest difference
    of a probed token's last hidden state, in float32, against a tolerance relative to them."""

    prefix: int  # the most tokens cached before the tree (past every window and chunk)
    max_abs_diff: float
    tolerance: float

    @property
    def exact(self) -> bool:
        return self.max_abs_diff <= self.tolerance


@dataclass(frozen=True, eq=False)
class Verifier:
    """How verify forwards run on one model, decided once (:func:`verifier`).

    ``split``: the model's decoder (``get_decoder()``) then its LM head
    (``get_output_embeddings()``), which skips the wrapper's collection of every layer's hidden
    states — used only where a probe found it gives the model's own logits exactly (not for
    models that scale or cap their logits in the wrapper). ``blas``: on CUDA, which BLAS library
    runs a forward of so many rows (:mod:`treeopt.decoding.blas`). ``layout``: each layer's
    attention kind, which the masks follow; ``shape``: what the model's cache holds per token.
    """

    model: PreTrainedModel
    split: bool
    dtype: torch.dtype  # of the additive masks
    layout: AttentionLayout
    shape: CacheShape
    compiled: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    features: tuple[int, ...] = ()  # hidden states the drafter reads (empty: the last)
    blas: BlasChoice | None = None
    probe: SupportProbe | None = None  # what the support probe found, when it ran

    @property
    def static(self) -> bool:
        """Compiled steps need a static cache (shapes fixed by the batch and q)."""
        return self.compiled is not None

    def forward(self, input_ids: torch.Tensor, *, cache: Any, position_ids: torch.Tensor,
                attention_mask: Masks) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits ``[b, q, V]`` and last hidden states ``[b, q, d]``; the cache takes the q
        (through the compiled step when there is one)."""
        if self.compiled is None:
            return self.eager(input_ids, cache=cache, position_ids=position_ids,
                              attention_mask=attention_mask)
        # A CUDA graph's replay reuses its output memory: each call is a new step, and its
        # outputs are copied out before the next replay can overwrite them.
        torch.compiler.cudagraph_mark_step_begin()
        with self._library(input_ids):  # what the graph records, the first time
            logits, hidden = self.compiled(input_ids, cache=cache, position_ids=position_ids,
                                           attention_mask=attention_mask)
        return logits.clone(), hidden.clone()

    def eager(self, input_ids: torch.Tensor, *, cache: Any, position_ids: torch.Tensor,
              attention_mask: Masks) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward as the model runs it, uncompiled (prefill, and every step by default)."""
        with self._library(input_ids):
            if not self.split:
                return forward_with_cache(self.model, input_ids, cache=cache,
                                          position_ids=position_ids,
                                          attention_mask=attention_mask, layers=self.features)
            hidden = self.model.get_decoder()(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                past_key_values=cache, use_cache=True).last_hidden_state
            return self.model.get_output_embeddings()(hidden), hidden

    def cache(self, *, batch: int, capacity: int, static: bool = False) -> SlotCache:
        """An empty batch cache of what this model caches."""
        return SlotCache.allocate(self.shape, batch=batch, capacity=capacity, static=static)

    def prefill(self, input_ids: torch.Tensor, lengths: torch.Tensor, *, cache: SlotCache,
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded prompts ``[b, longest]`` (``lengths`` ``[b]``) into an empty ``cache``,
        eager; logits ``[b, longest, V]`` and hidden states."""
        positions, mask = prefix_inputs(lengths, input_ids.shape[1], dtype=self.dtype,
                                        width=cache.capacity if cache.static else None,
                                        layout=self.layout)
        cache.place(0, input_ids.shape[1])
        return self.eager(input_ids, cache=cache, position_ids=positions, attention_mask=mask)

    def _library(self, input_ids: torch.Tensor) -> AbstractContextManager[None]:
        """The faster BLAS library for a forward of these tokens, where there is a choice."""
        return nullcontext() if self.blas is None else self.blas.use(input_ids.numel())


def verify_step(verify: Verifier, tokens: torch.Tensor, plan: TreePlan | RowPlan, *,
                cache: SlotCache, lengths: torch.Tensor, frontier: int,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify tree tokens ``[b, q]`` (root first) after each row's cached prefix; the cache
    takes them at ``frontier``. Returns logits ``[b, q, V]`` and hidden states ``[b, q, d]``."""
    positions, mask = step_inputs(plan, lengths, frontier, dtype=verify.dtype,
                                  width=cache.capacity if cache.static else None,
                                  layout=verify.layout)
    cache.place(frontier, tokens.shape[1])
    return verify.forward(tokens, cache=cache, position_ids=positions, attention_mask=mask)
