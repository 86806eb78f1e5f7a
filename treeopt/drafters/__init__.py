"""Drafters: what proposes a tree's candidate tokens — Medusa heads, Hydra heads, an EAGLE
drafter and a separate draft model.

This module is the one registry of drafter kinds and needs no torch: the CLI lists the kinds,
:mod:`treeopt.select` and :mod:`roofline.draft` read how a kind's cost grows, and only
:func:`build_heads` imports the torch implementations (:mod:`treeopt.drafters.medusa`,
:mod:`treeopt.drafters.hydra`, :mod:`treeopt.drafters.eagle`, :mod:`treeopt.drafters.eagle3`,
:mod:`treeopt.drafters.draft_model`). Nothing outside this package branches on a kind's name.

>>> drafter_kind("hydra").per_depth, drafter_kind("medusa").per_depth
(True, False)
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from treeopt.errors import TreeoptError

if TYPE_CHECKING:
    from treeopt.drafters.base import Drafter, DraftHeads
    from treeopt.drafters.config import HeadsConfig


@dataclass(frozen=True)
class DrafterKind:
    """What the rest of treeopt needs to know about a kind of drafter, without torch.

    ``per_depth``: one drafter call per tree depth, on the nodes expanded there (sequentially
    dependent drafters), rather than one call per step for every depth at once. ``reads_path``:
    the candidates at depth k depend on the tokens of the path above them, so teacher forcing
    feeds the true tokens and the base model's input embeddings are needed.
    """

    name: str
    title: str
    per_depth: bool
    reads_path: bool
    implementation: str  # "module:Class" of the torch implementation
    min_layers: int = 0  # residual blocks per head (Hydra's first block is its input layer)
    prefix_attention: bool = False  # Hydra++'s extra attention layer over the base hiddens
    reads_features: bool = True  # reads the base model's hidden states (a draft model does not)
    trained: bool = True  # ``treeopt train`` makes one (a draft model is brought, not trained)
    engine_draft: str = "medusa"  # the engines' name of the drafter type (TensorRT-LLM, vLLM)

    def heads_class(self) -> type[Drafter]:
        module, name = self.implementation.split(":")
        return getattr(importlib.import_module(module), name)


KINDS: dict[str, DrafterKind] = {
    "medusa": DrafterKind("medusa", "Medusa heads", per_depth=False, reads_path=False,
                          implementation="treeopt.drafters.medusa:MedusaHeads"),
    "hydra": DrafterKind("hydra", "Hydra heads", per_depth=True, reads_path=True,
                         implementation="treeopt.drafters.hydra:HydraHeads", min_layers=1,
                         prefix_attention=True),
    "eagle": DrafterKind("eagle", "EAGLE drafter", per_depth=True, reads_path=True,
                         implementation="treeopt.drafters.eagle:EagleDrafter", min_layers=1,
                         engine_draft="eagle"),
    "eagle3": DrafterKind("eagle3", "EAGLE-3 drafter", per_depth=True, reads_path=True,
                          implementation="treeopt.drafters.eagle3:Eagle3Drafter", min_layers=1,
                          engine_draft="eagle3"),
    "draft-model": DrafterKind("draft-model", "Draft model", per_depth=True, reads_path=True,
                               implementation="treeopt.drafters.draft_model:DraftModel",
                               reads_features=False, trained=False),
}
KIND_NAMES: tuple[str, ...] = tuple(KINDS)
TRAINED_KINDS: tuple[str, ...] = tuple(k for k in KINDS if KINDS[k].trained)


def engine_draft(name: str | None) -> str:
    """The drafter type engines know ``name`` as (``medusa``, ``eagle``, ``eagle3``); kinds not
    registered here (a file from elsewhere) count as ``medusa``.

    >>> engine_draft("eagle3"), engine_draft("hydra"), engine_draft(None)
    ('eagle3', 'medusa', 'medusa')
    """
    kind = KINDS.get(name or "")
    return kind.engine_draft if kind is not None else "medusa"


def drafter_kind(name: str, *, source: str = "head kind") -> DrafterKind:
    """The registered kind called ``name``; anything else is refused, naming the valid ones."""
    try:
        return KINDS[name]
    except KeyError:
        raise TreeoptError(f"{source} {name!r} is unknown; expected one of "
                           f"{list(KIND_NAMES)}") from None


def build_heads(cfg: HeadsConfig, *, lm_head: Any = None, embeddings: Any = None) -> DraftHeads:
    """Draft heads for ``cfg``; with ``lm_head`` (and, for path readers, ``embeddings``) from
    the base model. Shapes are checked against the config.

    >>> from treeopt.drafters.config import HeadsConfig
    >>> import torch
    >>> cfg = HeadsConfig(kind="medusa", num_heads=2, hidden_size=8, vocab_size=16)
    >>> build_heads(cfg)(torch.zeros(1, 3, 8)).shape
    torch.Size([2, 1, 3, 16])
    """
    if not drafter_kind(cfg.kind).trained:
        raise TreeoptError(f"a {drafter_kind(cfg.kind).title.lower()} is loaded from its own "
                           f"directory, not built from a heads config")
    for name, mod in (("lm_head", lm_head), ("embeddings", embeddings)):
        shape = (cfg.vocab_size, cfg.hidden_size)
        if mod is not None and tuple(mod.weight.shape[:2]) != shape:
            raise TreeoptError(
                f"heads config (hidden {cfg.hidden_size}, vocab {cfg.vocab_size}) does not match "
                f"the base model's {name} of shape {list(mod.weight.shape)}")
    return drafter_kind(cfg.kind).heads_class().build(cfg, lm_head=lm_head, embeddings=embeddings)


__all__ = ["KINDS", "KIND_NAMES", "TRAINED_KINDS", "DrafterKind", "build_heads", "drafter_kind",
           "engine_draft"]
