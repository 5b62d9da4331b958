"""The frameworks' own conversion (`fp8advisor.verification.native_torchao`) of the files `suggest` writes.

For NeMo AutoModel (its YAML loader and `apply_fp8_to_model`), accelerate (its `Accelerator` and
`convert_model_to_fp8_ao`) and torchao (`convert_to_float8_training`, `quantize_` for the experts), each run
with its own code on the CPU: the files written for a dense Llama, a Hugging Face config and a MoE model
convert exactly the advised Linear layers (and, for torchao, the advised expert groups); a file edited to
convert something else converts that, and the named layers differ; a real small model converted as the
torchao file and accelerate's path say keeps finite weights.
"""

from __future__ import annotations

import json
import runpy

import pytest
import torch
from typer.testing import CliRunner

from fp8advisor.cli import app
from fp8advisor.errors import ConfigError
from fp8advisor.frameworks.reader import read_config
from fp8advisor.inspect.target import load_model
from fp8advisor.verification import native_torchao
from fp8advisor.verification.framework_check import native_conversion
from fp8advisor.verification.native import NativeConversion, NotRun

pytest.importorskip("nemo_automodel", reason="the test extra (nemo-automodel) is not installed")
pytest.importorskip("accelerate", reason="the test extra (accelerate) is not installed")

runner = CliRunner()

DENSE = "data/models/llama3.py:llama3_8b(n_layers=2)"
HF = "data/models/llama31_8b_hf/config.json:(num_hidden_layers=2)"
MOE = "data/models/moe.py:deepseek_v3_small"
#: The profile the dense case is advised with: its advice keeps the attention projections in bf16, which the
#: edit tests below turn into float8 (the shipped default may convert them).
PINNED = ("--profile", "h100-published-rowwise-2025-06")
#: model -> (TARGET, suggest's other arguments)
MODELS = {
    "dense": (DENSE, PINNED),
    "hf": (HF, ()),
    "moe": (MOE, ("--seq", "8192", "--ep", "32")),  # 8 experts per GPU: the advice converts both groups
}
FORMATS = ("torchao", "accelerate", "nemo-automodel")
FRAMEWORK_NAMES = {"torchao": "torchao ", "accelerate": "accelerate ", "nemo-automodel": "NeMo AutoModel "}


def _suggest(*args: str) -> str:
    result = runner.invoke(app, ["suggest", *args])
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """model -> (target, its advice as `suggest --json` says it, {format: the file suggest wrote}, the model
    on the meta device)."""
    folder = tmp_path_factory.mktemp("native")
    cases = {}
    for key, (target, extra) in MODELS.items():
        advice = json.loads(_suggest(target, *extra, "--json"))
        files = {}
        for fmt in FORMATS:
            files[fmt] = folder / f"{key}.{fmt}.{'yaml' if fmt == 'nemo-automodel' else 'py'}"
            _suggest(target, *extra, "--format", fmt, "-o", str(files[fmt]))
        cases[key] = (target, advice, files, load_model(target, "meta").model)
    return cases


def _advised_experts(advice: dict) -> set[str]:
    """The modules holding the 3-D weights of the expert groups the advice converts."""
    return {
        member.rpartition(".")[0]
        for group in advice["experts"]
        if group["convert"]
        for member in group["members"]
    }


def _native(path, target, meta_model) -> NativeConversion:
    result = native_conversion(read_config(path), target, meta_model)
    assert isinstance(result, NativeConversion), result
    return result


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("model", list(MODELS))
def test_the_framework_converts_exactly_the_advice(written, model, fmt):
    target, advice, files, meta_model = written[model]
    assert advice["convert_fqns"], "a case whose advice converts nothing tests nothing"
    native = _native(files[fmt], target, meta_model)
    assert native.framework.startswith(FRAMEWORK_NAMES[fmt])
    assert native.linear_fqns == set(advice["convert_fqns"])
    if fmt == "torchao":
        assert native.expert_modules == _advised_experts(advice)
        assert bool(native.expert_modules) is (model == "moe")
    else:  # NeMo AutoModel's and accelerate's float8 convert nn.Linear only
        assert native.expert_modules is None
    # the model given stays unconverted: verify builds it once
    assert not any(type(module).__name__ == "Float8Linear" for module in meta_model.modules())


def _edit(path, old: str, new: str, tmp_path):
    text = path.read_text()
    assert old in text, old
    edited = tmp_path / path.name
    edited.write_text(text.replace(old, new))
    return edited


@pytest.mark.parametrize("fmt", ["torchao", "accelerate"])
def test_an_edited_exact_set_converts_what_the_file_now_says(written, fmt, tmp_path):
    target, advice, files, meta_model = written["dense"]
    edited = _edit(files[fmt], '"output",', '"layers.0.attention.wq",', tmp_path)
    native = _native(edited, target, meta_model)
    assert native.linear_fqns ^ set(advice["convert_fqns"]) == {"output", "layers.0.attention.wq"}


def test_an_edited_expert_set_converts_the_groups_the_file_names(written, tmp_path):
    target, advice, files, meta_model = written["moe"]
    edited = _edit(files["torchao"], '        "layers.4.moe.experts",\n', "", tmp_path)
    native = _native(edited, target, meta_model)
    assert _advised_experts(advice) == {"layers.3.moe.experts", "layers.4.moe.experts"}
    assert native.expert_modules == {"layers.3.moe.experts"}
    assert native.linear_fqns == set(advice["convert_fqns"])


def test_nemo_matches_its_edited_filter_fqns_by_substring(written, tmp_path):
    target, advice, files, meta_model = written["dense"]
    edited = _edit(files["nemo-automodel"], "  - attention.\n", "  - attention.wq\n  - output\n", tmp_path)
    native = _native(edited, target, meta_model)
    now_converted = {f"layers.{i}.attention.{w}" for i in range(2) for w in ("wk", "wv", "wo")}
    assert native.linear_fqns ^ set(advice["convert_fqns"]) == now_converted | {"output"}


def test_accelerate_without_a_filter_runs_its_own_default(written, tmp_path):
    """No module_filter_func: accelerate's `filter_linear_layers` keeps the first and the last nn.Linear in
    bf16 (accelerate/utils/ao.py), whatever the advice says."""
    target, _advice, files, meta_model = written["dense"]
    edited = _edit(files["accelerate"], "            module_filter_func=module_filter_func,\n", "", tmp_path)
    native = _native(edited, target, meta_model)
    linears = [name for name, module in meta_model.named_modules() if isinstance(module, torch.nn.Linear)]
    assert (linears[0], linears[-1]) == ("layers.0.attention.wq", "output")
    assert native.linear_fqns == set(linears[1:-1])


def test_accelerate_refuses_its_recipe_without_fp8_mixed_precision(written, tmp_path):
    """accelerate raises "Passing in an FP8 configuration requires setting mixed_precision='fp8'": the file
    would not train, a ConfigError naming accelerate (exit 2)."""
    target, _advice, files, meta_model = written["dense"]
    edited = _edit(files["accelerate"], 'mixed_precision="fp8"', 'mixed_precision="bf16"', tmp_path)
    with pytest.raises(
        ConfigError, match=r"accelerate 1\.\S+ rejects this config: ValueError: .*mixed_precision"
    ):
        native_conversion(read_config(edited), target, meta_model)


def test_accelerate_is_run_beside_the_callers_own_accelerate_state(written):
    """accelerate's state is process-wide: an Accelerator already built (here in bf16) would make accelerate
    refuse another mixed_precision; the check builds its own in a fresh state and leaves the caller's."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    from fp8advisor.verification import lifted_checks

    target, advice, files, meta_model = written["dense"]
    # the outer one only keeps this test's state out of the others'
    with lifted_checks.accelerate_state_isolated():
        Accelerator(mixed_precision="bf16")
        assert _native(files["accelerate"], target, meta_model).linear_fqns == set(advice["convert_fqns"])
        assert AcceleratorState().mixed_precision == "bf16"


TORCHAO_ALL_GATHER_ROWWISE = """
import dataclasses

from torchao.float8 import Float8LinearConfig, convert_to_float8_training


def module_filter_fn(module, fqn):
    return fqn in {"output"}


def convert_model(model):
    config = dataclasses.replace(
        Float8LinearConfig.from_recipe_name("rowwise"), enable_fsdp_float8_all_gather=True
    )
    convert_to_float8_training(model, config=config, module_filter_fn=module_filter_fn)
    return model
"""


def test_torchao_refuses_float8_all_gather_with_rowwise(written, tmp_path):
    """torchao's Float8LinearConfig asserts that float8 all-gather is tensorwise only: a ConfigError."""
    target, _advice, _files, meta_model = written["dense"]
    path = tmp_path / "all_gather.py"
    path.write_text(TORCHAO_ALL_GATHER_ROWWISE)
    with pytest.raises(ConfigError, match=r"Float8LinearConfig rejects .*only supports tensorwise"):
        native_conversion(read_config(path), target, meta_model)


def test_nemo_says_which_fp8_settings_it_drops(written, tmp_path):
    """NeMo builds rowwise from the recipe name alone: the file's float8 all-gather is not what runs."""
    target, advice, files, meta_model = written["dense"]
    flag = "enable_fsdp_float8_all_gather"
    edited = _edit(files["nemo-automodel"], f"{flag}: false", f"{flag}: true", tmp_path)
    native = _native(edited, target, meta_model)
    assert native.linear_fqns == set(advice["convert_fqns"])
    assert [note for note in native.notes if flag in note] == [
        f"NeMo AutoModel runs {flag}=False, not the file's True (recipe rowwise: it builds torchao's config "
        "from the recipe name alone)"
    ]


def test_nemo_loader_never_imports_what_the_file_names(written, tmp_path):
    """NeMo's ConfigNode imports `_target_` entries (`file.py:name` runs that file): left out, with a note."""
    target, advice, files, meta_model = written["dense"]
    marker = tmp_path / "ran"
    script = tmp_path / "evil.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\nbuild = None\n")
    text = files["nemo-automodel"].read_text() + f"model:\n  _target_: {script}:build\n"
    edited = tmp_path / "with_target.yaml"
    edited.write_text(text)
    native = _native(edited, target, meta_model)
    assert not marker.exists()
    assert native.linear_fqns == set(advice["convert_fqns"])
    assert any("_target_" in note for note in native.notes)


def test_a_missing_framework_is_not_run_and_says_how_to_install_it(written, monkeypatch):
    target, _advice, files, meta_model = written["dense"]
    monkeypatch.setattr(native_torchao, "installed_version", lambda distribution: None)
    result = native_conversion(read_config(files["nemo-automodel"]), target, meta_model)
    assert result == NotRun("NeMo AutoModel", "not installed (pip install nemo-automodel)")
    assert "simulated" in result.note()


# --- finite weights: a small Llama built for real, converted as the files say -------------------------------

SMALL = "data/models/llama3.py:llama3_8b(dim=1024, n_layers=2, vocab_size=2048)"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small Llama whose advice (at --min-speedup 0.5) converts its feed-forwards and output; the files."""
    folder = tmp_path_factory.mktemp("small")
    args = (SMALL, "--min-speedup", "0.5", *PINNED)
    advice = json.loads(_suggest(*args, "--json"))
    assert len(advice["convert_fqns"]) == 7
    files = {fmt: folder / f"small_{fmt}.py" for fmt in ("torchao", "accelerate")}
    for fmt, path in files.items():
        _suggest(*args, "--format", fmt, "-o", str(path))
    return advice, files


def _real_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return load_model(SMALL, "cpu").model


def _assert_finite_and_converted(model: torch.nn.Module, advised: list[str]) -> None:
    converted = {name for name, module in model.named_modules() if type(module).__name__ == "Float8Linear"}
    assert converted == set(advised)
    bad = [name for name, p in model.named_parameters() if not torch.isfinite(p).all()]
    assert bad == []


def test_the_torchao_file_keeps_the_weights_finite(small):
    advice, files = small
    model = _real_model()
    compiled = runpy.run_path(str(files["torchao"]))["convert_model"](model)  # our own output: run as written
    assert compiled._orig_mod is model
    _assert_finite_and_converted(model, advice["convert_fqns"])


def test_accelerates_path_keeps_the_weights_finite(small):
    advice, files = small
    model = _real_model()
    result = native_torchao.convert_in_place(read_config(files["accelerate"]), model)
    assert isinstance(result, NativeConversion) and result.linear_fqns == set(advice["convert_fqns"])
    _assert_finite_and_converted(model, advice["convert_fqns"])


# --- Megatron-Core: its matcher on a real GPTModel's module names -------------------------------------------


@pytest.fixture(scope="module")
def megatron_file(tmp_path_factory, monkeypatch_module):
    """The file `suggest --format megatron` writes for the dense Llama (4 layers), and the plan it wrote it
    from (`emit.megatron.plan`, recorded as suggest calls it) with its advice."""
    pytest.importorskip("megatron.core", reason="the test extra (megatron-core) is not installed")
    from fp8advisor.emit import megatron

    made = []
    original = megatron.plan

    def recording_plan(advice, predictor=None):
        made.append((advice, original(advice, predictor)))
        return made[-1][1]

    monkeypatch_module.setattr(megatron, "plan", recording_plan)
    path = tmp_path_factory.mktemp("megatron") / "precision.yaml"
    target = "data/models/llama3.py:llama3_8b(n_layers=4)"
    _suggest(target, "--recipe", "tensorwise", "--format", "megatron", "-o", str(path))
    monkeypatch_module.undo()
    advice, plan = made[-1]
    assert plan.float8_names, "a plan with nothing in float8 tests nothing"
    return target, path, advice, plan


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def test_megatron_selects_exactly_the_plans_modules_on_gptmodels_names(megatron_file):
    from fp8advisor.verification.native_megatron import gpt_model_te_linear_names, megatron_conversion

    _target, path, _advice, plan = megatron_file
    assert gpt_model_te_linear_names(plan.n_layers) == [module.name for module in plan.modules]
    native = megatron_conversion(path, plan.n_layers)
    assert native.framework.startswith("Megatron-Core 0.16")
    assert native.linear_fqns == set(plan.float8_names)


def test_megatron_follows_an_edited_file(megatron_file, tmp_path):
    """A matcher put before the others sends layer 1's fc1 to bf16: Megatron's first-match rule."""
    import yaml

    from fp8advisor.verification.native_megatron import megatron_float8_modules

    _target, path, _advice, plan = megatron_file
    document = yaml.safe_load(path.read_text())
    first = {"config": "bf16", "type": "glob", "pattern": "*layers.1.mlp.linear_fc1", "enabled": True}
    document["matchers"] = {"fc1_layer_1_bf16": first, **document["matchers"]}
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(document, sort_keys=False))
    assert set(plan.float8_names) - megatron_float8_modules(edited, plan.n_layers) == {
        "decoder.layers.1.mlp.linear_fc1"
    }
    document["matchers"]["fc1_layer_1_bf16"] = {"config": "bf16", "pattern": "*", "enabled": True}  # no type
    edited.write_text(yaml.safe_dump(document, sort_keys=False))
    with pytest.raises(ConfigError, match=r"Megatron-Core rejects this precision config: AssertionError"):
        megatron_float8_modules(edited, plan.n_layers)
