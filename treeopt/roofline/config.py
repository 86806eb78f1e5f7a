"""Model shapes for the roofline and the profiler: a decoder config, from a preset or a file.

The fields mirror Hugging Face ``config.json`` (``hidden_size``, ``intermediate_size``,
``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
``vocab_size``, ``max_position_embeddings``), plus what sets the cost of the families that
:mod:`roofline.families` reads: per-layer attention kinds (full, sliding window, chunked),
grouped-query and multi-query attention, MLA's compressed KV (:class:`~treeopt.roofline.mla.MLA`),
mixture-of-experts layers (:class:`~treeopt.roofline.moe.MoE`), tied embeddings, non-gated MLPs
and parallel residuals. Named presets live in ``presets.json`` beside this module, each row a
``config.json`` with its source and model card.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any

from treeopt.errors import FieldError, TreeoptError
from treeopt.files import read_json
from treeopt.roofline.families import read_hf, write_hf
from treeopt.roofline.mla import MLA
from treeopt.roofline.moe import MoE

LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a decoder, as the roofline and the profiler need it.

    >>> cfg = preset("llama-3-8b")
    >>> cfg.num_kv_heads, cfg.head_dim, cfg.kv_dim
    (8, 128, 1024)
    >>> g = preset("gemma-3-27b")
    >>> g.layer_types.count("full_attention"), g.window("sliding_attention"), g.tie_embeddings
    (10, 1024, True)
    """

    name: str
    model_type: str
    hidden_size: int
    intermediate_size: int  # the dense layers' MLP width
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_positions: int | None = None
    attention_bias: bool = False
    layer_types: tuple[str, ...] = ()  # per layer, as config.json's layer_types; () = all full
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    tie_embeddings: bool = False
    gated_mlp: bool = True  # SwiGLU/GeGLU; False: fc_in → activation → fc_out (gpt2, gpt_neox)
    mlp_bias: bool = False
    norms_per_layer: int = 2  # 4 with sandwich norms (gemma2/3), 1 with one shared norm (cohere2)
    qk_norm: bool = False
    parallel_residual: bool = False  # x + attn(·) + mlp(·) (gpt_neox, cohere2)
    rotary_fraction: float = 1.0  # share of head_dim rotated; 0: learned positions (gpt2)
    position_embeddings: int = 0  # rows of a learned position table (gpt2)
    moe: MoE | None = None
    mla: MLA | None = None

    def __post_init__(self) -> None:
        if isinstance(self.moe, dict):
            object.__setattr__(self, "moe", MoE(**self.moe))
        if isinstance(self.mla, dict):
            object.__setattr__(self, "mla", MLA(**self.mla))
        object.__setattr__(self, "layer_types", tuple(self.layer_types))
        for name in ("hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "vocab_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TreeoptError(f"model config {self.name!r}: {name} must be a positive "
                                   f"integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise TreeoptError(f"model config {self.name!r}: num_attention_heads {self.num_heads} "
                               f"is not a multiple of num_key_value_heads {self.num_kv_heads}")
        self._check_layers()

    def _check_layers(self) -> None:
        if self.layer_types and len(self.layer_types) != self.num_layers:
            raise TreeoptError(f"model config {self.name!r}: {len(self.layer_types)} layer_types "
                               f"for {self.num_layers} layers")
        for kind in set(self.layer_types) - {"full_attention"}:
            if kind not in LAYER_TYPES:
                raise TreeoptError(f"model config {self.name!r}: layer type {kind!r} is not "
                                   f"modelled; the roofline knows {', '.join(LAYER_TYPES)}")
            window = self.window(kind)
            if not isinstance(window, int) or window < 1:
                raise TreeoptError(f"model config {self.name!r}: {kind} layers need a positive "
                                   f"{'sliding_window' if kind.startswith('sliding') else 'attention_chunk_size'}, "
                                   f"got {window!r}")
        if self.moe and any(not 0 <= i < self.num_layers for i in self.moe.layers):
            raise TreeoptError(f"model config {self.name!r}: MoE layer indices {self.moe.layers} "
                               f"out of range for {self.num_layers} layers")

    def window(self, kind: str) -> int | None:
        """The cached keys a layer of this kind reads at most (None: the whole context)."""
        return {"sliding_attention": self.sliding_window,
                "chunked_attention": self.attention_chunk_size}.get(kind)

    def attention_groups(self) -> dict[str, int]:
        """Layers per attention kind, full first: ``{"full_attention": 10, …}``."""
        kinds = self.layer_types or ("full_attention",) * self.num_layers
        return {k: kinds.count(k) for k in LAYER_TYPES if k in kinds}

    @property
    def q_dim(self) -> int:
        """Width of the query projection: heads × head_dim."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection: KV heads × head_dim."""
        return self.num_kv_heads * self.head_dim

    @property
    def dense_layers(self) -> int:
        """Layers with a dense MLP (the rest route to experts)."""
        return self.num_layers - (len(self.moe.layers) if self.moe else 0)

    @classmethod
    def from_hf(cls, doc: dict[str, Any], *, name: str, source: str) -> ModelConfig:
        """Read a Hugging Face ``config.json`` dict; ``source`` names it in errors."""
        return cls(name=name, **read_hf(doc, source=source))

    def to_hf(self) -> dict[str, Any]:
        """The Hugging Face config fields (for ``AutoConfig.for_model``)."""
        return write_hf(self)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def same_shape(self, other: ModelConfig) -> bool:
        """True when every field that sets latency matches (name and position limit may differ)."""
        a, b = self.to_json(), other.to_json()
        for doc in (a, b):
            doc.pop("name"), doc.pop("max_positions")
        return a == b

    def check_positions(self, context: int, tokens: int, *, flags: str = "--context/--tokens") -> None:
        """Raise unless ``context + tokens`` positions fit the model."""
        if self.max_positions is not None and context + tokens > self.max_positions:
            raise TreeoptError(
                f"{flags}: context {context} + {tokens} tree tokens exceeds {self.name}'s "
                f"max_position_embeddings {self.max_positions}")


FIELDS = tuple(f.name for f in fields(ModelConfig))


@functools.lru_cache(maxsize=1)
def _presets() -> dict[str, dict[str, Any]]:
    text = resources.files("treeopt.roofline").joinpath("presets.json").read_text(encoding="utf-8")
    return json.loads(text)["presets"]


def preset_names() -> list[str]:
    """Names of the built-in model presets."""
    return list(_presets())


def preset_row(name: str) -> dict[str, Any]:
    """A preset's row of ``presets.json``: its config.json fields, ``source`` and ``card``."""
    rows = _presets()
    key = name.strip().lower()
    if key not in rows:
        raise FieldError("preset", f"{{preset}}: unknown model preset {name!r}; known presets: "
                         f"{', '.join(rows)}", inline=True)
    return rows[key]


def preset(name: str) -> ModelConfig:
    """A built-in model preset by name (case-insensitive)."""
    key = name.strip().lower()
    return ModelConfig.from_hf(preset_row(key), name=key, source=f"preset {key}")


def load_config(path: str | os.PathLike[str]) -> ModelConfig:
    """A ``config.json`` file, or a model directory holding one."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    return ModelConfig.from_hf(read_json(p), name=p.parent.name if p.name == "config.json"
                               else p.stem, source=str(p))
