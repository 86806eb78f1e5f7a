"""How a benchmark script ends: its exit status, or a refusal of its input (a demo that is not
there, weights not fetched) in one line naming the problem, exit status 2, no traceback."""

from __future__ import annotations

import sys
from collections.abc import Callable


def run(main: Callable[[], int | None]) -> None:
    """Run a benchmark's ``main`` and exit with its status (2 on a :class:`TreeoptError`)."""
    from treeopt.errors import TreeoptError

    try:
        status = main()
    except TreeoptError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(status)
