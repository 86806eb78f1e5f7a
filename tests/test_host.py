"""The host's CPU in CPU measurements: recorded, compared, warned of, never pooled across."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_documents import step_profile, write

import treeopt.profiling.step as step
from treeopt.documents.step_profile import StepProfile
from treeopt.errors import TreeoptError
from treeopt.profiling.host import cpu_identity, other_cpu
from treeopt.profiling.verify_latency import build_model
from treeopt.roofline import preset

HEADS = {"kind": "hydra", "num_heads": 2, "hidden_size": 64, "vocab_size": 256}
AMX = {"name": "Intel(R) Xeon(R) Platinum", "matmul": "amx_bf16"}
EPYC = {"name": "AMD EPYC", "matmul": "avx512_bf16"}


def test_the_cpu_is_named_by_its_widest_matrix_instructions():
    info = ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Platinum\n"
            "flags\t\t: fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n")
    assert cpu_identity(info) == AMX
    assert cpu_identity(info.replace(" amx_bf16 amx_tile", ""))["matmul"] == "avx512_bf16"
    assert cpu_identity(info.replace("avx512f avx512_bf16 amx_bf16 amx_tile", ""))[
        "matmul"] == "avx2"
    here = cpu_identity()
    assert set(here) == {"name", "matmul"} and isinstance(here["name"], str)


def test_only_another_matrix_class_is_another_cpu():
    assert other_cpu(AMX, EPYC) == ("measured on a CPU with amx_bf16 (Intel(R) Xeon(R) "
                                    "Platinum), this one has avx512_bf16 (AMD EPYC)")
    assert other_cpu({**AMX, "name": "another Xeon"}, AMX) is None
    assert other_cpu({"name": "x", "matmul": None}, EPYC) is None  # not known: not compared
    assert other_cpu("amx", EPYC) is None  # not a record of one


def test_profiles_of_two_cpu_classes_are_not_pooled(tmp_path: Path):
    one = write(tmp_path / "one.json", step_profile(HEADS, meta={"cpu": AMX}))
    two = write(tmp_path / "two.json", step_profile(HEADS, meta={"cpu": EPYC}))
    three = write(tmp_path / "three.json", step_profile(HEADS))  # recorded no CPU: pooled
    assert StepProfile.load(one).cpu_matmul == "amx_bf16"
    assert len(StepProfile.pool([one, three]).records) == 2 * len(StepProfile.load(one).records)
    with pytest.raises(TreeoptError, match=f"{two}: profiled on a CPU with avx512_bf16, {one} "
                                           "on one with amx_bf16; only profiles of one setup"):
        StepProfile.pool([one, two])


@pytest.fixture(scope="module")
def tiny_model():
    return build_model(preset("tiny"), device="cpu", dtype="fp32")


def test_a_profile_of_another_cpu_class_is_warned_of_and_not_resumed(tiny_model, tmp_path,
                                                                     monkeypatch):
    from treeopt.profiling.step import setup_of

    here = {**setup_of(tiny_model)}
    doc = step_profile(HEADS, **{k: here[k] for k in ("device", "dtype", "attention", "model")},
                       meta={"cpu": AMX})
    path = write(tmp_path / "step.json", doc)
    monkeypatch.setattr(step, "cpu_identity", lambda: EPYC)
    monkeypatch.setattr("treeopt.profiling.host.cpu_identity", lambda: EPYC)
    said: list[str] = []
    step.check_setup(StepProfile.load(path), tiny_model, source="--step-profile s.json",
                     warn=said.append)
    assert said == ["warning: --step-profile s.json: measured on a CPU with amx_bf16 (Intel(R) "
                    "Xeon(R) Platinum), this one has avx512_bf16 (AMD EPYC); its step costs may "
                    "not hold here (treeopt profile step measures this host)"]
    said.clear()
    step.check_setup(replace(StepProfile.load(path), meta={"cpu": EPYC}), tiny_model,
                     source="s.json", warn=said.append)
    assert said == []
    assert step.host_meta(tiny_model) == {"cpu": EPYC}


def test_a_profile_resumed_on_another_cpu_class_is_refused(tiny_model, tmp_path, monkeypatch):
    from treeopt.drafters.heads import build_heads
    from treeopt.registry.drafter_configs import HeadsConfig

    cfg = tiny_model.config
    heads = build_heads(HeadsConfig(kind="medusa", num_heads=2, hidden_size=cfg.hidden_size,
                                    vocab_size=cfg.vocab_size), lm_head=tiny_model.lm_head,
                        embeddings=tiny_model.get_input_embeddings()).eval()
    out = tmp_path / "step.json"
    monkeypatch.setattr(step, "cpu_identity", lambda: AMX)
    first = step.resume_document(out, tiny_model, heads, [[1, 2]], 4, False)
    assert first.meta["cpu"] == AMX
    first.save(out)
    monkeypatch.setattr(step, "cpu_identity", lambda: EPYC)
    with pytest.raises(TreeoptError, match=f"{out}: profiled on a CPU with amx_bf16, this one "
                                           "has avx512_bf16; write to another path"):
        step.resume_document(out, tiny_model, heads, [[1, 2]], 4, False)
    assert json.loads(out.read_text())["meta"]["cpu"] == AMX  # nothing lost


def test_a_demo_says_which_of_its_profiles_another_cpu_measured(tmp_path, monkeypatch):
    from treeopt.demo.load import Demo, load

    demo = load(None, with_model=False)
    kind = demo.kinds[0]
    theirs = write(tmp_path / "step.json", step_profile(HEADS, meta={"cpu": AMX}))
    monkeypatch.setattr(Demo, "step_profile", lambda self, k: theirs if k == kind else None)
    monkeypatch.setattr("treeopt.profiling.host.cpu_identity", lambda: EPYC)
    assert demo.profiled_elsewhere() == [
        f"warning: {theirs}: measured on a CPU with amx_bf16 (Intel(R) Xeon(R) Platinum), this "
        "one has avx512_bf16 (AMD EPYC); its predictions may not hold here (treeopt demo build "
        "--redo timing measures this host)"]
    monkeypatch.setattr("treeopt.profiling.host.cpu_identity", lambda: AMX)
    assert demo.profiled_elsewhere() == []


def test_a_model_loaded_in_bf16_on_a_cpu_that_emulates_it_says_so(tmp_path, monkeypatch,
                                                                   capsys):
    import argparse

    from conftest import tiny_llama

    import treeopt.profiling.host as host
    from treeopt.cli.common import add_model_flags, load_model_from

    tiny_llama().save_pretrained(tmp_path)
    ap = argparse.ArgumentParser()
    add_model_flags(ap)
    for matmul, noted in (("avx2", True), ("avx512_bf16", False)):
        monkeypatch.setattr(host, "cpu_identity", lambda m=matmul: {"name": "EPYC", "matmul": m})
        for dtype in ("bf16", "fp32"):
            load_model_from(ap.parse_args(["--model", str(tmp_path), "--dtype", dtype]))
            err = capsys.readouterr().err
            assert ("no bf16 matrix instructions" in err) == (noted and dtype == "bf16"), (
                matmul, dtype)


def test_the_app_says_in_its_own_words_where_bf16_is_emulated(monkeypatch):
    import treeopt.profiling.host as host
    from treeopt.workbench.demos import emulated_here

    monkeypatch.setattr(host, "cpu_identity", lambda: {"name": "EPYC", "matmul": "avx2"})
    line = emulated_here("bfloat16")  # the Verify page's radio says bfloat16
    assert line.startswith("This CPU (EPYC, avx2) has no bf16 matrix instructions")
    assert line.endswith("float32 is faster here.") and "--" not in line
    assert emulated_here("float32") is None
    monkeypatch.setattr(host, "cpu_identity", lambda: {"name": "Xeon", "matmul": "amx_bf16"})
    assert emulated_here("bfloat16") is None
