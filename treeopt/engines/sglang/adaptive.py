"""SGLang's adaptive speculation config (``--speculative-adaptive-config``): the file's format,
the rules its loader applies, the built-in default, and how a round is routed to a slot.

The file is a JSON object. Keys made of digits are batch-size slots, each
``{"candidate_steps": [...], knobs…}``; every other key is a global knob that each slot takes
unless it sets its own. The loader (``_load_adaptive_config`` in
``sglang/srt/speculative/adaptive_spec_params.py``, 0.5.13 – 0.5.23) checks only that each slot
has a non-empty list of non-negative ``int`` candidate steps (JSON ``true``/``false`` pass: a
Python bool is an int) and that one slot exists; :func:`loader_problems` applies exactly those
rules. A slot's decision rule is :class:`SlotState` (the EMA of accepted drafts and the
threshold walk of ``AdaptiveStepSlot``); :class:`treeopt.adaptive.policies.SGLangPolicy` replays
it round by round.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from treeopt.engines.rules import Controller, EngineFile
from treeopt.errors import TreeoptError
from treeopt.files import dumps

ADAPTIVE_TAB = "SGLang --speculative-adaptive-config"  # what the file is, in a title
KNOBS: tuple[str, ...] = ("ema_alpha", "update_interval", "warmup_batches", "down_hysteresis",
                          "up_hysteresis", "ceiling_coeff")


@dataclass(frozen=True)
class SGLangSlot:
    """One batch-size slot: its candidate steps (sorted, de-duplicated) and knobs, with the
    defaults of ``AdaptiveStepSlot.__init__``."""

    candidate_steps: tuple[int, ...]
    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0
    ceiling_coeff: float = 0.0

    def __post_init__(self) -> None:
        steps = tuple(sorted({int(s) for s in self.candidate_steps}))
        if not steps or steps[0] < 0:
            raise TreeoptError(f"candidate_steps must be a non-empty list of steps ≥ 0, got "
                             f"{list(self.candidate_steps)}")
        if self.update_interval < 1:  # SGLang divides by it at the first decision
            raise TreeoptError(f"update_interval must be ≥ 1, got {self.update_interval}")
        object.__setattr__(self, "candidate_steps", steps)

    def to_json(self) -> dict[str, Any]:
        return {"candidate_steps": list(self.candidate_steps),
                **{k: getattr(self, k) for k in KNOBS}}


def cuda_graph_batch_sizes(max_bs: int = 256) -> tuple[int, ...]:
    """SGLang's default decode capture list for speculative decoding: 1 … 8, then 10 … 32 by 2,
    40 … 64 by 4, 72 … 256 by 8, then by 16, up to ``max_bs``.

    >>> cuda_graph_batch_sizes(40)
    (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 40)
    """
    sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]
    sizes += list(range(272, max_bs + 1, 16))
    return tuple(s for s in sizes if s <= max_bs)


CUDA_GRAPH_BS = cuda_graph_batch_sizes()


@dataclass(frozen=True)
class SGLangConfig:
    """A whole adaptive setup: the slots (batch-size key → slot), ``--speculative-num-steps``
    (None: the middle of the union of candidate steps), the CUDA-graph capture list that routing
    pads to (None: CUDA graphs off), and whether the overlap scheduler runs (SGLang's default).

    >>> c = SGLangConfig.default()  # 31 is padded to the captured 32
    >>> c.union, c.start_steps, [c.route(b) for b in (1, 7, 8, 31, 33, 100)]
    ((0, 1, 3, 5, 7), 3, [1, 1, 8, 32, 32, 64])
    """

    slots: tuple[tuple[int, SGLangSlot], ...]
    num_steps: int | None = None
    cuda_graph_bs: tuple[int, ...] | None = CUDA_GRAPH_BS
    overlap: bool = True
    label: str = field(default="config", compare=False)

    def __post_init__(self) -> None:
        slots = tuple(sorted((int(k), s) for k, s in self.slots))
        if not slots:
            raise TreeoptError("slots needs at least one batch-size slot")
        if len({k for k, _ in slots}) != len(slots) or slots[0][0] < 0:
            raise TreeoptError(f"slots keys must be distinct batch sizes ≥ 0, got "
                             f"{[k for k, _ in slots]}")
        object.__setattr__(self, "slots", slots)
        if self.cuda_graph_bs is not None:
            object.__setattr__(self, "cuda_graph_bs", tuple(sorted(self.cuda_graph_bs)))
        if self.num_steps is not None and self.num_steps not in self.union:
            raise TreeoptError(f"num_steps {self.num_steps} is not in the adaptive config's "
                             f"candidate_steps {list(self.union)}; pass one of those values")

    @classmethod
    def default(cls, version: str = "0.5.23", **options: Any) -> SGLangConfig:
        """SGLang's built-in table (``DEFAULT_ADAPTIVE_CONFIG``) of ``version`` (0.5.14+)."""
        return cls(sglang_default_slots(version), label=f"sglang {version} default", **options)

    def capped(self, max_steps: int) -> SGLangConfig:
        """This setup without candidate steps above ``max_steps`` (a slot left with none keeps
        its smallest), starting where it started if that is still a candidate.

        >>> c = SGLangConfig.default().capped(6)
        >>> dict(c.slots)[1].candidate_steps, c.start_steps, c.label
        ((1, 3, 5), 3, 'sglang 0.5.23 default, steps above 6 dropped')
        """
        slots = tuple((k, replace(s, candidate_steps=tuple(c for c in s.candidate_steps
                                                           if c <= max_steps)
                                  or s.candidate_steps[:1])) for k, s in self.slots)
        union = {c for _, s in slots for c in s.candidate_steps}
        start = self.start_steps if self.start_steps in union else None
        return SGLangConfig(slots, num_steps=start, cuda_graph_bs=self.cuda_graph_bs,
                            overlap=self.overlap,
                            label=f"{self.label}, steps above {max_steps} dropped")

    @property
    def union(self) -> tuple[int, ...]:
        """Every slot's candidate steps together: what the runtime buffers are sized for."""
        return tuple(sorted({s for _, slot in self.slots for s in slot.candidate_steps}))

    @property
    def start_steps(self) -> int:
        """The resolved ``--speculative-num-steps``: given, or the union's middle element."""
        return self.num_steps if self.num_steps is not None else self.union[len(self.union) // 2]

    def route(self, batch: int) -> int:
        """The slot key a batch of ``batch`` requests feeds: pad to the smallest captured
        CUDA-graph batch size ≥ it (itself beyond the list), then the largest key ≤ that, else
        the smallest key."""
        g = batch
        if self.cuda_graph_bs is not None:
            i = bisect.bisect_left(self.cuda_graph_bs, batch)
            g = self.cuda_graph_bs[i] if i < len(self.cuda_graph_bs) else batch
        keys = [k for k, _ in self.slots]
        return keys[max(0, bisect.bisect_right(keys, g) - 1)]

    def to_json(self) -> dict[str, Any]:
        """The file SGLang reads: one entry per slot, every knob written out."""
        return {str(k): slot.to_json() for k, slot in self.slots}

    @classmethod
    def from_json(cls, doc: Any, *, source: str = "adaptive config",
                  **options: Any) -> SGLangConfig:
        """The setup of a file SGLang's loader accepts; refused as the loader refuses it
        (:func:`loader_problems`), or when a knob is not a number."""
        problems = loader_problems(doc)
        if problems:
            raise TreeoptError(f"{source}: {problems[0]}")
        top = {k: v for k, v in doc.items() if not k.isdigit()}
        slots = []
        for key, entry in doc.items():
            if key.isdigit():
                merged = {**top, **entry}
                try:
                    knobs = {k: _number(merged[k], k) for k in KNOBS if k in merged}
                    slots.append((int(key), SGLangSlot(tuple(merged["candidate_steps"]), **knobs)))
                except TreeoptError as exc:
                    raise TreeoptError(f"{source}: BS {key}: {exc}") from None
        return cls(tuple(slots), label=source, **options)


# SGLang's DEFAULT_ADAPTIVE_CONFIG: (key, candidate steps, down_hysteresis); up_hysteresis and
# ceiling_coeff are 0 in every slot
_SGLANG_DEFAULTS: dict[str, tuple[tuple[int, tuple[int, ...], float], ...]] = {
    "0.5.14": ((1, (1, 3, 7), -0.25), (8, (0, 1, 3), 0.0), (32, (0, 1), 0.0), (64, (0,), 0.0)),
    "0.5.20": ((1, (1, 3, 5, 7), -0.25), (8, (0, 1, 3), 0.0), (32, (0, 1), 0.0),
               (64, (0,), 0.0)),
}
_SGLANG_RELEASES = {**{f"0.5.{n}": "0.5.14" for n in range(14, 20)},
                    **{f"0.5.{n}": "0.5.20" for n in range(20, 24)}}


def sglang_default_slots(version: str = "0.5.23") -> tuple[tuple[int, SGLangSlot], ...]:
    """The built-in slots of SGLang ``version`` (0.5.14 – 0.5.23).

    >>> [s.candidate_steps for _, s in sglang_default_slots("0.5.14")][0]
    (1, 3, 7)
    """
    if version not in _SGLANG_RELEASES:
        raise TreeoptError(f"SGLang {version}: the adaptive rule replayed here is that of "
                           f"{', '.join(_SGLANG_RELEASES)}")
    return tuple((key, SGLangSlot(steps, down_hysteresis=down, up_hysteresis=0.0))
                 for key, steps, down in _SGLANG_DEFAULTS[_SGLANG_RELEASES[version]])


def _number(value: Any, name: str) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TreeoptError(f"{name} must be a number, got {value!r}")
    return int(value) if name in ("update_interval", "warmup_batches") else float(value)


def loader_problems(doc: Any) -> list[str]:
    """What SGLang's loader (0.5.13 – 0.5.23) refuses in ``doc``, a parsed JSON file, in the
    words of its errors; empty when it loads.

    >>> loader_problems({"1": {"candidate_steps": [1, 3]}, "ema_alpha": 7})
    []
    >>> loader_problems({"1": {"candidate_steps": [1.0]}})
    ['BS 1: candidate_steps must be a list of non-negative ints, got [1.0]']
    >>> loader_problems({"-1": {"candidate_steps": [1]}})[0][:60]
    'speculative_adaptive_config must contain at least one intege'
    """
    if not isinstance(doc, Mapping):
        return [f"speculative_adaptive_config must be a JSON object, got {type(doc).__name__} "
                "(SGLang fails on it with an AttributeError)"]
    problems = []
    for key, entry in doc.items():
        if not key.isdigit():
            continue
        if not isinstance(entry, Mapping):
            problems.append(f"BS {key}: the slot must be a JSON object, got "
                            f"{type(entry).__name__} (SGLang fails on it with an AttributeError)")
            continue
        steps = entry.get("candidate_steps")
        if (not isinstance(steps, list) or not steps
                or not all(isinstance(s, int) and s >= 0 for s in steps)):
            problems.append(f"BS {key}: candidate_steps must be a list of non-negative ints, "
                            f"got {steps!r}")
    if not any(k.isdigit() for k in doc):
        problems.append("speculative_adaptive_config must contain at least one integer-string "
                        'BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}. '
                        f"Got keys: {list(doc.keys())}")
    return problems


def launch_flags(config: SGLangConfig, config_path: str, *, draft_model: str = "DRAFT") -> str:
    """The server flags that run ``config`` from the file at ``config_path`` (top-k 1 chains;
    SGLang sets the draft tokens to steps + 1 itself).

    >>> launch_flags(SGLangConfig.default(), "a.json")
    '--speculative-algorithm EAGLE --speculative-draft-model-path DRAFT --speculative-eagle-topk 1 --speculative-adaptive --speculative-adaptive-config a.json'
    """
    flags = [f"--speculative-algorithm EAGLE --speculative-draft-model-path {draft_model}",
             "--speculative-eagle-topk 1 --speculative-adaptive",
             f"--speculative-adaptive-config {config_path}"]
    if config.num_steps is not None:
        flags.append(f"--speculative-num-steps {config.num_steps}")
    if not config.overlap:
        flags.append("--disable-overlap-schedule")
    return " ".join(flags)


def adaptive_file(config: SGLangConfig, path: str, *, draft_model: str = "DRAFT") -> EngineFile:
    """SGLang's adaptive config at ``path``, and its server flags."""
    return EngineFile("sglang", dumps(config.to_json()) + "\n",
                      launch_flags(config, path, draft_model=draft_model))


class SlotState:
    """One slot's running state, as SGLang's ``AdaptiveStepSlot`` keeps it: the current steps,
    the EMA of per-round batch-mean accepted drafts, and the rounds counted."""

    __slots__ = ("slot", "current", "ema", "count")

    def __init__(self, slot: SGLangSlot, start: int) -> None:
        self.slot = slot
        steps = slot.candidate_steps
        self.current = start if start in steps else steps[len(steps) // 2]
        self.ema = float(self.current - 1)
        self.count = 0

    def update(self, accepted: Sequence[int]) -> None:
        """Feed one verified round; decide at rounds warm-up + k · interval."""
        if not accepted:
            return
        s = self.slot
        if self.current > 0:  # the EMA is frozen while speculation is off
            mean = sum(accepted) / len(accepted)
            self.ema = (1 - s.ema_alpha) * self.ema + s.ema_alpha * mean
        self.count += 1
        if self.count <= s.warmup_batches:
            return
        if (self.count - s.warmup_batches) % s.update_interval != 0:
            return
        self.current = self._target()

    def _target(self) -> int:
        """The threshold walk: down while the EMA is at or below the lower neighbour's drop
        threshold; else up while it is above the current step's rise threshold; a zero step
        always probes the next candidate up."""
        s, c = self.slot, self.slot.candidate_steps
        i = i0 = c.index(self.current)
        if self.current == 0:
            i = min(i + 1, len(c) - 1)
            if c[i] > 0 and self.ema < 0:
                self.ema = float(c[i] - 1)
            return c[i]
        while i > 0 and self.ema <= (0.5 if c[i - 1] == 0 else c[i - 1] - 0.5) + s.down_hysteresis:
            i -= 1
        if i == i0:
            while i < len(c) - 1 and self.ema > c[i] - 0.5 + s.up_hysteresis:
                i += 1
        if s.ceiling_coeff > 0:
            cap = max(1, math.ceil(self.ema * s.ceiling_coeff))
            if cap < c[i] <= self.current:  # the cap never blocks a move up
                while i > 0 and c[i] > cap:
                    i -= 1
        return c[i]


CONTROLLER = Controller(
    "sglang", "SGLangPolicy", "0.5.14 – 0.5.23 (the newest on PyPI)",
    "sglang/srt/speculative/adaptive_spec_params.py (AdaptiveStepSlot, "
    "AdaptiveSpeculativeParams, _load_adaptive_config) and adaptive_runtime_state.py, "
    "0.5.23 wheel",
    ("0.5.11 – 0.5.12: one flat slot, default [1, 3, 7], steps ≥ 1, the up-walk also after "
     "a down-walk: not replayed",
     "0.5.13: slots by batch size, steps ≥ 1, default {1: [1,3,7], 8: [1,3], 32: [1]}",
     "0.5.14 – 0.5.19: the rule replayed here; default slot 1 is [1, 3, 7]",
     "0.5.20 – 0.5.23: default slot 1 is [1, 3, 5, 7]",
     "the throughput-aware strategy (PR #28045) and context buckets (PR #31716) are not "
     "released",
     "--speculative-eagle-topk must be 1: chains only"))
