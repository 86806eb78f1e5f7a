"""Tree: exact derived arrays of small trees, invalid input, and properties of random trees."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt import Tree, TreeoptError

# T7: the 7-node tree used throughout. Canonical order (token index = node index + 1):
#   node 0 (0,)  tok 1      node 3 (0,0)  tok 4      node 6 (0,0,0) tok 7
#   node 1 (1,)  tok 2      node 4 (0,1)  tok 5
#   node 2 (2,)  tok 3      node 5 (1,0)  tok 6
T7_CHOICES = [[0, 0, 0], [1, 0], [2], [0], [0, 1], [1], [0, 0]]  # deliberately unordered


@pytest.fixture
def t7() -> Tree:
    return Tree.from_choices(T7_CHOICES)


# ----- exact values -------------------------------------------------------------------------------
def test_t7_canonical_paths_and_sizes(t7):
    assert t7.paths == ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0))
    assert (t7.size, len(t7), t7.num_tokens, t7.depth, t7.max_rank) == (7, 7, 8, 3, 2)
    assert t7.as_choices() == [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
    assert repr(t7) == "Tree(size=7, depth=3, widths=[3, 3, 1])"


def test_t7_parents_depths_ranks_offsets(t7):
    assert t7.parents.tolist() == [-1, -1, -1, 0, 0, 1, 3]
    assert t7.depths.tolist() == [1, 1, 1, 2, 2, 2, 3]
    assert t7.ranks.tolist() == [0, 1, 2, 0, 1, 0, 0]
    assert t7.position_offsets.tolist() == [0, 1, 1, 1, 2, 2, 2, 3]


def test_t7_attention_mask(t7):
    assert t7.attention_mask.dtype == np.bool_
    assert t7.attention_mask.astype(int).tolist() == [
        # root (0) (1) (2) (00) (01) (10) (000)
        [1, 0, 0, 0, 0, 0, 0, 0],  # root
        [1, 1, 0, 0, 0, 0, 0, 0],  # (0,)
        [1, 0, 1, 0, 0, 0, 0, 0],  # (1,)
        [1, 0, 0, 1, 0, 0, 0, 0],  # (2,)
        [1, 1, 0, 0, 1, 0, 0, 0],  # (0,0)
        [1, 1, 0, 0, 0, 1, 0, 0],  # (0,1)
        [1, 0, 1, 0, 0, 0, 1, 0],  # (1,0)
        [1, 1, 0, 0, 1, 0, 0, 1],  # (0,0,0)
    ]


def test_three_node_mask_literal():
    t = Tree.from_choices([[0], [0, 0], [0, 0, 0]])
    assert t.attention_mask.astype(int).tolist() == [
        [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]


def test_t7_leaves_retrieve_widths_children(t7):
    assert t7.leaves == ((2,), (0, 1), (1, 0), (0, 0, 0))
    assert t7.retrieve_indices.tolist() == [
        [0, 3, -1, -1],  # (2,)
        [0, 1, 5, -1],   # (0,1)
        [0, 2, 6, -1],   # (1,0)
        [0, 1, 4, 7],    # (0,0,0)
    ]
    assert t7.widths == (3, 3, 1)
    assert t7.children(()) == [(0,), (1,), (2,)]
    assert t7.children((0,)) == [(0, 0), (0, 1)]
    assert t7.children((2,)) == []
    assert t7.child_table.tolist() == [
        [1, 2, 3], [4, 5, -1], [6, -1, -1], [-1, -1, -1],
        [7, -1, -1], [-1, -1, -1], [-1, -1, -1], [-1, -1, -1]]


def test_t7_draw(t7):
    assert t7.draw() == "\n".join([
        "● root",
        "├── 0",
        "│   ├── 0",
        "│   │   └── 0",
        "│   └── 1",
        "├── 1",
        "│   └── 0",
        "└── 2",
    ])


def test_derived_arrays_are_read_only(t7):
    for arr in (t7.parents, t7.depths, t7.ranks, t7.position_offsets, t7.attention_mask,
                t7.retrieve_indices, t7.child_table):
        with pytest.raises(ValueError):
            arr.flat[0] = 5


def test_contains_prefix_contiguous(t7):
    assert (0, 1) in t7 and (0, 2) not in t7 and [0] not in t7
    assert t7.prefix(4).paths == ((0,), (1,), (2,), (0, 0))
    assert t7.is_contiguous()
    assert not Tree.from_choices([[0], [2]]).is_contiguous()
    assert not Tree.from_choices([[0], [0, 1]]).is_contiguous()


def test_empty_tree_and_chain():
    empty = Tree.from_choices([])
    assert (empty.size, empty.depth, empty.max_rank, empty.widths) == (0, 0, -1, ())
    assert empty.attention_mask.astype(int).tolist() == [[1]]
    assert empty.position_offsets.tolist() == [0]
    assert empty.draw() == "● root"
    assert Tree.chain(2) == Tree.from_choices([[0, 0], [0]])
    assert Tree.chain(2).retrieve_indices.tolist() == [[0, 1, 2]]


def test_equality_and_hash_follow_the_paths(t7):
    same = Tree.from_choices(reversed(T7_CHOICES))
    assert same == t7 and hash(same) == hash(t7)
    assert len({t7, same, Tree.chain(3)}) == 2
    assert Tree.from_choices([(np.int64(0),), [np.int16(0), 1]]).paths == ((0,), (0, 1))


def test_from_parents_exact():
    # parents of T7 in canonical order give T7 back (T7 is contiguous)
    assert Tree.from_parents([-1, -1, -1, 0, 0, 1, 3]).paths == (
        (0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0))
    # children take ranks in order of appearance
    assert Tree.from_parents([-1, 0, -1, 0]).paths == ((0,), (1,), (0, 0), (0, 1))
    assert Tree.from_parents(np.array([-1, 0])).paths == ((0,), (0, 0))
    assert Tree.from_parents([]).paths == ()


# ----- invalid input ------------------------------------------------------------------------------
@pytest.mark.parametrize("choices, fragment", [
    ([[0], [1, 0]], "tree path [1, 0] has no parent [1]"),
    ([[0], [0, 0, 1]], "tree path [0, 0, 1] has no parent [0, 0]"),
    ([[0], [0]], "tree path [0] appears twice"),
    ([[0], (0,)], "tree path [0] appears twice"),
    ([[0], [0, -1]], "tree path [0, -1] has a negative rank -1"),
    ([[-2]], "tree path [-2] has a negative rank -2"),
    ([[0], [0, 1.0]], "tree path [0, 1.0] has a non-integer rank 1.0"),
    ([[0.5]], "tree path [0.5] has a non-integer rank 0.5"),
    ([[True]], "tree path [True] has a non-integer rank True"),
    ([[0], [0, False]], "tree path [0, False] has a non-integer rank False"),
    ([["0"]], "tree path ['0'] has a non-integer rank '0'"),
    ([[0], []], "tree path [] is empty"),
    ([[0], 1], "tree path 1 is not a list or tuple of ranks"),
    ([[0], "01"], "tree path '01' is not a list or tuple of ranks"),
])
def test_from_choices_rejects_bad_paths(choices, fragment):
    with pytest.raises(TreeoptError) as err:
        Tree.from_choices(choices)
    assert fragment in str(err.value)


def test_from_choices_rejects_a_string():
    with pytest.raises(TreeoptError, match="not a string"):
        Tree.from_choices("[[0]]")


@pytest.mark.parametrize("paths, fragment", [
    (((1,), (0,)), "but [0] comes after [1]"),
    (((0, 0), (0,)), "but [0] comes after [0, 0]"),
    (((0,), (-1,)), "tree path [-1] has a negative rank -1"),
    (((),), "tree path [] is empty"),
    (((0,), (0,)), "tree path [0] appears twice"),
    (((0,), (1, 0)), "tree path [1, 0] has no parent [1]"),
])
def test_constructor_validates_like_from_choices(paths, fragment):
    with pytest.raises(TreeoptError) as err:
        Tree(paths)
    assert fragment in str(err.value)


@pytest.mark.parametrize("parents, fragment", [
    ([0], "parent array entry 0 is 0"),
    ([-1, 1], "parent array entry 1 is 1"),
    ([-1, 2, 0], "parent array entry 1 is 2"),
    ([-2], "parent array entry 0 is -2"),
    ([-1, 0.5], "parent array entry 1 is 0.5"),
    ([-1, True], "parent array entry 1 is True"),
    ([-1, "0"], "parent array entry 1 is '0'"),
    ([-1, None], "parent array entry 1 is None"),
])
def test_from_parents_rejects_bad_arrays(parents, fragment):
    with pytest.raises(TreeoptError) as err:
        Tree.from_parents(parents)
    assert fragment in str(err.value)


# ----- properties ---------------------------------------------------------------------------------
@st.composite
def trees(draw, *, max_depth: int = 4, max_rank: int = 4, max_paths: int = 8) -> Tree:
    """A random prefix-closed tree: random paths closed under taking prefixes."""
    raw = draw(st.lists(st.lists(st.integers(0, max_rank - 1), min_size=1, max_size=max_depth),
                        max_size=max_paths))
    closed = {tuple(p[:d]) for p in raw for d in range(1, len(p) + 1)}
    return Tree.from_choices(sorted(closed))


@settings(max_examples=100, deadline=None)
@given(trees())
def test_mask_rows_parents_and_offsets(t):
    mask = t.attention_mask
    assert mask.shape == (t.num_tokens, t.num_tokens)
    assert mask.sum(axis=1).tolist() == (t.position_offsets + 1).tolist()  # depth + 1 ones
    assert mask[:, 0].all() and np.diag(mask).all()
    assert not np.triu(mask, 1).any()  # a token never sees a later token
    assert all(t.parents[i] < i for i in range(t.size))  # parents precede children
    for i, p in enumerate(t.paths):
        if len(p) > 1:
            assert t.paths[t.parents[i]] == p[:-1]
    assert sum(t.widths) == t.size
    # every retrieve row is a root-to-leaf walk of the mask
    for row, leaf in zip(t.retrieve_indices.tolist(), t.leaves, strict=True):
        toks = [x for x in row if x >= 0]
        assert len(toks) == len(leaf) + 1 and row[len(toks):] == [-1] * (len(row) - len(toks))
        assert np.flatnonzero(mask[toks[-1]]).tolist() == toks


@settings(max_examples=100, deadline=None)
@given(trees())
def test_from_parents_round_trips_contiguous_trees(t):
    rebuilt = Tree.from_parents(t.parents)
    assert rebuilt.parents.tolist() == t.parents.tolist()  # same shape, always
    assert rebuilt.is_contiguous()
    if t.is_contiguous():
        assert rebuilt == t


@settings(max_examples=50, deadline=None)
@given(trees())
def test_every_canonical_prefix_is_a_tree(t):
    for n in range(t.size + 1):
        assert t.prefix(n).size == n
    assert Tree.from_choices(t.as_choices()) == t
