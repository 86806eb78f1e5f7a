"""Draft heads over a frozen base model: Medusa (independent) and Hydra (sequentially dependent).

Both kinds read the base model's last hidden state ``h_t`` (after the final norm) and end in a
vocabulary projection that is either a per-head copy of the base LM head or the base LM head
itself (``share_lm_head``, frozen). Untrained heads equal the LM head: every block starts at zero.

- Medusa head k: ``h → (h + SiLU(W h)) × num_layers → vocab``; ``heads(hidden)`` returns
  ``[K, b, t, V]``.
- Hydra head k: ``z = h + SiLU(W_in [h; e(x_{t+1}); …; e(x_{t+1+k})])``, then ``num_layers - 1``
  residual blocks, then the vocabulary projection; ``heads.head_logits(k, hidden, prev_tokens)``.
  Hydra++ prefix attention (``prefix_attention``): one extra causal attention block over the base
  hidden states whose output replaces ``h_t`` (:meth:`HydraHeads.prefix`).

Tokens ranked equal are ordered by token id (:func:`rank_of`, :func:`top_candidates`), the same
rule in calibration and in decoding.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from treeopt.errors import TreeoptError

KINDS = ("medusa", "hydra")


@dataclass(frozen=True)
class HeadsConfig:
    """Shape and options of a set of draft heads.

    >>> HeadsConfig(kind="hydra", num_heads=3, hidden_size=64, vocab_size=128).num_layers
    1
    """

    kind: str
    num_heads: int
    hidden_size: int
    vocab_size: int
    num_layers: int = 1
    share_lm_head: bool = False
    prefix_attention: bool = False
    attention_heads: int = 4

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TreeoptError(f"head kind {self.kind!r} is unknown; expected one of {list(KINDS)}")
        for name in ("num_heads", "hidden_size", "vocab_size"):
            if int(getattr(self, name)) < 1:
                raise TreeoptError(f"heads config: {name} must be ≥ 1, got {getattr(self, name)}")
        if self.num_layers < (1 if self.kind == "hydra" else 0):
            raise TreeoptError(f"heads config: num_layers {self.num_layers} is too small")
        if self.prefix_attention and self.kind != "hydra":
            raise TreeoptError("heads config: prefix_attention applies to Hydra heads only")
        if self.prefix_attention and self.hidden_size % self.attention_heads:
            raise TreeoptError(
                f"heads config: hidden_size {self.hidden_size} is not divisible by "
                f"attention_heads {self.attention_heads}"
            )

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class ResBlock(nn.Module):
    """``x + SiLU(W x + b)``, zero-initialised (Medusa's block)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.silu(self.linear(x))


def _projection(cfg: HeadsConfig, lm_head: nn.Module | None) -> nn.Linear:
    proj = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
    if lm_head is not None:
        proj.weight.data.copy_(lm_head.weight.data)
    return proj


class _Heads(nn.Module):
    """Shared plumbing: the vocabulary projection of each head (own or the shared LM head)."""

    def __init__(self, cfg: HeadsConfig, lm_head: nn.Module | None) -> None:
        super().__init__()
        self.config = cfg
        if cfg.share_lm_head:
            base = lm_head if lm_head is not None else _projection(cfg, None)
            base.requires_grad_(False)
            self.base_lm_head = base  # frozen and never saved (see heads_io)
            self.proj = None
        else:
            self.base_lm_head = None
            self.proj = nn.ModuleList(_projection(cfg, lm_head) for _ in range(cfg.num_heads))

    def project(self, k: int, z: torch.Tensor) -> torch.Tensor:
        """Vocabulary logits of head k from its final hidden ``z`` ``[..., d]`` → ``[..., V]``."""
        proj = self.base_lm_head if self.proj is None else self.proj[k]
        return proj(z.to(proj.weight.dtype))


class MedusaHeads(_Heads):
    """K independent heads, each fed ``h_t`` only."""

    def __init__(self, cfg: HeadsConfig, *, lm_head: nn.Module | None = None) -> None:
        super().__init__(cfg, lm_head)
        self.blocks = nn.ModuleList(
            nn.Sequential(*(ResBlock(cfg.hidden_size) for _ in range(cfg.num_layers)))
            for _ in range(cfg.num_heads)
        )

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of every head: hidden ``[b, t, d]`` → ``[K, b, t, V]``."""
        return torch.stack([self.head_logits(k, hidden) for k in range(self.config.num_heads)])

    def head_logits(self, k: int, hidden: torch.Tensor, prev_tokens: torch.Tensor | None = None,
                    ) -> torch.Tensor:
        """Logits of head k: ``[b, t, d]`` → ``[b, t, V]`` (``prev_tokens`` is ignored)."""
        return self.project(k, self.blocks[k](hidden))


class PrefixAttention(nn.Module):
    """Hydra++'s extra decoder layer: pre-norm causal self-attention and MLP over base hiddens.

    It has no position encoding of its own (the base hiddens carry position); its key/value
    cache is an argument and a return value, never state.
    """

    def __init__(self, hidden_size: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.norm1 = nn.RMSNorm(hidden_size, eps=1e-6)
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size, bias=False)
        self.out = nn.Linear(hidden_size, hidden_size, bias=False)
        self.norm2 = nn.RMSNorm(hidden_size, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, 2 * hidden_size), nn.SiLU(),
                                 nn.Linear(2 * hidden_size, hidden_size))
        for lin in (self.out, self.mlp[2]):  # start as the identity
            nn.init.zeros_(lin.weight)
        nn.init.zeros_(self.mlp[2].bias)

    def forward(self, x: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None,
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``x`` ``[b, t, d]`` follows the cached ``[b, heads, past, d/heads]`` keys and values."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)
        if cache is not None:
            k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
        past = k.shape[2] - t
        visible = torch.ones(t, past + t, dtype=torch.bool, device=x.device).tril(past)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)  # [b, heads, t, d/heads]
        x = x + self.out(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.norm2(x)), (k, v)


class HydraHeads(_Heads):
    """K sequentially dependent heads: head k reads ``h_t`` and the k+1 tokens on its path."""

    def __init__(self, cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
                 embeddings: nn.Module | None = None) -> None:
        super().__init__(cfg, lm_head)
        d = cfg.hidden_size
        if embeddings is None:
            embeddings = nn.Embedding(cfg.vocab_size, d)
        embeddings.requires_grad_(False)
        self.base_embeddings = embeddings  # frozen and never saved (see heads_io)
        self.inputs = nn.ModuleList(nn.Linear(d * (k + 2), d) for k in range(cfg.num_heads))
        for lin in self.inputs:
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)
        self.blocks = nn.ModuleList(
            nn.Sequential(*(ResBlock(d) for _ in range(cfg.num_layers - 1)))
            for _ in range(cfg.num_heads)
        )
        self.prefix_layer = (PrefixAttention(d, cfg.attention_heads)
                             if cfg.prefix_attention else None)

    def prefix(self, hidden: torch.Tensor, cache: tuple[torch.Tensor, torch.Tensor] | None = None,
               ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Hydra++: hiddens ``[b, t, d]`` through the prefix layer (identity when it is off)."""
        if self.prefix_layer is None:
            return hidden, None
        return self.prefix_layer(hidden, cache)

    def head_logits(self, k: int, hidden: torch.Tensor, prev_tokens: torch.Tensor) -> torch.Tensor:
        """Head k: hidden ``[b, m, d]`` and ``prev_tokens`` ``[b, m, k+1]`` → logits ``[b, m, V]``."""
        if prev_tokens.shape[-1] != k + 1:
            raise TreeoptError(
                f"hydra head {k} needs {k + 1} previous tokens, got {prev_tokens.shape[-1]}")
        emb = self.base_embeddings(prev_tokens).to(hidden.dtype)  # [b, m, k+1, d]
        x = torch.cat([hidden, emb.flatten(-2)], dim=-1)  # [b, m, (k+2) d]
        z = hidden + F.silu(self.inputs[k](x))
        return self.project(k, self.blocks[k](z))


Heads = MedusaHeads | HydraHeads


def build_heads(cfg: HeadsConfig, *, lm_head: nn.Module | None = None,
                embeddings: nn.Module | None = None) -> Heads:
    """Draft heads for ``cfg``; with ``lm_head`` (and, for Hydra, ``embeddings``) from the base.

    >>> cfg = HeadsConfig(kind="medusa", num_heads=2, hidden_size=8, vocab_size=16)
    >>> build_heads(cfg)(torch.zeros(1, 3, 8)).shape
    torch.Size([2, 1, 3, 16])
    """
    for name, mod, shape in (("lm_head", lm_head, (cfg.vocab_size, cfg.hidden_size)),
                             ("embeddings", embeddings, (cfg.vocab_size, cfg.hidden_size))):
        if mod is not None and tuple(mod.weight.shape[:2]) != shape:
            raise TreeoptError(
                f"heads config (hidden {cfg.hidden_size}, vocab {cfg.vocab_size}) does not match "
                f"the base model's {name} of shape {list(mod.weight.shape)}")
    if cfg.kind == "medusa":
        return MedusaHeads(cfg, lm_head=lm_head)
    return HydraHeads(cfg, lm_head=lm_head, embeddings=embeddings)


def rank_of(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Rank of ``target`` among ``logits`` sorted descending, ties by token id ascending.

    ``logits`` ``[..., V]``, ``target`` int64 ``[...]`` → int64 ``[...]``.

    >>> rank_of(torch.tensor([[0.5, 2.0, 0.5, 1.0]]), torch.tensor([2])).tolist()
    [3]
    """
    true = logits.gather(-1, target.unsqueeze(-1))  # [..., 1]
    ids = torch.arange(logits.shape[-1], device=logits.device)
    ahead = (logits > true) | ((logits == true) & (ids < target.unsqueeze(-1)))
    return ahead.sum(-1)


def top_candidates(logits: torch.Tensor, k: int) -> torch.Tensor:
    """Token ids of the ``k`` best candidates ``[..., k]``, in the order :func:`rank_of` uses.

    A top-k and a sort of those k, not a sort of the vocabulary (drafting calls this once per tree
    level); only a tie across the k-th place falls back to the full stable sort.

    >>> top_candidates(torch.tensor([0.5, 2.0, 0.5, 1.0]), 4).tolist()
    [1, 3, 0, 2]
    """
    k = min(k, logits.shape[-1])
    top = torch.topk(logits, k, dim=-1)
    if bool(((logits >= top.values[..., -1:]).sum(-1) > k).any()):  # a tie across the cut
        return torch.sort(logits, dim=-1, descending=True, stable=True).indices[..., :k]
    ids = top.indices.sort(dim=-1).values  # the k best, ids ascending: the tie order wanted
    order = torch.sort(logits.gather(-1, ids), dim=-1, descending=True, stable=True).indices
    return ids.gather(-1, order)
