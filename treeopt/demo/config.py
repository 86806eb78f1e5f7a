"""What a demo build makes, sized to a time budget: typed settings and named presets.

The plan is a pure function of the budget and the device (throughputs are fixed planning figures,
not measurements), so the same command plans the same build everywhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from treeopt.assets.registry import ASSETS
from treeopt.demo.base_model import BaseConfig
from treeopt.demo.layout import KINDS
from treeopt.documents.dtypes import AUTO_DTYPE, DTYPES
from treeopt.documents.measure import MAX_ROUNDS, Measurement, MeasurementError
from treeopt.documents.sweep import BATCHINGS, DRAFTED_SWEEPS
from treeopt.errors import FieldError, TreeoptError
from treeopt.registry.kinds import drafter_kind

# Planning throughputs (training tokens per second) of the base-model presets below: a shared
# 2-core CPU and one data-centre GPU. Used to size the step counts, never measured at build time.
_THROUGHPUT = {"cpu": 4000.0, "cuda": 60000.0}
_BASE_SHARE, _HEAD_SHARE = 0.55, 0.1  # of the budget: base training, each head kind
_HEAD_COST = 1.5  # a head-training token costs about 1.5 base-training tokens (K vocab projections)
_HEAD_TOKENS = 4 * 256  # head_batch × head_seq_len of the presets
_PRESET_LAYERS = 8  # the presets' depth, which the planning throughputs are for


@dataclass(frozen=True)
class DemoConfig:
    """Every setting of a demo build; the manifest records it."""

    seed: int = 0
    device: str = "cpu"
    budget_minutes: float = 30.0
    # a pretrained base instead of the model trained here: an asset name of
    # treeopt.assets.registry.ASSETS (`treeopt fetch NAME`) or a local Hugging Face model
    # directory; read where it is, never copied into the demo (no tokenizer or base training)
    base_model: str | None = None
    # the calibration and held-out prompts: a prompt-set asset (``humaneval``) or a directory
    # holding calibration.jsonl and heldout.jsonl, copied into the demo (None: cut from the corpus)
    prompt_set: str | None = None
    # the second prompt set, where repeats are rare: a prompt-set asset (``sharegpt``: requests
    # people wrote, rendered with the base model's chat template) or a directory holding
    # heldout.jsonl (None: docstrings and comments of the corpus)
    prose_set: str | None = None
    dtype: str = "fp32"  # what the base model runs in for traces, checks and timing (auto:
    # the faster on this host, measured when the build starts: treeopt.profiling.dtype_probe)
    kinds: tuple[str, ...] = KINDS  # the drafters the build makes (a finished demo only gains)
    max_files: int | None = None  # a deterministic subset of the corpus (tests)
    vocab_size: int = 4096
    base: BaseConfig = field(default_factory=BaseConfig)
    num_heads: int = 4
    head_layers: int = 2  # residual blocks per head (Hydra: its input layer and one block)
    medusa_head_layers: int | None = None  # Medusa's residual blocks per head (None: head_layers)
    head_prefix_attention: bool = True  # Hydra++'s prefix layer, where the kind has one
    head_data_prompts: int = 1536  # train-part prompts the base model continues greedily …
    head_seq_len: int = 256  # … to this many tokens: the heads learn on the model's own text
    head_steps: int = 150
    head_batch: int = 4
    head_lr: float = 5e-3
    eagle_layers: int = 1  # decoder layers of the EAGLE drafter
    # EAGLE's learning rate (None: head_lr): its decoder layer diverges at the heads' 5e-3 on a
    # real model (SmolLM2, 120 steps: top-1 agreement 8% at 5e-3, 59% at 1e-3, 35% at 2e-4;
    # Medusa's 65% and Hydra's 71% at 5e-3, lower at 1e-3)
    eagle_lr: float | None = None
    draft_model_layers: int = 1  # decoder layers of the draft model (a copy of the base's first)
    calibration_prompts: int = 640
    heldout_prompts: int = 192
    prose_prompts: int = 64  # docstrings and comments of the same files: where repeats are rare
    prompt_tokens: tuple[int, int] = (24, 64)
    max_new_tokens: int = 256
    calibration_batch: int = 16
    top_k: int = 16
    sample_temperatures: tuple[float, ...] = (0.7, 1.0)  # sampled traces and growths shipped
    max_nodes: int = 128
    eval_sizes: tuple[int, ...] = (16, 64)
    latency_context: tuple[int, ...] = (64, 320)
    latency_tokens: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    latency_repeats: int = 10
    live_batches: tuple[int, ...] = (1, 2, 4, 8)  # step profile and sweep batch sizes
    step_sizes: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    step_rounds: int = 3
    sweep_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    sweep_prompts: int = 8
    sweep_rounds: int = 3
    live_new_tokens: int = 64  # new tokens per prompt in the step profile and the sweep
    # how long each speed figure is measured (treeopt.documents.measure): a step-profile record (the
    # dynamic ones too) at least step_rounds rounds, more until step_min_seconds and until its
    # step over the reference's has a relative standard error of at most step_target_se (0: no
    # target); a sweep point (and a race) alike on its speed-up; every timing at most
    # timing_max_rounds rounds. The defaults are the fixed rounds the settings began with.
    step_min_seconds: float = 0.0
    step_target_se: float = 0.0
    sweep_min_seconds: float = 0.0
    sweep_target_se: float = 0.0
    timing_max_rounds: int = MAX_ROUNDS
    # a batch size timed otherwise than the rest (``--redo timing --batches``): per batch size,
    # its own values of some of the settings above (MEASURE_SETTINGS), e.g. {"8": {
    # "sweep_target_se": 0.025}}; its step-profile records and sweep points say so too
    batch_timing: dict[str, dict[str, float]] = field(default_factory=dict)
    sweep_race: bool = False  # where select's pick is not the measured best, race the two
    sweep_alongside: bool = False  # profile each sweep point's tree right before the point
    # a batch size's sweep points timed together against one autoregressive decoding a round
    # (tune(together=True)), not each against its own: False, what a demo recording no such
    # setting was timed with; the presets time them together
    sweep_together: bool = False
    # a round's step-profile records measured beside one shared autoregressive decode
    # (profile_steps(shared=True)), not each beside its own: False, what a demo recording no
    # such setting was profiled with
    step_shared_reference: bool = False
    # a lookup drafter's chains swept verified as drafted: at every swept chain size and
    # select's pick ("sizes": what a demo recording no such setting was swept with), or select's
    # pick alone per batch size ("pick": the presets')
    drafted_sweep: str = "sizes"
    # a batch-b sweep point: its prompts b at a time ("static"), or all in one run of b rows, a
    # finished row taking the next prompt, as a serving engine batches ("continuous")
    sweep_batching: str = "static"
    live_threads: int = 1  # torch threads while timing: the app and the benchmarks use one
    # the prompt-lookup drafter: chains of up to lookup_depth tokens, after the longest suffix
    # match of 1 … lookup_max_n tokens (Hugging Face's rule; HF's own default max is 2)
    lookup_depth: int = 16
    lookup_max_n: int = 3
    # the n-gram trie drafter (SGLang's NGRAM rule per row): trees up to trie_depth deep, from a
    # trie of paths of up to trie_max_depth tokens (SGLang's max_trie_depth default, 18)
    trie_depth: int = 10
    trie_max_depth: int = 18
    dynamic_topk: tuple[int, ...] = (1, 2, 4, 8)  # the EAGLE drafter's dynamic traces …
    dynamic_steps: int = 6  # … up to this many steps …
    dynamic_prompts: int = 256  # … over this many calibration prompts …
    dynamic_heldout_prompts: int | None = None  # … and held-out ones (None: every one)
    dynamic_check: tuple[tuple[int, int, int], ...] = (  # (topk, steps, draft tokens) decoded
        (1, 4, 5), (2, 4, 8), (4, 4, 16), (8, 5, 32))  # live on held-out prompts, checked
    dynamic_check_prompts: int = 48
    dynamic_profile: tuple[tuple[int, int, int], ...] = (  # settings the dynamic step profile
        (1, 2, 3), (1, 4, 5), (1, 6, 7), (2, 3, 8), (2, 5, 16), (4, 2, 8), (4, 4, 32),  # times
        (8, 2, 16), (8, 3, 64), (4, 6, 64))

    def __post_init__(self) -> None:
        self._check_base()
        if self.medusa_head_layers is not None and self.medusa_head_layers < 1:
            raise FieldError("medusa_head_layers",
                             f"must be at least 1, got {self.medusa_head_layers}")
        for name in ("lookup_depth", "lookup_max_n", "trie_depth", "trie_max_depth",
                     "prose_prompts"):
            if getattr(self, name) < 1:
                raise TreeoptError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.device not in ("cpu", "cuda"):
            raise FieldError("device", f"{self.device!r}: expected cpu or cuda")
        if self.drafted_sweep not in DRAFTED_SWEEPS:
            raise FieldError("drafted_sweep", f"{self.drafted_sweep!r}: expected "
                             f"{' or '.join(DRAFTED_SWEEPS)}")
        if self.sweep_batching not in BATCHINGS:
            raise FieldError("sweep_batching",
                             f"{self.sweep_batching!r}: expected static or continuous")
        if self.budget_minutes <= 0:
            raise FieldError("budget_minutes", f"must be positive, got {self.budget_minutes}")
        if max(self.eval_sizes) > self.max_nodes:
            raise TreeoptError(f"evaluation sizes {self.eval_sizes} exceed max_nodes "
                               f"{self.max_nodes}")
        if not 1 <= self.live_new_tokens <= self.max_new_tokens:  # the traces' positions
            raise FieldError("live_new_tokens", f"must be from 1 to the traces' "
                             f"{self.max_new_tokens} tokens, got {self.live_new_tokens}")
        if not max(self.live_batches) <= self.sweep_prompts <= self.heldout_prompts:
            raise FieldError("sweep_prompts", f"must be from the largest batch, "
                             f"{max(self.live_batches)}, to the {self.heldout_prompts} held-out "
                             f"prompts, got {self.sweep_prompts}")
        self._check_batch_timing()
        for part in ("step", "sweep"):  # the measurement rule's own checks, said of our fields
            for batch in (None, *map(int, self.batch_timing)):
                try:
                    self.measurement(part, batch)
                except MeasurementError as exc:
                    name = ("timing_max_rounds" if exc.field == "max_rounds"
                            else f"{part}_{exc.field}")
                    at = "" if batch is None else f" (batch {batch}'s own)"
                    raise FieldError(name, exc.rule + at) from None
        need = self.prompt_tokens[1] + self.max_new_tokens + max(self.eval_sizes) + 1
        if self.base_model is None and need > self.base.max_positions:
            raise TreeoptError(f"prompts of {self.prompt_tokens[1]} tokens, {self.max_new_tokens} "
                               f"new tokens and a tree need {need} positions, more than "
                               f"{self.base.max_positions}")

    def _check_base(self) -> None:
        """The base model, prompt set, dtype and drafter kinds name what exists; ``kinds`` is
        kept in :data:`~treeopt.demo.layout.KINDS` order."""
        for name, kind in (("base_model", "model"), ("prompt_set", "prompts"),
                           ("prose_set", "prompts")):
            value = getattr(self, name)
            if value in ASSETS and ASSETS[value].kind != kind:
                known = ", ".join(n for n, a in ASSETS.items() if a.kind == kind)
                raise FieldError(name, f"{value!r} is a {ASSETS[value].kind} asset; expected a "
                                 f"{kind} asset ({known}) or a directory")
        if self.dtype not in (*DTYPES, AUTO_DTYPE):
            raise FieldError("dtype", f"{self.dtype!r}: expected one of {', '.join(DTYPES)} or "
                             f"{AUTO_DTYPE}")
        if self.dtype == AUTO_DTYPE and self.base_model is None:
            raise FieldError("dtype", f"{AUTO_DTYPE} measures a pretrained base model's step in "
                             "each dtype: it needs a base_model (the demo's own model is trained "
                             "and runs in fp32)")
        unknown = [k for k in self.kinds if k not in KINDS]
        if unknown or not self.kinds:
            raise FieldError("kinds", f"{','.join(unknown) or 'none'}: expected some of "
                             f"{', '.join(KINDS)}")
        object.__setattr__(self, "kinds", tuple(k for k in KINDS if k in self.kinds))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _check_batch_timing(self) -> None:
        """``batch_timing`` names batch sizes the build times (``--batches``), and measurement
        settings."""
        for batch, settings in self.batch_timing.items():
            if not str(batch).isdigit() or int(batch) not in self.live_batches:
                raise FieldError("batches", f"must be among the batch sizes timed "
                                 f"({', '.join(map(str, self.live_batches))}), got {batch!r}")
            if unknown := [k for k in settings if k not in MEASURE_SETTINGS]:
                raise FieldError("batches", f"{batch} is timed apart by the measurement "
                                 f"settings alone ({', '.join(MEASURE_SETTINGS)}), not by "
                                 f"{', '.join(unknown)}")

    def measurement(self, part: Literal["step", "sweep"], batch: int | None = None,
                    ) -> Measurement:
        """How long a ``step`` profile record or a ``sweep`` point (and a race) is measured, at
        ``batch`` where that batch size is timed otherwise (``batch_timing``).

        >>> c = DemoConfig(sweep_target_se=0.015, sweep_min_seconds=36)
        >>> c.measurement("sweep")
        Measurement(rounds=3, min_seconds=36, target_se=0.015, max_rounds=64)
        >>> replace(c, batch_timing={"8": {"sweep_target_se": 0.01}}).measurement("sweep", 8)
        Measurement(rounds=3, min_seconds=36, target_se=0.01, max_rounds=64)
        """
        if part not in ("step", "sweep"):
            raise ValueError(f"part {part!r}: expected step or sweep")  # a caller's bug
        own = self.batch_timing.get(str(batch), {})

        def setting(name: str) -> Any:
            return own.get(name, getattr(self, name))

        return Measurement(rounds=int(setting(f"{part}_rounds")),
                           min_seconds=setting(f"{part}_min_seconds"),
                           target_se=setting(f"{part}_target_se"),
                           max_rounds=int(setting("timing_max_rounds")))

    def measurements(self, part: Literal["step", "sweep"]) -> dict[int, Measurement]:
        """The batch sizes timed otherwise than the rest, each with its :meth:`measurement`."""
        return {int(b): self.measurement(part, int(b)) for b in self.batch_timing}

    def lr_of(self, kind: str) -> float:
        """The ``kind`` drafter's learning rate: the first of its ``demo_lr`` settings set.

        >>> c = DemoConfig(eagle_lr=1e-3)
        >>> c.lr_of("medusa"), c.lr_of("eagle"), DemoConfig().lr_of("eagle")
        (0.005, 0.001, 0.005)
        """
        settings = [getattr(self, name) for name in drafter_kind(kind).demo_lr]
        return next(x for x in settings if x is not None)

    def layers_of(self, kind: str) -> int:
        """Layers of the ``kind`` drafter: residual blocks per head for Medusa and Hydra, decoder
        layers for EAGLE and the draft model (the first of the kind's ``demo_layers`` settings
        that is set).

        >>> c = DemoConfig(medusa_head_layers=8)
        >>> c.layers_of("medusa"), c.layers_of("hydra"), c.layers_of("eagle")
        (8, 2, 1)
        >>> DemoConfig().layers_of("medusa")
        2
        """
        settings = [getattr(self, name) for name in drafter_kind(kind).demo_layers]
        return next(n for n in settings if n is not None)


# settings that only the speed measurements read (the latency table, step profiles, sweeps and
# races, the dynamic step profile): a finished demo measured again (``--redo timing``) may
# change them and keep everything else
TIMING_SETTINGS = (
    "batch_timing", "latency_context", "latency_tokens", "latency_repeats", "live_batches",
    "step_sizes", "step_rounds", "step_min_seconds", "step_target_se", "step_shared_reference",
    "sweep_sizes", "sweep_prompts", "sweep_rounds", "sweep_min_seconds", "sweep_target_se",
    "timing_max_rounds", "sweep_race", "sweep_alongside", "sweep_together", "sweep_batching",
    "drafted_sweep", "live_new_tokens", "live_threads", "dynamic_profile")
# settings that only the dynamic stage reads (the EAGLE drafter's dynamic trees): a finished demo
# without an EAGLE drafter never used them, so a build adding one may change them
DYNAMIC_SETTINGS = ("dynamic_topk", "dynamic_steps", "dynamic_prompts", "dynamic_heldout_prompts",
                    "dynamic_check", "dynamic_check_prompts", "dynamic_profile")
# settings that only the trained drafters read (their head data, training and layers): a finished
# demo that made none of them (a pretrained preset's weightless drafters) never used them, so a
# build adding trained drafters to it may change them and keep everything it has
TRAINING_SETTINGS = (
    "head_layers", "medusa_head_layers", "head_prefix_attention", "head_data_prompts",
    "head_seq_len", "head_steps", "head_batch", "head_lr", "eagle_layers", "eagle_lr",
    "draft_model_layers")
# how long a step-profile record and a sweep point are measured: what a batch size may set for
# itself (DemoConfig.batch_timing)
MEASURE_SETTINGS = ("step_rounds", "step_min_seconds", "step_target_se", "sweep_rounds",
                    "sweep_min_seconds", "sweep_target_se", "timing_max_rounds")
# the timing settings `treeopt demo build` takes as flags, one each (--sweep-target-se …)
TIMING_FLAGS = ("step_rounds", "step_min_seconds", "step_target_se", "step_shared_reference",
                "sweep_prompts", "sweep_rounds", "sweep_min_seconds", "sweep_target_se",
                "timing_max_rounds", "sweep_race", "sweep_alongside", "sweep_together",
                "sweep_batching", "drafted_sweep", "live_new_tokens")

TINY = DemoConfig(
    budget_minutes=0.1, max_files=40, vocab_size=320,
    base=BaseConfig(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1,
                    intermediate_size=64, max_positions=128, seq_len=64, batch_size=4, steps=6,
                    warmup=2, ditto_share=0.5, ditto_phase=0.5),
    num_heads=2, head_data_prompts=4, head_steps=3, head_batch=2, head_seq_len=32,
    calibration_prompts=4, heldout_prompts=2, prose_prompts=2, prompt_tokens=(8, 24), max_new_tokens=24,
    calibration_batch=4, top_k=8, sample_temperatures=(1.0,), max_nodes=16, eval_sizes=(4,), latency_context=(16,),
    latency_tokens=(1, 4), latency_repeats=2, live_batches=(1, 2), step_sizes=(1, 2),
    step_rounds=1, sweep_sizes=(1, 2), sweep_prompts=2, sweep_rounds=1, live_new_tokens=8,
    dynamic_topk=(1, 2), dynamic_steps=2, dynamic_prompts=2, dynamic_check=((2, 2, 4),),
    dynamic_check_prompts=2, dynamic_profile=((1, 2, 3), (2, 2, 4)), lookup_depth=4,
    trie_depth=3, sweep_together=True, step_shared_reference=True,  # the build's shared path
    drafted_sweep="pick")


# the prompt set a pretrained base's preset takes unless told otherwise
PRESET_PROMPTS = {"smollm2-135m-instruct": "humaneval"}
PRESET_PROSE = {"smollm2-135m-instruct": "sharegpt"}  # a chat model's second set: chat requests
# no weights (the registry's n-gram kinds a demo makes): what a pretrained build ships first
PRETRAINED_KINDS = tuple(k for k in KINDS if drafter_kind(k).lookup and drafter_kind(k).demo_stage)


def pretrained(base_model: str = "smollm2-135m-instruct", *, prompt_set: str | None = None,
               seed: int = 0, device: str = "cpu") -> DemoConfig:
    """The build on a pretrained ``base_model`` (default SmolLM2-135M-Instruct, 30 layers, 135M
    parameters), sized to finish in 2 hours on a 2-core CPU with the weightless drafters;
    ``prompt_set``: default :data:`PRESET_PROMPTS`' for the model (HumanEval: 100 calibration,
    64 held-out problems), else prompts cut from the corpus.

    The dtype is ``auto``: the faster of bf16 and fp32 on the build host's base model step,
    measured before the first stage (:mod:`treeopt.profiling.dtype_probe`; bf16 where the CPU
    has AMX-BF16 or AVX512-BF16, fp32 where bf16 is emulated). 128 new tokens, greedy and
    T = 0.7 traces, a second prompt set of 32 requests people wrote (:data:`PRESET_PROSE`:
    ShareGPT's, in the model's chat template; else the corpus's docstrings and comments), the
    live check on the 8-node tree; step profiles and sweeps at batch 1, 2, 4, 8 of 1-, 2-, 4- and
    8-node trees, 8 held-out prompts × 32 tokens, every record and point timed to a 2% standard
    error (2 to 8 rounds), a batch size's points together; a lookup drafter's chains verified as
    drafted at select's picks alone.

    Time, measured (docs/demo.md) on a 2-core AVX2 CPU in fp32, the untimed work on both cores:
    67.6 minutes from scratch with fixed rounds (one per sweep point), of which the timing took
    38; the timing to 2% took 75 (``--redo timing``), so about 105 minutes in all. Per
    weightless drafter: greedy traces (100 + 64 prompts), the live check and T = 0.7 traces
    5–20 minutes, step profile and sweep 37–39; once: the autoregressive reference of the checks
    3, prose traces 1, the rest under a minute. A trained drafter added later (``--kinds``) is
    not in it. On the AMD host (AVX512-BF16, bf16) with suffix decoding: 1:58:52 from scratch.

    >>> c = pretrained()
    >>> c.base_model, c.prompt_set, c.prose_set, c.dtype, c.kinds
    ('smollm2-135m-instruct', 'humaneval', 'sharegpt', 'auto', ('prompt-lookup', 'ngram-trie', 'suffix'))
    """
    return DemoConfig(
        seed=seed, device=device, budget_minutes=PRETRAINED_BUDGET, base_model=base_model,
        prompt_set=prompt_set if prompt_set is not None else PRESET_PROMPTS.get(base_model),
        prose_set=PRESET_PROSE.get(base_model),
        dtype=AUTO_DTYPE, kinds=PRETRAINED_KINDS, calibration_prompts=100, heldout_prompts=64,
        prose_prompts=32, max_new_tokens=128, calibration_batch=16, sample_temperatures=(0.7,),
        max_nodes=64, eval_sizes=(8,), latency_context=(256,),
        latency_tokens=(1, 2, 4, 8, 16, 32, 64), latency_repeats=5, live_batches=(1, 2, 4, 8),
        step_sizes=(1, 2, 4, 8), step_rounds=2, sweep_sizes=(1, 2, 4, 8), sweep_prompts=8,
        sweep_rounds=1, live_new_tokens=32,
        # a batch-8 record or point's steady window is a few steps long: fixed rounds left its
        # figure 2-4% noisy on a shared 2-core host, so every one is timed to a 2% standard
        # error (8 rounds at most; docs/demo.md, "Timed to a target")
        step_target_se=0.02, sweep_target_se=0.02, timing_max_rounds=8,
        # a batch size's points against one autoregressive decoding a round: SmolLM2's sweeps
        # took 1.4-2.0× less time, the same speed-ups within their noise (docs/demo.md, "Points
        # timed together")
        sweep_together=True,
        # a lookup drafter's chains verified as drafted: select's pick per batch size, beside the
        # whole chains of every size (docs/demo.md, "Drafted chains: the picks alone")
        drafted_sweep="pick",
        # each step-profile record beside its own reference: shared ones took 1.3-2.0× less time,
        # but the preset built so priced its batch-8 points up to 13% high (docs/demo.md, "Step
        # profiles with one shared reference")
        # the trained drafters, when added (--kinds): head data and dynamic traces sized down
        head_data_prompts=256, head_seq_len=256, head_steps=300, eagle_lr=1e-3,
        # the dynamic traces: a dynamic pass over the 49,152-token vocabulary took 2–4 min per
        # top-k for 32 prompts (2026-12-02), so 16 held-out prompts, not all 64
        dynamic_prompts=32, dynamic_heldout_prompts=16,
        dynamic_check_prompts=8, dynamic_profile=((1, 4, 5), (2, 4, 8), (4, 4, 16)))


PRETRAINED_BUDGET = 120.0  # minutes: what :func:`pretrained` is sized for (the budget sizes nothing)


def plan(*, budget_minutes: float | None = None, device: str = "cpu", seed: int = 0,
         base_layers: int | None = None, medusa_head_layers: int | None = None,
         base_model: str | None = None, prompt_set: str | None = None, dtype: str | None = None,
         kinds: tuple[str, ...] | None = None, prose_set: str | None = None) -> DemoConfig:
    """The build that fits ``budget_minutes`` (default 30) on ``device``: step counts from
    planning figures; on a pretrained ``base_model`` the preset :func:`pretrained` (budget
    default :data:`PRETRAINED_BUDGET`, which sizes nothing there).

    ``base_layers``: the base model's decoder layers instead of the preset's 8; the planning
    throughput scales inversely with them, so a base twice as deep needs twice the budget for the
    same training steps. ``medusa_head_layers``: residual blocks per Medusa head instead of
    ``head_layers`` (2); more blocks cost little time and accept more (docs/demo.md,
    ``--medusa-head-layers``). ``prompt_set``, ``prose_set``, ``dtype``, ``kinds``: instead of
    the preset's.
    A budget under 2 minutes plans the tiny pipeline check, on a pretrained base too.

    >>> c = plan(budget_minutes=30)
    >>> c.base.hidden_size, c.base.steps, c.head_steps
    (128, 1289, 468)
    >>> plan(budget_minutes=0.5).base.hidden_size  # too little time: the tiny test build
    32
    >>> deep = plan(budget_minutes=60, base_layers=16)
    >>> deep.base.num_layers, deep.base.steps, deep.head_steps
    (16, 1289, 468)
    >>> plan(base_model="smollm2-135m-instruct") == pretrained()
    True
    """
    if device not in _THROUGHPUT:
        raise FieldError("device", f"{device!r}: expected one of {sorted(_THROUGHPUT)}")
    if base_layers is not None and (base_layers < 1 or base_model is not None):
        raise FieldError("base_layers", f"must be at least 1, got {base_layers}"
                         if base_model is None else "a pretrained base has its own layers")
    if medusa_head_layers == DemoConfig.head_layers:
        medusa_head_layers = None  # the default, recorded as such (the same build)
    if budget_minutes is None:
        budget_minutes = 30.0 if base_model is None else PRETRAINED_BUDGET
    if budget_minutes < 2:
        config = replace(TINY, base_model=base_model, prompt_set=prompt_set)
    elif base_model is not None:
        config = pretrained(base_model, prompt_set=prompt_set)
    else:
        config = _planned(budget_minutes, device, base_layers)
    return replace(config, seed=seed, device=device, budget_minutes=budget_minutes,
                   medusa_head_layers=medusa_head_layers, dtype=dtype or config.dtype,
                   kinds=kinds or config.kinds, prose_set=prose_set or config.prose_set)


def _planned(budget_minutes: float, device: str, base_layers: int | None) -> DemoConfig:
    """The build that trains its own base model for ``budget_minutes`` on ``device``."""
    # CPU: 8 narrow layers (2.2M parameters): a step's fixed cost, which speculation amortises,
    # grows with depth, while drafting (one vocabulary projection per call) does not
    base = BaseConfig(num_layers=8, ditto_share=0.75) if device == "cpu" else BaseConfig(
        hidden_size=256, num_layers=8, num_heads=4, num_kv_heads=4, intermediate_size=704,
        batch_size=32, lr=2e-3, ditto_share=0.75)  # 7.5M parameters
    if base_layers is not None:
        base = replace(base, num_layers=base_layers)
    seconds = budget_minutes * 60.0
    rate = _THROUGHPUT[device] * _PRESET_LAYERS / base.num_layers
    steps = max(20, int(_BASE_SHARE * seconds * rate / base.tokens_per_step))
    base = replace(base, steps=steps, warmup=max(5, steps // 20))
    head_steps = max(20, int(_HEAD_SHARE * seconds * rate / _HEAD_COST / _HEAD_TOKENS))
    return DemoConfig(budget_minutes=budget_minutes, base=base, head_steps=head_steps,
                      sweep_together=True)
