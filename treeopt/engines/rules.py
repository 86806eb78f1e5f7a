"""What each engine builds from a tree file: one registry entry per (format, draft type).

Every rule here was read off the engine's own code (the versions are in each entry); a tree that
breaks a rule is not refused by the engine in general, it is *built differently* (a node attached
to the wrong parent, a candidate drafted from the wrong sibling), so treeopt refuses it on export,
with the reason and the ``treeopt grow`` flags that grow the best tree the engine does build.

A :class:`Rule` is a check (the problem in words, or ``None``) and those flags. An :class:`Engine`
is the rules plus what a user must know beside them (deprecations, the versions that read the
format). A new engine rule is one entry below.

>>> [e.label for e in engines_for(Tree.from_choices([[0], [1], [1, 0]]))][:4]
['medusa', 'trtllm --draft medusa', 'trtllm --draft eagle', 'trtllm-yaml --draft medusa']
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from treeopt.engines.trtllm_keys import MAX_ORDERS, cpp_difference, order_count
from treeopt.errors import TreeoptError
from treeopt.model.tree import Path, Tree

DRAFTS: tuple[str, ...] = ("medusa", "eagle")
MEDUSA_TOPK = 10  # Medusa's reference code drafts the top-10 candidates of every head
TRTLLM_MAX_RANK = 16  # TensorRT-LLM's C++ runtime refuses a larger rank (computePrefix)
TRTLLM_MAX_LEVELS = 16  # ... and a deeper path: its 64-bit keys hold 16 levels of 4 bits


@dataclass(frozen=True)
class Rule:
    """One thing an engine assumes of a tree: ``problem(tree)`` says how a tree breaks it."""

    name: str
    problem: Callable[[Tree], str | None]
    grow_flags: str  # the `treeopt grow` flags whose trees always keep the rule


@dataclass(frozen=True)
class Engine:
    """An export target: which engine reads it, checked against which versions, and its rules."""

    format: str
    draft: str | None  # the draft type the entry is for; None: any
    engine: str
    versions: str  # the engine versions whose source the rules were checked against
    rules: tuple[Rule, ...]
    notes: tuple[str, ...] = ()  # what a user must know beside the rules (deprecations, flags)

    @property
    def label(self) -> str:
        """The export flags that pick this entry."""
        return self.format + (f" --draft {self.draft}" if self.draft else "")

    def problems(self, tree: Tree) -> list[str]:
        """Each broken rule as ``<problem>; grow with <flags>`` (empty when the engine can)."""
        out = []
        for rule in self.rules:
            problem = rule.problem(tree)
            if problem:
                out.append(f"{problem} (grow with {rule.grow_flags})" if rule.grow_flags
                           else problem)
        return out


# ----- the rules ------------------------------------------------------------------------------
def _siblings(tree: Tree) -> dict[Path, list[int]]:
    """Parent path → its children's ranks, ascending."""
    groups: dict[Path, list[int]] = {}
    for p in tree.paths:
        groups.setdefault(p[:-1], []).append(p[-1])
    return {parent: sorted(ranks) for parent, ranks in groups.items()}


def _first_gap(ranks: list[int]) -> int | None:
    """The smallest rank missing below the largest (``None`` when ranks are 0..m-1)."""
    return next((r for r in range(len(ranks)) if ranks[r] != r), None)


def _name(path: Path) -> str:
    return str(list(path)) if path else "the root"


def _nonempty(tree: Tree) -> str | None:
    return None if tree.size else "the tree is empty: every engine needs at least one draft node"


def _rank_below(k: int, why: str) -> Rule:
    def problem(tree: Tree) -> str | None:
        if tree.size and tree.max_rank >= k:
            worst = next(p for p in tree.paths if p[-1] == tree.max_rank)
            return f"{_name(worst)} has rank {tree.max_rank}, but {why} (ranks 0..{k - 1})"
        return None

    return Rule(f"ranks below {k}", problem, f"--max-rank {k}")


def _depth_at_most(d: int, why: str) -> Rule:
    def problem(tree: Tree) -> str | None:
        return f"the tree is {tree.depth} deep, but {why}" if tree.depth > d else None

    return Rule(f"depth at most {d}", problem, f"--max-depth {d}")


def _contiguous(why: str, *, depth_one_only: bool = False) -> Rule:
    """The children of a node (of the root only, with ``depth_one_only``) are ranks 0..m-1."""

    def problem(tree: Tree) -> str | None:
        for parent, ranks in _siblings(tree).items():
            if depth_one_only and parent:
                continue
            missing = _missing_sibling(parent, ranks, why)
            if missing:
                return missing
        return None

    return Rule("children ranked 0..m-1", problem, "--constraint contiguous")


def _missing_sibling(parent: Path, ranks: list[int], why: str) -> str | None:
    """The problem of siblings ``ranks`` (ascending) under ``parent`` that are not 0..m-1."""
    gap = _first_gap(ranks)
    if gap is None:
        return None
    return f"{_name(parent + (ranks[-1],))} is there without {_name(parent + (gap,))}: {why}"


def _grounded(tree: Tree) -> str | None:
    """Hydra's grounded heads: children 0..m-1, and the siblings that have children come first."""
    has_children = {p[:-1] for p in tree.paths}
    for parent, ranks in _siblings(tree).items():
        missing = _missing_sibling(parent, ranks, "Hydra drafts the children of a node as the "
                                                  "top-m of its head")
        if missing:
            return missing
        expanded = [r for r in ranks if parent + (r,) in has_children]
        gap = _first_gap(expanded)
        if gap is not None:
            return (f"{_name(parent + (expanded[-1],))} has children but {_name(parent + (gap,))} "
                    f"has none: Hydra extends the first e children of a node, so they would be "
                    f"drafted below {_name(parent + (gap,))}")
    return None


def _level_uniform(tree: Tree) -> str | None:
    """vLLM drafts level by level: every node of a level has the same children, ranks 0..c-1."""
    level: list[Path] = [()]
    for depth in range(1, tree.depth + 1):
        counts = [len(tree.children(p)) for p in level]
        c = counts[0]
        if any(k != c for k in counts) or any(tree.children(p) != [p + (r,) for r in range(c)]
                                              for p in level):
            return (f"vLLM's tree drafter needs a level-uniform tree (every node of a level with "
                    f"the same children 0..c-1), but depth {depth} has children counts "
                    f"{sorted(set(counts))} under its {len(level)} parents")
        level = [p + (r,) for p in level for r in range(c)]
    return None


# ----- TensorRT-LLM's C++ runtime: the tree its node keys give --------------------------------
def _cpp_built(*, eagle1: bool) -> Callable[[Tree], str | None]:
    """The problem of a tree TensorRT-LLM's C++ runtime builds differently
    (treeopt.engines.trtllm_keys).

    Only trees the runtime accepts (ranks ≤ 16, 16 levels) and, for EAGLE-1, whose children are
    ranks 0..k-1 are replayed: the other rules speak for the rest.
    """
    drafter = "EAGLE-1" if eagle1 else "Medusa"

    def problem(tree: Tree) -> str | None:
        if (not tree.size or tree.max_rank > TRTLLM_MAX_RANK or tree.depth > TRTLLM_MAX_LEVELS
                or (eagle1 and not tree.is_contiguous())):
            return None
        if order_count(tree) > MAX_ORDERS:
            return (f"TensorRT-LLM's C++ runtime gives so many nodes a shared key that the "
                    f"orders it may sort them in ({order_count(tree)}) are more than treeopt "
                    f"replays ({MAX_ORDERS}): it may build another tree")
        diff = cpp_difference(tree, eagle1=eagle1)
        if diff is None:
            return None
        action = (f"build {_name(diff.built)} where the tree has {_name(diff.missing)}"
                  if diff.built else
                  f"draft the token of {_name(diff.missing)} under one node and verify it "
                  f"under another")
        if diff.shared:
            cause = (f"gives {_name(diff.shared[0])} and {_name(diff.shared[1])} the same key "
                     f"(4 bits per level, shifted in 32 bits) and sorts equal keys in no fixed "
                     f"order, so for {drafter} it may")
        else:
            cause = ("orders each depth by keys (4 bits per level, shifted in 32 bits) that "
                     f"wrap past 8 levels, and {drafter} drafts in that order, so it would")
        return f"TensorRT-LLM's C++ runtime {cause} {action}: another tree"

    return problem


NONEMPTY = Rule("at least one node", _nonempty, "")
MEDUSA_RANKS = _rank_below(MEDUSA_TOPK, f"the reference code keeps only the top-{MEDUSA_TOPK} "
                                        "candidates of each head")
TRTLLM_RANKS = _rank_below(TRTLLM_MAX_RANK + 1, "TensorRT-LLM's C++ runtime refuses a rank "
                                                 f"above {TRTLLM_MAX_RANK}")
TRTLLM_DEPTH = _depth_at_most(TRTLLM_MAX_LEVELS, "TensorRT-LLM's C++ runtime refuses a path longer "
                                                 f"than {TRTLLM_MAX_LEVELS} (its 64-bit keys hold "
                                                 f"{TRTLLM_MAX_LEVELS} levels of 4 bits)")
TRTLLM_MEDUSA_KEYS = Rule("Medusa tree from the keys", _cpp_built(eagle1=False),
                          "--max-rank 16 --max-depth 9")
TRTLLM_PY_ROOT = _contiguous("TensorRT-LLM's Python runtime (_medusa_setup) reads the depth-1 "
                             "ranks as 0..m-1", depth_one_only=True)
EAGLE1_TOPK = _contiguous("TensorRT-LLM's EAGLE-1 drafter (C++ runtime) fills the children of a "
                          "node with its top-k tokens in order, so they must be ranks 0..k-1")
EAGLE1_KEYS = Rule("EAGLE-1 tree from the keys", _cpp_built(eagle1=True),
                   "--max-rank 16 --max-depth 8")
EAGLE_TOPK = _contiguous("TensorRT-LLM's PyTorch backend (SpecTreeManager) drafts the top-k "
                         "children of every node of its static EAGLE tree in order, so they must "
                         "be ranks 0..k-1")
SEQUOIA_TOPK = _contiguous("a growmap expands the children of every node as ranks 0..m-1")
GROUNDED = Rule("Hydra grounded heads", _grounded, "--constraint grounded")
UNIFORM = Rule("level-uniform", _level_uniform, "--constraint uniform")

# ----- the registry ---------------------------------------------------------------------------
# TensorRT-LLM's C++ runtime (speculativeChoicesUtils.cpp) serves the run script, the Triton
# backend and MedusaDecodingConfig: the TensorRT engine backend, whose last release is 1.3.0rc20
# (last stable 1.2.1); 1.3.0rc21 removed it. EagleDecodingConfig's YAML goes to the PyTorch
# backend, which builds the tree from the choices list itself (SpecTreeManager, no keys).
TRT_BACKEND = "TensorRT-LLM 0.9 – 1.2.1 stable / 1.3.0rc20 (TensorRT backend, removed in 1.3.0rc21)"
TRT_GONE = ("the TensorRT engine backend that reads this flag is gone from TensorRT-LLM "
            "1.3.0rc21 on; use a release up to 1.2.1 (or 1.3.0rc20)")
EAGLE1_ENGINE = ("EAGLE-1 requires the tree's depth to equal the engine's max_draft_len (its EAGLE "
                 "layers), and at most max_non_leaves_per_layer nodes with children at any depth")
TRT_MEDUSA = (NONEMPTY, TRTLLM_RANKS, TRTLLM_DEPTH, TRTLLM_MEDUSA_KEYS)
TRT_EAGLE1 = (NONEMPTY, TRTLLM_RANKS, TRTLLM_DEPTH, EAGLE1_TOPK, EAGLE1_KEYS)
ENGINES: tuple[Engine, ...] = (
    Engine("medusa", None, "Medusa reference code (medusa_choices)",
           "FasterDecoding/Medusa, last commit 2024-04-18 (medusa/model/utils.py)",
           (NONEMPTY, MEDUSA_RANKS)),
    Engine("hydra", None, "Hydra reference code, grounded heads (hydra_choices)",
           "zankner/Hydra, last commit 2024-02-18 (hydra/model/utils.py, grounded proposal)",
           (NONEMPTY, GROUNDED)),
    Engine("trtllm", "medusa", "TensorRT-LLM run script --medusa_choices",
           TRT_BACKEND + "; C++ runtime and Python runtime (_medusa_setup)",
           (*TRT_MEDUSA, TRTLLM_PY_ROOT), (TRT_GONE,)),
    Engine("trtllm", "eagle", "TensorRT-LLM run script --eagle_choices (EAGLE-1, C++ runtime)",
           TRT_BACKEND + "; C++ runtime and its EAGLE-1 drafter (eagleDecodingKernels.cu)",
           TRT_EAGLE1, (TRT_GONE, EAGLE1_ENGINE)),
    Engine("trtllm-yaml", "medusa", "TensorRT-LLM LLM API, MedusaDecodingConfig",
           TRT_BACKEND, TRT_MEDUSA,
           ("MedusaDecodingConfig runs on the TensorRT backend only: the last releases that "
            "accept it are 1.2.1 (stable) and 1.3.0rc20",
            "num_medusa_heads overrides the checkpoint's head count: it is --num-heads")),
    Engine("trtllm-yaml", "eagle", "TensorRT-LLM LLM API, EagleDecodingConfig static tree "
                                   "(PyTorch backend)",
           "TensorRT-LLM 1.1 – 1.3 (llmapi/llm_args.py, _torch/speculative/spec_tree_manager.py; "
           "eagle_choices removed in 1.4.0rc1)", (NONEMPTY, EAGLE_TOPK),
           ("eagle_choices is deprecated: TensorRT-LLM announced its removal for release 1.4, "
            "and 1.4.0rc1 no longer has it",
            "speculative_model is the EAGLE checkpoint (releases before December 2025 call it "
            "speculative_model_dir)",
            "this YAML is for the PyTorch backend (the LLM API's default): the TensorRT engine "
            "backend builds eagle_choices by the rules of export --format trtllm --draft eagle")),
    Engine("triton", "medusa", "TensorRT-LLM Triton backend (medusa_choices parameter)",
           TRT_BACKEND, TRT_MEDUSA),
    Engine("triton", "eagle", "TensorRT-LLM Triton backend (eagle_choices parameter, EAGLE-1)",
           TRT_BACKEND + "; triton_backend/inflight_batcher_llm/src/model_instance_state.cc",
           TRT_EAGLE1, (EAGLE1_ENGINE,)),
    Engine("vllm", None, "vLLM speculative_token_tree (EAGLE, EAGLE-3, MTP; TREE_ATTN backend)",
           "vLLM 0.10.1 – 0.20.2 (v1/attention/backends/tree_attn.py; removed in 0.21.0)",
           (NONEMPTY, UNIFORM),
           ("only vLLM 0.10.1 – 0.20.2 take a fixed tree, for method eagle, eagle3 or mtp, and "
            "only with the TREE_ATTN attention backend chosen explicitly (0.20: "
            "--attention-backend TREE_ATTN; 0.10: VLLM_ATTENTION_BACKEND=TREE_ATTN); otherwise, "
            "and from 0.21.0 on, vLLM drafts a chain",)),
    Engine("growmap", None, "Sequoia growmap", "Infini-AI-Lab/Sequoia main",
           (NONEMPTY, SEQUOIA_TOPK)),
    Engine("paths", None, "leaf paths (one root-to-leaf path each)", "treeopt", (NONEMPTY,)),
    Engine("json", None, "treeopt tree file", "treeopt", ()),
)
FORMATS: tuple[str, ...] = tuple(dict.fromkeys(e.format for e in ENGINES))


def engine(fmt: str, draft: str = "medusa") -> Engine:
    """The registry entry for ``fmt`` exported with ``draft``; anything else is refused."""
    if fmt not in FORMATS:
        raise TreeoptError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if draft not in DRAFTS:
        raise TreeoptError(f"unknown draft type {draft!r}; choose one of {', '.join(DRAFTS)}")
    return next(e for e in ENGINES if e.format == fmt and e.draft in (None, draft))


def engine_problems(tree: Tree, fmt: str, *, num_heads: int | None = None,
                    draft: str = "medusa") -> list[str]:
    """Why ``fmt``'s engine would not run ``tree`` as designed, in plain words (empty: it would).

    >>> engine_problems(Tree.from_choices([[0], [2]]), "hydra")
    ['[2] is there without [1]: Hydra drafts the children of a node as the top-m of its head (grow with --constraint grounded)']
    """
    problems = engine(fmt, draft).problems(tree)
    if num_heads is not None and tree.depth > num_heads and fmt not in ("paths", "json"):
        problems.append(f"the tree is {tree.depth} deep but there are only {num_heads} heads "
                        f"(grow with --max-depth {num_heads})")
    return problems


def engines_for(tree: Tree, *, num_heads: int | None = None) -> list[Engine]:
    """Every registry entry whose engine runs ``tree`` as designed (formats in registry order)."""
    return [e for e in ENGINES
            if not engine_problems(tree, e.format, num_heads=num_heads, draft=e.draft or "medusa")]
