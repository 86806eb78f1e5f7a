"""Hugging Face ``generate``'s prompt lookup as an engine: the keyword arguments it takes, read
from transformers 5.23.0 ``generation/candidate_generator.py``
(``PromptLookupCandidateGenerator``): ``prompt_lookup_num_tokens`` tokens after the longest match
of up to ``max_matching_ngram_size`` tokens, down to one token; batch size 1 only.

>>> prompt_lookup_kwargs(k=4, max_n=3)
{'prompt_lookup_num_tokens': 4, 'max_matching_ngram_size': 3}
"""

from __future__ import annotations

from typing import Any

VERSIONS = "transformers 5.23.0 generation/candidate_generator.py (PromptLookupCandidateGenerator)"


def prompt_lookup_kwargs(*, k: int, max_n: int) -> dict[str, Any]:
    """``generate``'s keyword arguments for prompt lookup of ``k`` tokens after a match of up
    to ``max_n`` tokens (its minimum n is 1 and cannot be set)."""
    return {"prompt_lookup_num_tokens": k, "max_matching_ngram_size": max_n}


def prompt_lookup_notes(min_n: int) -> tuple[str, ...]:
    """What a user must know beside the keywords, given the n-gram minimum priced."""
    low = (f"Hugging Face always matches down to n = 1: min n {min_n} cannot be set, so it "
           "drafts where this setting would not",) if min_n > 1 else ()
    return low + ("Hugging Face prompt lookup runs at batch size 1 only",)
