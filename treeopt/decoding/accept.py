"""Acceptance rules: which tree path the base model's verify logits accept, and its next token.

- greedy: a node passes when its token equals the base model's argmax at its parent; lossless.
- typical (Medusa): a node passes when its probability at temperature T exceeds
  ``min(ε, α·exp(−entropy))`` at its parent; the longest passing path wins, ties broken by
  log-likelihood; the next token is sampled. Not lossless by design.
"""

from __future__ import annotations

import torch

from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.plan import TreePlan


def accept(plan: TreePlan, tokens: torch.Tensor, logits: torch.Tensor, cfg: DecodeConfig,
           generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Accepted token indices (root first) and the next root, from verify logits ``[n+1, V]``."""
    parent = plan.parent
    tok = tokens[0]
    if cfg.mode == "greedy":
        ok = tok[1:] == logits.argmax(-1)[parent[1:]]
        score = torch.zeros(plan.tree.num_tokens, device=logits.device)
    else:
        probs = torch.softmax(logits.float() / cfg.temperature, dim=-1)  # [n+1, V]
        entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)
        thresh = torch.clamp(cfg.alpha * torch.exp(-entropy), max=cfg.posterior_threshold)
        p_tok = probs[parent[1:], tok[1:]]
        ok = p_tok > thresh[parent[1:]]
        score = torch.cat([p_tok.new_zeros(1), torch.log(p_tok.clamp_min(1e-30))])
    ok = torch.cat([ok.new_ones(1), ok])  # the root is always accepted
    if plan.tree.size == 0:
        path = torch.zeros(1, dtype=torch.long, device=logits.device)
    else:
        path = best_path(plan.rows, ok, score, typical=cfg.mode == "typical")
    return path, choose(logits[path[-1]], cfg, generator)


def best_path(rows: torch.Tensor, ok: torch.Tensor, score: torch.Tensor, *, typical: bool,
              ) -> torch.Tensor:
    """The longest accepted root-to-node path (typical: ties by log-likelihood).

    ``rows`` ``[leaves, depth+1]``: the tree's retrieve indices; ``ok``, ``score`` ``[n+1]``.

    >>> rows = torch.tensor([[0, 1, 3], [0, 2, -1]])
    >>> best_path(rows, torch.tensor([True, True, True, False]), torch.zeros(4), typical=False)
    tensor([0, 1])
    """
    passed = torch.where(rows >= 0, ok[rows.clamp_min(0)], False).long().cumprod(-1)
    length = passed.sum(-1)  # [leaves]
    if typical:
        loglik = torch.where(passed.bool(), score[rows.clamp_min(0)], 0.0).sum(-1)
        best = int(torch.argmax(length.double() * 1e6 + loglik.double()))
    else:
        best = int(torch.argmax(length))
    return rows[best, : int(length[best])]


def choose(logits: torch.Tensor, cfg: DecodeConfig, generator: torch.Generator | None,
           ) -> torch.Tensor:
    """The base model's next token from logits ``[V]``: argmax, or a sample (typical mode)."""
    if cfg.mode == "greedy":
        return logits.argmax()
    probs = torch.softmax(logits.float() / cfg.temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[0]
