"""The MoE chain end to end through the CLI, as a user runs it: `suggest` decides DeepSeek-V3's routed experts
per GPU under expert parallelism, writes them in the torchtitan 0.3 config beside the Linear converter, and
`verify` reads the file back, re-advises with the settings of its header and agrees, or fails on the experts
when told another expert-parallel degree."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fp8advisor.cli import app

pytest.importorskip("torchtitan", reason="the torchtitan extra is not installed")

MODEL = "data/models/moe.py:deepseek_v3_small"
runner = CliRunner()


@pytest.fixture(scope="module")
def titan_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("moe") / "float8_moe.py"
    written = runner.invoke(
        app, ["suggest", MODEL, "--seq", "8192", "--ep", "32", "--format", "torchtitan-py", "-o", str(path)]
    )
    assert written.exit_code == 0, written.output
    return path


def test_suggest_decides_the_experts_per_gpu_and_writes_both_converters(titan_config):
    advised = runner.invoke(app, ["suggest", MODEL, "--seq", "8192", "--ep", "32", "--json"])
    assert advised.exit_code == 0, advised.output
    payload = json.loads(advised.stdout)
    groups = payload["experts"]
    assert [g["group"] for g in groups] == ["layers.3.moe.experts", "layers.4.moe.experts"]
    # 256 experts over 32 GPUs: 8 per GPU, each multiplying 8192 tokens x top 8 x 32 / 256 rows
    assert all(
        (g["E"], g["E_local"], g["M_per_expert"], g["convert"]) == (256, 8, 8192, True) for g in groups
    )
    assert all(g["provenance"] == "modelled" for g in groups)
    text = titan_config.read_text()
    assert "Float8GroupedExpertsConverter.Config(" in text and "Float8LinearConverter.Config(" in text
    assert "--ep 32" in text
    # the routers (N = E = 256, a multiple of 16) stay bf16 through the Linear filter
    router = next(layer for layer in payload["layers"] if layer["fqn"] == "layers.3.moe.router.gate")
    assert router["convert"] is False and "router" in router["reason"]
    assert "layers.3.moe.router.gate" not in payload["convert_fqns"]


def test_verify_agrees_with_the_file_and_fails_on_the_experts_under_another_degree(titan_config):
    agreed = runner.invoke(app, ["verify", MODEL, "--config", str(titan_config), "--json"])
    assert agreed.exit_code == 0, agreed.output
    report = json.loads(agreed.stdout)
    assert report["passed"] is True and report["differences"] == []
    assert {g["group"]: (g["converted"], g["advised"], g["problems"]) for g in report["experts"]} == {
        "layers.3.moe.experts": (True, True, []),
        "layers.4.moe.experts": (True, True, []),
    }
    # one GPU holds all 256 experts (256 rows each): the advice keeps them bf16, the file converts them
    differs = runner.invoke(app, ["verify", MODEL, "--config", str(titan_config), "--ep", "1"])
    assert differs.exit_code == 1
    assert "experts differ from the advice: layers.3.moe.experts" in differs.output
