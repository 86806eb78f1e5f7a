"""Adaptive speculation live: a step policy drives the decoder round by round
(:class:`treeopt.adaptive.live.ChainSource`), and the live rounds equal the replay of the same
prompts' trace exactly (:func:`treeopt.adaptive.live.replay_batches`), at batch 1 and above,
losslessly; the Hardware page's replay figures."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from test_eagle import PROMPTS, trained_eagle_drafter  # noqa: E402
from test_prompt_lookup import PROMPTS as REPEATING  # noqa: E402

from treeopt import Tree, TreeoptError  # noqa: E402
from treeopt.adaptive import (  # noqa: E402
    FixedSteps,
    RoundState,
    SGLangConfig,
    SGLangPolicy,
    SGLangSlot,
)
from treeopt.adaptive.live import (  # noqa: E402
    ChainSource,
    Rounds,
    replay_batches,
    replay_continuous,
    steady_tokens_per_s,
)
from treeopt.adaptive.policies import TRTLLMSchedule, VLLMSchedule  # noqa: E402
from treeopt.adaptive.replay import replay  # noqa: E402
from treeopt.adaptive.workload import ChainAcceptance  # noqa: E402
from treeopt.decoding.calibrate import CalibrateConfig, calibrate  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, Decoder, decode, decode_alongside  # noqa: E402
from treeopt.drafters.prompt_lookup import PromptLookup  # noqa: E402
from treeopt.model.runs import as_run, as_runs  # noqa: E402

NEW = 32  # tokens per prompt
CFG = DecodeConfig(max_new_tokens=NEW)
SECONDS = np.array([1.0, 1.4, 1.7, 2.0, 2.2])  # a chain step of k = 0 … 4 (exactness needs none)


def quick(steps, *, overlap: bool, start: int = 2) -> SGLangConfig:
    """An SGLang slot that decides every round after two of warm-up, so that a short run moves
    (the engine's defaults decide from round 15 on)."""
    slot = SGLangSlot(steps, warmup_batches=2, update_interval=1, ema_alpha=0.5)
    return SGLangConfig(((1, slot),), num_steps=start, overlap=overlap)


@pytest.fixture(scope="module")
def base(peaked):
    return peaked[0]


@pytest.fixture(scope="module")
def prompts():
    """The prompts the EAGLE drafter of test_eagle is trained on the continuations of."""
    return PROMPTS


@pytest.fixture(scope="module")
def eagle(base):
    return trained_eagle_drafter(base)


@pytest.fixture(scope="module")
def lookup():
    return PromptLookup(depth=4, min_n=1, max_n=3, vocab_size=256)


@pytest.fixture(scope="module")
def plain(base, prompts):
    return decode(base, None, Tree(()), prompts, config=CFG).tokens


def acceptance_of(base, drafter, prompts, tmp_path, name) -> ChainAcceptance:
    """The chain acceptance of the positions a run of ``NEW`` tokens visits, each a miss past
    the run's last token: a trace calibrated with the run's budget records every one."""
    trace, _ = calibrate(base, drafter, prompts, tmp_path / f"{name}.npz",
                         config=CalibrateConfig(top_k=4, max_new_tokens=NEW))
    return ChainAcceptance.from_rank_trace(as_run(trace, NEW))


def live_batches(decoder, source, prompts, batch):
    """``prompts`` decoded ``batch`` at a time by ``source``: every row's tokens, and the tokens
    its steps kept (none past the budget)."""
    out, emitted = [], 0
    for g in range(0, len(prompts), batch):
        run = decoder.decode(source, prompts[g: g + batch], config=CFG)
        out += run.tokens
        emitted += sum(run.stats.accept_lengths)
    return out, emitted


@pytest.fixture(scope="module")
def eagle_acceptance(base, eagle, prompts, tmp_path_factory):
    return acceptance_of(base, eagle, prompts, tmp_path_factory.mktemp("eagle"), "eagle")


POLICIES = {
    "sglang-overlap": lambda: SGLangPolicy(quick((0, 1, 2, 4), overlap=True)),
    "sglang-no-overlap": lambda: SGLangPolicy(quick((1, 2, 3, 4), overlap=False, start=4)),
    "sglang-default": lambda: SGLangPolicy(SGLangConfig.default().capped(4)),
    "vllm": lambda: VLLMSchedule(((1, 1, 4), (2, 3, 2), (4, 8, 1)), num_speculative_tokens=4),
    "trtllm": lambda: TRTLLMSchedule(((1, 3), (2, 1), (4, 2)), max_draft_len=3),
}


@pytest.mark.parametrize("batch", [1, 2, 4])
@pytest.mark.parametrize("name", POLICIES)
def test_eagle_live_rounds_equal_the_replay_and_are_lossless(base, eagle, prompts, plain,
                                                             eagle_acceptance, name, batch):
    source = ChainSource(POLICIES[name](), max_steps=4)
    tokens, emitted = live_batches(Decoder(base, eagle), source, prompts, batch)
    assert tokens == list(plain)
    replayed = replay_batches(POLICIES[name](), eagle_acceptance, batch=batch, costs=SECONDS)
    live = source.rounds()
    assert live.first_difference(replayed) is None and live.equals(replayed)
    # the rounds move (the tables: as the batch drains), and rows accept drafts
    if name in ("sglang-overlap", "sglang-no-overlap") or name in ("vllm", "trtllm") and batch > 1:
        assert len(set(live.steps)) > 1
    assert max(live.accept_length) > 1 and max(live.steps) > 1
    # live steps count what they keep, and the replay's steps what the trace lets them keep
    assert emitted == sum(len(t) - 1 for t in tokens) == replayed.tokens


def test_prompt_lookup_live_rounds_equal_the_replay(base, lookup, tmp_path):
    prompts = REPEATING  # the peaked model's text repeats them: the lookup hits
    plain = decode(base, None, Tree(()), prompts, config=CFG).tokens
    acc = acceptance_of(base, lookup, prompts, tmp_path, "lookup")
    decoder = Decoder(base, lookup)
    for batch in (1, 4):
        for overlap in (True, False):
            source = ChainSource(SGLangPolicy(quick((0, 1, 2, 4), overlap=overlap)), max_steps=4)
            assert live_batches(decoder, source, prompts, batch)[0] == list(plain)
            replayed = replay_batches(SGLangPolicy(quick((0, 1, 2, 4), overlap=overlap)), acc,
                                      batch=batch, costs=SECONDS)
            assert source.rounds().equals(replayed)
            assert 0 in source.rounds().steps and max(source.rounds().steps) >= 2


def test_a_fixed_source_decodes_as_the_static_chain(base, eagle, prompts):
    """The source path and the static path are one loop: the same tokens and accepted lengths;
    k = 0 through a source is plain decoding that feeds the drafter."""
    decoder = Decoder(base, eagle)
    for k in (0, 3):
        source = ChainSource(FixedSteps(k), max_steps=4)
        via_source = decoder.decode(source, prompts[:4], config=CFG)
        static = decoder.decode(Tree.chain(k) if k else Tree(()), prompts[:4], config=CFG)
        assert via_source.tokens == static.tokens
        assert via_source.stats.accept_lengths == static.stats.accept_lengths
        assert set(source.rounds().steps) == {k}


def test_alternating_runs_keep_their_own_sources(base, eagle, prompts, plain):
    decoder = Decoder(base, eagle)
    a = ChainSource(SGLangPolicy(quick((0, 1, 2, 4), overlap=True)), max_steps=4)
    b = ChainSource(FixedSteps(2), max_steps=4)
    got = decode_alongside([(decoder, a), (decoder, b), (decoder, Tree.chain(2))], prompts[:2],
                           config=CFG)
    assert all(r.tokens == tuple(plain[:2]) for r in got)
    assert got[1].stats.accept_lengths == got[2].stats.accept_lengths
    assert len(a.rounds().steps) == got[0].stats.iterations


def test_the_round_state_counts_running_rows_and_the_round_before(base, eagle, prompts):
    seen = []

    class Recorder(FixedSteps):
        def decide(self, state: RoundState) -> int:
            seen.append(state)
            return 1

    Decoder(base, eagle).decode(ChainSource(Recorder(1), max_steps=1), prompts[:3],
                                config=DecodeConfig(max_new_tokens=6))
    assert [s.round for s in seen] == list(range(len(seen)))
    assert seen[0] == RoundState(0, 3, None) and seen[1].previous_batch == 3
    assert all(s.batch <= 3 for s in seen)


def test_bad_sources_are_refused(base, eagle, prompts):
    decoder = Decoder(base, eagle)
    with pytest.raises(TreeoptError, match="depth 5 but there are only 4 heads"):
        decoder.decode(ChainSource(FixedSteps(1), max_steps=5), prompts[:1], config=CFG)
    with pytest.raises(TreeoptError, match=r"fixed 3 steps: chose 3 steps in round 0 at batch 1;"
                                           r" the drafter drafts chains of 0 … 2 steps"):
        decoder.decode(ChainSource(FixedSteps(3), max_steps=2), prompts[:1], config=CFG)
    class Wider(ChainSource):
        def tree(self, state):
            return Tree.from_choices([[0], [1]])

    with pytest.raises(TreeoptError, match=r"round 0: the tree source chose a tree it does not "
                                           r"offer in its trees \(\[\[0\], \[1\]\]\)"):
        decoder.decode(Wider(FixedSteps(1), max_steps=2), prompts[:1], config=CFG)
    class Empty(ChainSource):
        trees = ()

    with pytest.raises(TreeoptError, match="a tree source with no trees to choose from"):
        decoder.decode(Empty(FixedSteps(0), max_steps=0), prompts[:1], config=CFG)
    with pytest.raises(TreeoptError, match="max_steps must be ≥ 0"):
        ChainSource(FixedSteps(1), max_steps=-1)
    with pytest.raises(TreeoptError, match="verified before its tree was chosen"):
        ChainSource(FixedSteps(1), max_steps=1).verified(RoundState(0, 1), [0])


# ---- the replay of what the live loop runs ----------------------------------------------------

def toy(rows, lengths):
    return ChainAcceptance(np.array(rows, dtype=np.int8), lengths, "toy")


def test_replay_batches_drains_each_batch_and_carries_the_policy():
    # four sequences of 3, 1, 2, 2 positions; every position accepts min(k, 1)
    acc = toy([[0, 1]] * 8, (3, 1, 2, 2))
    r = replay_batches(FixedSteps(1), acc, batch=2, costs=np.array([1.0, 2.0]))
    # batch 1: rows at 0 and 3 → 2, 5 (row 1 ends) → row 0 alone: 4 (ends)
    # batch 2: rows at 4 and 6 → 6, 8 (both end)
    assert r.rows.tolist() == [2, 1, 2] and r.steps.tolist() == [1, 1, 1]
    assert r.accept_length.tolist() == [2.0, 2.0, 2.0] and r.tokens == 10
    assert r.seconds == 6.0  # every round priced at the batch's rows
    assert steady_tokens_per_s(r, np.array([1.0, 2.0])) == 8 / 4
    single = [replay(FixedSteps(1), acc.select([i]), batch=1, costs=np.array([1.0, 2.0]),
                     drain=True) for i in range(4)]
    at_one = replay_batches(FixedSteps(1), acc, batch=1, costs=np.array([1.0, 2.0]))
    assert at_one.steps.size == sum(s.rounds for s in single)
    with pytest.raises(TreeoptError, match="batch 3: toy has 4 sequences, not a whole number"):
        replay_batches(FixedSteps(1), acc, batch=3, costs=np.array([1.0, 2.0]))


def test_rounds_name_the_first_round_that_differs():
    acc = toy([[0, 1]] * 4, (4,))
    r = replay(FixedSteps(1), acc, batch=1, costs=np.array([1.0, 2.0]), drain=True)
    assert Rounds((1, 1), (1, 1), (2.0, 2.0)).equals(r)
    assert Rounds((1, 0), (1, 1), (2.0, 1.0)).first_difference(r) == 1
    assert Rounds((1,), (1,), (2.0,)).first_difference(r) == 1
    assert not Rounds((1,), (1,), (2.0,)).equals(r)


def test_every_drafter_kind_runs_autoregressive_rounds_between_drafted_ones(base, peaked):
    """A source's empty tree between chains, for the kinds with a state of their own (a draft
    model catches up) and without (Medusa, Hydra): lossless, and the rounds as chosen."""
    import copy

    from treeopt.drafters.draft_model import DraftModel
    from treeopt.drafters.heads import build_heads
    from treeopt.registry.drafter_configs import HeadsConfig

    draft_lm = copy.deepcopy(base)
    with torch.no_grad():
        for p in draft_lm.parameters():
            p.add_(0.1 * p.std() * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    drafters = [DraftModel(draft_lm, depth=2)]
    for kind in ("medusa", "hydra"):
        torch.manual_seed(0)
        drafters.append(build_heads(HeadsConfig(kind=kind, num_heads=2, hidden_size=64,
                                                vocab_size=256),
                                    lm_head=base.lm_head, embeddings=base.model.embed_tokens))
    cfg = DecodeConfig(max_new_tokens=16)
    want = decode(base, None, Tree(()), PROMPTS, config=cfg).tokens
    slot = SGLangSlot((0, 1, 2), warmup_batches=1, update_interval=1)
    for drafter in drafters:
        source = ChainSource(SGLangPolicy(SGLangConfig(((1, slot),), num_steps=0, overlap=False)),
                             max_steps=2)
        assert Decoder(base, drafter.eval()).decode(source, PROMPTS, config=cfg).tokens == want
        assert source.rounds().steps[:2] == (0, 0) and 1 in source.rounds().steps


# ---- the Hardware page's replay ---------------------------------------------------------------

@pytest.fixture(scope="module")
def shipped():
    from treeopt.demo.layout import default_root
    from treeopt.demo.load import load

    if not (default_root() / "manifest.json").exists():
        pytest.skip(f"no built demo at {default_root()}")
    return load(with_model=False)


@pytest.fixture(scope="module")
def demo_replay(shipped):
    from treeopt.workbench.adaptive import demo_adaptive

    found = demo_adaptive(shipped, workload="steady")
    if found is None:
        pytest.skip("the demo holds no EAGLE step profile")
    return found


def test_the_demo_replay_sets_the_four_strategies_side_by_side(shipped, demo_replay):
    from treeopt.adaptive.report import adaptive_report
    from treeopt.workbench.adaptive import STRATEGIES, strategy_rates

    r = demo_replay
    assert r.batches == [1, 2, 4, 8] and (r.sequences, r.positions) == (48, 64)
    trace = as_runs(shipped.heldout_traces["eagle"], [65] * 48)  # runs of 65 tokens: 64 steps
    again = adaptive_report(ChainAcceptance.from_rank_trace(trace), shipped.step_costs("eagle"),
                            batches=[1, 2, 4, 8], growth=shipped.growths["eagle"],
                            static_trace=trace)
    assert r.report.tuned == again.tuned
    for side, other in zip(r.report.sides, again.sides, strict=True):
        assert side.tuned.steps.tolist() == other.tuned.steps.tolist()
        assert (side.default.tokens_per_s, side.static.tokens_per_s) == (
            other.default.tokens_per_s, other.static.tokens_per_s)
    rates = strategy_rates(r)
    assert list(rates) == list(STRATEGIES)
    for i, s in enumerate(r.report.sides):  # tuned never below the default (the tuning's floor)
        assert rates[STRATEGIES[1]][i] >= rates[STRATEGIES[0]][i] == s.default.tokens_per_s
        assert rates[STRATEGIES[2]][i] == s.best_fixed.tokens_per_s
    with pytest.raises(TreeoptError, match=r"batch 3: the replay covers batch sizes \[1, 2, 4, 8\]"):
        r.side(3)


def test_the_shifting_workload_orders_the_prompts_easiest_first(shipped):
    from treeopt.workbench.adaptive import demo_adaptive

    shifting = demo_adaptive(shipped, workload="shifting", sequences=8, positions=32,
                             batches=(1,))
    ell = shifting.side(1).best_fixed.accept_length
    half = ell.size // 2
    assert ell[:half].mean() > ell[half:].mean()  # acceptance falls along the workload
    assert shifting.report.workload.endswith("easiest first")
    with pytest.raises(TreeoptError, match="workload 'bursty': expected one of steady, shifting"):
        demo_adaptive(shipped, workload="bursty")


def test_the_replay_figures(demo_replay):
    from treeopt.workbench.adaptive import STRATEGIES, moving_mean, rounds_figure, strategies_figure

    side = demo_replay.side(1)
    fig = rounds_figure(demo_replay, 1, window=5)
    names = [t.name for t in fig.data]
    assert names == [f"{STRATEGIES[0]}: steps", f"{STRATEGIES[0]}: E[L]",
                     f"{STRATEGIES[1]}: steps", f"{STRATEGIES[1]}: E[L]"]
    assert list(fig.data[0].y) == side.default.steps.tolist()
    assert np.allclose(fig.data[3].y, moving_mean(side.tuned.accept_length, 5))
    assert fig.layout.title.text.replace("<br>", " ") == (  # wrapped to fit a column
        "eagle at batch 1: steps chosen and E[L] per round (steady workload)")
    bars = strategies_figure(demo_replay)
    assert [b.name for b in bars.data] == list(STRATEGIES)
    assert list(bars.data[1].x) == ["1", "2", "4", "8"]
    assert list(bars.data[1].y) == [s.tuned.tokens_per_s for s in demo_replay.report.sides]
    assert list(bars.data[3].y) == [s.static.tokens_per_s for s in demo_replay.report.sides]


def test_the_live_page_shows_the_replay(shipped, demo_replay):
    from apptest import assert_clean, figures, live_section, open_page

    at = live_section(open_page("live"), "Adaptive speculation")
    assert "Adaptive speculation (EAGLE): the engines' step controllers replayed" in [
        h.value for h in at.header]
    figs = figures(at)
    rounds, bars = next((a, b) for a, b in zip(figs, figs[1:], strict=False)
                        if b["layout"]["title"]["text"].startswith("eagle: predicted tokens/s"))
    assert rounds["data"][0]["y"] == demo_replay.side(1).default.steps.tolist()
    assert [t["y"] for t in bars["data"][:3]] == [
        [s.default.tokens_per_s for s in demo_replay.report.sides],
        [s.tuned.tokens_per_s for s in demo_replay.report.sides],
        [s.best_fixed.tokens_per_s for s in demo_replay.report.sides]]
    at.selectbox(key="live_ad_batch").set_value(4).run()
    assert_clean(at)
    rounds = next(f for f in figures(at)
                  if f["layout"]["title"]["text"].startswith("eagle at batch 4"))
    assert rounds["data"][2]["y"] == demo_replay.side(4).tuned.steps.tolist()
    at.radio(key="live_ad_workload").set_value("shifting").run()
    assert_clean(at)
    assert any(f["layout"]["title"]["text"].replace("<br>", " ") == "eagle: predicted "
               "tokens/s per batch size (shifting workload)" for f in figures(at))


@pytest.mark.parametrize("batch", [2, 4])
@pytest.mark.parametrize("name", ["sglang-overlap", "vllm"])
def test_continuous_live_rounds_equal_the_tunings_replay(base, eagle, prompts, plain,
                                                         eagle_acceptance, name, batch):
    """Decoded as the engines batch (a finished row takes the next prompt), the live rounds are
    the replay the tuning ranks configs by, drained at the end; its steady window is that
    replay without draining."""
    source = ChainSource(POLICIES[name](), max_steps=4)
    run = Decoder(base, eagle).decode(source, prompts, config=CFG, batch=batch)
    assert list(run.tokens) == list(plain)
    replayed = replay_continuous(POLICIES[name](), eagle_acceptance, batch=batch, costs=SECONDS)
    live = source.rounds()
    assert live.first_difference(replayed) is None and live.equals(replayed)
    steady = replay(POLICIES[name](), eagle_acceptance, batch=batch, costs=SECONDS)
    window = int((replayed.rows == batch).sum())
    assert window == len(steady.steps) and list(replayed.steps[:window]) == list(steady.steps)
    kept = sum(run.stats.accept_lengths)  # live steps count what they keep, none past the budget
    assert kept == sum(len(t) - 1 for t in run.tokens) == replayed.tokens
