"""Attention whose result for a token does not depend on how many tokens are verified with it.

Tree decoding is lossless only if the verify forward's logits for a node equal, bit for bit,
the logits autoregressive decoding computes for the same token after the same prefix — greedy
argmax then picks the same token, ties included. Linear layers, norms and rotary embeddings
compute each row on its own, so a row does not change with the number of rows (q). Attention
does: a tree node attends to its ancestors among q tree keys, padded by masked siblings, where
autoregressive decoding attends to one new key, and the kernels' reductions over the keys
(blocked dot products, the softmax sum, probabilities × values) group the same nonzero terms
differently. In float32 the difference (an ulp or so) almost never moves a rounded logit;
in bfloat16 it does, often: with PyTorch's SDPA a bfloat16 tree decode leaves the autoregressive
text on many prompts.

``treeopt_exact`` (registered with transformers' attention interface) computes attention in
float64. For 16-bit inputs every query·key product and every sum of ``head_dim`` of them is
exact in float64 (8-bit mantissas: products of 16 bits, sums far inside 53), so scores do not
depend on the kernel at all; masked keys add exact zeros; the softmax and the weighted sum of
values round at 2^-53, which moves the 16-bit result only when it lies within that of a 16-bit
rounding boundary (a chance of about 2^-44 per output element). It costs what SDPA costs for
one token, and somewhat more per step for a tree's tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from treeopt.decoding.config import ATTENTIONS
from treeopt.errors import FieldError

EXACT = "treeopt_exact"  # the attn_implementation name this module registers
_registered = False


def exact_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                    value: torch.Tensor, attention_mask: torch.Tensor | None, *,
                    scaling: float | None = None, dropout: float = 0.0,
                    softcap: float | None = None, s_aux: torch.Tensor | None = None,
                    **_: Any) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query`` ``[b, h, q, d]``, ``key`` and
    ``value`` ``[b, h_kv, L, d]`` / ``[b, h_kv, L, d_v]`` (grouped-query heads repeated here),
    ``attention_mask`` ``[b, 1, q, ≥L]`` additive float or boolean (True: visible), or None
    (causal, the last q of the L keys being the queries). As the models' own eager attention:
    ``softcap`` caps the scores at ±softcap by tanh before the mask (Gemma 2), and ``s_aux``
    ``[h]`` is each head's attention sink, a logit that joins the softmax and is then dropped
    (GPT-OSS). Returns ``[b, q, h, d_v]`` in the query's dtype and no weights.

    >>> q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8)
    >>> out, _ = exact_attention(None, q, k, k, None, scaling=8 ** -0.5)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(
    ...     q, k, k, attn_mask=torch.ones(3, 5, dtype=torch.bool).tril(2))
    >>> bool(torch.allclose(out, ref.transpose(1, 2), atol=1e-6)), out.dtype
    (True, torch.float32)
    """
    if dropout:
        raise ValueError(f"{EXACT} attention is for inference: dropout must be 0, got {dropout}")
    b, h, n_q, d = query.shape
    h_kv = key.shape[1]
    groups = h // h_kv
    # grouped-query heads share their key and value: each key head's query heads become one
    # block of rows (head i reads key head i // groups), so K and V are not copied per head
    q = query.double().reshape(b, h_kv, groups * n_q, d)
    scale = scaling if scaling is not None else d ** -0.5
    scores = torch.matmul(q, key.double().transpose(-1, -2)) * scale  # [b, h_kv, g·q, L]
    n_k = scores.shape[-1]
    scores = scores.reshape(b, h, n_q, n_k)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is None:
        visible = torch.ones(n_q, n_k, dtype=torch.bool, device=scores.device).tril(n_k - n_q)
        scores = scores.masked_fill(~visible, float("-inf"))
    elif attention_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attention_mask[..., :n_k], float("-inf"))
    else:
        scores = scores + attention_mask[..., :n_k].double()
    if s_aux is not None:  # [h] sinks: one more logit per row, dropped after the softmax
        sink = s_aux.double().reshape(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        probs = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
    else:
        probs = torch.softmax(scores, dim=-1)
    out = torch.matmul(probs.reshape(b, h_kv, groups * n_q, n_k), value.double())
    return out.reshape(b, h, n_q, -1).to(query.dtype).transpose(1, 2).contiguous(), None


def register() -> str:
    """Register :func:`exact_attention` (and, for the masks transformers builds itself, its
    float additive mask) under :data:`EXACT`; returns the name. Idempotent."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

        AttentionInterface.register(EXACT, exact_attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(EXACT, eager_mask)
        _registered = True
    return EXACT


def attention_for(choice: str, dtype: torch.dtype) -> str | None:
    """The ``attn_implementation`` to load a model with: ``auto`` is treeopt's exact attention
    for 16-bit dtypes (where losslessness needs it) and the model's own default otherwise
    (None); ``exact`` always; ``sdpa`` and ``eager`` as named.

    >>> attention_for("auto", torch.bfloat16), attention_for("auto", torch.float32)
    ('treeopt_exact', None)
    """
    if choice not in ATTENTIONS:
        raise FieldError("attention", f"{choice!r} is unknown; expected one of "
                         f"{', '.join(ATTENTIONS)}")
    if choice == "exact" or (choice == "auto" and dtype in (torch.float16, torch.bfloat16)):
        return register()
    return None if choice == "auto" else choice
