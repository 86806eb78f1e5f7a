"""Prompt lookup as a :class:`~treeopt.decoding.drafter.Drafter`: the chain of tokens that
followed the context's last n tokens where they occurred before (:mod:`treeopt.drafters.ngram`,
the rule of Hugging Face's prompt lookup and vLLM's ``ngram`` method).

It reads no hidden states and runs no forward. Live, each row's tokens (prompt, every accepted
token and the step's root) are kept on the host in an :class:`~treeopt.drafters.ngram.NgramIndex`
(:class:`LookupState`); a step's drafting is one dictionary lookup per row. Calibration ranks
the chain along the true stream (:func:`~treeopt.drafters.ngram.chain_ranks`), the same lookup
over the same context, so walking its trace reproduces live decoding step by step.

Where the lookup proposes fewer tokens than the tree is deep (no match, or the context ends),
the missing nodes are drafted as token -1, "no candidate": they are verified (the tree keeps
its shape) but never accepted, as the trace's -1 says.

A drafter of this kind is named on the command line by a spec rather than a directory
(:func:`parse_lookup_spec`): ``prompt-lookup`` or ``prompt-lookup:depth=10,max-n=3,min-n=1``;
a directory with a ``drafter.json`` of kind ``prompt-lookup`` holds the same settings.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import numpy.typing as npt
import torch

from treeopt.decoding.drafter import Drafter
from treeopt.drafters.draft_model import DRAFTER_FILE, DRAFTER_FORMAT
from treeopt.drafters.ngram import LookupRule, NgramIndex, chain_lengths, chain_ranks
from treeopt.errors import TreeoptError
from treeopt.files import read_tagged_json, write_json
from treeopt.model.tree import Tree
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS

if TYPE_CHECKING:
    from treeopt.decoding.plan import TreePlan

SPEC_NAME = "prompt-lookup"
DEFAULTS = {"depth": 10, "min-n": 1, "max-n": 3}  # depth: HF's num_output_tokens default
NO_CANDIDATE = -1  # a drafted node the lookup had no token for: verified, never accepted


@dataclass(eq=False)
class LookupState:
    """Each row's tokens so far (committed prefix and root) and their n-gram index."""

    rows: list[NgramIndex]
    fresh: bool = True  # nothing read yet: the prefill's tokens are all new

    def take_row(self, row: int, new: LookupState) -> None:
        """Row ``row`` becomes ``new``'s one row: the new prompt's index."""
        self.rows[row] = new.rows[0]


class PromptLookup(Drafter):
    """A chain of up to ``depth`` tokens per step, looked up in the row's own context."""

    kind = KINDS["prompt-lookup"]

    def __init__(self, *, depth: int, min_n: int = 1, max_n: int = 3, vocab_size: int) -> None:
        super().__init__()
        if depth < 1:
            raise TreeoptError(f"a prompt-lookup drafter's depth must be ≥ 1, got {depth}")
        self.rule = LookupRule(min_n=min_n, max_n=max_n)
        self.config = HeadsConfig(kind="prompt-lookup", num_heads=depth, hidden_size=1,
                                  vocab_size=vocab_size, min_match=min_n, max_match=max_n)

    @classmethod
    def from_config(cls, cfg: HeadsConfig) -> PromptLookup:
        return cls(depth=cfg.num_heads, min_n=cfg.min_match, max_n=cfg.max_match,
                   vocab_size=cfg.vocab_size)

    def save(self, directory: str | os.PathLike[str]) -> None:
        """Write ``drafter.json`` with the settings (read back by :func:`load_lookup`)."""
        write_json(Path(directory) / DRAFTER_FILE,
                   {"format": DRAFTER_FORMAT, "kind": SPEC_NAME, "depth": self.config.num_heads,
                    "min_n": self.rule.min_n, "max_n": self.rule.max_n})

    def rank_depths(self, hidden: torch.Tensor | None, stream: torch.Tensor, *, top_k: int,
                    ) -> torch.Tensor:
        """The chain's ranks at every position of every row (``hidden`` is not read): 0 where
        the lookup's k-th token is the stream's, else -1 (see
        :func:`~treeopt.drafters.ngram.chain_ranks`). Rows are right-padded; a position reads
        only what precedes it, so padding changes nothing that is kept."""
        K = self.config.num_heads
        return stacked_ranks(stream, K, lambda row: chain_ranks(row, 0, self.rule, K))

    def drafted_depths(self, sequence: Sequence[int], start: int) -> npt.NDArray[np.int16]:
        """The lookup chain's length at each recorded position (:func:`~treeopt.drafters.
        ngram.chain_lengths`)."""
        return chain_lengths(sequence, start, self.rule, self.config.num_heads)

    def start(self, *, batch: int, capacity: int) -> LookupState:
        return LookupState([NgramIndex(self.rule) for _ in range(batch)])

    def advance(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                count: torch.Tensor, next_root: torch.Tensor, state: LookupState,
                ) -> tuple[torch.Tensor, LookupState]:
        """Append each row's accepted tokens (after the root it read last step; after the
        prefill, the whole prompt), then its next root."""
        skip = 0 if state.fresh else 1
        accepted = tokens.gather(1, index).tolist()
        for row, n, root, ids in zip(state.rows, count.tolist(), next_root.tolist(), accepted,
                                     strict=True):
            if n > 0:  # a stopped row reads nothing
                row.extend(ids[skip:n])
                row.extend((root,))
        state.fresh = False
        return hidden[:, :1], state

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: LookupState | None = None) -> torch.Tensor:
        """The root, then each row's chain along the tree's rank-0 spine (-1 where it ends)."""
        if state is None:
            raise TreeoptError("prompt lookup drafts from its live state (start, then advance)")
        tree, depth = plan.tree, plan.tree.depth
        chains = [row.propose(depth) for row in state.rows]
        out = torch.full((len(chains), tree.num_tokens), NO_CANDIDATE, dtype=torch.long)
        for r, chain in enumerate(chains):
            if chain:
                out[r, _spine(tree)[: len(chain)]] = torch.tensor(chain)
        out = out.to(root.device)
        out[:, 0] = root
        return out


def spec_settings(text: str, name: str, defaults: Mapping[str, object], *, forms: str,
                  convert: Callable[[str, str], object]) -> dict[str, object] | None:
    """The settings of a ``--drafter`` spec ``name:key=value,…`` (the keys of ``defaults``;
    those left out keep their default, ``convert(key, value)`` reads one given), or None when
    ``text`` names no ``name`` drafter; a key not in ``defaults`` is refused, listing
    ``forms``."""
    head, _, rest = text.partition(":")
    if head != name:
        return None
    values = dict(defaults)
    for item in filter(None, rest.split(",")):
        key, eq, value = item.partition("=")
        if key not in defaults or not eq:
            raise TreeoptError(f"drafter spec {text!r}: {item!r} is not one of {forms}")
        values[key] = convert(key, value)
    return values


def spec_integer(text: str, key: str, value: str) -> int:
    """A spec's integer setting; anything else is refused, naming the spec and the key."""
    try:
        return int(value)
    except ValueError:
        raise TreeoptError(f"drafter spec {text!r}: {key} must be an integer, "
                           f"got {value!r}") from None


def stacked_ranks(stream: torch.Tensor, depth: int,
                  row_ranks: Callable[[list[int]], npt.NDArray[np.int16]]) -> torch.Tensor:
    """The rank traces of a batch of right-padded rows, int16 ``[b, T-1-depth, depth]`` on
    ``stream``'s device, from ``row_ranks`` (one row's tokens → its ``[T-1-depth, depth]``
    trace, every position from 0)."""
    b, T = stream.shape
    if T - 1 - depth <= 0:
        return torch.empty(b, 0, depth, dtype=torch.int16, device=stream.device)
    rows = [torch.from_numpy(row_ranks(row)) for row in stream.tolist()]
    return torch.stack(rows).to(stream.device)


class RowDrafter(Protocol):
    """One row's live lookup state that drafts a tree's nodes from its parents and ranks."""

    def draft(self, parents: Sequence[int], ranks: Sequence[int]) -> list[int]: ...


def drafted_rows(rows: Sequence[RowDrafter], tree: Tree, root: torch.Tensor) -> torch.Tensor:
    """``[len(rows), tree.num_tokens]``: the root, then each node's candidate of its rank at its
    parent's path, per row (:data:`NO_CANDIDATE` where a row has none) — how every drafter that
    keeps a trie or suffix tree per row (the n-gram trie, suffix decoding) fills a tree."""
    parents, ranks = tree_shape(tree)
    drafted = [row.draft(parents, ranks) for row in rows]
    out = torch.full((len(drafted), tree.num_tokens), NO_CANDIDATE, dtype=torch.long)
    if parents:
        out[:, 1:] = torch.tensor(drafted, dtype=torch.long)
    out = out.to(root.device)
    out[:, 0] = root
    return out


@functools.lru_cache(maxsize=64)
def tree_shape(tree: Tree) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Each node's parent (-1: the root) and rank, parents first (trees are immutable)."""
    return tuple(tree.parents.tolist()), tuple(tree.ranks.tolist())


def read_drafter_settings(directory: str | os.PathLike[str], kind: str,
                          defaults: Mapping[str, object]) -> tuple[dict[str, object], Path] | None:
    """A directory's ``drafter.json`` settings (the keys of ``defaults``, spelt with ``_`` in
    the file; a key left out takes its default) and its path, when its kind is ``kind``; else
    None. Each setting has its default's type (a float setting takes an integer too; a bool is
    no number), else one error names the file and every setting of the wrong type."""
    path = Path(directory) / DRAFTER_FILE
    if not path.is_file():
        return None
    doc = read_tagged_json(path, DRAFTER_FORMAT)
    if doc.get("kind") != kind:
        return None
    settings = {k: doc.get(k.replace("-", "_"), v) for k, v in defaults.items()}
    bad = [k for k, v in settings.items() if not _typed_as(v, defaults[k])]
    if bad:
        raise TreeoptError(f"{path}: " + ", ".join(
            f"{k.replace('-', '_')} must be {_TYPE_NAMES[type(defaults[k])]}" for k in bad))
    return settings, path


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string"}


def _typed_as(value: object, default: object) -> bool:
    """Whether ``value`` is of ``default``'s type (an int where a float is: a number)."""
    if isinstance(value, bool):
        return False
    wanted = (int, float) if isinstance(default, float) else type(default)
    return isinstance(value, wanted)


@functools.lru_cache(maxsize=64)
def _spine(tree: Tree) -> torch.Tensor:
    """Token indices of the tree's all-rank-0 path, depth 1 first (trees are immutable)."""
    nodes, parent = [], -1
    for i, (p, r) in enumerate(zip(tree.parents.tolist(), tree.ranks.tolist(), strict=True)):
        if p == parent and r == 0:
            nodes.append(i + 1)
            parent = i
    return torch.tensor(nodes, dtype=torch.long)


def parse_lookup_spec(text: str, *, vocab_size: int) -> PromptLookup | None:
    """The drafter a ``--drafter`` spec names, or None when ``text`` is not a spec.

    >>> d = parse_lookup_spec("prompt-lookup:depth=4,max-n=2", vocab_size=100)
    >>> (d.config.num_heads, d.rule.min_n, d.rule.max_n)
    (4, 1, 2)
    >>> parse_lookup_spec("runs/heads", vocab_size=100) is None
    True
    """
    values = spec_settings(text, SPEC_NAME, DEFAULTS,
                           forms=", ".join(f"{k}=N" for k in DEFAULTS),
                           convert=lambda key, value: spec_integer(text, key, value))
    if values is None:
        return None
    return _from_settings(values, source=f"drafter spec {text!r}", vocab_size=vocab_size)


def load_lookup(directory: str | os.PathLike[str], *, vocab_size: int) -> PromptLookup | None:
    """The prompt-lookup drafter a directory's ``drafter.json`` describes; None when the
    directory holds another kind of drafter."""
    found = read_drafter_settings(directory, SPEC_NAME, DEFAULTS)
    if found is None:
        return None
    settings, path = found
    return _from_settings(settings, source=str(path), vocab_size=vocab_size)


def _from_settings(settings: dict[str, int], *, source: str, vocab_size: int) -> PromptLookup:
    """The drafter of a spec's or a ``drafter.json``'s settings (keys of :data:`DEFAULTS`);
    invalid ones are refused, naming ``source``."""
    try:
        return PromptLookup(depth=settings["depth"], min_n=settings["min-n"],
                            max_n=settings["max-n"], vocab_size=vocab_size)
    except (TreeoptError, ValueError) as exc:
        raise TreeoptError(f"{source}: {exc}") from None
