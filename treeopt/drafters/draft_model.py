"""A separate draft model (Leviathan et al., 2023; Chen et al., 2023; SpecInfer; Sequoia): any
local Hugging Face causal LM that shares the base model's tokenizer.

Its candidates at depth k are its own top-k given the prefix and the path above them, so under
teacher forcing every depth of a rank trace comes from **one** forward over the sequence: the
candidates for ``x[t+2+k]`` are its logits after reading ``x[… t+1+k]``
(:meth:`DraftModel.rank_depths`).

Live, the draft model keeps a key/value cache of its own (:class:`DraftState`, a
:class:`~treeopt.decoding.cache.SlotCache` of its own layers). A step first feeds the tokens the
base model committed since the last step, ending with the root (one forward, ragged rows padded),
then drafts the tree level by level: the nodes that have children at the next depth are fed in
one forward per depth, each seeing its row's prefix and its own ancestors — the same tree mask
the base model's verify forward uses. Drafted entries are left past each row's prefix and
overwritten by the next step's catch-up, so nothing is moved back.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from treeopt.decoding.cache import SlotCache
from treeopt.decoding.drafter import Drafter, feed_all_but_last, take_queued_row
from treeopt.decoding.layers import additive
from treeopt.decoding.probe import verifier
from treeopt.decoding.token_order import rank_of, top_candidates
from treeopt.decoding.tree_forward import Verifier
from treeopt.drafters.heads import rank_table
from treeopt.errors import TreeoptError
from treeopt.files import read_tagged_json, write_json
from treeopt.registry.drafter_configs import HeadsConfig
from treeopt.registry.kinds import KINDS

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.plan import TreePlan

DRAFTER_FILE, DRAFTER_FORMAT = "drafter.json", "treeopt.drafter/1"
DEFAULT_DEPTH = 4  # depths a draft model drafts (and its trace records) unless asked otherwise


@dataclass(eq=False)
class DraftState:
    """The draft model's live cache: ``lengths`` ``[b]`` tokens of each row fed so far (the
    base model's committed prefix and the root, once caught up; ``lens``: the same on the host)
    and the tokens still to feed (``pending`` ``[b, P]``, ``count`` ``[b]`` of them per row)."""

    cache: SlotCache
    lengths: torch.Tensor
    lens: list[int]
    pending: torch.Tensor
    count: torch.Tensor
    fresh: bool = True  # nothing fed yet: the prefill's tokens are all new

    def take_row(self, row: int, new: DraftState) -> None:
        """Row ``row`` becomes ``new``'s one row: its cache, length and pending tokens (at most
        as many as this state holds per row: a primed new row holds one)."""
        take_queued_row(self, row, new, (self.cache.kv, new.cache.kv), ("pending",))


class DraftModel(Drafter):
    """A small causal LM drafting every depth from its own top-k (see the module notes)."""

    kind = KINDS["draft-model"]

    def __init__(self, lm: PreTrainedModel, *, depth: int = DEFAULT_DEPTH) -> None:
        super().__init__()
        if depth < 1:
            raise TreeoptError(f"a draft model's depth must be ≥ 1, got {depth}")
        self.lm = lm.eval().requires_grad_(False)
        vocab, hidden = lm.get_output_embeddings().weight.shape
        self.config = HeadsConfig(kind="draft-model", num_heads=depth, hidden_size=int(hidden),
                                  vocab_size=int(vocab),
                                  num_layers=int(getattr(lm.config, "num_hidden_layers", 1)))
        self._verify: Verifier | None = None

    @classmethod
    def load(cls, directory: str | os.PathLike[str], *, depth: int | None = None,
             dtype: torch.dtype | None = None) -> DraftModel:
        """The draft model in a local Hugging Face directory (safe weights loading only),
        drafting ``depth`` depths (default: what its ``drafter.json`` records, else 4)."""
        from treeopt.decoding.models import from_pretrained

        recorded = Path(directory) / DRAFTER_FILE
        if depth is None and recorded.exists():
            doc = read_tagged_json(recorded, DRAFTER_FORMAT)
            if not isinstance(doc.get("depth"), int):
                raise TreeoptError(f"{recorded}: 'depth' must be an integer")
            depth = doc["depth"]
        depth = depth or DEFAULT_DEPTH
        kwargs: dict[str, Any] = {"local_files_only": True, "trust_remote_code": False}
        if dtype is not None:
            kwargs["dtype"] = dtype
        lm = from_pretrained(str(directory), flag="--drafter", **kwargs)
        return cls(lm, depth=depth)

    def save(self, directory: str | os.PathLike[str], *, tokenizer: Any = None) -> None:
        """Write the draft model as a Hugging Face directory (and ``tokenizer``), with
        ``drafter.json`` recording the depths it drafts (read back by :meth:`load`)."""
        self.lm.save_pretrained(str(directory))
        if tokenizer is not None:
            tokenizer.save_pretrained(str(directory))
        write_json(Path(directory) / DRAFTER_FILE, {"format": DRAFTER_FORMAT,
                                                    "kind": "draft-model",
                                                    "depth": self.config.num_heads})

    @property
    def verify(self) -> Verifier:
        """How the draft model's tree forwards run, probed once (it must honour a tree mask)."""
        if self._verify is None:
            with torch.inference_mode():
                verify = verifier(self.lm, tree=True)
            if not verify.layout.full_only:  # its block masks know no positions of their own
                raise TreeoptError(f"draft model {type(self.lm).__name__}: layers that see a "
                                   f"window or chunk of the prefix are not supported in a draft "
                                   f"model (only in the base model)")
            self._verify = verify
        return self._verify

    def rank_depths(self, hidden: torch.Tensor | None, stream: torch.Tensor, *, top_k: int,
                    ) -> torch.Tensor:
        """One forward of the draft model over ``stream``; depth k at t reads its logits after
        ``stream[t+1+k]`` (``hidden``, the base model's, is not read)."""
        K = self.config.num_heads
        b, T = stream.shape
        n = T - 1 - K
        if n <= 0:
            return torch.empty(b, 0, K, dtype=torch.int16, device=stream.device)
        logits = self.lm(input_ids=stream, use_cache=False).logits  # [b, T, V]
        return rank_table((rank_of(logits[:, 1 + k: 1 + k + n], stream[:, 2 + k: 2 + k + n],
                                   below=top_k)
                           for k in range(K)), top_k=top_k)

    def start(self, *, batch: int, capacity: int) -> DraftState:
        device = self.lm.get_input_embeddings().weight.device
        zeros = torch.zeros(batch, dtype=torch.long, device=device)
        return DraftState(self.verify.cache(batch=batch, capacity=capacity), zeros,
                          [0] * batch, zeros[:, None], zeros)

    def advance(self, hidden: torch.Tensor, tokens: torch.Tensor, index: torch.Tensor,
                count: torch.Tensor, next_root: torch.Tensor, state: DraftState,
                ) -> tuple[torch.Tensor, DraftState]:
        """Queue what the draft model has not read: the accepted tokens after the root it fed
        last step (after the prefill: all of them), then the next root."""
        skip = 0 if state.fresh else 1
        accepted = tokens.gather(1, index)[:, skip:]  # [b, t - skip]
        pending = torch.cat([accepted, accepted.new_zeros(accepted.shape[0], 1)], dim=1)
        column = (count - skip).clamp_min(0)
        pending.scatter_(1, column[:, None], next_root[:, None])
        queued = torch.where(count > 0, column + 1, 0)  # a stopped row (count 0) queues nothing
        state.pending, state.count, state.fresh = pending, queued, False
        return hidden[:, :1], state

    def draft(self, plan: TreePlan, hidden: torch.Tensor, root: torch.Tensor,
              state: DraftState | None = None) -> torch.Tensor:
        """Catch up to the root, then one forward per depth that has children (module notes)."""
        if state is None:
            raise TreeoptError("a draft model drafts from its live state (start, then advance)")
        root_logits = self._catch_up(state)  # [b, V]
        b = root.shape[0]
        tokens = root.new_zeros(b, plan.tree.num_tokens)
        tokens[:, 0] = root
        if not plan.levels:  # the root alone: caught up, nothing drafted
            return tokens
        first = plan.levels[0]
        plan.fill(tokens, first.nodes, top_candidates(root_logits, first.width)[:, first.ranks])
        front = max(state.lens)
        fed = 0
        for lv in plan.levels[1:]:
            nodes, visible = lv.prev[:, -1], lv.parents_seen
            m = nodes.shape[0]
            logits = self._forward(state, tokens[:, nodes], front + fed, visible,
                                   positions=state.lengths[:, None] - 1 + lv.depth - 1)
            cand = top_candidates(logits, lv.width)  # [b, m, R]
            plan.fill(tokens, lv.nodes, cand[:, lv.row, lv.ranks])
            fed += m
        return tokens

    def prime(self, state: DraftState) -> None:
        """Feed every row's pending tokens but its last, which stays pending for the next step."""
        feed_all_but_last(state, self._catch_up, ("pending",))

    def _catch_up(self, state: DraftState) -> torch.Tensor:
        """Feed every row's pending tokens (ending with its root) and move them to the end of
        the row's prefix; returns the logits after each row's root ``[b, V]``."""
        counts = state.count.tolist()  # the one host read: the catch-up's width and lengths
        P = max(counts)
        steps = torch.arange(P, device=state.count.device)
        visible = (steps[None, :] <= steps[:, None])  # causal within the block
        front = max(state.lens)
        logits = self._forward(state, state.pending[:, :P], front, visible,
                               positions=state.lengths[:, None] + steps)
        rows = torch.arange(logits.shape[0], device=logits.device)
        valid = steps[None] < state.count[:, None]
        scratch = state.cache.capacity - 1
        state.cache.move(torch.where(valid, front + steps, scratch),
                         torch.where(valid, state.lengths[:, None] + steps, scratch))
        state.lengths = state.lengths + state.count
        state.lens = [n + c for n, c in zip(state.lens, counts, strict=True)]
        return logits[rows, (state.count - 1).clamp_min(0)]  # a stopped row's is never used

    def _forward(self, state: DraftState, ids: torch.Tensor, front: int, visible: torch.Tensor,
                 *, positions: torch.Tensor) -> torch.Tensor:
        """Feed ``ids`` ``[b, m]`` at slots ``[front, front + m)``: each sees its row's prefix
        and the block entries ``visible`` ``[m, block]`` marks (the block: the ``block`` slots
        ending at ``front + m``)."""
        b, m = ids.shape
        slots = torch.arange(front, device=ids.device)
        width = front + m - visible.shape[1]  # slots before the visible block: the prefix's
        prefix = slots[:width] < state.lengths[:, None]  # [b, width]
        seen = torch.cat([prefix[:, None, :].expand(b, m, width),
                          visible[None].expand(b, m, -1)], dim=-1)
        state.cache.place(front, m)
        logits, _ = self.verify.forward(ids, cache=state.cache, position_ids=positions,
                                        attention_mask=additive(seen, self.verify.dtype)[:, None])
        return logits
