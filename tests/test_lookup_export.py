"""Prompt-lookup settings exported in each engine's form: exact configs for k = 4, n 2…3, the
CLI from a prompt-lookup growth and selection, and the refusals."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess

import numpy as np
import pytest
import yaml

from treeopt.cli import main
from treeopt.engines.huggingface import prompt_lookup_kwargs
from treeopt.engines.lookup import LookupSetting, export_lookup, recorded_lookup
from treeopt.engines.sglang.flags import ngram_flags
from treeopt.engines.trtllm.configs import ngram_config, yaml_text
from treeopt.engines.trtllm.schedule import encode
from treeopt.engines.vllm.forms import ngram_config as vllm_ngram
from treeopt.errors import FieldError, TreeoptError
from treeopt.model.growth import Growth
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.profiling.table import LatencyRecord, LatencyTable
from treeopt.roofline import preset

SETTING = LookupSetting(k=4, min_n=2, max_n=3)
TRT_K4 = {"speculative_config": {"decoding_type": "NGram", "max_draft_len": 4,
                                 "max_matching_ngram_size": 3, "is_keep_all": True,
                                 "is_use_oldest": True, "is_public_pool": False},
          "disable_overlap_scheduler": True}
TRT_K4_YAML = """speculative_config:
  decoding_type: NGram
  max_draft_len: 4
  max_matching_ngram_size: 3
  is_keep_all: true
  is_use_oldest: true
  is_public_pool: false
disable_overlap_scheduler: true
"""
SGLANG_CHAIN = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "5",
                "--speculative-ngram-min-bfs-breadth", "1", "--speculative-ngram-max-bfs-breadth",
                "1"]


def test_each_engines_form_of_k4_n2_to_3():
    assert vllm_ngram(k=4, min_n=2, max_n=3) == {"method": "ngram", "num_speculative_tokens": 4,
                                                 "prompt_lookup_min": 2, "prompt_lookup_max": 3}
    assert prompt_lookup_kwargs(k=4, max_n=3) == {"prompt_lookup_num_tokens": 4,
                                                  "max_matching_ngram_size": 3}
    assert ngram_flags(k=4, min_n=2, max_n=3) == SGLANG_CHAIN + [
        "--speculative-ngram-min-match-window-size", "2",
        "--speculative-ngram-max-match-window-size", "3",
        "--speculative-ngram-branch-length", "7"]
    assert ngram_flags(k=4, min_n=2, max_n=3, generation="trie-depth") == SGLANG_CHAIN + [
        "--speculative-ngram-max-trie-depth", "7"]
    assert ngram_config(k=4, max_n=3) == TRT_K4
    assert yaml_text(ngram_config(k=4, max_n=3)) == TRT_K4_YAML
    assert export_lookup(Tree.chain(4), "trtllm-yaml", min_n=2, max_n=3) == TRT_K4_YAML
    assert yaml.safe_load(TRT_K4_YAML) == TRT_K4
    scheduled = yaml_text(ngram_config(k=4, max_n=3, schedule=encode([(1, 7, 4), (8, None, 2)])))
    assert yaml.safe_load(scheduled)["speculative_config"]["draft_len_schedule"] == {1: 4, 8: 2}
    with pytest.raises(TreeoptError, match="max_draft_len 4 is not the config's max_draft_len 3"):
        ngram_config(k=3, max_n=3, schedule=encode([(1, 7, 4), (8, None, 2)]))
    with pytest.raises(TreeoptError, match="generation must be one of window, trie-depth"):
        ngram_flags(k=4, min_n=2, max_n=3, generation="corpus")


def test_only_chains_and_valid_lengths_are_settings():
    assert LookupSetting.of_chain(Tree.chain(4), min_n=2, max_n=3) == SETTING
    with pytest.raises(TreeoptError, match=r"this tree branches \(2 nodes, widths \[2\]\)"):
        LookupSetting.of_chain(Tree.from_choices([[0], [1]]), min_n=1, max_n=2)
    with pytest.raises(TreeoptError, match="this tree is empty"):
        LookupSetting.of_chain(Tree(()), min_n=1, max_n=2)
    with pytest.raises(FieldError, match=r"min_n must be ≥ 1 and ≤ max_n \(2\), got 3"):
        LookupSetting(4, 3, 2)
    with pytest.raises(TreeoptError, match="k .* must be ≥ 1, got 0"):
        LookupSetting(0, 1, 2)
    assert export_lookup(Tree.chain(1), "vllm", min_n=1, max_n=1) == (
        '{"method": "ngram", "num_speculative_tokens": 1, "prompt_lookup_min": 1, '
        '"prompt_lookup_max": 1}')
    with pytest.raises(TreeoptError, match="'medusa' has no n-gram"):
        export_lookup(Tree.chain(1), "medusa", min_n=1, max_n=1)


def test_the_recorded_drafter_names_the_lengths():
    assert recorded_lookup({"kind": "prompt-lookup", "min_match": 2, "max_match": 3}) == (2, 3)
    assert recorded_lookup({"kind": "hydra", "depth": 3}) is None
    assert recorded_lookup({}) is None
    with pytest.raises(TreeoptError, match="max_match is not recorded for this prompt lookup"):
        recorded_lookup({"kind": "prompt-lookup", "depth": 4})


# ----- the CLI --------------------------------------------------------------------------------
def cli(*args: object) -> subprocess.CompletedProcess[str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def ok(*args: object) -> subprocess.CompletedProcess[str]:
    res = cli(*args)
    assert res.returncode == 0, res.stderr
    return res


def refused(*args: object) -> str:
    res = cli(*args)
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


@pytest.fixture()
def growth(tmp_path):
    """A prompt-lookup growth of chains up to 3 (E[L] 1, 2, 8/3, 3), n-grams 2…3."""
    trace = RankTrace(np.array([[0, 0, -1], [0, -1, -1], [0, 0, 0]], np.int16),
                      {"top_k": 4, "head_kind": "prompt-lookup", "num_heads": 3,
                       "heads_config": {"kind": "prompt-lookup", "num_heads": 3,
                                        "min_match": 2, "max_match": 3}})
    trace.save(tmp_path / "t.npz")
    ok("grow", "--trace", tmp_path / "t.npz", "--max-nodes", 3, "--out", tmp_path / "g.json")
    return tmp_path / "g.json"


def test_export_a_prompt_lookup_growth_in_every_engines_form(growth):
    assert Growth.load(growth).drafter == {"kind": "prompt-lookup", "depth": 3, "min_match": 2,
                                           "max_match": 3}
    vllm = ok("export", "--tree", growth, "--size", 2, "--format", "vllm")
    assert json.loads(vllm.stdout) == {"method": "ngram", "num_speculative_tokens": 2,
                                       "prompt_lookup_min": 2, "prompt_lookup_max": 3}
    assert "note: vLLM matches only n-grams of prompt_lookup_min … prompt_lookup_max tokens; " \
           "left unset both default to 5" in vllm.stderr
    hf = ok("export", "--tree", growth, "--size", 3, "--format", "hf")
    assert json.loads(hf.stdout) == {"prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 3}
    assert "note: Hugging Face always matches down to n = 1: min n 2 cannot be set" in hf.stderr
    trt = ok("export", "--tree", growth, "--size", 3, "--format", "trtllm-yaml").stdout
    assert yaml.safe_load(trt) == {"speculative_config": {
        "decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 3,
        "is_keep_all": True, "is_use_oldest": True, "is_public_pool": False},
        "disable_overlap_scheduler": True}
    sglang = ok("export", "--tree", growth, "--size", 1, "--format", "sglang")
    assert sglang.stdout.splitlines() == [
        "# SGLang, window flags",
        "--speculative-algorithm NGRAM --speculative-num-draft-tokens 2 "
        "--speculative-ngram-min-bfs-breadth 1 --speculative-ngram-max-bfs-breadth 1 "
        "--speculative-ngram-min-match-window-size 2 --speculative-ngram-max-match-window-size 3 "
        "--speculative-ngram-branch-length 4",
        "# SGLang, trie-depth flags",
        "--speculative-algorithm NGRAM --speculative-num-draft-tokens 2 "
        "--speculative-ngram-min-bfs-breadth 1 --speculative-ngram-max-bfs-breadth 1 "
        "--speculative-ngram-max-trie-depth 4"]
    assert "not the same drafter: it drafts from one global trie" in sglang.stderr
    override = ok("export", "--tree", growth, "--size", 2, "--format", "vllm", "--min-n", 1)
    assert json.loads(override.stdout)["prompt_lookup_min"] == 1


def test_export_refuses_what_no_n_gram_form_holds(growth, tmp_path):
    line = refused("export", "--tree", growth, "--size", 2, "--format", "medusa")
    assert line.endswith("format 'medusa' has no n-gram (prompt-lookup) form; choose one of "
                         "vllm, sglang, trtllm-yaml, hf")
    line = refused("export", "--tree", growth, "--size", 2, "--format", "trtllm-yaml",
                   "--draft", "eagle")
    assert "was grown for prompt lookup, not for --draft eagle" in line
    (tmp_path / "tree.json").write_text("[[0], [1], [0, 0]]")
    line = refused("export", "--tree", tmp_path / "tree.json", "--format", "vllm",
                   "--draft", "ngram")
    assert line.endswith("prompt lookup drafts a chain (one token per depth, rank 0), but this "
                         "tree branches (3 nodes, widths [2, 1]): export a chain")
    line = refused("export", "--tree", tmp_path / "tree.json", "--format", "sglang")
    assert line.endswith("--format sglang writes prompt-lookup settings only: export a growth "
                         "or selection grown for prompt lookup, or pass --draft ngram")
    line = refused("export", "--tree", tmp_path / "tree.json", "--format", "medusa",
                   "--max-n", 3)
    assert line.endswith("--min-n and --max-n apply to prompt-lookup settings (--draft ngram) "
                         "only")
    line = refused("export", "--tree", growth, "--size", 2, "--format", "hf", "--min-n", 4)
    assert line.endswith("--min-n must be ≥ 1 and ≤ --max-n (3), got 4")
    # a tree of another drafter keeps its tree forms
    assert ok("export", "--tree", tmp_path / "tree.json", "--format", "medusa").stdout == \
        "[[0], [1], [0, 0]]\n"


@pytest.fixture()
def selection(growth, tmp_path):
    """Batch 1 picks the chain of 3, batch 2 the chain of 1, batch 8 none (ms at q = 1 … 4)."""
    ms = {1: [10.0, 10.0, 10.0, 10.0], 2: [10.0, 10.0, 20.0, 40.0], 8: [10.0, 30.0, 40.0, 80.0]}
    LatencyTable("cpu", "fp32", preset("tiny"), tuple(
        LatencyRecord(b, 128, q + 1, t, t, t, 5) for b, row in ms.items()
        for q, t in enumerate(row))).save(tmp_path / "lat.json")
    ok("select", "--growth", growth, "--latency", tmp_path / "lat.json", "--out",
       tmp_path / "sel.json")
    return tmp_path / "sel.json"


def _vllm(k):
    return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2,
            "prompt_lookup_max": 3}


def _sglang(k, *tail):
    return ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(k + 1),
            "--speculative-ngram-min-bfs-breadth", "1", "--speculative-ngram-max-bfs-breadth",
            "1", *tail]


def test_select_writes_n_gram_schedules_for_prompt_lookup(selection):
    plan = json.loads(selection.read_text())["schedules"][0]
    assert [(r["min_batch"], r["max_batch"], r["size"], r["choices"]) for r in plan["ranges"]] \
        == [(1, 1, 3, [[0], [0, 0], [0, 0, 0]]), (2, 2, 1, [[0]]), (3, 8, 0, [])]
    assert plan["tensorrt_llm"] == {  # release 1.2: lower thresholds, off from batch 3 on
        "reading": "release-1.2", "draft_len_schedule": {"1": 3, "2": 1, "3": 0},
        "config": {"speculative_config": {
            "decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 3,
            "is_keep_all": True, "is_use_oldest": True, "is_public_pool": False,
            "draft_len_schedule": {"1": 3, "2": 1, "3": 0}}, "disable_overlap_scheduler": True}}
    assert plan["vllm"] == {"speculative_config": {
        **_vllm(3), "num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 2, 1], [3, 8, 0]]},
        "speculative_config_per_batch_range": [
        {"min_batch": 1, "max_batch": 1, "config": _vllm(3)},
        {"min_batch": 2, "max_batch": 2, "config": _vllm(1)},
        {"min_batch": 3, "max_batch": 8, "config": None}]}
    assert plan["sglang"]["trie-depth"] == [
        {"min_batch": 1, "max_batch": 1,
         "config": _sglang(3, "--speculative-ngram-max-trie-depth", "6")},
        {"min_batch": 2, "max_batch": 2,
         "config": _sglang(1, "--speculative-ngram-max-trie-depth", "4")},
        {"min_batch": 3, "max_batch": 8, "config": None}]
    assert plan["sglang"]["window"][1]["config"] == _sglang(
        1, "--speculative-ngram-min-match-window-size", "2",
        "--speculative-ngram-max-match-window-size", "3", "--speculative-ngram-branch-length", "4")
    assert plan["hugging_face"] == {"prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 3}
    assert plan["lookup"] == {"min_n": 2, "max_n": 3}
    assert "earlier vLLM and SGLang take one per server" in plan["note"]
    assert plan["note"].endswith("batches above 8 were not swept, so speculation is off there")
    assert "speculative_token_tree" not in json.dumps(plan)


def test_export_a_prompt_lookup_selection_per_batch_range(selection, tmp_path):
    assert json.loads(ok("export", "--tree", selection, "--batch", 2, "--format",
                         "vllm").stdout) == _vllm(1)
    res = ok("export", "--tree", selection, "--format", "trtllm-yaml", "--schedule-dir",
             tmp_path / "out")
    assert res.stderr.splitlines()[:4] == [
        "batch 1-1: 3 nodes → trtllm-yaml.batch1-1.yaml",
        "batch 2-2: 1 nodes → trtllm-yaml.batch2-2.yaml",
        "batch 3-8: 0 nodes → speculation off",
        f"wrote 2 file(s) and schedule.json to {tmp_path / 'out'}"]
    got = yaml.safe_load((tmp_path / "out" / "trtllm-yaml.batch2-2.yaml").read_text())
    assert got["speculative_config"]["max_draft_len"] == 1
    ok("export", "--tree", selection, "--format", "hf", "--schedule-dir", tmp_path / "hf")
    assert json.loads((tmp_path / "hf" / "hf.batch1-1.json").read_text()) == {
        "prompt_lookup_num_tokens": 3, "max_matching_ngram_size": 3}
    line = refused("export", "--tree", selection, "--batch", 1, "--format", "triton")
    assert "format 'triton' has no n-gram (prompt-lookup) form" in line
