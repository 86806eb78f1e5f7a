"""The one registry of drafter kinds, torch-free: the CLI lists the kinds,
:mod:`treeopt.pricing.costs` and :mod:`treeopt.roofline.draft` read how a kind's cost grows, the
decoder reads whether it drafts dynamic trees, the demo which of its settings sizes it and
which stage makes it, the app's figures the kinds they colour. Nothing
outside :mod:`treeopt.drafters` branches on a kind's name or probes a drafter for a method: what
differs between kinds is a field of its :class:`DrafterKind`. Each kind names its torch
implementation (``module:Class``), which :func:`treeopt.drafters.heads.drafter_class` loads.

>>> drafter_kind("hydra").per_depth, drafter_kind("medusa").per_depth
(True, False)
>>> [k.name for k in KINDS.values() if k.dynamic]
['eagle', 'eagle3', 'mtp']
>>> [k.name for k in KINDS.values() if k.demo_stage == "heads"]
['medusa', 'hydra']
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from treeopt.errors import TreeoptError


@dataclass(frozen=True)
class DrafterKind:
    """What the rest of treeopt needs to know about a kind of drafter, without torch.

    ``per_depth``: one drafter call per tree depth, on the nodes expanded there (sequentially
    dependent drafters), rather than one call per step for every depth at once. ``reads_path``:
    the candidates at depth k depend on the tokens of the path above them, so teacher forcing
    feeds the true tokens and the base model's input embeddings are needed. ``dynamic``: it
    drafts dynamic trees (``Drafter.draft_dynamic`` and ``Drafter.rank_dynamic``).
    ``draft_formula``, ``fc_inputs`` and ``fc_bias``: how :mod:`treeopt.roofline.draft` prices
    its drafting (the formula's name in ``roofline.draft._FORMULAS``; for EAGLE's formula, how
    many hidden-size vectors its fc reads at the first depth, and whether it has a bias).
    ``position``: what proposes its k-th depth, as figures label it: ``head`` (one head per
    depth: Medusa, Hydra) or ``depth`` (one network run once per depth: EAGLE, a draft model).
    ``demo_layers``: the :class:`~treeopt.demo.config.DemoConfig` settings that give its layer
    count, the first one set; ``demo_lr``: likewise its learning rate. ``chain``: one candidate per depth, so the trees it drafts are
    chains (rank 0 everywhere). ``lookup``: some or all of its nodes come from an n-gram
    lookup on the host (:mod:`treeopt.drafters.ngram`), which may have no candidate (a hole,
    token -1). ``hybrid``: a model drafter's tree with prompt lookup's chain as rank 0 below
    the root and along the chain (:mod:`treeopt.drafters.hybrid`), named ``<model>+lookup``;
    its other fields are the model drafter's. ``max_match``: for an n-gram kind, what
    :attr:`~treeopt.registry.drafter_configs.HeadsConfig.max_match` sets — ``max_n``, the longest n-gram
    prompt lookup matches (the engines' ``max_matching_ngram_size``, ``--max-n`` of export), or
    ``max_trie_depth``, the depth of SGLang's n-gram trie, or ``max_tree_depth``, the depth of
    suffix decoding's trees; empty for the other kinds.
    ``match_types``: the orders of a trie node's children its ``match_type`` may name (empty:
    it has no trie, and ``match_type`` stays empty). ``demo_stage``: the stage of a demo build
    that makes it — ``heads`` (the heads stages, one stage per step for every such kind),
    ``drafters`` (the drafters stage, each kind made end to end), empty where the demo ships
    none. ``request_cache``: it drafts also from a cache of earlier requests' outputs
    (suffix decoding's global tree, :mod:`treeopt.drafters.suffix_tree`), so a trace depends on
    the order of the requests: calibration ranks them in order through one cache
    (``Drafter.rank_requests``) and a live run carries its cache from request to request.
    ``chain_method``: the method name of vLLM's ``--speculative-config`` that drafts its chains
    (``ngram``, ``suffix``, ``mtp``, ``eagle``, ``eagle3``, ``draft_model``), which
    :mod:`treeopt.engines.vllm` maps to that method's config; empty where vLLM drafts none.
    """

    name: str
    title: str
    per_depth: bool
    reads_path: bool
    implementation: str  # "module:Class" of the torch implementation
    draft_formula: str  # the roofline's formula of its drafting cost
    demo_layers: tuple[str, ...]  # the demo settings of its layer count, the first one set
    min_layers: int = 0  # residual blocks per head (Hydra's first block is its input layer)
    prefix_attention: bool = False  # Hydra++'s extra attention layer over the base hiddens
    reads_features: bool = True  # reads the base model's hidden states (a draft model does not)
    fused_layers: int = 0  # base layers whose hidden states it fuses (EAGLE-3: 3; 0: any)
    base_lm_head: bool = False  # drafts through the base model's frozen LM head (EAGLE)
    trained: bool = True  # ``treeopt train`` makes one (a draft model is brought, not trained)
    dynamic: bool = False  # drafts dynamic trees
    fc_inputs: int = 0  # EAGLE's formula: hidden-size vectors into its fc at the first depth
    fc_bias: bool = False  # EAGLE's formula: its fc has a bias
    engine_draft: str = "medusa"  # the engines' name of the drafter type (TensorRT-LLM, vLLM)
    position: str = "head"  # what proposes depth k: "head" (one per depth) or "depth" (one net)
    chain: bool = False  # proposes one token per depth (prompt lookup): its trees are chains
    lookup: bool = False  # drafts from the tokens alone (n-gram), no weights and no forward
    hybrid: bool = False  # a model drafter and prompt lookup in one tree (kind name + "+lookup")
    max_match: str = ""  # an n-gram kind: the setting max_match is (max_n, max_trie_depth, …)
    match_types: tuple[str, ...] = ()  # the trie's orders of children its match_type may name
    demo_stage: str = ""  # the demo build's stage that makes it: "heads", "drafters" or none
    demo_lr: tuple[str, ...] = ("head_lr",)  # the demo settings of its learning rate, first set
    request_cache: bool = False  # drafts from earlier requests' outputs too: traces keep order
    chain_method: str = ""  # vLLM's method name of its chains (ngram, suffix, mtp, …); "": none


TRIE_MATCH_TYPES: tuple[str, ...] = ("bfs", "prob")  # the n-gram trie's orders of children


KINDS: dict[str, DrafterKind] = {
    "medusa": DrafterKind("medusa", "Medusa heads", per_depth=False, reads_path=False,
                          implementation="treeopt.drafters.medusa:MedusaHeads",
                          draft_formula="medusa",
                          demo_layers=("medusa_head_layers", "head_layers"), demo_stage="heads"),
    "hydra": DrafterKind("hydra", "Hydra heads", per_depth=True, reads_path=True,
                         implementation="treeopt.drafters.hydra:HydraHeads",
                         draft_formula="hydra", demo_layers=("head_layers",), min_layers=1,
                         prefix_attention=True, demo_stage="heads"),
    "eagle": DrafterKind("eagle", "EAGLE drafter", per_depth=True, reads_path=True,
                         implementation="treeopt.drafters.eagle:EagleDrafter",
                         draft_formula="eagle", demo_layers=("eagle_layers",), min_layers=1,
                         base_lm_head=True, dynamic=True, fc_inputs=2, fc_bias=True,
                         engine_draft="eagle", position="depth", demo_stage="drafters",
                         chain_method="eagle", demo_lr=("eagle_lr", "head_lr")),
    "eagle3": DrafterKind("eagle3", "EAGLE-3 drafter", per_depth=True, reads_path=True,
                          implementation="treeopt.drafters.eagle3:Eagle3Drafter",
                          draft_formula="eagle", demo_layers=("eagle_layers",), min_layers=1,
                          fused_layers=3, dynamic=True, fc_inputs=3, engine_draft="eagle3",
                          position="depth", chain_method="eagle3"),
    "mtp": DrafterKind("mtp", "MTP drafter", per_depth=True, reads_path=True,
                       implementation="treeopt.drafters.mtp:MtpDrafter", draft_formula="mtp",
                       demo_layers=("eagle_layers",), min_layers=1, base_lm_head=True,
                       dynamic=True, engine_draft="mtp", position="depth", chain_method="mtp"),
    "draft-model": DrafterKind("draft-model", "Draft model", per_depth=True, reads_path=True,
                               implementation="treeopt.drafters.draft_model:DraftModel",
                               draft_formula="draft-model",
                               demo_layers=("draft_model_layers",), reads_features=False,
                               trained=False, position="depth", demo_stage="drafters",
                               chain_method="draft_model"),
    "prompt-lookup": DrafterKind("prompt-lookup", "Prompt lookup", per_depth=False,
                                 reads_path=False,
                                 implementation="treeopt.drafters.prompt_lookup:PromptLookup",
                                 draft_formula="lookup", demo_layers=(), reads_features=False,
                                 trained=False, engine_draft="ngram", position="depth",
                                 chain=True, lookup=True, max_match="max_n",
                                 demo_stage="drafters", chain_method="ngram"),
    "ngram-trie": DrafterKind("ngram-trie", "N-gram trie", per_depth=False, reads_path=False,
                              implementation="treeopt.drafters.trie_drafter:TrieDrafter",
                              draft_formula="lookup", demo_layers=(), reads_features=False,
                              trained=False, engine_draft="ngram", position="depth",
                              lookup=True, max_match="max_trie_depth",
                              match_types=TRIE_MATCH_TYPES, demo_stage="drafters"),
    "suffix": DrafterKind("suffix", "Suffix decoding", per_depth=False, reads_path=False,
                          implementation="treeopt.drafters.suffix:SuffixDrafter",
                          draft_formula="lookup", demo_layers=(), reads_features=False,
                          trained=False, engine_draft="suffix", position="depth", lookup=True,
                          max_match="max_tree_depth", request_cache=True,
                          demo_stage="drafters", chain_method="suffix"),
}
HYBRID_SUFFIX = "+lookup"


def _hybrid(model: DrafterKind) -> DrafterKind:
    """The kind of ``model``'s drafter joined by prompt lookup in one tree
    (:mod:`treeopt.drafters.hybrid`): the model's costs and inputs, the lookup's holes."""
    return replace(model, name=model.name + HYBRID_SUFFIX,
                   title=f"{model.title} + prompt lookup",
                   implementation="treeopt.drafters.hybrid:HybridDrafter", trained=False,
                   dynamic=False, engine_draft="hybrid", lookup=True, hybrid=True,
                   max_match="max_n", demo_stage="", chain_method="")


KINDS.update({k.name + HYBRID_SUFFIX: _hybrid(k) for k in list(KINDS.values()) if not k.lookup})
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


__all__ = ["HYBRID_SUFFIX", "KINDS", "KIND_NAMES", "TRAINED_KINDS", "TRIE_MATCH_TYPES",
           "DrafterKind", "drafter_kind", "engine_draft"]
