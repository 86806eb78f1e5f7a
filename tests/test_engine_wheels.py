"""Engine checks: treeopt's exports run through the engines' own code, read out of their released
packages (``scripts/fetch-engine-wheels``; never installed, never imported as a package: one
function's source at a time, its engine imports stubbed). One row per check, as docs/engines.md
lists them:

| row                      | engine code                                                    |
|--------------------------|----------------------------------------------------------------|
| ``vllm-per-batch-table`` | vLLM 0.33.0 ``validate_and_normalize_dynamic_sd_schedule`` and |
|                          | ``build_dynamic_sd_schedule_lookup`` (v1/spec_decode/dynamic/  |
|                          | utils.py)                                                      |
| ``vllm-suffix``          | vLLM 0.33.0 ``SpeculativeConfig._validate_suffix_decoding``    |
|                          | (config/speculative.py) and its field defaults                 |
| ``sglang-nextn``         | SGLang 0.5.23 ``_resolve_speculative_algorithm_alias``         |
|                          | (srt/arg_groups/speculative_hook.py)                           |

The SGLang adaptive config's row is tests/test_adaptive_policies.py's wheel loader test. Forms
no wheel holds (TensorRT-LLM has none on PyPI; vLLM's profiler rule and MTP check sit where they
cannot run alone) are tested against the rules cited from source in tests/test_engine_forms.py.
"""

from __future__ import annotations

import ast
import glob
import logging
import os
import types
import typing
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.engines import sglang, vllm
from treeopt.engines.vllm.per_batch import check_rows
from treeopt.errors import TreeoptError

CACHE = Path(__file__).resolve().parents[1] / ".cache" / "engine-wheels"
VLLM = CACHE / "vllm-0.33.0"


def _missing(what: str) -> None:
    reason = f"{what} is not in .cache/engine-wheels/ (run scripts/fetch-engine-wheels)"
    if os.environ.get("CI"):  # CI fetches it: a missing file there is a failure
        pytest.fail(reason)
    pytest.skip(reason)


def _functions(source: str, names: tuple[str, ...], where: str, **stubs: object
               ) -> types.SimpleNamespace:
    """The named top-level or method functions of ``source``, compiled alone with ``stubs``."""
    tree = ast.parse(source)
    found = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
             and n.name in names}
    module = ast.Module(body=[found[n] for n in names], type_ignores=[])
    scope: dict[str, object] = {"Optional": typing.Optional, **stubs}
    exec(compile(module, where, "exec"), scope)  # noqa: S102  (the engine's released source)
    return types.SimpleNamespace(**{n: scope[n] for n in names})


@pytest.fixture(scope="module")
def vllm_utils() -> types.SimpleNamespace:
    path = VLLM / "vllm" / "v1" / "spec_decode" / "dynamic" / "utils.py"
    if not path.is_file():
        _missing("vLLM 0.33.0's dynamic/utils.py")
    scope: dict[str, object] = {}
    exec(compile(path.read_text(), str(path), "exec"), scope)  # noqa: S102  (no imports)
    return types.SimpleNamespace(**scope)


@pytest.fixture(scope="module")
def vllm_speculative() -> str:
    path = VLLM / "vllm" / "config" / "speculative.py"
    if not path.is_file():
        _missing("vLLM 0.33.0's config/speculative.py")
    return path.read_text()


@st.composite
def rows(draw):
    n = draw(st.integers(1, 4))
    return [[draw(st.integers(-1, 12)), draw(st.integers(-1, 12)), draw(st.integers(-1, 5))]
            for _ in range(n)]


@settings(max_examples=150, deadline=None)
@given(rows(), st.integers(1, 6))
def test_row_vllm_per_batch_table(vllm_utils, table, cap):
    try:
        vllm_utils.validate_and_normalize_dynamic_sd_schedule(table)
        theirs = True
    except ValueError:
        theirs = False
    try:
        check_rows(table)
        ours = True
    except TreeoptError:
        ours = False
    assert ours == theirs, table
    if ours:
        dense = vllm_utils.build_dynamic_sd_schedule_lookup(table, 16, cap)
        t = vllm.BatchTable(tuple(map(tuple, table)), num_speculative_tokens=cap, max_num_seqs=16)
        assert [t.lookup(b) for b in range(1, 17)] == dense[1:]


def test_row_vllm_per_batch_table_of_a_selection(vllm_utils):
    written = vllm.per_batch_config(vllm.ngram_config(k=3, min_n=1, max_n=3),
                                    [(1, 1, 3), (2, 4, 1)], off_above=True)
    rows = written["num_speculative_tokens_per_batch_size"]
    dense = vllm_utils.build_dynamic_sd_schedule_lookup(rows, 8,
                                                        written["num_speculative_tokens"])
    assert dense[1:] == [3, 1, 1, 1, 0, 0, 0, 0]


def test_row_vllm_suffix(vllm_speculative):
    check = _functions(vllm_speculative, ("_validate_suffix_decoding",),
                       "vllm/config/speculative.py", has_arctic_inference=lambda: True,
                       logger=logging.getLogger("vllm-wheel")
                       )._validate_suffix_decoding
    for field, default in (("suffix_decoding_max_tree_depth", "24"),
                           ("suffix_decoding_max_cached_requests", "10000"),
                           ("suffix_decoding_max_spec_factor", "1.0"),
                           ("suffix_decoding_min_token_prob", "0.1")):
        assert f"{field}: {'int' if '.' not in default else 'float'} = {default}" \
            in vllm_speculative
    for kwargs in ({}, {"k": 16}, {"max_cached_requests": 0, "min_token_prob": 1.0},
                   {"max_tree_depth": 0}, {"max_cached_requests": -1},
                   {"max_spec_factor": -0.1}, {"min_token_prob": 1.1}):
        try:
            doc = vllm.suffix_config(**kwargs)
        except TreeoptError:
            doc = None
        fields = {"num_speculative_tokens": kwargs.get("k"),
                  **{f"suffix_decoding_{k}": v for k, v in kwargs.items() if k != "k"}}
        config = types.SimpleNamespace(**{**{k: v for k, v in vllm.suffix_config().items()
                                             if k != "method"}, **fields})
        try:
            check(config)
            theirs = True
        except ValueError:
            theirs = False
        assert (doc is not None) == theirs, kwargs
        if doc is not None:
            assert config.num_speculative_tokens == doc.get("num_speculative_tokens", 24)


def test_row_sglang_nextn():
    paths = sorted(glob.glob(str(CACHE / "sglang-0.5.23-*.whl")))
    if not paths:
        _missing("SGLang 0.5.23's wheel")
    with zipfile.ZipFile(paths[0]) as z:
        source = z.read("sglang/srt/arg_groups/speculative_hook.py").decode()
    resolve = _functions(source, ("_resolve_speculative_algorithm_alias",),
                         "speculative_hook.py", logger=logging.getLogger("sglang-wheel")
                         )._resolve_speculative_algorithm_alias
    flags = sglang.nextn_flags(steps=3).split()
    algorithm = flags[flags.index("--speculative-algorithm") + 1]
    assert (algorithm, resolve(algorithm, None)) == ("NEXTN", "EAGLE")
