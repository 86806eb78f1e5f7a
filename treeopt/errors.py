"""The one error family of treeopt: bad input that the user can fix."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

# top-level module -> the extra that installs it (pyproject.toml's optional dependencies)
EXTRAS: dict[str, str] = {
    "torch": "torch", "transformers": "torch", "tokenizers": "torch", "safetensors": "torch",
    "tqdm": "torch", "streamlit": "app", "plotly": "app", "networkx": "app",
}


class TreeoptError(ValueError):
    """Bad input: the message names the file, field or value and says what would be valid.

    Library messages speak the library's terms (a field or parameter, never a CLI flag); a
    value at fault in one field is a :class:`FieldError`, which a front end renames.
    """


class FieldError(TreeoptError):
    """The value of one field is invalid: ``field`` names it in the library's terms (a dataclass
    field or a parameter, such as ``top_p``), ``rule`` says what would be valid, and ``others``
    lists the other fields that ``rule`` names by their plain names. ``str()`` is
    ``f"{field} {rule}"``; :meth:`named` renames every field, as the CLI does with its flags.

    >>> exc = FieldError("top_p", "must be in (0, 1], got 2")
    >>> str(exc)
    'top_p must be in (0, 1], got 2'
    >>> FieldError("mode", "sample needs temperature > 0, got 0", others=("temperature",)).named(
    ...     lambda field: "--" + field.replace("_", "-"))
    '--mode sample needs --temperature > 0, got 0'
    """

    def __init__(self, field: str, rule: str, *, others: Iterable[str] = ()) -> None:
        self.field = field
        self.rule = rule
        self.others = tuple(others)
        super().__init__(self.named(str))

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field the message names: ``field``, then ``others``."""
        return (self.field, *self.others)

    def named(self, name: Callable[[str], str]) -> str:
        """The message with each field ``f`` written as ``name(f)``."""
        rule = self.rule
        for other in self.others:
            rule = re.sub(rf"(?<![\w-]){re.escape(other)}(?![\w-])",
                          lambda _, written=name(other): written, rule)
        return f"{name(self.field)} {rule}"


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """What to install when ``exc`` is a module of an optional extra that is not installed, as
    one line; None for any other missing module (a fault of ours, not the user's).

    >>> missing_extra(ModuleNotFoundError("No module named 'torch'", name="torch"))
    "needs torch, which is not installed: pip install 'treeopt[torch]'"
    >>> missing_extra(ModuleNotFoundError("No module named 'plotly.colors'", name="plotly.colors"))
    "needs plotly, which is not installed: pip install 'treeopt[app]'"
    >>> missing_extra(ModuleNotFoundError("No module named 'yaml'", name="yaml")) is None
    True
    """
    module = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(module)
    if extra is None:
        return None
    return f"needs {module}, which is not installed: pip install 'treeopt[{extra}]'"
