"""Measured verify-step latency: b sequences, each verifying q tree tokens against an s-token cache.

What is timed is the live decoder's own verify step, :func:`treeopt.decoding.tree_forward.
verify_step` (the step's mask and positions built as decoding builds them, then the model's public
``forward``), on a chain of q tokens after a cache of random keys and values (weights and cache
contents do not change latency). Two methods:

- ``eager``: the step as the decoder runs it: a :class:`~treeopt.decoding.cache.SlotCache`
  written in place at the same frontier every call;
- ``cuda-graphs``: one CUDA graph per q, captured once and replayed; each keeps its own cache.

For every (b, s), the q values are measured interleaved (see :mod:`profiling.timing`), and the
table is written after each (b, s) group, so an interrupted sweep resumes.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import torch

from treeopt.decoding.cache import SlotCache
from treeopt.decoding.models import torch_dtype
from treeopt.decoding.plan import tree_plan
from treeopt.decoding.probe import check_decodable, verifier
from treeopt.decoding.tree_forward import Verifier, verify_step
from treeopt.documents.dtypes import dtype_name
from treeopt.errors import FieldError, TreeoptError
from treeopt.model.tree import Tree
from treeopt.profiling.host import cpu_identity
from treeopt.profiling.table import LatencyRecord, LatencyTable
from treeopt.profiling.timing import (
    Call,
    free_memory,
    interleaved,
    is_out_of_memory,
    oom_message,
    summarize,
)
from treeopt.roofline.config import ModelConfig

METHODS = ("eager", "cuda-graphs")


def device_label(device: str) -> str:
    """``cpu`` or ``cuda:<name>`` — what a latency table is matched on."""
    if device.startswith("cuda"):
        return f"cuda:{torch.cuda.get_device_name(torch.device(device))}"
    return "cpu"


def check_device(device: str, dtype: str) -> None:
    """Raise a TreeoptError for an unusable ``device`` or ``dtype``."""
    dtype_name(dtype)
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise FieldError("device", f"{device}: CUDA is not available on this machine")
    elif device != "cpu":
        raise FieldError("device", f"must be cpu or cuda[:N], got {device!r}")


def build_model(cfg: ModelConfig, *, device: str, dtype: str, weights_dir: str | None = None,
                seed: int = 0) -> torch.nn.Module:
    """The model with real weights from ``weights_dir``, else random weights from ``cfg``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from treeopt.decoding.models import from_pretrained

    dt = torch_dtype(dtype)
    if weights_dir is not None:
        model = from_pretrained(weights_dir, dtype=dt, local_files_only=True).to(device)
    else:
        hf = cfg.to_hf()
        config = AutoConfig.for_model(hf.pop("model_type"), **hf)
        torch.manual_seed(seed)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dt)
    return model.eval()


def _step(verify: Verifier, batch: int, context: int, q: int,
          device: str) -> tuple[Callable[[], object], SlotCache]:
    """The decoder's own verify step of a q-token chain (a chain stands for any q-token tree:
    the cost depends on q only) after ``context`` cached tokens per row."""
    cache = SlotCache.random(verify.shape, batch=batch, context=context, extra=q)
    ids = torch.randint(0, verify.model.config.vocab_size, (batch, q), device=device)
    plan = tree_plan(Tree.chain(q - 1), device)
    lengths = torch.full((batch,), context, dtype=torch.long, device=device)
    return (lambda: verify_step(verify, ids, plan, cache=cache, lengths=lengths,
                                frontier=context)), cache


def _eager_calls(verify, batch, context, tokens, device) -> dict[int, Call]:
    """One call per q; each writes at the same frontier, so no reset is needed."""
    return {q: Call(run=_step(verify, batch, context, q, device)[0]) for q in tokens}


def _graph_call(verify, batch, context, q, device) -> Call:
    """The verify step captured as a CUDA graph and replayed."""
    step, cache = _step(verify, batch, context, q, device)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    def replay(graph: torch.cuda.CUDAGraph = graph, alive: object = (step, cache)) -> None:
        graph.replay()  # ``alive`` keeps the captured tensors' addresses valid

    return Call(run=replay)


def measure_group(model: torch.nn.Module, cfg: ModelConfig, *, batch: int, context: int,
                  tokens: Sequence[int], repeats: int, warmup: int, device: str,
                  method: str = "eager") -> list[LatencyRecord]:
    """Records for every q of one (b, s): measured, or the out-of-memory that stopped it."""
    errors: dict[int, str] = {}
    verify = verifier(model, tree=False)  # once for every q of the group
    try:
        if method == "eager":
            calls = _eager_calls(verify, batch, context, tokens, device)
        else:
            calls = {}
            for q in tokens:
                try:
                    calls[q] = _graph_call(verify, batch, context, q, device)
                except RuntimeError as exc:
                    if not is_out_of_memory(exc):
                        raise
                    errors[q] = oom_message(exc)
                    free_memory(device)
        times = interleaved(calls, repeats=repeats, warmup=warmup, device=device) if calls else {}
    except RuntimeError as exc:
        if not is_out_of_memory(exc):
            raise
        free_memory(device)
        return [LatencyRecord(batch, context, q, error=oom_message(exc)) for q in tokens]
    times = {**times, **errors}
    return [_record(batch, context, q, times[q]) for q in tokens]


def _record(batch: int, context: int, q: int, ms: list[float] | str) -> LatencyRecord:
    if isinstance(ms, str):
        return LatencyRecord(batch, context, q, error=ms)
    median, p10, p90 = summarize(ms)
    return LatencyRecord(batch, context, q, median, p10, p90, len(ms))


def profile_verify(cfg: ModelConfig, *, out: str | os.PathLike[str], device: str = "cpu",
                   dtype: str = "fp32", batch: Sequence[int], context: Sequence[int],
                   tokens: Sequence[int], repeats: int = 20, warmup: int = 3,
                   method: str = "eager", weights_dir: str | None = None,
                   log: Callable[[str], None] | None = None,
                   progress: Callable[[int, int], None] | None = None) -> LatencyTable:
    """Sweep batch × context × tokens, appending to ``out``; points already in it are skipped.
    ``progress(done, total)`` is called after each (batch, context) group."""
    check_device(device, dtype)
    dtype = dtype_name(dtype)  # what the table records
    if method not in METHODS:
        raise TreeoptError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if method == "cuda-graphs" and not device.startswith("cuda"):
        raise FieldError("device", f"must be cuda for the cuda-graphs method, got {device!r}")
    if repeats < 1:
        raise FieldError("repeats", f"must be ≥ 1, got {repeats}")
    if warmup < 0:
        raise FieldError("warmup", f"must be ≥ 0, got {warmup}")
    cfg.check_positions(max(context), max(tokens))
    label = device_label(device)
    table = _resume(out, cfg, dtype, label, method)
    done = {k for k, r in table.by_key().items()}
    model = build_model(cfg, device=device, dtype=dtype, weights_dir=weights_dir)
    check_decodable(model)  # the step timed is one that decodes this model as itself
    say = log or (lambda line: print(line, file=sys.stderr))
    groups = [(b, s, [q for q in tokens if (b, s, q) not in done]) for b in batch for s in context]
    groups = [g for g in groups if g[2]]
    if progress is not None:
        progress(0, len(groups))
    with torch.inference_mode():
        for i, (b, s, todo) in enumerate(groups):
            records = measure_group(model, cfg, batch=b, context=s, tokens=todo,
                                    repeats=repeats, warmup=warmup, device=device,
                                    method=method)
            table = table.with_records(records)
            table.save(out)
            say(f"batch {b} context {s}: " + ", ".join(_brief(r) for r in records))
            if progress is not None:
                progress(i + 1, len(groups))
    return table


def _resume(out: str | os.PathLike[str], cfg: ModelConfig, dtype: str, label: str,
            method: str) -> LatencyTable:
    existing = LatencyTable.load_if_exists(out)
    if existing is None:
        import transformers

        meta = {"method": method, "torch": torch.__version__,
                "transformers": transformers.__version__,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                **({"cpu": cpu_identity()} if label == "cpu" else {})}
        return LatencyTable(label, dtype, cfg, (), meta)
    existing.check_matches(model=cfg, dtype=dtype, device=label,
                           source=f"{Path(out)} (resuming; write a new sweep to another path)")
    if existing.meta.get("method", "eager") != method:
        raise FieldError("out", f"{out}: measured with method {existing.meta.get('method')!r}, "
                         f"not {method!r}; write to another path")
    return existing


def _brief(r: LatencyRecord) -> str:
    return f"q={r.tokens} {r.error}" if r.error else f"q={r.tokens} {r.ms_median:.3f} ms"
