"""Measured latency of the draft heads themselves, per decoding step.

- Medusa: one call for all K heads on the last accepted token's hidden state, ``[b, 1, d]``; the
  cost depends on the batch only (record ``head = null``, ``nodes = 1``).
- Hydra: one call per depth; head k runs on the m tree nodes expanded at depth k (the root for
  k = 0) with their k+1 path tokens, ``[b, m, d]`` — a record per (batch, head, nodes).

File: ``"format": "treeopt.draft-latency/1"`` with ``device``, ``dtype``, ``heads`` (the
:class:`treeopt.heads.HeadsConfig` fields) and ``records`` of ``{batch, head, nodes, ms_median,
ms_p10, ms_p90, repeats, spread}`` or ``{…, error}``; rewritten after each batch size.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from profiling.table import DRAFT_FORMAT
from profiling.timing import TORCH_DTYPES, Call, interleaved, summarize
from profiling.verify import check_device, device_label
from treeopt.drafters import drafter_kind
from treeopt.errors import TreeoptError
from treeopt.files import write_json

if TYPE_CHECKING:
    from treeopt.drafters.config import HeadsConfig


def _calls(heads: torch.nn.Module, cfg: Any, batch: int, nodes: Sequence[int],
           device: str, dtype: torch.dtype) -> dict[tuple[int | None, int], Call]:
    d, v = cfg.hidden_size, cfg.vocab_size
    if not drafter_kind(cfg.kind).per_depth:  # one call for every depth
        hidden = torch.randn(batch, 1, d, dtype=dtype, device=device)  # [b, 1, d]
        return {(None, 1): Call(run=lambda: heads(hidden))}
    calls = {}
    for k in range(cfg.num_heads):
        for m in nodes:
            hidden = torch.randn(batch, m, d, dtype=dtype, device=device)  # [b, m, d]
            prev = torch.randint(0, v, (batch, m, k + 1), device=device)  # [b, m, k+1]
            calls[(k, m)] = Call(run=lambda k=k, h=hidden, p=prev: heads.head_logits(k, h, p))
    return calls


def profile_draft(cfg: HeadsConfig, *, out: str | os.PathLike[str], device: str = "cpu",
                  dtype: str = "fp32", batch: Sequence[int], nodes: Sequence[int] = (1,),
                  repeats: int = 20, warmup: int = 3) -> dict[str, Any]:
    """Time the heads of ``cfg`` (a :class:`treeopt.heads.HeadsConfig`); write and return the doc."""
    from treeopt.drafters import build_heads

    check_device(device, dtype)
    if repeats < 1 or warmup < 0:
        raise TreeoptError(f"--repeats must be ≥ 1 and --warmup ≥ 0, got {repeats}, {warmup}")
    torch.manual_seed(0)
    heads = build_heads(cfg).to(device=device, dtype=TORCH_DTYPES[dtype]).eval()
    doc: dict[str, Any] = {"format": DRAFT_FORMAT, "device": device_label(device), "dtype": dtype,
                           "heads": cfg.to_dict(), "records": []}
    with torch.inference_mode():
        for b in batch:
            calls = _calls(heads, cfg, b, nodes, device, TORCH_DTYPES[dtype])
            times = interleaved(calls, repeats=repeats, warmup=warmup, device=device)
            for (k, m), ms in times.items():
                rec: dict[str, Any] = {"batch": b, "head": k, "nodes": m}
                if isinstance(ms, str):
                    rec["error"] = ms
                else:
                    med, p10, p90 = summarize(ms)
                    rec.update(ms_median=med, ms_p10=p10, ms_p90=p90, repeats=len(ms),
                               spread=round((p90 - p10) / med, 6))
                doc["records"].append(rec)
            write_json(out, doc)
    return doc
