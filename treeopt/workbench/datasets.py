"""What the app works on: named acceptance sources (rank traces or accuracy tables) and the
results the pages show. No Streamlit here — the pages call these and render.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from treeopt.accuracy import AccuracyTable, parse_accuracies
from treeopt.errors import TreeoptError
from treeopt.formats import parse_tree
from treeopt.grow import Growth, grow
from treeopt.trace import RankTrace
from treeopt.tree import Tree
from treeopt.value import Source, expected_accept_length, node_probabilities


@dataclass(frozen=True, eq=False)
class Dataset:
    """Acceptance sources by label (e.g. ``medusa``, ``hydra``), with optional held-out traces."""

    name: str
    sources: dict[str, Source]
    held_out: dict[str, RankTrace] = field(default_factory=dict)
    description: str = ""

    def table(self, label: str) -> AccuracyTable:
        source = self.sources[label]
        return source if isinstance(source, AccuracyTable) else AccuracyTable.from_trace(source)

    def has_trace(self, label: str) -> bool:
        return isinstance(self.sources[label], RankTrace)


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
    from treeopt.decoding.models import ModelSpec, load_model
    from treeopt.drafters.checkpoints import load_heads_for
    from treeopt.prompts import encode, read_texts

    for flag, value in (("model directory", model_dir), ("heads directory", heads_dir),
                        ("prompts file", prompts_file)):
        if not value or not Path(value).exists():
            raise TreeoptError(f"{flag} {value!r} does not exist")
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


# what the Trees page starts with, and the tree Export and Verify use until one is chosen there
TREE_DEFAULTS = {"max_nodes": 128, "size": 64, "max_rank": 10, "constraint": "none"}


def default_tree(source: Source, label: str) -> tuple[Tree, str]:
    """The Trees page's default tree of ``source`` and its description."""
    method = "empirical" if isinstance(source, RankTrace) else "independent"
    growth = grow(source, method=method, max_nodes=TREE_DEFAULTS["max_nodes"],  # type: ignore[arg-type]
                  max_rank=TREE_DEFAULTS["max_rank"])
    tree = growth.tree(min(TREE_DEFAULTS["size"], growth.max_nodes))
    return tree, f"{label} · {method} · none · {tree.size} nodes"


@dataclass(frozen=True)
class TreeView:
    """A tree with what the Trees page shows about it."""

    tree: Tree
    probabilities: npt.NDArray[np.float64]
    expected_accept_length: float


def view_tree(tree: Tree, source: Source, *, method: str) -> TreeView:
    """Per-node acceptance probabilities and E[L] of ``tree`` under ``method``."""
    if tree.size == 0:
        return TreeView(tree, np.zeros(0), 1.0)
    method = method if isinstance(source, RankTrace) else "independent"
    prob = node_probabilities(tree, source, method=method)  # type: ignore[arg-type]
    return TreeView(tree, prob, 1.0 + float(prob.sum()))


def growth_pair(source: Source, *, max_nodes: int, max_depth: int | None, max_rank: int | None,
                constraint: str) -> dict[str, Growth]:
    """Growths under both models where the source allows (a table has the independent only)."""
    methods = ["empirical", "independent"] if isinstance(source, RankTrace) else ["independent"]
    return {m: grow(source, method=m, max_nodes=max_nodes, max_depth=max_depth,  # type: ignore[arg-type]
                    max_rank=max_rank, constraint=constraint)  # type: ignore[arg-type]
            for m in methods}


def imported_tree_point(text: str, source: Source, *, method: str) -> tuple[Tree, float]:
    """Parse a pasted choices list (any engine form) and evaluate it on ``source``."""
    tree = parse_tree(text, source="pasted tree")
    heads = source.heads
    if tree.depth > heads:
        raise TreeoptError(f"pasted tree is {tree.depth} deep but the data has {heads} heads")
    method = method if isinstance(source, RankTrace) else "independent"
    return tree, expected_accept_length(tree, source, method=method)  # type: ignore[arg-type]


__all__ = ["TREE_DEFAULTS", "Dataset", "TreeView", "default_tree", "calibrate_local", "dataset_from_upload", "growth_pair", "imported_tree_point",
           "view_tree"]
