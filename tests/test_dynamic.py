"""Dynamic trees: the step's choice rules on exact values, lossless batched live decoding with
trees that differ from row to row, the simulation from calibration equal to live drafting at
every position and to live decoding step by step, pricing to the last digit, and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402, F401
from test_eagle import (  # noqa: E402
    PROMPTS,
    eagle_config,
    random_eagle_drafter,
    trained_eagle_drafter,
)

from treeopt import Tree, TreeoptError  # noqa: E402
from treeopt.decoding.accept import accept_rows  # noqa: E402
from treeopt.decoding.config import DecodeConfig  # noqa: E402
from treeopt.decoding.dynamic_drafting import Pool, RowPlan, ancestry, choose  # noqa: E402
from treeopt.decoding.dynamic_rank_pass import simulate_dynamic  # noqa: E402
from treeopt.decoding.loop import Decoder  # noqa: E402
from treeopt.decoding.rank_pass import greedy_continuations  # noqa: E402
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.dynamic.recommend import price_dynamic, recommend  # noqa: E402
from treeopt.dynamic.simulate import DynamicTrace  # noqa: E402
from treeopt.model.dynamic_settings import DynamicSettings, grid  # noqa: E402
from treeopt.pricing.costs import DraftCost, OverheadCost, StepLatency  # noqa: E402

SETTINGS = [DynamicSettings(1, 3, 4), DynamicSettings(2, 3, 5), DynamicSettings(3, 4, 12),
            DynamicSettings(4, 2, 21)]


@pytest.fixture(scope="module")
def base(peaked):
    return peaked[0]


@pytest.fixture(scope="module")
def random_eagle(base):
    return random_eagle_drafter(base, seed=1)


@pytest.fixture(scope="module")
def trained_eagle(base):
    return trained_eagle_drafter(base)


# -- the step's rules -------------------------------------------------------------------------

def test_settings_are_checked_against_what_the_pool_holds():
    assert DynamicSettings(2, 3, 11).pool == 10
    with pytest.raises(TreeoptError, match="^draft_tokens 12: topk 2 and steps 3 draft only 10"):
        DynamicSettings(2, 3, 12)
    with pytest.raises(TreeoptError, match="^topk must be ≥ 1"):
        DynamicSettings(0, 3, 2)
    assert [s.label for s in grid((1, 2), (2,), (3, 4, 8))] == [
        "topk 1, steps 2, draft tokens 3", "topk 2, steps 2, draft tokens 3",
        "topk 2, steps 2, draft tokens 4"]


def test_choose_keeps_the_best_scores_ties_to_the_shallower_and_every_ancestor():
    # row 0: a tie between a depth-1 node (index 1) and a depth-2 node (index 3)
    pool = Pool(tokens=torch.tensor([[10, 11, 12, 13], [20, 21, 22, 23]]),
                scores=torch.tensor([[-0.1, -1.0, -0.5, -1.0], [-2.0, -0.2, -0.3, -0.4]]),
                parent=torch.tensor([[-1, -1, 0, 0], [-1, -1, 1, 1]]),
                depth=torch.tensor([[1, 1, 2, 2], [1, 1, 2, 2]]))
    tokens, plan = choose(pool, torch.tensor([1, 2]), 3)
    assert tokens.tolist() == [[1, 10, 11, 12], [2, 21, 22, 23]]
    assert plan.parent.tolist() == [[-1, 0, 0, 1], [-1, 0, 1, 1]]
    assert plan.offsets.tolist() == [[0, 1, 1, 2], [0, 1, 2, 2]]
    assert plan.visible[1].int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0],
                                              [1, 1, 0, 1]]


def test_ancestry_of_a_chain_sees_every_ancestor():
    vis = ancestry(torch.tensor([[-1, 0, 1, 2]]), 3)[0].int().tolist()
    assert vis == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]


def test_accept_rows_follows_each_rows_own_tree():
    parent = torch.tensor([[-1, 0, 0, 1], [-1, 0, 1, 1]])
    offsets = torch.tensor([[0, 1, 1, 2], [0, 1, 2, 2]])
    plan = RowPlan(parent, offsets, ancestry(parent, 2), torch.arange(3))
    tokens = torch.tensor([[5, 6, 7, 8], [5, 6, 7, 9]])
    V = 16
    logits = torch.zeros(2, 4, V)
    # row 0: after the root the model says 7 (node 2), after node 2 says 3 (no child): length 2
    logits[0, 0, 7] = logits[0, 2, 3] = 1.0
    # row 1: root → 6 (node 1), node 1 → 9 (node 3), node 3 → 4: length 3
    logits[1, 0, 6] = logits[1, 1, 9] = logits[1, 3, 4] = 1.0
    v = accept_rows(plan, tokens, logits, DecodeConfig(), positions=offsets,
                    keys=torch.zeros(2, dtype=torch.long))
    assert v.length.tolist() == [2, 3]
    assert v.path.tolist() == [[0, 2, 0], [0, 1, 3]]
    assert v.next_root.tolist() == [3, 4]


# -- live --------------------------------------------------------------------------------------

@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: s.label)
def test_dynamic_decoding_is_lossless_batched_and_ragged(base, random_eagle, trained_eagle,
                                                         settings):
    cfg = DecodeConfig(max_new_tokens=24)
    for drafter in (random_eagle, trained_eagle):
        dec = Decoder(base, drafter)
        plain = dec.decode(Tree(()), PROMPTS, config=cfg)
        run = dec.decode(settings, PROMPTS, config=cfg)
        assert run.tokens == plain.tokens
        alone = [dec.decode(settings, [p], config=cfg) for p in PROMPTS]
        assert [a.tokens[0] for a in alone] == list(run.tokens)
        assert [a.stats.accept_lengths for a in alone] == [
            s for s in _per_row(run)]
        assert max(run.stats.accept_lengths) <= settings.steps + 1


def _per_row(run):
    """Each row's accepted lengths, from a batched run's per-step record."""
    out, at = [], 0
    lengths = run.stats.accept_lengths
    for _, steps in run.stats.runs:
        out.append(tuple(lengths[at: at + steps]))
        at += steps
    return out


def test_a_row_that_stops_early_leaves_the_others_lossless(base, trained_eagle):
    dec = Decoder(base, trained_eagle)
    plain = dec.decode(Tree(()), PROMPTS, config=DecodeConfig(max_new_tokens=30))
    eos = plain.tokens[1][3]  # row 1 emits this early
    cfg = DecodeConfig(max_new_tokens=30, eos_token_id=eos)
    want = dec.decode(Tree(()), PROMPTS, config=cfg).tokens
    assert dec.decode(DynamicSettings(3, 4, 10), PROMPTS, config=cfg).tokens == want
    assert len(want[1]) <= 4


def test_sampled_dynamic_decoding_equals_sampled_autoregressive(base, trained_eagle):
    cfg = DecodeConfig(max_new_tokens=20, mode="sample", temperature=0.8, seed=3)
    dec = Decoder(base, trained_eagle)
    assert (dec.decode(DynamicSettings(2, 3, 6), PROMPTS, config=cfg).tokens
            == dec.decode(Tree(()), PROMPTS, config=cfg).tokens)


def test_only_eagle_drafters_draft_dynamically(base):
    heads = build_heads(eagle_config().__class__(kind="medusa", num_heads=2, hidden_size=64,
                                                 vocab_size=256), lm_head=base.lm_head)
    with pytest.raises(TreeoptError, match="dynamic trees need an EAGLE drafter"):
        Decoder(base, heads).decode(DynamicSettings(2, 2, 3), PROMPTS)


# -- simulation --------------------------------------------------------------------------------

def _live_accepted(base, drafter, sequence, t, settings):
    """Tokens a live step at position t accepts: the drafter fed the true prefix, the tree
    drafted, and the true continuation walked through it (the reference)."""
    with torch.inference_mode():
        ids = torch.tensor([sequence])
        hidden = base(input_ids=ids, output_hidden_states=True).hidden_states[-1]
        state = drafter.start(batch=1, capacity=len(sequence) + 64)
        _, state = drafter.advance(hidden[:, : t + 1], ids[:, : t + 1],
                                   torch.arange(t + 1)[None], torch.tensor([t + 1]),
                                   ids[:, t + 1], state)
        tokens, plan = drafter.draft_dynamic(settings, hidden[:, t: t + 1], ids[:, t + 1], state)
    node, length = 0, 1
    while t + 1 + length < len(sequence):
        kids = [j for j in range(tokens.shape[1]) if int(plan.parent[0, j]) == node
                and int(tokens[0, j]) == sequence[t + 1 + length]]
        if not kids:
            break
        node, length = kids[0], length + 1
    return length


@pytest.mark.parametrize("topk,steps", [(1, 3), (2, 3), (3, 4)])
def test_the_simulation_equals_live_drafting_at_every_position(base, random_eagle, topk, steps):
    seqs = greedy_continuations(base, PROMPTS[:2], max_new_tokens=16)
    starts = [len(p) - 1 for p in PROMPTS[:2]]
    trace = simulate_dynamic(base, random_eagle, seqs, starts, topk=topk, steps=steps,
                             batch_size=2, to_end=False)  # every depth's token in the text
    assert trace.steps == steps and len(trace.lengths) == 2
    for s in (DynamicSettings(topk, steps, 2), DynamicSettings(topk, steps, 4),
              DynamicSettings(topk, steps - 1, topk + 1),
              DynamicSettings(topk, steps, 1 + topk + (steps - 1) * topk * topk)):
        got = trace.accepted(s)
        at = 0
        for seq, start, n in zip(seqs, starts, trace.lengths, strict=True):
            want = [_live_accepted(base, random_eagle, seq, start + i, s) for i in range(n)]
            assert got[at: at + n].tolist() == want, s.label
            at += n


def test_the_simulated_walk_reproduces_live_decoding_step_by_step(base, trained_eagle):
    """To the run's last step: the trace holds every position a 40-token run starts a step
    at, each step keeping what the run keeps."""
    settings = DynamicSettings(3, 4, 10)
    dec = Decoder(base, trained_eagle)
    for prompt in PROMPTS:
        live = dec.decode(settings, [prompt], config=DecodeConfig(max_new_tokens=40))
        seq = [*prompt, *live.tokens[0]]
        trace = simulate_dynamic(base, trained_eagle, [seq], [len(prompt) - 1], topk=3, steps=4)
        steps = _walk_steps(trace, settings)
        assert len(steps) >= 3 and trace.lengths == (40 - 1,)
        assert list(live.stats.accept_lengths) == steps and sum(steps) == 40 - 1


def test_a_trace_cut_to_a_shorter_run_walks_as_that_run_decodes(base, trained_eagle):
    """A 40-token run's trace, cut to the 16-token run (``as_run``), walks that run's steps;
    cut to its own length it is unchanged."""
    settings = DynamicSettings(3, 4, 10)
    dec = Decoder(base, trained_eagle)
    long = dec.decode(settings, PROMPTS, config=DecodeConfig(max_new_tokens=40))
    short = dec.decode(settings, PROMPTS, config=DecodeConfig(max_new_tokens=16))
    seqs = [[*p, *t] for p, t in zip(PROMPTS, long.tokens, strict=True)]
    trace = simulate_dynamic(base, trained_eagle, seqs, [len(p) - 1 for p in PROMPTS],
                             topk=3, steps=4)
    same = trace.as_run(40)
    assert same.lengths == trace.lengths and np.array_equal(same.places, trace.places)
    cut = trace.as_run(16, 2)
    assert cut.lengths == (15, 15)
    lengths, walked, at = cut.accepted(settings), [], 0
    for n in cut.lengths:
        t, steps = 0, []
        while t < n:
            steps.append(int(lengths[at + t]))
            t += steps[-1]
        walked.append(tuple(steps))
        at += n
    assert tuple(walked) == short.stats.sequence_accept_lengths[:2]
    assert cut.walk(settings).mean_accept_length == pytest.approx(
        np.mean([x for row in walked for x in row]))
    with pytest.raises(TreeoptError, match="≥ 2 new tokens"):
        trace.as_run(1)


@given(st.data())
def test_a_run_cut_walks_to_its_last_token_and_cuts_compose(data):
    """Every sequence at least a run long walks to the run's last token exactly (no step
    accepts past it), and a cut of a cut is the shorter cut."""
    steps = data.draw(st.integers(1, 4))
    lengths = tuple(data.draw(st.lists(st.integers(1, 12), min_size=1, max_size=4)))
    places = np.array(data.draw(st.lists(st.integers(-1, 6), min_size=sum(lengths) * steps ** 2,
                                         max_size=sum(lengths) * steps ** 2)), np.int16)
    trace = DynamicTrace(2, places.reshape(sum(lengths), steps, steps), lengths)
    n, m = sorted(data.draw(st.lists(st.integers(2, 14), min_size=2, max_size=2)))
    pool = DynamicSettings(2, steps, 2).pool
    settings = DynamicSettings(2, steps, data.draw(st.integers(2, min(pool + 1, 8))))
    cut = trace.as_run(n)
    walked = cut.walk(settings)
    for (accepted, _), whole in zip(walked.sequences, lengths, strict=True):
        if whole >= n - 1:
            assert accepted == n - 1
    twice = trace.as_run(m).as_run(n)
    assert twice.lengths == cut.lengths and np.array_equal(twice.places, cut.places)


def _walk_steps(trace, s):
    lengths, out, t = trace.accepted(s), [], 0
    while t < trace.lengths[0]:
        out.append(int(lengths[t]))
        t += out[-1]
    return out


def test_a_dynamic_trace_round_trips_and_refuses_other_files(tmp_path):
    places = np.array([[[0, -1], [0, 3]], [[-1, -1], [-1, -1]], [[2, -1], [5, 9]]], np.int16)
    trace = DynamicTrace(2, places, (2, 1), {"note": "x"})
    trace.save(tmp_path / "d.npz")
    back = DynamicTrace.load(tmp_path / "d.npz")
    assert (back.topk, back.lengths, back.meta) == (2, (2, 1), {"note": "x"})
    assert np.array_equal(back.places, places)
    assert back.accepted(DynamicSettings(2, 2, 5)).tolist() == [3, 1, 1]
    assert back.accepted(DynamicSettings(2, 2, 7)).tolist() == [3, 1, 2]
    assert back.walk(DynamicSettings(2, 2, 5)).histogram == (0, 1, 0, 1)
    np.savez(tmp_path / "other.npz", ranks=np.zeros(3))
    with pytest.raises(TreeoptError, match="other.npz: not a dynamic trace"):
        DynamicTrace.load(tmp_path / "other.npz")
    with pytest.raises(TreeoptError, match="this dynamic trace is top-k 2 with up to 2 steps"):
        trace.accepted(DynamicSettings(2, 3, 4))


# -- pricing -----------------------------------------------------------------------------------

def _latency():
    q = np.array([1.0, 2.0, 4.0, 8.0])
    return StepLatency({(1, 64): (q, np.array([0.010, 0.011, 0.012, 0.016])),
                        (2, 64): (q, np.array([0.012, 0.014, 0.018, 0.026]))}, "toy")


def test_a_dynamic_step_is_priced_term_by_term():
    draft = DraftCost("eagle", "toy", lambda b, e: 1e-3 * (len(e) + 0.5 * sum(e)))
    over = OverheadCost("toy", lambda b, q, d: 1e-4 * (1 + q + d))
    p = price_dynamic(DynamicSettings(2, 3, 4), 2.5, verify=_latency(), draft=draft,
                      overhead=over, batch=1, context=64)
    assert p.verify_ms == pytest.approx(12.0, abs=1e-12)
    assert p.draft_ms == pytest.approx(3.0 + 0.5 * 5, abs=1e-12)  # expanded (1, 2, 2)
    assert p.overhead_ms == pytest.approx(0.8, abs=1e-12)
    assert p.tokens_per_s == pytest.approx(2.5 / (0.012 + 0.0055 + 0.0008), abs=1e-9)
    assert p.autoregressive_tokens_per_s == pytest.approx(1 / (0.010 + 0.0002), abs=1e-9)


def test_recommend_picks_the_fastest_and_the_best_chain_per_batch():
    places = np.zeros((4, 3, 3), np.int16)  # every true node first in the pool: always kept
    traces = {1: DynamicTrace(1, places, (4,)), 2: DynamicTrace(2, places, (4,))}
    settings = grid((1, 2), (1, 2, 3), (2, 4, 8))
    out = recommend(traces, settings, verify=_latency(), batch=[1, 2], context=64)
    for choice in out:
        best = max(choice.points, key=lambda p: p.tokens_per_s)
        assert choice.best == best
        assert choice.best_chain.settings.topk == 1
    # everything accepted: the whole depth-3 tree pays most at batch 1 (4 tokens, 12 ms)
    assert out[0].best.settings.steps == 3 and out[0].best.expected_accept_length == 4.0


# -- CLI ---------------------------------------------------------------------------------------

def test_the_cli_calibrates_dynamic_traces_and_select_recommends_settings(
        tiny_model_dir, prompts_file, tmp_path):
    from test_cli_models import run

    eagle = tmp_path / "eagle"
    proc = run("train-heads", "--model", tiny_model_dir, "--kind", "eagle", "--data",
               prompts_file, "--generate", "40", "--num-heads", "3", "--steps", "20",
               "--lr", "0.01", "--seq-len", "40", "--batch-size", "4", "--out", eagle)
    assert proc.returncode == 0, proc.stderr
    proc = run("calibrate-dynamic", "--model", tiny_model_dir, "--drafter", eagle, "--prompts",
               prompts_file, "--topk", "1,2", "--steps", "3", "--max-new-tokens", "16",
               "--out", tmp_path / "dyn")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["traces"] == [str(tmp_path / "dyn" / "dynamic-topk1.npz"),
                                                 str(tmp_path / "dyn" / "dynamic-topk2.npz")]
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", eagle, "--prompts",
               prompts_file, "--max-new-tokens", "16", "--out", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    proc = run("grow", "--trace", tmp_path / "t.npz", "--max-nodes", "8", "--out",
               tmp_path / "g.json")
    assert proc.returncode == 0, proc.stderr
    latency = tmp_path / "lat.json"
    proc = run("profile", "--model", tiny_model_dir, "--batch", "1,2", "--context", "32",
               "--tokens", "1,2,4,8", "--repeats", "1", "--out", latency)
    assert proc.returncode == 0, proc.stderr
    proc = run("select", "--growth", tmp_path / "g.json", "--latency", latency,
               "--dynamic", tmp_path / "dyn" / "dynamic-topk1.npz",
               tmp_path / "dyn" / "dynamic-topk2.npz")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["format"] == "treeopt.dynamic-selection/1"
    assert [p["batch"] for p in doc["points"]] == [1, 2]
    for p in doc["points"]:
        assert max(g["tokens_per_s"] for g in p["grid"]) == p["best"]["tokens_per_s"]
        assert p["best_chain"]["topk"] == 1
        assert p["dynamic_over_static"] == p["best"]["speedup"] / p["static"]["speedup"]
        assert p["static"]["autoregressive_tokens_per_s"] == pytest.approx(
            p["static"]["tokens_per_s"] / p["static"]["speedup"])
        assert "--speculative-eagle-topk" in p["engines"]["sglang"]["text"]
    proc = run("select", "--growth", tmp_path / "g.json", "--latency", latency, "--topk", "2")
    assert proc.returncode == 2 and "--draft-tokens and --dynamic-profile need --dynamic" in (
        proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run("select", "--growth", tmp_path / "g.json", "--latency", latency, "--dynamic",
               tmp_path / "t.npz")
    assert proc.returncode == 2 and "not a dynamic trace" in proc.stderr
    proc = run("calibrate-dynamic", "--model", tiny_model_dir, "--drafter", eagle,
               "--prompts", prompts_file, "--topk", "0", "--out", tmp_path / "x")
    assert proc.returncode == 2 and "--topk" in proc.stderr
