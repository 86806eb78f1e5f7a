"""The flags the hardware sub-commands share, and their readers: the model's shape (``--model``,
``--config``, ``--preset``), the device, the roofline's precision and the batch × context ×
tokens grid."""

from __future__ import annotations

import argparse
from typing import Any

from treeopt.cli.common import DTYPE_HELP, dtype_flag, int_list, require


def names(text: str) -> list[str]:
    """A comma-separated list, blanks dropped.

    >>> names("bf16, fp32,,")
    ['bf16', 'fp32']
    """
    return [t.strip() for t in text.split(",") if t.strip()]


def add_model_shape(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--model``, ``--config`` or ``--preset``: one of them names the model's shape."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", metavar="DIR", help="a local model directory (its config.json)")
    g.add_argument("--config", metavar="FILE", help="a bare config.json (random weights)")
    g.add_argument("--preset", metavar="NAME", help="a named model preset (random weights)")


def add_device(p: argparse.ArgumentParser) -> None:
    """``--device`` and ``--dtype`` of a measurement."""
    p.add_argument("--device", default="cpu", metavar="DEVICE",
                   help="cpu or cuda[:N] (default cpu)")
    p.add_argument("--dtype", type=dtype_flag, metavar="DTYPE",
                   help=DTYPE_HELP + "; default bf16 on CUDA, fp32 on CPU")


def add_precision(p: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--hardware`` and the dtypes and attention form a roofline prices with."""
    p.add_argument("--hardware", required=required, metavar="NAME|FILE",
                   help="a row of treeopt/roofline/gpus.csv or a hardware JSON"
                        + (" (required)" if required else ""))
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"),
                   help="compute dtype (default bf16)")
    p.add_argument("--weight-dtype", metavar="DT", help="weights' dtype (default: --dtype)")
    p.add_argument("--kv-dtype", metavar="DT", help="KV cache dtype (default: --dtype)")
    p.add_argument("--attention", choices=("fused", "eager"), default="fused",
                   help="fused: FlashAttention-like kernels, scores stay on chip; eager: adds the "
                        "score, mask and probability traffic (default %(default)s)")


def add_grid(p: argparse.ArgumentParser, *, tokens: bool) -> None:
    """``--batch``, ``--context`` and, with ``tokens``, ``--tokens``: the grid of points."""
    p.add_argument("--batch", type=int_list("--batch"), metavar="LIST",
                   help="comma-separated batch sizes (required)")
    p.add_argument("--context", type=int_list("--context"), metavar="LIST",
                   help="comma-separated context lengths: tokens already cached (required)")
    if tokens:
        p.add_argument("--tokens", type=int_list("--tokens"), metavar="LIST",
                       help="comma-separated tree tokens q = nodes + 1 (required)")


def model_shape(args: argparse.Namespace, *, need: bool = True) -> Any:
    """The model config the shape flags name (None where none is given and ``need`` is false)."""
    from treeopt.roofline.config import load_config, preset

    if args.preset:
        return preset(args.preset)
    if args.config or args.model:
        return load_config(args.config or args.model)
    require(not need, "give the model: --model DIR, --config FILE or --preset NAME")
    return None


def need_grid(args: argparse.Namespace, *flags: str) -> None:
    """Refuse a missing grid flag (each of ``flags``, named without its dashes)."""
    for name in flags:
        require(getattr(args, name) is not None, f"--{name} is required (comma-separated list)")


def measured_dtype(args: argparse.Namespace) -> str:
    """``--dtype``, else bf16 on a CUDA ``--device`` and fp32 elsewhere."""
    return args.dtype or ("bf16" if str(getattr(args, "device", "")).startswith("cuda") else "fp32")


def precision(args: argparse.Namespace) -> Any:
    """The roofline's :class:`~treeopt.roofline.model.Precision` of the precision flags."""
    from treeopt.roofline.model import Precision

    return Precision.from_dtypes(args.dtype or "bf16", weight=args.weight_dtype, kv=args.kv_dtype)
