"""A sweep's points timed together: every point of a batch size measured against one
autoregressive decoding a round (``tune(together=True)``,
:func:`~treeopt.decoding.compare.compare_together`), recorded so, resumed only so, and decoding
what each tree alone decodes."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from test_tune import GROWTH, PROMPTS, Stop  # noqa: E402

from treeopt.decoding.batch_run import BatchResult  # noqa: E402
from treeopt.decoding.compare import compare, compare_together, rounds_each  # noqa: E402
from treeopt.decoding.config import DecodeConfig  # noqa: E402
from treeopt.decoding.live_sweep import tune  # noqa: E402
from treeopt.decoding.stats import DecodeStats  # noqa: E402
from treeopt.documents.measure import Measurement, pooled_spread  # noqa: E402
from treeopt.documents.sweep import BY_BATCH, Sweep, timed_together  # noqa: E402
from treeopt.errors import TreeoptError  # noqa: E402
from treeopt.model.tree import Tree  # noqa: E402

CONFIG = DecodeConfig(max_new_tokens=6)


def swept(model_and_heads, out, *, together=True, rounds=2, **kw):
    model, heads = model_and_heads
    args = {"batch": [1, 2], "sizes": [1, 2, 3], "config": CONFIG,
            "measure": Measurement(rounds)} | kw
    return tune(model, heads, GROWTH, PROMPTS, out=out, together=together, **args)


def test_points_timed_together_share_one_autoregressive_decoding(model_and_heads, tmp_path):
    """Each batch size's points meet one autoregressive decoding: the same autoregressive
    tokens/s and rounds at every point of a batch size, each point's speed-up its tree's rounds
    over those, every output equal to autoregressive decoding's, the meta saying how."""
    sweep = swept(model_and_heads, tmp_path / "s.json", rounds=3)
    assert sweep.meta["points_timed"] == "together" and sweep.timing(2)["points_timed"] == (
        "together")
    assert [p.key for p in sweep.points] == [(b, n, None) for b in (1, 2) for n in (1, 2, 3)]
    for b in (1, 2):
        points = [p for p in sweep.points if p.batch == b]
        assert len({p.autoregressive_tokens_per_s for p in points}) == 1
        assert {p.rounds for p in points} == {3}
        assert all(p.lossless for p in points)
        for p in points:
            assert p.tree_tokens_per_s == pytest.approx(p.autoregressive_tokens_per_s
                                                        * p.speedup, rel=1e-12)
    apart = swept(model_and_heads, tmp_path / "apart.json", together=False, rounds=1)
    assert apart.meta["points_timed"] == "apart"
    assert [p.mean_accept_length for p in apart.points] == [
        p.mean_accept_length for p in sweep.points]  # the same decodings, timed otherwise


def test_compare_together_decodes_what_each_tree_decodes_alone(model_and_heads):
    """One comparison per tree, each with the tree's own outputs and steps and the shared
    autoregressive rounds; the standard error floored by the trees' pooled round spread."""
    model, heads = model_and_heads
    trees = [Tree.chain(1), Tree.chain(2), Tree.from_choices([[0], [1]])]
    together = compare_together(model, heads, trees, PROMPTS, config=CONFIG, batch=1,
                                measure=Measurement(2))
    assert len(together) == 3
    spread = pooled_spread([c.round_speedups() for c in together])
    for tree, both in zip(trees, together, strict=True):
        alone = compare(model, heads, tree, PROMPTS, config=CONFIG, batch=1)
        assert both.tree is tree and both.tree_outputs == alone.tree_outputs
        assert both.tree_stats.accept_lengths == alone.tree_stats.accept_lengths
        assert both.autoregressive_rounds == together[0].autoregressive_rounds
        assert both.lossless and len(both.tree_rounds) == 2
        assert both.spread == pytest.approx(spread, rel=1e-12)


class ScriptedDecoder:
    """Decodes nothing: each shape's run of a round takes the seconds its script gives for that
    round (the autoregressive run 1 s; the warm-up as round 0), 10 steady tokens, so a tree's
    speed-up is 1 / its seconds; records which shapes each call ran."""

    def __init__(self, scripts: dict[Tree, list[float]]):
        self.scripts, self.calls = scripts, []

    def decode_alongside(self, shapes, group, *, config, batch=None, streams=None):
        self.calls.append(tuple(shapes))
        timed = max(len(self.calls) - 2, 0)  # round 0 after the warm-up, as round 0 is
        return [BatchResult(((1,),), DecodeStats(10, (1,), s, 10, s))
                for s in (1.0 if shape.size == 0 else self.scripts[shape][timed % 8]
                          for shape in shapes)]


STEADY = [Tree.chain(1), Tree.chain(2), Tree.chain(3)]
NOISY = Tree.chain(4)
TO_2_PERCENT = Measurement(rounds=2, target_se=0.02, max_rounds=8)


def scripted(noisy: list[float]) -> ScriptedDecoder:
    """Three trees steady to 0.5% and one whose seconds, round by round, are ``noisy``."""
    return ScriptedDecoder({STEADY[0]: [0.5, 0.502] * 4, STEADY[1]: [0.4, 0.401] * 4,
                            STEADY[2]: [0.6, 0.603] * 4, NOISY: noisy})


def test_a_tree_measured_sits_out_the_rounds_the_others_need():
    """Timed together to a target, trees whose speed-ups met it (each floored by the spread
    pooled over all four) stop decoding while a noisy one goes on; each gets the
    autoregressive rounds it ran beside, and its speed-up is the median of those."""
    decoder = scripted([0.5, 0.52, 0.485, 0.515, 0.49, 0.51, 0.5, 0.5])
    ar, own = rounds_each(decoder, [*STEADY, NOISY], [[[1, 2]]], config=CONFIG,
                          measure=TO_2_PERCENT)
    assert decoder.calls[0] == (Tree(()), *STEADY, NOISY)  # the warm-up: every tree
    assert [[i for i, _ in rounds] for rounds in own] == [[0, 1]] * 3 + [[0, 1, 2, 3]]
    assert decoder.calls[3:] == [(Tree(()), NOISY)] * 2  # rounds 2 and 3: the noisy tree alone
    assert len(ar) == 4
    assert [runs[0].stats.seconds for _, runs in own[3]] == [0.5, 0.52, 0.485, 0.515]
    assert [runs[0].stats.seconds for _, runs in own[1]] == [0.4, 0.401]


def test_a_tree_rejoins_when_the_pooled_spread_grows_past_it():
    """Three rounds that agreed stop the steady trees; when the noisy tree's later rounds swing
    widely, the pooled spread floors the steady trees' standard errors above the target again,
    and they decode beside it until they meet it or reach the rounds' cap."""
    decoder = scripted([0.5, 0.52, 0.485, 0.6, 0.4, 0.6, 0.4, 0.5])
    ar, own = rounds_each(decoder, [*STEADY, NOISY], [[[1, 2]]], config=CONFIG,
                          measure=TO_2_PERCENT)
    assert [[i for i, _ in rounds] for rounds in own] == [[0, 1, 4, 5, 6, 7, 8, 9]] * 3 + [
        list(range(8))]  # out for rounds 2 and 3; the noisy tree at the cap after round 7
    assert decoder.calls[3:5] == [(Tree(()), NOISY)] * 2 and len(ar) == 10
    lockstep = scripted([0.5, 0.52, 0.485, 0.6, 0.4, 0.6, 0.4, 0.5])
    ar, own = rounds_each(lockstep, [*STEADY, NOISY], [[[1, 2]]], config=CONFIG,
                          measure=TO_2_PERCENT, ragged=False)  # the reference: every round
    assert [[i for i, _ in rounds] for rounds in own] == [list(range(8))] * 4
    assert set(lockstep.calls) == {(Tree(()), *STEADY, NOISY)}


def test_an_interrupted_together_sweep_resumes_after_its_last_batch_size(model_and_heads,
                                                                          tmp_path):
    """A batch size's points are written together, after its one measurement: stopped after
    the first, the file holds that batch size whole and the run again measures only the next."""
    out = tmp_path / "s.json"
    seen: list[tuple[int, int]] = []

    def stop_after_first(done: int, total: int) -> None:
        seen.append((done, total))
        if done == 3:
            raise Stop

    with pytest.raises(Stop):
        swept(model_and_heads, out, progress=stop_after_first)
    assert seen == [(3, 6)]
    kept = Sweep.load(out)
    assert [p.key for p in kept.points] == [(1, 1, None), (1, 2, None), (1, 3, None)]
    done = swept(model_and_heads, out)
    assert done.points[:3] == kept.points and len(done.points) == 6


def test_a_batch_size_resumes_only_timed_as_its_points_were(model_and_heads, tmp_path):
    """Points timed apart are not mixed with points timed together at one batch size: refused
    in one line that names the setting and both values; a batch size without points may be
    timed together, and the sweep records it as that batch size's own timing."""
    out = tmp_path / "s.json"
    swept(model_and_heads, out, together=False, batch=[1], sizes=[1], rounds=1)
    with pytest.raises(TreeoptError, match=r"s.json: a sweep measured with other points_timed "
                                           r"at batch 1 \(apart, not together\); write to "
                                           "another path"):
        swept(model_and_heads, out, batch=[1], sizes=[1, 2], rounds=1)
    mixed = swept(model_and_heads, out, together=False, batch=[1, 2], sizes=[1, 2], rounds=1,
                  measure_at={2: Measurement(1)})
    assert mixed.meta["points_timed"] == "apart"
    grown = swept(model_and_heads, tmp_path / "t.json", batch=[1], sizes=[1], rounds=1)
    assert grown.meta["points_timed"] == "together"
    both = swept(model_and_heads, tmp_path / "t.json", together=False, batch=[2], sizes=[1],
                 rounds=1)
    assert both.meta[BY_BATCH]["2"]["points_timed"] == "apart"
    assert both.timing(1)["points_timed"] == "together"
    assert Sweep.load(tmp_path / "t.json").timing(2)["points_timed"] == "apart"


def test_a_command_times_as_its_sweep_file_was_timed(model_and_heads, tmp_path):
    """What ``treeopt tune`` does without --together or --apart: together for a new file, and
    as the file says for one that exists (apart where it says nothing); a file that cannot be
    read is left to the resume's own refusal."""
    assert timed_together(tmp_path / "new.json") is None
    swept(model_and_heads, tmp_path / "t.json", batch=[1], sizes=[1], rounds=1)
    swept(model_and_heads, tmp_path / "a.json", together=False, batch=[1], sizes=[1], rounds=1)
    assert timed_together(tmp_path / "t.json") is True
    assert timed_together(tmp_path / "a.json") is False
    doc = json.loads((tmp_path / "a.json").read_text())
    del doc["meta"]["points_timed"]  # written before points could be timed together
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert timed_together(tmp_path / "old.json") is False
    (tmp_path / "bad.json").write_text("{")
    assert timed_together(tmp_path / "bad.json") is None
