"""Head training by self-distillation: the loss falls, the base stays frozen, λ_k = 0.8^k."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402

from treeopt import TreeoptError  # noqa: E402
from treeopt.decoding.rank_pass import greedy_continuations  # noqa: E402
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.drafters.training import TrainConfig, distill_loss, train_heads, windows  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig  # noqa: E402


@pytest.fixture(scope="module")
def setup():
    model = tiny_llama(vocab=256, seed=4)
    with torch.no_grad():
        model.lm_head.weight.mul_(25)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 256, (4,), generator=gen).tolist() for _ in range(12)]
    return model, greedy_continuations(model, prompts, max_new_tokens=40)


def test_loss_is_the_decayed_sum_of_head_losses(setup):
    model, seqs = setup
    heads = build_heads(HeadsConfig(kind="hydra", num_heads=3, hidden_size=64, vocab_size=256),
                        lm_head=model.lm_head, embeddings=model.model.embed_tokens)
    total, per_head, agree = distill_loss(model, heads, windows(seqs, 32)[:4], decay=0.8)
    assert len(per_head) == len(agree) == 3
    assert float(total.detach()) == pytest.approx(sum(0.8**k * x for k, x in enumerate(per_head)),
                                         rel=1e-6)


@pytest.mark.parametrize("kind,options", [
    ("medusa", {}), ("medusa", {"share_lm_head": True}), ("hydra", {"prefix_attention": True}),
])
def test_training_lowers_the_loss_and_leaves_the_base_frozen(setup, kind, options):
    model, seqs = setup
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = TrainConfig(kind=kind, num_heads=3, steps=40, batch_size=8, seq_len=40, lr=3e-3,
                      **options)
    seen = []
    heads, history = train_heads(model, seqs, cfg, progress=lambda s, n, loss: seen.append(s))
    assert seen == list(range(1, 41)) and len(history) == 40
    first = sum(h["loss"] for h in history[:5]) / 5
    last = sum(h["loss"] for h in history[-5:]) / 5
    assert last < 0.9 * first
    assert history[-1]["lr"] < 1e-4  # the cosine schedule has decayed
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert not heads.training
    if options.get("prefix_attention"):
        assert heads.prefix_layer.out.weight.abs().sum() > 0  # the prefix layer learned


@pytest.mark.parametrize("kind", ["hydra", "draft-model"])
def test_an_interrupted_training_resumes_to_the_same_drafter(setup, kind, tmp_path):
    """Stopped after step 7 (checkpoints every 2 of 20 steps: the last after step 6), heads or a
    draft model resume from step 6 and end with the weights and history of an uninterrupted
    run; the base model is left as it was."""
    from treeopt.drafters.training import distill_draft_model

    model, seqs = setup
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = TrainConfig(kind=kind, num_heads=3, steps=20, batch_size=4, seq_len=40, lr=3e-3,
                      prefix_attention=kind == "hydra")

    def train(**kw):
        if kind == "draft-model":
            return distill_draft_model(model, seqs, cfg, **kw)
        return train_heads(model, seqs, cfg, **kw)

    class Stop(Exception):
        pass

    def stop_at_7(step: int, total: int, loss: float) -> None:
        if step == 7:
            raise Stop

    whole, want = train()
    ckpt = tmp_path / "train.pt"
    with pytest.raises(Stop):
        train(checkpoint=ckpt, progress=stop_at_7)
    seen = []
    resumed, got = train(checkpoint=ckpt, progress=lambda s, n, loss: seen.append(s))
    assert seen == list(range(7, 21))  # steps 1-6 came from the checkpoint
    assert got == want
    for (name, a), (_, b) in zip(whole.state_dict().items(), resumed.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k]), k
    with pytest.raises(TreeoptError, match="a checkpoint of another training, not of this "
                                           "hydra training"):
        train_heads(model, seqs, TrainConfig(kind="hydra", num_heads=3, steps=20, batch_size=4,
                                             seq_len=40, lr=1e-3), checkpoint=ckpt)


def test_too_little_data(setup):
    with pytest.raises(TreeoptError, match="^seq_len 64 is more than the 3 tokens"):
        windows([[1, 2, 3]], 64)


def test_bad_config():
    with pytest.raises(TreeoptError, match="^seq_len 4 leaves no targets for 4 heads"):
        TrainConfig(num_heads=4, seq_len=4)
    with pytest.raises(TreeoptError, match="^steps must be ≥ 1, got 0"):
        TrainConfig(steps=0)


@pytest.mark.parametrize("kind,options", [
    ("medusa", {"share_lm_head": True}), ("medusa", {}), ("hydra", {"prefix_attention": True}),
    ("eagle", {"share_lm_head": True}),
])
def test_the_cached_top_k_teacher_over_the_whole_vocabulary_is_the_full_loss(setup, kind, options):
    """With k = the vocabulary, the cached teacher scores every token, in order: the same loss
    and agreement as the full loss (the teacher renormalised over its k only moves rounding)."""
    from treeopt.drafters.training import TeacherCache, cached_distill_loss

    model, seqs = setup
    torch.manual_seed(0)
    heads = build_heads(HeadsConfig(kind=kind, num_heads=3, hidden_size=64, vocab_size=256,
                                    **options),
                        lm_head=model.lm_head, embeddings=model.model.embed_tokens)
    ids = windows(seqs, 32)[:4]
    cache = TeacherCache.of(model, ids, heads.feature_layers, top_k=256, batch=3)
    full, full_heads, full_agree = distill_loss(model, heads, ids)
    part, part_heads, part_agree = cached_distill_loss(heads, ids, cache.features, cache.top_ids,
                                                       cache.top_probs)
    assert float(part.detach()) == pytest.approx(float(full.detach()), rel=1e-5)
    assert part_heads == pytest.approx(full_heads, rel=1e-5) and part_agree == full_agree


def test_a_top_k_teacher_trains_the_heads_it_would_train_in_full(setup):
    """Trained against the teacher's 8 best tokens, the heads agree with the base model's greedy
    tokens over the whole vocabulary about as often as heads trained against all 256."""
    from treeopt.decoding.rank_pass import rank_batch

    model, seqs = setup
    cfg = TrainConfig(kind="medusa", num_heads=2, share_lm_head=True, steps=40, batch_size=4,
                      seq_len=32, lr=5e-3, warmup=2)
    top1 = {}
    for k in (0, 8):
        heads, history = train_heads(model, seqs, replace(cfg, teacher_top_k=k))
        assert history[-1]["loss"] < history[0]["loss"]
        ranks = np.concatenate(rank_batch(model, heads, seqs, [3] * len(seqs), top_k=16))
        top1[k] = (ranks == 0).mean(0)  # per depth, the full vocabulary's argmax
    assert top1[0].mean() > 0.1 and np.all(top1[8] >= top1[0] - 0.1), top1
