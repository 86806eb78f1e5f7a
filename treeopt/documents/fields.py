"""Typed reads of a JSON document's fields, for the documents' ``from_json``: a missing field, a
value of the wrong kind, NaN or infinity is one :class:`~treeopt.errors.TreeoptError` naming
where it is (``where``: the file, and the part of it) and what would be valid.

>>> integer({"batch": 4}, "batch", "p.json: records[0]", minimum=1)
4
>>> number({"ms": float("nan")}, "ms", "p.json: records[0]")
Traceback (most recent call last):
...
treeopt.errors.TreeoptError: p.json: records[0]: 'ms' must be a finite number, got nan
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

from treeopt.errors import TreeoptError

T = TypeVar("T")


def mapping(doc: Any, where: str) -> dict[str, Any]:
    """``doc`` itself, when it is a JSON object."""
    if not isinstance(doc, dict):
        raise TreeoptError(f"{where}: expected an object, got {_short(doc)}")
    return doc


def listed(doc: dict[str, Any], key: str, where: str) -> list[Any]:
    """The list at ``key``."""
    value = _get(doc, key, where)
    if not isinstance(value, list):
        raise TreeoptError(f"{where}: '{key}' must be a list, got {_short(value)}")
    return value


def integer(doc: dict[str, Any], key: str, where: str, *, minimum: int | None = None) -> int:
    """The integer at ``key`` (not a bool, not a float), at least ``minimum``."""
    value = _get(doc, key, where)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TreeoptError(f"{where}: '{key}' must be an integer, got {_short(value)}")
    if minimum is not None and value < minimum:
        raise TreeoptError(f"{where}: '{key}' must be ≥ {minimum}, got {value}")
    return value


def number(doc: dict[str, Any], key: str, where: str, *, minimum: float | None = None,
           positive: bool = False) -> float:
    """The finite number at ``key``, at least ``minimum`` (above 0 when ``positive``)."""
    value = _get(doc, key, where)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise TreeoptError(f"{where}: '{key}' must be a finite number, got {_short(value)}")
    if positive and not value > 0:
        raise TreeoptError(f"{where}: '{key}' must be positive, got {value}")
    if minimum is not None and value < minimum:
        raise TreeoptError(f"{where}: '{key}' must be ≥ {minimum}, got {value}")
    return float(value)


def text(doc: dict[str, Any], key: str, where: str) -> str:
    """The string at ``key``."""
    value = _get(doc, key, where)
    if not isinstance(value, str):
        raise TreeoptError(f"{where}: '{key}' must be a string, got {_short(value)}")
    return value


def flag(doc: dict[str, Any], key: str, where: str) -> bool:
    """The boolean at ``key``."""
    value = _get(doc, key, where)
    if not isinstance(value, bool):
        raise TreeoptError(f"{where}: '{key}' must be true or false, got {_short(value)}")
    return value


def optional(read: Callable[..., T], doc: dict[str, Any], key: str, where: str,
             **checks: Any) -> T | None:
    """``read(doc, key, where, **checks)``, or None where ``key`` is absent or null.

    >>> optional(integer, {"rounds": None}, "rounds", "p.json"), optional(integer, {}, "se", "p")
    (None, None)
    """
    return None if doc.get(key) is None else read(doc, key, where, **checks)


def integers(doc: dict[str, Any], key: str, where: str, *, minimum: int | None = None,
             ) -> tuple[int, ...]:
    """The list of integers at ``key``, each at least ``minimum``."""
    values = listed(doc, key, where)
    return tuple(integer({f"{key}[{i}]": v}, f"{key}[{i}]", where, minimum=minimum)
                 for i, v in enumerate(values))


def numbers(doc: dict[str, Any], key: str, where: str, *, positive: bool = False,
            nullable: bool = False) -> tuple[float | None, ...]:
    """The list of finite numbers at ``key`` (positive when ``positive``; with ``nullable``,
    null entries read as None)."""
    values = listed(doc, key, where)
    return tuple(None if v is None and nullable else
                 number({f"{key}[{i}]": v}, f"{key}[{i}]", where, positive=positive)
                 for i, v in enumerate(values))


def all_finite(value: Any, where: str, path: str = "") -> None:
    """Raise naming the first number in ``value`` (nested objects and lists) that is NaN or
    infinite.

    >>> all_finite({"a": [1.0, float("inf")]}, "r.json")
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: r.json: 'a[1]' must be a finite number, got inf
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise TreeoptError(f"{where}: '{path}' must be a finite number, got {value}")
    if isinstance(value, dict):
        for k, v in value.items():
            all_finite(v, where, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            all_finite(v, where, f"{path}[{i}]")


def _get(doc: dict[str, Any], key: str, where: str) -> Any:
    if key not in doc:
        raise TreeoptError(f"{where}: missing '{key}'")
    return doc[key]


def _short(value: Any) -> str:
    """``value`` as the message quotes it: its repr, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["all_finite", "flag", "integer", "integers", "listed", "mapping", "number", "numbers", "optional",
           "text"]
