"""Drafter settings, torch-free so the CLI and the profiler can read them without loading torch:
the shape of a set of heads (:class:`HeadsConfig`) and how to train them (:class:`TrainConfig`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from treeopt.errors import FieldError, TreeoptError
from treeopt.registry.kinds import KINDS, drafter_kind


def default_feature_layers(num_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's three base layers for a model of ``num_layers``: the inputs of layers 2, L/2
    and L-3 (``hidden_states`` indices), clipped for very shallow models.

    >>> default_feature_layers(32), default_feature_layers(2)
    ((2, 16, 29), (2, 1, 0))
    """
    return min(2, num_layers), num_layers // 2, max(num_layers - 3, 0)


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
    # EAGLE's decoder layers (left out of ``to_dict`` at their defaults):
    intermediate_size: int = 0  # 0: twice the hidden size
    kv_heads: int = 0  # 0: as many as attention_heads
    rope_theta: float = 10000.0
    bias: bool = True  # of EAGLE's fc layer
    rms_norm_eps: float = 1e-6
    # EAGLE-3: its own vocabulary (0: the base model's) and the base layers it reads
    draft_vocab_size: int = 0
    feature_layers: tuple[int, ...] = ()  # hidden_states indices (empty: the last hidden state)
    # prompt lookup: the suffix lengths it matches, longest first (0: not a lookup drafter)
    min_match: int = 0
    max_match: int = 0
    # the n-gram trie: the order of a trie node's children, bfs or prob ("": not a trie drafter)
    match_type: str = ""
    # suffix decoding (treeopt.drafters.suffix_tree; max_match: its trees' depth): a match of m
    # tokens drafts at most ⌊m·factor + offset⌋, tokens at least this probable, from the
    # responses of this many requests (-1: all; 0 with the factor 0: not a suffix drafter)
    max_spec_factor: float = 0.0
    max_spec_offset: float = 0.0
    min_token_prob: float = 0.0
    max_cached_requests: int = 0
    # suffix decoding: the responses served before that its global tree starts from
    # (treeopt.model.responses.History.digest; "": none, a cold cache)
    history: str = ""
    # MTP: the hidden state handed to the next depth is after the module's output norm
    # (Qwen3-Next) rather than before it (DeepSeek-V3); treeopt.drafters.mtp
    handoff_norm: bool = False

    def __post_init__(self) -> None:
        kind = drafter_kind(self.kind)
        object.__setattr__(self, "feature_layers", tuple(int(i) for i in self.feature_layers))
        if kind.fused_layers and len(self.feature_layers) != kind.fused_layers:
            raise TreeoptError(f"heads config: an {kind.title} reads {kind.fused_layers} base "
                               f"layers, got feature_layers {list(self.feature_layers)}")
        if not 0 <= self.draft_vocab_size <= self.vocab_size:
            raise TreeoptError(f"heads config: draft_vocab_size {self.draft_vocab_size} is not "
                               f"in 0 … {self.vocab_size}")
        if kind.base_lm_head and not self.share_lm_head:
            raise TreeoptError(f"heads config: an {kind.title} reads through the base model's "
                               f"LM head (share_lm_head must be true)")
        for name in ("num_heads", "hidden_size", "vocab_size"):
            if int(getattr(self, name)) < 1:
                raise TreeoptError(f"heads config: {name} must be ≥ 1, got {getattr(self, name)}")
        if self.num_layers < kind.min_layers:
            raise TreeoptError(f"heads config: num_layers {self.num_layers} is too small")
        if kind.lookup and not 1 <= self.min_match <= self.max_match:
            raise TreeoptError(f"heads config: a {kind.title.lower()} drafter matches suffixes of "
                               f"min_match … max_match tokens (1 ≤ min ≤ max), got "
                               f"{self.min_match} … {self.max_match}")
        if not kind.lookup and (self.min_match or self.max_match):
            raise TreeoptError(f"heads config: min_match and max_match apply to n-gram drafters "
                               f"only, not {kind.title}")
        if (self.match_type not in kind.match_types if kind.match_types else self.match_type):
            valid = (f"one of {', '.join(kind.match_types)}" if kind.match_types
                     else "empty (it orders no trie's children)")
            raise TreeoptError(f"heads config: match_type of {kind.title} is {valid}; got "
                               f"{self.match_type!r}")
        if self.handoff_norm and kind.name != "mtp":
            raise TreeoptError(f"heads config: handoff_norm applies to {KINDS['mtp'].title} "
                               f"only, not {kind.title}")
        suffix = [f"{name} {getattr(self, name)}" for name in _SUFFIX_FIELDS
                  if getattr(self, name) != _DEFAULTS[name]]
        if self.history:
            suffix.append(f"history {self.history!r}")
        if suffix and not kind.request_cache:
            raise TreeoptError(f"heads config: {', '.join(suffix)}: these settings apply to "
                               f"suffix decoding only, not {kind.title}")
        if self.prefix_attention and not kind.prefix_attention:
            having = " and ".join(k.title for k in KINDS.values() if k.prefix_attention)
            raise TreeoptError(f"heads config: prefix_attention applies to {having} only")
        if self.prefix_attention and self.hidden_size % self.attention_heads:
            raise TreeoptError(
                f"heads config: hidden_size {self.hidden_size} is not divisible by "
                f"attention_heads {self.attention_heads}")

    def to_dict(self) -> dict[str, object]:
        """The fields, less EAGLE's layer shape and the n-gram match lengths where they are at
        their defaults (so a config that leaves them out and one that spells the defaults
        compare equal); a suffix drafter's settings always (0 is a setting of its own there:
        no global tree, no offset)."""
        out = asdict(self)
        kept = _SUFFIX_FIELDS if drafter_kind(self.kind).request_cache else ()
        for name in (*_LAYER_FIELDS, *_SUFFIX_FIELDS):
            if out[name] == _DEFAULTS[name] and name not in kept:
                del out[name]
        if "feature_layers" in out:
            out["feature_layers"] = list(out["feature_layers"])
        return out


_LAYER_FIELDS = ("intermediate_size", "kv_heads", "rope_theta", "bias", "rms_norm_eps",
                 "draft_vocab_size", "feature_layers", "min_match", "max_match", "match_type",
                 "handoff_norm", "history")
_SUFFIX_FIELDS = ("max_spec_factor", "max_spec_offset", "min_token_prob", "max_cached_requests")
_DEFAULTS = {f.name: f.default for f in fields(HeadsConfig)}


@dataclass(frozen=True)
class TrainConfig:
    """Head shape and optimiser settings; CLI flags map one-to-one onto these fields."""

    kind: str = "medusa"
    num_heads: int = 4
    num_layers: int = 1
    share_lm_head: bool = False
    prefix_attention: bool = False
    steps: int = 200
    batch_size: int = 8
    seq_len: int = 128
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup: int = 10
    decay: float = 0.8
    seed: int = 0
    # > 0: the teacher's k best tokens per position, computed once, and each step's softmax over
    # the batch's candidates (treeopt.drafters.vocabulary); 0: the full vocabulary every step
    teacher_top_k: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "seq_len"):
            if getattr(self, name) < 1:
                raise FieldError(name, f"must be ≥ 1, got {getattr(self, name)}")
        if not self.lr > 0 or not math.isfinite(self.lr):  # also refuses NaN
            raise FieldError("lr", f"must be a positive number, got {self.lr}")
        for name in ("weight_decay", "decay"):
            value = getattr(self, name)
            if not value >= 0 or not math.isfinite(value):
                raise FieldError(name, f"must be a number ≥ 0, got {value}")
        if self.warmup < 0:
            raise FieldError("warmup", f"must be ≥ 0, got {self.warmup}")
        if self.teacher_top_k < 0:
            raise FieldError("teacher_top_k", f"must be ≥ 0 (0: the full vocabulary), got "
                             f"{self.teacher_top_k}")
        if self.seq_len < self.num_heads + 2:
            raise FieldError("seq_len", f"{self.seq_len} leaves no targets for {self.num_heads} "
                             f"heads (needs ≥ {self.num_heads + 2})")

    def heads_config(self, hidden_size: int, vocab_size: int, *,
                     base_layers: int = 0) -> HeadsConfig:
        """The drafter's shape for a base model of this hidden size, vocabulary and depth
        (``base_layers``: where an EAGLE-3 drafter reads its three features)."""
        kind = drafter_kind(self.kind)
        layers = default_feature_layers(base_layers) if kind.fused_layers else ()
        return HeadsConfig(kind=self.kind, num_heads=self.num_heads, hidden_size=hidden_size,
                           vocab_size=vocab_size, num_layers=self.num_layers,
                           feature_layers=layers,
                           share_lm_head=self.share_lm_head or kind.base_lm_head,
                           prefix_attention=self.prefix_attention)
