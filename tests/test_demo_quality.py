"""The demo's quality statistics and its anti-loop training term, against hand-computed values."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.demo.quality import fidelity, repetition_share
from treeopt.errors import TreeoptError
from treeopt.model.accept_stats import ratio_stderr
from treeopt.model.simulation import step_walk
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree

CHAIN2 = Tree.from_choices([[0], [0, 0]])


def test_walk_steps_per_sequence():
    # accept lengths per row with CHAIN2: 3, 1, 2, 1 | 1, 2, 1, 1
    ranks = np.array([[0, 0], [1, 0], [0, -1], [-1, 0],
                      [2, 0], [0, -1], [-1, -1], [-1, -1]], np.int16)
    _, per_sequence = step_walk(CHAIN2, RankTrace(ranks, {"sequence_positions": [4, 4]}))
    tokens, steps = zip(*per_sequence, strict=True)
    assert list(tokens) == [4, 4]  # rows 0 (3), 3 (1) | rows 0 (1), 1 (2), 3 (1)
    assert list(steps) == [2, 3]
    assert step_walk(CHAIN2, RankTrace(ranks, {"sequence_positions": [4, 3]})) is None


def test_ratio_stderr_exact_and_degenerate():
    assert ratio_stderr([4, 8], [2, 2]) == pytest.approx(1.0)
    # sequences with the same mean accepted length: no spread at all
    assert ratio_stderr([2, 4, 6], [1, 2, 3]) == 0.0
    assert ratio_stderr([5], [2]) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 50)), min_size=2, max_size=30))
def test_ratio_stderr_of_equal_steps_is_the_stderr_of_the_means(pairs):
    """With equal steps per sequence the ratio is a plain mean; its error is the textbook one."""
    steps = [pairs[0][1]] * len(pairs)
    tokens = [t for t, _ in pairs]
    means = np.array(tokens) / steps[0]
    want = means.std(ddof=1) / math.sqrt(len(means))
    assert ratio_stderr(tokens, steps) == pytest.approx(want, abs=1e-12)


def test_fidelity_combines_both_errors():
    rel, se = fidelity(2.2, 0.03, 2.0, 0.04)
    assert rel == pytest.approx(0.1)
    assert se == pytest.approx(math.hypot(0.03 / 2.0, 2.2 * 0.04 / 4.0))


def test_repetition_share_counts_earlier_ngrams():
    assert repetition_share(list(range(20))) == 0.0
    assert repetition_share([7] * 9) == pytest.approx(1 / 2)  # 2 eight-grams, the second repeats
    assert repetition_share([1, 2, 3]) == 0.0  # shorter than one n-gram


def test_repetition_loss_on_a_uniform_model():
    """Every probability is 1/V, so each term is −log(1 − (1 − λ)/V)."""
    import torch

    from treeopt.demo.base_model import repetition_loss

    vocab, lam = 10, 0.5

    def uniform(input_ids):
        return SimpleNamespace(logits=torch.zeros(*input_ids.shape, vocab, requires_grad=True))

    spans = torch.tensor([[1, 2, 3], [4, 5, 6]])
    loss = repetition_loss(uniform, spans, seq_len=10, lam=lam)
    assert loss.item() == pytest.approx(-math.log(1 - (1 - lam) / vocab), rel=1e-6)


def test_repetition_loss_is_zero_when_probabilities_decay_by_lambda():
    """A model whose repeat probabilities shrink by λ each repetition pays nothing."""
    import torch

    from treeopt.demo.base_model import repetition_loss

    span, seq_len, vocab, lam = 4, 12, 8, 0.5
    spans = torch.tensor([[1, 2, 3, 4]])

    def decaying(input_ids):
        t = input_ids.shape[1]
        logits = torch.full((1, t, vocab), -1e4)
        for pos in range(t - 1):  # the next token gets probability 0.8 · λ^(repetition)
            p = 0.8 * lam ** ((pos + 1) // span)
            nxt = int(input_ids[0, pos + 1])
            logits[0, pos, :] = math.log((1 - p) / (vocab - 1))
            logits[0, pos, nxt] = math.log(p)
        return SimpleNamespace(logits=logits)

    assert float(repetition_loss(decaying, spans, seq_len=seq_len, lam=lam)) < 1e-5
    # asked to keep the probability flat instead, the same model pays |0.8 λ^r − 0.8 λ^(r−1)|
    flat = float(repetition_loss(decaying, spans, seq_len=seq_len, lam=1.0))
    want = np.mean([-math.log(1 - 0.8 * lam ** (r - 1) * (1 - lam))
                    for r in [(j + 1) // span for j in range(span, seq_len - 1)]])
    assert flat == pytest.approx(want, rel=1e-4)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 30), st.integers(1, 30), st.integers(0, 2**32 - 1))
def test_span_lengths_stay_in_their_range(low, width, seed):
    import torch

    from treeopt.demo.base_model import span_length

    g = torch.Generator().manual_seed(seed)
    lengths = [span_length((low, low + width), g) for _ in range(20)]
    assert all(low <= n < low + width for n in lengths)


def test_the_ditto_phase_is_the_last_steps_and_costs_its_rows():
    from treeopt.demo.base_model import BaseConfig

    cfg = BaseConfig(steps=50, seq_len=16, batch_size=4, ditto_share=0.5, ditto_phase=0.2)
    assert (cfg.ditto_rows, cfg.ditto_start) == (2, 40)
    assert cfg.train_tokens == 16 * (4 * 40 + 2 * 10)
    off = BaseConfig(steps=50, seq_len=16, batch_size=4, ditto_share=0.0)
    assert (off.ditto_start, off.train_tokens) == (50, 16 * 4 * 50)
    everywhere = BaseConfig(steps=50, ditto_share=0.25, ditto_phase=1.0)
    assert everywhere.ditto_start == 0


@pytest.mark.parametrize("bad", [{"ditto_share": 1.0}, {"ditto_phase": 1.5},
                                 {"ditto_span": (0, 8)}, {"ditto_span": (8, 8)}])
def test_bad_ditto_settings_are_refused(bad):
    from treeopt.demo.base_model import BaseConfig

    with pytest.raises(TreeoptError, match="ditto_"):
        BaseConfig(**bad)


def test_training_switches_to_ditto_rows_at_the_phase_start(monkeypatch):
    """The repeated-span loss is computed on exactly the steps of the DITTO phase."""
    from treeopt.demo import base_model

    cfg = base_model.BaseConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                          intermediate_size=32, max_positions=32, seq_len=16, batch_size=4,
                          steps=10, warmup=2, ditto_share=0.5, ditto_phase=0.3)
    calls = []
    real = base_model.repetition_loss

    def counted(model, spans, **kw):
        calls.append(spans.shape[0])
        return real(model, spans, **kw)

    monkeypatch.setattr(base_model, "repetition_loss", counted)
    stream = np.arange(400, dtype=np.int32) % 50 + 3
    model = base_model.new_model(cfg, 64, seed=0)
    losses = base_model.train_base(model, stream, cfg, seed=0)
    assert len(losses) == 10 and all(math.isfinite(x) for x in losses)
    assert calls == [2, 2, 2]  # three phase steps (7, 8, 9), two span rows each
    assert not model.training and not any(p.requires_grad for p in model.parameters())


def test_an_interrupted_training_resumes_to_the_same_model(tmp_path):
    """Stopped after step 5 (checkpoints every 2 steps: the last after step 4), the training
    resumes from step 4 and ends with the very weights and losses of an uninterrupted run —
    across the DITTO phase, whose spans come from the same generator. A checkpoint of another
    training is refused."""
    import torch

    from treeopt.demo import base_model
    from treeopt.errors import TreeoptError

    cfg = base_model.BaseConfig(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                          intermediate_size=32, max_positions=32, seq_len=16, batch_size=4,
                          steps=10, warmup=2, ditto_share=0.5, ditto_phase=0.3)
    stream = np.arange(400, dtype=np.int32) % 50 + 3
    whole = base_model.new_model(cfg, 64, seed=0)
    want = base_model.train_base(whole, stream, cfg, seed=0)

    class Stop(Exception):
        pass

    def stop_at_5(step: int, loss: float) -> None:
        if step == 5:
            raise Stop

    ckpt = tmp_path / "base.pt"
    with pytest.raises(Stop):
        base_model.train_base(base_model.new_model(cfg, 64, seed=0), stream, cfg, seed=0,
                              checkpoint=ckpt, every=2, progress=stop_at_5)
    seen = []
    resumed = base_model.new_model(cfg, 64, seed=0)
    got = base_model.train_base(resumed, stream, cfg, seed=0, checkpoint=ckpt, every=2,
                          progress=lambda step, loss: seen.append(step))
    assert seen == [5, 6, 7, 8, 9, 10]  # steps 1-4 came from the checkpoint
    assert got == want
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
    with pytest.raises(TreeoptError, match="not of this base-model training"):
        base_model.train_base(base_model.new_model(cfg, 64, seed=0), stream,
                        base_model.BaseConfig(**{**cfg.to_dict(), "lr": 1e-3}), seed=0,
                        checkpoint=ckpt)
    ckpt.write_bytes(b"torn")
    with pytest.raises(TreeoptError, match="not a checkpoint of a base-model training"):
        base_model.train_base(base_model.new_model(cfg, 64, seed=0), stream, cfg, seed=0,
                              checkpoint=ckpt)


def test_the_live_checks_report_each_decoding_to_their_progress_bar():
    """The demo build's autoregressive reference and live checks tick once per decoding (a batch
    of prompts, then each timed prompt): the bar's total, and the outputs unchanged by it."""
    from conftest import tiny_llama

    from treeopt.decoding.loop import Decoder
    from treeopt.demo.quality import (
        QUALITY_BATCH,
        acceptance_run,
        autoregressive_run,
        quality_decodings,
    )

    prompts = [[3 + i, 7, 5 + i % 3] for i in range(QUALITY_BATCH + 3)]
    decoder = Decoder(tiny_llama(vocab=64, hidden=32, seed=3))
    ticks: list[int] = []
    reference, _ = autoregressive_run(decoder, prompts, max_new_tokens=4,
                                      progress=lambda: ticks.append(1))
    assert len(ticks) == quality_decodings(len(prompts)) == 2 + 8
    assert reference == autoregressive_run(decoder, prompts, max_new_tokens=4)[0]
    ticks.clear()
    run = acceptance_run(decoder, Tree(()), prompts, max_new_tokens=4, reference=reference,
                         progress=lambda: ticks.append(1))
    assert len(ticks) == 10 and run["lossless"]


def test_the_reference_reads_the_held_out_traces_continuations_and_times_the_rest(
        tmp_path, monkeypatch):
    """Where the traces decode in the live checks' batches, the build's autoregressive
    reference is the held-out traces' own continuations (their store); it decodes only the
    timed prompts, and equals decoding them all."""
    from dataclasses import replace
    from types import SimpleNamespace

    from conftest import tiny_llama

    from treeopt.decoding.calibrate import continued
    from treeopt.decoding.loop import Decoder
    from treeopt.demo.config import DemoConfig
    from treeopt.demo.context import Context
    from treeopt.demo.layout import DemoPaths
    from treeopt.demo.quality import QUALITY_BATCH, TIMED_PROMPTS, autoregressive_run

    model = tiny_llama(vocab=64, hidden=32, seed=3)
    config = replace(DemoConfig(), calibration_batch=QUALITY_BATCH, max_new_tokens=4,
                     live_new_tokens=4)
    ctx = Context(config, DemoPaths(tmp_path), tmp_path, print,
                  loaded={"model": model, "tokenizer": SimpleNamespace(eos_token_id=None)})
    prompts = [[3 + i, 7, 5 + i % 3] for i in range(QUALITY_BATCH + 2)]
    monkeypatch.setattr(ctx, "prompt_ids", lambda part: prompts)
    stored = continued(model, prompts, ctx.trace_config(), store=ctx.continuations)
    decoded: list[int] = []
    decode = Decoder.decode

    def counted(self, tree, rows, **kwargs):
        decoded.append(len(rows))
        return decode(self, tree, rows, **kwargs)

    monkeypatch.setattr(Decoder, "decode", counted)
    reference, record = ctx.reference()
    assert decoded == [1] * TIMED_PROMPTS and record["tokens_per_s"] > 0
    assert reference == [tuple(s[len(p):]) for s, p in zip(stored, prompts, strict=True)]
    assert reference == autoregressive_run(Decoder(model), prompts, max_new_tokens=4)[0]


def test_the_timed_prompts_run_on_the_timings_threads_and_the_rest_on_the_builds():
    import torch
    from conftest import tiny_llama

    from treeopt.decoding.loop import Decoder
    from treeopt.demo.quality import QUALITY_BATCH, TIMED_PROMPTS, autoregressive_run

    decoder = Decoder(tiny_llama(vocab=64, hidden=32, seed=3))
    seen: list[int] = []
    decode = decoder.decode

    def counted(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return decode(*args, **kwargs)

    decoder.decode = counted
    prompts = [[3 + i, 7, 5] for i in range(QUALITY_BATCH + 1)]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        autoregressive_run(decoder, prompts, max_new_tokens=2, timed_threads=1)
        assert torch.get_num_threads() == 2  # given back
    finally:
        torch.set_num_threads(before)
    assert seen == [2, 2] + [1] * TIMED_PROMPTS  # two batches, then the prompts timed alone
