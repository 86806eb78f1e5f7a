"""A trace sequence with no positions: refused in one line, by the one reader of a trace's
sequences, wherever a figure treats each sequence as a row of a batch."""

from __future__ import annotations

import numpy as np
import pytest

from treeopt.adaptive.workload import ChainAcceptance
from treeopt.errors import TreeoptError
from treeopt.model.simulation import (
    batch_window_accept_length,
    continuous_window_accept_length,
    simulate,
)
from treeopt.model.trace import RankTrace
from treeopt.model.tree import Tree
from treeopt.pricing.sweep_prediction import sweep_accept_length

# three sequences, the second with no positions (a continuation shorter than heads + 2 tokens)
HOLLOW = RankTrace(np.array([[0], [0], [-1], [0]], np.int16),
                   {"sequence_positions": [2, 0, 2], "source_path": "cal.npz"})
REFUSAL = "sequence 1 of 3 has 0 positions"


@pytest.mark.parametrize("figure", [
    lambda: batch_window_accept_length(Tree.chain(1), HOLLOW, 1),
    lambda: batch_window_accept_length(Tree.chain(1), HOLLOW, 3),
    lambda: continuous_window_accept_length(Tree.chain(1), HOLLOW, 2),
    lambda: sweep_accept_length(Tree.chain(1), HOLLOW, 3),
    lambda: sweep_accept_length(Tree.chain(1), HOLLOW, 2, continuous=True),
    lambda: ChainAcceptance.from_rank_trace(HOLLOW),
], ids=["batch-1", "batch-3", "continuous", "sweep", "sweep-continuous", "chain"])
def test_every_row_figure_refuses_an_empty_sequence_in_one_line(figure):
    with pytest.raises(TreeoptError) as caught:
        figure()
    message = str(caught.value)
    assert REFUSAL in message and "cal.npz" in message and "\n" not in message


def test_the_refusal_is_one_message_from_one_place():
    messages = set()
    for figure in (lambda: batch_window_accept_length(Tree.chain(1), HOLLOW, 2),
                   lambda: continuous_window_accept_length(Tree.chain(1), HOLLOW, 2),
                   lambda: ChainAcceptance.from_rank_trace(HOLLOW)):
        with pytest.raises(TreeoptError) as caught:
            figure()
        messages.add(str(caught.value).split(": ", 1)[1])
    assert len(messages) == 1


def test_dropping_empty_sequences_is_explicit_and_recorded():
    kept = HOLLOW.nonempty()
    assert kept.meta["sequence_positions"] == [2, 2]
    assert kept.meta["empty_sequences"] == [1]
    assert kept.ranks[:, 0].tolist() == [0, 0, -1, 0]
    assert continuous_window_accept_length(Tree.chain(1), kept, 2) == 1.5
    assert ChainAcceptance.from_rank_trace(kept).lengths == (2, 2)
    assert HOLLOW.nonempty().nonempty().meta["empty_sequences"] == [1]


def test_a_trace_without_empty_sequences_is_kept_as_it_is():
    full = RankTrace(np.array([[0], [0]], np.int16), {"sequence_positions": [1, 1]})
    assert full.nonempty() is full


def test_the_per_step_walk_counts_an_empty_sequence_as_no_steps():
    # the pooled per-step walk is no row figure: a sequence without positions takes no step
    walk = simulate(Tree.chain(1), HOLLOW, per_step=True)
    assert walk.sequences == ((2, 1), (0, 0), (3, 2))


def test_the_adaptive_command_leaves_a_short_continuation_out_with_a_note(capsys, tmp_path):
    from treeopt.cli import main

    path = tmp_path / "hollow.npz"
    RankTrace.load("data/demo/traces/eagle-heldout.npz").sequences(
        4, positions=[40, 0, 40, 40]).save(path)
    code = main(["adaptive", "--trace", str(path), "--batch", "1",
                 "--step-profile", "data/demo/latency/step-eagle-cpu.json"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert f"note: {path}: 1 sequences of 0 positions" in err
