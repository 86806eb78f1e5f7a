"""Live decoding's inputs are checked once, where they enter, before any model loads: bad flags
and unwritable outputs of ``verify`` and ``tune`` are one line on stderr with exit status 2, and
a verify report read back is checked field by field.

Every command here fails before loading a model (``--model`` names no model at all: a check
that came after loading would say so instead), so they run in process.
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from treeopt import RankTrace, TreeoptError, grow
from treeopt.cli import main
from treeopt.documents.verify_report import VERIFY_FORMAT, VerifyReport
from treeopt.model.tree import Tree

RANKS = np.array([[0, 0], [0, 1], [1, 0], [0, 0], [2, -1], [0, 3]], np.int16)
TRACE_META = {"top_k": 4, "head_kind": "medusa", "num_heads": 2, "model": "m",
              "sequence_positions": [3, 3]}


def cli(*args: object) -> subprocess.CompletedProcess[str]:
    """``treeopt ARGS`` in process, returning what a subprocess would."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def refused(res: subprocess.CompletedProcess[str], *fragments: str) -> str:
    """Exit status 2 and exactly one line on stderr holding every fragment, and not the line of
    a model that failed to load (every check here comes before that)."""
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr and "config.json" not in lines[0], lines[0]
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    f = {"trace": tmp_path / "t.npz", "growth": tmp_path / "g.json",
         "prompts": tmp_path / "p.jsonl", "tree": tmp_path / "tree.json",
         "model": tmp_path / "no-model", "heads": tmp_path / "no-heads"}
    trace = RankTrace(RANKS, TRACE_META)
    trace.save(f["trace"])
    grow(trace, method="empirical", max_nodes=4).save(f["growth"])
    f["prompts"].write_text("".join(json.dumps({"prompt": f"text {i}"}) + "\n"
                                    for i in range(6)))
    f["tree"].write_text("[[0], [1], [0, 0]]")
    return f


def verify(files: dict[str, Path], *flags: object) -> subprocess.CompletedProcess[str]:
    return cli("verify", "--model", files["model"], "--heads", files["heads"], "--tree",
               files["tree"], "--prompts", files["prompts"], *flags)


def tune(files: dict[str, Path], *flags: object) -> subprocess.CompletedProcess[str]:
    return cli("tune", "--model", files["model"], "--heads", files["heads"], "--growth",
               files["growth"], "--prompts", files["prompts"], "--prompt-count", "2",
               "--sizes", "1", *flags)


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--mode", "typical", "--posterior-threshold", "5"],
     "--posterior-threshold must be in (0, 1], got 5.0"),
    (["--posterior-threshold", "5"], "--posterior-threshold must be in (0, 1], got 5.0"),
    (["--posterior-threshold", "0"], "--posterior-threshold must be in (0, 1], got 0.0"),
    (["--posterior-threshold", "nan"], "--posterior-threshold must be in (0, 1], got nan"),
    (["--posterior-alpha", "0"], "--posterior-alpha must be > 0 and finite, got 0.0"),
    (["--posterior-alpha", "inf"], "--posterior-alpha must be > 0 and finite, got inf"),
])
def test_verify_refuses_typical_acceptance_thresholds_out_of_range(files, flags, fragment):
    refused(verify(files, *flags), "treeopt verify: error:", fragment)


@pytest.mark.parametrize(("flags", "fragment"), [
    (["--rounds", "0"], "--rounds must be an integer ≥ 1, got 0"),
    (["--min-seconds", "-1"], "--min-seconds must be ≥ 0, got -1.0"),
    (["--target-se", "1"], "--target-se must be in [0, 1), got 1.0"),
    (["--prompt-count", "all", "--target-se", "-0.5"], "--target-se must be in [0, 1), got -0.5"),
    (["--prompt-count", "0"], "argument --prompt-count: must be ≥ 1, got 0"),
    (["--prompt-count", "some"], "argument --prompt-count: expected a number or 'all'"),
    (["--prompt-count", "9"], "--prompt-count 9: only 6 prompts in"),
    (["--prompt-count", "2", "--batch", "3"],
     "--batch 3 is larger than the 2 prompts of --prompt-count"),
    (["--batch", "7"], "--batch 7 is larger than the 6 prompts in"),
    (["--batch", "0"], "--batch must be ≥ 1, got 0"),
    (["--batching", "continuous"], "--batching continuous decodes every prompt in one run: "
                                   "give --prompt-count N (or all)"),
    (["--batching", "continuous", "--prompt-count", "4", "--compile"],
     "--batching continuous runs eager steps; leave out --compile"),
])
def test_verify_refuses_a_bad_measurement_before_loading_a_model(files, flags, fragment):
    refused(verify(files, *flags), fragment)


def test_verify_checks_the_tree_against_the_trace_once_before_loading_a_model(files):
    files["tree"].write_text("[[0], [0, 0], [0, 0, 0]]")
    refused(verify(files, "--trace", files["trace"]),
            f"{files['tree']}: the tree has depth 3 but the trace records only 2 heads")
    files["tree"].write_text("[[0], [3], [4]]")
    refused(verify(files, "--trace", files["trace"]),
            f"{files['tree']}: the tree uses rank 4, beyond the trace's recorded top-4")


@pytest.mark.parametrize("where", ["under-a-file", "a-directory"])
def test_tune_refuses_an_unwritable_profile_alongside_before_loading_a_model(files, tmp_path,
                                                                            where):
    """The alongside profile is first written after a point is measured, minutes after the
    model loaded: an unwritable place is refused first, and nothing is written."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    target = blocker / "s.json" if where == "under-a-file" else tmp_path
    line = refused(tune(files, "--out", tmp_path / "sweep.json", "--profile-alongside", target),
                   f"--profile-alongside {target}")
    assert ("is not a directory" in line) == (where == "under-a-file")
    assert ("is a directory; give a file name" in line) == (where == "a-directory")
    assert not (tmp_path / "sweep.json").exists()


def test_tune_refuses_a_bad_measurement_before_loading_a_model(files, tmp_path):
    refused(tune(files, "--out", tmp_path / "s.json", "--rounds", "0"),
            "--rounds must be an integer ≥ 1, got 0")
    refused(tune(files, "--out", tmp_path / "s.json", "--batch", "3", "--prompt-count", "2"),
            "--prompt-count 2 is smaller than --batch 3")


# ----- the verify report read back -------------------------------------------------------------
def report() -> VerifyReport:
    stats = {"steps": 4, "tokens": 8, "mean_accept_length": 2.0, "stderr": 0.1,
             "histogram": [0, 0, 4], "tokens_per_s": 10.0, "seconds": 0.8}
    return VerifyReport(
        Tree.from_choices([[0], [0, 0]]), "medusa", "greedy", 6, 16, 2, 3, dict(stats),
        {**stats, "steps": 8}, 1.5, 0.04, 0.01, (1.49, 1.5, 1.52), 1.4,
        {"prefix_tokens": 3, "max_abs_hidden_diff": 1e-6, "tolerance": 1e-4}, True,
        mismatched_prompts=(), model_generate={"prompts": 6, "tree_equals_generate": True},
        predicted={"mean_accept_length": 2.1, "measured": 2.0},
        run={"model": "m", "heads_dir": "h", "device": "cpu", "dtype": "float32",
             "attention": "sdpa"})


def test_a_verify_report_reads_back_as_written(tmp_path):
    path = tmp_path / "r.json"
    doc = report().to_json()
    assert list(doc) == [
        "format", "tree", "heads", "mode", "prompts", "max_new_tokens", "batch", "batching",
        "rounds",
        "tree_decoding", "autoregressive", "speedup", "speedup_spread", "speedup_se",
        "round_speedups", "end_to_end_speedup", "outputs_match", "mismatched_prompts",
        "support_probe", "model_generate", "lossless", "predicted", "model", "heads_dir",
        "device", "dtype", "attention"]
    assert doc["format"] == VERIFY_FORMAT and doc["outputs_match"] is True
    path.write_text(json.dumps(doc))
    assert VerifyReport.load(path) == report()
    typical = VerifyReport.from_json({**doc, "mode": "typical", "lossless": None,
                                      "outputs_match": None, "mismatched_prompts": None})
    assert typical.outputs_match is None and "outputs_match" not in typical.to_json()
    before = {k: v for k, v in doc.items() if k != "batching"}  # written before the key
    assert VerifyReport.from_json(before).batching == "static"


@pytest.mark.parametrize(("change", "fragment"), [
    ({"speedup": float("nan")}, "'speedup' must be a finite number, got nan"),
    ({"round_speedups": [1.0, float("inf")]},
     "'round_speedups[1]' must be a finite number, got inf"),
    ({"tree_decoding": {"tokens_per_s": float("nan")}},
     "'tree_decoding.tokens_per_s' must be a finite number, got nan"),
    ({"speedup": None}, "'speedup' must be a finite number, got None"),
    ({"batch": "2"}, "'batch' must be an integer, got '2'"),
    ({"prompts": True}, "'prompts' must be an integer, got True"),
    ({"lossless": "yes"}, "'lossless' must be true or false, got 'yes'"),
    ({"support_probe": {"prefix_tokens": 3, "tolerance": 1e-4}},
     "support_probe: missing 'max_abs_hidden_diff'"),
    ({"tree": {"choices": [[0, 0]]}}, "tree: "),
    ({"tree_decoding": [1, 2]}, "'tree_decoding': expected an object"),
    ({"batching": "dynamic"}, "batching 'dynamic': expected static or continuous"),
])
def test_a_broken_verify_report_is_one_line_naming_the_file(tmp_path, change, fragment):
    path = tmp_path / "r.json"
    doc = {**report().to_json(), **change}
    path.write_text(json.dumps(doc))  # json writes NaN and Infinity as Python reads them
    with pytest.raises(TreeoptError) as caught:
        VerifyReport.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and fragment in message and "\n" not in message


def test_a_report_written_when_the_probe_compared_logits_reads_its_difference(tmp_path):
    doc = report().to_json()
    doc["support_probe"] = {"prefix_tokens": 3, "max_abs_logit_diff": 2e-6, "tolerance": 1e-4}
    assert VerifyReport.from_json(doc).support_probe == {
        "prefix_tokens": 3, "max_abs_hidden_diff": 2e-6, "tolerance": 1e-4}


def test_a_report_of_another_kind_is_refused(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**report().to_json(), "format": "treeopt.sweep/1"}))
    with pytest.raises(TreeoptError, match="format is 'treeopt.sweep/1', expected "
                                           "'treeopt.verify/1'"):
        VerifyReport.load(path)


def test_verify_compares_the_steps_inside_the_trace_up_to_where_each_output_ended():
    """A chain of one on two sequences of 4 positions. The first output ended at EOS, its third
    token: the live run started steps only before position 2, so the walk is cut there too."""
    pytest.importorskip("torch")
    from treeopt.decoding.verify import prediction

    trace = RankTrace(np.array([[0], [0], [-1], [0], [-1], [-1], [-1], [-1]], np.int16),
                      {"sequence_positions": [4, 4]})
    out = prediction(Tree.chain(1), trace, measured=1.25,
                     sequences=[(2, 1), (1, 1, 1, 1, 1)], emitted=[3, 5])
    inside = out["inside_trace"]
    assert (inside["steps"], inside["measured_steps"]) == (5, 5)  # [2] and [1, 1, 1, 1]
    assert inside["measured"] == inside["mean_accept_length"] == 6 / 5
    assert out["steps"] == 7  # the whole walk: [2, 1, 2] and [1, 1, 1, 1]


def test_verify_walks_inside_the_held_out_trace_when_one_is_given():
    """The calibration trace predicts; the trace recorded on the decoded prompts is walked
    inside: here it accepts nothing, so its walk inside is 1 where the calibration one's is 2."""
    pytest.importorskip("torch")
    from treeopt.decoding.verify import prediction

    calibration = RankTrace(np.zeros((4, 1), np.int16), {"sequence_positions": [4]})
    held_out = RankTrace(np.full((4, 1), -1, np.int16), {"sequence_positions": [4]})
    live = [(1, 1, 1, 1)]
    own = prediction(Tree.chain(1), calibration, 1.0, live, [5])
    assert own["inside_trace"]["mean_accept_length"] == 2.0
    out = prediction(Tree.chain(1), calibration, 1.0, live, [5], held_out=held_out)
    assert out["mean_accept_length"] == own["mean_accept_length"] == 2.0  # the prediction
    assert out["inside_trace"]["mean_accept_length"] == out["inside_trace"]["measured"] == 1.0


def test_verify_walks_a_trace_as_the_prompts_own_only_where_its_digests_say_so():
    """A trace that records its prompts' digests is walked inside along the decoded prompts'
    own sequences, wherever it holds them; for other prompts it says so, and the verdict too."""
    pytest.importorskip("torch")
    from treeopt.decoding.verify import prediction
    from treeopt.model.trace import prompt_digest

    ranks = np.array([[0]] * 4 + [[-1]] * 4, np.int16)  # the second prompt accepts nothing
    trace = RankTrace(ranks, {"sequence_positions": [4, 4],
                              "prompt_digests": [prompt_digest([5, 6]), prompt_digest([7])]})
    live = [(2, 2), (1, 1, 1, 1)]
    own = prediction(Tree.chain(1), trace, 2.0, live, [5, 5], [[5, 6], [7]])
    assert own["inside_trace"]["prompts_match"] is True
    assert own["inside_trace"]["mean_accept_length"] == own["inside_trace"]["measured"] == 8 / 6
    swapped = prediction(Tree.chain(1), trace, 1.0, live[1:], [5], [[7]])  # its second one
    assert swapped["inside_trace"]["prompts_match"] is True
    assert swapped["inside_trace"]["mean_accept_length"] == 1.0  # not the first's 2.0
    other = prediction(Tree.chain(1), trace, 2.0, live, [5, 5], [[5, 6], [8]])
    assert other["inside_trace"] == {
        "sequences": 2, "prompts_match": False,
        "note": "1 of the 2 prompts decoded are not in the trace: no walk inside it"}
    unknown = prediction(Tree.chain(1), RankTrace(trace.ranks, {"sequence_positions": [4, 4]}),
                         2.0, live, [5, 5], [[5, 6], [8]])
    assert unknown["inside_trace"]["prompts_match"] is None  # a trace without digests
    doc = {**report().to_json(), "predicted": {"mean_accept_length": 2.0,
                                               "acceptance": "per step", **other}}
    assert "no walk inside it" in VerifyReport.from_json(doc).verdict()


def test_the_digests_follow_the_sequences_through_cuts_merges_and_runs():
    from treeopt.model.runs import as_runs
    from treeopt.model.trace import merge_traces

    t = RankTrace(np.zeros((5, 1), np.int16), {"sequence_positions": [2, 0, 3],
                                               "prompt_digests": ["a", "b", "c"]})
    assert t.sequences(2).prompt_digests == ["a", "b"]
    assert t.nonempty().prompt_digests == ["a", "c"]
    assert as_runs(t, [3, 3]).prompt_digests == ["a", "b"]
    assert merge_traces([t, t.sequences(1)]).prompt_digests == ["a", "b", "c", "a"]
    assert merge_traces([t, RankTrace(t.ranks, {"sequence_positions": [5]})]).prompt_digests \
        is None
    assert RankTrace(t.ranks, {**t.meta, "sequence_positions": [5]}).prompt_digests is None


def test_verify_predicts_the_per_step_mean_and_labels_the_position_weighted_one():
    """A chain of one on one sequence of 4 positions, accepted at t0, t1 and t3: decoding steps
    at t0 (2 tokens), t2 (1), t3 (2) — 5 tokens in 3 steps — while positions weigh 7 / 4."""
    pytest.importorskip("torch")
    from treeopt.decoding.verify import prediction

    trace = RankTrace(np.array([[0], [0], [-1], [0]], np.int16), {"sequence_positions": [4]})
    out = prediction(Tree.chain(1), trace, measured=1.5)
    assert (out["acceptance"], out["mean_accept_length"], out["steps"]) == ("per step", 5 / 3, 3)
    assert out["relative_difference"] == (1.5 - 5 / 3) / (5 / 3)
    assert out["position_weighted_mean_accept_length"] == 1.75
    assert out["position_weighted_relative_difference"] == (1.5 - 1.75) / 1.75
    assert "per_step" not in out and "inside_trace" not in out  # no live sequences given
    plain = prediction(Tree.chain(1), RankTrace(trace.ranks), measured=1.5)
    assert (plain["acceptance"], plain["mean_accept_length"]) == ("position-weighted", 1.75)
    assert "position_weighted_mean_accept_length" not in plain
