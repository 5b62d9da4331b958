"""`fp8advisor suggest` through the CLI: tables, --json, -o, --check, piping, errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import llama_layers, modelled_choice, prefix_conflict_layers  # noqa: E402

from fp8advisor.cli import app  # noqa: E402
from fp8advisor.filters import Framework, converted_by_framework  # noqa: E402
from fp8advisor.paths import MODELS_DIR  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

runner = CliRunner()
LLAMA = "data/models/llama3.py"


@pytest.fixture(scope="module")
def llama3_small():
    """The shipped example model, really inspected once (seq 2048): real FQNs for every test below."""
    from fp8advisor.layers import inspect_model

    return inspect_model(str(MODELS_DIR / "llama3.py") + ":llama3_8b(n_layers=2)", batch=1, seq=2048)


@pytest.fixture
def fake_world(monkeypatch, llama3_small):
    """inspect_model returns per-target layers without tracing again; the profile: in-memory H100 roofline."""
    import fp8advisor.layers
    import fp8advisor.profile

    models = {
        LLAMA: llama3_small,
        "llama80.py": llama_layers(80),
        "prefix_model.py": prefix_conflict_layers(),
        "odd.py": llama_layers(1, tokens=8190),
    }

    def fake_inspect(target, *, batch=1, seq=8192, debug=False):
        from dataclasses import replace

        return replace(models[target], target=target, batch=batch, seq=seq)

    monkeypatch.setattr(fp8advisor.layers, "inspect_model", fake_inspect)
    monkeypatch.setattr(fp8advisor.profile, "select_profile", lambda requested=None, **kw: modelled_choice())
    monkeypatch.setattr("fp8advisor.advise._detect_capability", lambda: None)


def _run(*args):
    return runner.invoke(app, ["suggest", *args])


def test_report_names_profile_groups_layers_and_proves_filter(fake_world):
    result = _run("llama80.py", "--recipe", "rowwise", "--min-speedup", "1.2")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "test-h100-roofline" in out  # the profile chosen is named
    assert "layers.{0..79}.attention.wq" in out  # 80 blocks read as one row
    assert "this advice" in out and "every convertible layer" in out and "torchao auto filter" in out
    assert "simulated (torchtitan substring rule on all 561 nn.Linear FQNs): converts exactly the" in out


def test_json_document(fake_world):
    result = _run(LLAMA, "--seq", "2048", "--recipe", "rowwise", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["profile"] == "test-h100-roofline" and data["recipe"] == "rowwise"
    assert {layer["fqn"] for layer in data["layers"]} >= {"layers.0.attention.wq", "output"}
    assert set(data["summary"]["strategies"]) == {"advice", "all_convertible", "torchao_auto"}


def test_real_example_model_filter_is_exact(fake_world, llama3_small):
    result = _run(
        LLAMA, "--seq", "2048", "--recipe", "rowwise", "--min-speedup", "1.1", "--format", "torchtitan-toml"
    )
    assert result.exit_code == 0, result.output
    data = tomllib.loads(result.stdout)  # stdout holds the config alone
    entries = data["quantize"]["linear"]["float8"]["filter_fqns"]
    advised = json.loads(
        _run(LLAMA, "--seq", "2048", "--recipe", "rowwise", "--min-speedup", "1.1", "--json").stdout
    )
    expected = {layer["fqn"] for layer in advised["layers"] if layer["convert"]}
    assert converted_by_framework(llama3_small.layers, entries, Framework.TORCHTITAN) == expected
    assert "converts exactly" in result.stderr


def test_output_file_and_check(fake_world, tmp_path):
    path = tmp_path / "fp8.yaml"
    args = ["llama80.py", "--recipe", "rowwise", "--format", "nemo-automodel"]
    result = _run(*args, "-o", str(path))
    assert result.exit_code == 0, result.output
    first = path.read_bytes()
    assert yaml.safe_load(first)["fp8"]["enabled"] is True

    assert _run(*args, "-o", str(path)).exit_code == 0
    assert path.read_bytes() == first  # two runs: byte-identical

    fresh = _run(*args, "--check", str(path))
    assert fresh.exit_code == 0, fresh.output

    path.write_text(first.decode().replace("recipe_name: rowwise", "recipe_name: tensorwise"))
    stale = _run(*args, "--check", str(path))
    assert stale.exit_code == 1
    assert "-  recipe_name: tensorwise" in stale.stdout and "+  recipe_name: rowwise" in stale.stdout
    assert "stale" in stale.stderr


def test_check_needs_a_format_for_yaml(fake_world, tmp_path):
    result = _run("llama80.py", "--check", str(tmp_path / "x.yaml"))
    assert result.exit_code == 2 and "--format" in result.stderr


def test_format_from_toml_suffix(fake_world, tmp_path):
    path = tmp_path / "job.toml"
    assert _run("llama80.py", "--recipe", "rowwise", "-o", str(path)).exit_code == 0
    assert tomllib.loads(path.read_text())["model"]["converters"] == ["quantize.linear.float8"]


def test_auto_with_torchtitan_py_never_picks_tensorwise(fake_world):
    # the in-memory roofline profile predicts tensorwise fastest; torchtitan 0.3 cannot hold it
    result = _run("llama80.py", "--format", "torchtitan-py")
    assert result.exit_code == 0, result.output
    assert 'recipe_name="rowwise' in result.stdout


def test_prefix_conflict_is_reported(fake_world):
    result = _run("prefix_model.py", "--recipe", "rowwise")
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "conflict: 'blocks.0.ff' (bf16) is a substring of 'blocks.0.ff2' (float8)" in out
    assert "no substring list can be exact" in out and "instead of" in out


def test_token_warning_on_stderr_when_piping(fake_world):
    result = _run("odd.py", "--seq", "8190", "--recipe", "rowwise", "--format", "filter")
    assert result.exit_code == 0
    assert isinstance(yaml.safe_load(result.stdout), list)  # stdout holds the filter list alone
    assert "pad_seq_len_divisible: 16" in " ".join(result.stderr.split())


@pytest.mark.parametrize(
    "args, message",
    [
        (["--recipe", "fp4"], "unknown recipe"),
        (["--recipe", "tensorwise", "--format", "torchtitan-py"], "no tensorwise"),
        (["--format", "nemo"], "unknown --format"),
        (["--recipe", "rowwise", "--format", "megatron"], "Transformer Engine has no rowwise recipe"),
    ],
)
def test_errors_exit_2(fake_world, args, message):
    result = _run("llama80.py", *args)
    assert result.exit_code == 2
    assert message in result.stderr


def test_shipped_profile_end_to_end(monkeypatch, llama3_small):
    """Without --profile the shipped profile is chosen and named (no GPU here: the H100 one)."""
    import fp8advisor.layers

    monkeypatch.setattr(fp8advisor.layers, "inspect_model", lambda target, **kw: llama3_small)
    monkeypatch.setattr("fp8advisor.profile._detect_device_name", lambda: None)
    result = _run(LLAMA, "--seq", "2048", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # no GPU found: the shipped H100 profile with measured or published figures, never the roofline one
    assert data["profile"] == "h100-published-rowwise-2025-06"
    assert data["profile_provenance"] == "published"


def test_megatron_output_and_check(fake_world, tmp_path):
    """--format megatron: auto keeps to tensorwise (TE has no rowwise), the fused GEMMs are predicted with the
    profile, -o writes the precision config, --check compares it."""
    path = tmp_path / "precision.yaml"
    args = ["llama80.py", "--format", "megatron"]
    result = _run(*args, "-o", str(path))
    assert result.exit_code == 0, result.output
    text = path.read_text()
    assert "recipe: tensorwise (chosen by --recipe auto)" in text
    comments = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "its own prediction as one GEMM" in comments
    document = yaml.safe_load(text)
    assert list(document["matchers"])[-1] == "default_bf16"
    assert document["matchers"]["linear_fc1_float8"]["pattern"] == "decoder.layers.*.mlp.linear_fc1"
    assert _run(*args, "--check", str(path)).exit_code == 0
    path.write_text(text.replace("decoder.layers.*.mlp.linear_fc1", "decoder.layers.*.mlp.linear_fc9"))
    stale = _run(*args, "--check", str(path))
    assert stale.exit_code == 1 and "+    pattern: decoder.layers.*.mlp.linear_fc1" in stale.stdout


def test_megatron_needs_a_llama_style_decoder(fake_world):
    result = _run("prefix_model.py", "--format", "megatron")
    assert result.exit_code == 2
    assert "Llama/GPT-style decoder" in " ".join(result.stderr.split())


def test_megatron_refuses_rowwise_before_building_the_model(fake_world):
    result = _run("never_built.py", "--recipe", "rowwise", "--format", "megatron")  # unknown to fake_world
    assert result.exit_code == 2 and "Transformer Engine has no rowwise recipe" in result.stderr


def test_auto_recipe_choices_follow_the_format():
    from fp8advisor.cli.suggest_cmd import _recipes_the_format_holds
    from fp8advisor.formats import ConfigFormat
    from fp8advisor.recipes import ALL_RECIPES, Recipe

    assert _recipes_the_format_holds(ConfigFormat.MEGATRON) == (Recipe.TENSORWISE,)
    assert Recipe.TENSORWISE not in _recipes_the_format_holds(ConfigFormat.TORCHTITAN_PY)
    assert _recipes_the_format_holds(ConfigFormat.TORCHAO) == ALL_RECIPES
