"""A measured grouped profile (MoE experts) chosen by selection is pinned in the file `suggest` writes
(--grouped-profile), so that the file's own check command and `verify` advise the experts with the same
figures; a grouped-only profile given as --profile is refused with what to do instead."""

from __future__ import annotations

import itertools
import json
import shlex

import pytest
from typer.testing import CliRunner

from fp8advisor.cli import app
from fp8advisor.frameworks.header import CHECK_PREFIX
from fp8advisor.predict.grouped_profile import GroupedProfile, GroupedSpeedupPoint
from fp8advisor.predict.profile import DeviceInfo, Profile
from fp8advisor.predict.profile_files import PROFILE_DIR_ENV, save_profile

pytest.importorskip("torchtitan", reason="the torchtitan extra is not installed")

MODEL = "data/models/moe.py:deepseek_v3_small"  # 256 experts top-8 at 256 rows each, K and N 7168 / 2048
GROUPED = "test-h100-grouped"
runner = CliRunner()


def grouped_only_profile() -> Profile:
    """What `fit` makes of `bench --grouped` results alone: no Linear recipe, 1.3x over the model's shapes."""
    shapes = itertools.product((128, 256), (128, 512), (2048, 7168), (2048, 7168))
    return Profile(
        name=GROUPED,
        provenance="measured",
        source="test",
        created="2026-11-23",
        device=DeviceInfo(name="NVIDIA H100 80GB HBM3", family="H100", compute_capability=(9, 0)),
        software={"torch": "2.13.0"},
        method="test",
        recipes={},
        grouped=GroupedProfile(points=tuple(GroupedSpeedupPoint(*shape, speedup=1.3) for shape in shapes)),
    )


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("profiles")
    save_profile(grouped_only_profile(), directory / f"{GROUPED}.json")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PROFILE_DIR_ENV, str(directory))
        patch.setattr(
            "fp8advisor.predict.selection._detect_device_name", lambda: None
        )  # the same on a GPU machine
        yield directory


def _check_command(path) -> list[str]:
    line = next(line for line in path.read_text().splitlines() if line.startswith(f"# {CHECK_PREFIX}"))
    assert line.endswith(" --check <this file>")
    words = shlex.split(line.removeprefix(f"# {CHECK_PREFIX}").removesuffix(" <this file>"))
    assert words[:2] == ["fp8advisor", "suggest"]
    return [*words[1:], str(path)]


def test_suggest_pins_the_grouped_profile_it_found_and_check_and_verify_agree(user_dir, tmp_path):
    path = tmp_path / "float8_moe.py"
    written = runner.invoke(
        app, ["suggest", MODEL, "--gpu", "H100", "--format", "torchtitan-py", "-o", str(path)]
    )
    assert written.exit_code == 0, written.output
    assert f"MoE expert grouped GEMMs from {GROUPED} (measured)" in " ".join(written.output.split())
    text = path.read_text()
    assert "Float8GroupedExpertsConverter.Config(" in text  # 1.3x measured: the experts convert
    command = _check_command(path)
    assert command[command.index("--grouped-profile") + 1] == GROUPED
    checked = runner.invoke(app, command)
    assert checked.exit_code == 0, checked.output
    verified = runner.invoke(app, ["verify", MODEL, "--config", str(path), "--json"])
    assert verified.exit_code == 0, verified.output
    report = json.loads(verified.stdout)
    assert report["passed"] is True
    assert [(g["advised"], g["converted"]) for g in report["experts"]] == [(True, True), (True, True)]


def test_suggest_json_names_the_grouped_profile(user_dir):
    advised = runner.invoke(app, ["suggest", MODEL, "--gpu", "H100", "--json"])
    assert advised.exit_code == 0, advised.output
    payload = json.loads(advised.stdout)
    assert payload["grouped_profile"] == GROUPED
    assert {g["predicted_speedup"] for g in payload["experts"]} == {1.3}


def test_the_grouped_roofline_is_pinned_as_none_where_no_grouped_profile_was_used(user_dir, tmp_path):
    """No GPU: the shipped H100 profile, and no user profile of this GPU is looked at; the check command's
    explicit --profile would find the user's grouped one, so the file pins the roofline (none)."""
    path = tmp_path / "float8_moe.py"
    written = runner.invoke(app, ["suggest", MODEL, "--format", "torchtitan-py", "-o", str(path)])
    assert written.exit_code == 0, written.output
    command = _check_command(path)
    assert command[command.index("--grouped-profile") + 1] == "none"
    assert "Float8GroupedExpertsConverter.Config(" not in path.read_text()  # the roofline: 0.5x, bf16
    checked = runner.invoke(app, command)
    assert checked.exit_code == 0, checked.output
    verified = runner.invoke(app, ["verify", MODEL, "--config", str(path), "--json"])  # reads the pin
    assert verified.exit_code == 0, verified.output
    assert [g["advised"] for g in json.loads(verified.stdout)["experts"]] == [False, False]


def test_an_explicit_profile_still_finds_the_grouped_profile_of_its_gpu(user_dir):
    advised = runner.invoke(app, ["suggest", MODEL, "--profile", "h100-published-rowwise-2025-06", "--json"])
    assert advised.exit_code == 0, advised.output
    assert json.loads(advised.stdout)["grouped_profile"] == GROUPED


def test_a_grouped_only_profile_as_profile_says_to_pass_it_as_grouped_profile(user_dir):
    refused = runner.invoke(app, ["suggest", MODEL, "--profile", str(user_dir / f"{GROUPED}.json")])
    assert refused.exit_code == 2
    words = " ".join(refused.output.split())
    assert "grouped-only profile" in words and f"--grouped-profile {user_dir / GROUPED}.json" in words


def test_grouped_profile_must_hold_grouped_figures(user_dir):
    refused = runner.invoke(
        app, ["suggest", MODEL, "--grouped-profile", "h100-published-rowwise-2025-06", "--json"]
    )
    assert refused.exit_code == 2
    assert "has no grouped expert GEMM figures" in " ".join(refused.output.split())
