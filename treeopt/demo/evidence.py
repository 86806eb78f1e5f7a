"""How a demo's sweep is measured and what the manifest says of it: the step profile taken
alongside the sweep's points, the method record, and the points' errors predicted from the
alongside profile (the build's ``sweep`` and ``drafters`` stages call these)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from treeopt.demo.config import DemoConfig
from treeopt.demo.layout import DemoPaths
from treeopt.documents.sweep import points_timed

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.drafter import Drafter
    from treeopt.documents.sweep import Sweep
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace
    from treeopt.pricing.costs import StepCosts
    from treeopt.profiling.alongside import AlongsideProfile


def alongside_profile(model: PreTrainedModel, heads: Drafter, prompts: Sequence[Sequence[int]],
                      *, config: DemoConfig, out: Path) -> AlongsideProfile | None:
    """The step profile a sweep takes alongside its points, as ``tune --profile-alongside``
    takes it (:meth:`~treeopt.profiling.alongside.AlongsideProfile.for_sweep`) on the swept
    prompts. None when ``config`` takes none; then no
    file of an earlier measurement is left at ``out`` either."""
    from treeopt.profiling.alongside import AlongsideProfile

    if not config.sweep_alongside:
        out.unlink(missing_ok=True)
        return None
    return AlongsideProfile.for_sweep(model, heads, prompts, out=out,
                                      max_new_tokens=config.live_new_tokens,
                                      measure=config.measurement("sweep"),
                                      batches=config.live_batches)


def measured_by_batch(config: DemoConfig, part: Literal["step", "sweep"]) -> dict[str, Any]:
    """A timing record's ``measurement_by_batch``: each batch size timed otherwise than the rest
    (``batch_timing``) with its measurement; nothing where every batch is timed alike.

    >>> measured_by_batch(DemoConfig(batch_timing={"8": {"step_rounds": 5}}), "step")
    {'measurement_by_batch': {'8': {'rounds': 5, 'min_seconds': 0.0, 'target_se': 0.0, 'max_rounds': 64}}}
    >>> measured_by_batch(DemoConfig(), "sweep")
    {}
    """
    by_batch = {str(b): asdict(m) for b, m in config.measurements(part).items()}
    return {"measurement_by_batch": by_batch} if by_batch else {}


def sweep_method(config: DemoConfig, paths: DemoPaths, kind: str) -> dict[str, Any]:
    """How the ``kind`` drafter's sweep is measured and what its pick and predictions come
    from, with file paths inside the demo (the manifest's record).

    >>> m = sweep_method(DemoConfig(sweep_alongside=True), DemoPaths(Path("d")), "eagle")
    >>> m["measurement"], m["alongside"], m["step_profile"]
    ({'rounds': 3, 'min_seconds': 0.0, 'target_se': 0.0, 'max_rounds': 64}, 'sweep/eagle-alongside-cpu.json', 'latency/step-eagle-cpu.json')
    """
    return {"prompts": config.sweep_prompts, "max_new_tokens": config.live_new_tokens,
            "measurement": asdict(config.measurement("sweep")),
            **measured_by_batch(config, "sweep"), "race": config.sweep_race,
            "batching": config.sweep_batching,
            "points_timed": points_timed(config.sweep_together),
            "alongside": (paths.inside(paths.alongside_profile(kind, config.device))
                          if config.sweep_alongside else None),
            "step_profile": paths.inside(paths.step_profile(kind, config.device)),
            "selection": f"treeopt select --demo {kind}: the growth priced by the step profile, "
                         "E[L] from the calibration trace walked step by step",
            "predicted": "the step profile, E[L] from the swept prompts' own trace over the "
                         "tokens decoded"}


def alongside_errors(sweep: Sweep, growth: Growth, costs: StepCosts,
                     trace: RankTrace) -> list[dict[str, Any]]:
    """The sweep's points predicted by ``costs`` (the profile taken alongside them), E[L] from
    ``trace`` (the swept prompts' own, as the sweep's predictions): per batch, the largest and
    the mean absolute error (predicted over measured speed-up, minus one)."""
    from treeopt.model.tree import Tree
    from treeopt.pricing.sweep_prediction import predict

    rows = []
    for b in sweep.batches:
        errors = [abs(predict(Tree.from_choices([list(c) for c in p.choices]), growth, costs,
                              trace, b, continuous=sweep.continuous).speedup / p.speedup - 1)
                  for p in sweep.points if p.batch == b]
        rows.append({"batch": b, "max_abs_error": max(errors),
                     "mean_abs_error": sum(errors) / len(errors)})
    return rows
