"""A separate draft model as a drafter: its rank trace from one forward equals a step-by-step
reference, live tree decoding with it is lossless (batched, ragged), and walking its trace
reproduces live decoding step by step."""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402
from continuous import assert_each_prompt_as_alone  # noqa: E402

from treeopt import Tree, TreeoptError  # noqa: E402
from treeopt.decoding.calibrate import CalibrateConfig, calibrate  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, decode, generate  # noqa: E402
from treeopt.decoding.rank_pass import greedy_continuations, rank_batch  # noqa: E402
from treeopt.drafters.draft_model import DraftModel  # noqa: E402

V = 256
PROMPTS = [[5, 17, 99, 3, 42], [7, 7, 8], [200, 100, 50, 25, 12, 6, 3], [9]]
TREES = {
    "chain": Tree.chain(4),
    "wide": Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 0, 0]]),
    "one-node": Tree.chain(1),
}


@pytest.fixture(scope="module")
def pair(peaked):
    """conftest's sharpened tiny base model and a draft model that is a noisy copy of it (it
    agrees with the base model often, not always)."""
    base = peaked[0]
    draft_lm = copy.deepcopy(base)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in draft_lm.parameters():
            p.add_(0.3 * p.std() * torch.randn(p.shape, generator=gen))
    return base, DraftModel(draft_lm, depth=4)


def reference_ranks(draft: DraftModel, sequence: list[int], start: int, top_k: int):
    """One position and one depth at a time: the draft model reads the prefix and the true
    path up to depth k and ranks the true next token by a stable sort."""
    K = draft.config.num_heads
    out = []
    for t in range(start, len(sequence) - 1 - K):
        row = []
        for k in range(K):
            ids = torch.tensor([sequence[: t + 2 + k]])
            logits = draft.lm(input_ids=ids).logits[0, -1]
            order = torch.sort(logits, descending=True, stable=True).indices.tolist()
            rank = order.index(sequence[t + 2 + k])
            row.append(rank if rank < top_k else -1)
        out.append(row)
    return np.array(out, dtype=np.int16).reshape(-1, K)


def test_rank_trace_from_one_forward_equals_the_step_by_step_reference(pair):
    base, draft = pair
    seqs = greedy_continuations(base, PROMPTS[:2], max_new_tokens=12)
    starts = [len(p) - 1 for p in PROMPTS[:2]]
    with torch.inference_mode():
        got = rank_batch(base, draft, seqs, starts, top_k=8)
        for s, st, g in zip(seqs, starts, got, strict=True):
            np.testing.assert_array_equal(g, reference_ranks(draft, s, st, 8))


@pytest.mark.parametrize("name", list(TREES))
def test_greedy_tree_decoding_with_a_draft_model_is_lossless(pair, name):
    base, draft = pair
    cfg = DecodeConfig(max_new_tokens=24)
    want = decode(base, None, Tree(()), PROMPTS, config=cfg).tokens
    got = decode(base, draft, TREES[name], PROMPTS, config=cfg)
    assert got.tokens == want
    assert got.stats.mean_accept_length > 1.2  # the draft model drafts something real


def test_every_row_of_a_batch_equals_that_row_decoded_alone(pair):
    base, draft = pair
    tree, cfg = TREES["wide"], DecodeConfig(max_new_tokens=20)
    batch = decode(base, draft, tree, PROMPTS, config=cfg)
    for i, prompt in enumerate(PROMPTS):
        alone = generate(base, draft, tree, prompt, config=cfg)
        assert batch.tokens[i] == alone.tokens


@pytest.mark.parametrize("cfg", [DecodeConfig(max_new_tokens=20), DecodeConfig(max_new_tokens=20, mode="sample", temperature=0.7)],
                         ids=["greedy", "sampled"])
def test_continuous_batching_decodes_each_prompt_as_alone(pair, cfg):
    base, draft = pair
    assert_each_prompt_as_alone(base, draft, TREES["wide"], PROMPTS, cfg, batch=2)


def test_the_trace_walk_reproduces_live_decoding_step_by_step(pair, tmp_path):
    from treeopt.model.simulation import step_lengths

    base, draft = pair
    tree = TREES["wide"]
    for i, prompt in enumerate(PROMPTS[:3]):
        trace, _ = calibrate(base, draft, [prompt], tmp_path / f"{i}.npz",
                             config=CalibrateConfig(top_k=8, max_new_tokens=32))
        assert trace.head_kind == "draft-model" and trace.heads == 4
        walk = step_lengths(tree, trace).tolist()
        live = generate(base, draft, tree, prompt, config=DecodeConfig(max_new_tokens=32))
        assert list(live.stats.accept_lengths[: len(walk)]) == walk
        assert max(walk) > 1


def test_a_draft_model_loads_from_its_directory_and_checks_the_vocabulary(pair, tmp_path):
    from treeopt.drafters.checkpoints import load_heads_for

    base, draft = pair
    draft.lm.save_pretrained(tmp_path / "draft")
    loaded = load_heads_for(base, tmp_path / "draft", depth=3)
    assert isinstance(loaded, DraftModel) and loaded.config.num_heads == 3
    assert loaded.config.kind == "draft-model"
    other = tiny_llama(vocab=128, seed=1)
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(TreeoptError, match="vocabulary of 128 tokens.*256.*tokenizer"):
        load_heads_for(base, tmp_path / "other")


def test_a_draft_model_with_another_tokenizer_is_refused(tmp_path):
    from conftest import tiny_tokenizer

    from treeopt.drafters.checkpoints import check_same_tokenizer

    tiny_tokenizer(256).save_pretrained(tmp_path / "base")
    tok = tiny_tokenizer(256)
    vocab = tok.get_vocab()
    swapped = {t: (i + 1) % len(vocab) if i >= 4 else i for t, i in vocab.items()}
    assert swapped != vocab
    check_same_tokenizer(tmp_path / "base", tmp_path / "base")
    import json

    from tokenizers import Tokenizer
    raw = json.loads(tok.backend_tokenizer.to_str())
    raw["model"]["vocab"] = swapped
    raw["model"]["merges"] = []
    from transformers import PreTrainedTokenizerFast
    PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(raw))).save_pretrained(
        tmp_path / "draft")
    with pytest.raises(TreeoptError, match="tokenizer differs from the base model's"):
        check_same_tokenizer(tmp_path / "base", tmp_path / "draft")


def test_a_tree_deeper_than_the_draft_model_drafts_is_refused(pair):
    base, draft = pair
    with pytest.raises(TreeoptError, match="depth 5 but there are only 4"):
        decode(base, draft, Tree.chain(5), PROMPTS[:1])


def test_the_cli_calibrates_profiles_selects_and_verifies_with_a_draft_model(
        tiny_model_dir, prompts_file, tmp_path):
    """A draft model goes through the same commands as heads: --drafter DIR."""
    import json

    from conftest import tiny_tokenizer
    from test_cli_models import assert_user_error, run

    draft = tmp_path / "draft"
    tok = tiny_tokenizer(320)
    tiny_llama(vocab=len(tok), layers=1, seed=5).save_pretrained(draft)
    tok.save_pretrained(draft)
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", draft, "--draft-depth", "3",
               "--prompts", prompts_file, "--max-new-tokens", "12", "--top-k", "8",
               "--out", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    from treeopt import RankTrace

    trace = RankTrace.load(tmp_path / "t.npz")
    assert (trace.head_kind, trace.heads) == ("draft-model", 3)
    proc = run("grow", "--trace", tmp_path / "t.npz", "--max-nodes", "6", "--out",
               tmp_path / "g.json")
    assert proc.returncode == 0, proc.stderr
    proc = run("profile", "step", "--model", tiny_model_dir, "--drafter", draft,
               "--draft-depth", "3", "--growth", tmp_path / "g.json", "--prompts", prompts_file,
               "--batch", "1,2", "--sizes", "1,2,4", "--max-new-tokens", "6", "--rounds", "1",
               "--out", tmp_path / "step.json")
    assert proc.returncode == 0, proc.stderr
    proc = run("select", "--growth", tmp_path / "g.json", "--step-profile", tmp_path / "step.json",
               "--batch", "1,2", "--out", tmp_path / "sel.json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "sel.json").read_text())["points"]  # priced at both batches
    (tmp_path / "tree.json").write_text("[[0], [1], [0, 0], [0, 0, 0]]")
    proc = run("verify", "--model", tiny_model_dir, "--drafter", draft, "--draft-depth", "3",
               "--tree", tmp_path / "tree.json", "--batch", "2", "--prompts", prompts_file,
               "--max-new-tokens", "10", "--trace", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs_match"] is True
    other = tmp_path / "other"
    tiny_llama(vocab=300, layers=1).save_pretrained(other)
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", other, "--prompts",
               prompts_file, "--out", tmp_path / "o.npz")
    assert_user_error(proc, str(other), "vocabulary of 300 tokens", "share a tokenizer")


def test_a_distilled_draft_model_shares_the_vocabulary_and_drafts(pair):
    from treeopt.drafters.training import TrainConfig, distill_draft_model

    base, _ = pair
    seqs = greedy_continuations(base, PROMPTS * 4, max_new_tokens=40)
    cfg = TrainConfig(kind="hydra", num_heads=4, steps=40, batch_size=8, seq_len=40, lr=3e-3)
    lm, history = distill_draft_model(base, seqs, cfg, layers=1)
    assert lm.config.num_hidden_layers == 1 and lm.config.vocab_size == V
    assert history[-1]["loss"] < history[0]["loss"]
    drafter = DraftModel(lm, depth=4)
    want = decode(base, None, Tree(()), PROMPTS, config=DecodeConfig(max_new_tokens=24)).tokens
    run = decode(base, drafter, TREES["wide"], PROMPTS, config=DecodeConfig(max_new_tokens=24))
    assert run.tokens == want and run.stats.mean_accept_length > 1.5
    with pytest.raises(TreeoptError, match="1 … 2 layers"):
        distill_draft_model(base, seqs, cfg, layers=3)


def test_a_stopped_row_queues_nothing_and_its_cache_stays_put(pair):
    from treeopt.decoding.plan import tree_plan

    _, draft = pair
    plan = tree_plan(TREES["wide"], "cpu")
    state = draft.start(batch=2, capacity=32)
    hidden, tokens = torch.zeros(2, 3, 4), torch.randint(0, V, (2, 3))
    index, roots = torch.arange(3).expand(2, 3), torch.tensor([1, 2])
    with torch.inference_mode():
        draft.advance(hidden, tokens, index, torch.tensor([3, 3]), roots, state)  # the prefill
        draft.draft(plan, hidden[:, :1], roots, state)
        assert state.lens == [4, 4]  # the prompt and the root
        for _ in range(3):
            draft.advance(hidden, tokens, index, torch.tensor([0, 2]), roots, state)
            draft.draft(plan, hidden[:, :1], roots, state)
    assert state.lens == [4, 10]
