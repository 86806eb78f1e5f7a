"""The architecture matrix: a tiny config of every model family treeopt is held to, each with
windows and chunks shorter than the prompts, and the checks that hold treeopt's decoding to the
model's own. Shared by ``tests/test_architectures.py`` and ``benchmarks/architecture_matrix.py``
(which prints the table docs/byo-model.md carries)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WINDOW = 8  # every sliding window and chunk: shorter than every prompt
VOCAB = 96
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
MOE = dict(num_local_experts=4, num_experts_per_tok=2)
ALTERNATING = ["sliding_attention", "full_attention"] * 2


@dataclass(frozen=True)
class Family:
    """One row of the matrix: a transformers ``model_type`` and the config that makes it tiny;
    ``refused``: the words its refusal must contain (None: it must decode exactly)."""

    name: str
    model_type: str
    config: dict[str, Any] = field(default_factory=dict)
    feature: str = "full attention"
    refused: str | None = None
    common: bool = True

    def build(self, *, seed: int = 0) -> Any:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        kwargs = {**(COMMON if self.common else {}), **self.config}
        cfg = AutoConfig.for_model(self.model_type, **kwargs)
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").eval()
        with torch.no_grad():  # a sharper head: predictable text, heads that learn it
            model.get_output_embeddings().weight.mul_(8)
        return model


FAMILIES = (
    Family("llama", "llama"),
    Family("gpt2", "gpt2", dict(vocab_size=VOCAB, n_embd=32, n_layer=3, n_head=4,
                                n_positions=256, bos_token_id=1, eos_token_id=2),
           "learned positions", common=False),
    Family("gpt_neox", "gpt_neox", dict(num_key_value_heads=None), "parallel residual"),
    Family("qwen2", "qwen2", dict(use_sliding_window=True, sliding_window=WINDOW,
                                  max_window_layers=2), "sliding window on layers 2-3"),
    Family("qwen3", "qwen3", dict(use_sliding_window=True, sliding_window=WINDOW,
                                  max_window_layers=1, head_dim=8), "sliding window, QK-norm"),
    Family("qwen3_moe", "qwen3_moe", dict(num_experts=4, num_experts_per_tok=2,
                                          moe_intermediate_size=32, head_dim=8), "MoE"),
    Family("mixtral", "mixtral", dict(**MOE, sliding_window=WINDOW), "MoE, sliding window"),
    Family("mistral", "mistral", dict(sliding_window=WINDOW), "sliding window"),
    Family("phi3", "phi3", dict(sliding_window=WINDOW), "sliding window, fused QKV"),
    Family("gemma2", "gemma2", dict(sliding_window=WINDOW, head_dim=8, layer_types=ALTERNATING),
           "alternating windows, logit soft-capping"),
    Family("gemma3_text", "gemma3_text", dict(sliding_window=WINDOW, head_dim=8,
                                              layer_types=ALTERNATING),
           "alternating windows, QK-norm"),
    Family("gpt_oss", "gpt_oss", dict(**MOE, sliding_window=WINDOW, head_dim=8,
                                      layer_types=ALTERNATING), "MoE, windows, attention sinks"),
    Family("cohere2", "cohere2", dict(sliding_window=WINDOW, layer_types=ALTERNATING),
           "alternating windows, parallel block"),
    Family("olmo3", "olmo3", dict(sliding_window=WINDOW, layer_types=ALTERNATING),
           "alternating windows"),
    Family("llama4_text", "llama4_text", dict(
        attention_chunk_size=WINDOW, num_local_experts=4, num_experts_per_tok=1,
        intermediate_size_mlp=64, head_dim=8, interleave_moe_layer_step=2,
        layer_types=["chunked_attention", "chunked_attention", "chunked_attention",
                     "full_attention"]), "chunked attention, MoE"),
    Family("deepseek_v3", "deepseek_v3", dict(
        kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=8,
        v_head_dim=12, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        first_k_dense_replace=1, moe_intermediate_size=32, num_key_value_heads=4,
        rope_interleave=True), "MLA, MoE"),
    Family("falcon_h1", "falcon_h1", dict(mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8,
                                          mamba_n_groups=1, mamba_d_state=8, head_dim=8),
           "attention beside Mamba", refused="recurrent state"),
    Family("lfm2", "lfm2", dict(full_attn_idxs=[1, 3], norm_eps=1e-5),
           "short convolutions", refused="recurrent state"),
    Family("qwen3_next", "qwen3_next", dict(
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, head_dim=8, linear_num_value_heads=4,
        linear_num_key_heads=2, linear_key_head_dim=8, linear_value_head_dim=8,
        layer_types=["linear_attention", "full_attention"] * 2),
           "gated delta-net", refused="recurrent state"),
    Family("mamba", "mamba", dict(vocab_size=VOCAB, hidden_size=32, state_size=8,
                                  num_hidden_layers=2, bos_token_id=1, eos_token_id=2),
           "selective state space", refused="recurrent state", common=False),
    Family("jamba", "jamba", dict(num_experts=4, num_experts_per_tok=2, attn_layer_period=2,
                                  attn_layer_offset=1, expert_layer_period=2,
                                  expert_layer_offset=1, mamba_d_state=8, mamba_dt_rank=4),
           "attention beside Mamba, MoE", refused="recurrent state"),
)


PROMPT_LENGTHS = (13, 17, 11)  # a batch of three rows of different lengths, each past WINDOW
NEW_TOKENS = 20  # decoding crosses further window and chunk boundaries
DRAFTERS = ("medusa", "hydra", "eagle")
TOP_K = 8


def tree() -> Any:
    from treeopt import Tree

    return Tree.from_choices([[0], [1], [2], [0, 0], [1, 0], [0, 0, 0]])


def prompts(count: int = len(PROMPT_LENGTHS), *, seed: int = 1) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(seed)
    lengths = (PROMPT_LENGTHS * count)[:count]
    return [torch.randint(3, VOCAB, (n,), generator=gen).tolist() for n in lengths]


def train_drafter(model: Any, kind: str, sequences: list[list[int]]) -> Any:
    """A drafter of ``kind`` trained briefly on the model's own greedy text (it drafts well
    enough that tree paths are accepted, and accepted paths move in the cache)."""
    from treeopt.drafters.training import TrainConfig, train_heads

    cfg = TrainConfig(kind=kind, num_heads=3, steps=40, batch_size=4, seq_len=24, lr=5e-3,
                      prefix_attention=kind == "hydra")
    return train_heads(model, sequences, cfg)[0]


def decoded(model: Any, heads: Any, batch: list[list[int]], config: Any) -> list[tuple[int, ...]]:
    """``batch`` decoded by treeopt under ``config``: its plain loop when ``heads`` is None,
    else tree decoding with ``heads``."""
    from treeopt import Tree
    from treeopt.decoding.loop import decode

    return decode(model, heads, Tree(()) if heads is None else tree(), batch,
                  config=config).tokens


def greedy() -> Any:
    """Greedy decoding of ``NEW_TOKENS`` tokens, stopping at the end-of-sequence token."""
    from treeopt.decoding.loop import DecodeConfig

    return DecodeConfig(max_new_tokens=NEW_TOKENS, eos_token_id=2)


def greedy_matches(model: Any, heads: Any, batch: list[list[int]],
                   want: list[tuple[int, ...]], *,
                   loop: list[tuple[int, ...]] | None = None) -> tuple[int, int]:
    """How many rows of the batch treeopt's autoregressive loop and its tree decoding decode
    exactly as ``want`` (the model's own ``generate``); ``loop``: the loop's tokens, when
    decoded already (they do not depend on the drafter)."""
    loop = decoded(model, None, batch, greedy()) if loop is None else loop
    spec = decoded(model, heads, batch, greedy())
    same = lambda got: sum(tuple(g) == w for g, w in zip(got, want, strict=True))  # noqa: E731
    return same(loop), same(spec)


def ranks_match(model: Any, heads: Any, sequences: list[list[int]]) -> bool:
    """Calibration's one batched teacher-forced pass equals the step-by-step reference (for
    EAGLE, test_eagle's: the drafter re-run over its true and predicted entries)."""
    import numpy as np

    from treeopt.decoding.rank_pass import rank_batch, reference_ranks

    if heads.config.kind == "eagle":
        from test_eagle import reference_ranks as eagle_reference

        def reference(s: list[int], st: int) -> Any:
            return eagle_reference(model, heads, s, st, TOP_K)
    else:
        def reference(s: list[int], st: int) -> Any:
            return reference_ranks(model, heads, s, st, top_k=TOP_K)

    starts = [len(p) - 1 for p in prompts()]
    got = rank_batch(model, heads, sequences, starts, top_k=TOP_K)
    return all(np.array_equal(g, reference(s, st))
               for g, s, st in zip(got, sequences, starts, strict=True))


def walk_matches(model: Any, heads: Any, prompt: list[int], directory: Any) -> tuple[bool, float]:
    """A trace calibrated on ``prompt``, walked step by step, gives every accepted length live
    decoding of that prompt gives; returns that and the live mean accepted length."""
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate
    from treeopt.decoding.loop import DecodeConfig, generate
    from treeopt.model.simulation import step_lengths

    trace, _ = calibrate(model, heads, [prompt], directory / f"{heads.config.kind}.npz",
                         config=CalibrateConfig(top_k=TOP_K, max_new_tokens=NEW_TOKENS))
    walk = step_lengths(tree(), trace).tolist()
    live = generate(model, heads, tree(), prompt, config=DecodeConfig(max_new_tokens=NEW_TOKENS))
    lengths = list(live.stats.accept_lengths)
    return lengths[: len(walk)] == walk and len(walk) > 0, sum(lengths) / len(lengths)


SAMPLING_SEEDS = (0, 1)


def sampling(seed: int) -> Any:
    """Sampling at temperature 1 of ``NEW_TOKENS`` tokens from ``seed``."""
    from treeopt.decoding.loop import DecodeConfig

    return DecodeConfig(max_new_tokens=NEW_TOKENS, mode="sample", temperature=1.0, seed=seed)


def plain_sampling(model: Any, batch: list[list[int]]) -> dict[int, list[tuple[int, ...]]]:
    """Treeopt's plain sampling of ``batch``, seed by seed (the same for every drafter)."""
    return {seed: decoded(model, None, batch, sampling(seed)) for seed in SAMPLING_SEEDS}


def sampling_matches(model: Any, heads: Any, batch: list[list[int]], *,
                     plain: dict[int, list[tuple[int, ...]]] | None = None) -> bool:
    """Sample-and-match tree decoding emits treeopt's plain sampling's tokens, seed for seed
    (``plain``: :func:`plain_sampling`'s, when decoded already)."""
    plain = plain_sampling(model, batch) if plain is None else plain
    return all(decoded(model, heads, batch, sampling(seed)) == plain[seed]
               for seed in SAMPLING_SEEDS)


CHECKS = ("loop = generate", "tree = generate", "ranks = reference", "walk = live",
          "sampling = plain")


def refusal(family: Family) -> str:
    """The one line treeopt answers a refused family with (empty when it decodes)."""
    from treeopt import Tree, TreeoptError
    from treeopt.decoding.loop import decode

    try:
        decode(family.build(), None, Tree(()), prompts(), config=None)
    except TreeoptError as exc:
        return str(exc)
    return ""


def matrix_row(family: Family, directory: Any) -> dict[str, Any]:
    """Every check of one family, for each drafter kind: ``{kind: {check: passed}}`` plus each
    kind's live mean accepted length (``E[L]``, showing that paths were accepted)."""
    from treeopt.decoding.hf_generate import own_greedy

    model = family.build()
    batch = prompts()
    want = own_greedy(model, batch, max_new_tokens=NEW_TOKENS, eos_token_id=2)
    full = own_greedy(model, batch, max_new_tokens=NEW_TOKENS, eos_token_id=None)
    sequences = [[*p, *c] for p, c in zip(batch, full, strict=True)]
    train = prompts(8, seed=5)
    train = [[*p, *c] for p, c in zip(train, own_greedy(model, train, max_new_tokens=24,
                                                          eos_token_id=None), strict=True)]
    loop, plain = decoded(model, None, batch, greedy()), plain_sampling(model, batch)
    row: dict[str, Any] = {}
    for kind in DRAFTERS:
        heads = train_drafter(model, kind, train)
        same_loop, same_tree = greedy_matches(model, heads, batch, want, loop=loop)
        walk, mean = walk_matches(model, heads, batch[1], directory)
        row[kind] = {"loop = generate": same_loop == len(batch),
                     "tree = generate": same_tree == len(batch),
                     "ranks = reference": ranks_match(model, heads, sequences), "walk = live": walk,
                     "sampling = plain": sampling_matches(model, heads, batch, plain=plain),
                     "E[L]": mean}
    return row
