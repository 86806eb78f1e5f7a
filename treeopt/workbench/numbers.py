"""How the app writes a number, one precision per quantity on every page and figure: a speed-up
two decimals and ``×``, an accepted length (E[L], tokens per step) two decimals, a share or an
accuracy one decimal and ``%``, a count with its noun in the right number. Rates read in whole
tokens/s and durations to three significant figures
(:func:`treeopt.workbench.style.format_seconds`).

The ``*_FORMAT`` strings are Python's and Plotly's (d3) format alike: ``f"{x:{SPEEDUP_FORMAT}}"``
in text, ``"%{y:" + SPEEDUP_FORMAT + "}×"`` in a hover template.
"""

from __future__ import annotations

SPEEDUP_FORMAT = ".2f"
ACCEPT_LENGTH_FORMAT = ".2f"
PERCENT_FORMAT = ".1f"


def speedup_text(speedup: float) -> str:
    """A speed-up as every page writes it.

    >>> speedup_text(1.867056), speedup_text(1.7405)
    ('1.87×', '1.74×')
    """
    return f"{speedup:{SPEEDUP_FORMAT}}×"


def accept_length_text(accept_length: float) -> str:
    """An accepted length (tokens per step) as every page writes it.

    >>> accept_length_text(3.469401), accept_length_text(6.8)
    ('3.47', '6.80')
    """
    return f"{accept_length:{ACCEPT_LENGTH_FORMAT}}"


def percent_text(share: float) -> str:
    """A share (0 … 1) in percent as every page writes it.

    >>> percent_text(0.4731), percent_text(1.0)
    ('47.3%', '100.0%')
    """
    return f"{share * 100:{PERCENT_FORMAT}}%"


def count_text(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` with its noun, singular for exactly one (``plural``: where adding ``s`` is
    wrong), thousands separated.

    >>> count_text(1, "node"), count_text(6, "node"), count_text(0, "node")
    ('1 node', '6 nodes', '0 nodes')
    >>> count_text(12345, "position"), count_text(2, "batch", "batches")
    ('12,345 positions', '2 batches')
    """
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"


def nodes_text(count: int) -> str:
    """A tree's size: ``1 node``, ``6 nodes``.

    >>> nodes_text(1), nodes_text(13)
    ('1 node', '13 nodes')
    """
    return count_text(count, "node")


__all__ = ["ACCEPT_LENGTH_FORMAT", "PERCENT_FORMAT", "SPEEDUP_FORMAT", "accept_length_text",
           "count_text", "nodes_text", "percent_text", "speedup_text"]
