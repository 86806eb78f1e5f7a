"""Live tree decoding: tree-forward logits, cache compaction, lossless greedy decoding, errors."""

from __future__ import annotations

import copy
import itertools

import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402
from continuous import assert_each_prompt_as_alone  # noqa: E402

from treeopt import Tree, TreeoptError  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, autoregressive, decode, generate  # noqa: E402
from treeopt.decoding.plan import tree_plan  # noqa: E402
from treeopt.decoding.probe import verifier  # noqa: E402
from treeopt.decoding.rank_pass import greedy_continuations  # noqa: E402
from treeopt.decoding.tree_forward import verify_step  # noqa: E402
from treeopt.drafters.training import TrainConfig, train_heads  # noqa: E402

MEDUSA_63 = [  # Medusa's mc_sim_7b_63
    [0], [0, 0], [1], [0, 1], [2], [0, 0, 0], [1, 0], [0, 2], [3], [0, 3], [4], [0, 4], [2, 0],
    [0, 5], [0, 0, 1], [5], [0, 6], [6], [0, 7], [0, 1, 0], [1, 1], [7], [0, 8], [0, 0, 2],
    [3, 0], [0, 9], [8], [9], [1, 0, 0], [0, 2, 0], [1, 2], [0, 0, 3], [4, 0], [2, 1], [0, 0, 4],
    [0, 0, 5], [0, 0, 0, 0], [0, 1, 1], [0, 0, 6], [0, 3, 0], [5, 0], [1, 3], [0, 0, 7],
    [0, 0, 8], [0, 0, 9], [6, 0], [0, 4, 0], [1, 4], [7, 0], [0, 1, 2], [2, 0, 0], [3, 1],
    [2, 2], [8, 0], [0, 5, 0], [1, 5], [1, 0, 1], [0, 2, 1], [9, 0], [0, 6, 0], [0, 0, 0, 1],
    [1, 6], [0, 7, 0],
]
TREES = {
    "one-node": Tree.chain(1),
    "chain": Tree.chain(4),
    "wide": Tree.from_choices([[i] for i in range(10)] + [[0, j] for j in range(3)]),
    "medusa-63": Tree.from_choices(MEDUSA_63),
}


def prefill(model, rows, capacity=32):
    """A SlotCache holding each row of ``rows`` (equal lengths) at slots 0 … len-1."""
    cache = verifier(model, tree=False).cache(batch=len(rows), capacity=capacity)
    n = len(rows[0])
    verify_step(verifier(model, tree=False), torch.tensor(rows), tree_plan(Tree.chain(n - 1), "cpu"), cache=cache,
                lengths=torch.zeros(len(rows), dtype=torch.long), frontier=0)
    return cache


def test_tree_forward_logits_equal_sequential_logits(peaked):
    model = peaked[0]
    tree = Tree.from_choices([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    prefix = [5, 9, 11, 200, 17]
    tokens = torch.tensor([[7, 30, 31, 40, 41, 42, 50]])
    with torch.no_grad():
        cache = prefill(model, [prefix])
        logits, hidden = verify_step(verifier(model, tree=False), tokens, tree_plan(tree, "cpu"), cache=cache,
                                     lengths=torch.tensor([5]), frontier=5)
        for i in range(tree.num_tokens):
            path = [j for j in range(tree.num_tokens) if tree.attention_mask[i, j]]
            seq = torch.tensor([prefix + tokens[0, path].tolist()])
            ref = model(input_ids=seq, output_hidden_states=True)
            torch.testing.assert_close(logits[0, i], ref.logits[0, -1], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(hidden[0, i], ref.hidden_states[-1][0, -1],
                                       atol=1e-5, rtol=1e-5)


def test_ragged_rows_see_only_their_own_prefix(peaked):
    """Row 1 holds 2 tokens, row 0 holds 4: the tree is written at slot 4 of both, and row 1's
    tokens must ignore slots 2 and 3."""
    model = peaked[0]
    tree = Tree.from_choices([[0], [0, 0]])
    with torch.no_grad():
        cache = prefill(model, [[5, 6, 7, 8], [9, 10, 0, 0]])
        logits, _ = verify_step(verifier(model, tree=False), torch.tensor([[11, 12, 13], [14, 15, 16]]),
                                tree_plan(tree, "cpu"), cache=cache,
                                lengths=torch.tensor([4, 2]), frontier=4)
        ref0 = model(input_ids=torch.tensor([[5, 6, 7, 8, 11, 12, 13]])).logits[0, 4:]
        ref1 = model(input_ids=torch.tensor([[9, 10, 14, 15, 16]])).logits[0, 2:]
    torch.testing.assert_close(logits[0], ref0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[1], ref1, atol=1e-5, rtol=1e-5)


def test_moved_cache_continues_like_a_fresh_forward(peaked):
    model = peaked[0]
    tree = Tree.from_choices([[0], [1], [1, 0]])
    with torch.no_grad():
        cache = prefill(model, [[5, 6, 7]])
        verify_step(verifier(model, tree=False), torch.tensor([[8, 20, 21, 22]]), tree_plan(tree, "cpu"),
                    cache=cache, lengths=torch.tensor([3]), frontier=3)
        cache.move(torch.tensor([[3, 5, 6]]), torch.tensor([[3, 4, 5]]))  # root, [1], [1, 0]
        nxt, _ = verify_step(verifier(model, tree=False), torch.tensor([[99]]), tree_plan(Tree(()), "cpu"),
                             cache=cache, lengths=torch.tensor([6]), frontier=6)
        ref = model(input_ids=torch.tensor([[5, 6, 7, 8, 21, 22, 99]])).logits
    torch.testing.assert_close(nxt[0, -1], ref[0, -1], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
@pytest.mark.parametrize("name", sorted(TREES))
def test_greedy_tree_decoding_is_lossless(peaked, trained, kind, name):
    model, _, prompts = peaked
    cfg = DecodeConfig(max_new_tokens=32)
    accepted = []
    for prompt in prompts[:2]:
        ar = autoregressive(model, prompt, config=cfg)
        got = generate(model, trained[kind], TREES[name], prompt, config=cfg)
        assert got.tokens == ar.tokens
        assert got.stats.tokens == 32 and sum(got.stats.histogram) == got.stats.steps
        accepted.extend(got.stats.accept_lengths)
    assert max(accepted) <= TREES[name].depth + 1
    if name != "one-node":
        assert max(accepted) >= 3  # the heads really were accepted, not just the root


def ragged(prompts, b):
    """``b`` prompts of different lengths (3 … 8 tokens), so rows start ragged."""
    return [p + p[: i % 4] for i, p in enumerate(prompts[:b])]


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
@pytest.mark.parametrize("b", [1, 2, 4, 8])
def test_batched_tree_decoding_is_lossless_for_every_sequence(peaked, trained, kind, b):
    model, _, prompts = peaked
    cfg = DecodeConfig(max_new_tokens=24)
    rows = ragged(prompts, b)
    run = decode(model, trained[kind], TREES["medusa-63"], rows, config=cfg)
    assert list(run.tokens) == [autoregressive(model, p, config=cfg).tokens for p in rows]
    assert run.stats.tokens == 24 * b and len(run.stats.runs) == (b if b > 1 else 0)
    if b > 1:  # rows accepted different lengths at the same step: the batch was really ragged
        per_row = [decode(model, trained[kind], TREES["medusa-63"], [p], config=cfg).stats
                   for p in rows]
        assert len({s.accept_lengths for s in per_row}) > 1
        assert sorted(run.stats.accept_lengths) == sorted(x for s in per_row
                                                         for x in s.accept_lengths)


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
@pytest.mark.parametrize("mode", ["greedy", "sample"])
def test_continuous_batching_decodes_each_prompt_as_alone(peaked, trained, kind, mode):
    model, _, prompts = peaked
    cfg = DecodeConfig(max_new_tokens=24, mode=mode)
    assert_each_prompt_as_alone(model, trained[kind], TREES["medusa-63"], ragged(prompts, 7),
                                cfg, batch=3)


def test_continuous_batching_counts_the_steps_while_every_row_runs(peaked, monkeypatch):
    """Plain decoding of 6 prompts, 2 rows: every row finishes its 12 tokens at the same step
    and both take the next prompts, so the steady window holds every step (11 a pair: the
    prefill emits the first token), and none of the prefills' time."""
    from treeopt.decoding import batching, clocks

    model, _, prompts = peaked
    cfg = DecodeConfig(max_new_tokens=12)
    rows = ragged(prompts, 6)
    run = decode(model, None, Tree(()), rows, config=cfg, batch=2)
    assert list(run.tokens) == [autoregressive(model, p, config=cfg).tokens for p in rows]
    assert (run.stats.iterations, run.stats.decode_tokens, run.stats.decode_row_steps) == (
        3 * 11, 6 * 11, 6 * 11)
    taken = []
    real = batching.ContinuousBatch._take

    def slow_take(self, run, row, p):  # each refill's prefill takes a long second
        taken.append(p)
        clock[0] += 1000.0
        return real(self, run, row, p)

    clock = [0.0]
    perf = clocks.time.perf_counter
    monkeypatch.setattr(clocks.time, "perf_counter", lambda: perf() + clock[0])
    monkeypatch.setattr(batching.ContinuousBatch, "_take", slow_take)
    run = decode(model, None, Tree(()), rows, config=cfg, batch=2)
    assert taken == [2, 3, 4, 5]
    assert run.stats.seconds > 4000 > run.stats.decode_seconds > 0


def test_a_race_in_one_continuous_batch_totals_each_run(peaked, trained):
    from treeopt.decoding.loop import Decoder, race_in_batches

    model, _, prompts = peaked
    cfg = DecodeConfig(max_new_tokens=16)
    rows = ragged(prompts, 5)
    tree_run = (Decoder(model, trained["hydra"]), TREES["chain"])
    plain = (Decoder(model), Tree(()))
    got, ref = race_in_batches([tree_run, plain], rows, batch=2, config=cfg, continuous=True)
    alone = decode(model, trained["hydra"], TREES["chain"], rows, config=cfg, batch=2)
    assert got.accept_lengths == alone.stats.accept_lengths and got.same_as_reference
    assert got.decode_tokens == alone.stats.decode_tokens and ref.accept_lengths == (1,) * (
        len(ref.accept_lengths))


def test_the_steady_accepted_length_counts_every_row_until_the_first_finishes(peaked, trained):
    """A ragged batch of 4: its steady E[L] is every row's accepted tokens over the steps of
    the row that finishes first (each row accepting as it does decoded alone), per row and
    step — what the sweep's window walk of a trace predicts; at batch 1 it is the plain E[L]."""
    model, _, prompts = peaked
    cfg = DecodeConfig(max_new_tokens=24)
    rows = ragged(prompts, 4)
    run = decode(model, trained["hydra"], TREES["medusa-63"], rows, config=cfg).stats
    alone = [decode(model, trained["hydra"], TREES["medusa-63"], [p], config=cfg).stats
             for p in rows]
    window = min(s.steps for s in alone)
    assert len({s.steps for s in alone}) > 1  # the rows really finish apart
    tokens = sum(sum(s.accept_lengths[:window]) for s in alone)
    assert (run.decode_tokens, run.decode_row_steps) == (tokens, 4 * window)
    assert run.decode_accept_length == tokens / (4 * window)
    assert run.decode_accept_length != run.mean_accept_length
    assert [s.decode_accept_length for s in alone] == [s.mean_accept_length for s in alone]


def test_a_sequence_that_stops_early_leaves_the_others_lossless(peaked, trained):
    model, _, prompts = peaked
    rows = ragged(prompts, 4)
    plain = autoregressive(model, rows[1], config=DecodeConfig(max_new_tokens=30)).tokens
    cfg = DecodeConfig(max_new_tokens=30, eos_token_id=plain[6])  # row 1 stops at its 7th token
    run = decode(model, trained["hydra"], TREES["chain"], rows, config=cfg)
    want = [autoregressive(model, p, config=cfg).tokens for p in rows]
    assert list(run.tokens) == want and len(run.tokens[1]) == plain.index(plain[6]) + 1
    assert any(len(t) == 30 for t in run.tokens)  # the others ran on to their budget


def test_profiled_phases_are_the_steps_alone(peaked, trained, monkeypatch):
    """The prefill (here made 0.3 s slower) is no step's time: charged to the first step's
    draft phase, it made a profile price drafting by how long the prompt was. (The phases and
    the prefill add up to at most the run's time, however busy the machine.)"""
    import time

    from treeopt.decoding.loop import Decoder

    model, _, prompts = peaked
    decoder = Decoder(model, trained["hydra"])
    eager = type(decoder.verify).eager

    def slow_prefill(self, input_ids, **kw):
        if input_ids.shape[1] > TREES["chain"].num_tokens:  # only the prompt is this long
            time.sleep(0.3)
        return eager(self, input_ids, **kw)

    monkeypatch.setattr(type(decoder.verify), "eager", slow_prefill)
    long_prompt = (prompts[0] * 3)[:12]
    stats = decoder.decode(TREES["chain"], [long_prompt], config=DecodeConfig(max_new_tokens=16),
                           profile=True).stats
    assert stats.seconds > 0.3  # the prefill was slow …
    assert sum(stats.split.to_dict().values()) <= stats.seconds - 0.3  # … and no phase holds it



def test_profiled_phases_leave_out_the_steps_after_a_row_stops(peaked, trained, monkeypatch):
    """A batch's split covers its steady steps (every row running: what throughput counts), not
    the tail after its first row stops; here the first tail step is made 0.3 s slower (longer
    than the steady steps take together, however busy the machine)."""
    import time

    import treeopt.decoding.batch_run as batch_run
    import treeopt.decoding.loop as loop

    model, _, prompts = peaked
    rows = ragged(prompts, 4)
    plain = autoregressive(model, rows[1], config=DecodeConfig(max_new_tokens=30)).tokens
    cfg = DecodeConfig(max_new_tokens=30, eos_token_id=plain[6])  # row 1 stops at its 7th token
    decoder = loop.Decoder(model, trained["hydra"])
    window = min(n for _, n in decoder.decode(TREES["chain"], rows, config=cfg).stats.runs)
    calls = 0
    verify_step = batch_run.verify_step

    def slow_tail(*args, **kw):
        nonlocal calls
        calls += 1
        if calls == window + 1:
            time.sleep(0.3)
        return verify_step(*args, **kw)

    monkeypatch.setattr(batch_run, "verify_step", slow_tail)
    stats = decoder.decode(TREES["chain"], rows, config=cfg, profile=True).stats
    assert stats.split.steps == window < stats.iterations == calls
    assert stats.split.verify_s < 0.3 <= stats.seconds - sum(stats.split.to_dict().values())
    alone = decoder.decode(TREES["chain"], rows[:1], config=cfg, profile=True).stats
    assert alone.split.steps == alone.iterations  # one row: every step is steady

@pytest.mark.parametrize("alongside", [False, True])
def test_profiled_drafting_holds_the_drafters_features_for_the_step(peaked, trained, monkeypatch,
                                                                    alongside):
    """What the drafter does after a step's tokens are accepted (Hydra++'s prefix layer) readies
    the next step's drafting and is timed as that step's draft phase: here made 10 ms slower.
    Dropped from the profile, it priced Hydra's step low and its speed-ups 3–7% high."""
    import time

    from treeopt.decoding.loop import Decoder

    model, _, prompts = peaked
    heads = trained["hydra"]
    advance = type(heads).advance

    def slow_advance(self, *args, **kw):
        time.sleep(0.01)
        return advance(self, *args, **kw)

    monkeypatch.setattr(type(heads), "advance", slow_advance)
    decoder = Decoder(model, heads)
    cfg = DecodeConfig(max_new_tokens=16)
    if alongside:
        stats = decoder.decode_alongside((TREES["chain"], Tree(())), prompts[:1], config=cfg,
                                         profile=True)[0].stats
    else:
        stats = decoder.decode(TREES["chain"], prompts[:1], config=cfg, profile=True).stats
    # every step but the first drafts from features made at the end of the step before it
    assert stats.split.draft_s >= 0.01 * (stats.split.steps - 1) > 0


@pytest.mark.parametrize("mode", ["greedy", "sample"])
@pytest.mark.parametrize("static", [False, True])
def test_runs_decoded_alongside_are_each_the_run_alone(peaked, trained, mode, static):
    """A tree and autoregressive decoding, their steps interleaved, emit what each does alone,
    step for step, whatever the mode and cache layout (compiled steps keep a buffer per run);
    row 1 stops early at EOS, so the batch is ragged."""
    import dataclasses

    from treeopt.decoding.loop import Decoder

    model, _, prompts = peaked
    rows = ragged(prompts, 3)
    decoder = Decoder(model, trained["hydra"])
    cfg = DecodeConfig(max_new_tokens=24, mode=mode, temperature=0.8)
    plain = decoder.decode(Tree(()), rows, config=cfg, streams=[4, 5, 6]).tokens[1]
    cfg = dataclasses.replace(cfg, eos_token_id=plain[5])  # row 1 stops by its 6th token
    if static:
        decoder.verify = dataclasses.replace(decoder.verify, compiled=decoder.verify.eager)
    shapes = (TREES["wide"], Tree(()))
    together = decoder.decode_alongside(shapes, rows, config=cfg, streams=[4, 5, 6])
    for shape, run in zip(shapes, together, strict=True):
        alone = decoder.decode(shape, rows, config=cfg, streams=[4, 5, 6])
        assert run.tokens == alone.tokens
        assert run.stats.accept_lengths == alone.stats.accept_lengths
        assert (run.stats.decode_tokens, run.stats.iterations) == (
            alone.stats.decode_tokens, alone.stats.iterations)
    assert together[0].tokens == together[1].tokens  # lossless, both modes
    assert len(together[0].tokens[1]) <= 6 and max(map(len, together[0].tokens)) > 6


def test_runs_of_two_models_decoded_alongside_are_each_the_run_alone(peaked, trained):
    """A tree on one model beside autoregressive decoding of a copy of it in bfloat16 (how the
    benchmark times bfloat16 trees against float32): each run emits what it does alone."""
    import copy

    from treeopt.decoding.loop import Decoder, decode_alongside

    model, _, prompts = peaked
    rows = ragged(prompts, 2)
    half = copy.deepcopy(model).to(torch.bfloat16)
    runs = [(Decoder(model, trained["hydra"]), TREES["wide"]), (Decoder(half), Tree(()))]
    cfg = DecodeConfig(max_new_tokens=16)
    together = decode_alongside(runs, rows, config=cfg)
    for (decoder, shape), run in zip(runs, together, strict=True):
        alone = decoder.decode(shape, rows, config=cfg)
        assert run.tokens == alone.tokens
        assert run.stats.accept_lengths == alone.stats.accept_lengths
    assert together[0].tokens == Decoder(model).decode(Tree(()), rows, config=cfg).tokens


def test_a_race_in_batches_totals_each_run_over_its_batches(peaked, trained):
    """Each run's totals are its batches' alone, summed; the last run is the reference the
    outputs are compared with (a lossless tree: equal; a run on another model: not)."""
    from treeopt.decoding.loop import Decoder, race_in_batches

    model, _, prompts = peaked
    rows = ragged(prompts, 4)
    other = _other_model(model)
    runs = [(Decoder(model, trained["hydra"]), TREES["wide"]), (Decoder(other), Tree(())),
            (Decoder(model), Tree(()))]
    cfg = DecodeConfig(max_new_tokens=12)
    totals = race_in_batches(runs, rows, batch=3, config=cfg)
    for (decoder, shape), t in zip(runs, totals, strict=True):
        alone = [decoder.decode(shape, rows[g: g + 3], config=cfg).stats for g in (0, 3)]
        assert t.accept_lengths == alone[0].accept_lengths + alone[1].accept_lengths
        assert t.decode_tokens == sum(a.decode_tokens for a in alone) > 0
        assert t.decode_seconds > 0 and t.tokens_per_s == t.decode_tokens / t.decode_seconds
        assert t.decode_row_steps == sum(a.decode_row_steps for a in alone) > 0
        assert t.steady_accept_length == t.decode_tokens / t.decode_row_steps
    assert totals[-1].steady_accept_length == 1.0  # plain decoding: one token a row and step
    assert [t.same_as_reference for t in totals] == [True, False, True]
    with pytest.raises(TreeoptError, match="batch size 0"):
        race_in_batches(runs, rows, batch=0, config=cfg)


def _other_model(model):
    """A copy of ``model`` with its output rows rolled by one: other greedy tokens."""
    other = copy.deepcopy(model)
    with torch.no_grad():
        w = other.get_output_embeddings().weight
        w.copy_(w.roll(1, dims=0))
    return other


@pytest.mark.parametrize("profile", [False, True])
def test_runs_decoded_alongside_interleave_and_count_their_own_time(peaked, trained, monkeypatch,
                                                                    profile):
    """Every tree step is made 0.1 s slower (far more than a step of the tiny model takes, however
    busy the machine): the steps of the two runs alternate throughout, and the autoregressive
    run's time (and, profiled, its phases) holds none of the tree's."""
    import time

    import treeopt.decoding.batch_run as batch_run
    import treeopt.decoding.loop as loop

    model, _, prompts = peaked
    order = []
    verify_step = batch_run.verify_step

    def slow_tree(verify, tokens, *args, **kw):
        order.append("tree" if tokens.shape[1] > 1 else "ar")
        if tokens.shape[1] > 1:
            time.sleep(0.1)
        return verify_step(verify, tokens, *args, **kw)

    monkeypatch.setattr(batch_run, "verify_step", slow_tree)
    decoder = loop.Decoder(model, trained["hydra"])
    tree, ar = decoder.decode_alongside((TREES["chain"], Tree(())), prompts[:1],
                                        config=DecodeConfig(max_new_tokens=32), profile=profile)
    switches = sum(a != b for a, b in itertools.pairwise(order))
    assert switches >= 2 * order.count("tree") - 2  # no two tree steps in a row
    assert order.count("tree") == tree.stats.iterations < ar.stats.iterations == order.count("ar")
    assert tree.stats.decode_seconds > 0.1 * tree.stats.iterations
    assert ar.stats.seconds < 0.1 * tree.stats.iterations / 2
    if profile:
        assert tree.stats.split.verify_s > 0.1 * tree.stats.iterations
        assert sum(ar.stats.split.to_dict().values()) < ar.stats.seconds


def test_batched_autoregressive_equals_one_at_a_time(peaked):
    model, _, prompts = peaked
    rows = ragged(prompts, 5)
    cfg = DecodeConfig(max_new_tokens=20)
    run = decode(model, None, Tree(()), rows, config=cfg)
    assert list(run.tokens) == [autoregressive(model, p, config=cfg).tokens for p in rows]
    assert set(run.stats.accept_lengths) == {1}


def test_typical_acceptance_at_low_temperature_is_greedy(peaked, trained):
    model, _, prompts = peaked
    greedy = autoregressive(model, prompts[0], config=DecodeConfig(max_new_tokens=30))
    typical = generate(model, trained["medusa"], TREES["wide"], prompts[0],
                       config=DecodeConfig(max_new_tokens=30, mode="typical", temperature=1e-3))
    assert typical.tokens == greedy.tokens


def test_typical_acceptance_samples_reproducibly(peaked, trained):
    model, _, prompts = peaked
    cfg = DecodeConfig(max_new_tokens=30, mode="typical", temperature=0.8, seed=7)
    a = generate(model, trained["hydra"], TREES["medusa-63"], prompts[1], config=cfg)
    b = generate(model, trained["hydra"], TREES["medusa-63"], prompts[1], config=cfg)
    assert a.tokens == b.tokens and len(a.tokens) == 30
    assert a.stats.mean_accept_length >= 1.0


def test_eos_stops_both_loops_at_the_same_token(peaked, trained):
    model, _, prompts = peaked
    ar = autoregressive(model, prompts[0], config=DecodeConfig(max_new_tokens=30))
    eos = ar.tokens[12]
    cfg = DecodeConfig(max_new_tokens=30, eos_token_id=eos)
    stop = ar.tokens.index(eos) + 1
    got = generate(model, trained["medusa"], TREES["chain"], prompts[0], config=cfg)
    assert got.tokens == ar.tokens[:stop]


def test_tree_deeper_than_heads_is_rejected(peaked, trained):
    with pytest.raises(TreeoptError, match="depth 5 but there are only 4 heads"):
        generate(peaked[0], trained["medusa"], Tree.chain(5), [1, 2, 3])


def test_prompt_longer_than_context_is_rejected(trained):
    model = tiny_llama(vocab=256, context=32)
    with pytest.raises(TreeoptError, match="context is 32"):
        generate(model, trained["medusa"], Tree.chain(2), list(range(3, 30)),
                 config=DecodeConfig(max_new_tokens=8))


class NoMaskLM(torch.nn.Module):
    """A causal LM whose forward refuses 4D masks (like an attention kernel without them)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def get_input_embeddings(self):
        return self.inner.get_input_embeddings()

    def forward(self, *, attention_mask=None, **kwargs):
        if attention_mask is not None and attention_mask.dim() == 4:
            raise ValueError("attention_mask must be 2-D")
        return self.inner(attention_mask=attention_mask, **kwargs)


def test_model_rejecting_4d_masks_is_named(peaked):
    wrapped = NoMaskLM(peaked[0])
    wrapped.config = copy.deepcopy(peaked[0].config)
    wrapped.config.architectures = ["NoMaskForCausalLM"]
    with pytest.raises(TreeoptError, match="NoMaskForCausalLM: its forward rejects a 4D"):
        verifier(wrapped)


def test_qwen2_decodes_losslessly():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=256)
    model = transformers.Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(25)
    seqs = greedy_continuations(model, [[5, 6, 7], [9, 10, 11]], max_new_tokens=32)
    heads = train_heads(model, seqs, TrainConfig(num_heads=3, steps=10, seq_len=32))[0]
    cfg_d = DecodeConfig(max_new_tokens=24)
    assert (generate(model, heads, TREES["wide"], [5, 6, 7], config=cfg_d).tokens
            == autoregressive(model, [5, 6, 7], config=cfg_d).tokens)


def test_a_static_cache_step_is_lossless_too(peaked, trained):
    """The layout compiled steps use (every slot attended, writes at a slot tensor), run eagerly."""
    import dataclasses

    from treeopt.decoding.loop import Decoder

    model, _, prompts = peaked
    rows = ragged(prompts, 3)
    cfg = DecodeConfig(max_new_tokens=20)
    decoder = Decoder(model, trained["hydra"])
    decoder.verify = dataclasses.replace(decoder.verify, compiled=decoder.verify.eager)
    assert decoder.verify.static
    run = decoder.decode(TREES["wide"], rows, config=cfg)
    assert list(run.tokens) == [autoregressive(model, p, config=cfg).tokens for p in rows]
    # Compiled steps write into one buffer per (batch, capacity), reused run after run (a CUDA
    # graph's static address); an earlier run leaves nothing in it.
    first = decoder.cache(batch=3, capacity=256)
    with torch.inference_mode():
        first.kv.normal_()
    assert decoder.cache(batch=3, capacity=256).kv is first.kv and not first.kv.any()
    assert decoder.decode(TREES["wide"], rows, config=cfg).tokens == run.tokens


def test_no_blas_choice_off_cuda():
    """Only CUDA has two BLAS libraries to choose between (treeopt.decoding.blas)."""
    from treeopt.decoding.blas import blas_choice

    model = tiny_llama(vocab=64, seed=1)
    assert blas_choice(model) is None and verifier(model, tree=False).blas is None
