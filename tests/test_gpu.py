"""The CUDA paths of decoding, calibration and training: run where a GPU is available.

Every test carries the ``gpu`` marker and is skipped without CUDA (see conftest.py).
"""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from conftest import tiny_llama  # noqa: E402

from treeopt import Tree  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, autoregressive, generate  # noqa: E402
from treeopt.decoding.rank_pass import greedy_continuations, rank_batch  # noqa: E402
from treeopt.drafters.checkpoints import load_heads_for  # noqa: E402
from treeopt.drafters.draft_model import DraftModel  # noqa: E402
from treeopt.drafters.heads import build_heads  # noqa: E402
from treeopt.drafters.hybrid import HybridDrafter  # noqa: E402
from treeopt.drafters.prompt_lookup import PromptLookup  # noqa: E402
from treeopt.drafters.training import TrainConfig, train_heads  # noqa: E402
from treeopt.registry.drafter_configs import HeadsConfig, default_feature_layers  # noqa: E402
from treeopt.registry.kinds import (  # noqa: E402
    HYBRID_SUFFIX,
    KIND_NAMES,
    TRAINED_KINDS,
    drafter_kind,
)

pytestmark = pytest.mark.gpu
TREE = Tree.from_choices([[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0], [0, 0, 0, 0]])


def _model_and_heads(kind: str, device: str):
    """The tiny base model and a drafter of ``kind`` for it (a draft model: a one-layer Llama
    sharing its vocabulary; n-gram drafters: their spec's defaults; a hybrid: its model kind's
    drafter joined by prompt lookup)."""
    model = tiny_llama(vocab=256, seed=3).to(device)
    return model, _heads(kind, model, device)


def _heads(kind: str, model, device: str):
    registered = drafter_kind(kind)
    if registered.hybrid:
        inner = _heads(kind.removesuffix(HYBRID_SUFFIX), model, device)
        return HybridDrafter(inner, PromptLookup(depth=5, vocab_size=256)).to(device)
    if registered.lookup:
        return load_heads_for(model, kind)  # the spec of its name alone: its defaults
    if kind == "draft-model":
        return DraftModel(tiny_llama(vocab=256, layers=1, seed=5).to(device), depth=4)
    cfg = HeadsConfig(kind=kind, num_heads=4, hidden_size=64, vocab_size=256,
                      share_lm_head=registered.base_lm_head,
                      feature_layers=default_feature_layers(2) if kind == "eagle3" else ())
    heads = build_heads(cfg, lm_head=model.lm_head,
                        embeddings=model.get_input_embeddings()).to(device)
    return heads.eval()


def _tree(kind: str) -> Tree:
    """TREE, or the chain of its depth for a drafter of chains (prompt lookup)."""
    return Tree.chain(TREE.depth) if drafter_kind(kind).chain else TREE


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_greedy_tree_decoding_on_cuda_is_lossless(kind):
    model, heads = _model_and_heads(kind, "cuda")
    prompt = list(range(3, 11))
    config = DecodeConfig(max_new_tokens=48)
    tree_out = generate(model, heads, _tree(kind), prompt, config=config)
    plain = autoregressive(model, prompt, config=config)
    assert tree_out.tokens == plain.tokens
    assert tree_out.stats.steps <= plain.stats.steps


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_rank_trace_on_cuda_equals_cpu(kind):
    model, heads = _model_and_heads(kind, "cpu")
    seqs = greedy_continuations(model, [list(range(3, 9)), list(range(20, 30))], max_new_tokens=24)
    starts = [6, 10]

    def ranks(model, heads):  # suffix decoding ranks requests in order, through its cache
        if drafter_kind(kind).request_cache:
            return heads.rank_requests(heads.request_cache(), seqs, starts, top_k=16)
        return rank_batch(model, heads, seqs, starts, top_k=16)

    on_cpu = ranks(model, heads)
    on_gpu = ranks(copy.deepcopy(model).to("cuda"), copy.deepcopy(heads).to("cuda"))
    for a, b in zip(on_cpu, on_gpu, strict=True):
        assert (a == b).mean() > 0.99  # fp32 on both; rare near-ties may order differently


@pytest.mark.parametrize("kind", TRAINED_KINDS)
def test_drafter_training_runs_on_cuda(kind):
    model = tiny_llama(vocab=256, seed=3).to("cuda")
    seqs = greedy_continuations(model, [list(range(3, 9))] * 4, max_new_tokens=40)
    heads, history = train_heads(model, seqs, TrainConfig(kind=kind, num_heads=2, steps=5,
                                                          batch_size=4, seq_len=32))
    assert next(heads.parameters()).is_cuda
    assert len(history) == 5 and all(h["loss"] == h["loss"] for h in history)  # no NaN


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_compiled_batched_decoding_on_cuda_is_lossless(kind):
    """--compile: steps through torch.compile ("reduce-overhead": CUDA graphs) on a static cache,
    really through CUDA graphs (inductor skips them, silently but for a log line, when a step
    writes into a buffer that is not a static address)."""
    from torch._dynamo.utils import counters

    from treeopt.decoding.loop import Decoder

    model, heads = _model_and_heads(kind, "cuda")
    prompts = [list(range(3, 11)), list(range(20, 26)), list(range(40, 49))]
    config = DecodeConfig(max_new_tokens=40)
    decoder = Decoder(model, heads, compile=True)
    assert decoder.verify.static
    counters.clear()
    run = decoder.decode(_tree(kind), prompts, config=config)
    again = decoder.decode(_tree(kind), prompts, config=config)  # graphs replayed, cache reused
    assert counters["inductor"]["cudagraph_skips"] == 0
    want = [autoregressive(model, p, config=config).tokens for p in prompts]
    assert list(run.tokens) == want and list(again.tokens) == want


@pytest.mark.parametrize("compile", [False, True])
def test_runs_decoded_alongside_on_cuda_are_each_the_run_alone(compile):
    """Tree and autoregressive steps interleaved on CUDA (each step waits for its own device
    work before it counts its time): each run's tokens are its own, eager and compiled (a
    static buffer per run)."""
    from treeopt.decoding.loop import Decoder

    model, heads = _model_and_heads("hydra", "cuda")
    prompts = [list(range(3, 11)), list(range(20, 26))]
    config = DecodeConfig(max_new_tokens=40)
    decoder = Decoder(model, heads, compile=compile)
    tree, ar = decoder.decode_alongside((TREE, Tree(())), prompts, config=config)
    want = [autoregressive(model, p, config=config).tokens for p in prompts]
    assert list(tree.tokens) == want and list(ar.tokens) == want
    assert tree.stats.decode_seconds > 0 and ar.stats.decode_seconds > 0
    # random heads may accept nothing: the tree never takes more steps, and no fewer tokens
    assert tree.stats.iterations <= ar.stats.iterations


def test_blas_choice_times_each_row_count_once_and_restores_the_preference():
    """On CUDA a verify forward runs under the faster of cuBLAS and cuBLASLt for its row count
    (treeopt.decoding.blas), measured on the model's own projection shapes; the process-wide
    preference is as it was afterwards."""
    from treeopt.decoding.blas import LIBRARIES
    from treeopt.decoding.loop import Decoder

    model = tiny_llama(vocab=256, seed=3).to("cuda")
    decoder = Decoder(model)
    blas = decoder.verify.blas
    assert blas is not None
    before = torch.backends.cuda.preferred_blas_library()
    timed = [blas.timer(lib, 9) for lib in LIBRARIES]
    assert all(t > 0 for t in timed)
    assert blas.library(9) in LIBRARIES
    with blas.use(9):
        assert torch.backends.cuda.preferred_blas_library().name.lower() == blas.library(9)
    assert torch.backends.cuda.preferred_blas_library() == before
    out = decoder.decode(Tree(()), [list(range(3, 11))], config=DecodeConfig(max_new_tokens=8))
    assert len(out.tokens[0]) == 8 and 1 in blas.chosen  # the steps' one row was measured
    assert torch.backends.cuda.preferred_blas_library() == before
