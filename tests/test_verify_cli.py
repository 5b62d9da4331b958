"""`fp8advisor verify` on the command line: exit codes 0 / 1 / 2, the table, the difference list, --json."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _verify_helpers import (  # noqa: E402
    advise_with_predictor,
    torchtitan_toml,
    use_test_predictor,
    write_tiny_model,
)

from fp8advisor.cli import app  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return write_tiny_model(tmp_path_factory.mktemp("model"))


@pytest.fixture(autouse=True)
def test_predictor(monkeypatch):
    """The CLI asks for a profile; the tests answer with the fixed predictor of _verify_helpers."""
    use_test_predictor(monkeypatch)


def invoke(*args: str):
    return runner.invoke(app, ["verify", *args])


def config(tmp_path: Path, entries: list[str], name: str = "job.toml") -> str:
    path = tmp_path / name
    path.write_text(torchtitan_toml(entries))
    return str(path)


def test_correct_config_exits_0(tiny, tmp_path):
    result = invoke(tiny, "--config", config(tmp_path, ["gate", "spare"]), "--seq", "256")
    assert result.exit_code == 0, result.output
    assert "PASS" in result.output
    assert "blocks.{0..1}.up" in result.output  # repeated blocks folded into one row, as suggest folds them
    assert "cpu (torchao emulated float8)" in result.output


def test_check_column_survives_long_names_at_80_columns(tmp_path):
    # Long FQNs fold on a narrow terminal; the config and check columns stay on screen.
    from _verify_helpers import TINY_MODEL

    model = tmp_path / "long.py"
    model.write_text(TINY_MODEL.replace("blocks", "transformer_decoder_blocks_with_a_long_name"))
    result = runner.invoke(
        app,
        ["verify", str(model), "--config", config(tmp_path, ["gate", "spare"]), "--seq", "256"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if line.strip().startswith("layers"))
    assert header.split()[-1] == "check" and " config " in header, header
    rows = [line for line in result.output.splitlines() if line.rstrip().endswith(" ok")]
    assert len(rows) == 5 and max(len(line) for line in [header, *rows]) <= 80, result.output


def test_unused_entry_and_extra_layer_exit_1_and_are_named(tiny, tmp_path):
    result = invoke(tiny, "--config", config(tmp_path, ["spare", "output"]), "--seq", "256")
    assert result.exit_code == 1, result.output
    assert "filter entry matches no layer: output" in result.output
    assert "converted against the advice: blocks.0.gate" in result.output
    assert "converted against the advice: blocks.1.gate" in result.output
    assert "FAIL" in result.output


def test_json(tiny, tmp_path):
    result = invoke(tiny, "--config", config(tmp_path, ["gate"]), "--seq", "256", "--json")
    assert result.exit_code == 1
    document = json.loads(result.output)
    assert document["passed"] is False
    assert [d["subject"] for d in document["differences"]] == ["blocks.0.spare", "blocks.1.spare"]
    assert {d["kind"] for d in document["differences"]} == {"converted, never called"}
    up = next(layer for layer in document["layers"] if layer["fqn"] == "blocks.0.up")
    assert up["converted"] and up["advised"] and up["float8_gemms"] == 3 and up["sqnr_output_db"] > 20
    assert document["execution"]["mode"] == "model"
    assert document["config"]["framework"] == "torchtitan-toml"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--config", "missing.toml"], "no such config file"),
        (["--config", "BAD"], "unsupported config file type"),
        (["--config", "OK", "--recipe", "fastest"], "unknown recipe"),
    ],
)
def test_unusable_input_exits_2(tiny, tmp_path, args, message):
    (tmp_path / "notes.txt").write_text("hello")
    args = [str(tmp_path / "notes.txt") if a == "BAD" else a for a in args]
    args = [config(tmp_path, ["gate"]) if a == "OK" else a for a in args]
    result = invoke(tiny, *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_model_exits_2(tmp_path):
    result = invoke(str(tmp_path / "nope.py"), "--config", config(tmp_path, ["gate"]))
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_python_filter_runs_only_with_trust_config(tiny, tmp_path):
    """A filter verify cannot evaluate from its syntax: exit 2 naming the line and --trust-config; with the
    flag it runs, and converts exactly the advised layers."""
    path = tmp_path / "train.py"
    path.write_text(
        "from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n"
        "\n"
        "def module_filter_fn(module, fqn):\n"
        "    return getattr(module, 'in_features', 0) * getattr(module, 'out_features', 0) >= 64 * 256\n"
        "\n"
        'convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("rowwise"), '
        "module_filter_fn=module_filter_fn)\n"
    )
    refused = invoke(tiny, "--config", str(path), "--seq", "256")
    assert refused.exit_code == 2, refused.output
    assert "train.py:4: cannot evaluate the call `getattr(module, 'in_features', 0)`" in refused.output
    assert "--trust-config" in refused.output and "Traceback" not in refused.output
    trusted = invoke(tiny, "--config", str(path), "--seq", "256", "--trust-config")
    assert trusted.exit_code == 0, trusted.output
    assert "PASS" in trusted.output


def test_megatron_precision_config_for_a_model_megatron_cannot_name_is_refused_clearly(tiny, tmp_path):
    """verify checks a Megatron precision config (tests/test_verify_megatron.py); the tiny model's Linear
    layers have no Megatron module names: one clear error, exit 2."""
    path = tmp_path / "precision.yaml"
    path.write_text(
        "configs:\n  bf16:\n    transformer_engine_config_type: TEQuantizationParams\n"
        "    training_recipe: {}\n"
        "matchers:\n  all:\n    config: bf16\n    type: glob\n    pattern: '*'\n    enabled: true\n"
    )
    result = invoke(tiny, "--config", str(path))
    assert result.exit_code == 2, result.output
    assert "--format megatron cannot name" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def _suggested(tiny: str, tmp_path: Path, seq: int, expert_parallel: int = 1) -> str:
    """A torchtitan TOML as suggest writes it for the tiny model at batch 1 x `seq`, with its header."""
    from fp8advisor.emit.config_file import render
    from fp8advisor.inspect.layers import inspect_model
    from fp8advisor.request import SuggestRequest

    advice = advise_with_predictor(inspect_model(tiny, batch=1, seq=seq), expert_parallel=expert_parallel)
    request = SuggestRequest(tiny, 1, seq, recipe="auto", profile="p.json", expert_parallel=expert_parallel)
    path = tmp_path / "suggested.toml"
    path.write_text(render(advice, "torchtitan-toml", request))
    return str(path)


def test_settings_come_from_the_header_suggest_wrote(tiny, tmp_path):
    path = _suggested(tiny, tmp_path, 256)
    result = invoke(tiny, "--config", path, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["batch"], document["seq"], document["recipe"]) == (1, 256, "rowwise")
    assert result.stderr == ""  # nothing disagrees: nothing said
    table = invoke(tiny, "--config", path)
    assert "batch 1 x seq 256" in table.stdout and "from its header" in table.stdout


def test_command_line_wins_over_the_header_and_says_so(tiny, tmp_path):
    path = _suggested(tiny, tmp_path, 256)
    result = invoke(tiny, "--config", path, "--seq", "512", "--json")
    assert json.loads(result.stdout)["seq"] == 512
    (line,) = result.stderr.strip().splitlines()
    assert "--seq 512 (header: 256)" in line and "command line" in line, line


def test_file_without_header_keeps_the_defaults(tiny, tmp_path):
    result = invoke(tiny, "--config", config(tmp_path, ["gate", "spare"]), "--json")
    assert json.loads(result.stdout)["seq"] == 8192 and result.stderr == ""


def test_advice_settings_read_every_header_value(tmp_path):
    from fp8advisor.verification.settings import advice_settings

    path = tmp_path / "job.yaml"
    path.write_text(
        "# Generated by fp8advisor 9.9 (fp8advisor suggest). Do not edit: regenerate it.\n"
        "# model: m.py  batch: 4  seq: 2048\n"
        "# recipe: tensorwise  profile: mine (measured)  min speedup: 1.05\n"
        "# filter_fqns simulated: converts exactly the 3 advised Linear layers\n"
        "# check in CI: fp8advisor suggest m.py --batch 4 --seq 2048 --recipe tensorwise --profile "
        "'my dir/mine.json' --min-speedup 1.05 --format nemo-automodel --check <this file>\n"
        "fp8: {enabled: true}\n"
    )
    settings, from_header, message = advice_settings(path)
    assert (settings.batch, settings.seq, settings.recipe) == (4, 2048, "tensorwise")
    assert (settings.profile, settings.min_speedup, message) == ("my dir/mine.json", 1.05, None)
    settings, from_header, message = advice_settings(path, batch=4, profile="other", min_speedup=1.2)
    assert (settings.profile, settings.min_speedup, settings.seq) == ("other", 1.2, 2048)
    assert "--profile other (header: my dir/mine.json), --min-speedup 1.2 (header: 1.05)" in message
    assert (settings.tensor_parallel, settings.measured) == (1, None)  # not in the header: the defaults
    path.write_text(
        path.read_text().replace("--format", "--tp 4 --measured 'ctx dir' --format").replace("m.py", "n.py")
    )
    settings, from_header, message = advice_settings(path, "m.py")
    assert (settings.tensor_parallel, settings.measured, settings.batch) == (4, "ctx dir", 4)
    assert message.count("(header: ") == 1 and "TARGET m.py (header: n.py)" in message
    settings, from_header, message = advice_settings(path, "n.py", tensor_parallel=2)
    assert settings.tensor_parallel == 2 and "--tp 2 (header: 4)" in message
    assert settings.expert_parallel == 1  # not in the header: the default
    path.write_text(path.read_text().replace("--tp 4", "--tp 4 --ep 8"))
    settings, from_header, message = advice_settings(path, "n.py")
    assert (settings.expert_parallel, settings.tensor_parallel, message) == (8, 4, None)
    assert "expert_parallel" in from_header
    settings, from_header, message = advice_settings(path, "n.py", expert_parallel=2)
    assert (
        settings.expert_parallel == 2 and message.count("(header: ") == 1 and "--ep 2 (header: 8)" in message
    )


def test_tensor_parallel_and_in_context_results_of_the_header_reach_the_advice(tiny, tmp_path, monkeypatch):
    """verify advises as suggest did: with the header's --tp, and from the header's --measured results."""
    import fp8advisor.advice.decide as advise_module

    seen = []
    real_advise = advise_module.advise

    def spy(*args, **kwargs):
        seen.append((kwargs.get("tensor_parallel"), kwargs.get("in_context")))
        return real_advise(*args, **kwargs)

    monkeypatch.setattr(advise_module, "advise", spy)
    path = Path(_suggested(tiny, tmp_path, 256))
    text = path.read_text()
    path.write_text(text.replace("--format", "--tp 4 --format"))
    seen.clear()  # _suggested advised too
    result = invoke(tiny, "--config", str(path))
    assert seen == [(4, None)] and "--tp 4" in result.stdout, result.output
    path.write_text(text.replace("--format", f"--measured {tmp_path / 'nowhere'} --format"))
    result = invoke(tiny, "--config", str(path))
    assert result.exit_code == 2 and "nowhere" in result.stderr, result.output  # the results were looked for


def test_expert_parallel_degree_of_the_header_reaches_the_advice(tiny, tmp_path, monkeypatch):
    """suggest --ep 8 writes it into the header; verify advises with it, and the command line wins with one
    line on stderr."""
    import fp8advisor.advice.decide as advise_module

    seen = []
    real_advise = advise_module.advise

    def spy(*args, **kwargs):
        seen.append(kwargs.get("expert_parallel"))
        return real_advise(*args, **kwargs)

    monkeypatch.setattr(advise_module, "advise", spy)
    path = Path(_suggested(tiny, tmp_path, 256, expert_parallel=8))
    assert "expert parallel: 8" in path.read_text()
    seen.clear()
    result = invoke(tiny, "--config", str(path))
    assert seen == [8] and "--ep 8" in result.stdout and result.stderr == "", result.output
    seen.clear()
    result = invoke(tiny, "--config", str(path), "--ep", "2")
    assert seen == [2] and "--ep 2" in result.stdout, result.output
    assert result.stderr.count("\n") == 1 and "--ep 2 (header: 8)" in result.stderr
    assert invoke(tiny, "--config", str(path), "--ep", "0").exit_code == 2


def test_filter_fqns_says_what_it_means(tiny, tmp_path):
    from fp8advisor.frameworks.formats import FILTER_FQNS_MEANING

    result = invoke(tiny, "--config", config(tmp_path, ["gate", "spare"]), "--seq", "256")
    text = " ".join(result.stdout.split())
    assert text.count(FILTER_FQNS_MEANING) == 1 and "filter_fqns (2 entries)" in text


def test_names_of_a_moe_model_stay_whole_at_80_columns(tmp_path):
    """Names as long as a MoE's (`layers.{0..1}.moe.shared_experts.w1`) fit on their row at 80 columns."""
    from _verify_helpers import TINY_MODEL

    model = tmp_path / "named.py"
    model.write_text(TINY_MODEL.replace("blocks", "decoder_blocks_of_moe_x"))
    result = runner.invoke(
        app,
        ["verify", str(model), "--config", config(tmp_path, ["gate", "spare"]), "--seq", "256"],
        env={"COLUMNS": "80"},
    )
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.output.splitlines() if line.startswith("decoder_blocks")]
    assert {row[0] for row in rows} == {
        f"decoder_blocks_of_moe_x.{{0..1}}.{name}" for name in ("up", "down", "gate", "spare")
    }
    assert all(row[-1] == "ok" for row in rows)
