"""The demo's second prompt set, prose (docstrings and comments), where repeats are rare: the
sampler, the ``prose`` stage a finished demo gains by resuming, and the drafter chosen per set."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace

import pytest
from conftest import demo_copy

from treeopt.demo.config import TINY, plan
from treeopt.demo.corpus import SourceFile
from treeopt.demo.corpus_prompts import prose_passages, sample_prose
from treeopt.errors import TreeoptError

MODULE = '''"""Tools for reading the weather from a station.

The station sends one line per minute.

>>> read("12 C")
12
"""
import os  # not prose: a comment after code

# A station may drop a line when the radio link is weak, so every reader
# must accept gaps of a few minutes without complaint.


class Station:
    """One station and the readings it has sent so far."""

    def read(self, line):
        """Parse one line of the station's report.

        Returns the line itself.

            Indented text is an example, not prose.
        """
        # x = line.split()
        # if x == []:
        return line  # the raw line


def f():
    "Too short."
# a comment at column zero ends here
    # and one indented starts a block
    # of its own, two lines long.
    pass
'''


class Words:
    """A tokenizer whose tokens are words and line breaks: counts the tests can read off."""

    def __call__(self, text: str) -> dict[str, list[str]]:
        return {"input_ids": text.replace("\n", " \n ").split(" ")}


def test_prose_passages_are_docstrings_and_comment_blocks_without_code():
    found = prose_passages(SourceFile("weather.py", MODULE))
    assert [(p["line"], p["kind"], p["prompt"]) for p in found] == [
        (1, "docstring", "Tools for reading the weather from a station.\n\n"
                         "The station sends one line per minute."),
        (10, "comment", "A station may drop a line when the radio link is weak, so every "
                        "reader\nmust accept gaps of a few minutes without complaint."),
        (15, "docstring", "One station and the readings it has sent so far."),
        (18, "docstring", "Parse one line of the station's report.\n\n"
                          "Returns the line itself."),  # the indented example left out
        (31, "comment", "a comment at column zero ends here"),  # a block per column
        (32, "comment", "and one indented starts a block\nof its own, two lines long.")]
    lines = MODULE.splitlines()
    for p in found:  # each starts on the line recorded
        assert p["prompt"].split("\n")[0] in lines[p["line"] - 1]
        assert p["source"] == "weather.py"
    assert prose_passages(SourceFile("broken.py", "def f(:\n    # a comment\n")) == []


def test_sample_prose_fits_whole_lines_into_the_token_range():
    files = [SourceFile("weather.py", MODULE), SourceFile("broken.py", "def (:\n")]
    found = sample_prose(files, Words(), count=5, min_tokens=5, max_tokens=14, seed=0)
    by_line = {p["line"]: p for p in found}
    assert set(by_line) == {1, 15, 18, 31, 32}  # line 10's comment: its first line is too long
    assert by_line[1]["prompt"] == "Tools for reading the weather from a station."
    assert by_line[18]["prompt"] == "Parse one line of the station's report.\n\nReturns the line itself."
    assert by_line[32]["kind"] == "comment" and by_line[15]["kind"] == "docstring"
    assert all(len(Words()(p["prompt"])["input_ids"]) <= 14 for p in found)
    again = sample_prose(files, Words(), count=5, min_tokens=5, max_tokens=14, seed=0)
    assert again == found and [p["line"] for p in found] != sorted(by_line)  # shuffled, seeded
    assert {p["line"] for p in sample_prose(files, Words(), count=3, min_tokens=9,
                                            max_tokens=14, seed=0)} == {15, 18, 32}
    with pytest.raises(TreeoptError, match="^found only 5 of 6 prose prompts of 5 … 14 tokens "
                                           "in 2 files$"):
        sample_prose(files, Words(), count=6, min_tokens=5, max_tokens=14, seed=0)


def test_the_real_corpus_yields_prose_prompts_from_unseen_files_only():
    from treeopt.demo.corpus import load_corpus
    from treeopt.demo.tokenizer import train_tokenizer

    tiny = load_corpus(max_files=TINY.max_files)
    tok = train_tokenizer([f.text for f in tiny.train], vocab_size=TINY.vocab_size)
    corpus = load_corpus()
    pool = corpus.calibration + corpus.heldout  # the files the demo's prompts come from
    found = sample_prose(pool, tok, count=32, min_tokens=8, max_tokens=24, seed=17)
    assert {p["kind"] for p in found} == {"docstring", "comment"}
    texts = {f.path: f.text.splitlines() for f in pool}
    for p in found:
        assert 8 <= len(tok(p["prompt"])["input_ids"]) <= 24
        assert p["prompt"].split("\n")[0] in texts[p["source"]][p["line"] - 1]
        assert "def " not in p["prompt"] and " = " not in p["prompt"]


def test_a_demo_without_the_setting_keeps_its_settings():
    from treeopt.demo.build import _jsonable, _same_settings

    recorded = _jsonable(plan(budget_minutes=120, base_layers=16))
    del recorded["prose_prompts"]  # a demo built before the prose stage
    assert _same_settings(recorded, plan(budget_minutes=120, base_layers=16))
    with pytest.raises(TreeoptError, match="^prose_prompts must be at least 1, got 0$"):
        replace(TINY, prose_prompts=0)


@pytest.fixture(scope="module")
def resumed(tiny_demos, tmp_path_factory):
    """A tiny demo finished without the prose stage (a copy of conftest's, built once for the
    run), then built again with it."""
    import torch

    from treeopt.demo import build

    torch.set_num_threads(1)
    out, first = demo_copy(tiny_demos.before, tmp_path_factory.mktemp("prose"))
    logs: list[str] = []
    manifest = build.build_demo(out, TINY, log=logs.append)
    return out, first, manifest, logs


def test_a_finished_demo_gains_the_prose_stage_and_keeps_everything_else(resumed):
    from treeopt.demo.stages import PIPELINE

    out, first, manifest, logs = resumed
    assert "prose" not in first and PIPELINE[-1][0] == "prose"
    assert logs[: len(PIPELINE)] == [f"[{name}] done earlier, reusing" for name, _ in
                                     PIPELINE[:-1]] + ["[prose] …"]
    from treeopt.demo.build import PRICED_LAST

    def kept(timings: dict) -> dict:  # the stages' own, not the pricing every build does last
        return {k: v for k, v in timings.items() if k not in ("prose", "picks", *PRICED_LAST)}

    assert kept(manifest["timings_s"]) == kept(first["timings_s"])
    before = {f["path"]: f["sha256"] for f in first["files"]}
    after = {f["path"]: f["sha256"] for f in manifest["files"]}
    assert {p: after[p] for p in before} == before  # nothing made again
    added = set(after) - set(before)
    from treeopt.demo.layout import KINDS as kinds

    assert added == {"prompts/prose.jsonl", *(f"traces/{k}-prose.npz" for k in kinds),
                     *(f"growth/{k}-prose.json" for k in kinds)}


def test_the_prose_prompts_come_from_unseen_files_and_are_traced_like_the_heldout_ones(resumed):
    from treeopt.demo.corpus import load_corpus
    from treeopt.demo.layout import DemoPaths
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace

    out, _, manifest, _ = resumed
    paths = DemoPaths(out)
    rows = [json.loads(line) for line in paths.prompts("prose").read_text().splitlines()]
    corpus = load_corpus(max_files=TINY.max_files)
    unseen = {f.path: f.text.splitlines() for f in corpus.calibration + corpus.heldout}
    assert len(rows) == TINY.prose_prompts == manifest["prose"]["prompts"]["count"]
    for row in rows:
        assert row["kind"] in ("docstring", "comment")
        assert row["prompt"].split("\n")[0] in unseen[row["source"]][row["line"] - 1]
    for kind in paths.kinds():
        trace, held = (RankTrace.load(paths.prose_trace(kind)),
                       RankTrace.load(paths.trace(kind, heldout=True)))
        assert trace.meta["prompts"] == "prompts/prose.jsonl"
        assert trace.meta["sequences"] == TINY.prose_prompts
        assert (trace.top_k, trace.heads) == (held.top_k, held.heads)
        for key in ("max_new_tokens", "head_kind"):
            assert trace.meta.get(key) == held.meta.get(key), key
        record = manifest["prose"][kind]
        assert record["positions"] == trace.positions
        growth = Growth.load(paths.prose_growth(kind))
        for n, ell in record["expected_accept_length"].items():
            assert ell == pytest.approx(float(growth.expected_accept_length[int(n)]))
        code = Growth.load(paths.growth(kind))
        for n, ell in record["heldout_code_expected_accept_length"].items():
            assert ell == pytest.approx(float(code.evaluate(held)[int(n)]))


def test_the_build_records_what_choose_drafter_prints_for_both_prompt_sets(resumed, tmp_path):
    from treeopt.demo.layout import DemoPaths

    out, _, manifest, _ = resumed
    paths = DemoPaths(out)
    files: dict[str, list[str]] = {"code": [], "prose": []}
    for kind in paths.kinds():
        for name, growth, trace in (("code", paths.growth(kind), paths.trace(kind, heldout=True)),
                                    ("prose", paths.prose_growth(kind), paths.prose_trace(kind))):
            path = tmp_path / f"{kind}-{name}.json"
            others = paths.other_step_profiles(kind)  # the verify step, shared as the build
            cli("select", "--growth", growth, "--trace", trace, "--step-profile",
                paths.step_profile(kind), *(["--shared-verify", *others] if others else []),
                "--out", path)
            files[name].append(str(path))
    printed = json.loads(cli("choose-drafter", *files["code"], "--name", "code",
                             "--prompt-set", "prose=" + ",".join(files["prose"])).stdout)
    recorded = manifest["prose_choice"]["points"]
    assert [p["batch"] for p in recorded] == list(TINY.live_batches)
    assert len(printed["across_sets"]) == len(recorded)
    for mine, theirs in zip(recorded, printed["across_sets"], strict=True):
        assert {k: mine[k] for k in ("batch", "fastest", "agree", "robust")} == {
            k: theirs[k] for k in ("batch", "fastest", "agree", "robust")}
        for name in ("code", "prose"):
            assert mine["speedup"][name] == pytest.approx(theirs["speedup"][name])
            best = max(mine["speedup"][name], key=mine["speedup"][name].get)
            if mine["speedup"][name][best] > 1:
                assert mine["fastest"][name] == best
    sets = printed["prompt_sets"]
    assert sets["code"]["points"] == printed["points"] and set(sets) == {"code", "prose"}


def test_redo_prose_makes_the_prose_set_again_and_nothing_else(resumed):
    from treeopt.demo import build
    from treeopt.demo.layout import DemoPaths
    from treeopt.model.trace import RankTrace

    out, _, manifest, _ = resumed
    trace = DemoPaths(out).prose_trace("hydra")
    trace.write_bytes(b"not a trace")  # what a resumed stage would keep or choke on
    logs: list[str] = []
    again = build.build_demo(out, TINY, log=logs.append, redo=("prose",))
    assert "[prose] …" in logs and "[dynamic] done earlier, reusing" in logs
    made = {f["path"]: f["sha256"] for f in again["files"]}
    before = {f["path"]: f["sha256"] for f in manifest["files"]}
    assert set(made) == set(before) and RankTrace.load(trace).positions > 0
    assert {p: h for p, h in made.items() if "prose" not in p} == {
        p: h for p, h in before.items() if "prose" not in p}  # nothing else made again
    assert again["prose"] == manifest["prose"]  # the same prompts, traces and choice


def test_choose_drafter_per_set_names_the_fastest_on_each_set_and_the_robust_pick():
    from treeopt.model.tree import Tree
    from treeopt.pricing.selection import Curve, Point, Selection, choose_drafter_per_set

    def sel(*speedups):  # one point per batch size 1, 2, …
        points = tuple(Point(b, 64, Tree.chain(1 if s > 1 else 0), None, 1.5, 1.0, 0.0, 0.0,
                             100.0 * s, 100.0, 1, Curve((0,), (100.0,)))
                       for b, s in enumerate(speedups, 1))
        return Selection({}, {}, {}, {}, (None,), points)

    sets = {"code": {"lookup": sel(2.0, 1.2), "eagle": sel(1.6, 1.3)},
            "prose": {"lookup": sel(1.1, 0.8), "eagle": sel(1.5, 1.2)}}
    one, two = choose_drafter_per_set(sets)
    assert one.drafters == {"code": "lookup", "prose": "eagle"} and not one.agree
    assert one.robust == "eagle" and one.shares["lookup"] == pytest.approx(1.1 / 1.5)
    assert two.drafters == {"code": "eagle", "prose": "eagle"} and two.agree
    assert two.robust == "eagle" and two.shares["none"] == pytest.approx(1 / 1.3)
    assert one.to_json()["fastest"] == one.drafters
    with pytest.raises(TreeoptError, match="^prompt set 'prose' has selections of "
                                           r"\['eagle'\], another of \['eagle', 'lookup'\]"):
        choose_drafter_per_set({"code": sets["code"], "prose": {"eagle": sel(1.5, 1.2)}})


def test_a_drafter_that_drafts_nothing_is_not_the_robust_pick():
    """Where every drafter's pick is no tree, its profile's few per cent over autoregressive
    decoding are no gain: the advice is ``none`` on each set and across them."""
    from treeopt.model.tree import Tree
    from treeopt.pricing.selection import (
        Curve,
        Point,
        Selection,
        choose_drafter,
        choose_drafter_per_set,
    )

    def sel(*picks):  # (tree size, speed-up) per batch size 1, 2, …
        points = tuple(Point(b, 64, Tree.chain(n), None, 1.5, 1.0, 0.0, 0.0, 100.0 * s, 100.0,
                             1, Curve((0,), (100.0,)))
                       for b, (n, s) in enumerate(picks, 1))
        return Selection({}, {}, {}, {}, (None,), points)

    code = {"lookup": sel((0, 1.01), (2, 1.005)), "trie": sel((0, 1.0), (0, 1.02))}
    prose = {"lookup": sel((0, 1.02), (0, 1.01)), "trie": sel((0, 1.0), (0, 1.0))}
    one, two = choose_drafter(code)
    assert one.drafter == "none" and one.sizes == {"lookup": 0, "trie": 0}
    assert two.drafter == "lookup" and two.gain("trie") == 1.0  # 1.005 drafted beats 1.02 not
    one, two = choose_drafter_per_set({"code": code, "prose": prose})
    assert one.robust == "none" and one.shares == {"none": 1.0, "lookup": 1.0, "trie": 1.0}
    assert two.drafters == {"code": "lookup", "prose": "none"}
    assert two.robust == "lookup"  # it gains on code and loses nothing on prose
    assert two.shares == pytest.approx({"none": 1 / 1.005, "lookup": 1.0, "trie": 1 / 1.005})
    assert one.choices["code"].to_json()["candidates_size"] == {"lookup": 0, "trie": 0}


def test_choose_drafter_refuses_a_bad_prompt_set(tmp_path):
    proc = cli("choose-drafter", "a.json", "--prompt-set", "prose", check=False)
    assert proc.returncode == 2 and "'prose' is not NAME=S.json,S.json" in proc.stderr
    proc = cli("choose-drafter", "a.json", "--name", "code", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("give --prompt-set too")


def cli(*args, check: bool = True) -> subprocess.CompletedProcess:
    """``treeopt ARGS`` through the CLI's own entry point, in this process (its exit status,
    stdout and stderr)."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from treeopt.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
    if check:
        assert code == 0, err.getvalue()
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_the_drafters_figure_sets_code_beside_prose_per_drafter():
    from treeopt.workbench.plots_drafters import acceptance_by_prompt_set

    def row(code, grown_on_code, grown_on_prose):
        return {"heldout_code_expected_accept_length": {"16": code},
                "code_grown_expected_accept_length": {"16": grown_on_code},
                "expected_accept_length": {"16": grown_on_prose, "4": 1.5}}

    record = {"prompts": {"count": 2}, "eagle": row(3.0, 2.5, 2.6),
              "prompt-lookup": row(4.0, 1.2, 1.3), "max_nodes": 64}
    fig = acceptance_by_prompt_set(record, size=16)
    assert [list(t.x) for t in fig.data] == [["eagle", "prompt-lookup"]] * 3
    assert [list(t.y) for t in fig.data] == [[3.0, 4.0], [2.5, 1.2], [2.6, 1.3]]
    assert [t.name for t in fig.data] == ["held-out code", "prose, the code-grown tree",
                                          "prose, a tree grown on prose"]
    unmeasured = acceptance_by_prompt_set(record, size=64)  # no drafter has that size
    assert all(not t.x for t in unmeasured.data)
