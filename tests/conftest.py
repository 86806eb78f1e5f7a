"""Shared fixtures: tiny Llama models built from a config (never downloaded), the tiny demo
built once for the whole run, and the gpu marker."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings as _hypothesis_settings

# properties check values, not speed: a loaded host (suite_under_load) must not fail them on
# hypothesis's 200 ms deadline
_hypothesis_settings.register_profile("treeopt", deadline=None)
_hypothesis_settings.load_profile("treeopt")

# Two CPU cores shared with other jobs: one thread per process avoids thread thrash (a 30× slow-down
# measured under load). Set before torch is imported; subprocesses inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

TEXTS = [
    "def add(a, b):\n    return a + b\n",
    "for i in range(10):\n    print(i * i)\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = y\n",
    "import numpy as np\nx = np.zeros((3, 4))\nprint(x.shape)\n",
    "while True:\n    line = input()\n    if not line:\n        break\n",
    "the quick brown fox jumps over the lazy dog\n",
]


# The modules that take longest on the 2-core host (seconds of test time at c9df198: browser
# 226, architectures 188, app 101, demo 99, core install 51; `pytest --durations=0`). They run
# first: the README's command hands whole modules to workers in collection order
# (`--dist loadscope --no-loadscope-reorder`), so a long module started last would keep one
# worker busy alone at the end. xdist's own order (most tests first) put the browser last.
LONGEST_FIRST = ("test_browser.py", "test_architectures.py", "test_app.py", "test_demo.py",
                 "test_core_install.py", "test_decode.py", "test_engine_rules.py",
                 "test_overview.py", "test_attention.py", "test_demo_evidence.py")


def longest_first(items: list) -> None:
    """Reorder ``items`` in place: :data:`LONGEST_FIRST`'s modules first, in that order, then
    every other test in collection order (a stable sort, so a module's own order holds)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_modifyitems(config, items):
    longest_first(items)
    if not any("gpu" in item.keywords for item in items):
        return  # do not import torch for nothing
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def tiny_llama(*, vocab: int = 256, hidden: int = 64, layers: int = 2, seed: int = 0,
               dtype=None, context: int = 512):
    """A tiny random Llama causal LM (eval mode) built from a config in the test itself."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=context, bos_token_id=1, eos_token_id=2,
                      pad_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    if dtype is not None:
        model.to(dtype)
    return model


def tiny_tokenizer(vocab: int = 256):
    """A byte-level BPE tokenizer trained here on a few lines (no download)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TEXTS * 4, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", unk_token="<unk>")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A saved tiny Llama model directory with a tokenizer: ``from_pretrained`` loads it offline."""
    tok = tiny_tokenizer(320)
    model = tiny_llama(vocab=len(tok), seed=0)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def prompts_file(tmp_path_factory):
    """A JSONL prompts file with a ``prompt`` field."""
    import json

    path = tmp_path_factory.mktemp("prompts") / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": t[:24]}) + "\n" for t in TEXTS))
    return path


@pytest.fixture(scope="module")
def model_and_heads():
    """A tiny Llama (vocabulary 64, one layer) and two untrained Medusa heads on it: what a live
    sweep decodes in the tests of ``tune``."""
    from treeopt.drafters.heads import build_heads
    from treeopt.registry.drafter_configs import HeadsConfig

    model = tiny_llama(vocab=64, hidden=32, layers=1)
    heads = build_heads(HeadsConfig(kind="medusa", num_heads=2, hidden_size=32, vocab_size=64),
                        lm_head=model.lm_head).eval()
    return model, heads


@pytest.fixture(scope="module")
def peaked():
    """A tiny Llama with a sharpened LM head, so that greedy text is predictable and heads learn;
    its greedy continuations of 16 random prompts, and the prompts."""
    import torch

    from treeopt.decoding.rank_pass import greedy_continuations

    model = tiny_llama(vocab=256, seed=3)
    with torch.no_grad():
        model.lm_head.weight.mul_(25)
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 256, (5,), generator=gen).tolist() for _ in range(16)]
    return model, greedy_continuations(model, prompts, max_new_tokens=48), prompts


@pytest.fixture(scope="module")
def trained(peaked):
    """Medusa and Hydra++ heads trained on ``peaked``'s own text."""
    from treeopt.drafters.training import TrainConfig, train_heads

    model, seqs, _ = peaked
    out = {}
    for kind, prefix in (("medusa", False), ("hydra", True)):
        cfg = TrainConfig(kind=kind, num_heads=4, steps=40, batch_size=8, seq_len=48, lr=3e-3,
                          prefix_attention=prefix)
        out[kind] = train_heads(model, seqs, cfg)[0]
    return out


def run_root(tmp_path_factory) -> Path:
    """A folder every pytest-xdist worker of this run sees (the run's shared temporary folder;
    without xdist, the session's own)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(root: Path, mark: str, build) -> Path:
    """``root``, made by ``build(root)`` once for the run: the first pytest-xdist worker to ask
    builds it (behind a lock) and the others wait for that build rather than make their own.
    ``build`` writes the file ``mark`` last: without it, what a failed build left is removed and
    the build runs again."""
    from filelock import FileLock

    with FileLock(f"{root}.lock"):
        if not (root / mark).exists():
            shutil.rmtree(root, ignore_errors=True)
            root.mkdir(parents=True)
            build(root)
    return root


@pytest.fixture(scope="session")
def demo_cli(tmp_path_factory):
    """What ``treeopt select --demo K --out K.json`` writes for every drafter of the shipped demo
    and what ``treeopt choose-drafter`` prints on those files, run through the CLI's own entry
    point: the figures the app's first view must show. Computed once for the run: the first
    worker to ask writes them where the others read them (behind a lock)."""
    root = built_once(run_root(tmp_path_factory) / "demo-cli", "demo-cli.json", _demo_cli)
    return json.loads((root / "demo-cli.json").read_text())


def _demo_cli(out: Path) -> None:
    """:func:`demo_cli`'s documents, made in ``out`` (``demo-cli.json`` last)."""
    import io
    from contextlib import redirect_stdout

    from treeopt.cli import main
    from treeopt.demo.layout import DemoPaths, default_root

    paths = {kind: out / f"{kind}.json" for kind in DemoPaths(default_root()).kinds()}
    for kind, path in paths.items():
        assert main(["select", "--demo", kind, "--out", str(path)]) == 0
    printed = io.StringIO()
    with redirect_stdout(printed):
        assert main(["choose-drafter", *map(str, paths.values())]) == 0
    (out / "demo-cli.json").write_text(json.dumps(
        {"selections": {k: json.loads(p.read_text()) for k, p in paths.items()},
         "choice": json.loads(printed.getvalue())}))


@dataclass(frozen=True)
class TinyDemos:
    """The tiny demo (``treeopt.demo.config.TINY``): ``before`` finished without the prose
    stage, ``after`` that demo given the prose stage by a resumed build, which logged
    ``resume_logs``. Both are read only: a test that changes a demo changes a :func:`demo_copy`."""

    before: Path
    after: Path
    resume_logs: list[str]


def _build_tiny_demos(root: Path) -> None:
    """Build :class:`TinyDemos` under ``root``: the whole pipeline but prose, then prose."""
    import torch

    from treeopt.demo import build, stages
    from treeopt.demo.config import TINY

    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stages, "PIPELINE", tuple(s for s in stages.PIPELINE if s[0] != "prose"))
        build.build_demo(root / "before" / "demo", TINY, log=lambda s: None)
    shutil.copytree(root / "before" / "demo", root / "after" / "demo")
    logs: list[str] = []
    build.build_demo(root / "after" / "demo", TINY, log=logs.append)
    (root / "logs.json").write_text(json.dumps(logs))  # last: the mark of a finished build


@pytest.fixture(scope="session")
def tiny_demos(tmp_path_factory) -> TinyDemos:
    """:class:`TinyDemos`, built once for the run: under pytest-xdist the first worker to ask
    builds them where every worker finds them (the run's shared temporary folder, behind a
    lock), and the others wait for that build rather than make their own."""
    root = built_once(run_root(tmp_path_factory) / "tiny-demos", "logs.json", _build_tiny_demos)
    return TinyDemos(root / "before" / "demo", root / "after" / "demo",
                     json.loads((root / "logs.json").read_text()))


def unswept_drafters(manifest: dict, swept: dict) -> dict:
    """A demo manifest's drafters-stage records, less the sweep record of each drafter in
    ``swept`` (a later build's picks step swept it again, :mod:`treeopt.demo.stage_picks`: its
    record is the new sweep's): what a build that made other kinds again keeps as it was."""
    return {kind: {k: v for k, v in record.items() if k != "sweep" or kind not in swept}
            for kind, record in manifest["drafters"].items() if isinstance(record, dict)}


def differences(a, b, *, rel: float = 1e-9, path: str = "") -> list[str]:
    """Where two JSON documents differ: every key, length, string and integer exactly, floats
    within ``rel`` (a least-squares fit's last bits vary with the CPU's BLAS kernels, so a
    document shipped from the build host and one computed here agree to about 1e-15).

    >>> differences({"a": [1, 0.1 + 0.2]}, {"a": [1, 0.3]}), differences([1.0], [1.1])
    ([], ['[0]: 1.0 != 1.1'])
    """
    import math

    if isinstance(a, float) and isinstance(b, float):
        return [] if math.isclose(a, b, rel_tol=rel, abs_tol=0.0) or a == b else [
            f"{path}: {a!r} != {b!r}"]
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} != {type(b).__name__}"]
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return [f"{path}: keys {sorted(a.keys() ^ b.keys())} in one only"]
        return [d for k in a for d in differences(a[k], b[k], rel=rel, path=f"{path}/{k}")]
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} != {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in differences(x, y, rel=rel, path=f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def demo_copy(demo: Path, into: Path) -> tuple[Path, dict]:
    """A copy of the finished ``demo`` at ``into / "demo"``, and its manifest as read back."""
    out = into / "demo"
    shutil.copytree(demo, out)
    return out, json.loads((out / "manifest.json").read_text())
