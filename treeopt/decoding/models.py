"""Base models and their heads: loading from a local directory, device and dtype, shape checks."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from treeopt.decoding.attention import attention_for
from treeopt.documents.dtypes import TORCH_NAMES, dtype_name, recorded_dtype
from treeopt.errors import FieldError, TreeoptError

if TYPE_CHECKING:
    from transformers import PreTrainedModel


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


def torch_dtype(name: str, *, source: str = "--dtype") -> torch.dtype:
    """The torch dtype of a name of :mod:`treeopt.documents.dtypes` (or of its alias); the one place
    names become torch dtypes. Unknown names raise a TreeoptError naming ``source``.

    >>> torch_dtype("bf16"), torch_dtype("float32")
    (torch.bfloat16, torch.float32)
    """
    return getattr(torch, TORCH_NAMES[dtype_name(name, source=source)])


def name_of_dtype(dtype: torch.dtype) -> str:
    """The name :mod:`treeopt.documents.dtypes` gives a torch dtype, as files record it (a dtype it does
    not name keeps torch's name).

    >>> name_of_dtype(torch.bfloat16), name_of_dtype(torch.int8)
    ('bf16', 'int8')
    """
    return str(recorded_dtype(str(dtype).removeprefix("torch.")))


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


def check_decodable(model: PreTrainedModel) -> None:
    """Refuse, before any long job, a model treeopt cannot decode as it decodes itself: layers
    of another kind than attention, or a tree step whose logits differ from the model's own
    forward past every window (:func:`~treeopt.decoding.probe.check_tree_support`)."""
    from treeopt.decoding.tree_forward import verifier

    with torch.inference_mode():
        verifier(model, tree=True)


def from_pretrained(path: str, *, flag: str = "--model", **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_pretrained(path)``; weights that cannot be read — truncated,
    or a pickle holding more than tensors (refused, never run) — raise a TreeoptError."""
    import pickle

    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except pickle.UnpicklingError as exc:
        why = str(exc).partition("WeightsUnpickler error:")[2].split(". ")[0].strip()
        raise TreeoptError(f"{flag} {path}: refused to unpickle the weights, which hold more "
                           f"than tensors ({why or 'weights_only=True failed'})") from None
    except SafetensorError as exc:
        raise TreeoptError(f"{flag} {path}: unreadable safetensors weights ({exc}; truncated or "
                           "not a safetensors file?)") from None
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise TreeoptError(f"{flag} {path}: cannot load ({exc})") from None


def check_device(device: str) -> None:
    """Raise unless ``device`` names a torch device this machine has.

    >>> check_device("cpu")
    """
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise FieldError("device", f"{device!r} is not a device; expected cpu, cuda or "
                         "cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise FieldError("device", f"{device}: CUDA is not available on this machine")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise FieldError("device", f"{device}: this machine has "
                             f"{torch.cuda.device_count()} CUDA devices")
    elif dev.type not in ("cpu", "meta"):
        available = getattr(getattr(torch.backends, dev.type, None), "is_available", None)
        if available is None or not available():
            raise FieldError("device", f"{device}: not available on this machine")


def set_threads(threads: int | None) -> None:
    """Use ``threads`` CPU threads for torch (None: leave torch's choice). Tiny models decode
    fastest on one thread, and a busy machine oversubscribed by OpenMP slows down many-fold."""
    if threads is None:
        return
    if threads < 1:
        raise FieldError("threads", f"must be ≥ 1, got {threads}")
    torch.set_num_threads(threads)


def attention_of(model: PreTrainedModel) -> str:
    """The attention implementation the model runs (``treeopt_exact``, ``sdpa``, …)."""
    return str(getattr(model.config, "_attn_implementation", None) or "eager")


def architecture(model: PreTrainedModel) -> str:
    """The architecture name a user would recognise (``LlamaForCausalLM``)."""
    archs = getattr(getattr(model, "config", None), "architectures", None)
    return archs[0] if archs else type(model).__name__


def model_device(model: nn.Module) -> torch.device:
    """Device of the model's input embeddings (where input ids must go)."""
    return model.get_input_embeddings().weight.device


def model_dims(model: PreTrainedModel) -> tuple[int, int]:
    """``(hidden_size, vocab_size)`` read from the LM head's weight."""
    vocab, hidden = model.get_output_embeddings().weight.shape
    return int(hidden), int(vocab)


def context_length(model: PreTrainedModel) -> int | None:
    """Longest sequence the model supports (``max_position_embeddings``), None if unknown."""
    n = getattr(model.config, "max_position_embeddings", None)
    return int(n) if n else None


def check_context(model: PreTrainedModel, length: int, *, what: str) -> None:
    """Raise when ``length`` tokens do not fit the model's context."""
    limit = context_length(model)
    if limit is not None and length > limit:
        raise TreeoptError(f"{what} needs {length} positions but the model's context is {limit} "
                           f"(max_position_embeddings)")
