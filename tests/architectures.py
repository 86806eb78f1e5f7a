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
)
