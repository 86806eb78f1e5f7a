"""EAGLE drafters (Li et al., 2024: EAGLE-1, and EAGLE-2, which drafts with the same network):
one decoder layer that reads the base model's features and predicts the next feature.

The network: ``fc([e(x_{t+1}); f_t])`` (the next token's embedding beside the feature at t,
``2d → d``), then ``num_layers`` Llama-style decoder layers (RoPE attention, SwiGLU MLP; the
first layer has no input norm, as in EAGLE), giving ``g_t``, the predicted feature at t+1; the
base model's LM head turns it into candidates for ``x_{t+2}``. Deeper, the drafter reads its
*own* predicted feature: the entry after ``g_t`` is ``fc([e(x_{t+2}); g_t])`` at position t+1.
Features are the base model's last hidden states (after its final norm), as the heads read.

Teacher forcing is exact (:meth:`EagleDrafter.rank_depths`): at depth k, position t's query is
the entry of its own chain at position t+k and sees the true entries ``0 … t`` and its chain's
predicted entries at depths 1 … k, exactly what it sees live. One pass per depth computes every
position at once: the keys of the true entries come from the depth-0 pass; the chain's own keys
are one per depth and position, so that block of the mask is diagonal and is computed as a
per-position dot product rather than a dense ``[n, n]`` block.

Live, the drafter keeps its own key/value cache of true entries (:class:`EagleState`): after a
step the accepted tokens' base features are paired with the tokens after them (the last with the
next root) and fed in one forward, written in place at each row's own slots; the tree is then
drafted level by level, each fed node seeing its row's entries and its fed ancestors.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.decoding.drafter import Drafter, feed_all_but_last, take_queued_row
from treeopt.decoding.dynamic_drafting import Pool, RowPlan, best, choose, scored_children
from treeopt.decoding.ranking import rank_of, top_candidates
from treeopt.drafters.config import HeadsConfig
from treeopt.drafters.heads import _projection, rank_table
from treeopt.drafters.kinds import KINDS
from treeopt.errors import TreeoptError

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan
    from treeopt.model.dynamic_settings import DynamicSettings

KV = tuple[torch.Tensor, torch.Tensor]


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding (the rotate-half form Llama uses) of ``x`` ``[b, h, m, hd]``
    at ``positions`` ``[b, m]``."""
    half = x.shape[-1] // 2
    angle = positions[:, None, :, None].float() * _frequencies(half, theta, str(x.device))
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


@functools.lru_cache(maxsize=16)
def _frequencies(half: int, theta: float, device: str) -> torch.Tensor:
    """RoPE's inverse frequencies ``[half]`` in float32, made once per shape and device."""
    return theta ** (-torch.arange(half, device=device, dtype=torch.float32) / half)


class DecoderLayer(nn.Module):
    """A Llama decoder layer whose keys and values are arguments, never state."""

    def __init__(self, cfg: HeadsConfig, *, first: bool, width: int = 1) -> None:
        """``first``: no input norm (EAGLE's first layer); ``width``: entries are ``width``
        hidden sizes wide (EAGLE-3's layer reads two)."""
        super().__init__()
        d, h, kvh = cfg.hidden_size, cfg.attention_heads, cfg.kv_heads or cfg.attention_heads
        self.d, self.heads, self.kv_heads, self.head_dim = d, h, kvh, d // h
        self.theta = cfg.rope_theta
        self.input_layernorm = None if first else nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        self.q_proj = nn.Linear(width * d, h * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width * d, kvh * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width * d, kvh * self.head_dim, bias=False)
        self.o_proj = nn.Linear(h * self.head_dim, d, bias=False)
        self.post_attention_layernorm = nn.RMSNorm(d, eps=cfg.rms_norm_eps)
        inner = cfg.intermediate_size or 2 * d
        self.gate_proj = nn.Linear(d, inner, bias=False)
        self.up_proj = nn.Linear(d, inner, bias=False)
        self.down_proj = nn.Linear(inner, d, bias=False)

    def normed(self, x: torch.Tensor) -> torch.Tensor:
        """What attention reads of entries ``x``."""
        return x if self.input_layernorm is None else self.input_layernorm(x)

    def qkv(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, KV]:
        """Queries ``[b, h, m, hd]`` and keys/values ``[b, kvh, m, hd]`` of entries ``x``."""
        b, m, _ = x.shape
        y = self.normed(x)
        q = self.q_proj(y).view(b, m, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(y).view(b, m, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(y).view(b, m, self.kv_heads, self.head_dim).transpose(1, 2)
        return rope(q, positions, self.theta), (rope(k, positions, self.theta), v)

    def residual(self, x: torch.Tensor) -> torch.Tensor:
        """What the attention output is added to."""
        return x

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """The layer's output from its input ``x`` and the attention output ``[b, h, m, hd]``."""
        b, _, m, _ = attended.shape
        x = self.residual(x) + self.o_proj(attended.transpose(1, 2).reshape(b, m, -1))
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))

    def expand(self, kv: torch.Tensor) -> torch.Tensor:
        """Grouped keys or values ``[b, kvh, …]`` repeated for every query head."""
        return kv.repeat_interleave(self.heads // self.kv_heads, dim=1)


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


class EagleDrafter(Drafter):
    """EAGLE-1/2's drafter: fc over [embedding; feature], decoder layers, the base LM head."""

    kind = KINDS["eagle"]

    def __init__(self, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
                 embeddings: nn.Module | None = None) -> None:
        super().__init__()
        if cfg.hidden_size % cfg.attention_heads or (
                cfg.kv_heads and cfg.attention_heads % cfg.kv_heads):
            raise TreeoptError(f"eagle config: hidden_size {cfg.hidden_size}, attention_heads "
                               f"{cfg.attention_heads} and kv_heads {cfg.kv_heads} do not divide")
        self.config = cfg
        d = cfg.hidden_size
        base = lm_head if lm_head is not None else _projection(cfg, None)
        self.base_lm_head = base.requires_grad_(False)  # frozen and never saved
        if embeddings is None:
            embeddings = nn.Embedding(cfg.vocab_size, d)
        self.base_embeddings = embeddings.requires_grad_(False)  # frozen and never saved
        self.fc = nn.Linear(2 * d, d, bias=cfg.bias)
        self.layers = nn.ModuleList(DecoderLayer(cfg, first=i == 0)
                                    for i in range(cfg.num_layers))

    @classmethod
    def build(cls, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
              embeddings: nn.Module | None = None) -> EagleDrafter:
        return cls(cfg, lm_head=lm_head, embeddings=embeddings)

    def logits(self, g: torch.Tensor) -> torch.Tensor:
        """Candidates' logits ``[..., V]`` from predicted features ``[..., d]``."""
        w = self.base_lm_head.weight
        return self.base_lm_head(g if g.dtype == w.dtype else g.to(w.dtype))

    def entries(self, tokens: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
        """Layer inputs ``fc([e(token); feature])`` ``[b, m, d]``."""
        emb = self.base_embeddings(tokens).to(features.dtype)
        return self.fc(torch.cat([emb, features], dim=-1))

    # -- teacher forcing -----------------------------------------------------------------------

    def _true_pass(self, hidden: torch.Tensor, stream: torch.Tensor,
                   ) -> tuple[torch.Tensor, list[KV], torch.Tensor]:
        """Depth 0: a causal pass over the true entries 0 … T-2; their outputs ``[b, T-1, d]``
        (the predicted feature after each prefix), every layer's keys and values, the mask."""
        b, T = stream.shape
        positions = torch.arange(T - 1, device=stream.device)[None].expand(b, T - 1)
        x = self.entries(stream[:, 1:], hidden[:, :-1])
        true_kv: list[KV] = []
        causal = torch.ones(T - 1, T - 1, dtype=torch.bool, device=stream.device).tril()
        for layer in self.layers:
            q, kv = layer.qkv(x, positions)
            true_kv.append(kv)
            att = F.scaled_dot_product_attention(q, layer.expand(kv[0]), layer.expand(kv[1]),
                                                 attn_mask=causal)
            x = layer.finish(x, att)
        return x, true_kv, causal

    def chains(self, hidden: torch.Tensor, stream: torch.Tensor, depths: int,
               ) -> list[torch.Tensor]:
        """Predicted features ``[b, n, d]`` of every depth 0 … depths-1 at every position t of
        the sequence (n = T-1-depths), teacher-forced exactly (module notes). Differentiable:
        training uses it too."""
        b, T = stream.shape
        n = T - 1 - depths
        positions = torch.arange(T, device=stream.device)[None].expand(b, T)
        x, true_kv, causal = self._true_pass(hidden, stream)
        out = [x[:, :n]]
        chain_kv: list[list[KV]] = [[] for _ in self.layers]
        seen = causal[:n]  # query t sees true entries j ≤ t
        for k in range(1, depths):
            y = self.entries(stream[:, 1 + k: 1 + k + n], out[-1])  # position t+k of chain t
            for i, layer in enumerate(self.layers):
                q, kv = layer.qkv(y, positions[:, k: k + n])
                chain_kv[i].append(kv)
                att = _chain_attention(q, layer, true_kv[i], chain_kv[i], seen)
                y = layer.finish(y, att)
            out.append(y)
        return out

    def rank_dynamic(self, hidden: torch.Tensor, stream: torch.Tensor, *, topk: int,
                     steps: int) -> torch.Tensor:
        """Dynamic drafting (:mod:`treeopt.dynamic`) at every position t, teacher-forced on the
        true prefix, one pass per level over all positions and their k frontier nodes: where
        the true path ``stream[t+2 …]`` stands in the candidate pool.

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
        x0, true_kv, causal = self._true_pass(hidden, stream)
        seen = causal[:n].repeat_interleave(k, dim=0)  # [n·k, T-1]: node (t, ·) sees j ≤ t
        truth = [stream[:, 1 + d: 1 + d + n] for d in range(1, steps + 1)]  # depth d's token
        tok, score = scored_children(self.logits(x0[:, :n]), k)  # level 1: [b, n, k]
        hit = tok == truth[0][..., None]
        present, local = hit.any(-1), hit.int().argmax(-1)
        levels, found = [score], [(present, local)]
        in_front, front_local = present, local  # level 1: every candidate is expanded
        parent_g = x0[:, :n, None].expand(b, n, k, x0.shape[-1])
        own: list[list[KV]] = [[] for _ in self.layers]
        ancestors: list[torch.Tensor] = []  # per fed level: each frontier node's ancestor there
        positions = torch.arange(n, device=stream.device).repeat_interleave(k)[None].expand(b, -1)
        for depth in range(2, steps + 1):
            y = self.entries(tok, parent_g).flatten(1, 2)  # [b, n·k, d]
            for i, layer in enumerate(self.layers):
                q, kv = layer.qkv(y, positions + depth - 1)
                own[i].append(kv)
                y = layer.finish(y, _tree_attention(q, layer, true_kv[i], own[i], ancestors,
                                                    seen, k))
            out = y.view(b, n, k, -1)
            child, logp = scored_children(self.logits(out), k)  # [b, n, k, k]
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

    def rank_depths(self, hidden: torch.Tensor, stream: torch.Tensor, *, top_k: int,
                    ) -> torch.Tensor:
        """Depth k at t: the rank of ``stream[t+2+k]`` under the chain's k-th predicted feature."""
        K = self.config.num_heads
        b, T = stream.shape
        n = T - 1 - K
        if n <= 0:
            return torch.empty(b, 0, K, dtype=torch.int16, device=stream.device)
        return rank_table((self.ranks_of(g, stream[:, 2 + k: 2 + k + n])
                           for k, g in enumerate(self.chains(hidden, stream, K))), top_k=top_k)

    def ranks_of(self, g: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The rank of each ``target`` token among the candidates of features ``g``
        (-1: a token the drafter cannot propose)."""
        return rank_of(self.logits(g), target)

    def candidates(self, g: torch.Tensor, k: int) -> torch.Tensor:
        """The ``k`` best candidate tokens ``[..., k]`` (base vocabulary ids) of features ``g``."""
        return top_candidates(self.logits(g), k)

    def distill_terms(self, hidden: torch.Tensor, ids: torch.Tensor, teacher: torch.Tensor,
                      ) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """EAGLE's loss at every depth of the teacher-forced chains: the predicted feature's
        smooth-L1 distance to the true one plus 0.1 × the soft cross-entropy of its tokens
        (the EAGLE paper's weighting)."""
        K = self.config.num_heads
        n = ids.shape[1] - 1 - K
        terms = []
        for k, g in enumerate(self.chains(hidden, ids, K)):
            logits = self.logits(g).float()
            target = teacher[:, 1 + k: 1 + k + n]
            cls = -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()
            reg = F.smooth_l1_loss(g.float(), hidden[:, 1 + k: 1 + k + n].float())
            terms.append((reg + 0.1 * cls, logits, target))
        return terms

    # -- live ----------------------------------------------------------------------------------

    def start(self, *, batch: int, capacity: int) -> EagleState:
        p = self.fc.weight
        first = self.layers[0]
        kv = torch.zeros(len(self.layers), 2, batch, first.kv_heads, capacity, first.head_dim,
                         dtype=p.dtype, device=p.device)
        zeros = torch.zeros(batch, dtype=torch.long, device=p.device)
        return EagleState(kv, zeros, [0] * batch, p.new_zeros(batch, 1, self.config.hidden_size),
                          zeros[:, None], zeros)

    def advance(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                count: torch.Tensor, next_root: torch.Tensor, state: EagleState,
                ) -> tuple[torch.Tensor, EagleState]:
        """Queue the accepted tokens' features, each beside the token after it (the last beside
        the next root)."""
        rows = torch.arange(hidden.shape[0], device=hidden.device)[:, None]
        after = torch.cat([tokens.gather(1, index)[:, 1:], next_root[:, None]], dim=1)
        after.scatter_(1, (count - 1).clamp_min(0)[:, None], next_root[:, None])
        state.features, state.tokens, state.count = hidden[rows, index], after, count  # a
        # stopped row (count 0) queues nothing: its cache stays put while the others go on
        return hidden[:, :1], state

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: EagleState | None = None) -> torch.Tensor:
        """Feed the queued true entries, then one forward per depth that has children."""
        if state is None:
            raise TreeoptError("an EAGLE drafter drafts from its live state (start, then advance)")
        b, q = root.shape[0], plan.tree.num_tokens
        g_root = self._catch_up(state)  # [b, d]
        g = g_root.new_zeros(b, q, g_root.shape[-1])  # the predicted feature of each token
        g[:, 0] = g_root
        tokens = root.new_zeros(b, q)
        tokens[:, 0] = root
        if not plan.levels:  # the root alone: the queued entries fed, nothing drafted
            return tokens
        first = plan.levels[0]
        plan.fill(tokens, first.nodes, self.candidates(g_root, first.width)[:, first.ranks])
        fed = 0
        for lv in plan.levels[1:]:
            nodes, visible = lv.prev[:, -1], lv.parents_seen
            x = self.entries(tokens[:, nodes], g[:, plan.parent[nodes]])
            out = self._forward(state, x, fed, visible,
                                positions=state.lengths[:, None] - 1 + lv.depth - 1)
            g[:, nodes] = out
            cand = self.candidates(out, lv.width)  # [b, m, R]
            plan.fill(tokens, lv.nodes, cand[:, lv.row, lv.ranks])
            fed += nodes.shape[0]
        return tokens

    def draft_dynamic(self, settings: DynamicSettings, hidden: torch.Tensor, root: torch.Tensor,
                      state: EagleState | None = None) -> tuple[torch.Tensor, RowPlan]:
        """A dynamic step (:mod:`treeopt.dynamic`): feed the queued true entries, draft the
        root's top-k, then ``steps − 1`` times feed the level's k best nodes and draft each one's
        top-k; verify the best ``draft_tokens − 1``. Returns tree tokens ``[b, N]`` and the
        rows' trees."""
        if state is None:
            raise TreeoptError("an EAGLE drafter drafts from its live state (start, then advance)")
        b, k = root.shape[0], settings.topk
        g_root = self._catch_up(state)  # [b, d]
        tok, score = scored_children(self.logits(g_root), k)  # level 1: [b, k]
        ones = torch.ones_like(tok)
        pool = [(tok, score, -ones, ones)]
        front = torch.arange(k, device=root.device).expand(b, k)  # pool indices of the frontier
        parent_g = g_root[:, None].expand(b, k, g_root.shape[-1])
        seen = torch.eye(k, dtype=torch.bool, device=root.device).expand(b, k, k)
        fed, base = 0, k
        for depth in range(2, settings.steps + 1):
            out = self._forward(state, self.entries(tok, parent_g), fed, seen,
                                positions=state.lengths[:, None] + depth - 2)  # [b, k, d]
            child, logp = scored_children(self.logits(out), k)  # [b, k, k]
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

    def prime(self, state: EagleState) -> None:
        """Feed every row's queued entries but its last, which stays queued for the next step."""
        feed_all_but_last(state, self._catch_up, ("features", "tokens"))

    def _catch_up(self, state: EagleState) -> torch.Tensor:
        """Feed the queued entries at each row's own slots; the output at each row's last."""
        counts = state.count.tolist()  # the one host read: the catch-up's width and lengths
        P = max(counts)
        steps = torch.arange(P, device=state.count.device)
        x = self.entries(state.tokens[:, :P], state.features[:, :P].to(self.fc.weight.dtype))
        visible = steps[None, :] <= steps[:, None]
        out = self._forward(state, x, 0, visible, positions=state.lengths[:, None] + steps,
                            valid=steps[None] < state.count[:, None])
        rows = torch.arange(out.shape[0], device=out.device)
        g = out[rows, (state.count - 1).clamp_min(0)]  # a stopped row's is never used
        state.lengths = state.lengths + state.count
        state.lens = [n + c for n, c in zip(state.lens, counts, strict=True)]
        return g

    def _forward(self, state: EagleState, x: torch.Tensor, offset: int, visible: torch.Tensor,
                 *, positions: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Entries ``x`` ``[b, m, d]`` written at slots ``lengths + offset + j`` of each row
        (``valid`` false: at the scratch slot); each sees its row's prefix and the block
        entries ``visible`` ``[m, block]`` (or ``[b, m, block]``, per row) marks (the block: the ``block`` slots from
        ``lengths``, ending with these)."""
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
        for i, layer in enumerate(self.layers):
            q, (k, v) = layer.qkv(x, positions)
            kv[i, 0][rows, :, slots] = k.transpose(1, 2)  # [b, m, kvh, hd]
            kv[i, 1][rows, :, slots] = v.transpose(1, 2)
            keys, values = kv[i, 0, :, :, :width], kv[i, 1, :, :, :width]
            att = F.scaled_dot_product_attention(q, layer.expand(keys), layer.expand(values),
                                                 attn_mask=mask)
            x = layer.finish(x, att)
        return x


def _chain_attention(q: torch.Tensor, layer: DecoderLayer, true_kv: KV, chain: list[KV],
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
    pool of the first s levels (:meth:`EagleDrafter.rank_dynamic`)."""
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
