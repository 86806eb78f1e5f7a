"""Live-decoding sub-commands: ``verify`` (one tree against autoregressive decoding) and
``tune`` (the live throughput sweep). Flags are parsed, inputs checked before any model loads,
then the library does the work."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from treeopt.cli.common import (
    add_heads_flag,
    add_live_flags,
    add_model_flags,
    add_out,
    add_prompts_flag,
    add_sampling_filters,
    add_target_se,
    check_writable,
    counted,
    emit,
    int_list,
    load_drafter_from,
    load_model_from,
    measurement_from,
    require,
)
from treeopt.documents.measure import MAX_ROUNDS
from treeopt.documents.sweep import BATCHINGS
from treeopt.engines.registry import FORMATS
from treeopt.errors import TreeoptError

SAMPLE_PROMPTS = 16  # the fewest prompts verify's default sample decodes (all, when fewer)
SAMPLE_TARGET_SE = 0.03  # the speed-up's relative standard error verify's sample stops at


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("verify", help="decode with a tree for real: acceptance, tokens/s, match")
    add_model_flags(p)
    add_heads_flag(p)
    p.add_argument("--tree", required=True, metavar="TREE",
                   help="growth JSON (with --size), selection JSON (its tree at --batch and "
                        "--context), tree JSON or a choices list in any form (required)")
    p.add_argument("--size", type=int, metavar="N", help="tree size, for growth files")
    p.add_argument("--context", type=int, metavar="S",
                   help="for a selection swept at several contexts: the point's context")
    p.add_argument("--tree-format", choices=FORMATS,
                   help="the TREE file's form (default: detected)")
    add_prompts_flag(p)
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N",
                   help="tokens decoded per prompt (default %(default)s)")
    p.add_argument("--batch", type=int, default=1, metavar="B",
                   help="prompts decoded together; with a selection, also the point whose tree "
                        "is decoded (default 1)")
    p.add_argument("--batching", choices=BATCHINGS, default="static",
                   help="prompts decoded --batch at a time (static), or all in one run of "
                        "--batch rows where a finished row takes the next prompt, as a serving "
                        "engine batches (continuous; needs --prompt-count, eager steps) "
                        "(default %(default)s)")
    _add_verify_measurement(p)
    p.add_argument("--trace", metavar="T.npz", help="predict E[L] from this trace, for comparison")
    p.add_argument("--held-out", metavar="T.npz", help="with --trace: the trace recorded on "
                   "the prompts decoded, walked over the live steps inside it (inside_trace; "
                   "default: --trace; --demo gives the demo's held-out trace)")
    p.add_argument("--drafted-only", action="store_true",
                   help="a lookup drafter's chain is verified only as far as it was drafted, "
                        "not at its full depth with holes (default: as the selection's point "
                        "was priced, select --drafted-only; else off)")
    add_decode_mode_flags(p)
    _add_compile(p)
    add_out(p)
    p.set_defaults(func=cmd_verify)
    _register_tune(sub)


def _add_verify_measurement(p: argparse.ArgumentParser) -> None:
    """How long verify measures: a sample of the prompts by default, else rounds over them."""
    p.add_argument("--prompt-count", type=_prompt_count, metavar="N|all",
                   help="decode the first N prompts, or all of them, in --rounds rounds. "
                        f"Default: a sample: batches taken in order, each decoded once, at "
                        f"least {SAMPLE_PROMPTS} prompts, until the speed-up's standard error "
                        f"is at most --target-se or {MAX_ROUNDS} batches (or every prompt) "
                        "were decoded; the progress bar's total is what that is expected to "
                        "take")
    p.add_argument("--rounds", type=int, default=3, metavar="R",
                   help="with --prompt-count: timed rounds over its prompts, tree and "
                        "autoregressive steps interleaved; the speed-up is the median of the "
                        "rounds' (default %(default)s)")
    p.add_argument("--min-seconds", type=float, default=0.0, metavar="S",
                   help="more rounds (batches, for a sample), until tree and autoregressive "
                        "decoding were timed S seconds together (default 0)")
    p.add_argument("--target-se", type=float, metavar="F",
                   help=f"more rounds (batches, for a sample; up to {MAX_ROUNDS} in all) until "
                        "the relative standard error of the median speed-up is at most F (default: "
                        f"{SAMPLE_TARGET_SE} for a sample, 0 — --rounds only — with "
                        "--prompt-count)")


def add_decode_mode_flags(p: argparse.ArgumentParser) -> None:
    """How tokens are chosen and accepted: greedy, lossless sampling, or typical acceptance."""
    p.add_argument("--mode", choices=("greedy", "sample", "typical"), default="greedy",
                   help="greedy: lossless, outputs must equal autoregressive decoding; sample: "
                        "lossless sample-and-match, outputs must equal autoregressive sampling "
                        "with the same --seed; typical: Medusa's typical acceptance, sampled, "
                        "not lossless (default %(default)s)")
    p.add_argument("--temperature", type=float, default=0.7, metavar="T",
                   help="sampling temperature of --mode sample and typical (default "
                        "%(default)s)")
    add_sampling_filters(p, when="--mode sample")
    p.add_argument("--posterior-threshold", type=float, default=0.09, metavar="EPS",
                   help="ε of --mode typical: a token passes with probability above "
                        "min(ε, α·exp(−entropy)) (default %(default)s)")
    p.add_argument("--posterior-alpha", type=float, metavar="ALPHA",
                   help="α of --mode typical (default √ε)")
    p.add_argument("--seed", type=int, default=0, metavar="N",
                   help="seed of --mode sample's per-position draws and --mode typical's "
                        "sampling (default %(default)s)")


def decode_config(args: argparse.Namespace) -> Any:
    """The DecodeConfig the decoding flags name (checked: one line per bad value; the
    tokenizer's end of sequence is the library's to add, once it is loaded)."""
    from treeopt.decoding.config import DecodeConfig

    return DecodeConfig(max_new_tokens=args.max_new_tokens, mode=args.mode,
                        temperature=args.temperature, top_k=args.sample_top_k,
                        top_p=args.top_p, posterior_threshold=args.posterior_threshold,
                        posterior_alpha=args.posterior_alpha, seed=args.seed)


def check_trace_sampling(trace: Any, config: Any, *, source: str,
                         greedy: str = "greedy decoding") -> None:
    """A trace predicts the decoding ``config`` names only if it was recorded for it: greedy
    traces greedy decoding, a sampled trace sampling at its own temperature, top-p and top-k
    (``greedy``: who needs the greedy trace, for the message)."""
    recorded = trace.sampling
    if config.mode == "typical":
        return  # typical acceptance is compared with whatever trace is given, as before
    if config.mode == "greedy" and recorded is not None:
        raise TreeoptError(f"{source} was calibrated on sampled continuations (temperature "
                           f"{recorded['temperature']}); {greedy} needs a greedy trace")
    if config.mode == "sample":
        want = {"temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k}
        if recorded is None:
            raise TreeoptError(f"{source} was calibrated on greedy continuations; --mode sample "
                               "needs a trace calibrated with --temperature")
        differ = [f"{k} {recorded.get(k)} vs {v}" for k, v in want.items()
                  if recorded.get(k) != v]
        if differ:
            raise TreeoptError(f"{source} was calibrated with other sampling settings than "
                               f"these ({', '.join(differ)})")


def _register_tune(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="the live throughput sweep: tokens/s of every tree size per "
                                    "batch size, measured beside the prediction")
    add_live_flags(p)
    p.add_argument("--sizes", type=int_list("--sizes"), metavar="LIST",
                   help="tree sizes (default 1,2,4,8,16,32,64, up to the growth's size)")
    p.add_argument("--max-depths", type=int_list("--max-depths"), metavar="LIST",
                   help="depth caps to sweep besides the uncapped trees")
    p.add_argument("--prompt-count", type=int, default=16, metavar="N",
                   help="prompts decoded at every point (default 16)")
    p.add_argument("--max-new-tokens", type=int, default=128, metavar="N",
                   help="tokens decoded per prompt (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3, metavar="R",
                   help="timed rounds per point, tree and autoregressive steps interleaved; "
                        "the speed-up is the median of the rounds' (default %(default)s)")
    p.add_argument("--min-seconds", type=float, default=0.0, metavar="S",
                   help="more rounds, until a point has been timed S seconds (tree and "
                        "autoregressive together): a round at batch 8 is short and measures "
                        "less well than one at batch 1 (default 0: --rounds only)")
    add_target_se(p, what="a point's mean speed-up over its rounds")
    p.add_argument("--step-profile", nargs="+", metavar="S.json",
                   help="predict every point with this step profile (and measure select's "
                        "pick); several of one setup are pooled, e.g. one taken before the "
                        "sweep and one after: an existing sweep is then predicted again")
    p.add_argument("--shared-verify", nargs="+", metavar="S.json",
                   help="with --step-profile: other drafters' step profiles of the same model "
                        "and setup, which price the verify step too (as select's; --demo: the "
                        "demo's other drafters')")
    p.add_argument("--race-best", action="store_true",
                   help="with --step-profile: where select's pick is not the measured best, "
                        "race the two head to head (the best of several noisy points is "
                        "measured high)")
    p.add_argument("--trace", metavar="T.npz",
                   help="calibration trace: predicted E[L] is its per-step walk")
    p.add_argument("--profile-alongside", metavar="S.json",
                   help="profile each point's tree right before the point is measured, into "
                        "this step profile (to --target-se; resumed): a profile taken at the "
                        "sweep's own moments, free of the host's drift between a profile and "
                        "the points; give it to --step-profile to predict the points from it")
    p.add_argument("--batching", choices=BATCHINGS, default="static",
                   help="a batch-B point decodes its prompts B at a time (static), or all in "
                        "one run of B rows where a finished row takes the next prompt, as a "
                        "serving engine batches (continuous: the rows' long continuations "
                        "keep counting; eager steps only) (default %(default)s)")
    p.add_argument("--drafted-only", action="store_true",
                   help="a lookup drafter's chains, each step verifying only what was drafted, "
                        "predicted and picked as select --drafted-only prices them (--trace "
                        "must record drafted lengths); eager steps only")
    way = p.add_mutually_exclusive_group()
    way.add_argument("--together", dest="together", action="store_const", const=True,
                     help="time each batch size's points together (the default; an --out "
                          "sweep timed apart resumes apart): every round decodes the prompts "
                          "once autoregressively and once with each tree still measuring (with "
                          "--target-se, a point that met it sits out the others' rounds), all "
                          "their steps interleaved (SmolLM2's sweeps: 1.4-2x less time than "
                          "apart, the same speed-ups); recorded, and resumed only so")
    way.add_argument("--apart", dest="together", action="store_const", const=False,
                     help="time each point against an autoregressive decoding of its own "
                          "(the default where --out was timed so)")
    _add_compile(p)
    p.add_argument("--retime", action="store_true",
                   help="measure the --batch sizes again: their points in --out are replaced by "
                        "this run's, timed as its flags say and recorded so; the other batch "
                        "sizes' points are kept, each batch size timed one way")
    p.add_argument("--out", required=True, metavar="FILE",
                   help="the sweep (JSON); an existing one is resumed (required)")
    p.set_defaults(func=cmd_tune)


def _add_compile(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compile", action="store_true",
                   help="run steps through torch.compile on a static cache (on CUDA: CUDA "
                        "graphs); each new tree shape compiles first. For CUDA: on a CPU the "
                        "demo's compiled steps ran slower than eager ones")


SIZES = (1, 2, 4, 8, 16, 32, 64)


def _prompt_count(text: str) -> int | str:
    """``--prompt-count``: a number ≥ 1, or ``all``."""
    if text == "all":
        return text
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'all', got {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be ≥ 1, got {count}")
    return count


def _prompts(args: argparse.Namespace, tok: Any) -> list[list[int]]:
    from treeopt.documents.prompts import encode, read_texts

    return encode(tok, read_texts(args.prompts), source=" ".join(args.prompts))


def cmd_verify(args: argparse.Namespace) -> int:
    from treeopt.decoding.verify import Verification, verify
    from treeopt.documents.prompts import read_texts
    from treeopt.model.trace import RankTrace
    from treeopt.pricing.tree_files import load_tree_arg, picks_drafted_chain

    tree = load_tree_arg(args.tree, size=args.size, fmt=args.tree_format, batch=args.batch,
                         context=args.context, decoding_batch=True)
    drafted = args.drafted_only or picks_drafted_chain(args.tree, batch=args.batch,
                                                       context=args.context)
    decoding = replace(decode_config(args), drafted_only=drafted)  # bad flags fail first
    trace = RankTrace.load(args.trace) if args.trace else None
    if trace is not None:
        check_trace_sampling(trace, decoding, source=args.trace)
    require(not args.held_out or trace is not None, "--held-out needs --trace (the trace that "
            "predicts E[L]); to walk the held-out trace alone, give it as --trace")
    held_out = RankTrace.load(args.held_out) if args.held_out else None
    if held_out is not None:
        check_trace_sampling(held_out, decoding, source=args.held_out)
    require(args.batch >= 1, f"--batch must be ≥ 1, got {args.batch}")
    texts = read_texts(args.prompts)
    sample = args.prompt_count is None  # else a number of prompts, or all
    count = args.prompt_count if isinstance(args.prompt_count, int) else len(texts)
    require(count <= len(texts), f"--prompt-count {count}: only {len(texts)} prompts in "
            f"{' '.join(args.prompts)}")
    require(args.batch <= count, f"--batch {args.batch} is larger than the {count} prompts"
            + (f" in {' '.join(args.prompts)}" if count == len(texts) else " of --prompt-count"))
    continuous = args.batching == "continuous"
    require(not continuous or not sample, "--batching continuous decodes every prompt in one "
            "run: give --prompt-count N (or all)")
    require(not continuous or not args.compile,
            "--batching continuous runs eager steps; leave out --compile")
    require(not drafted or not args.compile,
            "drafted-only steps (--drafted-only, or a selection's drafted chain) vary in size, "
            "which compiled steps do not; leave out --compile")
    run = Verification(tree, decoding, trace=trace, held_out=held_out, batch=args.batch,
                       sample_prompts=sample,
                       measure=_verify_measurement(args, sample), compile=args.compile,
                       source=args.tree, continuous=continuous)
    model, tok = load_model_from(args)
    heads = load_drafter_from(args, model)
    bar, tick = counted("verify", "decode")
    report = verify(model, heads, run, _prompts(args, tok)[:count],
                    eos_token_id=getattr(tok, "eos_token_id", None), progress=tick,
                    meta={"model": args.model, "heads_dir": args.heads, "device": args.device,
                          "dtype": args.dtype})
    bar.close()
    print(f"verify: {report.verdict()}", file=sys.stderr)
    if ((report.predicted or {}).get("inside_trace") or {}).get("served_as_ranked") is False:
        print("verify: --batching continuous --batch 1 (with --prompt-count) serves the prompts "
              "in turn through one cache, as calibrate ranked them", file=sys.stderr)
    return emit(report.to_json(), args.out)


def _verify_measurement(args: argparse.Namespace, sample: bool) -> Any:
    """Verify's measurement: for a ``sample``, batches of prompts, at least
    :data:`SAMPLE_PROMPTS` prompts' worth; with ``--prompt-count``, rounds as the flags say."""
    target = args.target_se if args.target_se is not None else SAMPLE_TARGET_SE if sample else 0.0
    measure = measurement_from(args, target_se=target)
    return replace(measure, rounds=-(-SAMPLE_PROMPTS // args.batch)) if sample else measure


def _check_tune_flags(args: argparse.Namespace, *, profiled: bool, prompts: int) -> None:
    """Refuse tune's flags that do not go together (``profiled``: a step profile was given;
    ``prompts``: how many --prompts holds), before a model loads."""
    require(not args.race_best or profiled,
            "--race-best needs --step-profile (select's pick is what is raced)")
    require(args.prompt_count >= max(args.batch), f"--prompt-count {args.prompt_count} is "
            f"smaller than --batch {max(args.batch)}")
    require(not args.profile_alongside or not args.compile,
            "--profile-alongside times the eager loop; leave out --compile")
    require(args.batching == "static" or not args.compile,
            "--batching continuous runs eager steps (one compiled graph per batch shape); "
            "leave out --compile")
    require(not args.drafted_only or not args.compile,
            "--drafted-only steps vary in size, which compiled steps do not; leave out --compile")
    require(not args.drafted_only or not profiled or args.trace,
            "--drafted-only with --step-profile needs --trace: drafted chains are priced from "
            "the lengths it records")
    require(not args.profile_alongside or Path(args.profile_alongside).resolve() not in {
        Path(f).resolve() for f in [args.out, *(args.step_profile or ())]},
        f"--profile-alongside {args.profile_alongside}: the file of --out or --step-profile; "
        "name a file of its own")
    require(prompts >= args.prompt_count, f"--prompts: {prompts} prompts, fewer than "
            f"--prompt-count {args.prompt_count}")
    require(not args.retime or not args.profile_alongside,
            "--retime measures points again beside an alongside profile that keeps its "
            "records; leave out --profile-alongside, or write both anew")


def cmd_tune(args: argparse.Namespace) -> int:
    from treeopt.cli.select_sources import profile_costs
    from treeopt.decoding.config import DecodeConfig
    from treeopt.decoding.live_sweep import family_tree, tune
    from treeopt.decoding.models import attention_of
    from treeopt.documents.prompts import read_texts
    from treeopt.documents.step_profile import StepProfile
    from treeopt.documents.sweep import timed_together
    from treeopt.model.growth import Growth
    from treeopt.model.trace import RankTrace

    growth = Growth.load(args.growth)
    caps = [None, *(args.max_depths or [])]
    sizes = args.sizes or [n for n in SIZES if n <= growth.max_nodes]
    for cap in caps:  # fail on a size beyond the growth before loading a model
        for n in sizes:
            family_tree(growth, n, cap)
    trace = RankTrace.load(args.trace) if args.trace else None
    if trace is not None:
        check_trace_sampling(trace, DecodeConfig(), source=args.trace,
                             greedy="tune decodes greedily and")
    profile = StepProfile.pool(args.step_profile) if args.step_profile else None
    named = " ".join(args.step_profile or ())
    texts = read_texts(args.prompts)
    measure = measurement_from(args)
    _check_tune_flags(args, profiled=profile is not None, prompts=len(texts))
    costs = profile_costs(args, profile)  # the profiles checked before a model loads
    if args.profile_alongside:  # first written after a point: check it before loading
        check_writable(Path(args.profile_alongside), directory=False, out_flag="--profile-alongside")
    model, tok = load_model_from(args)
    heads = load_drafter_from(args, model)
    if profile is not None:
        from treeopt.profiling.step import check_setup

        check_setup(profile, model, source=f"--step-profile {named}")
        require(profile.heads == heads.config.to_dict(), f"--step-profile "
                f"{named}: profiled with other heads ({profile.kind}, "
                f"{profile.heads.get('num_heads')} heads) than --heads {args.heads}")
    prompts = _prompts(args, tok)[: args.prompt_count]
    alongside = None
    if args.profile_alongside:
        from treeopt.profiling.alongside import AlongsideProfile

        alongside = AlongsideProfile.for_sweep(model, heads, prompts,
                                               out=args.profile_alongside,
                                               max_new_tokens=args.max_new_tokens,
                                               measure=measure, batches=args.batch)
    bar, report = counted("tune", "point")
    sweep = tune(model, heads, growth, prompts, batch=args.batch, sizes=sizes,
                 depth_caps=caps, out=args.out, measure=measure, costs=costs, trace=trace,
                 config=DecodeConfig(max_new_tokens=args.max_new_tokens,
                                     eos_token_id=getattr(tok, "eos_token_id", None)),
                 meta={"model": args.model, "growth": args.growth, "device": args.device,
                       "dtype": args.dtype, "attention": attention_of(model),
                       "threads": args.threads},
                 compile=args.compile, race_best=args.race_best, before_point=alongside,
                 continuous=args.batching == "continuous", drafted=args.drafted_only,
                 retime=args.retime, progress=report,
                 together=args.together if args.together is not None
                 else timed_together(args.out) is not False)
    bar.close()
    for row in sweep.summary():
        raced = (f"; {row['selected_share_of_best_raced']:.1%} raced head to head"
                 if "selected_share_of_best_raced" in row else "")
        pick = (f"; select picks {row['selected_size']} nodes: {row['selected_speedup']:.2f}× "
                f"({row['selected_share_of_best']:.1%} of the best{raced})"
                if "selected_size" in row else "")
        print(f"batch {row['batch']}: best measured {row['best_size']} nodes "
              f"(depth cap {row['best_max_depth']}), {row['best_speedup']:.2f}× autoregressive"
              f"{pick}", file=sys.stderr)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


