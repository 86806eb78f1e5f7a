"""The one error family of treeopt: bad input that the user can fix.

Layer: numpy, a leaf; may import nothing of treeopt.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# top-level module -> the extra that installs it (pyproject.toml's optional dependencies)
EXTRAS: dict[str, str] = {
    "torch": "torch", "transformers": "torch", "tokenizers": "torch", "safetensors": "torch",
    "tqdm": "torch", "gguf": "gguf", "accelerate": "gguf", "streamlit": "app", "plotly": "app", "networkx": "app",
}


class TreeoptError(ValueError):
    """Bad input: the message names the file, field or value and says what would be valid.

    Library messages speak the library's terms (a field or parameter, never a CLI flag); a
    value at fault in one field is a :class:`FieldError`, which a front end renames.
    """


# how a rule refers to a field other than the one at fault (or to it, inline): ``{name}``
FIELD_REF = re.compile(r"\{([a-z][a-z0-9_]*)\}")


class FieldError(TreeoptError):
    """The value of one field is invalid: ``field`` names it in the library's terms (a dataclass
    field or a parameter, such as ``top_p``) and ``rule`` says what would be valid, referring to
    any other field as ``{name}``. ``str()`` is ``f"{field} {rule}"`` with each ``{name}``
    written ``name``; when ``inline``, ``rule`` alone, which refers to ``field`` itself as
    ``{field}``; after ``f"{where}: "`` when ``where`` (a file) is given. :meth:`named` writes
    each field another way, as the CLI does with its flags.

    >>> str(FieldError("top_p", "must be in (0, 1], got 2"))
    'top_p must be in (0, 1], got 2'
    >>> FieldError("mode", "sample needs {temperature} > 0, got 0").named(
    ...     lambda field: "--" + field.replace("_", "-"))
    '--mode sample needs --temperature > 0, got 0'
    >>> str(FieldError("batch", "a tree per batch size [1, 4]; pick one with {batch} B",
    ...                inline=True).at("s.json"))
    's.json: a tree per batch size [1, 4]; pick one with batch B'
    """

    def __init__(self, field: str, rule: str, *, inline: bool = False, where: str = "") -> None:
        self.field = field
        self.rule = rule
        self.inline = inline
        self.where = where
        super().__init__(self.named(str))

    @property
    def fields(self) -> tuple[str, ...]:
        """Every field the message names: ``field``, then those ``rule`` refers to."""
        return tuple(dict.fromkeys([self.field, *FIELD_REF.findall(self.rule)]))

    def named(self, name: Callable[[str], str]) -> str:
        """The message with each field ``f`` written as ``name(f)``."""
        rule = FIELD_REF.sub(lambda m: name(m.group(1)), self.rule)
        message = rule if self.inline else f"{name(self.field)} {rule}"
        return f"{self.where}: {message}" if self.where else message

    def at(self, where: str) -> FieldError:
        """This error, said of ``where`` (the file it is about)."""
        return FieldError(self.field, self.rule, inline=self.inline,
                          where=f"{where}: {self.where}" if self.where else where)


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
