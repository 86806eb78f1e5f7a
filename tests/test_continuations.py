"""The continuation store: drafters calibrated on the same prompts share one decoding of them, and
their traces equal those calibrated without it, greedy and sampled."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402

import treeopt.decoding.calibrate as calibrate_module  # noqa: E402
from treeopt.decoding.calibrate import CalibrateConfig, calibrate  # noqa: E402
from treeopt.decoding.continuations import ContinuationStore, weights_digest  # noqa: E402
from treeopt.drafters.config import HeadsConfig  # noqa: E402
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.drafters.prompt_lookup import PromptLookup  # noqa: E402

V, D = 256, 64
PROMPTS = [[1, 5, 17, 33], [1, 9, 100, 3, 4, 200, 7], [1, 44], [1, 8, 8, 8, 9], [1, 250, 3]]


@pytest.fixture(scope="module")
def model():
    m = tiny_llama(vocab=V, hidden=D, seed=1)
    with torch.no_grad():
        m.lm_head.weight.mul_(10)
    return m


def _drafters(model):
    torch.manual_seed(2)
    medusa = build_heads(HeadsConfig(kind="medusa", num_heads=3, hidden_size=D, vocab_size=V),
                         lm_head=model.lm_head, embeddings=model.model.embed_tokens).eval()
    lookup = PromptLookup(depth=3, min_n=1, max_n=3, vocab_size=V)
    return {"medusa": medusa, "prompt-lookup": lookup}


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_drafters_share_one_decoding_and_get_the_traces_they_would_alone(
        model, tmp_path, monkeypatch, temperature):
    config = CalibrateConfig(max_new_tokens=12, batch_size=2, temperature=temperature, seed=3)
    alone = {k: calibrate(model, d, PROMPTS, tmp_path / f"alone-{k}.npz", config=config)[0]
             for k, d in _drafters(model).items()}
    decoded: list[int] = []
    for name in ("greedy_continuations", "sampled_continuations"):
        real = getattr(calibrate_module, name)
        monkeypatch.setattr(calibrate_module, name,
                            lambda *a, real=real, **k: decoded.append(1) or real(*a, **k))
    store = ContinuationStore(tmp_path / "store")
    shared = {k: calibrate(model, d, PROMPTS, tmp_path / f"shared-{k}.npz", config=config,
                           continuations=store)[0] for k, d in _drafters(model).items()}
    assert len(decoded) == 3  # 5 prompts in chunks of 2: decoded once, for both drafters
    for k in alone:
        assert np.array_equal(alone[k].ranks, shared[k].ranks)
        assert alone[k].meta["sequence_positions"] == shared[k].meta["sequence_positions"]


def test_the_weights_digest_tells_models_apart(model):
    other = tiny_llama(vocab=V, hidden=D, seed=2)
    assert weights_digest(model) == weights_digest(model)
    assert weights_digest(model) != weights_digest(other)
