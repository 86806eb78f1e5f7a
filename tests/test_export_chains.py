"""MTP and suffix-decoding drafters exported as each engine's chain config (vLLM ``mtp`` /
``suffix``, TensorRT-LLM ``MTPDecodingConfig`` / ``SADecodingConfig``, SGLang NEXTN): exact
texts from the library, from ``treeopt export`` on a growth and a selection, and on the app's
Export page, where a tab that cannot export says why in one line."""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from treeopt.cli import main
from treeopt.engines.chain_forms import export_chain
from treeopt.files import dumps
from treeopt.model.growth import Growth
from treeopt.model.tree import Tree
from treeopt.pricing.costs import StepLatency
from treeopt.pricing.throughput import select
from treeopt.workbench.export_tabs import chain_tabs, describe

MTP = {"kind": "mtp", "depth": 3, "num_layers": 1}
SUFFIX = {"kind": "suffix", "depth": 3, "max_match": 16, "max_spec_factor": 2.0,
          "max_spec_offset": 0.0, "min_token_prob": 0.2, "max_cached_requests": 100}
BRANCHING = Tree.from_choices([[0], [1], [0, 0]])


def test_mtp_in_each_engines_form():
    assert export_chain("mtp", "vllm", Tree.chain(3), drafter=MTP) == (
        '{"method": "mtp", "num_speculative_tokens": 3}\n')
    assert export_chain("mtp", "trtllm-yaml", Tree.chain(3), drafter=MTP) == (
        "speculative_config:\n  decoding_type: MTP\n  max_draft_len: 3\n")
    assert export_chain("mtp", "sglang", BRANCHING, drafter=MTP) == (  # the chain of depth 2
        "--speculative-algorithm NEXTN --speculative-num-steps 2 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 3\n")
    with pytest.raises(Exception, match="max_draft_len 3 must equal num_nextn_predict_layers 2"):
        export_chain("mtp", "trtllm-yaml", Tree.chain(3), drafter={**MTP, "num_layers": 2})


def test_suffix_decoding_in_each_engines_form():
    assert json.loads(export_chain("suffix", "vllm", Tree.chain(4), drafter=SUFFIX)) == {
        "method": "suffix", "num_speculative_tokens": 4, "suffix_decoding_max_tree_depth": 16,
        "suffix_decoding_max_cached_requests": 100, "suffix_decoding_max_spec_factor": 2.0,
        "suffix_decoding_min_token_prob": 0.2}
    assert export_chain("suffix", "trtllm-yaml", Tree.chain(4), drafter=SUFFIX) == (
        "speculative_config:\n  decoding_type: SA\n  max_draft_len: 4\n"
        "  max_matching_ngram_size: -1\n")
    with pytest.raises(Exception, match="^SGLang has no suffix decoding"):
        export_chain("suffix", "sglang", Tree.chain(4), drafter=SUFFIX)


def growth_of(drafter: dict, heads: dict) -> Growth:
    meta = {"trace_meta": {"head_kind": drafter["kind"], "num_heads": 3,
                           "heads_config": {"kind": drafter["kind"], "num_heads": 3, **heads}}}
    return Growth("empirical", "none", ((0,), (0, 0), (0, 0, 0)),
                  np.array([1.0, 1.8, 2.4, 2.6]), {}, meta=meta)


MTP_GROWTH = growth_of(MTP, {"num_layers": 1})
SUFFIX_GROWTH = growth_of(SUFFIX, {k: v for k, v in SUFFIX.items() if k not in ("kind", "depth")})


def cli(*args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def test_export_writes_an_mtp_growths_chain_configs(tmp_path):
    MTP_GROWTH.save(tmp_path / "g.json")
    assert cli("export", "--tree", tmp_path / "g.json", "--size", 2, "--format", "vllm")[1] == (
        '{"method": "mtp", "num_speculative_tokens": 2}\n')
    code, out, err = cli("export", "--tree", tmp_path / "g.json", "--size", 3, "--format",
                         "sglang")
    assert (code, out) == (0, "--speculative-algorithm NEXTN --speculative-num-steps 3 "
                              "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4\n")
    assert "note: NEXTN's draft model defaults to the target checkpoint's own MTP layer" in err
    code, _, err = cli("export", "--tree", tmp_path / "g.json", "--size", 3, "--format",
                       "medusa")
    assert code == 2 and err.strip().splitlines() == [
        "treeopt export: error: an MTP drafter is exported as a chain config: choose the format "
        "vllm, trtllm-yaml, sglang, not medusa"]


def test_export_writes_a_suffix_selections_schedule(tmp_path):
    latency = StepLatency.from_points([(b, 64, q + 1, (10 + b * q) / 1e3) for b in (1, 8)
                                       for q in range(4)], "hand-made")
    selection = select(SUFFIX_GROWTH, latency, batch=[1, 8], context=[64])
    (tmp_path / "s.json").write_text(dumps(selection.to_json()))
    code, _, err = cli("export", "--tree", tmp_path / "s.json", "--format", "vllm",
                       "--schedule-dir", tmp_path / "out")
    assert code == 0, err
    files = sorted(p.name for p in (tmp_path / "out").iterdir())
    ranges = json.loads((tmp_path / "out" / "schedule.json").read_text())["ranges"]
    assert files == sorted([f"vllm.batch{r['min_batch']}-{r['max_batch']}.json"
                            for r in ranges if r["size"]] + ["schedule.json"])
    first = json.loads((tmp_path / "out" / files[-1]).read_text())  # after schedule.json
    assert first["method"] == "suffix" and first["suffix_decoding_max_tree_depth"] == 16


def test_chain_tabs_export_first_and_say_why_in_one_line():
    tabs = chain_tabs(Tree.chain(3), SUFFIX)
    assert [(t.title, t.text is None) for t in tabs] == [
        ("vLLM", False), ("TRT-LLM YAML", False), ("SGLang", True)]
    assert tabs[2].problem == ("SGLang has no suffix decoding (its NGRAM drafter is a trie of "
                               "recent request tails): export vllm or trtllm-yaml")
    assert chain_tabs(Tree.chain(3), {"kind": "eagle"}) == []
    assert describe(BRANCHING, MTP) == ("MTP drafter: the engines draft its chains, of 2 tokens "
                                        "for this tree of 3 nodes: each engine's config for it.")


def test_export_page_writes_an_mtp_selections_chain_configs():
    from apptest import assert_clean, open_page

    latency = StepLatency.from_points([(1, 64, q + 1, 0.01) for q in range(4)], "hand-made")
    selection = select(MTP_GROWTH, latency, batch=[1], context=[64])
    at = open_page("export")
    at.radio(key="export_source").set_value("A selection file").run()
    at.file_uploader(key="export_selection").set_value(
        ("sel.json", dumps(selection.to_json()).encode(), "application/json")).run()
    assert_clean(at)
    assert [c.value for c in at.code] == [
        '{"method": "mtp", "num_speculative_tokens": 3}',
        "speculative_config:\n  decoding_type: MTP\n  max_draft_len: 3",
        "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 4"]
