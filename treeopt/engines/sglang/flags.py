"""SGLang's server flags (``python -m sglang.launch_server``) for drafting: ``NGRAM`` (chains of
prompt lookup, trees of its trie), ``EAGLE`` and ``NEXTN`` (MTP) with their dynamic-tree
settings, and what SGLang refuses or changes in them.

- NGRAM: SGLang 0.5.x python/sglang/srt/speculative/ngram_worker.py at 0037c142 and
  cpp_ngram/ngram.cpp at 0657507f (the ``window`` generation of flags); newer main's
  ngram_worker.py with ``max_trie_depth`` (the ``trie-depth`` generation). SGLang counts the
  root among the draft tokens.
- EAGLE / NEXTN: ``--speculative-num-steps`` (the tree's depth), ``--speculative-eagle-topk``,
  ``--speculative-num-draft-tokens`` (verified tokens, the root included). ``NEXTN`` is an alias
  of ``EAGLE`` (``_resolve_speculative_algorithm_alias`` in
  sglang/srt/arg_groups/speculative_hook.py of the 0.5.23 wheel), its draft model defaulting to
  the target checkpoint's own MTP layer for DeepSeek-V3/V3.2/V4, GLM-4.5 and others. With top-k
  1 SGLang drafts a chain and sets the draft tokens to steps + 1; a tree (top-k > 1) is refused
  with ``--page-size`` > 1 except on the flashinfer attention backend, and on the trtllm_mha
  backend (``server_args.py``).

>>> " ".join(ngram_flags(k=2, min_n=1, max_n=3, generation="trie-depth"))
'--speculative-algorithm NGRAM --speculative-num-draft-tokens 3 --speculative-ngram-min-bfs-breadth 1 --speculative-ngram-max-bfs-breadth 1 --speculative-ngram-max-trie-depth 5'
"""

from __future__ import annotations

from treeopt.errors import TreeoptError
from treeopt.model.dynamic_settings import DynamicSettings

GENERATIONS: tuple[str, ...] = ("window", "trie-depth")
NGRAM_VERSIONS = ("SGLang 0.5.x python/sglang/srt/speculative/ngram_worker.py at 0037c142 and "
                  "cpp_ngram/ngram.cpp at 0657507f (window flags); newer main's ngram_worker.py "
                  "with max_trie_depth (trie-depth flags)")


def ngram_flags(*, k: int, min_n: int, max_n: int, generation: str = "window") -> list[str]:
    """SGLang's NGRAM flags for a chain of ``k``: breadth 1, ``k + 1`` verified slots, matches
    of ``min_n`` … ``max_n`` tokens (``window``: releases with the match-window flags) or of up
    to ``max_n`` (``trie-depth``: releases with ``--speculative-ngram-max-trie-depth``), and trie
    paths long enough for ``k`` drafts after a ``max_n``-token match."""
    flags = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(k + 1),
             "--speculative-ngram-min-bfs-breadth", "1", "--speculative-ngram-max-bfs-breadth",
             "1"]
    if generation == "window":
        return flags + ["--speculative-ngram-min-match-window-size", str(min_n),
                        "--speculative-ngram-max-match-window-size", str(max_n),
                        "--speculative-ngram-branch-length", str(max_n + k)]
    if generation == "trie-depth":
        return flags + ["--speculative-ngram-max-trie-depth", str(max_n + k)]
    raise TreeoptError(f"generation must be one of {', '.join(GENERATIONS)}, got "
                       f"{generation!r}")


def ngram_text(*, k: int, min_n: int, max_n: int) -> str:
    """Both generations' NGRAM flags, each under a comment line."""
    return "".join(f"# SGLang, {g} flags\n"
                   + " ".join(ngram_flags(k=k, min_n=min_n, max_n=max_n, generation=g)) + "\n"
                   for g in GENERATIONS)


def trie_flags(*, nodes: int, min_bfs: int, max_bfs: int, max_trie_depth: int,
               match: str) -> list[str]:
    """SGLang's NGRAM flags of a trie tree of ``nodes`` draft tokens (releases with
    ``--speculative-ngram-max-trie-depth``).

    >>> " ".join(trie_flags(nodes=8, min_bfs=1, max_bfs=3, max_trie_depth=18, match="bfs"))
    '--speculative-algorithm NGRAM --speculative-num-draft-tokens 9 --speculative-ngram-min-bfs-breadth 1 --speculative-ngram-max-bfs-breadth 3 --speculative-ngram-max-trie-depth 18 --speculative-ngram-match-type BFS'
    """
    return ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens",
            str(nodes + 1), "--speculative-ngram-min-bfs-breadth", str(min_bfs),
            "--speculative-ngram-max-bfs-breadth", str(max_bfs),
            "--speculative-ngram-max-trie-depth", str(max_trie_depth),
            "--speculative-ngram-match-type", match.upper()]


TRIE_NOTES: tuple[str, ...] = (
    "SGLang shapes each step's tree itself: every matching suffix (longest first) adds its "
    "children in BFS up to a breadth that falls from max to min bfs breadth with the match "
    "length and the level, until num-draft-tokens is filled; treeopt priced the grown tree, "
    "whose size and widest branching these flags copy, not SGLang's shape",
    "SGLang's trie is shared by all requests and indexes only the last max-trie-depth tokens of "
    "each request per step (not the whole prompt), so it drafts less from the prompt than "
    "treeopt's per-request trie that was priced",
    "these flags are for releases with --speculative-ngram-max-trie-depth; older ones use "
    "--speculative-ngram-branch-length and the match-window flags instead")


def ngram_notes(min_n: int) -> tuple[str, ...]:
    """What a user must know beside the NGRAM flags of a prompt-lookup chain."""
    return ("SGLang's NGRAM is not the same drafter: it drafts from one global trie of recent "
            "request tails (the last branch-length tokens of every request after each step), "
            "not from this request's prompt; the flags give the same chain length and match "
            "lengths",
            "with breadth 1 each match drafts a chain, but when the longest match's chain is "
            "shorter than k, shorter matches fill the free slots with their own chains, so the "
            "draft may branch at the root",
            "the 'window' line is for releases with --speculative-ngram-*-match-window-size; the "
            "'trie-depth' line for releases that replaced them with "
            "--speculative-ngram-max-trie-depth: those match 1 … max-trie-depth tokens, so min n "
            "and max n cannot be set there (the depth is max n + k, room for k tokens after a "
            "max-n match)")


def dynamic_flags(s: DynamicSettings, *, draft_model: str | None = "DRAFT",
                  algorithm: str = "EAGLE") -> str:
    """The EAGLE (or NEXTN) flags of dynamic settings ``s``; ``draft_model`` None leaves the
    draft model to SGLang (NEXTN: the target's own MTP layer).

    >>> dynamic_flags(DynamicSettings(4, 3, 16))
    '--speculative-algorithm EAGLE --speculative-draft-model-path DRAFT --speculative-num-steps 3 --speculative-eagle-topk 4 --speculative-num-draft-tokens 16'
    """
    model = f" --speculative-draft-model-path {draft_model}" if draft_model else ""
    return (f"--speculative-algorithm {algorithm}{model} --speculative-num-steps {s.steps} "
            f"--speculative-eagle-topk {s.topk} --speculative-num-draft-tokens {s.draft_tokens}")


def dynamic_problems(s: DynamicSettings) -> list[str]:
    """What SGLang would refuse or change in ``s`` (empty: it runs them as given).

    >>> dynamic_problems(DynamicSettings(1, 3, 3))
    ['top-k 1 drafts a chain: SGLang sets --speculative-num-draft-tokens to steps + 1 = 4']
    """
    if s.is_chain:
        if s.draft_tokens != s.steps + 1:
            return [f"top-k 1 drafts a chain: SGLang sets --speculative-num-draft-tokens to "
                    f"steps + 1 = {s.steps + 1}"]
        return []
    return ["top-k > 1 drafts a tree: SGLang refuses it with --page-size > 1 unless "
            "--attention-backend flashinfer, and on the trtllm_mha backend"]


def nextn_flags(*, steps: int, topk: int = 1, draft_tokens: int | None = None,
                draft_model: str | None = None) -> str:
    """SGLang's MTP drafting (``--speculative-algorithm NEXTN``, an alias of EAGLE): ``steps``
    draft forwards of the MTP layer, ``topk`` children a node (1: a chain), ``draft_tokens``
    verified tokens with the root (a chain: steps + 1, the default); ``draft_model`` None: the
    target's own MTP layer. Refused where SGLang would change the settings.

    >>> nextn_flags(steps=3)
    '--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4'
    >>> nextn_flags(steps=3, draft_tokens=3)
    Traceback (most recent call last):
    ...
    treeopt.errors.TreeoptError: SGLang's NEXTN with top-k 1 drafts a chain: it sets its draft tokens to steps + 1 = 4, not 3
    """
    tokens = steps + 1 if draft_tokens is None and topk == 1 else draft_tokens
    if tokens is None:
        raise TreeoptError("SGLang's NEXTN with top-k > 1 needs the number of draft tokens")
    s = DynamicSettings(topk, steps, tokens)
    if s.is_chain and tokens != steps + 1:
        raise TreeoptError(f"SGLang's NEXTN with top-k 1 drafts a chain: it sets its draft "
                           f"tokens to steps + 1 = {steps + 1}, not {tokens}")
    return dynamic_flags(s, draft_model=draft_model, algorithm="NEXTN")
