"""Dynamic top-k growth of an EAGLE drafter's trees (:mod:`treeopt.dynamic`): live, one step's
tree grown level by level from its k best nodes (:func:`grow_dynamic`); teacher-forced, where
the true path stands in the candidate pool at every position of a sequence, one pass per level
over all positions (:func:`dynamic_ranks`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

from treeopt.decoding.dynamic_drafting import Pool, RowPlan, best, choose, scored_children
from treeopt.drafters.eagle_cache import EagleState, cached_forward, catch_up
from treeopt.drafters.eagle_chains import true_pass
from treeopt.drafters.eagle_layer import KV, DecoderLayer, EagleNetwork

if TYPE_CHECKING:
    from treeopt.model.dynamic_settings import DynamicSettings


def grow_dynamic(net: EagleNetwork, settings: DynamicSettings, root: torch.Tensor,
                 state: EagleState) -> tuple[torch.Tensor, RowPlan]:
    """A dynamic step: feed the queued true entries, draft the root's top-k, then ``steps − 1``
    times feed the level's k best nodes and draft each one's top-k; verify the best
    ``draft_tokens − 1``. Returns tree tokens ``[b, N]`` and the rows' trees."""
    b, k = root.shape[0], settings.topk
    g_root = catch_up(net, state)  # [b, d]
    tok, score = scored_children(net.logits(g_root), k)  # level 1: [b, k]
    ones = torch.ones_like(tok)
    pool = [(tok, score, -ones, ones)]
    front = torch.arange(k, device=root.device).expand(b, k)  # pool indices of the frontier
    parent_g = g_root[:, None].expand(b, k, g_root.shape[-1])
    seen = torch.eye(k, dtype=torch.bool, device=root.device).expand(b, k, k)
    fed, base = 0, k
    for depth in range(2, settings.steps + 1):
        out = cached_forward(net, state, net.entries(tok, parent_g), fed, seen,
                             positions=state.lengths[:, None] + depth - 2)  # [b, k, d]
        child, logp = scored_children(net.logits(out), k)  # [b, k, k]
        child, cum = child.flatten(1), (score[:, :, None] + logp).flatten(1)
        pool.append((child, cum, front.repeat_interleave(k, dim=1), ones.repeat(1, k) * depth))
        local = best(cum, k)  # the next frontier, [b, k]
        up = local // k  # its parents, among the nodes just fed
        tok, score, front = child.gather(1, local), cum.gather(1, local), base + local
        parent_g = out.gather(1, up[..., None].expand(-1, -1, out.shape[-1]))
        rows = seen.gather(1, up[..., None].expand(-1, -1, seen.shape[-1]))
        seen = torch.cat([rows, torch.eye(k, dtype=torch.bool, device=root.device)
                          .expand(b, k, k)], dim=-1)  # each sees its fed ancestors, itself
        fed, base = fed + k, base + k * k
    columns = [torch.cat(part, dim=1) for part in zip(*pool, strict=True)]
    return choose(Pool(*columns), root, settings.nodes)


def dynamic_ranks(net: EagleNetwork, hidden: torch.Tensor, stream: torch.Tensor, *, topk: int,
                  steps: int) -> torch.Tensor:
    """Dynamic drafting at every position t, teacher-forced on the true prefix, one pass per
    level over all positions and their k frontier nodes: where the true path ``stream[t+2 …]``
    stands in the candidate pool.

    Returns int16 ``[b, n, S, S]`` (n = T-1-S): entry ``[t, s-1, i-1]`` is how many pool
    candidates of a ``s``-step tree come before the true node at depth i in the verify
    order (best score first, ties to the earlier candidate), or -1 where the true node is
    not drafted (or i > s). A step with ``N`` draft tokens keeps the true node at depth i
    when that count is below N − 1.
    """
    b, T = stream.shape
    k, n = topk, T - 1 - steps
    if n <= 0:
        return torch.full((b, 0, steps, steps), -1, dtype=torch.int16, device=stream.device)
    x0, true_kv, causal = true_pass(net, hidden, stream)
    seen = causal[:n].repeat_interleave(k, dim=0)  # [n·k, T-1]: node (t, ·) sees j ≤ t
    truth = [stream[:, 1 + d: 1 + d + n] for d in range(1, steps + 1)]  # depth d's token
    tok, score = scored_children(net.logits(x0[:, :n]), k)  # level 1: [b, n, k]
    hit = tok == truth[0][..., None]
    present, local = hit.any(-1), hit.int().argmax(-1)
    levels, found = [score], [(present, local)]
    in_front, front_local = present, local  # level 1: every candidate is expanded
    parent_g = x0[:, :n, None].expand(b, n, k, x0.shape[-1])
    own: list[list[KV]] = [[] for _ in net.layers]
    ancestors: list[torch.Tensor] = []  # per fed level: each frontier node's ancestor there
    positions = torch.arange(n, device=stream.device).repeat_interleave(k)[None].expand(b, -1)
    for depth in range(2, steps + 1):
        y = net.entries(tok, parent_g).flatten(1, 2)  # [b, n·k, d]
        for i, layer in enumerate(net.layers):
            q, kv = layer.qkv(y, positions + depth - 1)
            own[i].append(kv)
            y = layer.finish(y, _tree_attention(q, layer, true_kv[i], own[i], ancestors,
                                                seen, k))
        out = y.view(b, n, k, -1)
        child, logp = scored_children(net.logits(out), k)  # [b, n, k, k]
        cum = (score[..., None] + logp).flatten(2)  # [b, n, k²]
        child = child.flatten(2)
        under = child.view(b, n, k, k).gather(
            2, front_local[..., None, None].expand(b, n, 1, k))[:, :, 0]  # true parent's
        hit = under == truth[depth - 1][..., None]
        present = in_front & hit.any(-1)
        local = front_local * k + hit.int().argmax(-1)
        levels.append(cum)
        found.append((present, local))
        nxt = best(cum.flatten(0, 1), k).view(b, n, k)  # the next frontier
        match = (nxt == local[..., None]) & present[..., None]
        in_front, front_local = match.any(-1), match.int().argmax(-1)
        up = nxt // k
        tok, score = child.gather(2, nxt), cum.gather(2, nxt)
        parent_g = out.gather(2, up[..., None].expand(-1, -1, -1, out.shape[-1]))
        ancestors = [a.gather(2, up) for a in ancestors] + [up]
    return _pool_ranks(levels, found)


def _tree_attention(q: torch.Tensor, layer: DecoderLayer, true_kv: KV, own: list[KV],
                    ancestors: list[torch.Tensor], seen: torch.Tensor, k: int) -> torch.Tensor:
    """Attention of frontier queries ``[b, h, n·k, hd]`` (k nodes per position t) over the true
    entries ``j ≤ t`` (``seen`` ``[n·k, T-1]``) and each node's own fed ancestors and itself:
    ``own`` holds every fed level's keys and values ``[b, kvh, n·k, hd]``, the last the
    queries' own; ``ancestors`` ``[b, n, k]`` per earlier level names each query's ancestor
    among that level's k nodes of the same position."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    b, h, m, hd = q.shape
    keys, values = layer.expand(true_kv[0]), layer.expand(true_kv[1])
    scores = [torch.matmul(q, keys.transpose(-1, -2)).masked_fill(~seen, float("-inf")) * scale]
    mine = []
    for j, (key, value) in enumerate(own):
        if j < len(ancestors):  # an ancestor's entry: gather it for every query
            at = ancestors[j].flatten(1)  # [b, n·k] local index among its position's k
            at = (torch.arange(m, device=q.device) // k * k)[None] + at
            key = key.gather(2, at[:, None, :, None].expand(-1, key.shape[1], -1, hd))
            value = value.gather(2, at[:, None, :, None].expand(-1, value.shape[1], -1, hd))
        key, value = layer.expand(key), layer.expand(value)
        scores.append((q * key).sum(-1, keepdim=True) * scale)
        mine.append(value)
    weights = torch.softmax(torch.cat(scores, dim=-1).float(), dim=-1).to(q.dtype)
    out = torch.matmul(weights[..., : keys.shape[2]], values)
    for j, value in enumerate(mine):
        out = out + weights[..., keys.shape[2] + j: keys.shape[2] + j + 1] * value
    return out


def _pool_ranks(levels: list[torch.Tensor], found: list[tuple[torch.Tensor, torch.Tensor]],
                ) -> torch.Tensor:
    """int16 ``[b, n, S, S]`` from each level's candidate scores ``[b, n, m]`` and, per depth,
    whether the true node was drafted and its index in its level: candidates ahead of it in a
    pool of the first s levels (:func:`dynamic_ranks`)."""
    S = len(levels)
    b, n = levels[0].shape[:2]
    out = torch.full((b, n, S, S), -1, dtype=torch.int32, device=levels[0].device)
    for i, (present, local) in enumerate(found):  # depth i + 1
        mine = levels[i].gather(2, local[..., None])  # [b, n, 1]
        ahead = torch.zeros(b, n, dtype=torch.int32, device=mine.device)
        for lvl, scores in enumerate(levels):
            count = (scores > mine).sum(-1)
            ties = scores == mine
            if lvl == i:  # same level: the earlier candidates
                ties = ties & (torch.arange(scores.shape[-1], device=mine.device) < local[..., None])
            if lvl <= i:
                count = count + ties.sum(-1)
            ahead = ahead + count
            if lvl >= i:
                out[:, :, lvl, i] = torch.where(present, ahead, -1)
    return out.clamp(max=torch.iinfo(torch.int16).max).to(torch.int16)
