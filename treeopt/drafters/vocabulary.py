"""A drafter's logits over part of the vocabulary, for training against a top-k teacher.

Self-distillation scores every draft position against the base model's next-token distribution.
Over a real vocabulary (SmolLM2's 49,152 tokens) the full logits of four heads on a batch of 1,024
positions cost more than the rest of a training step together: the projection's products and
backward, the float32 softmax, its gradient. The teacher's mass sits on a few tokens per
position, so training keeps the teacher's ``k`` best tokens at each position
(:class:`~treeopt.drafters.training.TeacherCache`) and scores the drafter over the union of those
tokens in the batch: each position's candidates against every other position's, a softmax over a
few thousand tokens instead of the vocabulary (sampled softmax with in-batch candidates).

:class:`VocabularyView` gives a drafter that context: inside ``with drafter.vocabulary(tokens)``
its projections return logits for ``tokens`` only, in that order; outside, the full vocabulary
as always. Drafting and calibration never enter it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import nn


class VocabularyView:
    """Mixin for drafters whose logits come from a projection onto the vocabulary."""

    _vocabulary: torch.Tensor | None = None
    takes_vocabulary = True  # False where the logits come otherwise (EAGLE-3's own draft head)

    @contextmanager
    def vocabulary(self, tokens: torch.Tensor) -> Iterator[None]:
        """Within the block, logits are over ``tokens`` (``[c]`` ids) only."""
        object.__setattr__(self, "_vocabulary", tokens)
        try:
            yield
        finally:
            object.__setattr__(self, "_vocabulary", None)

    def projected(self, proj: nn.Module, z: torch.Tensor) -> torch.Tensor:
        """``proj``'s logits of ``z`` ``[..., d]`` in the weight's dtype: ``[..., V]``, or
        ``[..., c]`` inside :meth:`vocabulary`.

        The product is taken on ``z``'s rows as a plain ``[n, d]`` matrix. A head's hidden is
        often a transposed view, ``[b, 1, d]`` with a stride on the size-1 dimension; PyTorch
        still calls that contiguous, but its bfloat16 CPU kernel (torch 2.13) then takes a path
        about 50× slower per row (docs/notes/findings.md, 2026-12-03).

        >>> import torch
        >>> class P(VocabularyView):
        ...     pass
        >>> lin = torch.nn.Linear(3, 5, bias=False)
        >>> z = torch.randn(2, 3)
        >>> p = P()
        >>> with p.vocabulary(torch.tensor([4, 1])):
        ...     part = p.projected(lin, z)
        >>> bool(torch.equal(part, p.projected(lin, z)[:, [4, 1]]))
        True
        """
        weight = proj.weight
        x = z if z.dtype == weight.dtype else z.to(weight.dtype)
        rows = x.reshape(-1, x.shape[-1])  # plain rows: the docstring says why
        tokens = self._vocabulary
        if tokens is None:
            logits = proj(rows)
        else:
            bias = getattr(proj, "bias", None)
            logits = F.linear(rows, weight.index_select(0, tokens),
                              None if bias is None else bias.index_select(0, tokens))
        return logits.reshape(*x.shape[:-1], logits.shape[-1])


__all__ = ["VocabularyView"]
