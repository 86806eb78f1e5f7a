"""The engine registry: each rule's exact verdict, and `grow` constraints that always keep it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.engines.registry import ENGINES, FORMATS, engine, engine_problems, engines_for
from treeopt.errors import TreeoptError
from treeopt.model.growth import grow
from treeopt.model.synthetic import synthetic_trace
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree

CHAIN_17 = Tree.chain(17)


@pytest.mark.parametrize("choices, fmt, draft, expected", [
    # Hydra's grounded heads: children 0..m-1, and the siblings with children come first
    ([[0], [1], [1, 0]], "hydra", "medusa",
     ["[1] has children but [0] has none: Hydra extends the first e children of a node, so they "
      "would be drafted below [0] (grow with --constraint grounded)"]),
    ([[0], [1], [0, 0], [1, 0]], "hydra", "medusa", []),
    ([[0], [2]], "hydra", "medusa",
     ["[2] is there without [1]: Hydra drafts the children of a node as the top-m of its head "
      "(grow with --constraint grounded)"]),
    ([[0], [12]], "hydra", "medusa",
     ["[12] is there without [1]: Hydra drafts the children of a node as the top-m of its head "
      "(grow with --constraint grounded)"]),
    # Medusa: the top-10 of each head
    ([[0], [10]], "medusa", "medusa",
     ["[10] has rank 10, but the reference code keeps only the top-10 candidates of each head "
      "(ranks 0..9) (grow with --max-rank 10)"]),
    ([[9], [9, 9]], "medusa", "medusa", []),
    # TensorRT-LLM's C++ runtime: ranks up to 16, a node's parent found by its 4-bit key
    ([[0], [0, 15]], "triton", "medusa", []),
    ([[0], [1], [0, 16], [1, 0], [0, 16, 0]], "triton", "medusa",
     ["TensorRT-LLM's C++ runtime gives [0, 16] and [1, 0] the same key (4 bits per level, "
      "shifted in 32 bits) and sorts equal keys in no fixed order, so for Medusa it may build "
      "[1, 0, 0] where the tree has [0, 16, 0]: another tree "
      "(grow with --max-rank 16 --max-depth 9)"]),
    ([[0], [0, 17]], "triton", "medusa",
     ["[0, 17] has rank 17, but TensorRT-LLM's C++ runtime refuses a rank above 16 (ranks 0..16) "
      "(grow with --max-rank 17)"]),
    # ... and its Python runtime reads depth-1 ranks as 0..m-1
    ([[1]], "triton", "medusa", []),
    ([[1]], "trtllm", "medusa",
     ["[1] is there without [0]: TensorRT-LLM's Python runtime (_medusa_setup) reads the depth-1 "
      "ranks as 0..m-1 (grow with --constraint contiguous)"]),
    ([[0], [0, 1]], "trtllm", "medusa", []),
    # TensorRT-LLM's static EAGLE tree: the top-k children of every node
    ([[0], [0, 1]], "trtllm-yaml", "eagle",
     ["[0, 1] is there without [0, 0]: TensorRT-LLM's PyTorch backend (SpecTreeManager) drafts "
      "the top-k children of every node of its static EAGLE tree in order, so they must be ranks "
      "0..k-1 (grow with --constraint contiguous)"]),
    ([[0], [0, 1]], "trtllm-yaml", "medusa", []),
    # vLLM: level-uniform
    ([[0], [1], [0, 0]], "vllm", "medusa",
     ["vLLM's tree drafter needs a level-uniform tree (every node of a level with the same "
      "children 0..c-1), but depth 2 has children counts [0, 1] under its 2 parents "
      "(grow with --constraint uniform)"]),
    ([[0], [1], [0, 0], [1, 0]], "vllm", "medusa", []),
    # treeopt's own forms take anything but nothing
    ([[7, 3]][:0], "paths", "medusa",
     ["the tree is empty: every engine needs at least one draft node"]),
    ([[0], [1], [1, 0]], "json", "medusa", []),
])
def test_each_rule_exactly(choices, fmt, draft, expected):
    tree = Tree.from_choices(choices)
    assert engine_problems(tree, fmt, draft=draft) == expected


def test_depth_limits():
    # speculativeChoicesUtils.cpp refuses a path longer than 16; a chain's keys never collide
    assert engine_problems(Tree.chain(17), "triton") == [
        "the tree is 17 deep, but TensorRT-LLM's C++ runtime refuses a path longer than 16 (its "
        "64-bit keys hold 16 levels of 4 bits) (grow with --max-depth 16)"]
    assert engine_problems(Tree.chain(16), "triton") == []
    assert engine_problems(Tree.chain(3), "medusa", num_heads=2) == [
        "the tree is 3 deep but there are only 2 heads (grow with --max-depth 2)"]
    assert engine_problems(Tree.chain(3), "paths", num_heads=2) == []


def test_registry_is_whole():
    assert FORMATS == ("medusa", "hydra", "trtllm", "trtllm-yaml", "triton", "vllm", "growmap",
                       "paths", "json")
    assert engine("trtllm-yaml", "eagle").draft == "eagle"
    assert engine("trtllm-yaml", "medusa").draft == "medusa"
    assert engine("triton", "eagle").draft == "eagle"  # eagle_choices: EAGLE-1's rules
    assert engine("vllm", "eagle").draft is None  # one entry serves both drafts
    for e in ENGINES:
        assert e.versions, f"{e.label} names no engine version it was checked against"
        assert all(r.grow_flags or r.name == "at least one node" for r in e.rules)
    with pytest.raises(TreeoptError, match="unknown format 'onnx'"):
        engine("onnx")


def test_engines_for_lists_every_engine_that_runs_it():
    labels = [e.label for e in engines_for(Tree.from_choices([[0], [1], [0, 0], [1, 0]]))]
    assert labels == ["medusa", "hydra", "trtllm --draft medusa", "trtllm --draft eagle",
                      "trtllm-yaml --draft medusa", "trtllm-yaml --draft eagle",
                      "triton --draft medusa", "triton --draft eagle", "vllm", "growmap", "paths",
                      "json"]
    assert [e.label for e in engines_for(CHAIN_17)] == [  # the C++ runtime refuses 17 levels
        "medusa", "hydra", "trtllm-yaml --draft eagle", "vllm", "growmap", "paths", "json"]


# ----- grow offers every constraint: the trees it grows always pass the engine ----------------
CONSTRAINED = {"grounded": ("hydra", "medusa"), "contiguous": ("trtllm-yaml", "eagle"),
               "uniform": ("vllm", "medusa")}


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(sorted(CONSTRAINED)),
       st.sampled_from(["empirical", "independent"]))
def test_grown_trees_keep_the_engine_rule(seed, constraint, method):
    trace = synthetic_trace(300, heads=3, top_k=6, seed=seed)
    growth = grow(trace, method=method, max_nodes=20, constraint=constraint)
    free = grow(trace, method=method, max_nodes=20)
    fmt, draft = CONSTRAINED[constraint]
    for n in range(1, growth.max_nodes + 1):
        assert engine_problems(growth.tree(n), fmt, draft=draft) == []
        if method == "empirical":  # the free growth is the exact optimum at every size
            assert growth.expected_accept_length[n] <= free.expected_accept_length[n] + 1e-12


def test_grounded_growth_takes_a_worthless_bridge_to_a_valuable_node():
    # head-1 rank 1 then head-2 rank 0 is common, but (0, 0) is never right: Hydra can only
    # draft (1, 0) once (0, 0) is in the tree
    trace = RankTrace(np.array([[0, 5]] * 3 + [[1, 0]] * 2, np.int16), {"top_k": 6})
    free = grow(trace, method="empirical", max_nodes=4, max_rank=2)
    assert free.order == ((0,), (1,), (1, 0))
    grounded = grow(trace, method="empirical", max_nodes=4, max_rank=2, constraint="grounded")
    assert grounded.order == ((0,), (1,), (0, 0), (1, 0))
    assert grounded.expected_accept_length.tolist() == pytest.approx([1.0, 1.6, 2.0, 2.0, 2.4])
    assert engine_problems(grounded.tree(4), "hydra") == []
