"""The live loop's parts on their own, with exact values: the KV moves after a step
(:class:`~treeopt.decoding.prefixes.Prefixes`), the rows' bookkeeping
(:class:`~treeopt.decoding.batch_rows.BatchRows`), the step trees a source chooses
(:class:`~treeopt.decoding.tree_sources.ChosenTree`), the batching modes and the clocks (a fake
``perf_counter``). End-to-end exactness is tested in test_decode.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from treeopt.adaptive.policies import RoundState  # noqa: E402
from treeopt.decoding import clocks  # noqa: E402
from treeopt.decoding.accept import Verdict  # noqa: E402
from treeopt.decoding.batch_rows import BatchRows  # noqa: E402
from treeopt.decoding.batching import ContinuousBatch, StaticBatch  # noqa: E402
from treeopt.decoding.cache import SlotCache  # noqa: E402
from treeopt.decoding.config import DecodeConfig  # noqa: E402
from treeopt.decoding.prefixes import Prefixes  # noqa: E402
from treeopt.decoding.tree_sources import (  # noqa: E402
    ChosenTree,
    DynamicTree,
    StaticTree,
    step_trees,
)
from treeopt.errors import TreeoptError  # noqa: E402
from treeopt.model.dynamic_settings import DynamicSettings  # noqa: E402
from treeopt.model.tree import Tree  # noqa: E402


def _cache(rows: int, capacity: int) -> SlotCache:
    """A one-layer cache whose slot s of row r holds 100·r + s (keys) and its negative (values)."""
    slots = torch.arange(capacity, dtype=torch.float32)[None] + 100 * torch.arange(rows)[:, None]
    kv = torch.stack([slots, -slots])[None, :, :, None, :, None]  # [1, 2, b, 1, capacity, 1]
    return SlotCache(kv.clone())


def _keys(cache: SlotCache, row: int) -> list[int]:
    return [int(x) for x in cache.kv[0, 0, row, 0, :, 0]]


def test_prefixes_move_each_rows_accepted_keys_to_its_prefix_end():
    """Row 0 (prefix 3 = the frontier) accepted nodes 0 and 2: node 2 (slot 5) moves to slot 4.
    Row 1 (prefix 2) accepted the root alone: slot 3 moves to slot 2. The rest go to scratch."""
    cache = _cache(2, 8)
    prefixes = Prefixes(cache, scratch=7)
    prefixes.start(torch.tensor([3, 2]), [3, 2])
    verdict = Verdict(path=torch.tensor([[0, 2, 0], [0, 1, 0]]), length=torch.tensor([2, 1]),
                      next_root=torch.tensor([9, 9]))
    prefixes.extend(verdict, torch.arange(3), [2, 1], [[0, 2], [0]])
    assert _keys(cache, 0)[:5] == [0, 1, 2, 3, 5]
    assert _keys(cache, 1)[:3] == [100, 101, 103]
    assert [int(x) for x in cache.kv[0, 1, 1, 0, :3, 0]] == [-100, -101, -103]
    assert prefixes.lengths.tolist() == [5, 3] and prefixes.lens == [5, 3]
    assert prefixes.frontier == 5


def test_prefixes_leave_paths_in_place_alone():
    """Both rows at the frontier accepted the tree's first nodes in order: nothing moves, the
    prefixes only lengthen (a stopped row, 0 accepted, stays)."""
    cache = _cache(2, 8)
    before = cache.kv.clone()
    prefixes = Prefixes(cache, scratch=7)
    prefixes.start(torch.tensor([3, 3]), [3, 3])
    verdict = Verdict(path=torch.tensor([[0, 1], [0, 1]]), length=torch.tensor([2, 1]),
                      next_root=torch.tensor([9, 9]))
    prefixes.extend(verdict, torch.arange(2), [2, 0], [[0, 1], []])
    assert torch.equal(cache.kv, before)
    assert prefixes.lengths.tolist() == [5, 3] and prefixes.frontier == 5


def test_batch_rows_record_accepted_tokens_and_stop_at_eos():
    """Row 0 accepts nodes 0 and 2 (the root, node 0, was emitted before): node 2's token and
    its next root are new; row 1 emits EOS (7) and stops, its step keeping the EOS alone; a
    stopped row accepts nothing more."""
    rows = BatchRows([[1], [2]], 2, DecodeConfig(max_new_tokens=10, eos_token_id=7))
    rows.first([5, 6])
    tokens = torch.tensor([[5, 11, 12], [6, 7, 13]])
    verdict = Verdict(path=torch.tensor([[0, 2], [0, 1]]), length=torch.tensor([2, 2]),
                      next_root=torch.tensor([20, 21]))
    accepted, paths = rows.read(verdict, tokens)
    assert (accepted, paths, rows.kept) == ([2, 2], [[0, 2], [0, 1]], [2, 1])
    assert rows.out == [[5, 12, 20], [6, 7, 21]] and rows.active == [True, False]
    assert rows.read(verdict, tokens)[0] == [2, 0] and rows.kept == [2, 0]
    assert rows.tokens() == ((5, 12, 20, 12, 20), (6, 7))
    assert rows.steps == [[2, 2], [1]]  # each step's tokens kept: the output less the first


def test_batch_rows_keep_no_step_token_past_the_budget():
    rows = BatchRows([[1]], 1, DecodeConfig(max_new_tokens=3))
    rows.first([5])
    verdict = Verdict(path=torch.tensor([[0, 1, 2]]), length=torch.tensor([3]),
                      next_root=torch.tensor([20]))
    assert rows.read(verdict, torch.tensor([[5, 11, 12]]))[0] == [3]  # 3 accepted, 2 kept
    assert (rows.kept, rows.steps, rows.tokens()) == ([2], [[2]], ((5, 11, 12),))


def test_batch_rows_take_a_new_prompt_into_a_stopped_row():
    rows = BatchRows([[1], [2], [3]], 2, DecodeConfig(max_new_tokens=1))
    rows.first([5, 6])
    assert rows.active == [False, False]
    assert rows.take(1, 2, 8) is False  # its budget of 1 is its first token
    assert rows.owner == [0, 2] and rows.out == [[5], [6], [8]]
    assert rows.progress == 1.0


class _Chooser:
    """Chain [0] while more than one row runs, else the empty tree; records what it is told."""

    trees = (Tree(()), Tree(((0,),)))

    def __init__(self, pick=None):
        self.told: list[tuple[RoundState, list[int]]] = []
        self.pick = pick

    def tree(self, state: RoundState) -> Tree:
        return self.pick or self.trees[state.batch > 1]

    def verified(self, state: RoundState, accepted) -> None:
        self.told.append((state, list(accepted)))


def test_a_chosen_tree_gets_each_rounds_state_and_the_accepted_draft_tokens():
    source = _Chooser()
    chosen = ChosenTree(source, "cpu")
    assert (chosen.tokens, chosen.fed, chosen.drafts) == (2, 0, True)
    assert chosen.shape(0, 2).tree == Tree(((0,),))
    chosen.verified([2, 1])
    assert chosen.shape(1, 1).tree == Tree(())
    chosen.verified([1, 0])  # a stopped row did not run the step
    assert source.told == [(RoundState(0, 2, None), [1, 0]), (RoundState(1, 1, 2), [0])]


def test_a_chosen_tree_outside_the_offered_ones_is_refused():
    chosen = ChosenTree(_Chooser(pick=Tree(((0,), (1,)))), "cpu")
    with pytest.raises(TreeoptError, match=r"round 3: the tree source chose a tree it does not"):
        chosen.shape(3, 1)


def test_step_trees_size_the_run_by_their_source():
    static = StaticTree(Tree(((0,), (0, 0))), "cpu")
    assert (static.tokens, static.fed, static.drafts) == (3, 0, True)
    assert StaticTree(Tree(()), "cpu").drafts is False  # autoregressive
    settings = DynamicSettings(topk=4, steps=3, draft_tokens=10)
    dynamic = DynamicTree(settings)
    assert (dynamic.tokens, dynamic.fed, dynamic.shape(5, 2)) == (10, 8, settings)
    with pytest.raises(TreeoptError, match="tree decoding needs draft heads"):
        step_trees(Tree(((0,),)), None, "cpu")
    with pytest.raises(TreeoptError, match="no trees to choose from"):
        step_trees(type("Empty", (), {"trees": ()})(), None, "cpu")


def test_batching_modes():
    static = StaticBatch()
    assert not static.pending and not static.due([False, True])
    continuous = ContinuousBatch(range(2, 4))
    assert continuous.pending and continuous.due([False, True])
    assert not continuous.due([True, True])
    continuous.waiting.clear()
    assert not continuous.pending and not continuous.due([False, False])


def test_the_timer_counts_the_steady_window_without_prefill_or_refills(monkeypatch):
    """Prefill 2 s, a steady step 3 s, a refill 5 s, another steady step 7 s, a tail step 11 s:
    the run's own time is all of it, the window its two steady steps."""
    now = [0.0]
    monkeypatch.setattr(clocks.time, "perf_counter", lambda: now[0])
    timer = clocks.RunTimer(torch.device("cpu"))

    def spend(seconds: float) -> float:
        entered = timer.now()
        now[0] += seconds
        return entered

    timer.prefilled(spend(2.0))
    for seconds, steady in ((3.0, True), (5.0, None), (7.0, True), (11.0, False)):
        entered = spend(seconds)
        if steady is None:
            timer.refilled(entered)
            continue
        if steady:
            timer.steady(entered, [2, 3])
        timer.stepped(entered)
    assert (timer.busy, timer.decode_seconds) == (28.0, 10.0)
    assert (timer.steady_tokens, timer.steady_row_steps) == (10, 4)


def test_the_phase_clock_totals_the_counted_steps_alone(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(clocks.time, "perf_counter", lambda: now[0])
    clock = clocks.PhaseClock(torch.device("cpu"), on=True)
    for counted, laps in ((True, (1.0, 2.0, 4.0)), (False, (8.0, 16.0, 32.0))):
        clock.restart()
        for phase, seconds in zip((clocks.DRAFT, clocks.VERIFY, clocks.BOOKKEEPING), laps,
                                  strict=True):
            now[0] += seconds
            clock.lap(phase)
        clock.end_step(counted=counted)
    split = clock.split()
    assert (split.draft_s, split.verify_s, split.bookkeeping_s, split.steps) == (1.0, 2.0, 4.0, 1)
    assert clocks.PhaseClock(torch.device("cpu"), on=False).split() is None
