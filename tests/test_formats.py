"""Engine formats: every export string literally, engine constraints, parsing, and round trips."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt import Tree, TreeoptError
from treeopt.engines.forms import export, parse_tree
from treeopt.engines.papers import growmap
from treeopt.engines.registry import FORMATS, engine_problems
from treeopt.model.growth import grow
from treeopt.model.synthetic import synthetic_trace
from treeopt.pricing.tree_files import load_tree_arg

T7 = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
T7_LIST = "[[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]"
U4 = Tree.from_choices([[0], [1], [0, 0], [1, 0]])  # level-uniform: branching (2, 1)

T7_MASK = ("[[1, 0, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0, 0, 0], [1, 0, 1, 0, 0, 0, 0, 0], "
           "[1, 0, 0, 1, 0, 0, 0, 0], [1, 1, 0, 0, 1, 0, 0, 0], [1, 1, 0, 0, 0, 1, 0, 0], "
           "[1, 0, 1, 0, 0, 0, 1, 0], [1, 1, 0, 0, 1, 0, 0, 1]]")

EXPORTS = [
    (T7, "medusa", {}, T7_LIST),
    (T7, "hydra", {}, T7_LIST),
    (T7, "trtllm", {}, f'--medusa_choices="{T7_LIST}"'),
    (T7, "trtllm", {"draft": "eagle"}, f'--eagle_choices="{T7_LIST}"'),
    (T7, "trtllm-yaml", {"num_heads": 4},
     "speculative_config:\n"
     "  decoding_type: Medusa\n"
     "  max_draft_len: 7\n"
     "  num_medusa_heads: 4\n"
     f"  medusa_choices: {T7_LIST}\n"),
    # non-leaves per layer: root 1; depth 1: (0), (1); depth 2: (0,0); depth 3: none -> max 2
    (T7, "trtllm-yaml", {"draft": "eagle", "speculative_model": "/ckpt/eagle-7b"},
     "speculative_config:\n"
     "  decoding_type: Eagle\n"
     '  speculative_model: "/ckpt/eagle-7b"\n'
     "  max_draft_len: 3\n"
     "  max_total_draft_tokens: 7\n"
     "  max_non_leaves_per_layer: 2\n"
     f"  eagle_choices: {T7_LIST}\n"),
    (T7, "triton", {}, "{0}, {1}, {2}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}"),
    (U4, "vllm", {},
     '{"num_speculative_tokens": 4, "speculative_token_tree": "[(0,), (1,), (0, 0), (1, 0)]"}'),
    (T7, "growmap", {},
     '{"roots": [[0], [1, 2, 3], [4, 5, 6], [7]], '
     '"branches": [[3], [2, 1, 0], [1, 0, 0], [0]], '
     '"Successors": [[1, 2, 3], [4, 5], [6], [], [7], [], [], []], '
     f'"mask": {T7_MASK}, '
     '"depth": [0, 1, 1, 1, 2, 2, 2, 3], "size": 8}'),
    (T7, "paths", {}, "[[2], [0, 1], [1, 0], [0, 0, 0]]"),
    (T7, "json", {}, f'{{"format": "treeopt.tree/1", "choices": {T7_LIST}}}'),
]


@pytest.mark.parametrize("tree, fmt, kwargs, text", EXPORTS,
                         ids=[f"{e[1]}-{i}" for i, e in enumerate(EXPORTS)])
def test_export_literal_and_back(tree, fmt, kwargs, text):
    assert export(tree, fmt, **kwargs) == text
    assert parse_tree(text, fmt=fmt) == tree
    if fmt != "paths":  # a leaves-only list is not detectable: it needs --tree-format paths
        assert parse_tree(text) == tree


def test_every_format_has_a_literal_case():
    assert {e[1] for e in EXPORTS} == set(FORMATS)


def test_growmap_dict_is_json_serialisable():
    g = growmap(U4)
    assert g["Successors"] == [[1, 2], [3], [4], [], []] and g["size"] == 5
    assert json.loads(json.dumps(g)) == g


# ----- engine constraints (the rules themselves: tests/test_engines.py) -------------------------
def test_export_refuses_what_the_engine_cannot_run():
    with pytest.raises(TreeoptError, match="^cannot export to vllm: vLLM speculative_token_tree "
                                           ".* would not build this tree: vLLM's tree drafter"):
        export(T7, "vllm")
    with pytest.raises(TreeoptError, match=r"^cannot export to hydra: .* \[2\] is there without "
                                           r"\[1\]"):
        export(Tree.from_choices([[0], [2]]), "hydra")
    with pytest.raises(TreeoptError) as err:
        export(Tree.from_choices([[1], [11]]), "medusa", num_heads=0)
    assert str(err.value).count("; ") == 1  # both problems, in one message
    with pytest.raises(TreeoptError, match="unknown format 'onnx'; choose one of medusa, hydra"):
        export(T7, "onnx")
    with pytest.raises(TreeoptError, match="unknown draft type 'hydra'; choose one of medusa, eagle"):
        export(T7, "trtllm", draft="hydra")


def test_trtllm_yaml_needs_what_the_engine_needs():
    with pytest.raises(TreeoptError, match="^num_heads is required for TensorRT-LLM's Medusa "
                                           "YAML: its num_medusa_heads overrides"):
        export(T7, "trtllm-yaml")
    with pytest.raises(TreeoptError, match="^speculative_model is required"):
        export(T7, "trtllm-yaml", draft="eagle")


# ----- parsing ------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "[[0], [1], [0, 0]]",
    "((0,), (1,), (0, 0))",
    "medusa_choices = [[0], [1], [0, 0]]",
    "--medusa_choices [[0], [1], [0, 0]]",
    "--eagle_choices='[[0], [1], [0, 0]]'",
    "  {0},{1},{0,0}\n",
    '{"medusa_choices": [[0], [1], [0, 0]]}',
    '{"choices": [[1], [0, 0], [0]]}',
    "speculative_config:\n  eagle_choices: [[0], [1], [0, 0]]\n",
    "medusa_choices: [[0], [1], [0, 0]]\n",
])
def test_parse_accepts_every_written_form(text):
    fmt = "trtllm-yaml" if text.startswith("medusa_choices:") else None
    assert parse_tree(text, fmt=fmt).paths == ((0,), (1,), (0, 0))


@pytest.mark.parametrize("text, fmt, fragment", [
    ("", None, "t.txt: empty; expected a choices list such as [[0], [0, 0], [1]]"),
    ("[[0], [0, 0, 1]]", None,
     "t.txt: tree path [0, 0, 1] has no parent [0, 0] in the tree (a leaves-only list? pass "
     "--tree-format paths)"),
    ("[[0], [0]]", None, "t.txt: tree path [0] appears twice"),
    ("[[0], [-1]]", None, "t.txt: tree path [-1] has a negative rank -1"),
    ("[[0.5]]", None, "t.txt: tree path [0.5] has a non-integer rank 0.5"),
    ("[[True]]", None, "t.txt: tree path [True] has a non-integer rank True"),
    ("[[0], []]", None, "t.txt: tree path [] is empty"),
    ("[[0]] junk", None, "t.txt: not a tree in any known form (SyntaxError"),
    ("__import__('os')", None, "t.txt: not a tree in any known form"),  # never evaluated
    ("5", None, "t.txt: expected a list of paths, got a int"),
    ('{"a": 1}', None, "t.txt: JSON object with keys ['a'] is not a known tree form"),
    ('{"Successors": [[1], [5]]}', None, "growmap Successors must name every node 1..size-1"),
    ("speculative_config:\n  decoding_type: Medusa\n", None,
     "t.txt: YAML has no speculative_config.medusa_choices or eagle_choices"),
    ("[[0], 5]", "paths", "t.txt: leaf path 5 is not a non-empty list of ranks"),
    ("[[]]", "paths", "t.txt: leaf path [] is not a non-empty list of ranks"),
    ("[[0, -1]]", "paths", "t.txt: tree path [0, -1] has a negative rank -1"),
])
def test_parse_errors_name_the_source(text, fmt, fragment):
    with pytest.raises(TreeoptError) as err:
        parse_tree(text, fmt=fmt, source="t.txt")
    assert fragment in str(err.value)
    if "no parent" not in fragment:
        assert "--tree-format paths" not in str(err.value)


def test_load_tree_arg(tmp_path):
    tree_file = tmp_path / "t.json"
    tree_file.write_text(export(T7, "json"))
    assert load_tree_arg(tree_file) == T7
    leaves = tmp_path / "leaves.json"
    leaves.write_text(export(T7, "paths"))
    assert load_tree_arg(leaves, fmt="paths") == T7
    growth_file = tmp_path / "g.json"
    grow(synthetic_trace(200, heads=3, seed=1), method="empirical", max_nodes=5).save(growth_file)
    assert load_tree_arg(growth_file, size=3).size == 3
    with pytest.raises(TreeoptError, match=f"^{growth_file}: a growth file holds trees of 1..5 "
                                           "nodes; pick one with size N$"):
        load_tree_arg(growth_file)
    with pytest.raises(TreeoptError, match="tree size 6 is outside this growth's 0 … 5"):
        load_tree_arg(growth_file, size=6)
    with pytest.raises(TreeoptError, match=f"^size applies to growth files only, and {tree_file}"):
        load_tree_arg(tree_file, size=2)
    with pytest.raises(TreeoptError, match=f"^{tmp_path / 'none.txt'}: no such file$"):
        load_tree_arg(tmp_path / "none.txt")
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "treeopt.growth/1", "order": [[0]')
    with pytest.raises(TreeoptError, match=f"^{broken}: not valid JSON"):
        load_tree_arg(broken, size=1)
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x80")
    with pytest.raises(TreeoptError, match=f"^{binary}: not a text file holding a tree"):
        load_tree_arg(binary)


# ----- round trips --------------------------------------------------------------------------------
@st.composite
def trees(draw) -> Tree:
    raw = draw(st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=4), min_size=1,
                        max_size=8))
    return Tree.from_choices(sorted({tuple(p[:d]) for p in raw for d in range(1, len(p) + 1)}))


@st.composite
def uniform_trees(draw) -> Tree:
    from treeopt.model.growth import uniform_tree

    return uniform_tree(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))


@settings(max_examples=100, deadline=None)
@given(st.one_of(trees(), uniform_trees()), st.sampled_from(["medusa", "eagle"]),
       st.sampled_from([None, 2, 4]))
def test_import_export_round_trip(tree, draft, num_heads):
    carried = []
    for fmt in FORMATS:
        kwargs = {"draft": draft, "num_heads": num_heads, "speculative_model": "ckpt"}
        if engine_problems(tree, fmt, num_heads=num_heads, draft=draft):
            with pytest.raises(TreeoptError, match=f"^cannot export to {fmt}: "):
                export(tree, fmt, **kwargs)
            continue
        if fmt == "trtllm-yaml" and draft == "medusa" and num_heads is None:
            with pytest.raises(TreeoptError, match="^num_heads is required"):
                export(tree, fmt, **kwargs)
            continue
        text = export(tree, fmt, **kwargs)
        assert parse_tree(text, fmt=fmt) == tree
        if fmt != "paths":
            assert parse_tree(text) == tree
        carried.append(fmt)
    assert {"paths", "json"} <= set(carried)  # treeopt's own forms carry any non-empty tree
