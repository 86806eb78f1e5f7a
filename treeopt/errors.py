"""The one error family of treeopt: bad input that the user can fix."""

from __future__ import annotations


class TreeoptError(ValueError):
    """Bad input: the message names the file, flag or value and says what would be valid."""
