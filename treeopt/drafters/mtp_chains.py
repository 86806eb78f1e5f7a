"""An MTP drafter's depths run through its modules in turn (depth k: module ``k mod n``), teacher
forced and live, on EAGLE's attention and cache (:mod:`~treeopt.drafters.eagle_chains`,
:mod:`~treeopt.drafters.eagle_cache`).

Each module has a cache of its own. It holds the true entries (every module catches up on the
accepted tokens) and the chain entries of the depths it ran: at depth k, chain t's query sees
module ``k mod n``'s true entries ``0 … t`` and its own entries at the depths ``1 … k`` that
module ran (the diagonal block of :func:`~treeopt.drafters.eagle_chains.chain_attention`).
With one module this is EAGLE's scheme exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from treeopt.decoding.token_order import top_candidates
from treeopt.drafters.eagle_cache import EagleState, cached_forward, catch_up
from treeopt.drafters.eagle_chains import chain_attention, true_pass
from treeopt.drafters.eagle_layer import KV, EagleNetwork

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan


def cyclic_chains(stages: Sequence[EagleNetwork], hidden: torch.Tensor, stream: torch.Tensor,
                  depths: int) -> list[torch.Tensor]:
    """Block outputs ``[b, n, d]`` of every depth 0 … depths-1 at every position t of the
    sequence (n = T-1-depths), depth k through ``stages[k mod len(stages)]``, teacher-forced
    exactly (module notes). Differentiable: training uses it too."""
    b, T = stream.shape
    n = T - 1 - depths
    positions = torch.arange(T, device=stream.device)[None].expand(b, T)
    passes = [true_pass(stage, hidden, stream) for stage in stages[: max(1, min(len(stages),
                                                                                 depths))]]
    x0, _, causal = passes[0]
    out = [x0[:, :n]]
    own: list[list[KV]] = [[] for _ in passes]  # per module: its chain entries' keys, values
    seen = causal[:n]  # query t sees true entries j ≤ t
    for k in range(1, depths):
        m = k % len(stages)
        stage, layer = stages[m], stages[m].layers[0]
        y = stage.entries(stream[:, 1 + k: 1 + k + n], out[-1])  # position t+k of chain t
        q, kv = layer.qkv(y, positions[:, k: k + n])
        own[m].append(kv)
        out.append(layer.finish(y, chain_attention(q, layer, passes[m][1][0], own[m], seen)))
    return out


def module_state(state: EagleState, module: int) -> EagleState:
    """``state`` with module ``module``'s cache alone (``kv`` is a view: writes go through)."""
    return replace(state, kv=state.kv[module: module + 1])


def cyclic_catch_up(stages: Sequence[EagleNetwork], state: EagleState) -> torch.Tensor:
    """Feed the queued entries through every module, each at its own cache; the first module's
    output at each row's last (:func:`~treeopt.drafters.eagle_cache.catch_up`)."""
    views = [module_state(state, m) for m in range(len(stages))]
    g = [catch_up(stage, view) for stage, view in zip(stages, views, strict=True)][0]
    state.lengths, state.lens = views[0].lengths, views[0].lens
    return g


def draft_cyclic(stages: Sequence[EagleNetwork], plan: TreePlan, root: torch.Tensor,
                 state: EagleState) -> torch.Tensor:
    """A live step: catch up, the root's candidates from depth 0, then one forward per depth
    that has children, the expanded parents at depth k fed through ``stages[k mod n]`` (each
    seeing its row's entries and its fed ancestors in that module's cache)."""
    n = len(stages)
    b, q = root.shape[0], plan.tree.num_tokens
    g_root = cyclic_catch_up(stages, state)  # [b, d]
    g = g_root.new_zeros(b, q, g_root.shape[-1])  # each token's block output
    g[:, 0] = g_root
    tokens = root.new_zeros(b, q)
    tokens[:, 0] = root
    if not plan.levels:  # the root alone: the queued entries fed, nothing drafted
        return tokens
    first = plan.levels[0]
    plan.fill(tokens, first.nodes,
              top_candidates(stages[0].logits(g_root), first.width)[:, first.ranks])
    fed = [0] * n  # parents fed through each module this step
    columns: list[list[int]] = [[] for _ in range(n)]  # each module's columns of parents_seen
    start = 0
    for lv in plan.levels[1:]:
        k = lv.depth - 1  # the parents' depth: module k mod n feeds them
        m, nodes = k % n, lv.prev[:, -1]
        columns[m] += range(start, start + nodes.shape[0])
        start += nodes.shape[0]
        stage = stages[m]
        x = stage.entries(tokens[:, nodes], g[:, plan.parent[nodes]])
        visible = lv.parents_seen[:, columns[m]]
        out = cached_forward(stage, module_state(state, m), x, fed[m], visible,
                             positions=state.lengths[:, None] - 1 + k)
        fed[m] += nodes.shape[0]
        g[:, nodes] = out
        cand = top_candidates(stage.logits(out), lv.width)  # [b, m, R]
        plan.fill(tokens, lv.nodes, cand[:, lv.row, lv.ranks])
    return tokens
