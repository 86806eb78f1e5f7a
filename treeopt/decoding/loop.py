"""Live decoding with a static tree on a Hugging Face causal LM and its draft heads (batch 1).

Each step drafts the tree's tokens (:meth:`~treeopt.drafters.base.DraftHeads.draft`), verifies
all of them in one forward (:func:`~treeopt.decoding.tree_forward.tree_forward`), accepts the
longest path whose tokens pass (:mod:`treeopt.decoding.accept`), compacts the cache to that path
and emits the accepted tokens plus the base model's next token. An empty tree makes the same loop
plain autoregressive decoding, the fair baseline.

The loop keeps no timers: with ``profile=True`` it synchronises around each phase and reports
where a step's time goes (which itself costs time, so tokens/s come from unprofiled runs).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from treeopt.decoding.accept import accept, choose
from treeopt.decoding.cache import compact_cache, new_cache
from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.models import check_context, model_device
from treeopt.decoding.plan import tree_plan
from treeopt.decoding.stats import DecodeResult, DecodeStats, StepSplit
from treeopt.decoding.tree_forward import check_tree_support, forward_with_cache, tree_forward
from treeopt.drafters.base import DraftHeads, PrefixCache
from treeopt.errors import TreeoptError
from treeopt.tree import Tree

__all__ = ["DecodeConfig", "autoregressive", "generate"]


def check_tree_for_heads(tree: Tree, heads: DraftHeads | None) -> None:
    """Raise unless ``heads`` can draft ``tree`` (an empty tree needs no heads)."""
    if tree.size and heads is None:
        raise TreeoptError("tree decoding needs draft heads")
    if heads is not None and tree.depth > heads.config.num_heads:
        raise TreeoptError(f"the tree has depth {tree.depth} but there are only "
                           f"{heads.config.num_heads} heads")
    if heads is not None and tree.size and tree.max_rank >= heads.config.vocab_size:
        raise TreeoptError(f"the tree uses rank {tree.max_rank}, beyond the vocabulary")


def generate(model: torch.nn.Module, heads: DraftHeads | None, tree: Tree,
             prompt_ids: Sequence[int], *, config: DecodeConfig | None = None,
             profile: bool = False) -> DecodeResult:
    """Decode from ``prompt_ids`` with ``tree`` (an empty tree: autoregressive decoding)."""
    config = config or DecodeConfig()
    check_tree_for_heads(tree, heads)
    if not prompt_ids:
        raise TreeoptError("the prompt is empty")
    check_context(model, len(prompt_ids) + config.max_new_tokens + tree.num_tokens,
                  what=f"a prompt of {len(prompt_ids)} tokens plus {config.max_new_tokens} new")
    if tree.size:
        check_tree_support(model)
    device = model_device(model)
    gen = torch.Generator(device=device).manual_seed(config.seed)
    with torch.inference_mode():
        return _loop(model, heads, tree, torch.tensor([list(prompt_ids)], device=device), config,
                     gen, profile)


def autoregressive(model: torch.nn.Module, prompt_ids: Sequence[int], *,
                   config: DecodeConfig | None = None, profile: bool = False) -> DecodeResult:
    """Plain decoding through the same loop (an empty tree): the baseline for tokens/s."""
    return generate(model, None, Tree(()), prompt_ids, config=config, profile=profile)


class _Clock:
    """Phase times when profiling (a synchronised clock read at each phase boundary)."""

    def __init__(self, device: torch.device, on: bool) -> None:
        self.device, self.on = device, on
        self.totals = [0.0, 0.0, 0.0]
        self.last = self.now()

    def now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def lap(self, phase: int) -> None:
        if self.on:
            t = self.now()
            self.totals[phase] += t - self.last
            self.last = t


def _loop(model: torch.nn.Module, heads: DraftHeads | None, tree: Tree, prompt: torch.Tensor,
          cfg: DecodeConfig, gen: torch.Generator, profile: bool) -> DecodeResult:
    device = prompt.device
    plan = tree_plan(tree, str(device))
    clock = _Clock(device, profile)
    start = clock.now()
    cache, past = new_cache(model), prompt.shape[1]
    logits, hidden = forward_with_cache(model, prompt, cache=cache,
                                        position_ids=torch.arange(past, device=device)[None])
    h, pcache = _features(heads, hidden, None)
    root = choose(logits[0, -1], cfg, gen)
    out, lengths = [int(root)], []
    clock.last = clock.now() if profile else clock.last
    while len(out) < cfg.max_new_tokens and out[-1] != cfg.eos_token_id:
        tokens = heads.draft(plan, h, root.view(1)) if heads is not None and tree.size \
            else root.view(1, 1)
        clock.lap(0)
        logits, hidden = tree_forward(model, tokens, tree, cache=cache, past=past)
        clock.lap(1)
        path, root = accept(plan, tokens, logits[0], cfg, gen)
        compact_cache(cache, past, path)
        past += len(path)
        h, pcache = _features(heads, hidden[:, path], pcache)
        out.extend([*tokens[0, path[1:]].tolist(), int(root)])
        lengths.append(len(path))
        clock.lap(2)
    seconds = clock.now() - start
    new = _truncate(out, cfg)
    split = StepSplit(*clock.totals) if profile else None
    stats = DecodeStats(tokens=len(new), accept_lengths=tuple(lengths), seconds=seconds,
                        split=split)
    return DecodeResult(tokens=tuple(new), stats=stats)


def _features(heads: DraftHeads | None, hidden: torch.Tensor, pcache: PrefixCache,
              ) -> tuple[torch.Tensor, PrefixCache]:
    """What the heads read at the last accepted token ``[1, 1, d]`` (Hydra++: its prefix)."""
    if heads is not None:
        hidden, pcache = heads.features(hidden, pcache)
    return hidden[:, -1:], pcache


def _truncate(out: list[int], cfg: DecodeConfig) -> list[int]:
    out = out[: cfg.max_new_tokens]
    if cfg.eos_token_id is not None and cfg.eos_token_id in out:
        out = out[: out.index(cfg.eos_token_id) + 1]
    return out
