"""``HeadsConfig.max_match`` means what the registry of drafter kinds says it means for a kind
(prompt lookup's longest n-gram, the n-gram trie's depth), and no module outside the registry
tells the n-gram kinds apart by name."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from treeopt.cli.core import _fill_lookup
from treeopt.engines.lookup import recorded_lookup, recorded_trie
from treeopt.errors import TreeoptError
from treeopt.registry.kinds import KINDS

TRIE = {"kind": "ngram-trie", "depth": 3, "min_match": 1, "max_match": 18, "match_type": "bfs"}
LOOKUP = {"kind": "prompt-lookup", "depth": 3, "min_match": 2, "max_match": 4}


def test_the_registry_says_what_max_match_sets():
    assert KINDS["prompt-lookup"].max_match == "max_n"
    assert KINDS["ngram-trie"].max_match == "max_trie_depth"
    assert KINDS["ngram-trie"].match_types == ("bfs", "prob")
    assert KINDS["prompt-lookup"].match_types == ()
    assert all(not k.max_match for k in KINDS.values() if not k.lookup)
    assert {k.max_match for k in KINDS.values() if k.hybrid} == {"max_n"}


def test_a_trie_depth_is_no_longest_n_gram():
    assert recorded_lookup(TRIE) is None
    assert recorded_lookup(LOOKUP) == (2, 4)
    assert recorded_trie(TRIE).max_trie_depth == 18 and recorded_trie(LOOKUP) is None


def _args(**given) -> argparse.Namespace:
    return argparse.Namespace(**{"tree": "g.json", "draft": None, "min_n": None, "max_n": None,
                                 **given})


def test_export_of_a_trie_does_not_set_max_n_to_the_trie_depth():
    args = _args()
    assert _fill_lookup(args, TRIE)
    assert args.trie.max_trie_depth == 18 and args.max_n != 18
    args = _args()
    assert _fill_lookup(args, LOOKUP) and (args.min_n, args.max_n, args.trie) == (2, 4, None)


def test_max_n_given_for_a_trie_is_refused():
    with pytest.raises(TreeoptError, match="--min-n and --max-n set prompt lookup's n-grams"):
        _fill_lookup(_args(max_n=5), TRIE)


def test_no_module_outside_the_registry_compares_n_gram_kind_names():
    root = Path(__file__).resolve().parents[1] / "treeopt"
    compare = re.compile(r"""[!=]=\s*["'](prompt-lookup|ngram-trie)["']|"""
                         r"""["'](prompt-lookup|ngram-trie)["']\s*[!=]=""")
    found = [f"{p.relative_to(root)}:{n}" for p in sorted(root.rglob("*.py"))
             if p.parent.name not in ("demo", "registry")
             for n, line in enumerate(p.read_text().splitlines(), 1) if compare.search(line)]
    assert found == []
