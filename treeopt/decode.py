"""Live decoding with a static tree on a Hugging Face causal LM and its draft heads (batch 1).

Each step drafts the tree's tokens from the heads (Medusa: one call at the last accepted position;
Hydra: one call per depth, fed the tokens on each path), verifies all of them in one forward
(:func:`~treeopt.tree_forward.tree_forward`), accepts the longest path whose tokens pass (greedy:
equal to the base model's argmax; typical: probability above min(ε, α·exp(−entropy))), compacts
the cache to that path and emits the accepted tokens plus the base model's next token. An empty
tree makes the same loop plain autoregressive decoding, the fair baseline.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from treeopt.decode_stats import DecodeResult, DecodeStats
from treeopt.errors import TreeoptError
from treeopt.heads import top_candidates
from treeopt.models import check_context, model_device
from treeopt.tree import Tree
from treeopt.tree_forward import (
    check_tree_support,
    compact_cache,
    forward_with_cache,
    new_cache,
    tree_forward,
)

MODES = ("greedy", "typical")


@dataclass(frozen=True)
class DecodeConfig:
    """Decoding options. ``posterior_alpha`` None means √ε, as in the Medusa paper."""

    max_new_tokens: int = 128
    mode: str = "greedy"
    temperature: float = 0.7
    posterior_threshold: float = 0.09
    posterior_alpha: float | None = None
    eos_token_id: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise TreeoptError(f"decode mode {self.mode!r} is unknown; expected one of {MODES}")
        if self.max_new_tokens < 1:
            raise TreeoptError(f"--max-new-tokens must be ≥ 1, got {self.max_new_tokens}")
        if self.mode == "typical" and self.temperature <= 0:
            raise TreeoptError("typical acceptance needs a temperature > 0")

    @property
    def alpha(self) -> float:
        a = self.posterior_alpha
        return math.sqrt(self.posterior_threshold) if a is None else a


@functools.lru_cache(maxsize=64)
def _plan(tree: Tree, device: str) -> dict[str, Any]:
    """Index tensors for drafting and acceptance, per depth, cached per tree and device."""
    def t(a: Any) -> torch.Tensor:
        return torch.tensor(np.asarray(a).tolist(), dtype=torch.long, device=device)

    paths_tok = np.zeros((tree.num_tokens, tree.depth + 1), dtype=np.int64)  # root…self
    for i, p in enumerate(tree.parents.tolist()):
        paths_tok[i + 1] = paths_tok[p + 1]
        paths_tok[i + 1, tree.depths[i]] = i + 1
    levels = []
    for d in range(1, tree.depth + 1):
        nodes = np.flatnonzero(tree.depths == d)
        parents, row = np.unique(tree.parents[nodes] + 1, return_inverse=True)
        levels.append({"depth": d, "nodes": t(nodes + 1), "row": t(row),
                       "ranks": t(tree.ranks[nodes]), "prev": t(paths_tok[parents, :d])})
    return {"levels": levels, "parent": t([-1, *(tree.parents + 1).tolist()]),
            "depths": t(tree.depths - 1), "ranks": t(tree.ranks),
            "rows": t(tree.retrieve_indices.reshape(-1, tree.depth + 1))}


def draft(heads: Any, tree: Tree, hidden: torch.Tensor, root: torch.Tensor) -> torch.Tensor:
    """Tree tokens ``[1, n+1]`` (root first) drafted from ``hidden`` ``[1, 1, d]`` at the root."""
    plan, width = _plan(tree, str(root.device)), tree.max_rank + 1
    tokens = root.new_zeros(1, tree.num_tokens)
    tokens[0, 0] = root
    if tree.size == 0:
        return tokens
    if heads.config.kind == "medusa":
        cand = top_candidates(heads(hidden)[:, 0, 0], width)  # [K, R]
        tokens[0, 1:] = cand[plan["depths"], plan["ranks"]]
        return tokens
    for lv in plan["levels"]:
        prev = tokens[0, lv["prev"]]  # [parents, depth]: root … parent
        logits = heads.head_logits(lv["depth"] - 1, hidden.expand(1, prev.shape[0], -1), prev[None])
        cand = top_candidates(logits[0], width)  # [parents, R]
        tokens[0, lv["nodes"]] = cand[lv["row"], lv["ranks"]]
    return tokens


def accept(tree: Tree, tokens: torch.Tensor, logits: torch.Tensor, cfg: DecodeConfig,
           generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Accepted token indices (root first) and the next root, from verify logits ``[n+1, V]``."""
    plan = _plan(tree, str(logits.device))
    parent = plan["parent"]
    tok = tokens[0]
    if cfg.mode == "greedy":
        ok = tok[1:] == logits.argmax(-1)[parent[1:]]
        score = torch.zeros(tree.num_tokens, device=logits.device)
    else:
        probs = torch.softmax(logits.float() / cfg.temperature, dim=-1)  # [n+1, V]
        entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)
        thresh = torch.clamp(cfg.alpha * torch.exp(-entropy), max=cfg.posterior_threshold)
        p_tok = probs[parent[1:], tok[1:]]
        ok = p_tok > thresh[parent[1:]]
        score = torch.cat([p_tok.new_zeros(1), torch.log(p_tok.clamp_min(1e-30))])
    ok = torch.cat([ok.new_ones(1), ok])  # the root is always accepted
    if tree.size == 0:
        path = torch.zeros(1, dtype=torch.long, device=logits.device)
    else:
        path = _best_path(plan["rows"], ok, score, typical=cfg.mode == "typical")
    return path, choose(logits[path[-1]], cfg, generator)


def _best_path(rows: torch.Tensor, ok: torch.Tensor, score: torch.Tensor, *, typical: bool,
               ) -> torch.Tensor:
    """The longest accepted root-to-node path (typical: ties by log-likelihood).

    ``rows`` ``[leaves, depth+1]``: the tree's retrieve indices; ``ok``, ``score`` ``[n+1]``.
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


def _sync(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def generate(model: Any, heads: Any, tree: Tree, prompt_ids: list[int], *,
             config: DecodeConfig = DecodeConfig()) -> DecodeResult:
    """Decode from ``prompt_ids`` with ``tree`` (an empty tree: autoregressive decoding)."""
    if tree.size and heads is None:
        raise TreeoptError("tree decoding needs draft heads")
    if heads is not None and tree.depth > heads.config.num_heads:
        raise TreeoptError(f"the tree has depth {tree.depth} but there are only "
                           f"{heads.config.num_heads} heads")
    if tree.size and tree.max_rank >= heads.config.vocab_size:
        raise TreeoptError(f"the tree uses rank {tree.max_rank}, beyond the vocabulary")
    if not prompt_ids:
        raise TreeoptError("the prompt is empty")
    check_context(model, len(prompt_ids) + config.max_new_tokens + tree.num_tokens,
                  what=f"a prompt of {len(prompt_ids)} tokens plus {config.max_new_tokens} new")
    if tree.size:
        check_tree_support(model)
    device = model_device(model)
    gen = torch.Generator(device=device).manual_seed(config.seed)
    with torch.inference_mode():
        return _loop(model, heads, tree, torch.tensor([prompt_ids], device=device), config, gen)


def _loop(model: Any, heads: Any, tree: Tree, prompt: torch.Tensor, cfg: DecodeConfig,
          gen: torch.Generator) -> DecodeResult:
    device = prompt.device
    start = _sync(device)
    cache, past = new_cache(model), prompt.shape[1]
    logits, hidden = forward_with_cache(model, prompt, cache=cache,
                                        position_ids=torch.arange(past, device=device)[None])
    h, pcache = _prefix(heads, hidden, None)
    root = choose(logits[0, -1], cfg, gen)
    out, lengths = [int(root)], []
    t_draft = t_verify = t_book = 0.0
    t0 = _sync(device)
    while len(out) < cfg.max_new_tokens and out[-1] != cfg.eos_token_id:
        tokens = draft(heads, tree, h, root.view(1)) if tree.size else root.view(1, 1)
        t1 = _sync(device)
        logits, hidden = tree_forward(model, tokens, tree, cache=cache, past=past)
        t2 = _sync(device)
        path, root = accept(tree, tokens, logits[0], cfg, gen)
        compact_cache(cache, past, path)
        past += len(path)
        h, pcache = _prefix(heads, hidden[:, path], pcache)
        out.extend([*tokens[0, path[1:]].tolist(), int(root)])
        lengths.append(len(path))
        t3 = _sync(device)
        t_draft, t_verify, t_book = t_draft + t1 - t0, t_verify + t2 - t1, t_book + t3 - t2
        t0 = t3
    new = _truncate(out, cfg)
    stats = DecodeStats(steps=len(lengths), tokens=len(new), accept_lengths=tuple(lengths),
                        seconds=t0 - start, draft_s=t_draft, verify_s=t_verify,
                        bookkeeping_s=t_book)
    return DecodeResult(tokens=tuple(new), stats=stats)


def _prefix(heads: Any, hidden: torch.Tensor, pcache: Any) -> tuple[torch.Tensor, Any]:
    """The hidden state heads read at the last accepted token ``[1, 1, d]`` (Hydra++: prefix)."""
    if heads is not None and heads.config.prefix_attention:
        hidden, pcache = heads.prefix(hidden, pcache)
    return hidden[:, -1:], pcache


def _truncate(out: list[int], cfg: DecodeConfig) -> list[int]:
    out = out[: cfg.max_new_tokens]
    if cfg.eos_token_id is not None and cfg.eos_token_id in out:
        out = out[: out.index(cfg.eos_token_id) + 1]
    return out


def autoregressive(model: Any, prompt_ids: list[int], *,
                   config: DecodeConfig = DecodeConfig()) -> DecodeResult:
    """Plain decoding through the same loop (an empty tree): the baseline for tokens/s."""
    return generate(model, None, Tree(()), prompt_ids, config=config)
