"""The one vocabulary of dtypes: the names every ``--dtype`` flag takes and every file records.

``fp32``, ``bf16``, ``fp16`` and ``fp64`` name the dtypes a model runs in (the roofline's
precisions and the hardware table's peaks use the same names). Torch's own names — ``float32``,
``bfloat16``, ``float16``, ``float64`` — are read as aliases, so files that record them still
load; :func:`treeopt.decoding.models.torch_dtype` maps a name to the torch dtype.
"""

from __future__ import annotations

from treeopt.errors import TreeoptError

DTYPES: tuple[str, ...] = ("fp32", "bf16", "fp16", "fp64")
TORCH_NAMES: dict[str, str] = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16",
                               "fp64": "float64"}  # each dtype's name in torch
ALIASES: dict[str, str] = {torch_name: name for name, torch_name in TORCH_NAMES.items()}
AUTO_DTYPE = "auto"  # a demo build's --dtype: the faster of bf16 and fp32 here, measured


def dtype_name(name: str, *, source: str = "--dtype") -> str:
    """The dtype ``name`` in the one vocabulary (an alias becomes its name); anything else is
    refused, naming ``source`` and the valid names.

    >>> dtype_name("bfloat16"), dtype_name("fp32")
    ('bf16', 'fp32')
    >>> dtype_name("half")
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: --dtype 'half' is unknown; expected one of fp32, bf16, fp16, fp64 (or float32, bfloat16, float16, float64)
    """
    if name in TORCH_NAMES:
        return name
    if name in ALIASES:
        return ALIASES[name]
    raise TreeoptError(f"{source} {name!r} is unknown; expected one of {', '.join(DTYPES)} "
                       f"(or {', '.join(ALIASES)})")


def recorded_dtype(name: str | None) -> str | None:
    """A dtype as a file records it, read into the one vocabulary: an alias becomes its name;
    any other name (a dtype the vocabulary leaves out), or none, is kept as it is.

    >>> recorded_dtype("float32"), recorded_dtype("fp32"), recorded_dtype("int8")
    ('fp32', 'fp32', 'int8')
    """
    return ALIASES.get(name, name) if name is not None else None


__all__ = ["AUTO_DTYPE", "ALIASES", "DTYPES", "TORCH_NAMES", "dtype_name", "recorded_dtype"]
