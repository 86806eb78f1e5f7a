"""Lossless sampling that is reproducible per position: the Gumbel-max trick with noise drawn from
a counter-based hash of (seed, stream, absolute position, token id).

A sampled token is ``argmax(logits / T + g)`` over the tokens top-k / top-p keep, where ``g`` are
standard Gumbel variables; that is an exact draw from the filtered softmax at temperature T. The
noise depends only on the row's stream key and the position being sampled, never on how many
tokens were verified before it, so a tree decoder that samples at every accepted node (sample-and-
match, :mod:`treeopt.decoding.accept`) emits exactly the tokens an autoregressive sampler with the
same seed emits, and losslessness is tested token for token, like greedy decoding.

The hash is integer arithmetic in torch (32-bit mixing held in int64, so nothing overflows), so
CPU and GPU draw the same noise without any host sync, and calibration on one device predicts
decoding on another.
"""

from __future__ import annotations

import functools

import torch

_MASK = 0xFFFFFFFF
_MULT = 0x45D9F3B  # a 32-bit mixing constant (x ^= x >> 16; x *= MULT, twice): well-spread bits


def _mix(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash of each value of an int64 tensor (values kept in [0, 2^32))."""
    x = x & _MASK
    x = ((x ^ (x >> 16)) * _MULT) & _MASK
    x = ((x ^ (x >> 16)) * _MULT) & _MASK
    return x ^ (x >> 16)


def stream_keys(seed: int, streams: torch.Tensor) -> torch.Tensor:
    """One key per row from the seed and the row's stream id (``[b]`` int64 → ``[b]``).

    >>> stream_keys(0, torch.tensor([0, 1])).tolist() != stream_keys(1, torch.tensor([0, 1])).tolist()
    True
    """
    return _mix(_mix(torch.full_like(streams, seed & _MASK)) ^ _mix(streams + 0x9E3779B9))


@functools.lru_cache(maxsize=8)
def _token_hashes(vocab: int, device: str) -> torch.Tensor:
    """Each token id's own hash, the same every step: computed once per vocabulary and device."""
    return _mix(torch.arange(vocab, device=device) + 0x7F4A7C15)


def gumbel_noise(keys: torch.Tensor, positions: torch.Tensor, vocab: int) -> torch.Tensor:
    """Standard Gumbel noise ``[b, m, V]`` (float64) for rows ``keys`` ``[b]`` at absolute
    ``positions`` ``[b, m]``: the same numbers wherever and however often they are drawn.

    >>> g = gumbel_noise(torch.tensor([7]), torch.tensor([[3, 3, 4]]), 5)
    >>> bool((g[0, 0] == g[0, 1]).all()), bool((g[0, 0] == g[0, 2]).all())
    (True, False)
    """
    ids = _token_hashes(vocab, str(keys.device))  # [V]
    at = _mix(keys[:, None] ^ _mix(positions + 0x632BE5AB))  # [b, m]
    bits = _mix(at[..., None] ^ ids)  # [b, m, V] in [0, 2^32)
    uniform = (bits.double() + 0.5) / 2.0**32  # in (0, 1)
    return -torch.log(-torch.log(uniform))


def filtered_logits(logits: torch.Tensor, *, temperature: float, top_k: int = 0,
                    top_p: float = 1.0) -> torch.Tensor:
    """``logits / T`` (float64) with the tokens top-k and top-p drop set to −inf.

    top-k keeps the k highest (0: all); top-p keeps the smallest set of highest-probability tokens
    whose mass reaches p (the token that crosses p included).

    >>> filtered_logits(torch.tensor([1.0, 3.0, 2.0]), temperature=1.0, top_k=2).tolist()
    [-inf, 3.0, 2.0]
    """
    z = logits.double() / temperature
    if 0 < top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p < 1.0:
        order = torch.sort(z, dim=-1, descending=True)
        probs = torch.softmax(order.values, dim=-1)
        before = probs.cumsum(-1) - probs  # mass of the tokens ranked above each
        drop = torch.zeros_like(z, dtype=torch.bool).scatter(-1, order.indices, before >= top_p)
        z = z.masked_fill(drop, float("-inf"))
    return z


def sample(logits: torch.Tensor, keys: torch.Tensor, positions: torch.Tensor, *,
           temperature: float, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The token sampled at each of ``positions`` ``[b, m]`` from ``logits`` ``[b, m, V]``:
    ``argmax(filtered logits + Gumbel noise)`` → int64 ``[b, m]``."""
    z = filtered_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p)
    return torch.argmax(z + gumbel_noise(keys, positions, z.shape[-1]), dim=-1)
