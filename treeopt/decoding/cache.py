"""The base model's key/value cache: creation, random filling (for profiling), and compaction
to the accepted path. One place that knows how transformers stores a cache's tensors."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transformers import PreTrainedModel

Put = Callable[[torch.Tensor, torch.Tensor], None]


def new_cache(model: PreTrainedModel) -> Any:
    """An empty DynamicCache for ``model``."""
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older transformers
        return DynamicCache()


def random_cache(model: PreTrainedModel, *, batch: int, context: int) -> Any:
    """A cache holding ``context`` random keys and values per layer, for ``batch`` sequences
    (the latency of a step does not depend on the cached values)."""
    cfg = model.config
    cache = new_cache(model)
    p = next(model.parameters())
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    shape = (batch, heads, context, head_dim)  # [b, kv heads, s, head_dim]
    for layer in range(cfg.num_hidden_layers):
        cache.update(torch.randn(shape, dtype=p.dtype, device=p.device),
                     torch.randn(shape, dtype=p.dtype, device=p.device), layer)
    return cache


def cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor, Put]]:
    """(keys, values, setter) per filled layer, for transformers' layered and legacy caches."""
    items: list[tuple[torch.Tensor, torch.Tensor, Put]] = []
    if hasattr(cache, "layers"):
        for layer in cache.layers:
            if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
                continue

            def put(k: torch.Tensor, v: torch.Tensor, layer: Any = layer) -> None:
                layer.keys, layer.values = k, v

            items.append((layer.keys, layer.values, put))
        return items
    for i, (k, v) in enumerate(zip(cache.key_cache, cache.value_cache, strict=True)):

        def put_legacy(nk: torch.Tensor, nv: torch.Tensor, i: int = i) -> None:
            cache.key_cache[i], cache.value_cache[i] = nk, nv

        items.append((k, v, put_legacy))
    return items


def compact_cache(cache: Any, past: int, keep: torch.Tensor) -> None:
    """Keep the first ``past`` cached tokens and then tree tokens ``keep`` (indices in the tree)."""
    index = torch.cat([torch.arange(past, device=keep.device), past + keep])
    for keys, values, put in cache_tensors(cache):
        idx = index.to(keys.device)
        put(keys.index_select(-2, idx), values.index_select(-2, idx))
