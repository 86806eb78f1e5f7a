"""SGLang's trie drafter (kind ngram-trie): the incremental index equals a from-scratch build of
SGLang's insert and match, its ranks are hand-checked on a small sequence, live tree decoding
with it is lossless (greedy and sampled) and walking its trace reproduces live decoding step by
step; specs and drafter files name their settings."""

from __future__ import annotations

import json

import pytest
from continuous import assert_each_prompt_as_alone  # noqa: E402
from hypothesis import given, settings
from hypothesis import strategies as st

from treeopt.drafters.ngram_trie import TrieIndex, TrieRule, reference_candidates, trie_ranks
from treeopt.errors import TreeoptError

CONTEXTS = st.lists(st.integers(0, 3), min_size=1, max_size=40)
PATHS = st.lists(st.integers(0, 3), max_size=4)
MATCHES = st.sampled_from(["bfs", "prob"])


@settings(max_examples=300, deadline=None)
@given(CONTEXTS, PATHS, st.integers(2, 6), MATCHES)
def test_the_index_grown_token_by_token_equals_sglangs_insert_from_scratch(
        context, path, depth, match):
    rule = TrieRule(max_trie_depth=depth, match=match)
    index = TrieIndex(rule)
    for i, token in enumerate(context):
        index.extend([token])
        want = reference_candidates(context[: i + 1], path, rule, 10)
        assert index.candidates(path, 10) == want
        assert index.candidates(path, 2) == want[:2]
        for token_ in range(5):
            rank = want.index(token_) if token_ in want else -1
            assert index.rank(path, token_, 10) == rank
            assert index.rank(path, token_, 2) == (rank if rank < 2 else -1)


@settings(max_examples=150, deadline=None)
@given(CONTEXTS, st.integers(2, 5), MATCHES,
       st.lists(st.tuples(st.integers(-1, 6), st.integers(0, 2)), min_size=1, max_size=8))
def test_a_drafted_tree_holds_the_candidate_of_each_nodes_rank(context, depth, match, shape):
    parents = [min(p, i - 1) for i, (p, _) in enumerate(shape)]  # parents precede children
    ranks = [r for _, r in shape]
    index = TrieIndex(TrieRule(max_trie_depth=depth, match=match))
    index.extend(context)
    tokens = index.draft(parents, ranks)
    for i, (p, r) in enumerate(zip(parents, ranks, strict=True)):
        path, q = [], p
        while q >= 0:
            path.insert(0, tokens[q])
            q = parents[q]
        listed = index.candidates(path, r + 1) if -1 not in path else []
        assert tokens[i] == (listed[r] if r < len(listed) else -1)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=2, max_size=30), st.integers(2, 5), MATCHES,
       st.integers(1, 4), st.integers(1, 3))
def test_trie_ranks_rank_each_true_token_on_the_true_path(seq, depth, match, k, top_k):
    rule = TrieRule(max_trie_depth=depth, match=match)
    got = trie_ranks(seq, 0, rule, k, top_k=top_k)
    assert got.shape == (max(0, len(seq) - 1 - k), k)
    for t in range(got.shape[0]):
        for j in range(k):
            listed = reference_candidates(seq[: t + 2], seq[t + 2: t + 2 + j], rule, top_k)
            want = listed.index(seq[t + 2 + j]) if seq[t + 2 + j] in listed else -1
            assert got[t, j] == want


SEQ = [5, 6, 7, 5, 6, 7, 5, 6, 8, 5, 6, 7, 9]


def test_hand_worked_ranks_differ_between_recency_and_frequency():
    """At t = 8 the root is the fourth 5: after [5, 6] came 7 twice (starts 0, 3) and 8 once,
    later (start 6), so recency lists [8, 7] and frequency [7, 8]. At t = 9 the root is 6: the
    anchors are [5, 6] and [6] (the 3-token suffix is as deep as the trie: no children); below
    7 only [6, 7] has a child (5), not 9."""
    bfs = trie_ranks(SEQ, 0, TrieRule(max_trie_depth=3), 2, top_k=4)
    prob = trie_ranks(SEQ, 0, TrieRule(max_trie_depth=3, match="prob"), 2, top_k=4)
    assert bfs[8].tolist() == [0, 1] and prob[8].tolist() == [0, 0]
    assert bfs[9].tolist() == [1, -1] and prob[9].tolist() == [0, -1]
    assert bfs[:2].tolist() == [[-1, -1], [-1, -1]]  # nothing repeats yet
    assert trie_ranks(SEQ, 0, TrieRule(max_trie_depth=3), 2, top_k=1)[8:10].tolist() == [
        [0, -1], [-1, -1]]
    index = TrieIndex(TrieRule(max_trie_depth=3))
    index.extend(SEQ[:11])
    assert index.candidates([], 4) == [8, 7] and index.candidates([7], 4) == [5]
    assert index.draft([-1, -1, 0, 1], [0, 1, 0, 0]) == [8, 7, 5, 5]  # [6,8]→5, [6,7]→5


def test_bad_settings_are_refused_naming_the_setting():
    with pytest.raises(TreeoptError, match="max_trie_depth must be ≥ 2, got 1"):
        TrieRule(max_trie_depth=1)
    with pytest.raises(TreeoptError, match="match must be one of bfs, prob, got 'lru'"):
        TrieRule(match="lru")


# ---- the drafter, live and in calibration ------------------------------------------------------

torch = pytest.importorskip("torch")

from treeopt import Tree  # noqa: E402
from treeopt.decoding.calibrate import CalibrateConfig, calibrate  # noqa: E402
from treeopt.decoding.loop import DecodeConfig, decode, generate  # noqa: E402
from treeopt.drafters.trie_drafter import TrieDrafter, parse_trie_spec  # noqa: E402
from treeopt.model.growth import grow  # noqa: E402
from treeopt.model.simulation import step_lengths  # noqa: E402

PROMPTS = [[5, 17, 99, 3, 42, 5, 17], [7, 7, 8], [200, 100, 50, 25, 12, 6, 3], [9],
           [11, 12, 13, 11, 12, 14, 11, 12]]
GREEDY = DecodeConfig(max_new_tokens=48)
SAMPLED = DecodeConfig(max_new_tokens=40, mode="sample", temperature=0.8, seed=3)
TOP_K = 4


@pytest.fixture(scope="module")
def base(peaked):
    return peaked[0]


@pytest.fixture(scope="module", params=["bfs", "prob"])
def trie(request):
    return TrieDrafter(depth=5, max_trie_depth=6, match=request.param, vocab_size=256)


def _sampling(cfg):
    return {} if cfg.mode == "greedy" else {"temperature": cfg.temperature, "seed": cfg.seed}


@pytest.fixture(scope="module")
def grown(base, trie, tmp_path_factory):
    """A branching tree of 8 nodes grown from the trie's greedy trace over every prompt."""
    out = tmp_path_factory.mktemp(f"trie-{trie.rule.match}")
    trace, _ = calibrate(base, trie, PROMPTS, out / "t.npz",
                         config=CalibrateConfig(top_k=TOP_K, max_new_tokens=48))
    growth = grow(trace, method="empirical", max_nodes=8)
    tree = growth.tree(min(8, growth.max_nodes))
    assert tree.max_rank >= 1 and tree.depth >= 2  # it branches: the trie offers alternatives
    return tree


@pytest.mark.parametrize("cfg", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_the_trace_walk_reproduces_live_decoding_step_by_step(base, trie, grown, cfg, tmp_path):
    longest = 0
    for tree in (grown, Tree.from_choices([[0], [1], [0, 0], [1, 0], [0, 1], [0, 0, 0]])):
        for i, prompt in enumerate(PROMPTS):
            trace, _ = calibrate(base, trie, [prompt], tmp_path / f"{tree.size}-{i}.npz",
                                 config=CalibrateConfig(top_k=TOP_K,
                                                        max_new_tokens=cfg.max_new_tokens,
                                                        **_sampling(cfg)))
            assert (trace.head_kind, trace.heads) == ("ngram-trie", 5)
            walk = step_lengths(tree, trace).tolist()
            live = decode(base, trie, tree, [prompt], config=cfg,
                          streams=[0] if _sampling(cfg) else None)  # calibration's stream
            assert list(live.stats.accept_lengths[: len(walk)]) == walk
            longest = max(longest, *walk)
    assert longest > 2  # the walks compared steps where drafted tokens were accepted


@pytest.mark.parametrize("cfg", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_tree_decoding_with_the_trie_is_lossless(base, trie, grown, cfg):
    want = decode(base, None, Tree(()), PROMPTS, config=cfg).tokens
    got = decode(base, trie, grown, PROMPTS, config=cfg)
    assert got.tokens == want
    assert got.stats.mean_accept_length > (1.3 if cfg.mode == "greedy" else 1.05)
    wide = Tree.from_choices([[r] for r in range(TOP_K)] + [[0, r] for r in range(TOP_K)])
    assert decode(base, trie, wide, PROMPTS, config=cfg).tokens == want  # holes: -1 nodes


def test_every_row_of_a_batch_equals_that_row_decoded_alone(base, trie, grown):
    batch = decode(base, trie, grown, PROMPTS, config=GREEDY)
    for i, prompt in enumerate(PROMPTS):
        alone = generate(base, trie, grown, prompt, config=GREEDY)
        assert batch.tokens[i] == alone.tokens


@pytest.mark.parametrize("cfg", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_continuous_batching_decodes_each_prompt_as_alone(base, trie, grown, cfg):
    assert_each_prompt_as_alone(base, trie, grown, PROMPTS, cfg, batch=2)


def test_specs_and_drafter_files_name_the_settings(tmp_path, base):
    from treeopt.drafters.checkpoints import load_heads_for

    d = load_heads_for(base, "ngram-trie:depth=4,max-trie-depth=7,match=prob")
    assert isinstance(d, TrieDrafter)
    assert (d.config.num_heads, d.rule.max_trie_depth, d.rule.match, d.config.vocab_size) == (
        4, 7, "prob", 256)
    assert (d.config.min_match, d.config.max_match, d.config.match_type) == (1, 7, "prob")
    plain = load_heads_for(base, "ngram-trie", depth=8)
    assert (plain.config.num_heads, plain.rule) == (8, TrieRule(max_trie_depth=18, match="bfs"))
    d.save(tmp_path)
    again = load_heads_for(base, tmp_path)
    assert isinstance(again, TrieDrafter) and again.config == d.config
    for spec, message in [
            ("ngram-trie:size=3", "'size=3' is not one of depth=N, max-trie-depth=N, "
                                  "match=bfs|prob"),
            ("ngram-trie:depth", "'depth' is not one of"),
            ("ngram-trie:depth=x", "depth must be an integer, got 'x'"),
            ("ngram-trie:match=lru", "match must be one of bfs, prob, got 'lru'"),
            ("ngram-trie:max-trie-depth=1", "max_trie_depth must be ≥ 2, got 1"),
            ("ngram-trie:depth=0", "depth must be ≥ 1, got 0")]:
        with pytest.raises(TreeoptError, match=f"drafter spec '{spec}': .*{message}"):
            parse_trie_spec(spec, vocab_size=10)
    (tmp_path / "drafter.json").write_text(json.dumps(
        {"format": "treeopt.drafter/1", "kind": "ngram-trie", "depth": 4, "match": 3}))
    with pytest.raises(TreeoptError, match="drafter.json: match must be a string"):
        load_heads_for(base, tmp_path)


def test_a_tree_deeper_than_the_trace_is_refused(base):
    with pytest.raises(TreeoptError, match="depth 6 but there are only 5"):
        decode(base, TrieDrafter(depth=5, vocab_size=256), Tree.chain(6), PROMPTS[:1])


def test_the_cli_calibrates_grows_exports_selects_and_verifies_with_the_trie(
        tiny_model_dir, prompts_file, tmp_path):
    """The trie goes through the same commands as any drafter: --drafter SPEC; its growth and
    selection export SGLang's trie flags; a bad spec is one line on stderr and exit status 2."""
    from test_cli_models import assert_user_error, run

    from treeopt import RankTrace

    spec = "ngram-trie:depth=4,max-trie-depth=6,match=prob"
    proc = run("calibrate", "--model", tiny_model_dir, "--drafter", spec, "--prompts",
               prompts_file, "--max-new-tokens", "16", "--top-k", "4", "--out", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    trace = RankTrace.load(tmp_path / "t.npz")
    assert (trace.head_kind, trace.heads) == ("ngram-trie", 4)
    assert trace.meta["heads_config"]["match_type"] == "prob"
    assert trace.meta["heads_config"]["max_match"] == 6
    proc = run("grow", "--trace", tmp_path / "t.npz", "--max-nodes", "6", "--out",
               tmp_path / "g.json")
    assert proc.returncode == 0, proc.stderr
    growth = json.loads((tmp_path / "g.json").read_text())
    assert growth["meta"]["trace_meta"]["heads_config"]["match_type"] == "prob"
    proc = run("export", "--tree", tmp_path / "g.json", "--size", "3", "--format", "sglang")
    assert proc.returncode == 0, proc.stderr
    tree = Tree.from_choices(growth["order"][:3])
    widest = max(list(tree.parents).count(p) for p in range(-1, tree.size))
    assert proc.stdout.splitlines()[1] == (
        f"--speculative-algorithm NGRAM --speculative-num-draft-tokens 4 "
        f"--speculative-ngram-min-bfs-breadth 1 --speculative-ngram-max-bfs-breadth {widest} "
        f"--speculative-ngram-max-trie-depth 6 --speculative-ngram-match-type PROB")
    assert "SGLang shapes each step's tree itself" in proc.stderr
    proc = run("export", "--tree", tmp_path / "g.json", "--size", "3", "--format", "vllm")
    assert_user_error(proc, "format 'vllm' has no trie drafter", "export format 'sglang'")
    proc = run("profile", "step", "--model", tiny_model_dir, "--drafter", spec, "--growth",
               tmp_path / "g.json", "--prompts", prompts_file, "--batch", "1,2", "--sizes",
               "1,2,4", "--max-new-tokens", "6", "--rounds", "1", "--out", tmp_path / "step.json")
    assert proc.returncode == 0, proc.stderr
    proc = run("select", "--growth", tmp_path / "g.json", "--step-profile", tmp_path / "step.json",
               "--batch", "1,2", "--out", tmp_path / "sel.json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads((tmp_path / "sel.json").read_text())["schedules"][0]
    assert set(plan) >= {"sglang", "trie", "ranges"} and "vllm" not in plan
    assert plan["trie"] == {"max_trie_depth": 6, "match": "prob"}
    for r, flags in zip(plan["ranges"], plan["sglang"]["trie-depth"], strict=True):
        assert flags["config"] is None if not r["size"] else (
            flags["config"][3] == str(r["size"] + 1) and flags["config"][-1] == "PROB")
    (tmp_path / "tree.json").write_text("[[0], [1], [0, 0], [0, 1], [1, 0]]")
    proc = run("verify", "--model", tiny_model_dir, "--drafter", spec, "--tree",
               tmp_path / "tree.json", "--batch", "2", "--prompts", prompts_file,
               "--max-new-tokens", "10", "--trace", tmp_path / "t.npz")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs_match"] is True
    for bad, message in [("ngram-trie:match=lru", "match must be one of bfs, prob"),
                         ("ngram-trie:width=2", "'width=2' is not one of")]:
        proc = run("calibrate", "--model", tiny_model_dir, "--drafter", bad, "--prompts",
                   prompts_file, "--out", tmp_path / "o.npz")
        assert_user_error(proc, bad, message)
