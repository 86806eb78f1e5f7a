"""Resumable training: the whole state of a training loop in one file, written atomically.

A checkpoint holds the trained module's weights, the optimiser, the learning-rate schedule, the
generator that draws the batches and the history so far, tagged with the training's settings.
A loop that finds one continues from it and takes exactly the steps an uninterrupted run would
have taken (same machine, same thread count). Loading is ``weights_only``: tensors and plain
data, nothing else is unpickled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from treeopt.errors import TreeoptError
from treeopt.files import atomic_write


def due(done: int, steps: int, every: int | None = None) -> bool:
    """Whether a checkpoint is written after ``done`` of ``steps`` steps: every ``every`` steps
    (default a tenth of them), never after the last (the finished result is saved instead).

    >>> [d for d in range(1, 21) if due(d, 20)]
    [2, 4, 6, 8, 10, 12, 14, 16, 18]
    """
    return done % (every or max(1, steps // 10)) == 0 and done < steps


def save_training(path: Path, *, settings: str, module: torch.nn.Module,
                  optimizer: torch.optim.Optimizer, schedule: Any, generator: torch.Generator,
                  history: list[Any]) -> None:
    """Write the state after ``len(history)`` steps of the training ``settings`` names."""
    state = {"settings": settings, "module": module.state_dict(),
             "optimizer": optimizer.state_dict(), "schedule": schedule.state_dict(),
             "generator": generator.get_state(), "history": json.dumps(history)}
    atomic_write(path, lambda tmp: torch.save(state, tmp))


def restore_training(path: Path, *, settings: str, module: torch.nn.Module,
                     optimizer: torch.optim.Optimizer, schedule: Any,
                     generator: torch.Generator, what: str) -> list[Any]:
    """Load the checkpoint at ``path`` into the loop's objects; return the history (its length:
    the steps done). ``what`` names the training in errors."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 — torn bytes fail anywhere in the unpickler
        raise TreeoptError(f"{path}: not a checkpoint of a {what} ({type(exc).__name__}); "
                           "delete it to train from the start") from None
    if not isinstance(state, dict) or state.get("settings") != settings:
        raise TreeoptError(f"{path}: a checkpoint of another training, not of this {what}; "
                           "delete it to train from the start")
    module.load_state_dict(state["module"])
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    generator.set_state(state["generator"])
    return json.loads(state["history"])
