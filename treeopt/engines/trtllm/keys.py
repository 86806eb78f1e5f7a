"""What TensorRT-LLM's C++ runtime builds from a choices list, for Medusa and for EAGLE-1: its
node keys replayed.

Read off NVIDIA/TensorRT-LLM (the sources and what they do are in docs/engines.md):

- ``initTensorsFromChoices`` (cpp/tensorrt_llm/runtime/utils/speculativeChoicesUtils.cpp,
  b4f2086ddd2206a1f8b5f3d40885d7ce7d0c73fa) keys every node (:func:`trtllm_key`), sorts the
  nodes by depth then key — ``std::sort``, which leaves equal keys in no fixed order — and finds
  each node's parent by the parent's key among the nodes one level up, where a key held by
  several nodes names the one sorted last.
- Medusa drafts a node as its head's top-``rank`` token, along those parent links.
- EAGLE-1 (``extracTopKsFromSuccessorsArray`` and ``copyOutputTokensIds`` in
  cpp/tensorrt_llm/kernels/speculativeDecoding/eagleDecodingKernels.cu,
  3585984b32cded5cc002d3087d3da4b0fd9fb8a5) takes the nodes of a level in sorted order, each
  drafting its top-k for its k children, and hands the tokens to the next level's nodes in
  sorted order.

:func:`cpp_difference` replays that for every order the sort may leave equal keys in.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import permutations, product
from math import factorial, prod

from treeopt.model.tree import Path, Tree

MAX_ORDERS = 5040  # orders of equal keys replayed at most; a tree with more is refused


def trtllm_key(path: Path) -> int:
    """The key TensorRT-LLM's C++ runtime gives the node at ``path`` (``computePrefix``).

    It ORs ``rank << 4·(len-1-i)`` into the key, the shift done on a 32-bit int: the hardware
    takes the shift amount modulo 32 (x86 ``shl``, Arm ``lslv``) and drops the bits past 31.
    The int is then widened into the 64-bit key with its sign, which copies bit 31 upwards, so
    the low 32 bits decide equality and order. Ranks 0..15 and depth ≤ 8 give every node its own
    key, in path order; rank 16 spills into the level above, and from depth 9 on the levels
    wrap onto each other.

    >>> trtllm_key((0, 16)) == trtllm_key((1, 0))  # rank 16 spills into the level above
    True
    >>> trtllm_key((16,) + (0,) * 7) == trtllm_key((0,) * 8)  # ... or out of the 32 bits
    True
    >>> trtllm_key((1,) + (0,) * 8) == trtllm_key((0,) * 8 + (1,))  # depth 9 wraps
    True
    """
    key = 0
    for i, rank in enumerate(path):
        key |= (rank << (4 * (len(path) - 1 - i)) % 32) & 0xFFFFFFFF
    return key


@dataclass(frozen=True)
class Difference:
    """A node of the tree the runtime does not build, what it builds instead, and why."""

    missing: Path  # a node of the tree that the runtime's tree lacks
    built: Path | None  # a node the runtime builds that the tree lacks (None: drafted off-path)
    shared: tuple[Path, Path] | None  # two nodes of one level with one key (None: none there)


def _levels(tree: Tree) -> list[list[Path]]:
    """The nodes of each depth 1..depth, in path order."""
    levels: list[list[Path]] = [[] for _ in range(tree.depth)]
    for p in tree.paths:
        levels[len(p) - 1].append(p)
    return levels


def _key_groups(level: list[Path]) -> list[list[Path]]:
    """The nodes of a level grouped by key, keys ascending."""
    groups: dict[int, list[Path]] = {}
    for p in level:
        groups.setdefault(trtllm_key(p), []).append(p)
    return [groups[k] for k in sorted(groups)]


def sort_orders(tree: Tree) -> Iterator[list[list[Path]]]:
    """Every order the runtime's sort may leave each level in (by key, equal keys any order)."""
    per_level = []
    for level in _levels(tree):
        groups = _key_groups(level)
        per_level.append([[p for g in choice for p in g]
                          for choice in product(*(permutations(g) for g in groups))])
    yield from product(*per_level)


def order_count(tree: Tree) -> int:
    """How many orders :func:`sort_orders` yields."""
    return prod(factorial(len(g)) for level in _levels(tree) for g in _key_groups(level))


def built_paths(order: list[list[Path]], *, eagle1: bool) -> list[Path | None]:
    """What the runtime drafts at each node, the levels sorted as in ``order``."""
    winner: list[dict[int, Path]] = [{trtllm_key(p): p for p in level} for level in order]

    def parent(p: Path) -> Path:  # the node the runtime attaches p to
        return () if len(p) == 1 else winner[len(p) - 2][trtllm_key(p[:-1])]

    built: dict[Path, Path | None] = {(): ()}
    for d, level in enumerate(order):
        if not eagle1:  # Medusa: the head's top-rank token, under the parent found by key
            for p in level:
                above = built[parent(p)]
                built[p] = None if above is None else above + (p[-1],)
            continue
        above_level = order[d - 1] if d else [()]
        kids = {q: sum(1 for p in level if parent(p) == q) for q in above_level}
        slots = [(q, j) for q in above_level for j in range(kids[q])]
        for p, (q, j) in zip(level, slots, strict=True):
            ctx = built[q]
            built[p] = ctx + (j,) if ctx is not None and parent(p) == q else None
    return [built[p] for level in order for p in level]


def cpp_difference(tree: Tree, *, eagle1: bool) -> Difference | None:
    """How the runtime's tree differs from ``tree`` in some order of equal keys (None: never).

    Remembered per tree: the formats that reach the C++ runtime (the run script, the Triton
    backend, MedusaDecodingConfig) ask it of one tree in turn, and a tree with many equal keys
    replays thousands of orders."""
    return _difference(tree.paths, eagle1)


@lru_cache(maxsize=256)
def _difference(paths: tuple[Path, ...], eagle1: bool) -> Difference | None:
    tree = Tree.from_choices(paths)
    levels = _levels(tree)
    for order in sort_orders(tree):
        built = built_paths(order, eagle1=eagle1)
        if None not in built and sorted(p for p in built if p) == sorted(tree.paths):
            continue
        got = {p for p in built if p is not None}
        missing = next(p for p in tree.paths if p not in got)
        ties = [g for lv in reversed(levels[:len(missing)]) for g in _key_groups(lv) if len(g) > 1]
        return Difference(missing, min(got - set(tree.paths), default=None),
                          (ties[0][0], ties[0][1]) if ties else None)
    return None
