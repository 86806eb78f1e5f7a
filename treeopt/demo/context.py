"""What the stages of a demo build share (:class:`Context`): the settings, output paths, scratch
space and log, and the corpus, tokenizer, model and reference decoding, each loaded once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from treeopt.demo.config import DemoConfig
from treeopt.demo.corpus import Corpus, load_corpus
from treeopt.demo.layout import DemoPaths, base_dir
from treeopt.demo.stage_kinds import HEAD_KINDS
from treeopt.files import read_json

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from treeopt.decoding.calibrate import CalibrateConfig
    from treeopt.decoding.continuations import ContinuationStore
    from treeopt.decoding.drafter import Drafter
    from treeopt.decoding.features import FeatureCache


@dataclass
class Context:
    """What the stages share: settings, output paths, scratch space, log; the corpus, tokenizer
    and model are loaded on first use and kept in ``loaded`` (a stage that rewrites one calls
    :meth:`reload`); ``kinds``: the head kinds the kind stages
    (:data:`~treeopt.demo.stage_kinds.KIND_STAGES`) make. The
    model and its tokenizer are the demo's own (``model/``) or the pretrained base the config
    names, read where it was fetched."""

    config: DemoConfig
    paths: DemoPaths
    scratch: Path
    log: Callable[[str], None]
    show_progress: bool = False
    loaded: dict[str, Any] = field(default_factory=dict)
    kinds: tuple[str, ...] = HEAD_KINDS  # the head kinds the kind stages make (or make again)

    def _once(self, name: str, load: Callable[[], Any]) -> Any:
        if name not in self.loaded:
            self.loaded[name] = load()
        return self.loaded[name]

    def reload(self, name: str) -> None:
        """Forget ``name`` (``tokenizer``, ``model``): a stage has just rewritten it on disk
        (the model's features with the model)."""
        self.loaded.pop(name, None)
        if name == "model":
            self.loaded.pop("features", None)

    @property
    def corpus(self) -> Corpus:
        return self._once("corpus", lambda: load_corpus(max_files=self.config.max_files))

    @property
    def model_dir(self) -> Path:
        """The base model's directory: the demo's ``model/`` or the pretrained base's own."""
        base = self.config.base_model
        return self.paths.model if base is None else base_dir(base)

    @property
    def vocab_size(self) -> int:
        """The base model's vocabulary (its logits' width), from its config."""
        return int(read_json(self.model_dir / "config.json")["vocab_size"])

    @property
    def tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        return self._once("tokenizer", lambda: AutoTokenizer.from_pretrained(
            str(self.model_dir), local_files_only=True))

    def stream(self, part: str) -> np.ndarray:
        """The token stream of a corpus part, cached in the scratch space."""
        from treeopt.demo.tokenizer import encode_stream

        path = self.scratch / f"stream-{part}.npy"
        if not path.exists():
            np.save(path, encode_stream(self.tokenizer, [f.text for f in self.corpus.part(part)]))
        return np.load(path)

    def prompt_ids(self, part: str) -> list[list[int]]:
        from treeopt.documents.prompts import encode, read_texts

        return encode(self.tokenizer, read_texts([self.paths.prompts(part)]))

    @property
    def model(self) -> PreTrainedModel:
        """The base model, computed in the config's dtype (the demo's own model is stored in
        16 bits)."""
        from treeopt.decoding.loading import ModelSpec, load_model

        return self._once("model", lambda: load_model(ModelSpec(
            path=str(self.model_dir), device=self.config.device, dtype=self.config.dtype))[0])

    @property
    def continuations(self) -> ContinuationStore:
        """The base model's continuations of the demo's prompts, decoded once for every drafter
        calibrated on them (:mod:`~treeopt.decoding.continuations`); kept in the work directory
        under a digest of the model's weights, so a base trained again never meets its
        predecessor's tokens."""
        from treeopt.decoding.continuations import ContinuationStore, weights_digest

        return self._once("continuations", lambda: ContinuationStore(
            self.scratch / "continuations" / weights_digest(self.model)))

    @property
    def features(self) -> FeatureCache:
        """The base model's teacher-forced features of each trace batch, computed once for
        every drafter that reads them (Medusa, Hydra, EAGLE: :mod:`~treeopt.decoding.features`),
        in memory for this run."""
        from treeopt.decoding.features import FeatureCache

        return self._once("features", FeatureCache)

    def trace_config(self, temperature: float = 0.0) -> CalibrateConfig:
        """The demo's calibration settings: its top-k, continuation length and batch, sampled
        at ``temperature`` (0: greedy), each continuation stopped at the tokenizer's EOS."""
        from treeopt.decoding.calibrate import CalibrateConfig

        c = self.config
        sampled = {"temperature": temperature, "seed": c.seed} if temperature else {}
        return CalibrateConfig(top_k=c.top_k, max_new_tokens=c.max_new_tokens,
                               batch_size=c.calibration_batch,
                               eos_token_id=self.tokenizer.eos_token_id, **sampled)

    def reference(self) -> tuple[list[tuple[int, ...]], dict[str, Any]]:
        """The plain greedy continuations of the held-out prompts, each stopped at the
        tokenizer's EOS as the traces' are, and their record
        (:func:`~treeopt.demo.quality.autoregressive_run`), made once per run. Where the traces
        decode in the live checks' batches, the continuations are the held-out traces' own,
        read from :attr:`continuations` (decoded there if no trace has); only the timed
        prompts are decoded again."""
        from treeopt.decoding.calibrate import continued
        from treeopt.decoding.loop import Decoder
        from treeopt.demo.quality import QUALITY_BATCH, autoregressive_run, quality_decodings

        def run() -> tuple[list[tuple[int, ...]], dict[str, Any]]:
            prompts = self.prompt_ids("heldout")
            outputs = None
            if self.config.calibration_batch == QUALITY_BATCH:  # the same decodings
                stored = continued(self.model, prompts, self.trace_config(),
                                   store=self.continuations)
                outputs = [tuple(s[len(p):]) for s, p in zip(stored, prompts, strict=True)]
            total = quality_decodings(len(prompts), batched=outputs is None)
            with self.bar(total, "autoregressive reference") as bar:
                return autoregressive_run(Decoder(self.model), prompts,
                                          max_new_tokens=self.config.max_new_tokens,
                                          progress=lambda: bar.update(1),
                                          eos_token_id=self.tokenizer.eos_token_id,
                                          timed_threads=self.config.live_threads,
                                          outputs=outputs)

        return self._once("reference", run)

    def heads(self, kind: str) -> Drafter:
        from treeopt.drafters.checkpoints import load_heads_for

        return load_heads_for(self.model, self.paths.heads(kind))

    def bar(self, total: int, desc: str) -> Any:
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, leave=False, disable=not self.show_progress,
                    dynamic_ncols=True)
