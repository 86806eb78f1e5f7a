"""The shipped demo: a small code model trained from scratch, its heads, traces and growths.

``treeopt.demo.load()`` returns everything loaded; :func:`demo_paths` only the file locations
(``treeopt demo build`` makes them; see docs/demo.md). Importing this package needs numpy only.

Layer: torch; may import the numpy layer, ``decoding``, ``drafters``, ``profiling`` and
``assets``.
"""

from treeopt.demo.layout import DEMO_FORMAT, KINDS, DemoPaths, demo_defaults, demo_paths
from treeopt.demo.load import Demo, load

__all__ = [
    "DEMO_FORMAT", "KINDS", "Demo", "DemoPaths", "demo_defaults", "demo_paths",
    "load",
]
