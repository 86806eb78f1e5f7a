"""Acceptance rules, batched: which tree path each row's verify logits accept, and its next token.

- greedy: a node passes when its token equals the base model's best token at its parent
  (:func:`~treeopt.decoding.token_order.best_token`); lossless.
- sample (sample-and-match): at every node the base model's token is *sampled* from that node's
  logits (:func:`~treeopt.decoding.sampling.sample`, noise keyed by the row and the position) and
  a node passes when its token equals the sample at its parent; the sample at the last accepted
  node is the next token. Every emitted token is a draw from the base model's own conditional,
  and the same one an autoregressive sampler with the same seed draws: lossless, exactly.
- typical (Medusa): a node passes when its probability at temperature T exceeds
  ``min(ε, α·exp(−entropy))`` at its parent; the longest passing path wins, ties broken by
  log-likelihood; the next token is sampled. Not lossless by design.

Every row accepts the longest root-to-leaf prefix whose nodes all pass (the root always does).
One tree for every row (:func:`accept`, a :class:`~treeopt.decoding.plan.TreePlan`) or a tree
per row (:func:`accept_rows`, dynamic drafting's
:class:`~treeopt.decoding.dynamic_drafting.RowPlan`): the same rule, on the greedy or sampled tokens
of :func:`model_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.plan import TreePlan
from treeopt.decoding.sampling import sample
from treeopt.decoding.token_order import best_token
from treeopt.errors import TreeoptError

if TYPE_CHECKING:
    from treeopt.decoding.dynamic_drafting import RowPlan


@dataclass(frozen=True, eq=False)
class Verdict:
    """Per row: the accepted path's token indices (root first, ``[b, depth+1]``; only the first
    ``length`` are accepted), how many were accepted, and the base model's next token."""

    path: torch.Tensor  # [b, depth+1]
    length: torch.Tensor  # [b]
    next_root: torch.Tensor  # [b]


def model_tokens(logits: torch.Tensor, cfg: DecodeConfig, *,
                 positions: torch.Tensor | None = None, keys: torch.Tensor | None = None,
                 ) -> torch.Tensor:
    """The base model's token after every tree token ``[b, q]``, from the verify logits
    ``[b, q, V]``: its best token (mode ``greedy``) or its draw at the token's position + 1
    (mode ``sample``: ``positions`` ``[b, q]`` and the rows' ``keys`` ``[b]``). A node passes
    when its token equals this token at its parent.

    >>> model_tokens(torch.tensor([[[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]]]), DecodeConfig()).tolist()
    [[1, 0]]
    """
    if cfg.mode == "greedy":
        return best_token(logits)
    if cfg.mode != "sample":
        raise TreeoptError(f"mode {cfg.mode!r} accepts by probability, not by the model's token")
    if positions is None or keys is None:
        raise TreeoptError("mode 'sample' needs the tokens' positions and the rows' keys")
    return sample(logits, keys, positions + 1, temperature=cfg.temperature, top_k=cfg.top_k,
                  top_p=cfg.top_p)


def _verdict(path: torch.Tensor, length: torch.Tensor, chosen: torch.Tensor) -> Verdict:
    """The verdict on an accepted ``path`` of ``length`` tokens: the next root is the model's
    token ``chosen`` ``[b, q]`` at the path's last accepted token."""
    last = path.gather(1, (length - 1)[:, None])  # [b, 1]
    return Verdict(path, length, chosen.gather(1, last)[:, 0])


def accept(plan: TreePlan, tokens: torch.Tensor, logits: torch.Tensor, cfg: DecodeConfig,
           generator: torch.Generator | None, *, positions: torch.Tensor | None = None,
           keys: torch.Tensor | None = None) -> Verdict:
    """The verdict on tree tokens ``[b, q]`` from their verify logits ``[b, q, V]``.

    ``positions`` ``[b, q]`` (each token's absolute position) and ``keys`` ``[b]`` (each row's
    :func:`~treeopt.decoding.sampling.stream_keys`) are what mode ``sample`` draws with."""
    if cfg.mode in ("greedy", "sample"):
        best = model_tokens(logits, cfg, positions=positions, keys=keys).to(tokens.device)
        if plan.tree.size == 0:
            ones = torch.ones_like(best[:, 0])
            return Verdict(torch.zeros_like(best), ones, best[:, 0])
        ok = tokens[:, 1:] == best[:, plan.parent[1:]]  # [b, n]
        path, length = longest_path(plan, ok)
        return _verdict(path, length, best)
    probs = torch.softmax(logits.float() / cfg.temperature, dim=-1)  # [b, q, V]
    if plan.tree.size == 0:
        path = torch.zeros_like(tokens)
        length = torch.ones_like(tokens[:, 0])
    else:
        entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)  # [b, q]
        thresh = torch.clamp(cfg.alpha * torch.exp(-entropy), max=cfg.posterior_threshold)
        drafted = tokens[:, 1:]  # -1: no candidate (a lookup that ran out), never accepted
        p_tok = probs[:, plan.parent[1:]].gather(-1, drafted.clamp_min(0)[..., None])[..., 0]
        ok = (p_tok > thresh[:, plan.parent[1:]]) & (drafted >= 0)
        path, length = longest_path(plan, ok, score=torch.log(p_tok.clamp_min(1e-30)))
    last = path.gather(1, (length - 1)[:, None])[:, 0]  # [b]
    rows = torch.arange(tokens.shape[0], device=tokens.device)
    nxt = torch.multinomial(probs[rows, last], 1, generator=generator)[:, 0]
    return Verdict(path, length, nxt)


def longest_path(plan: TreePlan, ok: torch.Tensor, score: torch.Tensor | None = None,
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's longest passing root-to-node path ``[b, depth+1]`` and its length ``[b]``;
    ``ok`` ``[b, n]`` says which nodes pass; ``score`` ``[b, n]`` breaks ties between paths of
    equal length (typical acceptance: log-likelihood), else the first leaf in canonical order.

    >>> from treeopt.model.tree import Tree
    >>> from treeopt.decoding.plan import tree_plan
    >>> plan = tree_plan(Tree.from_choices([[0], [1], [0, 0]]), "cpu")
    >>> path, length = longest_path(plan, torch.tensor([[True, True, False], [False, True, True]]))
    >>> path.tolist(), length.tolist()
    ([[0, 2, 0], [0, 2, 0]], [2, 2])
    """
    b = ok.shape[0]
    ok = torch.cat([ok.new_ones(b, 1), ok], dim=1)  # [b, q]: the root always passes
    passed = (ok[:, plan.rows] & plan.rows_valid).long().cumprod(-1)  # [b, leaves, depth+1]
    lengths = passed.sum(-1)  # [b, leaves]
    if score is not None:
        score = torch.cat([score.new_zeros(b, 1), score], dim=1)[:, plan.rows]
        loglik = (score * passed).sum(-1)  # [b, leaves]
        best = torch.argmax(lengths.double() * 1e6 + loglik.double(), dim=-1)
    else:
        best = torch.argmax(lengths, dim=-1)  # [b]: the first longest leaf
    return plan.rows[best], lengths.gather(1, best[:, None])[:, 0]


def accept_rows(plan: RowPlan, tokens: torch.Tensor, logits: torch.Tensor, cfg: DecodeConfig, *,
                positions: torch.Tensor, keys: torch.Tensor) -> Verdict:
    """Greedy or sample-and-match acceptance on trees that differ from row to row (tokens
    ``[b, N]``, logits ``[b, N, V]``); a node's children carry distinct tokens, so at most one
    passes and the passing nodes form one path."""
    if cfg.mode not in ("greedy", "sample"):
        raise TreeoptError(f"dynamic trees accept greedily or by sampling, not {cfg.mode!r}")
    chosen = model_tokens(logits, cfg, positions=positions, keys=keys).to(tokens.device)
    ok = tokens == chosen.gather(1, plan.parent.clamp_min(0))  # [b, N]
    ok[:, 0] = True  # the root always passes
    path, length = deepest_path(plan, ok)
    return _verdict(path, length, chosen)


def deepest_path(plan: RowPlan, ok: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's path ``[b, S+1]`` (root first, 0 past its length) to its deepest token that
    passes with all its ancestors, and its length ``[b]``; ``ok`` ``[b, N]``: which pass."""
    up = plan.parent.clamp_min(0)  # [b, N]: the root is its own parent
    passed = ok
    for _ in range(len(plan.steps) - 1):
        passed = ok & passed.gather(1, up)
    reach = torch.where(passed, plan.offsets, -1)  # depth of every passing node
    deepest = reach.argmax(dim=1)  # [b]
    length = reach.gather(1, deepest[:, None])[:, 0] + 1
    chain = [deepest]
    for _ in range(len(plan.steps) - 1):
        chain.append(up.gather(1, chain[-1][:, None])[:, 0])
    chain_t = torch.stack(chain, dim=1)  # [b, S+1]: deepest, its parent, …
    back = (length[:, None] - 1 - plan.steps[None]).clamp_min(0)
    path = torch.where(plan.steps[None] < length[:, None], chain_t.gather(1, back), 0)
    return path, length
