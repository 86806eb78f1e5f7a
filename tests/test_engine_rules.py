"""TensorRT-LLM's tree rules against slow, literal replays of what its code builds from a tree.

The replays follow the engine's code step by step, independently of treeopt/engines/trtllm/trees.py:

- ``cpp_build``: ``initTensorsFromChoices`` (cpp/tensorrt_llm/runtime/utils/
  speculativeChoicesUtils.cpp, NVIDIA/TensorRT-LLM b4f2086): keys from ``computePrefix`` (an
  int32 shift whose amount the hardware takes modulo 32, widened with its sign into a uint64),
  choices sorted by (length, key), each node's parent looked up by key in the level above.
  ``std::sort`` leaves equal keys in no fixed order, so every order of them is replayed.
- ``medusa_built``: Medusa drafts a node's token from its head's top-``rank`` (treeIds), so the
  tree is the node ids along the parent links.
- ``eagle1_built``: EAGLE-1's drafter (eagleDecodingKernels.cu, NVIDIA/TensorRT-LLM 3585984):
  each node with k children, in node order, gets its top-k tokens, written to the next level's
  nodes in node order.
- ``pytorch_built``: the PyTorch backend (llm_args.py ``check_eagle_choices``: unique choices
  sorted by (length, path); spec_tree_manager.py, NVIDIA/TensorRT-LLM eadc5af: top_k_list per
  node in list order), its drafter keeping the first k of each node's top tokens.

A drafted node is a path of ranks under the context it was drafted in; ``None`` marks a token
drafted under one parent but verified under another.
"""

from __future__ import annotations

from itertools import permutations, product
from math import factorial, prod

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.engines.forms import export
from treeopt.engines.registry import engine_problems
from treeopt.engines.trtllm.keys import MAX_ORDERS, trtllm_key
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree

U64 = (1 << 64) - 1


def cpp_key(choice: tuple[int, ...]) -> int:
    """computePrefix, as the machine runs it."""
    prefix = 0
    for ci, val in enumerate(choice):
        shift = (4 * (len(choice) - 1 - ci)) & 31  # x86 shl / Arm lslv: count modulo 32
        word = (val << shift) & 0xFFFFFFFF  # an int32 keeps 32 bits
        if word & 0x80000000:
            word -= 1 << 32  # ... as a signed value
        prefix |= word & U64  # widened into uint64_t with its sign
    return prefix


def tie_breaks(tree: Tree) -> list[dict[int, int]] | None:
    """Every order std::sort may leave equal (length, key) pairs in: choice index → its place
    (None: more than MAX_ORDERS of them)."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, c in enumerate(tree.paths):
        groups.setdefault((len(c), cpp_key(c)), []).append(i)
    tied = [g for g in groups.values() if len(g) > 1]
    if prod(factorial(len(g)) for g in tied) > MAX_ORDERS:
        return None
    return [{i: at for perm in choice for at, i in enumerate(perm)}
            for choice in product(*(permutations(g) for g in tied))]


def cpp_build(tree: Tree, tie: dict[int, int]) -> tuple[list[int], list[int], list[int]]:
    """initTensorsFromChoices: (parent, node id, depth) per linear index, 0 the root."""
    choices = list(tree.paths)
    prefixes = [cpp_key(c) for c in choices]
    order = sorted(range(len(choices)),
                   key=lambda i: (len(choices[i]), prefixes[i], tie.get(i, 0)))
    parent, node_id, depth_of = [-1], [-1], [0]
    prev: dict[int, int] = {0: 0}
    cur: dict[int, int] = {}
    depth = 1
    for ci, index in enumerate(order):
        choice = choices[index]
        if len(choice) != depth:
            prev, cur, depth = cur, {}, depth + 1
        cur[prefixes[index]] = ci + 1  # a later node with the same key overwrites
        parent.append(prev.setdefault(cpp_key(choice[:-1]), 0))  # operator[]: 0 when absent
        node_id.append(choice[-1])
        depth_of.append(depth)
    return parent, node_id, depth_of


def medusa_built(tree: Tree, tie: dict[int, int]) -> list[tuple[int, ...] | None]:
    parent, node_id, _ = cpp_build(tree, tie)
    paths: list[tuple[int, ...]] = [()]
    for i in range(1, len(parent)):
        paths.append(paths[parent[i]] + (node_id[i],))
    return sorted(paths[1:])


def _draft_levels(parent: list[int], levels: list[list[int]]) -> list[tuple[int, ...] | None]:
    """Each level's nodes with k children, in order, give their top-k to the next level's
    nodes, in order; ``levels[d]`` lists the nodes of depth d (0: the root)."""
    children = {i: sum(1 for j in range(len(parent)) if parent[j] == i) for i in range(len(parent))}
    drafted: dict[int, tuple[int, ...] | None] = {0: ()}
    for d in range(len(levels) - 1):
        slots = [(q, j) for q in levels[d] for j in range(children[q])]
        for node, (q, j) in zip(levels[d + 1], slots, strict=True):
            ctx = drafted[q]
            drafted[node] = ctx + (j,) if ctx is not None and parent[node] == q else None
    return sorted((drafted[i] for i in range(1, len(parent))), key=lambda p: (p is None, p or ()))


def eagle1_built(tree: Tree, tie: dict[int, int]) -> list[tuple[int, ...] | None]:
    parent, _, depth_of = cpp_build(tree, tie)
    levels = [[i for i in range(len(parent)) if depth_of[i] == d] for d in range(tree.depth + 1)]
    return _draft_levels(parent, levels)


def pytorch_built(tree: Tree) -> list[tuple[int, ...] | None]:
    choices = sorted({tuple(c) for c in tree.as_choices()}, key=lambda c: (len(c), c))
    index = {c: i + 1 for i, c in enumerate(choices)}
    parent = [-1] + [index.get(c[:-1], 0) for c in choices]
    depth_of = [0] + [len(c) for c in choices]
    levels = [[i for i in range(len(parent)) if depth_of[i] == d] for d in range(tree.depth + 1)]
    return _draft_levels(parent, levels)


def cpp_runs(tree: Tree) -> bool:
    """What initTensorsFromChoices accepts at all: ranks ≤ 16, at most 16 levels."""
    return tree.max_rank <= 16 and tree.depth <= 16


def builds_exactly(tree: Tree, fmt: str, draft: str) -> bool | None:
    """Whether the replay of ``fmt``'s engine builds ``tree``, whatever order ties take (None:
    too many orders to replay)."""
    want = sorted(tree.paths)
    if fmt == "trtllm-yaml" and draft == "eagle":
        return pytorch_built(tree) == want
    if not cpp_runs(tree):
        return False
    replay = medusa_built if draft == "medusa" else eagle1_built
    ties = tie_breaks(tree)
    return None if ties is None else all(replay(tree, tie) == want for tie in ties)


def tree_of(*leaves: tuple[int, ...]) -> Tree:
    return Tree.from_choices(sorted({leaf[:d] for leaf in leaves for d in range(1, len(leaf) + 1)}))


# ----- the cases, and the boundaries -------------------------------------------------
ZERO8 = (0,) * 8
DEPTH9_TIE = tree_of(ZERO8 + (0,), ZERO8 + (1,), (1,) + ZERO8)  # [0*8, 1] and [1, 0*8]: key 1
DEPTH10_TIE = tree_of(ZERO8 + (0,), ZERO8 + (1, 0), (1,) + ZERO8)
DEPTH9_SWAP = tree_of((0, 0), (0, 1) + (0,) * 7, (1,) + ZERO8)  # keys 1<<28 and 1: reversed
ROOT_17 = Tree.from_choices([[r] for r in range(17)])
RANK16_ALIAS = Tree.from_choices([[0], [1]] + [[0, r] for r in range(17)] + [[1, 0]])


@pytest.mark.parametrize("tree, fmt, draft, words", [
    # EAGLE-1 fills a node's children with its top-k in order: children must be ranks 0..k-1
    (Tree.from_choices([[0], [1], [0, 0], [0, 2]]), "trtllm", "eagle",
     ["[0, 2] is there without [0, 1]", "EAGLE-1 drafter (C++ runtime)", "ranks 0..k-1"]),
    (Tree.from_choices([[0], [0, 1]]), "trtllm", "eagle",
     ["[0, 1] is there without [0, 0]", "EAGLE-1 drafter (C++ runtime)", "ranks 0..k-1"]),
    (Tree.from_choices([[0], [0, 1]]), "triton", "eagle",
     ["[0, 1] is there without [0, 0]", "EAGLE-1 drafter (C++ runtime)"]),
    # depth 9: EAGLE-1 drafts in key order, and the keys wrap
    (DEPTH9_TIE, "triton", "eagle",
     [f"gives {list(ZERO8 + (1,))} and {[1] + list(ZERO8)} the same key", "no fixed order",
      f"for EAGLE-1 it may draft the token of {list(ZERO8 + (1,))} under one node and verify "
      "it under another: another tree", "grow with --max-rank 16 --max-depth 8"]),
    (DEPTH9_SWAP, "trtllm", "eagle",
     ["orders each depth by keys (4 bits per level, shifted in 32 bits) that wrap past 8 "
      "levels, and EAGLE-1 drafts in that order, so it would draft the token of "
      f"{[0, 1] + [0] * 7} under one node and verify it under another: another tree"]),
    # depth 10: a node whose key is shared has children, and Medusa finds parents by key
    (DEPTH10_TIE, "triton", "medusa",
     [f"gives {list(ZERO8 + (1,))} and {[1] + list(ZERO8)} the same key",
      f"for Medusa it may build {[1] + [0] * 9} where the tree has {list(ZERO8 + (1, 0))}",
      "another tree", "grow with --max-rank 16 --max-depth 9"]),
    (DEPTH10_TIE, "trtllm-yaml", "medusa", ["C++ runtime gives", "the same key", "Medusa"]),
    # rank 16 aliases below depth 1
    (RANK16_ALIAS, "triton", "eagle", ["gives [0, 16] and [1, 0] the same key", "EAGLE-1"]),
    (Tree.from_choices([[0], [1], [1, 0], [0, 16], [0, 16, 0]]), "trtllm", "medusa",
     ["gives [0, 16] and [1, 0] the same key",
      "for Medusa it may build [1, 0, 0] where the tree has [0, 16, 0]"]),
    # rank 16 at depth 1 aliases 7 levels down: 16 << 28 leaves the 32 bits
    (Tree.from_choices([[r] for r in range(17)] + [[16] + [0] * d for d in range(1, 8)]
                       + [[0] * d for d in range(2, 10)]), "triton", "medusa",
     [f"gives {list(ZERO8)} and {[16] + [0] * 7} the same key"]),
    # what the C++ runtime refuses outright
    (Tree.chain(17), "triton", "eagle", ["the tree is 17 deep", "refuses a path longer than 16"]),
    (Tree.from_choices([[r] for r in range(18)]), "trtllm", "medusa",
     ["[17] has rank 17", "refuses a rank above 16"]),
    # the PyTorch backend: children ranked 0..k-1 at any depth
    (tree_of((0,) * 12 + (1,)), "trtllm-yaml", "eagle",
     [f"{[0] * 12 + [1]} is there without {[0] * 13}", "PyTorch backend (SpecTreeManager)"]),
])
def test_refused_with_the_engine_and_the_reason(tree, fmt, draft, words):
    problems = engine_problems(tree, fmt, draft=draft)
    assert problems and not builds_exactly(tree, fmt, draft)
    assert any(all(w in p for w in words) for p in problems), problems
    with pytest.raises(TreeoptError, match=f"^cannot export to {fmt}: TensorRT-LLM"):
        export(tree, fmt, draft=draft, num_heads=tree.depth, speculative_model="ckpt")


@pytest.mark.parametrize("tree, fmt, draft", [
    (Tree.from_choices([[0], [0, 1]]), "trtllm", "medusa"),  # Medusa's heads are independent
    (Tree.from_choices([[0], [1], [0, 0], [0, 1]]), "trtllm", "eagle"),
    (DEPTH9_TIE, "triton", "medusa"),  # depth-9 keys only find depth-10 parents
    (DEPTH9_SWAP, "triton", "medusa"),
    (DEPTH9_TIE, "trtllm-yaml", "eagle"),  # no keys in the PyTorch backend
    (DEPTH10_TIE, "trtllm-yaml", "eagle"),
    (Tree.chain(8), "trtllm", "eagle"),
    (Tree.chain(16), "trtllm", "eagle"),  # one node a level: no key is shared
    (Tree.chain(16), "triton", "medusa"),
    (Tree.chain(9), "trtllm-yaml", "eagle"),
    (Tree.chain(16), "trtllm-yaml", "eagle"),
    (Tree.chain(40), "trtllm-yaml", "eagle"),
    (ROOT_17, "triton", "eagle"),  # rank 16 at depth 1 is exact
    (ROOT_17, "trtllm", "medusa"),
    (Tree.from_choices([[r] for r in range(17)] + [[16, 0], [16, 0, 0]]), "trtllm", "eagle"),
    (Tree.from_choices([[0]] + [[0, r] for r in range(17)]), "triton", "eagle"),  # no [1, 0]
    (RANK16_ALIAS, "triton", "medusa"),  # a shared key without children: parents found
])
def test_accepted_exactly_where_the_engine_builds_it(tree, fmt, draft):
    assert engine_problems(tree, fmt, draft=draft) == []
    assert builds_exactly(tree, fmt, draft)


def test_keys_are_the_machines():
    for path in [(0, 16), (1, 0), (16,) + (0,) * 7, ZERO8, (15,) * 8, (8,) + (0,) * 7,
                 (1,) + ZERO8, ZERO8 + (1,), (3, 16, 9) * 5, (16,) * 16]:
        assert trtllm_key(path) == cpp_key(path) & 0xFFFFFFFF
        assert (cpp_key(path) >> 32) in (0, 0xFFFFFFFF)  # the high word copies bit 31


# ----- any tree: accepted exactly when the replay builds it ------------------------------------
@st.composite
def grown_trees(draw, max_nodes: int = 30) -> Tree:
    """Trees whose children are ranks 0..k-1, grown under recent nodes: deep and bushy."""
    paths: list[tuple[int, ...]] = [()]
    kids: dict[tuple[int, ...], int] = {(): 0}
    for back in draw(st.lists(st.integers(0, 4), min_size=1, max_size=max_nodes)):
        at = paths[max(0, len(paths) - 1 - back)]
        child = at + (kids[at],)
        kids[at] += 1
        kids[child] = 0
        paths.append(child)
    return Tree.from_choices(paths[1:])


@st.composite
def rank_trees(draw) -> Tree:
    """Any ranks, 16 and above included, on paths up to 12 deep."""
    ranks = st.sampled_from([0, 0, 0, 1, 1, 2, 3, 7, 8, 15, 16, 16, 17])
    leaves = draw(st.lists(st.lists(ranks, min_size=1, max_size=12), min_size=1, max_size=6))
    return tree_of(*(tuple(leaf) for leaf in leaves))


@st.composite
def deep_contiguous_trees(draw) -> Tree:
    """Paths 8 to 11 deep with every lower-ranked sibling added: keys that wrap, children 0..k-1."""
    leaves = draw(st.lists(st.lists(st.sampled_from([0, 0, 1, 1, 2, 8, 16]), min_size=8,
                                    max_size=11), min_size=1, max_size=4))
    nodes = {tuple(leaf[:d - 1]) + (r,) for leaf in leaves for d in range(1, len(leaf) + 1)
             for r in range(leaf[d - 1] + 1)}
    return tree_of(*nodes)


TARGETS = [("trtllm", "medusa"), ("trtllm", "eagle"), ("trtllm-yaml", "medusa"),
           ("trtllm-yaml", "eagle"), ("triton", "medusa"), ("triton", "eagle")]


@settings(max_examples=400, deadline=None)
@given(st.one_of(grown_trees(), rank_trees(), deep_contiguous_trees()))
def test_accepted_iff_the_engine_builds_it(tree):
    replayed: dict[tuple[str, str], bool | None] = {}  # one replay per runtime drafter
    for fmt, draft in TARGETS:
        runtime = (fmt, draft) if (fmt, draft) == ("trtllm-yaml", "eagle") else ("cpp", draft)
        if runtime not in replayed:
            replayed[runtime] = builds_exactly(tree, fmt, draft)
        exact = replayed[runtime]
        if exact is None:  # more orders of equal keys than are replayed: refused, and why
            assert any("more than treeopt replays" in p
                       for p in engine_problems(tree, fmt, draft=draft)), (fmt, draft)
            continue
        if fmt == "trtllm" and draft == "medusa":  # the run script's Python runtime too
            exact = exact and sorted(p[0] for p in tree.paths if len(p) == 1) == list(
                range(tree.widths[0]))
        assert (engine_problems(tree, fmt, draft=draft) == []) == exact, (fmt, draft)


@settings(max_examples=200, deadline=None)
@given(grown_trees(max_nodes=40))
def test_the_grow_flags_keep_the_rules(tree):
    # --max-rank 16 --max-depth 9 keep Medusa's parents; with --max-depth 8, EAGLE-1's order
    if tree.max_rank < 16 and tree.depth <= 9:
        assert engine_problems(tree, "triton", draft="medusa") == []
    if tree.max_rank < 16 and tree.depth <= 8:
        assert engine_problems(tree, "triton", draft="eagle") == []
    assert engine_problems(tree, "trtllm-yaml", draft="eagle") == []  # contiguous: any depth
