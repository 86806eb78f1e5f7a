"""The ``treeopt demo build`` command line that plans a demo's settings: what the manifest
records, so that a reader can run the build again."""

from __future__ import annotations

from treeopt.demo.config import (
    KINDS,
    PRETRAINED_BUDGET,
    TIMING_FLAGS,
    DemoConfig,
    plan,
)


def command_line(config: DemoConfig) -> str:
    """The ``treeopt demo build`` command that plans ``config`` (recorded in the manifest).

    >>> from dataclasses import replace
    >>> command_line(plan(budget_minutes=60))
    'treeopt demo build --budget-minutes 60 --device cpu --seed 0'
    >>> command_line(plan(budget_minutes=120, base_layers=16))
    'treeopt demo build --budget-minutes 120 --base-layers 16 --device cpu --seed 0'
    >>> command_line(plan(budget_minutes=120, base_layers=16, medusa_head_layers=8))
    'treeopt demo build --budget-minutes 120 --base-layers 16 --medusa-head-layers 8 --device cpu --seed 0'
    >>> command_line(replace(plan(budget_minutes=60), sweep_target_se=0.015, sweep_race=True))
    'treeopt demo build --budget-minutes 60 --device cpu --seed 0 --sweep-target-se 0.015 --sweep-race'
    >>> command_line(replace(plan(budget_minutes=60), sweep_batching="continuous"))
    'treeopt demo build --budget-minutes 60 --device cpu --seed 0 --sweep-batching continuous'
    >>> command_line(replace(plan(budget_minutes=60), batch_timing={"8": {"sweep_target_se": 0.02}}))
    'treeopt demo build --budget-minutes 60 --device cpu --seed 0 && treeopt demo build --budget-minutes 60 --device cpu --seed 0 --redo timing --batches 8 --sweep-target-se 0.02'
    >>> command_line(plan(base_model="smollm2-135m-instruct"))
    'treeopt demo build --base-model smollm2-135m-instruct --device cpu --seed 0'
    >>> command_line(plan(base_model="smollm2-135m-instruct", kinds=KINDS))
    'treeopt demo build --base-model smollm2-135m-instruct --kinds all --device cpu --seed 0'
    >>> command_line(plan(budget_minutes=0.5, base_model="/m", prompt_set="/p", kinds=("ngram-trie",)))
    'treeopt demo build --budget-minutes 0.5 --base-model /m --prompt-set /p --kinds ngram-trie --device cpu --seed 0'
    """
    preset = plan(budget_minutes=config.budget_minutes, device=config.device, seed=config.seed,
                  base_model=config.base_model)
    head = ("" if config.base_model is not None and config.budget_minutes == PRETRAINED_BUDGET
            else f" --budget-minutes {config.budget_minutes:g}")
    if config.base_model is not None:
        head += f" --base-model {config.base_model}"
    if config.base.num_layers != preset.base.num_layers:
        head += f" --base-layers {config.base.num_layers}"
    if config.medusa_head_layers is not None:
        head += f" --medusa-head-layers {config.medusa_head_layers}"
    if config.prompt_set != preset.prompt_set:
        head += f" --prompt-set {config.prompt_set}"
    if config.prose_set != preset.prose_set:
        head += f" --prose-set {config.prose_set}"
    if config.dtype != preset.dtype:
        head += f" --dtype {config.dtype}"
    if config.kinds != preset.kinds:
        head += f" --kinds {'all' if config.kinds == KINDS else ','.join(config.kinds)}"
    timing = ""
    for name in TIMING_FLAGS:  # the timing flags that change the preset's settings
        value, flag = getattr(config, name), "--" + name.replace("_", "-")
        if value != getattr(preset, name):
            timing += (f" {flag}" if value is True else f" --no-{flag[2:]}" if value is False
                       else f" {flag} {value}" if isinstance(value, str) else f" {flag} {value:g}")
    command = f"treeopt demo build{head} --device {config.device} --seed {config.seed}"
    for batch, settings in config.batch_timing.items():  # each batch size timed apart, after
        flags = "".join(f" --{k.replace('_', '-')} {v:g}" for k, v in settings.items())
        timing += f" && {command} --redo timing --batches {batch}{flags}"
    return command + timing


__all__ = ["command_line"]
