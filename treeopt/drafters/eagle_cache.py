"""An EAGLE drafter's live cache of true entries (:class:`EagleState`) and the forward through
it.

After a step the accepted tokens' base features are paired with the tokens after them (the last
with the next root) and queued; :func:`catch_up` feeds them in one forward, written in place at
each row's own slots. Drafting then feeds tree nodes through :func:`cached_forward`, each fed
node seeing its row's entries and its fed ancestors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from treeopt.decoding.drafter import take_queued_row
from treeopt.drafters.eagle_layer import EagleNetwork


@dataclass(eq=False)
class EagleState:
    """The drafter's live cache ``[layers, 2, b, kvh, capacity, hd]`` of true entries (each
    row's ``lengths``, ``lens`` on the host; the last slot is scratch), and the entries still to
    feed: base features ``[b, P, d]`` and the tokens after them ``[b, P]``, ``count`` per row."""

    kv: torch.Tensor
    lengths: torch.Tensor
    lens: list[int]
    features: torch.Tensor
    tokens: torch.Tensor
    count: torch.Tensor

    def take_row(self, row: int, new: EagleState) -> None:
        """Row ``row`` becomes ``new``'s one row: its cache, length and queued entries (at most
        as many as this state queues per row: a primed new row queues one)."""
        take_queued_row(self, row, new, (self.kv, new.kv), ("features", "tokens"))


def catch_up(net: EagleNetwork, state: EagleState) -> torch.Tensor:
    """Feed the queued entries at each row's own slots; the output at each row's last."""
    counts = state.count.tolist()  # the one host read: the catch-up's width and lengths
    P = max(counts)
    steps = torch.arange(P, device=state.count.device)
    x = net.entries(state.tokens[:, :P], state.features[:, :P].to(net.fc.weight.dtype))
    visible = steps[None, :] <= steps[:, None]
    out = cached_forward(net, state, x, 0, visible, positions=state.lengths[:, None] + steps,
                         valid=steps[None] < state.count[:, None])
    rows = torch.arange(out.shape[0], device=out.device)
    g = out[rows, (state.count - 1).clamp_min(0)]  # a stopped row's is never used
    state.lengths = state.lengths + state.count
    state.lens = [n + c for n, c in zip(state.lens, counts, strict=True)]
    return g


def cached_forward(net: EagleNetwork, state: EagleState, x: torch.Tensor, offset: int,
                   visible: torch.Tensor, *, positions: torch.Tensor,
                   valid: torch.Tensor | None = None) -> torch.Tensor:
    """Entries ``x`` ``[b, m, d]`` written at slots ``lengths + offset + j`` of each row
    (``valid`` false: at the scratch slot); each sees its row's prefix and the block
    entries ``visible`` ``[m, block]`` (or ``[b, m, block]``, per row) marks (the block: the
    ``block`` slots from ``lengths``, ending with these)."""
    b, m, _ = x.shape
    kv = state.kv
    scratch = kv.shape[4] - 1
    block = visible.shape[-1]
    start = state.lengths[:, None] + offset + torch.arange(m, device=x.device)  # [b, m]
    slots = start if valid is None else torch.where(valid, start, scratch)
    width = max(state.lens) + block
    cols = torch.arange(width, device=x.device)
    prefix = cols[None, None, :] < state.lengths[:, None, None]  # [b, 1, width]
    rel = cols[None, :] - state.lengths[:, None] - (offset + m - block)  # [b, width]
    inside = (rel >= 0) & (rel < block)
    at = rel.clamp(0, block - 1)
    if visible.dim() == 2:  # one tree for every row
        in_block = visible[:, at].permute(1, 0, 2) & inside[:, None]
    else:  # [b, m, block]: each row's own (dynamic drafting)
        in_block = visible.gather(2, at[:, None].expand(b, m, -1)) & inside[:, None]
    mask = (prefix | in_block)[:, None]  # [b, 1, m, width]
    rows = torch.arange(b, device=x.device)[:, None]
    for i, layer in enumerate(net.layers):
        q, (k, v) = layer.qkv(x, positions)
        kv[i, 0][rows, :, slots] = k.transpose(1, 2)  # [b, m, kvh, hd]
        kv[i, 1][rows, :, slots] = v.transpose(1, 2)
        keys, values = kv[i, 0, :, :, :width], kv[i, 1, :, :, :width]
        att = F.scaled_dot_product_attention(q, layer.expand(keys), layer.expand(values),
                                             attn_mask=mask)
        x = layer.finish(x, att)
    return x
