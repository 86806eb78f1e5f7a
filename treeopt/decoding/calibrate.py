"""Calibration runs: prompts → greedy (or sampled) continuations → one teacher-forced rank pass
→ RankTrace.

Each continuation is recorded at every position a live run of it visits, a target at or past
its last token (its EOS, or the last of its budget) a miss
(:func:`~treeopt.decoding.rank_pass.cut_to_run`): the per-step walk takes the steps live decoding
with the same budget takes, each keeping what the run keeps.

With ``temperature > 0`` each prompt is continued ``samples_per_prompt`` times by the same
per-position seeded sampler live decoding uses (:mod:`treeopt.decoding.sampling`; prompt i's
sample s is stream ``i·S + s``), and the drafter is ranked against the *sampled* tokens, teacher-
forced along the sampled path: E[L] on that trace is live sample-and-match's expectation at that
temperature. The trace's meta records the sampling (``"sampling"``); a greedy trace has none.

A kind that drafts also from earlier requests' outputs (``kind.request_cache``: suffix
decoding's global tree) is ranked request by request in the prompts' order through one cache
(:meth:`~treeopt.decoding.drafter.Drafter.rank_requests`): request i sees the continuations of
requests 0 … i-1. Its trace's meta records that order (``"request_order"``, each request's
prompt); a walk over the trace needs nothing more, since each position's ranks already hold what
its request saw, and live decoding of the prompts in that order, one at a time, meets the same
cache. Such a run is one shard; a resumed one puts its finished chunks' requests (kept in each
chunk's file) back into the cache.

Work is cut into chunks of ``batch_size`` prompts. Shard i of n takes chunks i, i+n, …; each
finished chunk is saved atomically under ``.<out>.parts/``, so an interrupted run resumes where it
stopped, and the output appears only when complete (then the parts are removed). Re-running a
finished shard returns its file. Shard outputs are ``<stem>.shard-i-of-n.npz``; join them with
:func:`treeopt.merge_traces` (``treeopt trace merge``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from treeopt.decoding.config import DecodeConfig
from treeopt.decoding.continuations import ContinuationStore
from treeopt.decoding.models import check_context
from treeopt.decoding.rank_pass import (
    greedy_continuations,
    rank_batch,
    run_positions,
    sampled_continuations,
)
from treeopt.errors import FieldError, TreeoptError
from treeopt.files import read_json, write_json
from treeopt.model.responses import History, write_responses
from treeopt.model.trace import RankTrace, merge_traces, prompt_digest
from treeopt.version import __version__

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.drafter import Drafter, RequestCache
    from treeopt.decoding.features import FeatureCache

TARGETS = ("greedy", "texts")
POSITIONS = "run positions"  # what a chunk records (in the fingerprint: no chunk of another rule)


@dataclass(frozen=True)
class CalibrateConfig:
    """Options of a calibration run; CLI flags map one-to-one onto these fields.

    ``source="texts"``: the prompts are the user's own texts, the base model's argmax at each
    position stands in for its greedy continuation (an approximation; nothing is generated).
    """

    top_k: int = 16
    max_new_tokens: int = 128
    batch_size: int = 8
    source: str = "greedy"
    shard: int = 0
    num_shards: int = 1
    eos_token_id: int | None = None
    temperature: float = 0.0  # 0: greedy continuations; > 0: sampled ones
    top_p: float = 1.0
    sample_top_k: int = 0
    seed: int = 0
    samples_per_prompt: int = 1

    def __post_init__(self) -> None:
        if self.source not in TARGETS:
            raise TreeoptError(f"calibration source {self.source!r} is unknown; expected {TARGETS}")
        if not 1 <= self.top_k <= np.iinfo(np.int16).max:
            raise FieldError("top_k", f"must be in 1 … 32767, got {self.top_k}")
        for name in ("batch_size", "max_new_tokens"):
            if getattr(self, name) < 1:
                raise FieldError(name, f"must be ≥ 1, got {getattr(self, name)}")
        if not 0 <= self.shard < self.num_shards:
            raise FieldError("shard", f"{self.shard}/{self.num_shards}: need 0 ≤ i < n")
        if not self.temperature >= 0:
            raise FieldError("temperature", f"must be ≥ 0 (0: greedy), got {self.temperature}")
        if self.samples_per_prompt < 1:
            raise FieldError("samples_per_prompt", f"must be ≥ 1, got {self.samples_per_prompt}")
        if self.temperature == 0 and (self.samples_per_prompt > 1 or self.top_p < 1
                                      or self.sample_top_k):
            raise FieldError("temperature", "{samples_per_prompt}, {top_p} and {sample_top_k} need "
                             "{temperature} > 0 (greedy continuations are one per prompt)",
                             inline=True)
        if self.temperature > 0 and self.source == "texts":
            raise FieldError("temperature", f"must be 0 when the source is the user's own texts "
                             f"(they are ranked, not sampled), got {self.temperature}")
        if self.temperature > 0:
            try:
                self.decoding()  # top-p / top-k checked like live decoding's
            except FieldError as exc:  # its top_k is this config's sample_top_k
                if exc.field != "top_k":
                    raise
                raise FieldError("sample_top_k", exc.rule) from None

    def decoding(self) -> DecodeConfig:
        """The sampler the continuations are drawn with (the one live decoding uses)."""
        return DecodeConfig(max_new_tokens=self.max_new_tokens, mode="sample",
                            temperature=self.temperature, top_p=self.top_p,
                            top_k=self.sample_top_k, seed=self.seed,
                            eos_token_id=self.eos_token_id)

    @property
    def sampling(self) -> dict[str, Any] | None:
        """What a sampled trace records in its meta (None: greedy)."""
        if self.temperature == 0:
            return None
        return {"temperature": self.temperature, "top_p": self.top_p,
                "top_k": self.sample_top_k, "seed": self.seed,
                "samples_per_prompt": self.samples_per_prompt}


def parse_shard(text: str | None, env: dict[str, str] | None = None) -> tuple[int, int]:
    """``"i/n"``; else torchrun's RANK and WORLD_SIZE; else ``(0, 1)``.

    >>> parse_shard("1/4"), parse_shard(None, {"RANK": "2", "WORLD_SIZE": "3"}), parse_shard(None, {})
    ((1, 4), (2, 3), (0, 1))
    """
    env = dict(os.environ) if env is None else env
    if text is None:
        if "RANK" in env and "WORLD_SIZE" in env:
            text = f"{env['RANK']}/{env['WORLD_SIZE']}"
        else:
            return 0, 1
    try:
        i, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise FieldError("shard", f"{text!r}: expected i/n such as 0/4") from None
    if not 0 <= i < n:
        raise FieldError("shard", f"{text!r}: need 0 ≤ i < n")
    return i, n


def shard_path(out: str | os.PathLike[str], shard: int, num_shards: int) -> Path:
    """Where shard i of n writes: ``T.npz`` itself for one shard, else ``T.shard-i-of-n.npz``.

    >>> shard_path("runs/T.npz", 1, 4).as_posix()
    'runs/T.shard-1-of-4.npz'
    """
    p = Path(out)
    return p if num_shards == 1 else p.with_name(f"{p.stem}.shard-{shard}-of-{num_shards}{p.suffix}")


def calibrate(model: PreTrainedModel, heads: Drafter, prompts: Sequence[Sequence[int]],
              out: str | os.PathLike[str], *, config: CalibrateConfig = CalibrateConfig(),
              meta: dict[str, Any] | None = None,
              progress: Callable[[int, int], None] | None = None,
              continuations: ContinuationStore | None = None,
              features: FeatureCache | None = None,
              responses: str | os.PathLike[str] | None = None) -> tuple[RankTrace, Path]:
    """Run (or resume) this shard's calibration and write its trace; return it and its path.
    ``continuations``: where the base model's continuations of these prompts are kept for other
    drafters calibrated on them (:mod:`~treeopt.decoding.continuations`; the same tokens, decoded
    once). ``features``: where the base model's teacher-forced features of each batch are kept
    for other drafters that read them (:mod:`~treeopt.decoding.features`). ``responses``: where
    to write the requests' responses, in order (a drafter that reads earlier requests only:
    :mod:`~treeopt.model.responses`, the history of a warm cache)."""
    target = shard_path(out, config.shard, config.num_shards)
    _check_order(heads, config)
    if responses is not None and not heads.kind.request_cache:
        raise FieldError("responses_out", f"{heads.kind.title} keeps no requests' responses; "
                         f"only a drafter that reads earlier requests (suffix decoding) does")
    fingerprint = _fingerprint(heads, prompts, config, meta or {})
    if responses is not None and target.exists() and not Path(responses).exists():
        raise FieldError("responses_out", f"{target} is finished but {responses} was not "
                         f"written with it; remove {target} to calibrate again")
    if target.exists():
        done = RankTrace.load(target)
        if done.meta.get("fingerprint") != fingerprint:
            raise FieldError("out", f"{target}: exists from a different calibration run; remove "
                             f"it or choose another path")
        return done, target
    chunks = list(range(config.shard, _num_chunks(len(prompts), config), config.num_shards))
    parts, created = _parts_dir(target, fingerprint)
    cache = heads.request_cache() if heads.kind.request_cache else None
    try:
        for n, c in enumerate(chunks):
            part = parts / f"chunk-{c:06d}.npz"
            if not part.exists():
                lo = c * config.batch_size
                _run_chunk(model, heads, prompts[lo: lo + config.batch_size], config,
                           first=lo, continuations=continuations, cache=cache,
                           features=features).save(part)
            elif cache is not None:  # resumed: its requests' outputs into the cache, in order
                done = RankTrace.load(part).meta
                heads.remember_requests(cache, done["requests"], done["starts"])
            if progress is not None:
                progress(n + 1, len(chunks))
    except BaseException:  # interrupted or failed: keep finished chunks, leave no empty folder
        if created and not any(parts.glob("chunk-*.npz")):
            shutil.rmtree(parts, ignore_errors=True)
        raise
    loaded = [RankTrace.load(parts / f"chunk-{c:06d}.npz") for c in chunks]
    if responses is not None:
        served = [(seq, start) for t in loaded
                  for seq, start in zip(t.meta["requests"], t.meta["starts"], strict=True)]
        write_responses(responses, History(tuple(tuple(seq[start + 1:]) for seq, start in served),
                                           tuple(prompt_digest(seq[: start + 1])
                                                 for seq, start in served)))
    traces = [_without_requests(t) for t in loaded]
    run = _fingerprint(heads, prompts, replace(config, shard=0), meta or {})  # alike in every shard
    trace = _finish(traces, heads, config, {**(meta or {}), "fingerprint": fingerprint,
                                            "run_fingerprint": run})
    trace.save(target)
    shutil.rmtree(parts, ignore_errors=True)
    return RankTrace.load(target), target


def _num_chunks(n: int, config: CalibrateConfig) -> int:
    return -(-n // config.batch_size)


def _parts_dir(target: Path, fingerprint: str) -> tuple[Path, bool]:
    """The folder of this run's finished chunks, and whether this call created it. Another
    run's folder is emptied; one whose stamp cannot be read is refused (its chunks are kept)."""
    parts = target.with_name(f".{target.name}.parts")
    stamp = parts / "run.json"
    if parts.exists() and _stamp(parts) != fingerprint:  # another run's: its chunks are not ours
        shutil.rmtree(parts)
    created = not parts.exists()
    if not stamp.exists():
        write_json(stamp, {"fingerprint": fingerprint})
    return parts, created


def _stamp(parts: Path) -> str | None:
    """The fingerprint of the run whose chunks ``parts`` holds; None when it holds none."""
    again = f"remove it to start over (a resumed run finds its chunks by {parts.name}/run.json)"
    if not parts.is_dir():
        raise TreeoptError(f"{parts} is not a folder of calibration chunks; {again}")
    if not any(parts.glob("chunk-*.npz")):
        return None  # nothing to keep
    try:
        doc = read_json(parts / "run.json")
    except TreeoptError as exc:
        raise TreeoptError(f"{parts}: unreadable resume folder ({exc}); {again}") from None
    fingerprint = doc.get("fingerprint") if isinstance(doc, dict) else None
    if not isinstance(fingerprint, str):
        raise TreeoptError(f"{parts}: unreadable resume folder (run.json holds no "
                           f"fingerprint); {again}")
    return fingerprint


def _run_chunk(model: PreTrainedModel, heads: Drafter, prompts: Sequence[Sequence[int]],
               config: CalibrateConfig, *, first: int = 0,
               continuations: ContinuationStore | None = None,
               cache: RequestCache | None = None,
               features: FeatureCache | None = None) -> RankTrace:
    """Chunk of ``prompts`` whose first is prompt number ``first`` of the run; ``cache``:
    the requests' outputs so far, for a kind that drafts from them (its trace keeps the
    chunk's requests, which a resumed run puts back into the cache)."""
    K = heads.config.num_heads
    lengths: list[np.ndarray] = []  # a request-cache kind's chain lengths, as it ranks them
    if config.source == "greedy":
        longest = max(len(p) for p in prompts)
        check_context(model, longest + config.max_new_tokens,
                      what=f"a prompt of {longest} tokens plus --max-new-tokens "
                           f"{config.max_new_tokens}")
        seqs = _continued(model, prompts, config, first=first, store=continuations)
        if config.temperature > 0:
            prompts = [p for p in prompts for _ in range(config.samples_per_prompt)]
        starts = [len(p) - 1 for p in prompts]
        ranks = (rank_batch(model, heads, seqs, starts, top_k=config.top_k, to_end=True,
                            features=features)
                 if cache is None else heads.rank_requests(cache, seqs, starts,
                                                           top_k=config.top_k, drafted=lengths))
    else:
        check_context(model, max(len(p) for p in prompts), what="the longest text")
        seqs, starts = list(prompts), [0] * len(prompts)
        ranks = rank_batch(model, heads, seqs, starts, top_k=config.top_k, targets="argmax",
                           features=features)
    tokens = sum(len(s) for s in seqs)
    arr = np.concatenate(ranks) if ranks else np.zeros((0, K), np.int16)
    kept = {} if cache is None else {"requests": [list(map(int, q)) for q in seqs],
                                     "starts": starts}
    drafted = (None if config.source != "greedy" else np.concatenate(lengths) if lengths
               else _drafted(heads, seqs, starts))
    return RankTrace(arr, {"top_k": config.top_k, "sequences": len(seqs), "tokens": tokens,
                           "sequence_positions": [len(r) for r in ranks],
                           "prompt_digests": [prompt_digest(p) for p in prompts], **kept}, drafted)


def continued(model: PreTrainedModel, prompts: Sequence[Sequence[int]],
              config: CalibrateConfig, *,
              store: ContinuationStore | None = None) -> list[list[int]]:
    """Prompt + continuation of each prompt exactly as :func:`calibrate` decodes them (its
    chunks of ``config.batch_size`` prompts; each sampled one ``samples_per_prompt`` times),
    from ``store`` where a calibration kept them: what else the build measures on the same
    continuations reads them here rather than decoding again."""
    out: list[list[int]] = []
    for lo in range(0, len(prompts), config.batch_size):
        out += _continued(model, prompts[lo: lo + config.batch_size], config, first=lo,
                          store=store)
    return out


def _continued(model: PreTrainedModel, prompts: Sequence[Sequence[int]],
               config: CalibrateConfig, *, first: int,
               store: ContinuationStore | None) -> list[list[int]]:
    """One chunk's continuations (its first prompt is number ``first`` of the run)."""
    if config.temperature > 0:
        S = config.samples_per_prompt
        prompts = [p for p in prompts for _ in range(S)]
        streams = [(first + i) * S + s for i in range(len(prompts) // S) for s in range(S)]

        def decode() -> list[list[int]]:
            return sampled_continuations(model, prompts, config=config.decoding(),
                                         streams=streams)
        settings: dict[str, Any] = {"decoding": asdict(config.decoding()), "streams": streams}
    else:
        def decode() -> list[list[int]]:
            return greedy_continuations(model, prompts, max_new_tokens=config.max_new_tokens,
                                        eos_token_id=config.eos_token_id)
        settings = {"greedy": config.max_new_tokens, "eos": config.eos_token_id}
    return decode() if store is None else store.get(_model_label(model), prompts, settings,
                                                      decode)


def _drafted(heads: Drafter, seqs: Sequence[Sequence[int]],
             starts: Sequence[int]) -> np.ndarray | None:
    """The drafter's chain length at every recorded position (those a live run visits), where
    it records one (a lookup drafter's: :meth:`~treeopt.decoding.drafter.Drafter.drafted_depths`,
    which reads only the context through each position's root: the filler after the end is never
    read)."""
    K = heads.config.num_heads
    per = [heads.drafted_depths([*s, *[0] * K], st)  # every run position has its full depth
           for s, st in zip(seqs, starts, strict=True)]
    per = [None if d is None else d[: len(run_positions(len(s), st))]
           for d, s, st in zip(per, seqs, starts, strict=True)]
    if not per or any(d is None for d in per):
        return None
    return np.concatenate(per)


def _check_order(heads: Drafter, config: CalibrateConfig) -> None:
    """A kind that drafts from earlier requests' outputs is calibrated on continuations, in
    one shard: request i's ranks read the outputs of requests 0 … i-1."""
    if not heads.kind.request_cache:
        return
    what = heads.kind.title.lower()
    if config.num_shards > 1:
        raise FieldError("shard", f"{config.shard}/{config.num_shards}: {what} reads every "
                         f"earlier request's output, so it is calibrated in one shard")
    if config.source != "greedy":
        raise TreeoptError(f"{what} is calibrated on the base model's continuations (greedy "
                           f"or sampled), not on the user's own texts")


def _without_requests(trace: RankTrace) -> RankTrace:
    """A chunk's trace less the requests it kept for resuming."""
    meta = {k: v for k, v in trace.meta.items() if k not in ("requests", "starts")}
    return trace.with_meta(meta)


def _model_label(model: PreTrainedModel) -> str:
    """What tells one model's continuations from another's: its path, class and dtype."""
    return (f"{getattr(model.config, '_name_or_path', '?')}|{type(model).__name__}|"
            f"{getattr(model, 'dtype', '?')}")


def _finish(traces: list[RankTrace], heads: Drafter, config: CalibrateConfig,
            meta: dict[str, Any]) -> RankTrace:
    K = heads.config.num_heads
    merged = (merge_traces(traces) if traces
              else RankTrace(np.zeros((0, K), np.int16), {"sequences": 0, "tokens": 0}))
    sampled = {"sampling": config.sampling} if config.sampling else {}
    ordered = ({"request_order": _request_order(int(merged.meta.get("sequences", 0)), config)}
               if heads.kind.request_cache else {})
    return merged.with_meta({
        **meta, **ordered, "head_kind": heads.config.kind, "num_heads": K,
        "heads_config": heads.config.to_dict(), "top_k": config.top_k,
        "source": "sampled" if sampled else config.source,
        "max_new_tokens": config.max_new_tokens, **sampled,
        "sequences": int(merged.meta.get("sequences", 0)),
        "tokens": int(merged.meta.get("tokens", 0)), "positions": merged.positions,
        "shard": f"{config.shard}/{config.num_shards}", "tool": f"treeopt {__version__}",
        "sequence_positions": [n for t in traces for n in t.meta["sequence_positions"]],
        **({"prompt_digests": merged.prompt_digests} if merged.prompt_digests is not None
           else {})})


def _request_order(sequences: int, config: CalibrateConfig) -> list[int]:
    """The prompt of each request, in the order a request cache met them (the trace's own
    order): prompt i's samples one after another. Live decoding of the prompts in this order,
    one at a time, meets the same cache.

    >>> _request_order(4, CalibrateConfig(temperature=0.7, samples_per_prompt=2))
    [0, 0, 1, 1]
    """
    return [i // config.samples_per_prompt for i in range(sequences)]


def _fingerprint(heads: Drafter, prompts: Sequence[Sequence[int]], config: CalibrateConfig,
                 meta: dict[str, Any]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([asdict(config), heads.config.to_dict(), meta, POSITIONS],
                        sort_keys=True).encode())
    for p in prompts:
        h.update(np.asarray(p, dtype=np.int64).tobytes() + b"|")
    return h.hexdigest()[:16]
