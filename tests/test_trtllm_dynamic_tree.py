"""TensorRT-LLM's EAGLE-3 dynamic tree grows each step's tree as treeopt's dynamic drafting
(and so its simulation, :mod:`treeopt.dynamic.simulate`) does, and ``select --dynamic`` lists
its settings beside SGLang's, refused for MLA and sliding-window models.

TensorRT-LLM's rule, read from tensorrt_llm/_torch/speculative/eagle3_dynamic_tree.py at
057c8a65145bb53caf3939ba4fbcabbad46ea3dc (``_select_topk_draft_tokens``,
``update_draft_tokens_and_scores``, ``resampling_final_draft_tokens``): level 1 keeps the root's
top-K (softmax probabilities); each later level expands the K frontier nodes' top-K children,
scores them by the product of probabilities along the path, writes all K·K to a history laid
out level by level (K, then K·K per level), and keeps the top K as the next frontier; after
``max_draft_len`` levels the top ``max_total_draft_tokens`` of the whole history, sorted by
history index, are verified. treeopt's pool (:mod:`treeopt.decoding.dynamic_drafting`) has the
same layout and takes the best cumulative log-probabilities, the same order; only ties may go
another way (treeopt's sort is stable, torch.topk's is not), and random scores have none.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.cli.select_sources import model_attention
from treeopt.decoding.dynamic_drafting import Pool, best, choose
from treeopt.dynamic.report import engine_settings
from treeopt.model.dynamic_settings import DynamicSettings


def trtllm_tree(probs: list[np.ndarray], k: int, total: int) -> list[int]:
    """TensorRT-LLM's history indices verified: ``probs[0]`` ``[K]`` the root's top-K
    probabilities, ``probs[d]`` ``[K, K]`` each frontier node's children's at level d + 1."""
    history, frontier = list(probs[0]), np.asarray(probs[0])
    for level in probs[1:]:
        scores = (level * frontier[:, None]).reshape(-1)  # [K·K], parents in frontier order
        history += list(scores)
        frontier = scores[np.argsort(-scores, kind="stable")[:k]]
    return sorted(np.argsort(-np.asarray(history), kind="stable")[:total].tolist())


def treeopt_tree(probs: list[np.ndarray], k: int, total: int) -> list[int]:
    """treeopt's pool indices verified, grown as :func:`treeopt.drafters.eagle_growth.
    grow_dynamic` grows them (cumulative log-probabilities, :func:`best`, :func:`choose`)."""
    logp = [torch.log(torch.tensor(p, dtype=torch.float64)) for p in probs]
    scores, parents, depths = [logp[0][None]], [torch.full((1, k), -1)], [torch.ones(1, k)]
    score, front, base = logp[0][None], torch.arange(k)[None], k
    for depth, level in enumerate(logp[1:], start=2):
        cum = (score[:, :, None] + level[None]).flatten(1)  # [1, K·K]
        scores.append(cum)
        parents.append(front.repeat_interleave(k, dim=1))
        depths.append(torch.full((1, k * k), depth))
        local = best(cum, k)
        score, front, base = cum.gather(1, local), base + local, base + k * k
    pool = Pool(torch.zeros(1, sum(s.shape[1] for s in scores), dtype=torch.long),
                torch.cat(scores, 1), torch.cat(parents, 1).long(), torch.cat(depths, 1).long())
    tokens, plan = choose(pool, torch.tensor([0]), total)
    picked = best(pool.scores, total).sort(dim=-1).values
    assert plan.parent.shape == (1, total + 1) and tokens.shape == (1, total + 1)
    return picked[0].tolist()


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4), st.integers(1, 4), st.integers(0, 2 ** 31 - 1), st.data())
def test_trtllm_s_dynamic_tree_is_the_tree_treeopt_grows(k, levels, seed, data):
    rng = np.random.default_rng(seed)

    def top_k_probs(shape):  # descending probabilities of the top-k children, summing < 1
        p = np.sort(rng.dirichlet(np.ones(k + 1), size=shape)[..., :k], axis=-1)[..., ::-1]
        return np.ascontiguousarray(p)

    probs = [top_k_probs(()), *(top_k_probs((k,)) for _ in range(levels - 1))]
    size = k + k * k * (levels - 1)
    total = data.draw(st.integers(levels, min(size, k * levels)))  # TensorRT-LLM's bounds
    assert treeopt_tree(probs, k, total) == trtllm_tree(probs, k, total)


def test_select_lists_trtllm_s_settings_refused_for_mla_and_sliding_window():
    s = DynamicSettings(4, 3, 10)
    full = engine_settings(s, attention="full")["trtllm"]
    assert full["problems"] == [] and "use_dynamic_tree: true" in full["text"]
    assert engine_settings(s, attention="mla")["trtllm"]["problems"][0] == (
        "TensorRT-LLM runs no EAGLE-3 dynamic tree for a model with mla attention")
    assert engine_settings(s, attention="sliding-window")["trtllm"]["problems"][0].endswith(
        "sliding-window attention")
    unknown = engine_settings(s)
    assert unknown["trtllm"]["notes"] == [
        "the model's attention is not known (give its config.json): TensorRT-LLM runs no "
        "EAGLE-3 dynamic tree for a model with MLA or sliding-window attention"]
    assert "notes" not in unknown["sglang"]


def test_the_model_s_config_tells_its_attention(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"kv_lora_rank": 512}))
    (tmp_path / "gemma.json").write_text(json.dumps({"layer_types": ["sliding_attention",
                                                                     "full_attention"]}))

    def args(**kw):
        return argparse.Namespace(**{"model": None, "config": None, **kw})

    assert model_attention(args(model=str(tmp_path))) == "mla"
    assert model_attention(args(config=str(tmp_path / "gemma.json"))) == "sliding-window"
    assert model_attention(args()) is None
