"""What vLLM's ``--speculative-config`` JSON takes, one function per method: a fixed tree
(``speculative_token_tree``, 0.10.1 – 0.20.2), chains of a model drafter (``eagle``,
``eagle3``, ``draft_model``), ``ngram``, ``suffix`` and ``mtp``; each refuses, in one line,
what vLLM's ``SpeculativeConfig`` refuses.

Read from vllm/config/speculative.py at 002e77c1f0ef9b19cff8b9e21cfbd6feb3d6b443
(``SpeculativeConfig``: ``_validate_suffix_decoding``, the ``n_predict`` divisibility check of
``__post_init__``), v1/attention/backends/tree_attn.py of 0.10.1 – 0.20.2 (removed in 0.21.0,
PR #42121) and v1/spec_decode/ngram_proposer.py at 016e8ede.

>>> ngram_config(k=4, min_n=1, max_n=3)
{'method': 'ngram', 'num_speculative_tokens': 4, 'prompt_lookup_min': 1, 'prompt_lookup_max': 3}
"""

from __future__ import annotations

import json
from typing import Any

from treeopt.engines.rules import NONEMPTY, Engine, Rule
from treeopt.errors import FieldError, TreeoptError
from treeopt.model.tree import Path, Tree

METHODS: tuple[str, ...] = ("ngram", "suffix", "mtp", "eagle", "eagle3", "draft_model")
SUFFIX_DEFAULTS: dict[str, float] = {"max_tree_depth": 24, "max_cached_requests": 10000,
                                     "max_spec_factor": 1.0, "min_token_prob": 0.1}
NGRAM_VERSIONS = ("vLLM v1: vllm/config/speculative.py (SpeculativeConfig.__post_init__), "
                  "vllm/v1/spec_decode/ngram_proposer.py at 016e8ede")


def _level_uniform(tree: Tree) -> str | None:
    """vLLM drafts level by level: every node of a level has the same children, ranks 0..c-1."""
    level: list[Path] = [()]
    for depth in range(1, tree.depth + 1):
        counts = [len(tree.children(p)) for p in level]
        c = counts[0]
        if any(k != c for k in counts) or any(tree.children(p) != [p + (r,) for r in range(c)]
                                              for p in level):
            return (f"vLLM's tree drafter needs a level-uniform tree (every node of a level with "
                    f"the same children 0..c-1), but depth {depth} has children counts "
                    f"{sorted(set(counts))} under its {len(level)} parents")
        level = [p + (r,) for p in level for r in range(c)]
    return None


UNIFORM = Rule("level-uniform", _level_uniform, "--constraint uniform")
ENGINES: tuple[Engine, ...] = (
    Engine("vllm", None, "vLLM speculative_token_tree (EAGLE, EAGLE-3, MTP; TREE_ATTN backend)",
           "vLLM 0.10.1 – 0.20.2 (v1/attention/backends/tree_attn.py; removed in 0.21.0)",
           (NONEMPTY, UNIFORM),
           ("only vLLM 0.10.1 – 0.20.2 take a fixed tree, for method eagle, eagle3 or mtp, and "
            "only with the TREE_ATTN attention backend chosen explicitly (0.20: "
            "--attention-backend TREE_ATTN; 0.10: VLLM_ATTENTION_BACKEND=TREE_ATTN); otherwise, "
            "and from 0.21.0 on, vLLM drafts a chain",)),
)


def tree_config(tree: Tree, *, method: str = "eagle", model: str | None = None) -> dict[str, Any]:
    """The speculative config of a fixed tree (vLLM 0.10.1 – 0.20.2): every node a speculative
    token, the tree as a string of tuples; ``model`` (an EAGLE checkpoint) names the drafter.

    >>> tree_config(Tree.from_choices([[0], [1]]))
    {'num_speculative_tokens': 2, 'speculative_token_tree': '[(0,), (1,)]'}
    """
    drafter = {"method": method, "model": model} if model else {}
    return {**drafter, "num_speculative_tokens": tree.size,
            "speculative_token_tree": str([tuple(p) for p in tree.paths])}


def tree_from_config(doc: dict[str, Any]) -> str | None:
    """The ``speculative_token_tree`` string of a parsed config, or None where it holds none."""
    value = doc.get("speculative_token_tree")
    return None if value is None else str(value)


def _positive(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FieldError(name, f"must be an integer ≥ 1, got {value!r}")
    return value


def chain_config(*, method: str, k: int, model: str | None = None) -> dict[str, Any]:
    """A model drafter's chain of ``k`` tokens (``eagle``, ``eagle3``, ``draft_model``; ``mtp``
    through :func:`mtp_config`).

    >>> chain_config(method="eagle3", k=3, model="EAGLE")
    {'method': 'eagle3', 'model': 'EAGLE', 'num_speculative_tokens': 3}
    """
    if method not in ("eagle", "eagle3", "draft_model"):
        raise TreeoptError(f"vLLM method {method!r}: a model drafter's chain is eagle, eagle3 or "
                           "draft_model (ngram, suffix and mtp have their own forms)")
    return {"method": method, **({"model": model} if model else {}),
            "num_speculative_tokens": _positive(k, "num_speculative_tokens")}


def ngram_config(*, k: int, min_n: int, max_n: int) -> dict[str, Any]:
    """vLLM's n-gram proposer drafting ``k`` tokens after a match of ``min_n`` … ``max_n``."""
    return {"method": "ngram", "num_speculative_tokens": _positive(k, "num_speculative_tokens"),
            "prompt_lookup_min": min_n, "prompt_lookup_max": max_n}


def ngram_notes(min_n: int) -> tuple[str, ...]:
    """What a user must know beside the n-gram config."""
    return ("vLLM matches only n-grams of prompt_lookup_min … prompt_lookup_max tokens; left "
            "unset both default to 5, so n-grams shorter than 5 never match",
            "vLLM takes one num_speculative_tokens per server unless "
            "num_speculative_tokens_per_batch_size (0.24.0 and later) switches it by batch size")


def suffix_config(*, k: int | None = None, max_tree_depth: int = 24,
                  max_cached_requests: int = 10000, max_spec_factor: float = 1.0,
                  min_token_prob: float = 0.1) -> dict[str, Any]:
    """vLLM's SuffixDecoding (``method: suffix``, needs arctic-inference): ``k`` is
    ``num_speculative_tokens``, the ceiling of a step's speculation (None: vLLM takes the tree
    depth); a step speculates up to ``max_spec_factor`` × the matched prefix's length, tokens of
    estimated probability ≥ ``min_token_prob``, from trees ``max_tree_depth`` deep (match plus
    speculation) and a global tree of the last ``max_cached_requests`` responses (0: none). The
    defaults are vLLM's.

    >>> suffix_config(k=16)["suffix_decoding_max_tree_depth"]
    24
    >>> suffix_config(min_token_prob=1.5)
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: vLLM refuses suffix_decoding_min_token_prob=1.5: it must be in [0, 1]
    """
    checks = ((max_tree_depth < 1, "suffix_decoding_max_tree_depth", max_tree_depth, ">= 1"),
              (max_cached_requests < 0, "suffix_decoding_max_cached_requests",
               max_cached_requests, ">= 0"),
              (max_spec_factor < 0, "suffix_decoding_max_spec_factor", max_spec_factor, ">= 0"),
              (not 0 <= min_token_prob <= 1, "suffix_decoding_min_token_prob", min_token_prob,
               "in [0, 1]"))
    for bad, name, value, valid in checks:
        if bad:
            raise TreeoptError(f"vLLM refuses {name}={value}: it must be {valid}")
    doc: dict[str, Any] = {"method": "suffix"}
    if k is not None:
        doc["num_speculative_tokens"] = _positive(k, "num_speculative_tokens")
    return {**doc, "suffix_decoding_max_tree_depth": max_tree_depth,
            "suffix_decoding_max_cached_requests": max_cached_requests,
            "suffix_decoding_max_spec_factor": max_spec_factor,
            "suffix_decoding_min_token_prob": min_token_prob}


def mtp_config(*, k: int, num_nextn_predict_layers: int) -> dict[str, Any]:
    """vLLM's MTP drafter (``method: mtp``; the model-specific names such as ``deepseek_mtp``
    are deprecated in its favour) drafting ``k`` tokens from the checkpoint's
    ``num_nextn_predict_layers`` MTP layers: vLLM reuses the layers in turn, so ``k`` above the
    layer count must be a multiple of it.

    >>> mtp_config(k=4, num_nextn_predict_layers=2)
    {'method': 'mtp', 'num_speculative_tokens': 4}
    >>> mtp_config(k=3, num_nextn_predict_layers=2)
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: vLLM refuses num_speculative_tokens 3 with 2 MTP layers: above the layer count it must be a multiple of it (2, 4, 6, …)
    """
    n = _positive(num_nextn_predict_layers, "num_nextn_predict_layers")
    if _positive(k, "num_speculative_tokens") > n and k % n:
        raise TreeoptError(f"vLLM refuses num_speculative_tokens {k} with {n} MTP layers: above "
                           f"the layer count it must be a multiple of it ({n}, {2 * n}, "
                           f"{3 * n}, …)")
    return {"method": "mtp", "num_speculative_tokens": k}


def config_text(doc: dict[str, Any]) -> str:
    """A speculative config as the JSON ``--speculative-config`` reads."""
    return json.dumps(doc)


def launch_flag(path: str) -> str:
    """The ``vllm serve`` flag that reads the config file at ``path``."""
    return f'--speculative-config "$(cat {path})"'
