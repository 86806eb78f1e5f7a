"""Hardware sub-commands: ``profile`` (and ``profile device``, ``profile step``), ``roofline``,
``select``, ``choose-drafter``, registered in that order. The measuring commands live in
:mod:`~treeopt.cli.measure_commands`, the pricing ones in :mod:`~treeopt.cli.price_commands`,
the flags they share in :mod:`~treeopt.cli.hardware_flags`."""

from __future__ import annotations

import argparse

from treeopt.cli.measure_commands import register_profile
from treeopt.cli.price_commands import (
    register_choose_drafter,
    register_roofline,
    register_select,
)


def register(sub: argparse._SubParsersAction) -> None:
    register_profile(sub)
    register_roofline(sub)
    register_select(sub)
    register_choose_drafter(sub)
