"""``treeopt demo``: build a demo (``build``) and show what a demo holds (``info``)."""

from __future__ import annotations

import argparse

from treeopt.cli.common import emit, int_list
from treeopt.documents.dtypes import AUTO_DTYPE, DTYPES
from treeopt.documents.sweep import BATCHINGS, DRAFTED_SWEEPS


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="build or inspect the demo model, heads, traces and growths")
    demo_sub = p.add_subparsers(dest="demo_command", metavar="ACTION", required=True)

    b = demo_sub.add_parser("build", help="build a demo: a base model trained on the Python "
                            "standard library, or a pretrained one, and its drafters")
    b.add_argument("--out", default="data/demo", metavar="DIR",
                   help="where the demo goes, replaced only when the build finishes (default "
                        "%(default)s)")
    b.add_argument("--budget-minutes", type=float, metavar="M",
                   help="time budget that sizes the model and step counts (under 2: a tiny "
                        "pipeline check) (default 30; on a pretrained base the preset, sized "
                        "for 120, which the budget does not change)")
    b.add_argument("--base-model", metavar="NAME|DIR",
                   help="a pretrained base instead of training one: an asset (`treeopt fetch "
                        "NAME`, e.g. smollm2-135m-instruct) or a local Hugging Face model "
                        "directory, read where it is and never copied into the demo; plans its "
                        "preset (docs/demo.md)")
    b.add_argument("--prompt-set", metavar="NAME|DIR",
                   help="calibration and held-out prompts: a prompt-set asset (humaneval) or a "
                        "directory with calibration.jsonl and heldout.jsonl, copied into the "
                        "demo (default: the preset's; cut from the corpus without one)")
    b.add_argument("--prose-set", metavar="NAME|DIR",
                   help="the second prompt set, where repeats are rare: a prompt-set asset "
                        "(sharegpt: requests people wrote, in the base model's chat template) or "
                        "a directory with heldout.jsonl (default: the preset's; the corpus's "
                        "docstrings and comments without one)")
    b.add_argument("--dtype", choices=(*DTYPES, AUTO_DTYPE),
                   help="what the base model runs in for traces, checks and timing (default: "
                        "the preset's: fp32, auto on a pretrained base); auto: time the "
                        "pretrained base's steps in bf16 and fp32 on this host first and build "
                        "in the faster (bf16 is emulated on a CPU without bf16 matrix "
                        "instructions)")
    b.add_argument("--kinds", metavar="K,K|all",
                   help="the drafters to make (default: the preset's: all, the weightless "
                        "prompt-lookup,ngram-trie on a pretrained base); over a finished demo "
                        "built with the same settings, the kinds it lacks are added")
    b.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the demo trains (default %(default)s)")
    b.add_argument("--base-layers", type=int, metavar="N",
                   help="decoder layers of the base model (default: the preset's 8); a deeper "
                        "base has a larger fixed cost per step, which speculation amortises, and "
                        "needs a budget as many times larger for the same training steps")
    b.add_argument("--medusa-head-layers", type=int, metavar="N",
                   help="residual blocks per Medusa head (default: 2, as Hydra's heads; "
                        "docs/demo.md compares more); over a finished demo that differs in this "
                        "alone, only Medusa's heads, traces, checks and timings are made again")
    b.add_argument("--seed", type=int, default=0, metavar="N",
                   help="random seed of the whole build (default %(default)s)")
    b.add_argument("--threads", type=int, metavar="N",
                   help="CPU threads for torch's training, tracing and live checks (default: "
                        "torch's own choice, every core); every timing runs on one, as the app "
                        "and the benchmarks do")
    b.add_argument("--no-progress", action="store_true", help="no progress bars on stderr")
    b.add_argument("--redo", metavar="STAGES", default="",
                   help="comma-separated stages to run again over a finished demo built with the "
                        "same settings, e.g. latency,sweep; 'timing' re-measures every speed "
                        "figure of the demo on this machine (profiles, sweeps, the dynamic "
                        "recommendation) without training anything again, as the timing flags "
                        "say; 'runs' makes every trace, live check and sweep again, keeping the "
                        "training and the step profiles (after a change in how treeopt records "
                        "a run); run the same command again to resume it (default: none)")
    b.add_argument("--batches", metavar="B,B", type=int_list("--batches"), default=[],
                   help="with --redo timing: time only these batch sizes again, keeping the "
                        "others' timings; the measurement flags given (e.g. --sweep-target-se) "
                        "become theirs alone (default: every batch size)")
    _add_timing_flags(b)
    b.set_defaults(func=cmd_build, writes_directory=True)

    i = demo_sub.add_parser("info", help="headline numbers and file locations of a demo")
    i.add_argument("--demo-dir", metavar="DIR", help="default: the shipped data/demo")
    i.add_argument("--out", metavar="FILE", help="write the JSON here instead of stdout")
    i.set_defaults(func=cmd_info)


def _add_timing_flags(b: argparse.ArgumentParser) -> None:
    """How the build measures speed, one flag per timing setting of the config (default: the
    preset's); over a finished demo they change only with ``--redo timing``."""
    g = b.add_argument_group("timing", "how every speed figure is measured (step profiles, "
                             "sweeps, races; default: the preset's, or over a finished demo at "
                             "--out built alike, the demo's own); a finished demo takes other "
                             "values with --redo timing")
    for part, what, figure, command in (
            ("step", "step-profile record", "its step over its reference's", "profile step"),
            ("sweep", "sweep point", "its speed-up (a race: its ratio)", "tune")):
        g.add_argument(f"--{part}-rounds", type=int, metavar="R",
                       help=f"timed rounds per {what}, at least ({command} --rounds)")
        g.add_argument(f"--{part}-min-seconds", type=float, metavar="S",
                       help=f"more rounds until a {what} was timed S seconds ({command} "
                            "--min-seconds)")
        g.add_argument(f"--{part}-target-se", type=float, metavar="F",
                       help=f"more rounds until a {what}'s figure, {figure}, has at most "
                            f"this relative standard error ({command} --target-se)")
    g.add_argument("--sweep-prompts", type=int, metavar="N",
                   help="held-out prompts decoded at every sweep point (tune --prompt-count)")
    g.add_argument("--live-new-tokens", type=int, metavar="N",
                   help="tokens decoded per prompt in the step profiles and the sweeps (tune "
                        "and profile step --max-new-tokens)")
    g.add_argument("--timing-max-rounds", type=int, metavar="R",
                   help="rounds at most, for every record, point and race")
    g.add_argument("--sweep-race", action=argparse.BooleanOptionalAction, default=None,
                   help="where select's pick is not a sweep's measured best, race the two head "
                        "to head (tune --race-best)")
    g.add_argument("--sweep-batching", choices=BATCHINGS,
                   help="a batch-b sweep point decodes its prompts b at a time, or all in one "
                        "run of b rows, a finished row taking the next (tune --batching)")
    g.add_argument("--drafted-sweep", choices=DRAFTED_SWEEPS,
                   help="a lookup drafter's chains swept verified as drafted: at every sweep "
                        "size and select's pick, or select's pick alone (the presets' way)")
    g.add_argument("--step-shared-reference", action=argparse.BooleanOptionalAction,
                   default=None,
                   help="measure a round's step-profile records beside one shared "
                        "autoregressive decode, not each beside its own (profile step "
                        "--shared-reference)")
    g.add_argument("--sweep-together", action=argparse.BooleanOptionalAction, default=None,
                   help="time a batch size's sweep points together, against one "
                        "autoregressive decoding a round, not each against its own (tune "
                        "--together; the presets' way)")
    g.add_argument("--sweep-alongside", action=argparse.BooleanOptionalAction, default=None,
                   help="profile each sweep point's tree right before the point, into "
                        "sweep/KIND-alongside-DEVICE.json (tune --profile-alongside)")


def cmd_build(args: argparse.Namespace) -> int:
    import sys
    from dataclasses import replace

    from treeopt.decoding.models import check_device, set_threads
    from treeopt.demo.build import build_demo, summary
    from treeopt.demo.config import TIMING_FLAGS, plan

    check_device(args.device)
    set_threads(args.threads)
    config = plan(budget_minutes=args.budget_minutes, device=args.device, seed=args.seed,
                  base_layers=args.base_layers, medusa_head_layers=args.medusa_head_layers,
                  base_model=_named_or_path(args.base_model),
                  prompt_set=_named_or_path(args.prompt_set),
                  prose_set=_named_or_path(args.prose_set), dtype=args.dtype,
                  kinds=_kinds(args.kinds))
    timing = {name: getattr(args, name) for name in TIMING_FLAGS}
    config = replace(config, **{k: v for k, v in timing.items() if v is not None})
    redo = tuple(s.strip() for s in args.redo.split(",") if s.strip())
    manifest = build_demo(args.out, config, show_progress=not args.no_progress
                          and sys.stderr.isatty(), redo=redo,
                          own_timing={k for k, v in timing.items() if v is not None},
                          batches=tuple(args.batches))
    return emit(summary(manifest), None)


def _named_or_path(value: str | None) -> str | None:
    """An asset name as it is, a directory as an absolute path (the manifest records it)."""
    from pathlib import Path

    from treeopt.assets.registry import ASSETS

    return value if value is None or value in ASSETS else str(Path(value).resolve())


def _kinds(value: str | None) -> tuple[str, ...] | None:
    """``--kinds``: comma-separated drafter kinds, or ``all``."""
    from treeopt.demo.layout import KINDS

    if value is None:
        return None
    return KINDS if value.strip() == "all" else tuple(
        k.strip() for k in value.split(",") if k.strip())


def cmd_info(args: argparse.Namespace) -> int:
    from treeopt.demo.build import summary
    from treeopt.demo.layout import base_model_dir, demo_paths
    from treeopt.demo.load import read_manifest

    paths = demo_paths(args.demo_dir)
    manifest = read_manifest(paths)
    doc = summary(manifest)
    kinds = paths.kinds()
    model = base_model_dir(paths, manifest, required=False)
    doc["paths"] = {"model": str(model), "prompts": str(paths.prompts()),
                    **{f"{k}_heads": str(paths.heads(k)) for k in kinds},
                    **{f"{k}_trace": str(paths.trace(k)) for k in kinds},
                    **{f"{k}_growth": str(paths.growth(k)) for k in kinds}}
    return emit(doc, args.out)
