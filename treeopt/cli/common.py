"""Helpers shared by the sub-command modules: output, list flags, progress."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from treeopt.errors import TreeoptError
from treeopt.files import dumps, write_json


def emit(obj: Any, out: str | None) -> int:
    """Write ``obj`` as JSON to ``out`` (atomically) or to stdout; return exit status 0."""
    if out:
        write_json(out, obj)
        print(f"wrote {out}", file=sys.stderr)
    else:
        sys.stdout.write(dumps(obj) + "\n")
    return 0


def add_out(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", metavar="FILE", help="write the JSON here instead of stdout")


def int_list(flag: str):
    """An argparse ``type`` for comma-separated positive integers, naming ``flag`` on error.

    >>> int_list("--batch")("1,2,8")
    [1, 2, 8]
    """

    def parse(text: str) -> list[int]:
        try:
            values = [int(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{flag}: expected comma-separated integers such as 1,2,4, got {text!r}") from None
        if not values or any(v <= 0 for v in values):
            raise argparse.ArgumentTypeError(f"{flag}: expected positive integers, got {text!r}")
        return values

    return parse


def add_model_flags(p: argparse.ArgumentParser) -> None:
    """Flags of a real model loaded from a local directory (``ModelSpec`` fields, one to one)."""
    p.add_argument("--model", required=True, metavar="DIR", help="local Hugging Face model")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, …")
    p.add_argument("--dtype", default="float32", help="float32, bfloat16, float16, float64")
    p.add_argument("--device-map", help="passed to from_pretrained (e.g. auto)")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads for torch (default: torch's choice; 1 is fastest for tiny "
                        "models and on busy machines)")


def load_model_from(args: argparse.Namespace) -> tuple[Any, Any]:
    """The model and tokenizer the :func:`add_model_flags` flags name."""
    from treeopt.decoding.models import ModelSpec, load_model

    return load_model(ModelSpec(path=args.model, device=args.device, dtype=args.dtype,
                                device_map=args.device_map,
                                trust_remote_code=args.trust_remote_code, threads=args.threads))


def add_live_flags(p: argparse.ArgumentParser) -> None:
    """The flags of a live measurement: a real model (:func:`add_model_flags`), its heads, the
    growth whose trees are measured, prompts and batch sizes."""
    add_model_flags(p)
    p.add_argument("--heads", required=True, metavar="DIR")
    p.add_argument("--growth", required=True, metavar="G.json")
    p.add_argument("--prompts", nargs="+", required=True, metavar="FILE")
    p.add_argument("--batch", type=int_list("--batch"), default=[1], metavar="LIST")


def counted(desc: str, unit: str) -> tuple[Any, Any]:
    """A progress bar and the ``progress(done, total)`` callback the library calls."""
    bar = progress(desc=desc, unit=unit)

    def report(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    return bar, report


def progress(iterable: Any = None, **kwargs: Any) -> Any:
    """A tqdm progress bar on stderr (disabled when stderr is not a terminal unless forced)."""
    from tqdm.auto import tqdm

    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("leave", False)
    return tqdm(iterable, **kwargs)


def require(condition: bool, message: str) -> None:
    """Raise a TreeoptError with ``message`` unless ``condition``."""
    if not condition:
        raise TreeoptError(message)
