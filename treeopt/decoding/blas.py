"""Which BLAS library runs a verify forward's matrix products on CUDA: the faster one, measured.

cuBLAS's heuristics can pick a kernel many times slower than cuBLASLt's for the few rows a tree
step multiplies (in float32, for 8 to 16 rows on an H200, about 15 times), and the other way
round for a few more rows. So for each number of rows a forward multiplies, both libraries are
timed once on the model's own projection shapes, and the faster runs every forward of that many
rows (and is what a CUDA graph of it records); torch's process-wide preference is restored after
each forward. On other devices nothing changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

LIBRARIES = ("cublas", "cublaslt")

Timer = Callable[[str, int], float]  # (library, rows) → seconds for the model's projections


@dataclass(eq=False)
class BlasChoice:
    """The faster library per number of rows, measured once each by ``timer`` (see
    :func:`blas_choice`).

    >>> times = {("cublas", 9): 53.0, ("cublaslt", 9): 3.6, ("cublas", 17): 12.0,
    ...          ("cublaslt", 17): 15.0}
    >>> calls = []
    >>> choice = BlasChoice(lambda lib, rows: calls.append(rows) or times[lib, rows])
    >>> choice.library(9), choice.library(17), choice.library(9), len(calls)
    ('cublaslt', 'cublas', 'cublaslt', 4)
    """

    timer: Timer
    chosen: dict[int, str] = field(default_factory=dict)

    def library(self, rows: int) -> str:
        """The faster library for products of ``rows`` rows (measured the first time)."""
        if rows not in self.chosen:
            self.chosen[rows] = min(LIBRARIES, key=lambda lib: self.timer(lib, rows))
        return self.chosen[rows]

    def use(self, rows: int) -> AbstractContextManager[None]:
        """Run the block with the faster library for ``rows`` rows, then restore torch's
        preference as it was."""
        return preferred(self.library(rows))


@contextmanager
def preferred(library: str) -> Iterator[None]:
    """torch's preferred BLAS library set to ``library`` inside the block, restored after."""
    previous = torch.backends.cuda.preferred_blas_library()
    torch.backends.cuda.preferred_blas_library(library)
    try:
        yield
    finally:
        torch.backends.cuda.preferred_blas_library(previous)


def blas_choice(model: nn.Module, *, repeats: int = 20) -> BlasChoice | None:
    """A :class:`BlasChoice` timing ``model``'s own linear layers (one of each shape, without
    bias) on its CUDA device; None elsewhere (CPU, ROCm: nothing to choose)."""
    weight = next(model.parameters())
    if weight.device.type != "cuda" or torch.version.hip is not None:
        return None
    by_shape: dict[tuple[int, ...], torch.Tensor] = {}  # one of the model's weights per shape
    for module in model.modules():
        w = getattr(module, "weight", None)
        if (isinstance(module, nn.Linear) and isinstance(w, torch.Tensor) and w.dim() == 2
                and w.is_floating_point() and w.device == weight.device):
            by_shape.setdefault(tuple(w.shape), w)
    weights = list(by_shape.values())
    if not weights:
        return None

    def timer(library: str, rows: int) -> float:
        """GPU seconds of ``repeats`` rounds of the model's projections, replayed as one CUDA
        graph: kernels back to back, as a compiled step runs them (launches timed one by one
        would hide a slow kernel behind the launch cost)."""
        inputs = [torch.ones(rows, w.shape[1], dtype=w.dtype, device=w.device) for w in weights]
        with preferred(library), torch.inference_mode():
            for x, w in zip(inputs, weights, strict=True):  # warm: first calls load kernels
                nn.functional.linear(x, w)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(repeats):
                    for x, w in zip(inputs, weights, strict=True):
                        nn.functional.linear(x, w)
            start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3

    return BlasChoice(timer)
