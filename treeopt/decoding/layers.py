"""Each layer's attention as the model runs it, and the masks that say it.

A tree step hands the model a 4D mask, which transformers uses as given, so the mask must be the
one the model would build for each layer itself. transformers names every layer's kind in
``cache_utils.get_layer_types_and_kwargs`` (``layer_types``, or inferred from ``sliding_window``
and ``attention_chunk_size``), and ``masking_utils`` defines what each kind sees; for a query at
absolute position p and a key at position k (k ≤ p, and the key visible to the query at all):

=================  ==================================  =====================================
layer type         visible when                        transformers' definition
=================  ==================================  =====================================
full_attention     always                              ``causal_mask_function``
sliding_attention  k > p − W  (keys in (p−W, p])       ``sliding_window_overlay(W)``
chunked_attention  k // C = p // C  (the same chunk)   ``chunked_overlay(C, left_padding=0)``
=================  ==================================  =====================================

Positions here are the tokens' absolute positions in their own sequence (rows of a batch are
not padded on the left, so transformers' left padding is 0). Models whose layers are all of one
kind take one mask; models that mix kinds take a dict ``{layer type: mask}``, which their
forward uses in place of the masks it would build. Any other layer kind — a recurrent or
state-space layer (``linear_attention``, ``conv``, ``hybrid``, ``mamba``…) or a layer that
reads another layer's cache — keeps a state a mask cannot address, and is refused before any
work (:func:`attention_layout`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from treeopt.errors import TreeoptError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

FULL, SLIDING, CHUNKED = "full_attention", "sliding_attention", "chunked_attention"
KINDS = (FULL, SLIDING, CHUNKED)
Masks = torch.Tensor | dict[str, torch.Tensor]


@dataclass(frozen=True)
class LayerKind:
    """One attention type: full, a sliding window of ``span`` keys, or chunks of ``span``."""

    kind: str
    span: int | None = None

    def sees(self, query_pos: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor | None:
        """Where a query at ``query_pos`` ``[b, q, 1]`` may see a key at ``key_pos``
        ``[b, 1, K]`` by this kind's rule alone (None: everywhere).

        >>> LayerKind(SLIDING, 2).sees(torch.tensor([[[3]]]), torch.tensor([[[1, 2, 3]]])).tolist()
        [[[False, True, True]]]
        >>> LayerKind(CHUNKED, 2).sees(torch.tensor([[[3]]]), torch.tensor([[[1, 2, 3]]])).tolist()
        [[[False, True, True]]]
        """
        if self.kind == SLIDING:
            return key_pos > query_pos - self.span
        if self.kind == CHUNKED:
            return torch.div(key_pos, self.span, rounding_mode="floor") == torch.div(
                query_pos, self.span, rounding_mode="floor")
        return None


@dataclass(frozen=True)
class AttentionLayout:
    """The attention kind of every layer; ``kinds`` are the distinct ones, in first-layer order."""

    layers: tuple[LayerKind, ...]

    @functools.cached_property
    def kinds(self) -> tuple[LayerKind, ...]:
        return tuple(dict.fromkeys(self.layers))

    @functools.cached_property
    def full_only(self) -> bool:
        """Every layer sees its whole prefix: the plain tree mask is every layer's mask."""
        return all(k.kind == FULL for k in self.layers)

    @property
    def reach(self) -> int:
        """The longest window or chunk (0 when every layer is full): a prompt longer than this
        crosses every layer's boundary."""
        return max((k.span or 0 for k in self.layers), default=0)

    def masks(self, visible: torch.Tensor, query_pos: torch.Tensor, key_pos: torch.Tensor, *,
              dtype: torch.dtype) -> Masks:
        """The additive mask(s) ``[b, 1, q, K]`` of a forward whose queries at ``query_pos``
        ``[b, q]`` see the keys at ``key_pos`` ``[b, K]`` where ``visible`` ``[b, q, K]`` says
        (prefix and tree ancestry), narrowed per layer kind: one tensor when every layer is of
        one kind, else ``{layer type: mask}``.

        >>> lay = AttentionLayout((LayerKind(FULL), LayerKind(SLIDING, 2)))
        >>> vis = torch.ones(1, 1, 3, dtype=torch.bool)
        >>> m = lay.masks(vis, torch.tensor([[2]]), torch.tensor([[0, 1, 2]]), dtype=torch.float32)
        >>> {k: (v[0, 0] == 0).int().tolist() for k, v in m.items()}
        {'full_attention': [[1, 1, 1]], 'sliding_attention': [[0, 1, 1]]}
        """
        out = {}
        for kind in self.kinds:
            rule = kind.sees(query_pos[:, :, None], key_pos[:, None, :])
            seen = visible if rule is None else visible & rule
            out[kind.kind] = additive(seen, dtype)[:, None]
        if len(out) == 1:
            return next(iter(out.values()))
        return out


def additive(visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Boolean visibility → additive float mask (0 where visible, the dtype's minimum where not)."""
    zero = torch.zeros((), dtype=dtype, device=visible.device)
    return torch.where(visible, zero, torch.finfo(dtype).min)


def attention_layout(model: PreTrainedModel) -> AttentionLayout:
    """The layout of ``model``'s decoder, as transformers' own cache reads it from the config;
    a layer of any other kind is refused, naming it.

    >>> from transformers import MistralConfig, MistralForCausalLM
    >>> m = MistralForCausalLM(MistralConfig(num_hidden_layers=2, hidden_size=8, num_attention_heads=2,
    ...     num_key_value_heads=1, intermediate_size=16, vocab_size=32, sliding_window=5))
    >>> attention_layout(m).kinds
    (LayerKind(kind='sliding_attention', span=5),)
    """
    config = model.config.get_text_config(decoder=True)
    name = type(model).__name__
    types, kwargs = _layer_types(config)
    layers = []
    for i, (kind, kw) in enumerate(zip(types, kwargs, strict=True)):
        if kind not in KINDS:
            why = ("reads another layer's cache" if kind == "dummy" else
                   "keeps a recurrent state that a tree step cannot branch")
            raise TreeoptError(f"{name}: layer {i} is of type {kind!r}, which {why}; only "
                               f"attention layers ({', '.join(KINDS)}) can verify a tree")
        span = kw.get("sliding_window") if kind != FULL else None
        if kind != FULL and (not isinstance(span, int) or span < 1):
            raise TreeoptError(f"{name}: layer {i} is {kind} without a positive window or "
                               f"chunk size ({span!r})")
        layers.append(LayerKind(kind, span))
    stateful = _stateful_layers(model)
    if stateful:
        raise TreeoptError(
            f"{name}: its {stateful} layers keep a recurrent state that a tree step cannot "
            f"branch (a mask hides keys; it cannot undo a state update); only attention layers "
            f"({', '.join(KINDS)}) can verify a tree")
    return AttentionLayout(tuple(layers))


def _layer_types(config: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """Each layer's type and its window (``sliding_window``; a chunked layer's chunk there too),
    by transformers' own reader where it has one (5.x), else :func:`config_layer_types`."""
    try:
        from transformers.cache_utils import get_layer_types_and_kwargs
    except ImportError:
        return config_layer_types(config)
    types, kwargs = get_layer_types_and_kwargs(config)
    return list(types), list(kwargs)


def config_layer_types(config: Any) -> tuple[list[str], list[dict[str, Any]]]:
    """transformers 5's rule, for older versions: ``layer_types``, or every layer sliding where
    ``sliding_window`` is set, chunked where ``attention_chunk_size`` is, full otherwise."""
    window = getattr(config, "sliding_window", None)
    chunk = getattr(config, "attention_chunk_size", None)
    default = SLIDING if window is not None else CHUNKED if chunk is not None else FULL
    types = list(getattr(config, "layer_types", None) or [default] * config.num_hidden_layers)
    spans = {SLIDING: window, CHUNKED: chunk}
    return types, [{"sliding_window": spans[t]} if t in spans else {} for t in types]


def _stateful_layers(model: PreTrainedModel) -> str | None:
    """The class name of a recurrent or state-space mixer in ``model``, if it has one: a
    module with a 1D convolution over time or a selective-scan state (``A_log``), which
    transformers' SSM, linear-attention and short-convolution layers all carry."""
    for module in model.modules():
        if isinstance(module, torch.nn.Conv1d) or hasattr(module, "A_log"):
            return type(module).__name__ if hasattr(module, "A_log") else _owner(model, module)
    return None


def _owner(model: PreTrainedModel, conv: torch.nn.Module) -> str:
    """The class of the module holding ``conv`` (the layer a user would recognise)."""
    for module in model.modules():
        if any(child is conv for child in module.children()):
            return type(module).__name__
    return type(conv).__name__
