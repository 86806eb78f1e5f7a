"""docs/byo-model.md end to end: a local Hugging Face model directory → train-heads → calibrate →
grow → select (predicted on a roofline preset, and measured: profile step → select
--step-profile) → export → verify, each through ``treeopt ARGS`` run as its subprocess would be
(:mod:`in_process`); an EAGLE drafter trained, calibrated, grown and exported; and every
``treeopt`` command written in the guide parses with the real parser."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

import in_process
import pytest

from treeopt.cli import build_parser

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "byo-model.md"


def run(*args: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TQDM_DISABLE": "1"}
    return in_process.treeopt(*args, env=env)


def ok(*args: object) -> subprocess.CompletedProcess[str]:
    proc = run(*args)
    assert proc.returncode == 0, f"treeopt {' '.join(map(str, args))}\n{proc.stderr}"
    return proc


def user_error(*args: object) -> str:
    """The one stderr line of a command refused with exit status 2."""
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def my_model(tmp_path_factory):
    """What a user brings: a local directory with config.json, model.safetensors and tokenizer
    files — here a tiny random Llama built from a config. Its LM head is scaled up (argmax, and so
    greedy decoding, unchanged) so that its next-token distribution is peaked: a teacher that
    heads can learn from in a few dozen steps, as they do from a real model."""
    torch = pytest.importorskip("torch")
    from conftest import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer(320)
    model = tiny_llama(vocab=len(tok), seed=0)
    with torch.no_grad():
        model.lm_head.weight.mul_(16)
    path = tmp_path_factory.mktemp("my-model")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_the_guide_end_to_end(my_model, prompts_file, tmp_path):
    prompts = prompts_file  # conftest: a JSONL of the six TEXTS, 24 characters each
    files = {name for name in os.listdir(my_model)}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= files
    assert not any(name.endswith((".bin", ".pt", ".pth", ".py")) for name in files)
    heads = _trained_heads(my_model, prompts, tmp_path)
    trace = _calibrated(my_model, heads, prompts, tmp_path)
    growth_file = _grown(trace, tmp_path)
    sel_file, pick = _selected_on_a_roofline(my_model, growth_file, trace, tmp_path)
    _selected_on_a_profile(my_model, heads, growth_file, trace, prompts, tmp_path)
    tree_file = _exported(sel_file, pick, tmp_path)
    _verified(my_model, heads, sel_file, prompts, trace, pick, tree_file, tmp_path)


def _trained_heads(my_model, prompts, tmp_path):
    # 2. heads: self-distilled on the model's own greedy continuations of the prompts
    heads = tmp_path / "heads"
    summary = json.loads(ok("train-heads", "--model", my_model, "--kind", "hydra", "--data",
                            prompts, "--generate", "32", "--num-heads", "3", "--steps", "30",
                            "--seq-len", "32", "--lr", "1e-2", "--warmup", "2", "--threads", "1",
                            "--out", heads).stdout)
    assert (summary["kind"], summary["steps"], summary["seq_len"]) == ("hydra", 30, 32)
    assert summary["final_loss"] < 0.8 * summary["first_loss"]
    assert sorted(os.listdir(heads)) == ["heads.json", "heads.safetensors"]
    config = json.loads((heads / "heads.json").read_text())["config"]
    assert (config["kind"], config["num_heads"], config["hidden_size"]) == ("hydra", 3, 64)
    return heads


def _calibrated(my_model, heads, prompts, tmp_path):
    # 3. calibrate: 6 prompts × 23 positions (where a 24-token run starts its steps)
    trace = tmp_path / "calibration.npz"
    doc = json.loads(ok("calibrate", "--model", my_model, "--heads", heads, "--prompts", prompts,
                        "--max-new-tokens", "24", "--top-k", "8", "--threads", "1", "--out",
                        trace).stdout)
    assert (doc["positions"], doc["heads"], doc["top_k"], doc["sequences"]) == (138, 3, 8, 6)
    assert trace.exists() and not list(tmp_path.glob(".*parts"))
    return trace


def _grown(trace, tmp_path):
    # 4. grow, shaped for the Hydra reference code
    growth_file = tmp_path / "growth.json"
    ok("grow", "--trace", trace, "--max-nodes", "8", "--constraint", "grounded", "--out",
       growth_file)
    growth = json.loads(growth_file.read_text())
    assert (growth["format"], growth["constraint"]) == ("treeopt.growth/1", "grounded")
    e_l = growth["expected_accept_length"]
    assert len(e_l) == 9 and e_l[0] == 1.0 and e_l == sorted(e_l) and e_l[-1] > 1.5
    return growth_file


def _selected_on_a_roofline(my_model, growth_file, trace, tmp_path):
    # 5. select on a roofline preset, for the model's own config.json. Drafting is left out: the
    # tiny model's heads cost as much as its whole forward, which no real model's do.
    sel_file = tmp_path / "selection.json"
    ok("select", "--growth", growth_file, "--trace", trace, "--hardware", "h100-sxm", "--model",
       my_model, "--batch", "1,16,256", "--context", "64", "--out", sel_file)
    sel = json.loads(sel_file.read_text())
    sizes = [p["best_size"] for p in sel["points"]]
    assert [p["batch"] for p in sel["points"]] == [1, 16, 256]
    assert sizes[0] >= 2 and sizes == sorted(sizes, reverse=True) and sizes[-1] == 0
    pick = sel["points"][0]
    assert pick["speedup"] > 1 and len(pick["choices"]) == pick["best_size"]
    ranges = sel["schedules"][0]["ranges"]
    assert (ranges[0]["min_batch"], ranges[-1]["max_batch"]) == (1, 256)

    # contexts that fit: s + max-nodes + 1 ≤ max_position_embeddings (512; 8 nodes → s ≤ 503)
    assert json.loads(ok("select", "--growth", growth_file, "--trace", trace, "--hardware",
                         "h100-sxm", "--model", my_model, "--batch", "1", "--context",
                         "503").stdout)["points"][0]["context"] == 503
    assert "context 504 + 9 tree tokens exceeds" in user_error(
        "select", "--growth", growth_file, "--trace", trace, "--hardware", "h100-sxm",
        "--model", my_model, "--batch", "1", "--context", "504")
    return sel_file, pick


def _selected_on_a_profile(my_model, heads, growth_file, trace, prompts, tmp_path):
    # 5, measured: the live step profiled phase by phase, then priced from the profile alone,
    # at the one context its prompts reach
    step_file = tmp_path / "step.json"
    ok("profile", "step", "--model", my_model, "--heads", heads, "--growth", growth_file,
       "--prompts", prompts, "--batch", "1,2", "--sizes", "1,2,4,8", "--max-new-tokens", "16",
       "--rounds", "1", "--threads", "1", "--out", step_file)
    profile = json.loads(step_file.read_text())
    assert profile["format"] == "treeopt.step-profile/1"
    assert {(r["batch"], r["size"]) for r in profile["records"]} >= {
        (b, n) for b in (1, 2) for n in (0, 1, 2, 4, 8)}
    measured_file = tmp_path / "selection-measured.json"
    ok("select", "--growth", growth_file, "--step-profile", step_file, "--trace", trace,
       "--out", measured_file)
    measured = json.loads(measured_file.read_text())
    assert measured["latency"]["source"] == measured["draft"]["source"] == str(step_file)
    assert [p["batch"] for p in measured["points"]] == [1, 2]
    context = measured["points"][0]["context"]
    assert all(p["context"] == context for p in measured["points"]) and 0 < context < 24 + 16
    line = user_error("select", "--growth", growth_file, "--step-profile", step_file,
                      "--trace", trace, "--context", "64", "--out", tmp_path / "none.json")
    assert "no measurements at batch 1, context 64" in line


def _exported(sel_file, pick, tmp_path):
    # 6. export straight from the selection: one file, then one per batch range
    tree_file = tmp_path / "hydra_choices.json"
    ok("export", "--tree", sel_file, "--batch", "1", "--format", "hydra", "--out", tree_file)
    assert json.loads(tree_file.read_text()) == pick["choices"]
    sched = tmp_path / "configs"
    ok("export", "--tree", sel_file, "--format", "hydra", "--schedule-dir", sched)
    plan = json.loads((sched / "schedule.json").read_text())
    written = [r for r in plan["ranges"] if r["size"] > 0]
    assert sorted(os.listdir(sched)) == sorted(["schedule.json", *(r["file"] for r in written)])
    for r in written:
        assert json.loads((sched / r["file"]).read_text()) == r["choices"]
    # the selection records the heads it was grown for: their count fills --num-heads
    yaml = ok("export", "--tree", sel_file, "--batch", "1", "--format", "trtllm-yaml").stdout
    assert "num_medusa_heads: 3" in yaml
    tree_only = tmp_path / "tree.json"
    tree_only.write_text(json.dumps(pick["choices"]))
    assert "--num-heads is required" in user_error("export", "--tree", tree_only,
                                                   "--format", "trtllm-yaml")
    assert "pick one with --batch" in user_error("export", "--tree", sel_file, "--format", "hydra")
    return tree_file


def _verified(my_model, heads, sel_file, prompts, trace, pick, tree_file, tmp_path):
    # 7. verify: the selection's batch-1 tree decodes exactly the autoregressive greedy tokens
    report_file = tmp_path / "report.json"
    ok("verify", "--model", my_model, "--heads", heads, "--tree", sel_file, "--batch", "1",
       "--prompts", prompts, "--max-new-tokens", "16", "--rounds", "1", "--threads", "1",
       "--trace", trace, "--out", report_file)
    report = json.loads(report_file.read_text())
    assert report["tree"]["choices"] == pick["choices"] == json.loads(tree_file.read_text())
    assert (report["mode"], report["outputs_match"], report["mismatched_prompts"]) == (
        "greedy", True, [])
    # lossless against the model's own greedy generate; the support probe within tolerance
    reference = report["model_generate"]
    assert report["lossless"] is True
    assert reference["tree_equals_generate"] and reference["autoregressive_equals_generate"]
    probe = report["support_probe"]
    assert probe["max_abs_hidden_diff"] <= probe["tolerance"] and probe["prefix_tokens"] >= 1
    tree_run, plain = report["tree_decoding"], report["autoregressive"]
    assert tree_run["tokens"] == plain["tokens"] == 6 * 16
    assert tree_run["steps"] < plain["steps"] and tree_run["mean_accept_length"] > 1.2
    # predicted over the positions a 16-token run starts steps at: the first 15 of each
    # sequence's 21 (the prefill emits the first token)
    assert report["predicted"]["trace_positions"] == 6 * 15


def test_an_eagle_drafter_end_to_end(my_model, prompts_file, tmp_path):
    """Section 2's EAGLE drafter: trained by train-heads --kind eagle, calibrated with --drafter,
    grown contiguous, and exported to TensorRT-LLM's EAGLE YAML with no --draft flags: the
    growth records the drafter."""
    eagle = tmp_path / "eagle"
    summary = json.loads(ok("train-heads", "--model", my_model, "--kind", "eagle", "--data",
                            prompts_file, "--generate", "32", "--num-heads", "3", "--steps",
                            "30", "--seq-len", "32", "--lr", "1e-2", "--warmup", "2",
                            "--threads", "1", "--out", eagle).stdout)
    assert summary["kind"] == "eagle" and summary["final_loss"] < summary["first_loss"]
    assert len(summary["final_top1_agreement"]) == 3  # one per depth
    assert sorted(os.listdir(eagle)) == ["heads.json", "heads.safetensors"]
    config = json.loads((eagle / "heads.json").read_text())["config"]
    assert (config["kind"], config["num_heads"], config["num_layers"]) == ("eagle", 3, 1)
    assert config["share_lm_head"] is True

    trace = tmp_path / "eagle-calibration.npz"
    doc = json.loads(ok("calibrate", "--model", my_model, "--drafter", eagle, "--prompts",
                        prompts_file, "--max-new-tokens", "24", "--top-k", "8", "--threads", "1",
                        "--out", trace).stdout)
    assert (doc["heads"], doc["top_k"], doc["sequences"]) == (3, 8, 6)
    growth = tmp_path / "eagle-growth.json"
    ok("grow", "--trace", trace, "--max-nodes", "8", "--constraint", "contiguous", "--out", growth)
    assert json.loads(growth.read_text())["meta"]["head_kind"] == "eagle"
    yaml = ok("export", "--tree", growth, "--size", "8", "--format", "trtllm-yaml").stdout
    assert "decoding_type: Eagle" in yaml and f'speculative_model: "{eagle}"' in yaml


def test_train_heads_defaults_on_a_few_short_lines(my_model, tmp_path):
    """The default --seq-len (128) is longer than the data: it is cut to fit, and said so."""
    data = tmp_path / "short.txt"
    data.write_text("def f(x):\n    return x\nprint(f(2))\n")
    proc = ok("train-heads", "--model", my_model, "--kind", "medusa", "--data", data,
              "--steps", "2", "--threads", "1", "--out", tmp_path / "heads")
    summary = json.loads(proc.stdout)
    assert 6 <= summary["tokens"] < 128 and summary["seq_len"] == summary["tokens"]
    assert f"--seq-len 128 cut to {summary['tokens']}" in proc.stderr
    saved = json.loads((tmp_path / "heads" / "heads.json").read_text())
    assert saved["train"]["seq_len"] == summary["tokens"]

    (tmp_path / "tiny.txt").write_text("hi")
    line = user_error("train-heads", "--model", my_model, "--kind", "medusa", "--data",
                      tmp_path / "tiny.txt", "--out", tmp_path / "none")
    assert "4 heads need at least 6" in line and "--generate" in line
    assert not (tmp_path / "none").exists()


def guide_commands() -> list[str]:
    """Every ``treeopt …`` command in the guide's bash blocks, continuation lines joined."""
    text = GUIDE.read_text()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line.startswith("treeopt "):
                commands.append(line)
    return commands


def test_the_guide_covers_every_step():
    argvs = [shlex.split(c)[1:] for c in guide_commands()]
    names = [argv[0] for argv in argvs]
    for step in ("train-heads", "calibrate", "grow", "select", "profile", "export", "verify"):
        assert step in names, step
    assert any(a[0] == "train-heads" and "eagle" in a for a in argvs)  # the EAGLE drafter
    assert any(a[:2] == ["profile", "step"] for a in argvs)  # the measured route …
    assert any(a[0] == "select" and "--step-profile" in a and "--hardware" not in a
               and "--latency" not in a for a in argvs)  # … priced from the profile alone
    text = GUIDE.read_text()  # the architecture table's place: right after section 1
    assert text.index("## 1.") < text.index("## Supported architectures") < text.index("## 2.")


@pytest.mark.parametrize("command", guide_commands())
def test_every_command_in_the_guide_parses(command):
    """Flags and values as written in the guide are accepted by the real parser."""
    argv = shlex.split(command)[1:]
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{command!r} does not parse (exit {exc.code})")
