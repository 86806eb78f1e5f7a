"""Linear weights laid out for the few-row products of a live step on the CPU.

``F.linear(x, w)`` multiplies by ``wᵀ``. With ``w`` stored row-major (``[out, in]``, as every
checkpoint loads), the CPU's BLAS runs a transposed product; with ``w`` stored column-major (the
same ``[out, in]`` tensor with strides ``(1, out)``, so that ``wᵀ`` is contiguous) it runs the
plain one. For the 1 to a few dozen rows a decoding step multiplies, and a weight the rest of the
step has pushed out of the cache, MKL's plain product is up to twice as fast in float32 (most
for a single row, least for a dozen), and a drafter's vocabulary projection, cold after every
verify forward, gains most. bfloat16 gains nothing and float16 runs far slower column-major, so
only float32 weights move; on other devices nothing changes.

The values, shapes and parameters stay what they were (tied weights stay tied): only the memory
order changes, so no module's code changes and a checkpoint written afterwards is the same. The
products' last bits can differ from the row-major ones at 1 and 2 rows (as they already differ
between 1 row and 4); the decoder lays out the model and its drafter before it times or decodes
anything, so every step it runs, autoregressive or tree, uses the same layout.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn


def column_major(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``[out, in]`` with the same values, stored so that its transpose is contiguous.

    >>> w = torch.arange(6.0).reshape(2, 3)
    >>> c = column_major(w)
    >>> torch.equal(c, w), c.shape, c.stride(), c.t().is_contiguous()
    (True, torch.Size([2, 3]), (1, 2), True)
    """
    return weight.t().contiguous().t()


def lay_out_for_cpu(*modules: nn.Module | None) -> int:
    """Store every float32 CPU ``nn.Linear`` weight of ``modules`` column-major, in place
    (idempotent; a parameter shared by several modules moves once). Returns how many moved."""
    moved, seen = 0, set()
    for _, weight in cpu_linears(*modules):
        if id(weight) in seen:
            continue
        seen.add(id(weight))
        if weight.dtype == torch.float32 and not weight.t().is_contiguous():
            with torch.inference_mode(False):  # a normal tensor: the model may train later
                weight.data = column_major(weight.data)
            moved += 1
    return moved


def plain_linear(module: nn.Module) -> bool:
    """Whether ``module``'s forward is ``nn.Linear``'s own (a subclass may return more, as
    Llama 4's MoE router does): only such a forward may be replaced by another product."""
    return type(module).forward is nn.Linear.forward


def cpu_linears(*modules: nn.Module | None) -> Iterator[tuple[nn.Linear, torch.Tensor]]:
    """Every ``nn.Linear`` of ``modules`` whose weight is a CPU tensor, with that weight (a
    weight shared by several modules comes with each)."""
    for module in modules:
        if module is None:
            continue
        for sub in module.modules():
            weight = getattr(sub, "weight", None)
            if (isinstance(sub, nn.Linear) and isinstance(weight, torch.Tensor)
                    and weight.device.type == "cpu"):
                yield sub, weight
