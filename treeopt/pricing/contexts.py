"""The one rule for the context length a price or a tree is read at, among the contexts a step
profile or a selection holds: the only one; else the one asked for; no guess between several.

Layer: ``pricing``; may import ``errors``.
"""

from __future__ import annotations

from collections.abc import Sequence

from treeopt.errors import FieldError


def pick_context(available: Sequence[int], requested: int | None = None, *,
                 nearest: bool = False, where: str = "") -> int:
    """The context to read at: ``requested`` (with ``nearest``, the available one nearest it),
    or, with none requested, the only one available; several are refused as a
    :class:`~treeopt.errors.FieldError` of ``context``, which the CLI names as its flag
    (``where``: the file they come from).

    >>> pick_context([2048]), pick_context([128, 1024], 900), pick_context([128, 1024], 900,
    ...                                                                    nearest=True)
    (2048, 900, 1024)
    >>> try:
    ...     pick_context([128, 1024], where="lat.json")
    ... except FieldError as exc:
    ...     print(exc.named(lambda field: "--" + field))
    lat.json: contexts [128, 1024] to choose from; pick one with --context S
    """
    contexts = sorted(set(available))
    if requested is not None:
        return min(contexts, key=lambda s: abs(s - requested)) if nearest else requested
    if len(contexts) != 1:
        raise FieldError("context", f"contexts {contexts} to choose from; pick one with "
                                    "{context} S", inline=True, where=where)
    return contexts[0]


__all__ = ["pick_context"]
