"""A base model loaded from a local Hugging Face directory, ready to decode: in eval mode and
frozen, on its device and dtype, with treeopt's exact attention where it applies, and refused
before any long job when treeopt cannot decode it as it decodes itself
(:func:`~treeopt.decoding.probe.check_decodable`); with its tokenizer."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from treeopt.decoding.attention import attention_for
from treeopt.decoding.models import check_device, from_pretrained, set_threads, torch_dtype
from treeopt.decoding.probe import check_decodable
from treeopt.errors import FieldError, TreeoptError


@dataclass(frozen=True)
class ModelSpec:
    """Where and how to load a base model; CLI flags map one-to-one onto these fields."""

    path: str
    device: str = "cpu"
    dtype: str = "fp32"  # a name of treeopt.documents.dtypes (torch's names are aliases)
    device_map: str | None = None
    trust_remote_code: bool = False
    threads: int | None = None  # CPU threads for torch (None: torch's own choice)
    attention: str = "auto"  # see treeopt.decoding.attention.attention_for


def load_model(spec: ModelSpec) -> tuple[Any, Any]:
    """The causal LM (eval mode, frozen) and its tokenizer (None when the directory has none)."""
    from transformers import AutoTokenizer

    set_threads(spec.threads)
    path = Path(spec.path)
    if not (path / "config.json").exists():
        raise TreeoptError(f"the model directory {spec.path} has no config.json (a local Hugging "
                           f"Face model directory is expected)")
    if not spec.device_map:
        check_device(spec.device)
    dtype = torch_dtype(spec.dtype)
    kwargs: dict[str, Any] = {"dtype": dtype, "local_files_only": True,
                              "trust_remote_code": spec.trust_remote_code}
    if spec.device_map:
        kwargs["device_map"] = spec.device_map
    attention = attention_for(spec.attention, dtype)
    if attention is None:
        model = from_pretrained(str(path), **kwargs)
    else:
        try:
            model = from_pretrained(str(path), attn_implementation=attention, **kwargs)
        except TreeoptError as exc:
            if spec.attention != "auto":
                raise FieldError("attention", f"{spec.attention}: {exc}") from None
            warnings.warn(f"--model {spec.path}: the model does not take treeopt's exact "
                          f"attention, so 16-bit tree decoding may differ from autoregressive "
                          f"decoding in rounding ({exc})", stacklevel=2)
            model = from_pretrained(str(path), **kwargs)
    if not spec.device_map:
        model.to(spec.device)
    model.eval().requires_grad_(False)
    check_decodable(model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True,
                                                  trust_remote_code=spec.trust_remote_code)
    except (OSError, ValueError, KeyError, TypeError):
        tokenizer = None
    return model, tokenizer
