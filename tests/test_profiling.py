"""Profiler on the CPU with a tiny config: real timings, resume, out-of-memory, heads, device."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from treeopt.decoding.cache import SlotCache, cache_shape
from treeopt.decoding.plan import tree_plan
from treeopt.decoding.probe import verifier
from treeopt.decoding.tree_forward import verify_step
from treeopt.documents.measure import Measurement, floored_se, median_relative_se, pooled_spread
from treeopt.documents.step_profile import StepProfile
from treeopt.errors import TreeoptError
from treeopt.model.tree import Tree
from treeopt.profiling.device import measure_device
from treeopt.profiling.table import LatencyRecord, LatencyTable
from treeopt.profiling.timing import Call, interleaved
from treeopt.profiling.verify_latency import build_model, profile_verify
from treeopt.roofline import Hardware, ModelConfig, preset

TINY = preset("tiny")


def tiny_medusa() -> tuple[torch.nn.Module, torch.nn.Module]:
    """A tiny model (``TINY``) and two Medusa heads on it, for tests that fake the timing."""
    from treeopt.drafters.heads import build_heads
    from treeopt.registry.drafter_configs import HeadsConfig

    model = build_model(TINY, device="cpu", dtype="fp32")
    heads = build_heads(HeadsConfig(kind="medusa", num_heads=2, hidden_size=TINY.hidden_size,
                                    vocab_size=TINY.vocab_size), lm_head=model.lm_head).eval()
    return model, heads


def profile_chains(out, *, rounds=3, min_seconds=0.0, target_se=0.0, max_rounds=64, **kw):
    """The step profile, at batch 1 on one prompt, of the chains of 1 and 2 nodes."""
    import treeopt.profiling.step as step
    from treeopt.model.growth import Growth

    model, heads = tiny_medusa()
    growth = Growth("empirical", "none", ((0,), (0, 0)), np.array([1.0, 1.8, 2.4]), {})
    return step.profile_steps(model, heads, growth, [[5, 6, 7]], batch=[1], sizes=[1, 2],
                              out=out, max_new_tokens=6, log=lambda _: None,
                              measure=Measurement(rounds, min_seconds, target_se, max_rounds),
                              **kw)


GRID = {"batch": [1, 2], "context": [16, 64], "tokens": [1, 4]}


def test_verify_step_matches_a_full_forward():
    """The profiled call — the decoder's own verify step — is a real forward."""
    model = build_model(TINY, device="cpu", dtype="fp32")
    ids = torch.randint(0, TINY.vocab_size, (2, 10))
    with torch.inference_mode():
        full = model(input_ids=ids).logits  # [b, 10, V]
        cache = SlotCache.allocate(cache_shape(model), batch=2, capacity=11)
        verify_step(verifier(model, tree=False), ids[:, :6], tree_plan(Tree.chain(5), "cpu"), cache=cache,
                    lengths=torch.zeros(2, dtype=torch.long), frontier=0)
        step, _ = verify_step(verifier(model, tree=False), ids[:, 6:], tree_plan(Tree.chain(3), "cpu"), cache=cache,
                              lengths=torch.full((2,), 6), frontier=6)
        assert cache.get_seq_length() == 6
    torch.testing.assert_close(step, full[:, 6:], rtol=1e-4, atol=1e-4)


def test_random_cache_has_the_context_length():
    model = build_model(TINY, device="cpu", dtype="fp32")
    cache = SlotCache.random(cache_shape(model), batch=3, context=17, extra=4)
    assert cache.get_seq_length() == 17 and cache.capacity == 22


def test_profile_on_cpu_writes_every_point_with_spread(tmp_path):
    out = tmp_path / "lat.json"
    table = profile_verify(TINY, out=out, **GRID, repeats=5, warmup=1, log=lambda _: None)
    assert [r.key for r in table.records] == [(b, s, q) for b in (1, 2) for s in (16, 64)
                                              for q in (1, 4)]
    for r in table.records:
        assert r.ok and r.repeats == 5 and 0 < r.ms_p10 <= r.ms_median <= r.ms_p90
        assert r.spread == pytest.approx((r.ms_p90 - r.ms_p10) / r.ms_median, abs=1e-6)
    doc = json.loads(out.read_text())
    assert doc["format"] == "treeopt.latency/1" and doc["device"] == "cpu"
    assert doc["dtype"] == "fp32" and doc["model"]["hidden_size"] == 64
    assert set(doc["records"][0]) == {"batch", "context", "tokens", "ms_median", "ms_p10",
                                      "ms_p90", "repeats", "spread"}
    assert LatencyTable.load(out).points() == table.points()


def test_interrupted_sweep_keeps_its_points_and_resumes(tmp_path):
    out = tmp_path / "lat.json"
    lines: list[str] = []

    def stop_after_first_group(line: str) -> None:
        lines.append(line)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        profile_verify(TINY, out=out, **GRID, repeats=2, warmup=0, log=stop_after_first_group)
    assert [r.key for r in LatencyTable.load(out).records] == [(1, 16, 1), (1, 16, 4)]
    resumed: list[str] = []
    table = profile_verify(TINY, out=out, **GRID, repeats=2, warmup=0, log=resumed.append)
    assert len(table.records) == 8
    assert len(resumed) == 3  # the finished group is not measured again
    assert not any(line.startswith("batch 1 context 16") for line in resumed)


def test_resume_refuses_a_different_model_or_dtype(tmp_path):
    out = tmp_path / "lat.json"
    profile_verify(TINY, out=out, batch=[1], context=[8], tokens=[1], repeats=1, warmup=0,
                   log=lambda _: None)
    other = ModelConfig(**{**TINY.to_json(), "num_layers": 3})
    with pytest.raises(TreeoptError, match="measured for model 'tiny'.*2 layers"):
        profile_verify(other, out=out, batch=[1], context=[8], tokens=[1], repeats=1)
    with pytest.raises(TreeoptError, match="measured in fp32, not bf16"):
        profile_verify(TINY, out=out, dtype="bf16", batch=[1], context=[8], tokens=[1])


def test_bad_sweeps_are_refused(tmp_path):
    with pytest.raises(TreeoptError, match="context 4090 \\+ 8 tree tokens exceeds tiny"):
        profile_verify(TINY, out=tmp_path / "x.json", batch=[1], context=[4090], tokens=[8])
    if not torch.cuda.is_available():
        with pytest.raises(TreeoptError, match="^device cuda: CUDA is not available"):
            profile_verify(TINY, out=tmp_path / "x.json", device="cuda", batch=[1], context=[8],
                           tokens=[1])
    assert not (tmp_path / "x.json").exists()


def test_out_of_memory_stops_one_configuration_only():
    def explode() -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")

    times = interleaved({"ok": Call(run=lambda: sum(range(100))), "big": Call(run=explode)},
                        repeats=3, warmup=0, device="cpu")
    assert len(times["ok"]) == 3
    assert times["big"] == "out of memory: CUDA out of memory. Tried to allocate 80.00 GiB"
    rec = LatencyRecord(8, 4096, 64, error=times["big"])
    assert rec.to_json() == {"batch": 8, "context": 4096, "tokens": 64, "error": times["big"]}


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
def test_step_profile_times_every_design_tree_in_the_loop(tmp_path, kind):
    from treeopt.drafters.heads import build_heads
    from treeopt.model.growth import Growth
    from treeopt.profiling.step import profile_steps
    from treeopt.registry.drafter_configs import HeadsConfig

    model = build_model(TINY, device="cpu", dtype="fp32")
    heads = build_heads(HeadsConfig(kind=kind, num_heads=2, hidden_size=TINY.hidden_size,
                                    vocab_size=TINY.vocab_size), lm_head=model.lm_head,
                        embeddings=model.get_input_embeddings()).eval()
    growth = Growth("empirical", "none", ((0,), (0, 0), (1,)), np.array([1.0, 1.8, 2.4, 2.5]),
                    {})
    out = tmp_path / "step.json"
    prompts = [[5, 6, 7, 8], [9, 10, 11]]
    doc = profile_steps(model, heads, growth, prompts, batch=[1, 2], sizes=[1, 2, 3], out=out,
                        max_new_tokens=6, measure=Measurement(rounds=2), log=lambda _: None)
    keys = [(r.batch, r.size, r.max_depth) for r in doc.records]
    caps = [(None, 0), (None, 1), (None, 2), (None, 3)] + ([(1, 2)] if kind == "hydra" else [])
    assert keys == [(b, n, c) for b in (1, 2) for c, n in caps]
    assert all(r.ms_verify > 0 and r.ms_bookkeeping > 0 for r in doc.records)
    assert StepProfile.load(out).kind == kind
    again = profile_steps(model, heads, growth, prompts, batch=[1, 2], sizes=[1, 2, 3], out=out,
                          max_new_tokens=6, measure=Measurement(rounds=2), log=lambda _: None)
    assert again.records == doc.records  # resumed: nothing measured twice
    with pytest.raises(TreeoptError, match="another max_new_tokens"):
        profile_steps(model, heads, growth, prompts, batch=[1], out=out, max_new_tokens=8)
    older = {k: v for k, v in doc.to_json().items() if k != "steps"}  # every step timed
    out.write_text(json.dumps(older))
    with pytest.raises(TreeoptError, match="another steps \\('all', not 'steady'\\)"):
        profile_steps(model, heads, growth, prompts, batch=[1, 2], sizes=[1, 2, 3], out=out,
                      max_new_tokens=6, measure=Measurement(rounds=2), log=lambda _: None)


def test_an_alongside_profile_records_each_point_once_and_resumes(tmp_path, monkeypatch):
    """Each call profiles one tree beside the batch's autoregressive reference, in the
    decoder's loop; the file is a step profile; a tree recorded at a batch is not measured
    again, nor after a restart from the file."""
    import treeopt.profiling.alongside as alongside

    model, heads = tiny_medusa()
    out = tmp_path / "alongside.json"
    profile = alongside.AlongsideProfile(model, heads, [[5, 6, 7], [8, 9, 10, 11]], out=out,
                                         max_new_tokens=6, measure=Measurement(rounds=1),
                                         sequences=2)
    chain1, chain2 = Tree.chain(1), Tree.chain(2)
    fan2 = Tree.from_choices([[0], [1]])  # chain2's size, another shape: a record of its own
    for b, cap, tree in ((1, None, chain1), (1, 1, chain2), (2, None, chain1), (1, 1, chain2),
                         (1, 1, fan2), (1, 1, Tree.from_choices([[0], [1]]))):
        profile(b, cap, tree)
    doc = StepProfile.load(out)
    assert [(r.batch, r.size, r.depth, r.max_depth) for r in doc.records] == [
        (1, 0, 0, None), (1, 1, 1, None), (1, 2, 2, 1), (2, 0, 0, None), (2, 1, 1, None),
        (1, 2, 1, 1)]
    assert all(r.ms_verify > 0 for r in doc.records)
    assert all(r.rounds >= 2 // r.batch for r in doc.records)  # both sequences each
    monkeypatch.setattr(alongside, "batch_records", lambda *a, **kw: pytest.fail("measured"))
    again = alongside.AlongsideProfile(model, heads, [[5, 6, 7], [8, 9, 10, 11]], out=out,
                                       max_new_tokens=6, measure=Measurement(rounds=1),
                                       sequences=2)
    again(1, None, chain1)
    again(2, None, Tree(()))  # the reference is every batch's own, never a point
    with pytest.raises(TreeoptError, match="a batch of 3 prompts, but only 2 prompts given"):
        again(3, None, chain1)
    profiled = tmp_path / "step.json"  # a profile step file is not extended as if alongside
    profile_chains(profiled)
    with pytest.raises(TreeoptError, match="step.json: a step profile not taken alongside a "
                                           "sweep; name a file of its own"):
        alongside.AlongsideProfile(model, heads, [[5, 6, 7]], out=profiled, max_new_tokens=6)


def test_an_alongside_record_is_rescaled_to_its_batchs_one_reference(tmp_path, monkeypatch):
    """A later tree's record keeps its step over its own reference, in terms of the reference
    measured with the batch's first tree — and the file prices as a step profile: the tree at
    that record, to the last digit."""
    import treeopt.profiling.alongside as alongside
    from treeopt.pricing.sources import profiled_costs

    def record(size, q, draft, verify, book):
        return {"batch": 1, "max_depth": None, "size": size, "depth": min(size, 1), "q": q,
                "expanded": [size] if size else [], "context": 10.0, "ms_draft": draft,
                "ms_verify": verify, "ms_bookkeeping": book, "rounds": 3, "seconds": 1.0}

    measured = iter([[record(0, 1, 0.1, 1.5, 0.4), record(1, 2, 0.5, 2.0, 0.5)],  # 2 ms AR
                     [record(0, 1, 0.2, 3.0, 0.8), record(2, 3, 1.0, 4.4, 1.6)]])  # 4 ms AR
    monkeypatch.setattr(alongside, "batch_records", lambda *a, **kw: next(measured))
    model, heads = tiny_medusa()
    out = tmp_path / "alongside.json"
    profile = alongside.AlongsideProfile(model, heads, [[5, 6, 7]], out=out, max_new_tokens=6)
    profile(1, None, Tree.chain(1))
    profile(1, None, Tree.from_choices([[0], [1]]))
    second = StepProfile.load(out).records[2]
    assert (second.ms_draft, second.ms_verify, second.ms_bookkeeping) == (0.5, 2.2, 0.8)
    costs = profiled_costs(out)
    assert costs.draft.seconds(1, (2,)) * 1e3 == pytest.approx(0.5 - 0.1, abs=1e-12)
    assert costs.overhead.seconds(1, 3, 1) * 1e3 == pytest.approx(0.8 + 0.1, abs=1e-12)
    assert costs.verify.seconds(1, 10, np.array([3]))[0] * 1e3 == pytest.approx(2.2, abs=1e-12)


def test_a_verify_time_that_falls_as_q_grows_is_measured_again(tmp_path, monkeypatch):
    """One busy moment makes a tree's verify step look cheaper than a smaller tree's: that
    record and the one it fell below get another round, and the fall is gone."""
    import treeopt.profiling.step as step
    from treeopt.drafters.heads import build_heads
    from treeopt.model.growth import Growth
    from treeopt.pricing.verify_prices import verify_dips
    from treeopt.registry.drafter_configs import HeadsConfig

    calls: list[tuple[int, int]] = []

    def fake_phases(decoder, shapes, group, config):
        out = []
        for tree in shapes:
            q = tree.num_tokens
            calls.append((len(group), q))
            busy = (len(group), q) == (1, 3) and calls.count((1, 3)) == 1  # the first such
            out.append((1e-4 * q, 2e-3 if busy else 1e-3 * (5 + q), 1e-4))
        return out

    monkeypatch.setattr(step, "_phases", fake_phases)
    model = build_model(TINY, device="cpu", dtype="fp32")
    heads = build_heads(HeadsConfig(kind="medusa", num_heads=2, hidden_size=TINY.hidden_size,
                                    vocab_size=TINY.vocab_size), lm_head=model.lm_head,
                        embeddings=model.get_input_embeddings()).eval()
    growth = Growth("empirical", "none", ((0,), (0, 0), (1,)), np.array([1.0, 1.8, 2.4, 2.5]),
                    {})
    doc = step.profile_steps(model, heads, growth, [[5, 6, 7, 8], [9, 10, 11]], batch=[1, 2],
                             sizes=[1, 2, 3], out=tmp_path / "step.json", max_new_tokens=6,
                             measure=Measurement(rounds=2), log=lambda _: None)
    rounds = {(r.batch, r.q): r.rounds for r in doc.records}
    assert rounds == {(1, 1): 2, (1, 2): 3, (1, 3): 3, (1, 4): 2,
                      (2, 1): 2, (2, 2): 2, (2, 3): 2, (2, 4): 2}
    verify = {(r.batch, r.q): r.ms_verify for r in doc.records}
    assert verify[1, 3] == pytest.approx(8.0)
    assert not verify_dips((r.batch, r.q, r.ms_verify) for r in doc.records)


@pytest.mark.parametrize(("min_seconds", "max_rounds", "expected"),
                         [(0.0, 32, (1, 1)), (3.0, 32, (3, 2)), (4.5, 32, (5, 3)),
                          (4.5, 2, (2, 2))])
def test_records_get_rounds_until_their_decodes_took_min_seconds(tmp_path, monkeypatch,
                                                                 min_seconds, max_rounds,
                                                                 expected):
    """Every decode takes one second on the profiler's clock: a round of the autoregressive
    record is one decode, a tree's round two (the tree and its reference). Records get rounds
    until they were timed ``min_seconds``, at most the measurement's cap; each says its rounds
    and seconds."""
    import treeopt.profiling.step as step

    clock = [0.0]

    def fake_phases(decoder, shapes, group, config):
        clock[0] += len(shapes)
        return [(1e-4, 1e-3 * (5 + tree.num_tokens), 1e-4) for tree in shapes]

    monkeypatch.setattr(step, "_phases", fake_phases)
    monkeypatch.setattr(step, "perf_counter", lambda: clock[0])
    doc = profile_chains(tmp_path / "step.json", rounds=1, min_seconds=min_seconds,
                         max_rounds=max_rounds)
    ar, tree_rounds = expected
    assert [(r.q, r.rounds, r.seconds) for r in doc.records] == [
        (1, ar, float(ar)), (2, tree_rounds, 2.0 * tree_rounds),
        (3, tree_rounds, 2.0 * tree_rounds)]
    with pytest.raises(TreeoptError, match="min_seconds must be ≥ 0, got -1"):
        profile_chains(tmp_path / "other.json", min_seconds=-1)


def test_rounds_added_for_time_come_a_whole_cycle_of_the_prompts_at_a_time(tmp_path,
                                                                          monkeypatch):
    """Two prompts at batch 1: a cycle is 2 rounds. Every decode takes a second; asked for 5 s,
    the autoregressive record (1 s a round) gets 2 + 2 + 2 rounds, a tree's (2 s a round, with
    its reference) 2 + 2, and each prompt is decoded as often as the other."""
    import treeopt.profiling.step as step
    from treeopt.model.growth import Growth

    clock, decoded = [0.0], []

    def fake_phases(decoder, shapes, group, config):
        clock[0] += len(shapes)
        decoded.append((shapes[-1].num_tokens, group[0][0]))
        return [(1e-4, 1e-3 * (5 + tree.num_tokens), 1e-4) for tree in shapes]

    monkeypatch.setattr(step, "_phases", fake_phases)
    monkeypatch.setattr(step, "perf_counter", lambda: clock[0])
    model, heads = tiny_medusa()
    growth = Growth("empirical", "none", ((0,),), np.array([1.0, 1.8]), {})
    doc = step.profile_steps(model, heads, growth, [[5, 6], [7, 8]], batch=[1], sizes=[1],
                             out=tmp_path / "step.json", max_new_tokens=6,
                             measure=Measurement(rounds=1, min_seconds=5.0), sequences=2,
                             log=lambda _: None)
    assert [(r.q, r.rounds) for r in doc.records] == [(1, 6), (2, 4)]
    assert sorted(decoded) == [(1, 5)] * 3 + [(1, 7)] * 3 + [(2, 5)] * 2 + [(2, 7)] * 2


@pytest.mark.parametrize(("target_se", "max_rounds", "expected"),
                         [(0.0, 32, 3), (0.06, 32, 6), (0.05, 32, 8), (0.04, 32, 10),
                          (0.04, 6, 6)])
def test_records_get_rounds_until_their_step_over_the_reference_s_is_known_to_target_se(
        tmp_path, monkeypatch, target_se, max_rounds, expected):
    """A tree's step is 1.0 × its own in its even rounds and 1.2 × in its odd ones, beside a
    steady reference: the rounds' ratios run 1, 1.2, 1, …, relative standard errors of their
    median 0.0836 after 3 rounds, 0.0658 after 4, 0.0614 after 5, 0.0510 after 6, 0.0506 after
    7, 0.0431 after 8, 0.0440 after 9, 0.0380 after 10. Tree
    records get rounds until theirs is at most ``target_se`` (at most the measurement's cap)
    and say it; the autoregressive record, with no reference, keeps its 3."""
    import treeopt.profiling.step as step

    seen: dict[int, int] = {}

    def fake_phases(decoder, shapes, group, config):
        out = [(1e-4, 6e-3, 1e-4)]  # the reference (or the autoregressive record itself)
        for tree in shapes[1:]:
            q = tree.num_tokens
            slow = 1.2 if seen.get(q, 0) % 2 else 1.0
            seen[q] = seen.get(q, 0) + 1
            out.append((1e-4 * slow, 1e-3 * (5 + q) * slow, 1e-4 * slow))
        return out

    monkeypatch.setattr(step, "_phases", fake_phases)
    doc = profile_chains(tmp_path / "step.json", rounds=3, target_se=target_se,
                         max_rounds=max_rounds)
    se = median_relative_se([1.2 if r % 2 else 1.0 for r in range(expected)])
    assert [(r.q, r.rounds, r.se) for r in doc.records] == [
        (1, 3, None), (2, expected, round(se, 6)), (3, expected, round(se, 6))]
    with pytest.raises(TreeoptError, match="target_se must be in"):
        profile_chains(tmp_path / "other.json", target_se=2)


@pytest.mark.parametrize("seed", range(3))
def test_every_record_meets_its_target_or_the_cap_on_a_noisy_machine(tmp_path, monkeypatch,
                                                                     seed):
    """Each decode's phases off by 1 to 3 times (log-uniform, each run on its own): every tree
    record says a standard error — recomputed from its rounds — at most its target, or it took
    the cap (a re-measured fall may add a round or two beyond it)."""
    import treeopt.profiling.step as step

    rng = np.random.default_rng(seed)
    ratios: dict[int, list[float]] = {}

    def fake_phases(decoder, shapes, group, config):
        out = [tuple(x * float(np.exp(rng.uniform(0.0, np.log(3.0))))
                     for x in (1e-4, 1e-3 * (5 + tree.num_tokens), 1e-4)) for tree in shapes]
        if len(shapes) > 1:
            ratios.setdefault(shapes[1].num_tokens, []).append(sum(out[1]) / sum(out[0]))
        return out

    monkeypatch.setattr(step, "_phases", fake_phases)
    for target in (0.05, 0.15):
        ratios.clear()
        doc = profile_chains(tmp_path / f"step-{target}.json", rounds=2, target_se=target,
                             max_rounds=20)
        spread = pooled_spread(ratios.values())
        for r in doc.records[1:]:
            se = floored_se(ratios[r.q], spread)
            assert se >= median_relative_se(ratios[r.q])
            assert r.rounds == len(ratios[r.q]) and r.se == round(se, 6)
            assert se <= target or r.rounds >= 20, (target, r.q, r.rounds, se)


def test_a_record_whose_rounds_agree_by_chance_gets_the_rounds_its_batchs_noise_needs(
        tmp_path, monkeypatch):
    """The 1-node chain's step is 1.5 × the reference's in every round; the 2-node chain's
    alternates 1.0 and 1.3 ×. Alone, the steady record's two rounds would say a standard
    error of 0 and stop; it shares the machine with the other, so it gets the rounds that the
    pooled spread needs at the target, and says that standard error."""
    import treeopt.profiling.step as step

    seen: dict[int, int] = {}

    def fake_phases(decoder, shapes, group, config):
        out = [(0.0, 1e-2, 0.0)]
        for tree in shapes[1:]:
            q = tree.num_tokens
            k = seen[q] = seen.get(q, 0) + 1
            out.append((0.0, 1e-2 * (1.5 if q == 2 else 1.3 if k % 2 else 1.0), 0.0))
        return out

    monkeypatch.setattr(step, "_phases", fake_phases)
    doc = profile_chains(tmp_path / "step.json", rounds=2, target_se=0.05, max_rounds=40)
    steady, noisy = doc.records[1:]
    assert (steady.q, noisy.q) == (2, 3)
    assert steady.rounds > 2 and steady.se > 0
    spread = pooled_spread([[1.5] * steady.rounds,
                            [1.3 if k % 2 else 1.0 for k in range(1, noisy.rounds + 1)]])
    assert steady.se == round(floored_se([1.5] * steady.rounds, spread), 6) <= 0.05
    assert steady.rounds < 40  # met the target, not the cap


def test_every_record_decodes_as_many_sequences_rotating_through_the_prompts(tmp_path,
                                                                             monkeypatch):
    """A batch-1 record is not one prompt's: round r decodes the r-th group of b prompts,
    cyclically, and smaller batches get the rounds it takes to decode ``sequences`` of them."""
    import treeopt.profiling.step as step
    from treeopt.model.growth import Growth

    groups: dict[tuple[int, int], list[list[int]]] = {}  # (batch, q) → first token of each row

    def fake_phases(decoder, shapes, group, config):
        for tree in shapes:
            groups.setdefault((len(group), tree.num_tokens), []).append([p[0] for p in group])
        return [(1e-4, 1e-3 * (5 + tree.num_tokens), 1e-4) for tree in shapes]

    monkeypatch.setattr(step, "_phases", fake_phases)
    model, heads = tiny_medusa()
    growth = Growth("empirical", "none", ((0,), (0, 0)), np.array([1.0, 1.8, 2.4]), {})
    prompts = [[5, 6, 7, 8], [9, 10, 11], [12, 13]]
    doc = step.profile_steps(model, heads, growth, prompts, batch=[1, 2], sizes=[1],
                             out=tmp_path / "step.json", max_new_tokens=6,
                             measure=Measurement(rounds=1), sequences=3, log=lambda _: None)
    # the tree of q = 2 (and its autoregressive references, q = 1, at each round)
    assert groups[1, 2] == [[5], [9], [12]]
    assert groups[2, 2] == [[5, 9], [12, 5]]
    # each round: the autoregressive entry, then the tree's reference, on the round's prompts
    assert groups[1, 1] == [[5], [5], [9], [9], [12], [12]]
    rounds = {(r.batch, r.q): r.rounds for r in doc.records}
    assert rounds == {(1, 1): 3, (1, 2): 3, (2, 1): 2, (2, 2): 2}
    context = {r.batch: r.context for r in doc.records}
    # the mean length of the prompts decoded (3, and 3.25 → 3.2 to a tenth), + half the new tokens
    assert context == {1: 6.0, 2: 6.2}
    with pytest.raises(TreeoptError, match="^sequences must be ≥ 1"):
        step.profile_steps(model, heads, growth, prompts, batch=[1], sizes=[1],
                           out=tmp_path / "other.json", sequences=0, log=lambda _: None)


def test_device_micro_benchmarks_make_a_hardware_row(tmp_path):
    doc = measure_device(device="cpu", dtypes=["fp32"], matmul_size=128, copy_mib=4, repeats=3,
                         warmup=1)
    hw = Hardware.from_json(doc, source="measured")
    assert hw.tflops_fp32 > 0 and hw.bandwidth_gbs > 0 and hw.tflops_bf16 == hw.tflops_fp32
    assert [m["name"] for m in doc["measurements"]] == ["matmul_fp32", "copy"]
    assert doc["measurements"][0]["unit"] == "TFLOP/s"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("method", ["eager", "cuda-graphs"])
def test_profile_on_cuda(tmp_path, method):
    table = profile_verify(TINY, out=tmp_path / "lat.json", device="cuda", dtype="bf16",
                           batch=[1, 4], context=[128], tokens=[1, 8], repeats=5, warmup=2,
                           method=method, log=lambda _: None)
    assert table.device.startswith("cuda:") and all(r.ok for r in table.records)
    assert table.meta["method"] == method


def test_a_batch_size_timed_apart_and_profiled_again_alone(tmp_path):
    """``measure_at`` times one batch size's records otherwise than the rest; ``retime``
    profiles a batch size again, its records replaced, the others kept as they were."""
    from treeopt.drafters.heads import build_heads
    from treeopt.model.growth import Growth
    from treeopt.profiling.step import profile_steps
    from treeopt.registry.drafter_configs import HeadsConfig

    model = build_model(TINY, device="cpu", dtype="fp32")
    heads = build_heads(HeadsConfig(kind="medusa", num_heads=2, hidden_size=TINY.hidden_size,
                                    vocab_size=TINY.vocab_size), lm_head=model.lm_head,
                        embeddings=model.get_input_embeddings()).eval()
    growth = Growth("empirical", "none", ((0,), (0, 0)), np.array([1.0, 1.8, 2.4]), {})
    out, prompts = tmp_path / "step.json", [[5, 6, 7, 8], [9, 10, 11]]

    def profiled(batch=(1, 2), **kw):
        return profile_steps(model, heads, growth, prompts, batch=list(batch), sizes=[1, 2],
                             out=out, max_new_tokens=6, measure=Measurement(rounds=2),
                             log=lambda _: None, **kw)

    first = profiled(measure_at={2: Measurement(rounds=6)})
    rounds = {b: [r.rounds for r in first.records if r.batch == b] for b in (1, 2)}
    assert min(rounds[2]) >= 6 > max(rounds[1])  # (a falling verify time adds a round or two)
    again = profiled(retime=False)  # resumed: nothing measured again
    assert again.records == first.records
    again = profiled(batch=[2], retime=True)  # batch 2 profiled again, timed alike
    assert [r for r in again.records if r.batch == 1] == [r for r in first.records
                                                          if r.batch == 1]
    assert max(r.rounds for r in again.records if r.batch == 2) < 6
