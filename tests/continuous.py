"""Continuous batching's one check, shared by every drafter's tests: each prompt decoded by a
batch whose finished rows take the next prompt comes out as it does decoded alone."""

from __future__ import annotations

from treeopt.decoding.loop import Decoder


def assert_each_prompt_as_alone(model, drafter, tree, prompts, config, *, batch: int) -> None:
    """``prompts`` decoded with ``batch`` rows, continuously: every prompt's tokens and its
    accepted lengths, step by step, equal those of the prompt decoded alone with its own
    sampling stream; every row taking a new prompt at least once."""
    assert batch < len(prompts)
    decoder = Decoder(model, drafter)
    got = decoder.decode(tree, prompts, config=config, batch=batch)
    steps = got.stats.sequence_accept_lengths
    assert len(got.tokens) == len(steps) == len(prompts)
    for i, prompt in enumerate(prompts):
        alone = decoder.decode(tree, [prompt], config=config, streams=[i])
        assert got.tokens[i] == alone.tokens[0], i
        assert steps[i] == alone.stats.accept_lengths, i
