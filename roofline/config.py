"""Model shapes for the roofline and the profiler: a Llama-family config, from a preset or a file.

The fields mirror Hugging Face ``config.json`` (``hidden_size``, ``intermediate_size``,
``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``,
``vocab_size``, ``max_position_embeddings``); grouped-query attention and an explicit ``head_dim``
are honoured. Named presets live in ``presets.json`` beside this module, one source per row.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from treeopt.errors import TreeoptError
from treeopt.files import read_json

LLAMA_FAMILY = ("llama", "mistral", "qwen2", "qwen3")
_REQUIRED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "vocab_size")


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-family decoder, as the roofline and the profiler need it.

    >>> cfg = preset("llama-3-8b")
    >>> cfg.num_kv_heads, cfg.head_dim, cfg.kv_dim
    (8, 128, 1024)
    """

    name: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_positions: int | None = None
    attention_bias: bool = False

    def __post_init__(self) -> None:
        for field in ("hidden_size", "intermediate_size", "num_layers", "num_heads",
                      "num_kv_heads", "head_dim", "vocab_size"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise TreeoptError(f"model config {self.name!r}: {field} must be a positive "
                                   f"integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise TreeoptError(f"model config {self.name!r}: num_attention_heads {self.num_heads} "
                               f"is not a multiple of num_key_value_heads {self.num_kv_heads}")

    @property
    def q_dim(self) -> int:
        """Width of the query projection: heads × head_dim."""
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the key (and of the value) projection: KV heads × head_dim."""
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_hf(cls, doc: dict[str, Any], *, name: str, source: str) -> ModelConfig:
        """Read a Hugging Face ``config.json`` dict; ``source`` names it in errors."""
        if not isinstance(doc, dict):
            raise TreeoptError(f"{source}: expected a JSON object (a config.json)")
        model_type = str(doc.get("model_type", "llama"))
        if model_type not in LLAMA_FAMILY:
            raise TreeoptError(f"{source}: model_type {model_type!r} is not supported; the "
                               f"roofline models the Llama family: {', '.join(LLAMA_FAMILY)}")
        missing = [f for f in _REQUIRED if f not in doc]
        if missing:
            raise TreeoptError(f"{source}: missing field(s) {', '.join(missing)} "
                               f"(need {', '.join(_REQUIRED)})")
        heads = doc["num_attention_heads"]
        hidden = doc["hidden_size"]
        head_dim = doc.get("head_dim") or (hidden // heads if isinstance(hidden, int)
                                           and isinstance(heads, int) and heads else 0)
        return cls(
            name=name, model_type=model_type, hidden_size=hidden,
            intermediate_size=doc["intermediate_size"], num_layers=doc["num_hidden_layers"],
            num_heads=heads, num_kv_heads=doc.get("num_key_value_heads") or heads,
            head_dim=head_dim, vocab_size=doc["vocab_size"],
            max_positions=doc.get("max_position_embeddings"),
            attention_bias=bool(doc.get("attention_bias", model_type == "qwen2")),
        )

    def to_hf(self) -> dict[str, Any]:
        """The Hugging Face config fields (for ``AutoConfig.for_model``)."""
        doc: dict[str, Any] = {
            "model_type": self.model_type, "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size, "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim, "vocab_size": self.vocab_size,
        }
        if self.max_positions is not None:
            doc["max_position_embeddings"] = self.max_positions
        if self.model_type == "llama":
            doc["attention_bias"] = self.attention_bias
        return doc

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


@functools.lru_cache(maxsize=1)
def _presets() -> dict[str, dict[str, Any]]:
    text = resources.files("roofline").joinpath("presets.json").read_text(encoding="utf-8")
    return json.loads(text)["presets"]


def preset_names() -> list[str]:
    """Names of the built-in model presets."""
    return list(_presets())


def preset(name: str) -> ModelConfig:
    """A built-in model preset by name (case-insensitive)."""
    rows = _presets()
    key = name.strip().lower()
    if key not in rows:
        raise TreeoptError(f"--preset: unknown model preset {name!r}; known presets: "
                           f"{', '.join(rows)}")
    return ModelConfig.from_hf(rows[key], name=key, source=f"preset {key}")


def load_config(path: str | os.PathLike[str]) -> ModelConfig:
    """A ``config.json`` file, or a model directory holding one."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    return ModelConfig.from_hf(read_json(p), name=p.parent.name if p.name == "config.json"
                               else p.stem, source=str(p))
