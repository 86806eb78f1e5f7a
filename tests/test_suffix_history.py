"""Suffix decoding warmed by a history (treeopt.model.responses): the responses a
calibration served, written with ``responses=`` and read back as ``history=``, start every
global tree; a warm trace equals the tail of one long calibration, a request never meets its own
prompt's answer (leave-one-out), walks equal live decoding, decoding stays lossless, and the
spec, the drafter directory and the CLI carry it."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_suffix import GREEDY, PROMPTS, TREES, _config, _drafter  # noqa: E402

from treeopt import Tree  # noqa: E402
from treeopt.decoding.calibrate import calibrate  # noqa: E402
from treeopt.decoding.loop import Decoder, decode  # noqa: E402
from treeopt.drafters.suffix import SuffixDrafter, parse_suffix_spec  # noqa: E402
from treeopt.errors import FieldError, TreeoptError  # noqa: E402
from treeopt.model.responses import History, read_responses, write_responses  # noqa: E402
from treeopt.model.simulation import step_lengths, steps_inside  # noqa: E402
from treeopt.model.trace import prompt_digest  # noqa: E402

SERVED = 3  # the first three prompts are served before; the last three repeat them


@pytest.fixture(scope="module")
def base(peaked):
    return peaked[0]


@pytest.fixture(scope="module")
def served(base, tmp_path_factory):
    """The responses of the first three prompts, as their calibration writes them."""
    folder = tmp_path_factory.mktemp("served")
    calibrate(base, _drafter(), PROMPTS[:SERVED], folder / "t.npz", config=_config(GREEDY),
              responses=folder / "r.npz")
    return read_responses(folder / "r.npz", vocab_size=256)


def test_the_responses_written_are_the_models_outputs(base, served):
    want = decode(base, None, Tree(()), PROMPTS[:SERVED], config=GREEDY).tokens
    assert served.responses == tuple(tuple(t) for t in want)
    assert served.prompts == tuple(prompt_digest(p) for p in PROMPTS[:SERVED])
    assert served.digest().startswith("3 responses, sha256 ")


def test_a_warm_trace_is_the_tail_of_one_calibration_and_walks_as_live(base, served, tmp_path):
    """Calibrating the next three prompts with the first two's history ranks them exactly as
    calibrating all five in order does; live decoding one at a time takes the walk's steps.
    (The sixth prompt asks the first's again: with the history it would not meet that answer.)"""
    cfg = _config(GREEDY)
    first_two = History(served.responses[:2], served.prompts[:2])
    later = PROMPTS[2:5]
    whole, _ = calibrate(base, _drafter(), PROMPTS[:5], tmp_path / "whole.npz", config=cfg)
    warm_drafter = _drafter(history=first_two)
    warm, _ = calibrate(base, warm_drafter, later, tmp_path / "warm.npz", config=cfg)
    cold, _ = calibrate(base, _drafter(), later, tmp_path / "cold.npz", config=cfg)
    assert np.array_equal(whole.ranks[-warm.positions:], warm.ranks)
    assert (warm.ranks == 0).sum() > (cold.ranks == 0).sum() + 10  # [9, *A] meets A's answer
    assert warm.meta["heads_config"]["history"] == first_two.digest()
    assert "history" not in cold.meta["heads_config"]
    live = Decoder(base, warm_drafter).decode(TREES[1], later, config=GREEDY, batch=1)
    walk = step_lengths(TREES[1], warm).tolist()
    assert steps_inside(live.stats.sequence_accept_lengths,
                        warm.meta["sequence_positions"]) == walk
    assert np.mean(walk) > 1.5 and max(walk) >= 4  # steps accepted several drafted tokens


def test_decoding_with_a_history_is_lossless_and_refills_build_no_cache(base, served,
                                                                         monkeypatch):
    drafter = _drafter(history=served)
    want = decode(base, None, Tree(()), PROMPTS, config=GREEDY).tokens
    built = []
    monkeypatch.setattr(drafter, "request_cache",
                        lambda real=drafter.request_cache: built.append(1) or real())
    for batch in (None, 1, 2):
        built.clear()
        assert decode(base, drafter, TREES[1], PROMPTS, config=GREEDY, batch=batch).tokens == want
        assert len(built) <= 1  # one cache a run (none where the last run's is reused)
    state = drafter.start(batch=2, capacity=64)
    new = drafter.start_row(capacity=64)
    state.take_row(1, new)
    assert new._cache is None  # a refill's own (warm) cache is never built
    assert state.rows[1].cache is state.cache and len(state.cache.held) == SERVED + 1


def test_a_later_run_reuses_the_warm_cache_once_the_last_run_is_gone(base, served):
    """Its own responses forgotten, the reused cache drafts as a new one: each run takes the
    same steps; a state still alive keeps its cache to itself."""
    drafter = _drafter(history=served)
    runs = [Decoder(base, drafter).decode(TREES[1], PROMPTS[SERVED:5], config=GREEDY, batch=1)
            for _ in range(2)]
    first = drafter._spare[1]
    third = Decoder(base, drafter).decode(TREES[1], PROMPTS[SERVED:5], config=GREEDY, batch=1)
    assert drafter._spare[1] is first  # reused, not rebuilt
    steps = [r.stats.sequence_accept_lengths for r in (*runs, third)]
    assert steps[0] == steps[1] == steps[2] and runs[0].tokens == third.tokens
    alive = drafter.start(batch=1, capacity=64)
    fresh = drafter.request_cache()
    assert alive.cache is first and first.held == fresh.held == list(range(SERVED))
    assert first.tree.seqs == fresh.tree.seqs  # the runs' responses forgotten
    alive.cache.extend(alive.cache.start(), [1, 2, 3])
    other = drafter.start(batch=1, capacity=64)
    assert other.cache is not alive.cache and other.cache.tree.seqs == fresh.tree.seqs


def test_the_spec_and_the_drafter_directory_carry_the_history(served, tmp_path):
    write_responses(tmp_path / "r.npz", served)
    d = parse_suffix_spec(f"suffix:depth=5,history={tmp_path / 'r.npz'}", vocab_size=256)
    assert d.history == served and d.config.history == served.digest()
    assert d.at_depth(3).history == served and d.at_depth(3).config.num_heads == 3
    d.save(tmp_path / "dir")
    doc = json.loads((tmp_path / "dir" / "drafter.json").read_text())
    assert doc["history"] == "history.npz"
    from treeopt.drafters.suffix import load_suffix

    again = load_suffix(tmp_path / "dir", vocab_size=256)
    assert again.history == served and again.config == d.config
    assert _drafter().config != _drafter(history=served).config  # traces never mix
    with pytest.raises(TreeoptError, match="names its history .* but not its responses"):
        SuffixDrafter.from_config(d.config)
    with pytest.raises(TreeoptError, match="r.npz: tokens must lie in 0 … 9"):
        parse_suffix_spec(f"suffix:history={tmp_path / 'r.npz'}", vocab_size=10)
    with pytest.raises(TreeoptError, match="nope.npz: no such responses file"):
        parse_suffix_spec(f"suffix:history={tmp_path / 'nope.npz'}", vocab_size=256)


def test_a_bad_responses_file_is_refused_naming_it(tmp_path):
    np.savez(tmp_path / "short.npz", tokens=np.arange(3), lengths=np.array([2, 2]))
    np.savez(tmp_path / "other.npz", ids=np.arange(3))
    (tmp_path / "text.npz").write_text("not a zip")
    for name, message in [("short", "lengths sum to 4, but it holds 3 tokens"),
                          ("other", "not a responses file"), ("text", "not a responses file")]:
        with pytest.raises(TreeoptError, match=f"{name}.npz: {message}"):
            read_responses(tmp_path / f"{name}.npz", vocab_size=10)
    assert read_responses(write_responses(tmp_path / "none.npz", History()),
                          vocab_size=10) == History()


def test_responses_are_written_for_suffix_decoding_only_and_with_their_trace(base, tmp_path):
    from treeopt.drafters.prompt_lookup import PromptLookup

    cfg = _config(GREEDY)
    with pytest.raises(FieldError, match="Prompt lookup keeps no requests' responses"):
        calibrate(base, PromptLookup(depth=3, vocab_size=256), PROMPTS, tmp_path / "p.npz",
                  config=cfg, responses=tmp_path / "r.npz")
    calibrate(base, _drafter(), PROMPTS[:2], tmp_path / "t.npz", config=cfg)
    with pytest.raises(FieldError, match="t.npz is finished but .*r.npz was not written"):
        calibrate(base, _drafter(), PROMPTS[:2], tmp_path / "t.npz", config=cfg,
                  responses=tmp_path / "r.npz")


def test_the_cli_writes_responses_and_reads_them_as_a_history(tiny_model_dir, prompts_file,
                                                              tmp_path):
    from test_cli_models import assert_user_error, run

    from treeopt import RankTrace

    common = ("--model", tiny_model_dir, "--prompts", prompts_file, "--max-new-tokens", "12",
              "--top-k", "4")
    proc = run("calibrate", *common, "--drafter", "suffix:depth=4", "--out", tmp_path / "c.npz",
               "--responses-out", tmp_path / "r.npz")
    assert proc.returncode == 0, proc.stderr
    served = read_responses(tmp_path / "r.npz", vocab_size=10**6)
    cold = RankTrace.load(tmp_path / "c.npz")
    assert len(served) == cold.meta["sequences"] and all(len(r) == 12 for r in served.responses)
    proc = run("calibrate", *common, "--drafter", f"suffix:depth=4,history={tmp_path / 'r.npz'}",
               "--out", tmp_path / "w.npz")
    assert proc.returncode == 0, proc.stderr
    warm = RankTrace.load(tmp_path / "w.npz")
    assert warm.meta["heads_config"]["history"] == served.digest()
    assert (warm.ranks == 0).mean() > (cold.ranks == 0).mean()  # it met its own responses
    (tmp_path / "chain.json").write_text("[[0], [0, 0]]")
    live = ("verify", "--model", tiny_model_dir, "--prompts", prompts_file, "--max-new-tokens",
            "12", "--drafter", f"suffix:depth=4,history={tmp_path / 'r.npz'}", "--tree",
            tmp_path / "chain.json", "--prompt-count", "2", "--rounds", "1", "--trace", tmp_path / "w.npz")
    hint = "--batching continuous --batch 1 (with --prompt-count) serves the prompts in turn"
    static, in_turn = run(*live), run(*live, "--batching", "continuous")
    assert static.returncode == in_turn.returncode == 0, static.stderr + in_turn.stderr
    assert hint in static.stderr and hint not in in_turn.stderr
    proc = run("calibrate", *common, "--drafter", "prompt-lookup", "--out", tmp_path / "p.npz",
               "--responses-out", tmp_path / "p-r.npz")
    assert_user_error(proc, "--responses-out", "keeps no requests' responses")


def test_a_request_never_meets_its_own_answer(base, served, tmp_path):
    """Calibrated with the history of their own answers, each of the first three prompts ranks
    as it does alone with the other two's answers cached; live decoding forgets them too, so
    its steps are the walk's; a history without prompt digests forgets nothing."""
    cfg = _config(GREEDY)
    loo_drafter = _drafter(history=served)
    loo, _ = calibrate(base, loo_drafter, PROMPTS[:SERVED], tmp_path / "loo.npz", config=cfg)
    at = 0
    for i in range(SERVED):
        others = History(tuple(r for j, r in enumerate(served.responses) if j != i))
        alone, _ = calibrate(base, _drafter(history=others), [PROMPTS[i]],
                             tmp_path / f"alone-{i}.npz", config=cfg)
        assert np.array_equal(loo.ranks[at: at + alone.positions], alone.ranks), i
        at += alone.positions
    assert at == loo.positions
    live = Decoder(base, loo_drafter).decode(TREES[1], PROMPTS[:SERVED], config=GREEDY, batch=1)
    assert steps_inside(live.stats.sequence_accept_lengths,
                        loo.meta["sequence_positions"]) == step_lengths(TREES[1], loo).tolist()
    blind = _drafter(history=History(served.responses))  # no prompts: its own answers stay
    leaked, _ = calibrate(base, blind, PROMPTS[:SERVED], tmp_path / "leak.npz", config=cfg)
    assert (leaked.ranks == 0).sum() > (loo.ranks == 0).sum()


def test_verify_says_when_its_runs_met_other_requests_than_the_trace(base, served, tmp_path):
    """The trace ranks the prompts one after another through one cache. Verify's one row serving
    them in turn (continuous batching) walks exactly as live; static runs, each starting from the
    history, get the walk with a note saying why it may differ."""
    from treeopt.decoding.verify import SERVED_OTHERWISE, Verification, verify

    drafter = _drafter(history=served)
    later = PROMPTS[SERVED:5]
    trace, _ = calibrate(base, drafter, later, tmp_path / "t.npz", config=_config(GREEDY))
    reports = {how: verify(base, drafter, Verification(TREES[1], GREEDY, trace, batch=1,
                                                       continuous=how == "continuous"), later)
               for how in ("continuous", "static")}
    served_in_turn = reports["continuous"].predicted["inside_trace"]
    assert served_in_turn["measured"] == served_in_turn["mean_accept_length"]
    assert "note" not in served_in_turn and reports["continuous"].lossless
    alone = reports["static"].predicted["inside_trace"]
    assert alone["served_as_ranked"] is False and alone["note"] == SERVED_OTHERWISE
    assert SERVED_OTHERWISE in reports["static"].verdict() and reports["static"].lossless
