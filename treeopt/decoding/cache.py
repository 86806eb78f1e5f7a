"""The base model's key/value cache: :class:`SlotCache`, the preallocated batch cache the live
decoder writes in place, and transformers' DynamicCache for one-off forwards. One place that knows
how transformers stores a cache's tensors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from transformers import DynamicCache

if TYPE_CHECKING:
    from transformers import PreTrainedModel

def new_cache(model: PreTrainedModel) -> Any:
    """An empty DynamicCache for ``model``."""
    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older transformers
        return DynamicCache()


def cache_tensors(cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) per filled layer, for transformers' layered and legacy caches."""
    if hasattr(cache, "layers"):
        return [(layer.keys, layer.values) for layer in cache.layers
                if getattr(layer, "keys", None) is not None and layer.keys.numel() > 0]
    return list(zip(cache.key_cache, cache.value_cache, strict=True))


@dataclass(frozen=True)
class CacheShape:
    """What the model's own cache holds per token: ``kv_heads`` keys of ``key_dim`` and values
    of ``value_dim`` in each of ``layers`` layers (transformers' MLA: the compressed latent as
    the "keys" and the shared rotary key as the "values", one head each)."""

    layers: int
    kv_heads: int
    key_dim: int
    value_dim: int
    dtype: torch.dtype
    device: torch.device

    @property
    def widths(self) -> tuple[int, int] | None:
        """(key_dim, value_dim) where they differ (MLA), else None."""
        return (self.key_dim, self.value_dim) if self.key_dim != self.value_dim else None


def cache_shape(model: PreTrainedModel) -> CacheShape:
    """Read from the model's own cache after a one-token forward, not guessed from the config
    (what MLA caches differs from ``head_dim`` and between versions); layers whose shapes
    differ are refused."""
    from treeopt.errors import TreeoptError

    device = model.get_input_embeddings().weight.device
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=torch.ones(1, 1, dtype=torch.long, device=device),
              past_key_values=cache, use_cache=True)
    shapes = {(k.shape[1], k.shape[-1], v.shape[-1], k.dtype) for k, v in cache_tensors(cache)}
    if len(shapes) != 1:
        raise TreeoptError(f"{type(model).__name__}: its layers cache keys and values of "
                           f"different shapes ({sorted(s[:3] for s in shapes)}), which treeopt's "
                           f"batch cache does not hold")
    heads, key_dim, value_dim, dtype = shapes.pop()
    return CacheShape(len(cache_tensors(cache)), int(heads), int(key_dim), int(value_dim), dtype,
                      device)


class SlotCache(DynamicCache):
    """Keys and values of a batch of sequences in one preallocated buffer, written in place.

    ``kv`` is ``[layers, 2, batch, kv_heads, capacity, width]``, ``width`` the wider of the key
    and value widths (where they differ, as under MLA, each fills its first ``widths``). Row
    i's cached tokens are the
    slots ``[0, length_i)`` (the lengths are kept by the decoder, which masks the rest). A forward
    writes its q new tokens at ``[frontier, frontier + q)`` of every row and attends over
    ``[0, frontier + q)``; afterwards :meth:`move` copies each row's accepted tokens down to the
    end of its prefix. Nothing grows or is re-concatenated, and only accepted tokens move. The last
    slot is scratch: moves that pad a ragged batch write there.

    ``static``: every forward attends over the whole buffer (the mask hides what a row may not
    see) and writes at the slots held in the tensor ``slots``, so a step's shapes depend on the
    batch and q only — what CUDA graphs and ``torch.compile`` need.
    """

    def __init__(self, kv: torch.Tensor, *, static: bool = False,
                 widths: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.kv = kv
        self.widths = widths  # (key_dim, value_dim) where they differ, else None
        self.frontier = 0
        self.static = static
        self.slots = torch.zeros(0, dtype=torch.long, device=kv.device)  # static: written here

    @classmethod
    def allocate(cls, shape: CacheShape, *, batch: int, capacity: int,
                 static: bool = False) -> SlotCache:
        """An empty cache for ``batch`` sequences of up to ``capacity - 1`` tokens."""
        width = max(shape.key_dim, shape.value_dim)
        kv = torch.zeros(shape.layers, 2, batch, shape.kv_heads, capacity, width,
                         dtype=shape.dtype, device=shape.device)
        return cls(kv, static=static, widths=shape.widths)

    @classmethod
    def random(cls, shape: CacheShape, *, batch: int, context: int, extra: int) -> SlotCache:
        """A cache whose rows hold ``context`` random keys and values (the latency of a step does
        not depend on the cached values), with room for ``extra`` more tokens."""
        cache = cls.allocate(shape, batch=batch, capacity=context + extra + 1)
        cache.kv[:, :, :, :, :context].normal_()
        cache.frontier = context
        return cache

    @property
    def capacity(self) -> int:
        return int(self.kv.shape[4])

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``[b, kv_heads, q, head_dim]`` at the frontier; return keys and values up to it
        (static: at ``slots``, and every slot)."""
        keys, values = self.kv[layer_idx, 0], self.kv[layer_idx, 1]
        if self.widths is not None:  # MLA: keys and values of their own widths
            keys, values = keys[..., : self.widths[0]], values[..., : self.widths[1]]
        if self.static:
            keys.index_copy_(2, self.slots, key_states)
            values.index_copy_(2, self.slots, value_states)
            return keys, values
        end = self.frontier + key_states.shape[-2]
        keys[:, :, self.frontier:end] = key_states
        values[:, :, self.frontier:end] = value_states
        return keys[:, :, :end], values[:, :, :end]

    def get_seq_length(self, layer_idx: int | None = 0) -> int:
        return self.frontier

    def place(self, frontier: int, tokens: int) -> None:
        """Where the next forward writes its ``tokens``: ``[frontier, frontier + tokens)``."""
        self.frontier = frontier
        if self.static:
            if self.slots.shape[0] != tokens:
                self.slots = torch.empty(tokens, dtype=torch.long, device=self.kv.device)
            torch.arange(frontier, frontier + tokens, out=self.slots)

    def move(self, source: torch.Tensor, target: torch.Tensor) -> None:
        """Copy slots ``source`` ``[b, n]`` of each row to slots ``target`` ``[b, n]`` (every
        layer, keys and values at once; all sources are read before any target is written)."""
        rows = torch.arange(source.shape[0], device=source.device)[:, None]  # [b, 1]
        self.kv[:, :, rows, :, target] = self.kv[:, :, rows, :, source]
