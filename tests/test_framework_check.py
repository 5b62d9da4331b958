"""`verify` against the framework's own conversion (`fp8advisor.verification.framework_check`): what differs
fails the file (exit 1) naming the layer, what the framework said reaches the report, and the `framework:`
line says whether its own code ran. The frameworks' own runs are tested in tests/test_native_*.py; here the
comparison and the report around them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _verify_helpers import ADVISED, torchtitan_toml, use_test_predictor, write_tiny_model  # noqa: E402

from fp8advisor.cli import app  # noqa: E402
from fp8advisor.verification import framework_check  # noqa: E402
from fp8advisor.verification.native import NativeConversion, NotRun  # noqa: E402
from fp8advisor.verification.report import DifferenceKind  # noqa: E402

runner = CliRunner()
FRAMEWORK = "Someframework 9.9"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return write_tiny_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(autouse=True)
def test_predictor(monkeypatch):
    """The CLI asks for a profile; the tests answer with the fixed predictor of _verify_helpers."""
    use_test_predictor(monkeypatch)


def framework_converts(monkeypatch, linear: set[str], notes: tuple[str, ...] = (), other_model: str = ""):
    """The framework's own conversion answers `linear` (and `notes`), whatever the file."""
    answer = NativeConversion(FRAMEWORK, frozenset(linear), None, notes, other_model)
    monkeypatch.setattr(framework_check, "native_conversion", lambda config, target, model: answer)


def verify(tiny: str, tmp_path: Path, *options: str):
    path = tmp_path / "job.toml"
    path.write_text(torchtitan_toml(["gate", "spare"]))  # converts exactly ADVISED (tests/test_verify_cli.py)
    return runner.invoke(app, ["verify", tiny, "--config", str(path), "--seq", "256", *options])


def test_a_framework_that_converts_another_layer_fails_the_file_naming_it(monkeypatch, tiny, tmp_path):
    framework_converts(monkeypatch, {*ADVISED, "blocks.0.gate"}, notes=("it warned: something",))
    result = verify(tiny, tmp_path, "--json")
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    framework = [d for d in report["differences"] if d["kind"] == DifferenceKind.FRAMEWORK.value]
    assert [d["subject"] for d in framework] == ["blocks.0.gate"]
    assert framework[0]["detail"] == (
        f"{FRAMEWORK}'s own conversion converts it to float8; advised to stay bf16"
    )
    assert "it warned: something" in report["notes"]  # what the framework said reaches the report
    assert report["framework"].startswith(f"{FRAMEWORK}'s own conversion ran: it converts otherwise")
    gate = next(layer for layer in report["layers"] if layer["fqn"] == "blocks.0.gate")
    assert any(problem.startswith(DifferenceKind.FRAMEWORK.value) for problem in gate["problems"])


def test_a_framework_that_leaves_an_advised_layer_in_bf16_fails_on_the_terminal(monkeypatch, tiny, tmp_path):
    framework_converts(monkeypatch, set(ADVISED) - {"blocks.1.up"})
    result = verify(tiny, tmp_path)
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "the framework's own conversion differs in 1 place(s)" in text
    assert (
        f"the framework's own conversion differs: blocks.1.up ({FRAMEWORK}'s own conversion keeps it in "
        "bf16; advised for float8)" in text
    )


def test_a_framework_that_agrees_passes_and_says_so(monkeypatch, tiny, tmp_path):
    framework_converts(monkeypatch, set(ADVISED))
    result = verify(tiny, tmp_path)
    assert result.exit_code == 0, result.output
    assert (
        f"framework: {FRAMEWORK}'s own conversion ran: it converts the same 4 Linear layer(s) as "
        "fp8advisor's reading of the file" in " ".join(result.output.split())
    )


def test_a_file_that_trains_another_model_fails(monkeypatch, tiny, tmp_path):
    framework_converts(monkeypatch, set(ADVISED), other_model="the file builds another flavor")
    result = verify(tiny, tmp_path, "--json")
    assert result.exit_code == 1
    differences = json.loads(result.output)["differences"]
    assert [(d["subject"], d["detail"]) for d in differences] == [
        ("the file's model", "the file builds another flavor")
    ]


def test_without_the_framework_the_check_says_it_is_a_simulation(tiny, tmp_path):
    result = verify(tiny, tmp_path)  # torchtitan-toml is for 0.2.x; the test extra installs 0.3
    assert result.exit_code == 0, result.output
    assert "framework: simulated: torchtitan 0.2.x's own conversion did not run (torchtitan 0.3" in " ".join(
        result.output.split()
    )


def test_the_framework_line_names_what_it_did_not_check():
    ran = NativeConversion(FRAMEWORK, frozenset({"a"}), None)
    assert framework_check.framework_line(ran, 0, has_expert_groups=True).endswith(
        "; the grouped experts were not checked by it (simulated)"
    )
    assert "not checked" not in framework_check.framework_line(ran, 0, has_expert_groups=False)
    not_run = NotRun("NeMo AutoModel", "not installed (pip install nemo-automodel)")
    assert framework_check.framework_line(not_run, 0, has_expert_groups=False) == (
        "simulated: NeMo AutoModel's own conversion did not run (not installed (pip install nemo-automodel))"
    )


def test_expert_modules_the_framework_converts_otherwise_are_differences():
    ran = NativeConversion(FRAMEWORK, frozenset(), frozenset({"layers.1.moe.experts"}))
    differences = framework_check.native_differences(ran, [], set(), set(), set())
    assert [(d.kind, d.subject) for d in differences] == [(DifferenceKind.FRAMEWORK, "layers.1.moe.experts")]
    not_run = NotRun("torchtitan 0.2.x", "torchtitan 0.3.0 is installed")
    assert framework_check.native_differences(not_run, ["a"], {"a"}, None, {"a"}) == []


def test_a_bare_filter_list_is_always_simulated(tmp_path):
    from fp8advisor.frameworks.reader import read_config

    path = tmp_path / "filter.yaml"
    path.write_text("- gate\n")
    line = framework_check.framework_line(
        framework_check.native_conversion(read_config(path, recipe="rowwise"), "x", None), 0, False
    )
    assert line.startswith("simulated: torchtitan / NeMo AutoModel's own conversion did not run")
