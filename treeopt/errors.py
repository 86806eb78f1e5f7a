"""The one error family of treeopt: bad input that the user can fix."""

from __future__ import annotations

# top-level module -> the extra that installs it (pyproject.toml's optional dependencies)
EXTRAS: dict[str, str] = {
    "torch": "torch", "transformers": "torch", "tokenizers": "torch", "safetensors": "torch",
    "tqdm": "torch", "streamlit": "app", "plotly": "app", "networkx": "app",
}


class TreeoptError(ValueError):
    """Bad input: the message names the file, flag or value and says what would be valid."""


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
