"""The static speculation tree: a prefix-closed set of rank paths with an implicit root.

A node is a path of ranks ``(r_1, …, r_k)``: the r_1-th candidate of head 1, then the r_2-th
candidate of head 2 below it, and so on. The root, the base model's own next token, is implicit,
exactly as in Medusa's ``medusa_choices``. Token index 0 is the root; node i (in canonical order:
by depth, then path) is token index i + 1 in every derived array.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from treeopt.errors import TreeoptError

Path = tuple[int, ...]
MAX_RANK = int(np.iinfo(np.int16).max) - 1  # a rank trace records top-k ≤ 32767 (int16)


def _as_path(raw: object) -> Path:
    """Validate one choices entry and return it as a tuple of ints."""
    if not isinstance(raw, (list, tuple)):
        raise TreeoptError(f"tree path {raw!r} is not a list or tuple of ranks")
    if len(raw) == 0:
        raise TreeoptError("tree path [] is empty; the root is implicit and must not be listed")
    for r in raw:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)):
            raise TreeoptError(f"tree path {list(raw)!r} has a non-integer rank {r!r}")
        if r < 0:
            raise TreeoptError(f"tree path {list(raw)!r} has a negative rank {r}")
        if r > MAX_RANK:
            raise TreeoptError(f"tree path {list(raw)!r} has rank {r}; ranks go up to {MAX_RANK} "
                               "(the largest a rank trace records)")
    return tuple(int(r) for r in raw)


def canonical_key(path: Path) -> tuple[int, Path]:
    """Sort key of the canonical node order: by depth, then lexicographically by path."""
    return (len(path), path)


@dataclass(frozen=True)
class Tree:
    """An immutable, hashable, prefix-closed set of rank paths in canonical order.

    >>> t = Tree.from_choices([[1], [0], [0, 0]])
    >>> t.paths
    ((0,), (1,), (0, 0))
    >>> t.parents.tolist(), t.depths.tolist(), t.ranks.tolist()
    ([-1, -1, 0], [1, 1, 2], [0, 1, 0])
    """

    paths: tuple[Path, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.paths, tuple):
            raise TreeoptError(f"Tree(paths) needs a tuple of paths, got {type(self.paths).__name__}")
        object.__setattr__(self, "paths", tuple(_as_path(p) for p in self.paths))
        seen: set[Path] = set()
        for p in self.paths:
            if p in seen:
                raise TreeoptError(f"tree path {list(p)} appears twice")
            seen.add(p)
        for p in self.paths:
            if len(p) > 1 and p[:-1] not in seen:
                raise TreeoptError(f"tree path {list(p)} has no parent {list(p[:-1])} in the tree")
        for a, b in itertools.pairwise(self.paths):
            if canonical_key(b) < canonical_key(a):
                raise TreeoptError(f"Tree(paths) must be in canonical order (by depth, then path), "
                                   f"but {list(b)} comes after {list(a)}; use Tree.from_choices")

    # ----- construction -------------------------------------------------------------------
    @classmethod
    def from_choices(cls, choices: Iterable[Sequence[int]]) -> Tree:
        """Build from a choices list such as ``[[0], [0, 0], [1]]`` (lists or tuples)."""
        if isinstance(choices, (str, bytes)):
            raise TreeoptError("a choices list must be a list of paths, not a string")
        paths = [_as_path(raw) for raw in choices]
        seen: set[Path] = set()
        for p in paths:
            if p in seen:
                raise TreeoptError(f"tree path {list(p)} appears twice")
            seen.add(p)
        return cls(tuple(sorted(paths, key=canonical_key)))

    @classmethod
    def from_parents(cls, parents: Sequence[int]) -> Tree:
        """Build from a parent array: ``parents[i]`` is node i's parent, -1 for the root.

        Children take ranks 0, 1, … in the order they appear.

        >>> Tree.from_parents([-1, -1, 0]).paths
        ((0,), (1,), (0, 0))
        """
        paths: list[Path] = []
        n_children: dict[int, int] = {}
        for i, raw in enumerate(parents):
            if isinstance(raw, bool) or not isinstance(raw, (int, np.integer)):
                raise TreeoptError(f"parent array entry {i} is {raw!r}: parents must be integers")
            p = int(raw)
            if p < -1 or p >= i:
                raise TreeoptError(
                    f"parent array entry {i} is {p}: a parent must be -1 (the root) "
                    f"or an earlier node index"
                )
            rank = n_children.get(p, 0)
            n_children[p] = rank + 1
            paths.append((rank,) if p == -1 else (*paths[p], rank))
        return cls.from_choices(paths)

    @classmethod
    def chain(cls, depth: int) -> Tree:
        """The top-1 chain of a given depth.

        >>> Tree.chain(3).paths
        ((0,), (0, 0), (0, 0, 0))
        """
        return cls(tuple((0,) * d for d in range(1, depth + 1)))

    # ----- sizes --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.paths)

    def __contains__(self, path: object) -> bool:
        return isinstance(path, tuple) and path in self._index

    @property
    def size(self) -> int:
        """Number of nodes, the root excluded."""
        return len(self.paths)

    @property
    def num_tokens(self) -> int:
        """Tokens verified per step: the nodes plus the root."""
        return len(self.paths) + 1

    @property
    def depth(self) -> int:
        """Depth of the deepest node (0 for the empty tree)."""
        return len(self.paths[-1]) if self.paths else 0

    @property
    def max_rank(self) -> int:
        """Largest rank used anywhere (-1 for the empty tree)."""
        return max((max(p) for p in self.paths), default=-1)

    @functools.cached_property
    def is_chain(self) -> bool:
        """One node per depth, each of rank 0: the top-1 chain (the empty tree included).

        >>> Tree.chain(3).is_chain, Tree.from_choices([[0], [1]]).is_chain, Tree(()).is_chain
        (True, False, True)
        """
        return self.max_rank <= 0 and self.size == self.depth

    def as_choices(self) -> list[list[int]]:
        """The choices list, as Medusa's ``medusa_choices``."""
        return [list(p) for p in self.paths]

    # ----- derived arrays (pure functions of the paths, cached) ---------------------------
    @functools.cached_property
    def _index(self) -> dict[Path, int]:
        return {p: i for i, p in enumerate(self.paths)}

    @functools.cached_property
    def parents(self) -> npt.NDArray[np.int64]:
        """Parent node index of each node, -1 for children of the root."""
        idx = self._index
        return _frozen([idx[p[:-1]] if len(p) > 1 else -1 for p in self.paths])

    @functools.cached_property
    def depths(self) -> npt.NDArray[np.int64]:
        """Depth of each node (children of the root have depth 1)."""
        return _frozen([len(p) for p in self.paths])

    @functools.cached_property
    def ranks(self) -> npt.NDArray[np.int64]:
        """Rank of each node among its head's candidates (its path's last entry)."""
        return _frozen([p[-1] for p in self.paths])

    @functools.cached_property
    def position_offsets(self) -> npt.NDArray[np.int64]:
        """Position offset of each token, root first: ``[0, depth_1, …, depth_n]``."""
        return _frozen([0, *self.depths.tolist()])

    @functools.cached_property
    def attention_mask(self) -> npt.NDArray[np.bool_]:
        """``[n+1, n+1]`` mask, root first: each token sees itself and its ancestors.

        >>> Tree.from_choices([[0], [1], [0, 0]]).attention_mask.astype(int).tolist()
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
        """
        n = len(self.paths)
        mask = np.zeros((n + 1, n + 1), dtype=bool)
        mask[:, 0] = True
        for i in range(n):
            mask[i + 1, i + 1] = True
            parent = int(self.parents[i])
            if parent >= 0:
                mask[i + 1] |= mask[parent + 1]
        mask.setflags(write=False)
        return mask

    @functools.cached_property
    def leaves(self) -> tuple[Path, ...]:
        """Paths with no child, in canonical order."""
        has_child = {p[:-1] for p in self.paths if len(p) > 1}
        return tuple(p for p in self.paths if p not in has_child)

    @functools.cached_property
    def retrieve_indices(self) -> npt.NDArray[np.int64]:
        """One row per leaf: token indices from the root to the leaf, padded with -1.

        >>> Tree.from_choices([[0], [1], [0, 0]]).retrieve_indices.tolist()
        [[0, 2, -1], [0, 1, 3]]
        """
        out = np.full((len(self.leaves), self.depth + 1), -1, dtype=np.int64)
        for row, leaf in enumerate(self.leaves):
            out[row, 0] = 0
            for d in range(1, len(leaf) + 1):
                out[row, d] = self._index[leaf[:d]] + 1
        out.setflags(write=False)
        return out

    @functools.cached_property
    def widths(self) -> tuple[int, ...]:
        """Number of nodes at each depth 1 … depth.

        >>> Tree.from_choices([[0], [1], [0, 0]]).widths
        (2, 1)
        """
        return tuple(int(c) for c in np.bincount(self.depths, minlength=self.depth + 1)[1:])

    @functools.cached_property
    def child_table(self) -> npt.NDArray[np.int64]:
        """``[n+1, max_rank+1]``: token index of the child of token i with rank r, or -1."""
        table = np.full((len(self.paths) + 1, self.max_rank + 1), -1, dtype=np.int64)
        for i, p in enumerate(self.paths):
            table[int(self.parents[i]) + 1, p[-1]] = i + 1
        table.setflags(write=False)
        return table

    def children(self, path: Path) -> list[Path]:
        """Children of ``path`` (``()`` for the root), in rank order."""
        return [p for p in self.paths if len(p) == len(path) + 1 and p[:-1] == path]

    def is_contiguous(self) -> bool:
        """True when the children of every node have ranks 0 … m-1 (Hydra's assumption)."""
        groups: dict[Path, list[int]] = {}
        for p in self.paths:
            groups.setdefault(p[:-1], []).append(p[-1])
        return all(sorted(r) == list(range(len(r))) for r in groups.values())

    def prefix(self, n: int) -> Tree:
        """The tree made of the first ``n`` paths in canonical order (prefix-closed)."""
        return Tree(self.paths[:n])

    # ----- drawing ------------------------------------------------------------------------
    def draw(self) -> str:
        """A text drawing, one node per line.

        >>> print(Tree.from_choices([[0], [1], [0, 0]]).draw())
        ● root
        ├── 0
        │   └── 0
        └── 1
        """
        lines = ["● root"]

        def walk(path: Path, indent: str) -> None:
            kids = self.children(path)
            for j, kid in enumerate(kids):
                last = j == len(kids) - 1
                lines.append(f"{indent}{'└── ' if last else '├── '}{kid[-1]}")
                walk(kid, indent + ("    " if last else "│   "))

        walk((), "")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Tree(size={self.size}, depth={self.depth}, widths={list(self.widths)})"


def _frozen(values: Sequence[int]) -> npt.NDArray[np.int64]:
    arr = np.asarray(values, dtype=np.int64).reshape(-1)
    arr.setflags(write=False)
    return arr
