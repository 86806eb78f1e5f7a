"""EAGLE's teacher-forced chains: every depth's predicted features at every position of a
sequence, exactly as the drafter sees them live, in one pass per depth.

At depth k, position t's query is the entry of its own chain at position t+k and sees the true
entries ``0 … t`` and its chain's predicted entries at depths 1 … k, exactly what it sees live.
One pass per depth computes every position at once: the keys of the true entries come from the
depth-0 pass (:func:`true_pass`); the chain's own keys are one per depth and position, so that
block of the mask is diagonal and is computed as a per-position dot product rather than a dense
``[n, n]`` block.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from treeopt.drafters.eagle_layer import KV, DecoderLayer, EagleNetwork


def true_pass(net: EagleNetwork, hidden: torch.Tensor, stream: torch.Tensor,
              ) -> tuple[torch.Tensor, list[KV], torch.Tensor]:
    """Depth 0: a causal pass over the true entries 0 … T-2; their outputs ``[b, T-1, d]``
    (the predicted feature after each prefix), every layer's keys and values, the mask."""
    b, T = stream.shape
    positions = torch.arange(T - 1, device=stream.device)[None].expand(b, T - 1)
    x = net.entries(stream[:, 1:], hidden[:, :-1])
    true_kv: list[KV] = []
    causal = torch.ones(T - 1, T - 1, dtype=torch.bool, device=stream.device).tril()
    for layer in net.layers:
        q, kv = layer.qkv(x, positions)
        true_kv.append(kv)
        att = F.scaled_dot_product_attention(q, layer.expand(kv[0]), layer.expand(kv[1]),
                                             attn_mask=causal)
        x = layer.finish(x, att)
    return x, true_kv, causal


def teacher_chains(net: EagleNetwork, hidden: torch.Tensor, stream: torch.Tensor, depths: int,
                   ) -> list[torch.Tensor]:
    """Predicted features ``[b, n, d]`` of every depth 0 … depths-1 at every position t of
    the sequence (n = T-1-depths), teacher-forced exactly (module notes). Differentiable:
    training uses it too."""
    b, T = stream.shape
    n = T - 1 - depths
    positions = torch.arange(T, device=stream.device)[None].expand(b, T)
    x, true_kv, causal = true_pass(net, hidden, stream)
    out = [x[:, :n]]
    chain_kv: list[list[KV]] = [[] for _ in net.layers]
    seen = causal[:n]  # query t sees true entries j ≤ t
    for k in range(1, depths):
        y = net.entries(stream[:, 1 + k: 1 + k + n], out[-1])  # position t+k of chain t
        for i, layer in enumerate(net.layers):
            q, kv = layer.qkv(y, positions[:, k: k + n])
            chain_kv[i].append(kv)
            att = chain_attention(q, layer, true_kv[i], chain_kv[i], seen)
            y = layer.finish(y, att)
        out.append(y)
    return out


def chain_attention(q: torch.Tensor, layer: DecoderLayer, true_kv: KV, chain: list[KV],
                     seen: torch.Tensor) -> torch.Tensor:
    """Attention of chain queries ``[b, h, n, hd]`` (chain t at its depth) over the true entries
    ``j ≤ t`` (``seen`` ``[n, T-1]``) and the chain's own entries at depths 1 … k (``chain``:
    ``[b, kvh, n, hd]`` per depth, the last the queries' own): the 4D mask over true and
    predicted keys, whose predicted block is diagonal."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    keys, values = layer.expand(true_kv[0]), layer.expand(true_kv[1])
    scores = [torch.matmul(q, keys.transpose(-1, -2)).masked_fill(~seen, float("-inf")) * scale]
    own = [(q * layer.expand(k)).sum(-1, keepdim=True) * scale for k, _ in chain]  # [b, h, n, 1]
    weights = torch.softmax(torch.cat(scores + own, dim=-1).float(), dim=-1).to(q.dtype)
    out = torch.matmul(weights[..., : keys.shape[2]], values)
    for j, (_, v) in enumerate(chain):
        out = out + weights[..., keys.shape[2] + j: keys.shape[2] + j + 1] * layer.expand(v)
    return out
