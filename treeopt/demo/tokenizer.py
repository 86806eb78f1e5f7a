"""A byte-level BPE tokenizer trained on the demo's train part (the ``tokenizers`` library)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>")  # ids 0, 1, 2
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2


def train_tokenizer(texts: Sequence[str], *, vocab_size: int) -> Any:
    """A ``PreTrainedTokenizerFast`` (byte-level BPE, no added BOS) trained on ``texts``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="</s>", clean_up_tokenization_spaces=False)


def encode_stream(tokenizer: Any, texts: Sequence[str]) -> npt.NDArray[np.int32]:
    """All texts encoded and joined into one stream, each followed by the tokenizer's own EOS
    ``[tokens]`` (the demo's: :data:`EOS_ID`)."""
    eos = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else EOS_ID
    ids = tokenizer.backend_tokenizer.encode_batch(list(texts), add_special_tokens=False)
    pieces = [np.asarray(e.ids + [eos], dtype=np.int32) for e in ids]
    return np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
