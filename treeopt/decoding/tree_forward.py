"""One tree-verification forward through a Hugging Face model's public ``forward``.

The tree's tokens follow the cached prefix; each attends to the whole prefix and to its own
ancestors (a float 4D mask ``[b, 1, q, past + q]``: 0 where visible, the dtype's minimum where
not), at positions ``past + depth``. Masks, positions and the cache are arguments: nothing is
patched onto the model. The profiler times this same function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from treeopt.decoding.cache import new_cache
from treeopt.decoding.models import architecture
from treeopt.errors import TreeoptError
from treeopt.tree import Tree

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def tree_mask(tree: Tree, past: int, *, dtype: torch.dtype, device: torch.device | str,
              ) -> torch.Tensor:
    """Additive mask ``[1, 1, n+1, past + n+1]`` for the tree's tokens after ``past`` cached ones.

    >>> tree_mask(Tree.from_choices([[0], [1]]), 1, dtype=torch.float32, device="cpu")[0, 0].eq(0).int().tolist()
    [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]]
    """
    q = tree.num_tokens
    visible = torch.ones(q, past + q, dtype=torch.bool, device=device)
    visible[:, past:] = torch.tensor(tree.attention_mask.tolist(), device=device)
    return causal_to_additive(visible, dtype=dtype)[None, None]


def causal_to_additive(visible: torch.Tensor, *, dtype: torch.dtype) -> torch.Tensor:
    """Boolean visibility → additive float mask (0 where visible, dtype min where not)."""
    zero = torch.zeros((), dtype=dtype, device=visible.device)
    return torch.where(visible, zero, torch.finfo(dtype).min)


def mask_dtype(model: PreTrainedModel) -> torch.dtype:
    """The float dtype of the model's activations (its embeddings' dtype)."""
    dtype = model.get_input_embeddings().weight.dtype
    return dtype if dtype.is_floating_point else torch.float32


def forward_with_cache(model: PreTrainedModel, input_ids: torch.Tensor, *, cache: Any,
                       position_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits ``[b, q, V]`` and last hidden states ``[b, q, d]``; the cache grows by q."""
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
    return out.logits, out.hidden_states[-1]


def tree_inputs(tree: Tree, *, batch: int, past: int, dtype: torch.dtype,
                device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Position ids ``[b, n+1]`` (``past + depth``) and the mask ``[b, 1, n+1, past + n+1]`` of
    a verify step of ``tree`` after ``past`` cached tokens.

    >>> pos, mask = tree_inputs(Tree.chain(2), batch=2, past=3, dtype=torch.float32, device="cpu")
    >>> pos.tolist(), list(mask.shape)
    ([[3, 4, 5], [3, 4, 5]], [2, 1, 3, 6])
    """
    offsets = torch.tensor(tree.position_offsets.tolist(), device=device)
    mask = tree_mask(tree, past, dtype=dtype, device=device)
    return (past + offsets).expand(batch, -1), mask.expand(batch, -1, -1, -1)


def tree_forward(model: PreTrainedModel, tokens: torch.Tensor, tree: Tree, *, cache: Any, past: int,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Verify tree tokens ``[b, n+1]`` (root first) after ``past`` cached tokens: the verify
    step of live decoding, and what the profiler times.

    Returns logits ``[b, n+1, V]`` and hidden states ``[b, n+1, d]``.
    """
    position_ids, mask = tree_inputs(tree, batch=tokens.shape[0], past=past,
                                     dtype=mask_dtype(model), device=tokens.device)
    return forward_with_cache(model, tokens, cache=cache, position_ids=position_ids,
                              attention_mask=mask)


def check_tree_support(model: PreTrainedModel) -> None:
    """Probe that ``model`` honours a 4D mask: a masked tree token must not see its sibling.

    Raises a TreeoptError naming the architecture when the forward rejects the mask or ignores it.
    """
    device = model.get_input_embeddings().weight.device
    tokens = torch.tensor([[1, 2, 3]], device=device)
    with torch.no_grad():
        cache = new_cache(model)
        forward_with_cache(model, tokens[:, :1], cache=cache, position_ids=tokens.new_zeros(1, 1))
        tree = Tree.from_choices([[0], [1]])  # two siblings at the same position
        logits, _ = tree_forward(model, torch.tensor([[1, 2, 3]], device=device), tree,
                                 cache=cache, past=1)
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
