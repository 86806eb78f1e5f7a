"""A run's rows and the prompts they decode, on the host: which prompt each row holds, each
prompt's tokens and accepted lengths so far, and which rows still run.

A row stops when its prompt has its budget of new tokens or has just emitted EOS; the tokens a
step emits past either are dropped from the output (:meth:`BatchRows.tokens`), and from the
step's accepted length: a step counts the tokens it keeps.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from treeopt.decoding.accept import Verdict
from treeopt.decoding.config import DecodeConfig


class BatchRows:
    """``rows`` rows over ``prompts``: row i holds prompt ``owner[i]`` (at first, prompt i);
    ``out`` and ``steps`` are per prompt, ``active`` per row."""

    def __init__(self, prompts: Sequence[Sequence[int]], rows: int, cfg: DecodeConfig) -> None:
        self.prompts = [list(p) for p in prompts]
        self.cfg = cfg
        self.owner = list(range(rows))  # the prompt each row decodes
        self.out: list[list[int]] = [[] for _ in prompts]  # per prompt: tokens emitted
        self.steps: list[list[int]] = [[] for _ in prompts]  # per prompt: tokens each step kept
        self.active = [True] * rows  # per row
        self.kept = [0] * rows  # per row: the tokens the last step read kept

    def held(self) -> list[list[int]]:
        """The prompts the rows hold, in row order."""
        return [self.prompts[p] for p in self.owner]

    def first(self, tokens: Sequence[int]) -> None:
        """Each row's first token (the prefill's)."""
        for row, token in enumerate(tokens):
            self._emit_first(row, token)

    def take(self, row: int, prompt: int, token: int) -> bool:
        """``row`` holds ``prompt`` now, whose first token is ``token``; whether it runs."""
        self.owner[row] = prompt
        self._emit_first(row, token)
        return self.active[row]

    def _emit_first(self, row: int, token: int) -> None:
        self.out[self.owner[row]].append(token)
        self.active[row] = not self.finished(row, [token])

    def read(self, verdict: Verdict, tokens: torch.Tensor) -> tuple[list[int], list[list[int]]]:
        """Bring a step's accepted tokens to the host (the one sync of a step) and record them
        for the running rows. Returns how many each row accepted (0 for stopped rows) and each
        accepted path (node indices, root first); :attr:`kept` holds how many of them each row
        kept (its step's accepted length: none past the budget or the first EOS)."""
        path_tokens = tokens.gather(1, verdict.path)  # [b, depth+1]
        packed = torch.cat([verdict.length[:, None], verdict.path, path_tokens,
                            verdict.next_root[:, None]], dim=1).tolist()
        width = verdict.path.shape[1]
        accepted, paths = [], []
        for i, row in enumerate(packed):
            n = row[0] if self.active[i] else 0
            accepted.append(n)
            paths.append(row[1: 1 + n])
            self.kept[i] = 0
            if not n:
                continue
            new = [*row[2 + width: 1 + width + n], row[-1]]
            out = self.out[self.owner[i]]
            out.extend(new)
            self.active[i] = not self.finished(i, new)
            # the tokens it keeps: none past the budget or the first EOS (a running row's
            # output was whole before this step)
            self.kept[i] = n if self.active[i] else len(self._truncate(out)) - (len(out) - n)
            self.steps[self.owner[i]].append(self.kept[i])
        return accepted, paths

    def finished(self, row: int, new: list[int]) -> bool:
        """Row ``row`` has its prompt's budget of tokens, or just emitted EOS (in ``new``)."""
        return len(self.out[self.owner[row]]) >= self.cfg.max_new_tokens or (
            self.cfg.eos_token_id is not None and self.cfg.eos_token_id in new)

    def output(self, row: int) -> list[int]:
        """The new tokens of ``row``'s prompt so far, cut as :meth:`tokens` cuts them."""
        return self._truncate(self.out[self.owner[row]])

    def tokens(self) -> tuple[tuple[int, ...], ...]:
        """Each prompt's new tokens, cut at its budget and after its first EOS.

        >>> rows = BatchRows([[1], [2]], 2, DecodeConfig(max_new_tokens=3, eos_token_id=9))
        >>> rows.out = [[4, 9, 5], [6, 7, 8, 3]]
        >>> rows.tokens()
        ((4, 9), (6, 7, 8))
        """
        return tuple(tuple(self._truncate(o)) for o in self.out)

    def _truncate(self, out: list[int]) -> list[int]:
        out = out[: self.cfg.max_new_tokens]
        if self.cfg.eos_token_id is not None and self.cfg.eos_token_id in out:
            out = out[: out.index(self.cfg.eos_token_id) + 1]
        return out

    @property
    def progress(self) -> float:
        """The share of the prompts' token budget emitted so far."""
        return sum(len(o) for o in self.out) / (len(self.out) * self.cfg.max_new_tokens)
