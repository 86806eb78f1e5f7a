"""Reading (and writing) Hugging Face ``config.json`` dicts of every modelled family.

Field names and defaults are those of ``transformers``' own config classes
(``transformers/models/<family>/configuration_*.py``); a field a file leaves out takes the class's
default, as ``AutoConfig`` would (tests compare the two). What each family adds to a Llama:

============  ===============================================================================
family        read from config.json
============  ===============================================================================
llama         the base fields; ``attention_bias``, ``tie_word_embeddings``
mistral       ``sliding_window`` on every layer (default 4096)
mixtral       ``num_local_experts`` routed experts of width ``intermediate_size`` on every layer
qwen2, qwen3  q/k/v biases (qwen2); q/k norms (qwen3); ``use_sliding_window`` from
              ``max_window_layers`` on, or ``layer_types``
qwen3_moe     ``num_experts`` of ``moe_intermediate_size``, every ``decoder_sparse_step``-th layer
              but ``mlp_only_layers``
phi3          ``sliding_window`` on every layer when set, ``partial_rotary_factor``
gemma2/3      ``layer_types`` (default: every 2nd / 6th layer full), four norms a layer, tied
              embeddings; ``gemma3`` reads its nested ``text_config``
gpt_oss       ``layer_types`` (sliding 128 / full), ``num_local_experts`` with biases
cohere2       ``layer_types`` (every 4th full), one norm and a parallel residual, tied embeddings
olmo3         ``layer_types`` (every 4th full), q/k norms
llama4_text   ``layer_types`` or ``no_rope_layers`` (chunked / full), ``attention_chunk_size``,
              ``moe_layers`` or ``interleave_moe_layer_step``, a shared expert, dense layers of
              ``intermediate_size_mlp``
deepseek_v3   MLA (``kv_lora_rank``, ``q_lora_rank``, ``qk_rope_head_dim``, ``qk_nope_head_dim``,
              ``v_head_dim``); ``n_routed_experts`` + ``n_shared_experts`` from layer
              ``first_k_dense_replace`` on
gpt2          ``n_embd``, ``n_layer``, ``n_head``, ``n_inner`` (4·n_embd), learned positions,
              biases, a GELU MLP, tied embeddings
gpt_neox      ``rotary_pct`` / ``partial_rotary_factor``, ``use_parallel_residual``, biases, GELU
============  ===============================================================================
"""

from __future__ import annotations

from typing import Any

from treeopt.errors import TreeoptError
from treeopt.roofline.mla import MLA
from treeopt.roofline.moe import MoE

FAMILIES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "phi3", "gemma2",
            "gemma3_text", "gemma3", "gpt_oss", "cohere2", "olmo3", "llama4_text", "deepseek_v3",
            "gpt2", "gpt_neox")
RECURRENT = {  # model_type: the layers the roofline does not model
    "mamba": "Mamba (selective state-space) layers", "mamba2": "Mamba-2 state-space layers",
    "falcon_mamba": "Mamba state-space layers", "falcon_h1": "Mamba-2 state-space layers",
    "jamba": "Mamba state-space layers", "bamba": "Mamba-2 state-space layers",
    "zamba": "Mamba state-space layers", "zamba2": "Mamba-2 state-space layers",
    "nemotron_h": "Mamba-2 state-space layers", "granitemoehybrid": "Mamba-2 state-space layers",
    "lfm2": "short-convolution (LIV) layers", "qwen3_next": "Gated DeltaNet linear-attention layers",
    "recurrent_gemma": "RG-LRU recurrent layers", "rwkv": "RWKV recurrent layers",
}
_SLIDING_EVERY = {"gemma2": 2, "gemma3_text": 6, "cohere2": 4, "olmo3": 4, "gpt_oss": 2}
_DEFAULTS: dict[str, dict[str, Any]] = {  # transformers' defaults for the fields read here
    "llama": {}, "mistral": {"sliding_window": 4096}, "mixtral": {"num_local_experts": 8,
                                                                  "num_experts_per_tok": 2},
    "qwen2": {"attention_bias": True, "max_window_layers": 28, "sliding_window": 4096},
    "qwen3": {"max_window_layers": 28, "sliding_window": 4096},
    "qwen3_moe": {"num_experts_per_tok": 8, "moe_intermediate_size": 768,
                  "decoder_sparse_step": 1, "sliding_window": 4096},
    "phi3": {},
    "gemma2": {"head_dim": 256, "vocab_size": 256000, "tie_word_embeddings": True,
               "sliding_window": 4096},
    "gemma3_text": {"head_dim": 256, "vocab_size": 262208, "tie_word_embeddings": True,
                    "sliding_window": 4096, "max_position_embeddings": 131072},
    "gpt_oss": {"head_dim": 64, "attention_bias": True, "sliding_window": 128,
                "num_local_experts": 128, "num_experts_per_tok": 4},
    "cohere2": {"tie_word_embeddings": True, "sliding_window": 4096},
    "olmo3": {"sliding_window": 4096},
    "llama4_text": {"head_dim": 128, "attention_chunk_size": 8192, "num_local_experts": 16,
                    "num_experts_per_tok": 1, "intermediate_size_mlp": 16384,
                    "interleave_moe_layer_step": 1, "no_rope_layer_interval": 4},
    "deepseek_v3": {"n_routed_experts": 256, "num_experts_per_tok": 8,
                    "moe_intermediate_size": 2048, "n_shared_experts": 1,
                    "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
                    "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                    "v_head_dim": 128},
    "gpt2": {"tie_word_embeddings": True},
    "gpt_neox": {"use_parallel_residual": True, "attention_bias": True},
}
_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "vocab_size")
_GPT2 = {"n_embd": "hidden_size", "n_layer": "num_hidden_layers", "n_head": "num_attention_heads",
         "n_positions": "max_position_embeddings"}


def read_hf(doc: Any, *, source: str) -> dict[str, Any]:
    """:class:`roofline.config.ModelConfig` fields (all but ``name``) of a config.json dict."""
    if not isinstance(doc, dict):
        raise TreeoptError(f"{source}: expected a JSON object (a config.json)")
    family = str(doc.get("model_type", "llama"))
    if family == "gemma3" and isinstance(doc.get("text_config"), dict):
        doc, family = {**doc["text_config"], "model_type": "gemma3_text"}, "gemma3_text"
    if family in RECURRENT:
        raise TreeoptError(f"{source}: model_type {family!r} has {RECURRENT[family]}, which the "
                           f"roofline does not model; it reads {', '.join(FAMILIES)}")
    if family not in _DEFAULTS:
        raise TreeoptError(f"{source}: model_type {family!r} is not supported; the roofline "
                           f"reads {', '.join(FAMILIES)}")
    if family == "gpt2":
        doc = {**{v: doc[k] for k, v in _GPT2.items() if k in doc}, **doc}
        doc.setdefault("intermediate_size", doc.get("n_inner") or 4 * doc.get("hidden_size", 0))
    d = {**_DEFAULTS[family], **doc}  # an explicit null (sliding_window) stays null
    missing = [f for f in _REQUIRED if f not in d]
    if missing:
        raise TreeoptError(f"{source}: missing field(s) {', '.join(missing)} "
                           f"(need {', '.join(_REQUIRED)})")
    heads, hidden = d["num_attention_heads"], d["hidden_size"]
    out: dict[str, Any] = {
        "model_type": family, "hidden_size": hidden, "intermediate_size": d["intermediate_size"],
        "num_layers": d["num_hidden_layers"], "num_heads": heads,
        "num_kv_heads": (family not in ("gpt2", "gpt_neox") and d.get("num_key_value_heads"))
        or heads,
        "head_dim": d.get("head_dim") or (hidden // heads if isinstance(hidden, int)
                                          and isinstance(heads, int) and heads else 0),
        "vocab_size": d["vocab_size"], "max_positions": d.get("max_position_embeddings"),
        "attention_bias": bool(d.get("attention_bias", False)),
        "tie_embeddings": bool(d.get("tie_word_embeddings", False)),
    }
    out.update(_attention(family, d))
    out.update(_block(family, d))
    return out


def _attention(family: str, d: dict[str, Any]) -> dict[str, Any]:
    """Per-layer attention kinds and their windows; MLA."""
    n, window = d["num_hidden_layers"], d.get("sliding_window")
    types = d.get("layer_types")
    if family in _SLIDING_EVERY and not types:
        every = d.get("sliding_window_pattern", _SLIDING_EVERY[family])
        types = ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n)]
    elif family in ("qwen2", "qwen3", "qwen3_moe") and not types:
        first = d.get("max_window_layers", 0) if family != "qwen3_moe" else 0
        slide = d.get("use_sliding_window", False)
        types = ["sliding_attention" if slide and i >= first else "full_attention"
                 for i in range(n)]
    elif family in ("mistral", "mixtral", "phi3") and window:
        types = ["sliding_attention"] * n
    elif family == "llama4_text" and not types:
        rope = d.get("no_rope_layers") or [int((i + 1) % d["no_rope_layer_interval"] != 0)
                                           for i in range(n)]
        types = ["chunked_attention" if r else "full_attention" for r in rope]
    chunk = d.get("attention_chunk_size") if family == "llama4_text" else None
    types = [t if (t != "chunked_attention" or chunk) else "full_attention" for t in types or ()]
    if all(t == "full_attention" for t in types):
        types = []
    out: dict[str, Any] = {
        "layer_types": tuple(types),
        "sliding_window": window if "sliding_attention" in types else None,
        "attention_chunk_size": chunk if "chunked_attention" in types else None,
    }
    if family == "deepseek_v3":
        mla = MLA(d["kv_lora_rank"], d.get("q_lora_rank"), d["qk_rope_head_dim"],
                  d["qk_nope_head_dim"], d["v_head_dim"])
        out.update(mla=mla, head_dim=mla.qk_nope_head_dim + mla.qk_rope_head_dim,
                   num_kv_heads=d["num_attention_heads"])
    return out


def _block(family: str, d: dict[str, Any]) -> dict[str, Any]:
    """Norms, MLP form, residual, positions, experts."""
    out: dict[str, Any] = {
        "qk_norm": family in ("qwen3", "qwen3_moe", "gemma3_text", "olmo3")
        or (family == "llama4_text" and d.get("use_qk_norm", True)),
        "norms_per_layer": {"gemma2": 4, "gemma3_text": 4, "cohere2": 1}.get(family, 2),
        "parallel_residual": family == "cohere2"
        or (family == "gpt_neox" and bool(d["use_parallel_residual"])),
    }
    rope = d.get("rope_parameters") or {}
    fraction = (d.get("rotary_pct") or d.get("partial_rotary_factor")
                or rope.get("partial_rotary_factor") or (0.25 if family == "gpt_neox" else 1.0))
    out["rotary_fraction"] = float(fraction)
    if family in ("gpt2", "gpt_neox"):
        out.update(gated_mlp=False, mlp_bias=True, attention_bias=True)
    if family == "gpt2":
        out.update(rotary_fraction=0.0, position_embeddings=d["max_position_embeddings"])
    n, moe = d["num_hidden_layers"], None
    if family in ("mixtral", "gpt_oss"):
        moe = MoE(d["num_local_experts"], d["num_experts_per_tok"], d["intermediate_size"],
                  tuple(range(n)), bias=family == "gpt_oss")
    elif family == "qwen3_moe":
        step, dense = d["decoder_sparse_step"], set(d.get("mlp_only_layers") or ())
        layers = tuple(i for i in range(n) if i not in dense and (i + 1) % step == 0)
        experts = d.get("num_experts") or d.get("num_local_experts") or 128  # to_dict's spelling
        moe = MoE(experts, d["num_experts_per_tok"], d["moe_intermediate_size"], layers)
    elif family == "llama4_text":
        step = d["interleave_moe_layer_step"]
        layers = tuple(d.get("moe_layers") or range(step - 1, n, step))
        moe = MoE(d["num_local_experts"], d["num_experts_per_tok"], d["intermediate_size"],
                  layers, shared_intermediate_size=d["intermediate_size"])
        out["intermediate_size"] = d["intermediate_size_mlp"]
    elif family == "deepseek_v3":
        first, freq = d["first_k_dense_replace"], d["moe_layer_freq"]
        layers = tuple(i for i in range(first, n) if i % freq == 0)
        m = d["moe_intermediate_size"]
        moe = MoE(d["n_routed_experts"], d["num_experts_per_tok"], m, layers,
                  shared_intermediate_size=m * (d["n_shared_experts"] or 0))
    if moe is not None and moe.layers:
        out["moe"] = moe
    return out


def write_hf(cfg: Any) -> dict[str, Any]:
    """The config.json fields of ``cfg`` under its family's names (for ``AutoConfig``)."""
    family = cfg.model_type
    doc: dict[str, Any] = {
        "model_type": family, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim, "vocab_size": cfg.vocab_size,
    }
    if cfg.max_positions is not None:
        doc["max_position_embeddings"] = cfg.max_positions
    if family == "llama":
        doc["attention_bias"] = cfg.attention_bias
    if family != "llama" or cfg.tie_embeddings:
        doc["tie_word_embeddings"] = cfg.tie_embeddings
    if family == "gpt2":
        return {"model_type": "gpt2", "n_embd": cfg.hidden_size, "n_layer": cfg.num_layers,
                "n_head": cfg.num_heads, "n_inner": cfg.intermediate_size,
                "vocab_size": cfg.vocab_size, "n_positions": cfg.position_embeddings,
                "tie_word_embeddings": cfg.tie_embeddings}
    if family == "phi3":
        doc["partial_rotary_factor"] = cfg.rotary_fraction
    if family == "gpt_neox":
        doc.update(rotary_pct=cfg.rotary_fraction, use_parallel_residual=cfg.parallel_residual)
        doc.pop("head_dim"), doc.pop("num_key_value_heads")
    if cfg.layer_types:
        if family in ("mistral", "mixtral", "phi3"):
            doc["sliding_window"] = cfg.sliding_window
        else:
            doc["layer_types"] = list(cfg.layer_types)
            doc["use_sliding_window"] = True
            doc["sliding_window"] = cfg.sliding_window
    elif family in ("mistral", "mixtral", "phi3"):
        doc["sliding_window"] = None
    elif family in (*_SLIDING_EVERY, "llama4_text"):
        doc["layer_types"] = ["full_attention"] * cfg.num_layers
    if cfg.attention_chunk_size:
        doc["attention_chunk_size"] = cfg.attention_chunk_size
    doc.update(_write_moe(cfg))
    if cfg.mla:
        doc.update(cfg.mla.__dict__)
        doc.pop("head_dim")
    return doc


def _write_moe(cfg: Any) -> dict[str, Any]:
    moe, family = cfg.moe, cfg.model_type
    if moe is None:
        return {}
    if family in ("mixtral", "gpt_oss"):
        return {"num_local_experts": moe.num_experts, "num_experts_per_tok": moe.experts_per_token,
                "intermediate_size": moe.intermediate_size}
    if family == "qwen3_moe":
        return {"num_experts": moe.num_experts, "num_experts_per_tok": moe.experts_per_token,
                "moe_intermediate_size": moe.intermediate_size, "decoder_sparse_step": 1,
                "mlp_only_layers": [i for i in range(cfg.num_layers) if i not in moe.layers]}
    if family == "llama4_text":
        return {"num_local_experts": moe.num_experts, "num_experts_per_tok": moe.experts_per_token,
                "intermediate_size": moe.intermediate_size, "moe_layers": list(moe.layers),
                "intermediate_size_mlp": cfg.intermediate_size}
    return {"n_routed_experts": moe.num_experts, "num_experts_per_tok": moe.experts_per_token,
            "moe_intermediate_size": moe.intermediate_size, "moe_layer_freq": 1,
            "n_shared_experts": moe.shared_intermediate_size // moe.intermediate_size,
            "first_k_dense_replace": min(moe.layers)}
