"""What the app works on: named acceptance sources (rank traces or accuracy tables) and the
results the pages show. No Streamlit here — the pages call these and render.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from treeopt.errors import TreeoptError
from treeopt.model.acceptance import Method, Source, methods_for
from treeopt.model.accuracy import AccuracyTable, parse_accuracies
from treeopt.model.trace import RankTrace
from treeopt.workbench.demos import base_model_name

if TYPE_CHECKING:
    from treeopt.demo.load import Demo


@dataclass(frozen=True, eq=False)
class Dataset:
    """Acceptance sources by label (e.g. ``medusa``, ``hydra``), with optional held-out traces;
    ``sampled``: per label and sampling temperature, a trace of sampled continuations and its
    held-out twin (the labels' ``sources`` are greedy)."""

    name: str
    sources: dict[str, Source]
    held_out: dict[str, RankTrace] = field(default_factory=dict)
    description: str = ""
    sampled: dict[str, dict[float, tuple[RankTrace, RankTrace | None]]] = field(
        default_factory=dict)
    _tables: dict[str, AccuracyTable] = field(default_factory=dict, init=False, repr=False)

    def temperatures(self, label: str) -> list[float]:
        """The sampling temperatures ``label`` has traces for (greedy, 0, not included)."""
        return sorted(self.sampled.get(label, {}))

    def at_temperature(self, label: str, temperature: float) -> tuple[Source, RankTrace | None]:
        """``label``'s source and held-out trace for decoding at ``temperature`` (0: greedy)."""
        if temperature == 0:
            return self.sources[label], self.held_out.get(label)
        try:
            return self.sampled[label][temperature]
        except KeyError:
            raise TreeoptError(f"{label}: no trace sampled at temperature {temperature:g}; "
                               f"it has {self.temperatures(label) or 'greedy only'}") from None

    def table(self, label: str) -> AccuracyTable:
        """``label``'s accuracy table: its own, or its trace's (computed once per dataset)."""
        if label not in self._tables:
            source = self.sources[label]
            self._tables[label] = (source if isinstance(source, AccuracyTable)
                                   else AccuracyTable.from_trace(source))
        return self._tables[label]

    def has_trace(self, label: str) -> bool:
        return isinstance(self.sources[label], RankTrace)

    def methods(self, label: str) -> tuple[Method, ...]:
        """The acceptance models ``label``'s source supports, best first."""
        return methods_for(self.sources[label])


def dataset_from_upload(filename: str, data: bytes) -> Dataset:
    """Parse an uploaded rank trace (.npz) or accuracy table (.csv / .json) as data, never pickle."""
    suffix = Path(filename).suffix.lower()
    label = Path(filename).stem
    if suffix == ".npz":
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "upload.npz"
            path.write_bytes(data)
            try:
                trace = RankTrace.load(path)
            except TreeoptError as exc:
                raise TreeoptError(str(exc).replace(str(path), filename)) from None
        return Dataset(filename, {label: trace}, description=_describe(trace))
    if suffix in (".csv", ".json"):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise TreeoptError(f"{filename}: not a UTF-8 text file") from None
        table = parse_accuracies(text, source=filename)
        return Dataset(filename, {label: table}, description="accuracy table (independent model)")
    raise TreeoptError(f"{filename}: expected a rank trace (.npz) or an accuracy table "
                       f"(.csv with header head,top1,…,topK, or .json)")


def calibrate_local(model_dir: str, heads_dir: str, prompts_file: str, *, out: str,
                    top_k: int = 16, max_new_tokens: int = 128, device: str = "cpu",
                    progress: Callable[[int, int], None] | None = None) -> Dataset:
    """Calibrate a local model and heads on a prompts file (what ``treeopt calibrate`` does)."""
    from treeopt.decoding.calibrate import CalibrateConfig, calibrate
    from treeopt.decoding.loading import ModelSpec, load_model
    from treeopt.documents.prompts import encode, read_texts
    from treeopt.drafters.checkpoints import load_heads_for

    for flag, value in (("model directory", model_dir), ("prompts file", prompts_file)):
        if not value or not Path(value).exists():
            raise TreeoptError(f"{flag} {value!r} does not exist")
    if not heads_dir:
        raise TreeoptError("drafter: give a drafter directory or an n-gram drafter "
                           "('prompt-lookup', 'ngram-trie')")
    model, tokenizer = load_model(ModelSpec(path=model_dir, device=device))
    heads = load_heads_for(model, heads_dir)
    prompts = encode(tokenizer, read_texts([prompts_file]), source=prompts_file)
    config = CalibrateConfig(top_k=top_k, max_new_tokens=max_new_tokens,
                             eos_token_id=getattr(tokenizer, "eos_token_id", None))
    meta = {"model": model_dir, "heads": heads_dir, "prompts": prompts_file}
    trace, _ = calibrate(model, heads, prompts, out, config=config, meta=meta, progress=progress)
    label = str(trace.head_kind or Path(heads_dir).name)
    return Dataset(f"calibration of {Path(model_dir).name}", {label: trace},
                   description=_describe(trace))


def _describe(trace: RankTrace) -> str:
    kind = trace.head_kind or "unknown"
    return f"{trace.positions:,} positions × {trace.heads} heads ({kind}), top-{trace.top_k}"


def demo_dataset(demo: Demo) -> Dataset:
    """The demo's calibration traces (with their held-out twins) as a dataset."""
    positions = ", ".join(f"{k} {t.positions:,}" for k, t in demo.traces.items())
    temps = ", ".join(f"{t:g}" for t in demo.temperatures)
    sampled = f"; sampled at T = {temps} too" if temps else ""
    return Dataset(demo.paths.root.name, dict(demo.traces),
                   held_out=dict(demo.heldout_traces),
                   description=f"shipped demo on {base_model_name(demo.manifest)}: greedy rank "
                               f"traces of its drafters on the calibration prompts (positions: "
                               f"{positions}), each with a held-out twin{sampled}",
                   sampled={k: demo.sampled_traces(k) for k in demo.traces})


__all__ = ["Dataset", "calibrate_local", "dataset_from_upload", "demo_dataset"]
