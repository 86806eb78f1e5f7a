"""What treeopt reads of a base model, torch-side: its dtype's name, device, dimensions,
architecture, attention implementation and context; its weights read from a directory, refused
when they cannot be read. Loading a model ready to decode is :mod:`treeopt.decoding.loading`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from treeopt.documents.dtypes import TORCH_NAMES, dtype_name, recorded_dtype
from treeopt.errors import FieldError, TreeoptError

if TYPE_CHECKING:
    from transformers import PreTrainedModel


def torch_dtype(name: str, *, source: str = "--dtype") -> torch.dtype:
    """The torch dtype of a name of :mod:`treeopt.documents.dtypes` (or of its alias); the one place
    names become torch dtypes. Unknown names raise a TreeoptError naming ``source``.

    >>> torch_dtype("bf16"), torch_dtype("float32")
    (torch.bfloat16, torch.float32)
    """
    return getattr(torch, TORCH_NAMES[dtype_name(name, source=source)])


def name_of_dtype(dtype: torch.dtype) -> str:
    """The name :mod:`treeopt.documents.dtypes` gives a torch dtype, as files record it (a dtype it
    does not name keeps torch's name).

    >>> name_of_dtype(torch.bfloat16), name_of_dtype(torch.int8)
    ('bf16', 'int8')
    """
    return str(recorded_dtype(str(dtype).removeprefix("torch.")))


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


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """``threads`` CPU threads for torch inside the block (None: as they are), the count it
    found after it, however it ends."""
    before = torch.get_num_threads()
    set_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
