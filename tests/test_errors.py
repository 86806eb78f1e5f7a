"""Library errors speak the library's terms (fields, never CLI flags); the CLI names the flags."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from treeopt.cli import actions, build_parser, flag_for, main
from treeopt.errors import FIELD_REF, FieldError, TreeoptError

ROOT = Path(__file__).resolve().parents[1] / "treeopt"
FLAG = re.compile(r"--[a-z]")
# messages that really are about the CLI: each names the command that writes the missing file
EXEMPT = {
    ("demo/layout.py", "no demo here"),  # `treeopt demo build --out DIR` builds one
    ("workbench/trees.py", "not a selection"),  # written by `treeopt select --out`
}


def _library_raises() -> list[tuple[str, ast.Raise, list[str]]]:
    """Every raise outside treeopt/cli, with the string constants of its message."""
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("cli/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
                texts = [n.value for n in ast.walk(node.exc)
                         if isinstance(n, ast.Constant) and isinstance(n.value, str)]
                found.append((rel, node, texts))
    return found


def _raised_fields() -> set[str]:
    """The fields every ``FieldError(...)`` in the library names, its own and those its rule
    refers to."""
    fields = set()
    for rel, node, texts in _library_raises():
        call = node.exc
        if getattr(call.func, "id", None) != "FieldError":
            continue
        first = call.args[0]
        if isinstance(first, ast.Constant):
            fields.add(first.value)
        elif isinstance(first, ast.Name):  # a loop over literal names: take them from the loop
            fields.update(_loop_names(rel, node, first.id))
        fields.update(name for text in texts[1:] for name in FIELD_REF.findall(text))
    return fields


def _loop_names(rel: str, raised: ast.Raise, var: str) -> set[str]:
    """The string literals of the ``for var[, …] in (...)`` of module ``rel`` around ``raised``."""
    names = set()
    for node in ast.walk(ast.parse((ROOT / rel).read_text())):
        if isinstance(node, ast.For) and var in {n.id for n in ast.walk(node.target)
                                                 if isinstance(n, ast.Name)} and any(
                isinstance(n, ast.Raise) and n.lineno == raised.lineno for n in ast.walk(node)):
            names.update(n.value for n in ast.walk(node.iter)
                         if isinstance(n, ast.Constant) and isinstance(n.value, str)
                         and n.value.isidentifier())
    return names


def test_a_library_call_names_the_field():
    from treeopt.decoding.config import DecodeConfig

    with pytest.raises(FieldError, match=r"^top_p must be in \(0, 1\], got 2$") as caught:
        DecodeConfig(top_p=2)
    assert (caught.value.field, caught.value.rule) == ("top_p", "must be in (0, 1], got 2")
    with pytest.raises(FieldError, match="^mode sample needs temperature > 0, got 0$"):
        DecodeConfig(mode="sample", temperature=0)


def test_measurement_errors_are_field_errors():
    from treeopt.documents.measure import Measurement, MeasurementError

    assert issubclass(MeasurementError, FieldError)
    with pytest.raises(FieldError, match="^target_se must be in"):
        Measurement(target_se=2.0)


def test_the_cli_names_the_flag(tmp_path, capsys):
    """--top-p and --target-se are refused before any model loads, in the flags' names."""
    tree, prompts = tmp_path / "t.json", tmp_path / "p.txt"
    tree.write_text("[[0]]")
    prompts.write_text("hello")
    argv = ["verify", "--model", str(tmp_path / "none"), "--heads", str(tmp_path / "heads"),
            "--tree", str(tree), "--prompts", str(prompts)]
    assert main([*argv, "--mode", "sample", "--top-p", "2"]) == 2
    assert capsys.readouterr().err == ("treeopt verify: error: --top-p must be in (0, 1], "
                                       "got 2.0\n")
    assert main([*argv, "--target-se", "3"]) == 2
    assert "--target-se must be in [0, 1), got 3.0" in capsys.readouterr().err


def test_flags_come_from_the_sub_command_then_the_table():
    parser = build_parser()
    calibrate = next(a for a in parser._actions if hasattr(a, "choices")
                     and isinstance(a.choices, dict)).choices["calibrate"]
    assert flag_for("top_k", calibrate) == "--top-k"  # calibrate's own rank cut
    assert flag_for("top_k") == "--sample-top-k"  # DecodeConfig's, through the table
    assert flag_for("heads", calibrate) == "--drafter"  # dest differs from the flag
    rendered = FieldError("max_depth", "and {max_rank} must be at least 1, got 0").named(flag_for)
    assert rendered == "--max-depth and --max-rank must be at least 1, got 0"


def test_every_raised_field_maps_to_a_flag():
    flags = {o for a in actions(build_parser()) for o in a.option_strings}
    fields = _raised_fields()
    assert {"top_p", "max_new_tokens", "device", "draft_tokens", "max_rank"} <= fields
    unmapped = sorted(f for f in fields if flag_for(f) not in flags)
    assert not unmapped, f"FieldError fields with no flag of any sub-command: {unmapped}"


def test_no_library_message_names_a_flag():
    named = [f"{rel}:{node.lineno}" for rel, node, texts in _library_raises()
             if any(FLAG.search(t) for t in texts)
             and not any(rel == r and any(part in t for t in texts) for r, part in EXEMPT)]
    assert not named, f"library errors naming a CLI flag (name the field instead): {named}"


def test_the_flag_scan_finds_a_planted_flag():
    planted = ast.parse('raise TreeoptError(f"--top-p {x} is bad")').body[0]
    texts = [n.value for n in ast.walk(planted) if isinstance(n, ast.Constant)]
    assert any(FLAG.search(t) for t in texts)
    assert isinstance(FieldError("a", "b"), TreeoptError)
