"""``--demo [KIND]`` fills the flags a sub-command takes and the user left out."""

from __future__ import annotations

import json

import pytest

from treeopt.cli import build_parser, main
from treeopt.cli.demo_flags import expand_demo


@pytest.fixture()
def fake_demo(tmp_path, monkeypatch):
    """A demo directory with a manifest and a latency table (paths are all expand_demo needs)."""
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "treeopt.demo/1"}))
    (tmp_path / "latency").mkdir()
    (tmp_path / "latency" / "cpu.json").write_text("{}")
    monkeypatch.setenv("TREEOPT_DEMO", str(tmp_path))
    from treeopt.demo.layout import DemoPaths

    return DemoPaths(tmp_path)


def test_grow_gets_the_trace_and_the_held_out_trace(fake_demo):
    argv = expand_demo(["grow", "--demo", "--max-nodes", "4"], build_parser())
    assert argv == ["grow", "--demo", "--max-nodes", "4",
                    "--trace", str(fake_demo.trace("hydra")),
                    "--held-out", str(fake_demo.trace("hydra", heldout=True))]


def test_a_given_flag_and_its_exclusive_partners_are_left_alone(fake_demo):
    argv = expand_demo(["grow", "--demo", "medusa", "--accuracies", "a.csv", "--max-nodes", "4"],
                       build_parser())
    assert "--trace" not in argv  # --accuracies given: the exclusive --trace is not added
    assert argv[-2:] == ["--held-out", str(fake_demo.trace("medusa", heldout=True))]


def test_verify_gets_model_heads_trace_and_prompts(fake_demo):
    """The held-out prompts are decoded: the calibration trace predicts E[L], and the held-out
    trace, recorded on those prompts, is the one walked inside (predicted.inside_trace)."""
    argv = expand_demo(["verify", "--demo", "medusa", "--tree", "t.json"], build_parser())
    added = dict(zip(argv[5::2], argv[6::2], strict=True))
    assert added == {"--model": str(fake_demo.model), "--heads": str(fake_demo.heads("medusa")),
                     "--trace": str(fake_demo.trace("medusa")),
                     "--held-out": str(fake_demo.trace("medusa", heldout=True)),
                     "--prompts": str(fake_demo.prompts("heldout")),
                     "--dtype": "fp32"}  # a manifest without a dtype: the demo ran in fp32


@pytest.mark.parametrize("command", [["verify", "--tree", "t.json"], ["calibrate", "--out", "t.npz"],
                                     ["profile", "step", "--tree", "t.json"],
                                     ["train-heads", "--out", "h"]])
def test_the_demos_model_runs_in_the_demos_dtype(fake_demo, command):
    """SmolLM2's demo was built in bf16: its traces, profiles and picks describe bf16 decoding,
    so a command that loads its model from the demo runs it in bf16 (in fp32 the picked chain ran
    0.83× autoregressive decoding, where bf16 ran it 1.76×)."""
    manifest = json.loads(fake_demo.manifest.read_text())
    fake_demo.manifest.write_text(json.dumps({**manifest, "config": {"dtype": "bf16"}}))
    argv = expand_demo([*command, "--demo", "medusa"], build_parser())
    assert argv[argv.index("--dtype") + 1] == "bf16" and argv.count("--dtype") == 1
    given = expand_demo([*command, "--demo", "medusa", "--dtype", "fp32"], build_parser())
    assert given.count("--dtype") == 1 and given[given.index("--dtype") + 1] == "fp32"
    mine = expand_demo([*command, "--demo", "medusa", "--model", "m"], build_parser())
    assert "--dtype" not in mine  # the user's own model: their dtype, or the flag's default


def test_a_rooflines_precision_is_not_the_demos_dtype(fake_demo):
    fake_demo.manifest.write_text(json.dumps({"format": "treeopt.demo/1",
                                              "config": {"dtype": "fp32"}}))
    for command in (["select", "--demo"], ["roofline", "--demo", "--hardware", "h100-sxm"]):
        assert "--dtype" not in expand_demo(command, build_parser()), command


def test_select_gets_the_model_growth_and_measured_latency(fake_demo):
    argv = expand_demo(["select", "--demo"], build_parser())
    assert argv[2:] == ["--model", str(fake_demo.model), "--trace", str(fake_demo.trace("hydra")),
                        "--growth", str(fake_demo.growth("hydra")),
                        "--latency", str(fake_demo.root / "latency" / "cpu.json")]


def test_without_demo_nothing_changes(fake_demo):
    assert expand_demo(["grow", "--max-nodes", "4"], build_parser()) == ["grow", "--max-nodes", "4"]


def test_missing_demo_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TREEOPT_DEMO", str(tmp_path / "nowhere"))
    assert main(["grow", "--demo", "--max-nodes", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no demo here" in err[0]


def test_a_drafter_the_demo_does_not_ship_is_one_line_and_exit_2(fake_demo, capsys):
    fake_demo.trace("hydra").parent.mkdir()
    fake_demo.trace("hydra").write_bytes(b"")  # the demo ships Hydra heads alone
    assert main(["grow", "--demo", "ngram-trie", "--max-nodes", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "ships no ngram-trie drafter" in err[0]
    assert "it ships hydra" in err[0]


def test_select_gets_the_heads_step_profile_when_measured(fake_demo):
    fake_demo.step_profile("medusa").write_text("{}")
    argv = expand_demo(["select", "--demo", "medusa"], build_parser())
    assert argv[-2:] == ["--step-profile", str(fake_demo.step_profile("medusa"))]
    assert "--latency" not in argv  # the profile prices the verify step in the decoder's loop
    assert "--step-profile" not in expand_demo(["select", "--demo", "hydra"], build_parser())


def test_tune_gets_everything_it_predicts_with(fake_demo):
    fake_demo.step_profile("hydra").write_text("{}")
    argv = expand_demo(["tune", "--demo"], build_parser())
    added = dict(zip(argv[2::2], argv[3::2], strict=True))
    assert set(added) == {"--model", "--heads", "--trace", "--growth", "--prompts",
                          "--step-profile", "--dtype"}


def test_a_drafter_given_under_its_alias_is_not_filled_again(fake_demo):
    """--drafter and --heads are one flag: the user's --drafter keeps the demo's out."""
    argv = expand_demo(["verify", "--demo", "eagle", "--drafter", "mine", "--tree", "t.json"],
                       build_parser())
    assert "--heads" not in argv and argv.count("mine") == 1
    assert "--model" in argv and str(fake_demo.trace("eagle")) in argv
    argv = expand_demo(["calibrate", "--demo", "draft-model", "--out", "t.npz"], build_parser())
    assert argv[argv.index("--heads") + 1] == str(fake_demo.heads("draft-model"))


def test_export_gets_the_eagle_checkpoint_for_the_demo_eagle_drafter_only(fake_demo):
    argv = expand_demo(["export", "--demo", "eagle", "--tree", "s.json", "--format", "vllm"],
                       build_parser())
    assert argv[argv.index("--speculative-model") + 1] == str(fake_demo.heads("eagle"))
    argv = expand_demo(["export", "--demo", "hydra", "--tree", "s.json", "--format", "vllm"],
                       build_parser())
    assert "--speculative-model" not in argv


def test_a_nested_sub_command_gets_its_own_flags(fake_demo):
    """``profile step`` is a form of ``profile``: the demo fills step's flags, not profile's."""
    argv = expand_demo(["profile", "step", "--demo", "medusa", "--out", "s.json"], build_parser())
    added = dict(zip(argv[6::2], argv[7::2], strict=True))
    assert added == {"--model": str(fake_demo.model), "--heads": str(fake_demo.heads("medusa")),
                     "--growth": str(fake_demo.growth("medusa")),
                     "--prompts": str(fake_demo.prompts("heldout")), "--dtype": "fp32"}
    args = build_parser().parse_args(argv)
    assert (args.form, args.demo, args.heads) == ("step", "medusa", str(fake_demo.heads("medusa")))
    assert expand_demo(["profile", "--demo", "--out", "l.json"], build_parser())[4:] == [
        "--model", str(fake_demo.model)]
