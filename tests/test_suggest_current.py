"""`fp8advisor suggest --current FILE`: the user's config read as `verify` reads it, and its predicted step
beside the advice's (`fp8advisor.verification.current`, `fp8advisor.cli.current_view`).

Every format `verify` reads is given as --current and must give the Linear layers (and expert groups) its
framework converts: hand-written files whose layers differ from the advice's, and files `suggest` wrote,
which must read back as exactly the advice. The published torchao rowwise run (Llama-3-8B, every Linear but
`output`) must be predicted exactly as `advice.published.predict_anchor` predicts it. Each model is inspected
once per module (`inspect_model` cached), with no user profile (an empty profile directory).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import fp8advisor.inspect.layers
from fp8advisor.cli import app
from fp8advisor.cli.current_view import folded_names
from fp8advisor.paths import MODELS_DIR
from fp8advisor.predict.profile_files import PROFILE_DIR_ENV

runner = CliRunner()

TINY = f"{MODELS_DIR / 'llama3.py'}:llama3_8b(n_layers=2)"
LLAMA_8B = "data/models/llama3.py:llama3_8b"
MOE = (
    f"{MODELS_DIR / 'moe.py'}:build_model(dim=64, n_heads=4, vocab_size=256, expert_hidden_dim=64, "
    "shared_hidden_dim=64)"
)
SETTINGS = ("--gpu", "H100", "--recipe", "rowwise")
PUBLISHED = (
    "--seq",
    "8192",
    "--world-size",
    "8",
    "--ac",
    "selective",
    "--gpu",
    "H100",
    "--recipe",
    "rowwise",
)

ATTENTION = tuple(f"layers.{i}.attention.{w}" for i in (0, 1) for w in ("wq", "wk", "wv", "wo"))
FEED_FORWARD = tuple(f"layers.{i}.feed_forward.{w}" for i in (0, 1) for w in ("w1", "w2", "w3"))
EVERY_LINEAR = (*ATTENTION, *FEED_FORWARD, "output")
W2 = ("layers.0.feed_forward.w2", "layers.1.feed_forward.w2")

_INSPECTED: dict = {}
_real_inspect = fp8advisor.inspect.layers.inspect_model


@pytest.fixture(autouse=True)
def once_per_model(monkeypatch, tmp_path):
    """`inspect_model` traces each (target, batch, seq) once for the module; no user profile answers."""

    def cached(target, *, batch=1, seq=8192, debug=False):
        key = (target, batch, seq)
        if key not in _INSPECTED:
            _INSPECTED[key] = _real_inspect(target, batch=batch, seq=seq, debug=debug)
        return _INSPECTED[key]

    monkeypatch.setattr(fp8advisor.inspect.layers, "inspect_model", cached)
    monkeypatch.setenv(PROFILE_DIR_ENV, str(tmp_path / "no-profiles"))
    monkeypatch.setattr("fp8advisor.advice.caveats._detect_capability", lambda: None)


def _suggest(*args: str):
    return runner.invoke(app, ["suggest", *args])


def _current(target: str, path: Path, *settings: str) -> tuple[dict, dict]:
    """`suggest TARGET --current PATH --json`: (the document, its "current" object)."""
    result = _suggest(target, *settings, "--current", str(path), "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    return document, document["current"]


def _advised(document: dict) -> set[str]:
    return {layer["fqn"] for layer in document["layers"] if layer["convert"]}


# --- every format, hand-written: the layers its framework converts, not the advice's ----------------------

TOML_RULE = """[model]
converters = ["quantize.linear.float8"]

[quantize.linear.float8]
recipe_name = "rowwise"
filter_fqns = ["output", "attention."]
"""
NEMO = """fp8:
  enabled: true
  recipe_name: rowwise
  filter_fqns: ["feed_forward", "output"]
"""
TORCHAO = """from torchao.float8 import Float8LinearConfig, convert_to_float8_training


def convert_model(model):
    convert_to_float8_training(
        model,
        config=Float8LinearConfig.from_recipe_name("tensorwise"),
        module_filter_fn=lambda module, fqn: fqn.endswith("w2"),
    )
    return model
"""
ACCELERATE = """from accelerate import Accelerator
from accelerate.utils import AORecipeKwargs
from torchao.float8 import Float8LinearConfig


def in_float8(module, fqn):
    return "attention" in fqn


accelerator = Accelerator(
    mixed_precision="fp8",
    kwargs_handlers=[
        AORecipeKwargs(config=Float8LinearConfig.from_recipe_name("rowwise"), module_filter_func=in_float8)
    ],
)
"""
MEGATRON = """configs:
  fp8:
    transformer_engine_config_type: TEQuantizationParams
    training_recipe:
      fp8_quantization_recipe: tensorwise
      fp8_format: hybrid
  bf16:
    transformer_engine_config_type: TEQuantizationParams
    training_recipe: {}
matchers:
  fc1_of_layer_0:
    config: fp8
    type: glob
    pattern: decoder.layers.0.mlp.linear_fc1
    enabled: true
  proj_of_layer_1:
    config: fp8
    type: glob
    pattern: decoder.layers.1.self_attention.linear_proj
    enabled: true
  the_rest:
    config: bf16
    type: glob
    pattern: '*'
    enabled: true
"""

#: case -> (file name, its text, the format read, the Linear layers in float8, their recipe)
HAND_WRITTEN = {
    "torchtitan-toml": ("train.toml", TOML_RULE, "torchtitan-toml", FEED_FORWARD, "rowwise"),
    "nemo-automodel": ("recipe.yaml", NEMO, "nemo-automodel", ATTENTION, "rowwise"),
    "torchao": ("train.py", TORCHAO, "torchao", W2, "tensorwise"),
    "accelerate": ("accel.py", ACCELERATE, "accelerate", ATTENTION, "rowwise"),
    "filter-json": ("keep.json", '["output"]\n', "filter", (*ATTENTION, *FEED_FORWARD), "rowwise"),
    "filter-yaml": ("keep.yaml", "- attention.wk\n- attention.wv\n- feed_forward\n", "filter",
                    ("layers.0.attention.wq", "layers.0.attention.wo", "layers.1.attention.wq",
                     "layers.1.attention.wo", "output"), "rowwise"),
    # linear_fc1 fuses the gate and up projections (w1, w3), linear_proj is wo
    "megatron": ("precision.yaml", MEGATRON, "megatron",
                 ("layers.0.feed_forward.w1", "layers.0.feed_forward.w3", "layers.1.attention.wo"),
                 "tensorwise"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(HAND_WRITTEN))
def test_a_hand_written_config_of_each_format_trains_its_own_layers(case, tmp_path):
    if case == "megatron":
        pytest.importorskip("megatron.core", reason="the test extra (megatron-core) is not installed")
    name, text, fmt, expected, recipe = HAND_WRITTEN[case]
    path = tmp_path / name
    path.write_text(text)
    document, current = _current(TINY, path, *SETTINGS)
    assert current["format"] == fmt
    assert set(current["converted_fqns"]) == set(expected)
    assert current["converted"] == len(expected)
    assert current["recipe"] == recipe
    assert set(expected) != _advised(document)  # the file's layers, not the advice's
    assert set(current["to_advice"]["converts_in_addition"]) == _advised(document) - set(expected)
    assert path.read_text() == text  # only read


def test_torchtitan_py_written_by_suggest_then_edited_trains_the_edited_filter(tmp_path):
    """A torchtitan 0.3 recipe function `suggest --format torchtitan-py` wrote, its filter_fqns edited: the
    layers torchtitan's substring rule converts with the edited list."""
    path = tmp_path / "float8_recipe.py"
    written = _suggest(TINY, *SETTINGS, "--format", "torchtitan-py", "-o", str(path))
    assert written.exit_code == 0, written.output
    text, edits = re.subn(
        r"filter_fqns=\[.*?\]", 'filter_fqns=["feed_forward.w2", "output"]', path.read_text(), flags=re.S
    )
    assert edits == 1
    path.write_text(text)
    _, current = _current(TINY, path, *SETTINGS)
    assert current["format"] == "torchtitan-py"
    assert set(current["converted_fqns"]) == set(EVERY_LINEAR) - set(W2) - {"output"}


# --- files suggest wrote read back as the advice ----------------------------------------------------------

WRITTEN = {
    "torchtitan-toml": "float8.toml",
    "torchtitan-py": "float8_recipe.py",
    "nemo-automodel": "fp8.yaml",
    "accelerate": "accelerate_fp8.py",
    "torchao": "torchao_fp8.py",
    "filter": "filter_fqns.json",
}


@pytest.mark.parametrize("fmt", sorted(WRITTEN))
def test_a_file_suggest_wrote_reads_back_as_the_advice_with_nothing_to_change(fmt, tmp_path):
    path = tmp_path / WRITTEN[fmt]
    written = _suggest(TINY, *SETTINGS, "--format", fmt, "-o", str(path))
    assert written.exit_code == 0, written.output
    document, current = _current(TINY, path, *SETTINGS)
    assert current["format"] == fmt
    assert set(current["converted_fqns"]) == _advised(document) and _advised(document)
    assert current["step_s"] == current["advice"]["step_s"]
    assert current["to_advice"]["tokens_per_s_change"] == 0
    assert current["to_advice"]["converts_in_addition"] == current["to_advice"]["keeps_in_bf16"] == []


# --- the published run, exactly ---------------------------------------------------------------------------


def test_the_published_torchao_rowwise_run_is_predicted_exactly_as_published(tmp_path, monkeypatch):
    """torchao's Llama-3-8B run on 8xH100 (every Linear but `output` in float8, rowwise) as a torchtitan TOML:
    the same step as `predict_anchor` gives for the published rowwise result, to 1e-9."""
    from fp8advisor.advice.published import load_anchors, predict_anchor
    from fp8advisor.advice.step import Calibration
    from fp8advisor.recipes import Recipe
    from fp8advisor.verification import current as current_module

    predicted = []
    real_predict = current_module.predict_current

    def recording(*args, **kwargs):
        predicted.append((args[2], real_predict(*args, **kwargs)))  # (model layers, the CurrentStep)
        return predicted[-1][1]

    monkeypatch.setattr(current_module, "predict_current", recording)
    path = tmp_path / "llama3_8b.toml"
    text = TOML_RULE.replace('["output", "attention."]', '["output"]')
    path.write_text(text)
    _, current = _current(LLAMA_8B, path, *PUBLISHED)

    ((model_layers, step),) = predicted
    anchor = next(a for a in load_anchors() if a.id == "torchao-llama3-8b-8xh100")
    assert (anchor.model, anchor.batch, anchor.seq, anchor.keep_bf16) == (LLAMA_8B, 1, 8192, ("output",))
    published = predict_anchor(anchor, Calibration.load(), model_layers)
    (expected,) = [s for result, s in published.float8 if result.recipe is Recipe.ROWWISE]
    assert current["converted"] == expected.converted == 224  # 32 blocks x 7
    assert "output" not in current["converted_fqns"]
    assert step.step.step_s == pytest.approx(expected.step_s, rel=1e-9)
    assert step.step.communication_s == pytest.approx(expected.communication_s, rel=1e-9)
    assert current["step_s"] == float(f"{expected.step_s:.6g}")


# --- FP8 off, another recipe, experts ---------------------------------------------------------------------

FP8_OFF = {
    "torchtitan-toml": ("off.toml", "[training]\nseq_len = 8192\n"),
    "nemo-automodel": ("off.yaml", "fp8:\n  enabled: false\n  recipe_name: rowwise\n"),
}


@pytest.mark.parametrize("case", sorted(FP8_OFF))
def test_a_config_with_fp8_off_predicts_the_bf16_step(case, tmp_path):
    name, text = FP8_OFF[case]
    path = tmp_path / name
    path.write_text(text)
    document, current = _current(TINY, path, *SETTINGS)
    assert current["enabled"] is False and current["recipe"] is None and current["converted_fqns"] == []
    assert current["speedup"] == 1.0
    assert current["step_s"] == document["step"]["strategies"]["bf16"]["step_s"]
    assert set(current["to_advice"]["converts_in_addition"]) == _advised(document)


def test_a_config_of_another_recipe_is_predicted_with_its_own(tmp_path):
    """A tensorwise torchtitan TOML (written from the tensorwise advice) beside the rowwise advice: its step
    is the tensorwise advice's own step, not its layers priced with rowwise figures."""
    path = tmp_path / "tensorwise.toml"
    written = _suggest(
        TINY, "--gpu", "H100", "--recipe", "tensorwise", "--format", "torchtitan-toml", "-o", str(path)
    )
    assert written.exit_code == 0, written.output
    tensorwise = json.loads(_suggest(TINY, "--gpu", "H100", "--recipe", "tensorwise", "--json").stdout)
    document, current = _current(TINY, path, *SETTINGS)
    assert document["recipe"] == "rowwise" and current["recipe"] == "tensorwise"
    assert set(current["converted_fqns"]) == _advised(tensorwise)
    assert current["step_s"] == tensorwise["step"]["strategies"]["advice"]["step_s"]
    assert any("own recipe, tensorwise" in note for note in current["step_notes"])


MOE_TORCHAO = """import torch
from torchao.prototype.moe_training.config import Float8TrainingOpConfig
from torchao.quantization.quant_api import quantize_


def expert_filter_fn(module, fqn):
    return fqn in {"layers.0.moe.experts"}


def convert_model(model: torch.nn.Module) -> torch.nn.Module:
    quantize_(model, config=Float8TrainingOpConfig(), filter_fn=expert_filter_fn)
    return torch.compile(model)
"""


def test_grouped_experts_a_torchao_file_swaps_are_in_float8(tmp_path):
    path = tmp_path / "moe_fp8.py"
    path.write_text(MOE_TORCHAO)
    document, current = _current(MOE, path, "--seq", "256", *SETTINGS)
    assert current["expert_groups_in_float8"] == ["layers.0.moe.experts"]
    assert current["converted_fqns"] == [] and current["recipe"] is None
    terms = {term["name"]: term["seconds"] for term in current["step"]["terms"]}
    assert terms["experts_float8"] > 0 and current["step"]["expert_groups_in_float8"] == 1
    advised_groups = {e["group"] for e in document["experts"] if e["convert"]}
    assert current["to_advice"]["expert_groups_kept_in_bf16"] == sorted(
        {"layers.0.moe.experts"} - advised_groups
    )


# --- JSON, terminal, stdout and --check --------------------------------------------------------------------


def test_the_json_current_object_holds_the_figures_and_the_difference(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text(TOML_RULE)
    document, current = _current(TINY, path, *SETTINGS)
    advice_step = document["step"]["strategies"]["advice"]
    assert current["advice"]["step_s"] == advice_step["step_s"]
    assert current["advice"]["speedup"] == advice_step["step_speedup"]
    assert current["advice"]["converted"] == len(_advised(document))
    assert current["step"]["label"] == "your config" and current["step"]["converted"] == len(FEED_FORWARD)
    assert current["speedup"] == current["step"]["step_speedup"]
    assert current["tokens_per_s_per_gpu"] == current["step"]["tokens_per_s_per_gpu"]
    change = current["to_advice"]
    assert (change["step_s_from"], change["step_s_to"]) == (current["step_s"], current["advice"]["step_s"])
    assert change["tokens_per_s_change"] == pytest.approx(
        current["step_s"] / current["advice"]["step_s"] - 1, abs=1e-4
    )
    assert set(change["keeps_in_bf16"]) == set(FEED_FORWARD) - _advised(document)
    assert current["path"] == str(path) and current["recipe_from"] == "the file"


def test_the_report_shows_the_config_beside_the_advice_and_the_change(tmp_path):
    path = tmp_path / "train.toml"
    path.write_text(TOML_RULE)
    result = _suggest(TINY, *SETTINGS, "--current", str(path))
    assert result.exit_code == 0, result.output
    _, current = _current(TINY, path, *SETTINGS)
    out = result.stdout
    assert (
        f"Your config: {path} (torchtitan-toml): 6 Linear layer(s) (rowwise, from the file) in float8" in out
    )
    assert "float8: layers.{0..1}.feed_forward.w1, layers.{0..1}.feed_forward.w2" in out
    change = re.search(
        r"changing your config to the advice: step ([\d,.]+) ms -> ([\d,.]+) ms, ([+-][\d.]+)% tokens/s", out
    )
    assert change is not None, out
    assert float(change[1].replace(",", "")) == pytest.approx(current["step_s"] * 1e3, rel=1e-3)
    assert float(change[3]) == pytest.approx(current["to_advice"]["tokens_per_s_change"] * 100, abs=0.06)
    in_addition = current["to_advice"]["converts_in_addition"]
    assert in_addition and f"the advice converts in addition: {folded_names(in_addition)}" in out


def test_with_a_config_on_stdout_or_check_the_comparison_goes_to_stderr(tmp_path):
    written = tmp_path / "float8.toml"
    assert _suggest(TINY, *SETTINGS, "--format", "torchtitan-toml", "-o", str(written)).exit_code == 0
    mine = tmp_path / "mine.toml"
    mine.write_text(TOML_RULE)
    piped = _suggest(TINY, *SETTINGS, "--format", "torchtitan-toml", "--current", str(mine))
    assert piped.exit_code == 0, piped.output
    assert piped.stdout == written.read_text()  # stdout holds the config alone
    assert f"your config {mine} (torchtitan-toml)" in piped.stderr
    assert "changing your config to the advice: step" in piped.stderr
    checked = _suggest(
        TINY, *SETTINGS, "--format", "torchtitan-toml", "--check", str(written), "--current", str(mine)
    )
    assert checked.exit_code == 0, checked.output
    said = " ".join(checked.stderr.split())  # the lines as Rich wraps them, joined
    assert "is up to date" in said and "changing your config to the advice" in said


# --- bad input --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("missing.toml", None, "check the path given to --current"),
        ("notes.txt", "hello\n", "unsupported config file type .txt"),
        ("broken.toml", "[model\nconverters = 1\n", "--current"),
        ("plain.py", "x = 1\n", "sets up no float8 training"),
    ],
)
def test_a_file_that_cannot_be_used_is_one_clear_error_before_the_work(
    name, text, says, tmp_path, monkeypatch
):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    monkeypatch.setattr(fp8advisor.inspect.layers, "inspect_model", lambda *a, **k: pytest.fail("inspected"))
    result = _suggest(TINY, *SETTINGS, "--current", str(path))
    assert result.exit_code == 2, result.output
    assert "--current" in result.output and str(path) in result.output and says in result.output
    assert "hint:" in result.output and "Traceback" not in result.output


REFUSED_ON_THE_MODEL = {
    # Megatron refuses a matcher of another type than glob (quant_config.py `RecipeConfig._build_matchers`)
    "megatron": ("precision.yaml", MEGATRON.replace("type: glob", "type: regex", 1), "regex"),
    # the filter fails on the first module it is asked about: evaluated, never run
    "torchao": ("train.py", TORCHAO.replace('fqn.endswith("w2")', "fqn[1000]"), "layers.0.attention.wq"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_ON_THE_MODEL))
def test_a_config_its_framework_refuses_on_this_model_is_one_clear_error(case, tmp_path):
    name, text, says = REFUSED_ON_THE_MODEL[case]
    path = tmp_path / name
    path.write_text(text)
    result = _suggest(TINY, *SETTINGS, "--current", str(path))
    assert result.exit_code == 2, result.output
    said = " ".join(result.output.split())
    assert "--current" in said and str(path) in said and says in said and "Traceback" not in said


def test_output_never_replaces_the_current_file(tmp_path):
    path = tmp_path / "float8.toml"
    assert _suggest(TINY, *SETTINGS, "--format", "torchtitan-toml", "-o", str(path)).exit_code == 0
    before = path.read_text()
    result = _suggest(
        TINY, *SETTINGS, "--format", "torchtitan-toml", "-o", str(path), "--current", str(path), "--force"
    )
    assert result.exit_code == 2, result.output
    assert path.read_text() == before
