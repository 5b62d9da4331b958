"""`fp8advisor suggest` through the CLI: tables, --json, -o, --check, piping, errors."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import llama_layers, modelled_choice, prefix_conflict_layers  # noqa: E402

from fp8advisor.cli import app  # noqa: E402
from fp8advisor.frameworks.filters import Framework, converted_by_framework  # noqa: E402
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
    from fp8advisor.inspect.layers import inspect_model

    return inspect_model(str(MODELS_DIR / "llama3.py") + ":llama3_8b(n_layers=2)", batch=1, seq=2048)


@pytest.fixture
def fake_world(monkeypatch, llama3_small):
    """inspect_model returns per-target layers without tracing again; the profile: in-memory H100 roofline."""
    import fp8advisor.inspect.layers
    import fp8advisor.predict.selection

    models = {
        LLAMA: llama3_small,
        "llama80.py": llama_layers(80),
        "prefix_model.py": prefix_conflict_layers(),
        "odd.py": llama_layers(1, tokens=8190),
        "reasons.py": _with_long_reason(llama_layers(2)),
    }

    def fake_inspect(target, *, batch=1, seq=8192, debug=False):
        from dataclasses import replace

        return replace(models[target], target=target, batch=batch, seq=seq)

    monkeypatch.setattr(fp8advisor.inspect.layers, "inspect_model", fake_inspect)
    monkeypatch.setattr(
        fp8advisor.predict.selection, "select_profile", lambda requested=None, **kw: modelled_choice()
    )
    monkeypatch.setattr("fp8advisor.advice.caveats._detect_capability", lambda: None)


def _with_long_reason(model):
    """`model` plus a router whose reason for staying in bf16 is longer than an 80-column row has room for."""
    from dataclasses import replace

    from _advice_helpers import layer

    from fp8advisor.inspect.records import LayerStatus

    reason = "N = 8 is not a multiple of 16 (torch._scaled_mm needs K and N divisible by 16 for float8)"
    router = layer("layers.0.moe.router.gate", 4096, 8, status=LayerStatus.NOT_CONVERTIBLE, reason=reason)
    return replace(model, layers=(*model.layers, router))


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
    import fp8advisor.inspect.layers

    monkeypatch.setattr(fp8advisor.inspect.layers, "inspect_model", lambda target, **kw: llama3_small)
    monkeypatch.setattr("fp8advisor.predict.selection._detect_device_name", lambda: None)
    result = _run(LLAMA, "--seq", "2048", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # no GPU found: the shipped H100 profile the evidence chose, never the roofline one
    assert data["profile"] == "h100-evidence"
    assert data["profile_provenance"] == "evidence"
    # every Linear speedup carries its interval, and the step its own
    layer = next(layer for layer in data["layers"] if layer["predicted_speedup"] is not None)
    low, high = layer["speedup_interval"]
    assert low < layer["predicted_speedup"] < high


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
    from fp8advisor.frameworks.formats import ConfigFormat
    from fp8advisor.recipes import ALL_RECIPES, Recipe

    # Transformer Engine: tensorwise and mxfp8 (issue 30); MXFP8 only where the format can write it
    assert _recipes_the_format_holds(ConfigFormat.MEGATRON) == (Recipe.TENSORWISE, Recipe.MXFP8_RCEIL)
    assert Recipe.TENSORWISE not in _recipes_the_format_holds(ConfigFormat.TORCHTITAN_PY)
    assert Recipe.MXFP8_RCEIL_WGRAD_WITH_HP not in _recipes_the_format_holds(ConfigFormat.TORCHTITAN_PY)
    assert _recipes_the_format_holds(ConfigFormat.TORCHAO) == ALL_RECIPES
    assert not set(_recipes_the_format_holds(ConfigFormat.ACCELERATE)) & {Recipe.MXFP8_RCEIL}


def _table_lines(output: str) -> list[str]:
    """The rows of the layers table (and the strategies' "this advice" row)."""
    return [line for line in output.splitlines() if line.startswith(("layers.", "output ", "this advice"))]


def test_filter_fqns_says_what_it_means_once(fake_world):
    from fp8advisor.frameworks.formats import FILTER_FQNS_MEANING

    result = _run("llama80.py", "--recipe", "rowwise")
    assert " ".join(result.stdout.split()).count(FILTER_FQNS_MEANING) == 1
    assert "keeps in bf16 every nn.Linear whose FQN contains an entry" in FILTER_FQNS_MEANING


def test_tensor_parallel_shows_the_sharded_shapes_in_table_and_json(fake_world):
    document = json.loads(_run("llama80.py", "--recipe", "rowwise", "--tp", "8", "--json").stdout)
    for layer in document["layers"]:
        shard = layer["shard"]
        sliced = {"K": (layer["K"] // 8, layer["N"]), "N": (layer["K"], layer["N"] // 8)}
        assert (shard["K"], shard["N"]) == sliced[shard["split"]], layer
    result = runner.invoke(
        app, ["suggest", "llama80.py", "--recipe", "rowwise", "--tp", "8"], env={"COLUMNS": "80"}
    )
    rows = {line.split()[0]: line.split() for line in _table_lines(result.stdout) if "x" in line}
    header = next(line for line in result.stdout.splitlines() if line.startswith("layers "))
    assert header.split()[6:8] == ["per", "GPU"]
    for layer in document["layers"]:
        if layer["fqn"] == "output" or layer["fqn"].startswith("layers.0."):
            pattern = (
                "output" if layer["fqn"] == "output" else layer["fqn"].replace("layers.0.", "layers.{0..79}.")
            )
            assert rows[pattern][4] == f"{layer['shard']['K']}x{layer['shard']['N']}", rows[pattern]
    assert (
        json.loads(_run("llama80.py", "--recipe", "rowwise", "--json").stdout)["layers"][0]["shard"] is None
    )


def test_tables_read_at_80_columns(fake_world):
    from _advice_helpers import LLAMA_BLOCK

    blocks = {"reasons.py": "layers.{0..1}.", "llama80.py": "layers.{0..79}."}
    for args in (["reasons.py"], ["llama80.py", "--tp", "8"], ["llama80.py", "--world-size", "8"]):
        result = runner.invoke(app, ["suggest", *args, "--recipe", "rowwise"], env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        rows = [row for row in _table_lines(result.stdout) if not row.startswith("this advice")]
        assert all(len(line) <= 80 for line in _table_lines(result.stdout)), rows
        # every layer name whole on its row (none folded onto a second line), each row with its decision
        expected = {blocks[args[0]] + name for name in LLAMA_BLOCK} | {"output"}
        if args[0] == "reasons.py":
            expected.add("layers.0.moe.router.gate")
        assert {row.split()[0] for row in rows} == expected
        assert all(row.split()[-1] in ("float8", "bf16") or row.split()[-2] == "bf16" for row in rows), rows
    # a reason too long for the row is a footnote the row points to
    lines = result_lines = runner.invoke(
        app, ["suggest", "reasons.py", "--recipe", "rowwise"], env={"COLUMNS": "80"}
    ).stdout.splitlines()
    router = next(line for line in lines if line.startswith("layers.0.moe.router.gate"))
    mark = router.split()[-1]
    assert router.split()[-2:] == ["bf16", mark] and mark.startswith("[")
    assert f"{mark} N = 8 is not a multiple of 16 (torch._scaled_mm" in "\n".join(result_lines)


def test_modelled_figures_are_marked_in_every_table(fake_world):
    """The in-memory profile is the roofline model: every speedup carries the mark, and the legend says it."""
    result = runner.invoke(app, ["suggest", LLAMA, "--seq", "2048"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    rows = [line for line in lines if not line.startswith(("recipe:", "Layers:", "break-even", "warning"))]
    speedups = [word for line in rows for word in line.split() if re.fullmatch(r"\d+\.\d+x[*~]*", word)]
    assert len(speedups) > 10 and all("~" in word for word in speedups), speedups
    document = json.loads(_run(LLAMA, "--seq", "2048", "--json").stdout)
    assert {s["provenance"] for s in document["summary"]["strategies"].values()} == {"modelled"}
    legends = [line for line in lines if line.startswith("~ modelled")]
    assert len(legends) == 4  # layers, strategies, recipes considered, training step


def test_published_figures_are_not_marked(monkeypatch, llama3_small):
    """The published profile: rowwise published (no mark), the other recipes modelled (marked)."""
    import fp8advisor.inspect.layers

    monkeypatch.setattr(fp8advisor.inspect.layers, "inspect_model", lambda target, **kw: llama3_small)
    monkeypatch.setattr("fp8advisor.predict.selection._detect_device_name", lambda: None)
    args = ["suggest", LLAMA, "--seq", "2048", "--profile", "h100-published-rowwise-2025-06"]
    result = runner.invoke(app, args, env={"COLUMNS": "120"})
    recipes = {
        line.split()[0]: line.split()
        for line in result.stdout.splitlines()
        if line.split()[1:2] in (["published"], ["modelled"])
    }
    assert not recipes["rowwise"][-1].endswith("~")
    assert recipes["tensorwise"][-1].endswith("~") and recipes["rowwise_with_gw_hp"][-1].endswith("~")
    rows = [line for line in _table_lines(result.stdout) if "x" in line and not line.startswith("this")]
    assert rows and not any("~" in row for row in rows)  # the layers' rowwise figures are published


def test_recipe_auto_help_says_it_prefers_stronger_provenance():
    text = " ".join(runner.invoke(app, ["suggest", "--help"], env={"COLUMNS": "80"}).stdout.split())
    assert "strongest provenance (measured, then evidence, then published, then modelled)" in text
    assert "highest predicted step speedup" in text


@pytest.mark.parametrize("command", [[], ["suggest"], ["layers"], ["verify"], ["bench"], ["fit"], ["trace"]])
def test_help_has_no_bool_metavars_or_cut_choices(command):
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout and "…" not in result.stdout
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    text = " ".join(result.stdout.split())
    if command == ["suggest"]:
        from fp8advisor.frameworks.formats import FILE_FORMATS

        assert ", ".join(fmt.value for fmt in FILE_FORMATS) in text  # every name whole, none cut at a "-"
    if command == []:  # every command's summary whole, not cut with "..."
        listed = lines[lines.index("Commands:") + 1 :]
        assert len(listed) == 6 and not any(line.rstrip().endswith("...") for line in listed), listed


def test_seq_longer_than_the_model_takes_is_a_suggest_warning(fake_world, monkeypatch):
    import fp8advisor.inspect.layers

    real = fp8advisor.inspect.layers.inspect_model

    def with_limit(target, **kwargs):
        from dataclasses import replace

        return replace(real(target, **kwargs), max_positions=(4096, "config.max_position_embeddings"))

    monkeypatch.setattr(fp8advisor.inspect.layers, "inspect_model", with_limit)
    warnings = json.loads(_run("llama80.py", "--seq", "8192", "--json").stdout)["warnings"]
    assert any(
        w.startswith("--seq 8192 is longer than the model's maximum positions (4096") for w in warnings
    )
    warnings = json.loads(_run("llama80.py", "--seq", "4096", "--json").stdout)["warnings"]
    assert not any("maximum positions" in w for w in warnings)


def test_the_brief_says_what_the_written_file_does(fake_world):
    """Config on stdout: the terminal line names what that file converts, in its framework's terms."""
    megatron = _run("llama80.py", "--format", "megatron")
    brief = " ".join(megatron.stderr.split())
    assert "Transformer Engine linear modules in float8" in brief and "substring rule" not in brief
    nemo = " ".join(_run("llama80.py", "--recipe", "rowwise", "--format", "nemo-automodel").stderr.split())
    assert "the file: filter_fqns simulated: converts exactly the" in nemo
