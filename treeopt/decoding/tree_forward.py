"""One tree-verification forward through a Hugging Face model's public ``forward``: the verify
step of live decoding, and exactly what the profiler times.

A batch of rows, each with its own cached prefix (``lengths``: slots ``[0, length_i)`` of a
:class:`~treeopt.decoding.cache.SlotCache`), verifies the tree's q tokens written at
``[frontier, frontier + q)``. Each tree token attends to its row's prefix and to its own
ancestors (a float 4D mask ``[b, 1, q, frontier + q]``: 0 where visible, the dtype's minimum
where not) at positions ``length_i + depth``. Masks, positions and the cache are arguments:
nothing is patched onto the model.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch

from treeopt.decoding.blas import BlasChoice, blas_choice
from treeopt.decoding.cache import SlotCache, new_cache
from treeopt.decoding.models import architecture
from treeopt.decoding.plan import TreePlan, tree_plan
from treeopt.decoding.weight_layout import lay_out_for_cpu
from treeopt.drafters.base import pick_features
from treeopt.errors import TreeoptError
from treeopt.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.dynamic.expand import RowPlan


def mask_dtype(model: PreTrainedModel) -> torch.dtype:
    """The float dtype of the model's activations (its embeddings' dtype)."""
    dtype = model.get_input_embeddings().weight.dtype
    return dtype if dtype.is_floating_point else torch.float32


def additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean visibility → additive float mask (0 where visible, the dtype's minimum where not)."""
    zero = torch.zeros((), dtype=dtype, device=visible.device)
    return torch.where(visible, zero, torch.finfo(dtype).min)


def step_inputs(plan: TreePlan | RowPlan, lengths: torch.Tensor, frontier: int, *, dtype: torch.dtype,
                width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Position ids ``[b, q]`` and the additive mask ``[b, 1, q, frontier + q]`` of a verify step
    whose rows hold ``lengths`` ``[b]`` cached tokens and write the tree at ``frontier``
    (``width``: a mask over that many slots, the rest hidden — a static cache's whole buffer).

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
    if width is not None:
        parts.append(prefix.new_zeros(b, q, width - frontier - q))
    visible = torch.cat(parts, dim=-1)  # [b, q, frontier + q (or width)]
    return positions, additive(visible, dtype)[:, None]


def forward_with_cache(model: PreTrainedModel, input_ids: torch.Tensor, *, cache: Any,
                       position_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                       layers: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits ``[b, q, V]`` and last hidden states ``[b, q, d]`` (``layers``: those hidden
    states concatenated, what an EAGLE-3 drafter reads) from the model's own forward; the cache
    takes the q tokens."""
    try:
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                    past_key_values=cache, use_cache=True, output_hidden_states=True)
    except (TypeError, ValueError, RuntimeError, IndexError, AttributeError) as exc:
        if attention_mask is None or attention_mask.dim() != 4:
            raise
        raise TreeoptError(
            f"{architecture(model)}: its forward rejects a 4D attention mask with position_ids "
            f"and a cache, so tree verification cannot drive it ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    return out.logits, pick_features(out.hidden_states, layers)


@dataclass(frozen=True, eq=False)
class Verifier:
    """How verify forwards run on one model, decided once (:func:`verifier`).

    ``split``: the model's decoder (``get_decoder()``) then its LM head
    (``get_output_embeddings()``), which skips the wrapper's collection of every layer's hidden
    states — used only where a probe found it gives the model's own logits exactly (not for
    models that scale or cap their logits in the wrapper). ``blas``: on CUDA, which BLAS library
    runs a forward of so many rows (:mod:`treeopt.decoding.blas`).
    """

    model: PreTrainedModel
    split: bool
    dtype: torch.dtype  # of the additive masks
    compiled: Callable[..., tuple[torch.Tensor, torch.Tensor]] | None = None
    features: tuple[int, ...] = ()  # hidden states the drafter reads (empty: the last)
    blas: BlasChoice | None = None

    @property
    def static(self) -> bool:
        """Compiled steps need a static cache (shapes fixed by the batch and q)."""
        return self.compiled is not None

    def forward(self, input_ids: torch.Tensor, *, cache: Any, position_ids: torch.Tensor,
                attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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
              attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
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

    def _library(self, input_ids: torch.Tensor) -> AbstractContextManager[None]:
        """The faster BLAS library for a forward of these tokens, where there is a choice."""
        return nullcontext() if self.blas is None else self.blas.use(input_ids.numel())


def verifier(model: PreTrainedModel, *, tree: bool = True, compile: bool = False,
             features: tuple[int, ...] = ()) -> Verifier:
    """The :class:`Verifier` of ``model``; with ``tree``, first check that its forward honours a
    4D tree mask (:func:`check_tree_support`); with ``compile``, steps run through
    ``torch.compile`` (on CUDA in "reduce-overhead" mode: CUDA graphs, one per batch and q);
    ``features``: the hidden states a drafter reads besides the last (then the wrapper's own
    forward runs, which collects them). On the CPU, ``model``'s float32 linear weights are stored
    column-major first, in place (:mod:`~treeopt.decoding.weight_layout`)."""
    lay_out_for_cpu(model)  # before anything runs it: every step, timed or not, runs one layout
    if tree:
        check_tree_support(model)
    plain = Verifier(model, not features and _split_is_exact(model), mask_dtype(model),
                     features=features)  # no BLAS choice inside what torch.compile traces
    blas = blas_choice(model)
    if not compile:
        return replace(plain, blas=blas)
    device = model.get_input_embeddings().weight.device
    mode = "reduce-overhead" if device.type == "cuda" else "default"
    return replace(plain, blas=blas,
                   compiled=torch.compile(plain.eager, mode=mode, dynamic=False))


def _split_is_exact(model: PreTrainedModel) -> bool:
    """Whether decoder-then-LM-head gives the model's own logits on a short probe."""
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    if decoder is None or head is None or decoder is model:
        return False
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([[1, 2, 3]], device=device)
    with torch.no_grad():
        try:
            got = head(decoder(input_ids=ids).last_hidden_state)
        except (TypeError, ValueError, RuntimeError, AttributeError):
            return False
        want = model(input_ids=ids).logits
    return got.shape == want.shape and bool(torch.equal(got, want))


def verify_step(verify: Verifier, tokens: torch.Tensor, plan: TreePlan | RowPlan, *,
                cache: SlotCache, lengths: torch.Tensor, frontier: int,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify tree tokens ``[b, q]`` (root first) after each row's cached prefix; the cache
    takes them at ``frontier``. Returns logits ``[b, q, V]`` and hidden states ``[b, q, d]``."""
    positions, mask = step_inputs(plan, lengths, frontier, dtype=verify.dtype,
                                  width=cache.capacity if cache.static else None)
    cache.place(frontier, tokens.shape[1])
    return verify.forward(tokens, cache=cache, position_ids=positions, attention_mask=mask)


def check_tree_support(model: PreTrainedModel) -> None:
    """Probe that ``model`` honours a 4D mask: a masked tree token must not see its sibling.

    Raises a TreeoptError naming the architecture when the forward rejects the mask or ignores it.
    """
    device = model.get_input_embeddings().weight.device
    cache = SlotCache.allocate(model, batch=1, capacity=5)
    plan = tree_plan(Tree.from_choices([[0], [1]]), str(device))  # two siblings, one position
    plain = Verifier(model, split=False, dtype=mask_dtype(model))
    with torch.no_grad():
        verify_step(plain, torch.tensor([[1]], device=device), tree_plan(Tree(()), str(device)),
                    cache=cache, lengths=torch.zeros(1, dtype=torch.long, device=device),
                    frontier=0)
        logits, _ = verify_step(plain, torch.tensor([[1, 2, 3]], device=device), plan,
                                cache=cache, lengths=torch.ones(1, dtype=torch.long,
                                                                device=device), frontier=1)
        ref, _ = forward_with_cache(model, torch.tensor([[1, 1, 3]], device=device),
                                    cache=new_cache(model),
                                    position_ids=torch.tensor([[0, 1, 2]], device=device))
    sequential = ref[0, 1:].float()  # [root, node 3 as if it followed the root]
    got = torch.stack([logits[0, 0], logits[0, 2]]).float()
    tol = 1e-3 if logits.dtype == torch.float32 else 5e-2
    if not torch.allclose(got, sequential, atol=tol * max(1.0, float(sequential.abs().max())),
                          rtol=0):
        raise TreeoptError(
            f"{architecture(model)}: its forward accepts a 4D attention mask but does not honour "
            f"it (attention implementation {getattr(model.config, '_attn_implementation', '?')}); "
            f"load it with attn_implementation='sdpa' or 'eager'")
