"""Every config format parses with the standard parser and, simulated, converts exactly the advised layers."""

from __future__ import annotations

import ast
import json
import random
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import StubChoice, StubPredictor, llama_layers, prefix_conflict_layers  # noqa: E402

from fp8advisor import __version__
from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.emit.config_file import check, render, write  # noqa: E402
from fp8advisor.errors import ConfigError  # noqa: E402
from fp8advisor.frameworks import reader as configs  # noqa: E402
from fp8advisor.frameworks.filters import Framework, converted_by_framework  # noqa: E402
from fp8advisor.frameworks.formats import FILE_FORMATS, ConfigFormat  # noqa: E402
from fp8advisor.paths import MODELS_DIR  # noqa: E402
from fp8advisor.request import SuggestRequest  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

TARGET = "models/llama3.py:llama3_70b(n_layers=80)"


def _advice(model, recipe="rowwise"):
    return advise(
        model,
        StubChoice(),
        recipe,
        predictor=StubPredictor(),
        device_capability=None,
        compare_torchao_auto=False,
    )


@pytest.fixture(scope="module")
def llama():
    model = llama_layers(80)
    return model, _advice(model), SuggestRequest(TARGET, 1, 8192, recipe="rowwise", profile="h100-published")


def _exact_set(text: str) -> set[str]:
    """FLOAT8_LAYERS from a Python config, read with ast, and the filter function run on every FQN."""
    tree = ast.parse(text)
    (assignment,) = [s for s in tree.body if isinstance(s, ast.Assign) and s.targets[0].id == "FLOAT8_LAYERS"]
    call = assignment.value
    assert isinstance(call, ast.Call) and call.func.id == "frozenset"
    return set(ast.literal_eval(call.args[0])) if call.args else set()


def _run_filter(text: str, name: str, fqns) -> set[str]:
    """Execute only FLOAT8_LAYERS and the filter definition (no imports of accelerate/torchao needed)."""
    tree = ast.parse(text)
    keep = [
        s
        for s in tree.body
        if (isinstance(s, ast.Assign) and s.targets[0].id == "FLOAT8_LAYERS")
        or (isinstance(s, ast.FunctionDef) and s.name == name)
    ]
    namespace: dict = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), "<config>", "exec"), namespace)
    return {fqn for fqn in fqns if namespace[name](None, fqn)}


def _calls(text: str, name: str) -> list[ast.Call]:
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called == name:
                found.append(node)
    return found


def _keywords(call: ast.Call) -> dict:
    return {kw.arg: kw.value for kw in call.keywords}


def test_torchtitan_toml(llama):
    model, advice, request = llama
    data = tomllib.loads(render(advice, "torchtitan-toml", request))
    assert data["model"] == {"converters": ["quantize.linear.float8"]}
    section = data["quantize"]["linear"]["float8"]
    assert section == {"recipe_name": "rowwise", "filter_fqns": ["attention.wk", "attention.wv"]}
    assert "enable_fsdp_float8_all_gather" not in section  # torchtitan rejects it with recipe_name
    assert data["compile"] == {"enable": True, "components": ["model", "loss"]}
    assert converted_by_framework(model.layers, section["filter_fqns"], Framework.TORCHTITAN) == set(
        advice.convert_fqns
    )


def test_torchtitan_py(llama):
    model, advice, request = llama
    text = render(advice, "torchtitan-py", request)
    (call,) = [c for c in _calls(text, "Config")]
    keywords = {k: ast.literal_eval(v) for k, v in _keywords(call).items()}
    assert keywords == {
        "recipe_name": "rowwise",
        "filter_fqns": ["attention.wk", "attention.wv"],
        "model_compile_enabled": True,
    }
    assert "auto_filter_small_kn" not in text
    assert converted_by_framework(model.layers, keywords["filter_fqns"], Framework.TORCHTITAN_0_3) == set(
        advice.convert_fqns
    )


def test_torchtitan_py_has_no_tensorwise():
    advice = _advice(llama_layers(1), recipe="tensorwise")
    with pytest.raises(ConfigError, match="no tensorwise"):
        render(advice, "torchtitan-py", SuggestRequest("m.py", 1, 8192))


def test_nemo_automodel(llama):
    model, advice, request = llama
    data = yaml.safe_load(render(advice, "nemo-automodel", request))
    assert data["compile"]["enabled"] is True
    fp8 = data["fp8"]
    assert fp8["enabled"] is True and fp8["recipe_name"] == "rowwise"
    assert converted_by_framework(model.layers, fp8["filter_fqns"], Framework.NEMO_AUTOMODEL) == set(
        advice.convert_fqns
    )


def test_nemo_automodel_writes_tensorwise_explicitly():
    data = yaml.safe_load(
        render(_advice(llama_layers(1), "tensorwise"), "nemo-automodel", SuggestRequest("m.py", 1, 8192))
    )
    assert data["fp8"]["recipe_name"] == "tensorwise"  # null would skip NeMo's FSDP scale precompute


@pytest.mark.parametrize(
    "fmt, filter_name", [("accelerate", "module_filter_func"), ("torchao", "module_filter_fn")]
)
def test_python_formats_are_exact(llama, fmt, filter_name):
    model, advice, request = llama
    text = render(advice, fmt, request)
    ast.parse(text)
    assert _exact_set(text) == set(advice.convert_fqns)
    assert _run_filter(text, filter_name, model.linear_fqns()) == set(advice.convert_fqns)
    fqns = re.findall(r'^        "(.*)",$', text, flags=re.M)
    assert fqns == sorted(fqns)  # a sorted literal: diffs stay small
    if fmt == "accelerate":
        (handler,) = _calls(text, "AORecipeKwargs")
        assert set(_keywords(handler)) == {"config", "module_filter_func"}
        (accelerator,) = _calls(text, "Accelerator")
        assert ast.literal_eval(_keywords(accelerator)["mixed_precision"]) == "fp8"
        assert "kwargs_handlers" in _keywords(accelerator)
    else:
        (convert,) = _calls(text, "convert_to_float8_training")
        assert set(_keywords(convert)) == {"config", "module_filter_fn"}
    (recipe_call,) = _calls(text, "from_recipe_name")
    assert ast.literal_eval(recipe_call.args[0]) == "rowwise"


def test_python_formats_exact_despite_prefix_conflict():
    model = prefix_conflict_layers()
    advice = _advice(model)
    for fmt, name in (("accelerate", "module_filter_func"), ("torchao", "module_filter_fn")):
        text = render(advice, fmt, SuggestRequest("prefix_model.py", 1, 8192))
        assert _run_filter(text, name, model.linear_fqns()) == {"blocks.0.ff2", "blocks.0.proj"}
    header = render(advice, "torchtitan-toml", SuggestRequest("prefix_model.py", 1, 8192)).splitlines()[3]
    assert "no substring list can be exact" in header


def test_filter_yaml_and_json(llama):
    model, advice, request = llama
    as_yaml = render(advice, "filter", request, output="fp8_filter.yaml")
    as_json = render(advice, "filter", request, output="ci/fp8_filter.JSON")
    document = json.loads(as_json)
    assert yaml.safe_load(as_yaml) == ["attention.wk", "attention.wv"] == document["filter_fqns"]
    assert as_yaml.startswith("# Generated by fp8advisor")
    # JSON has no comments: the header is the object's first members, its first line alone on line 1
    first = f"Generated by fp8advisor {__version__} (fp8advisor suggest). Do not edit: regenerate it."
    assert as_json.splitlines()[0] == f'{{"generated_by": "{first}",'
    assert document["header"] == [line[2:] for line in as_yaml.splitlines()[1:6]]
    assert document["recipe"] == "rowwise"
    assert render(advice, "filter", request) == as_yaml  # YAML unless the file ends in .json


@pytest.mark.parametrize(
    "fmt",
    # megatron: tensorwise only, its header in tests/test_megatron.py
    [f for f in FILE_FORMATS if f not in (ConfigFormat.FILTER, ConfigFormat.MEGATRON)]
    + [ConfigFormat.FILTER],
)
def test_header_and_determinism(llama, fmt):
    model, advice, request = llama
    text = render(advice, fmt, request)
    lines = text.splitlines()
    assert (
        lines[0]
        == f"# Generated by fp8advisor {__version__} (fp8advisor suggest). Do not edit: regenerate it."
    )
    assert f"model: {TARGET}  batch: 1  seq: 8192" in lines[1]
    assert "recipe: rowwise" in lines[2] and "profile: stub-profile (--profile h100-published)" in lines[2]
    assert "--check" in lines[4] and "--profile h100-published" in lines[4]
    assert str(Path.cwd()) not in text and "/home/" not in text and "/tmp/" not in text
    assert not re.search(r"\d\d:\d\d:\d\d", text)  # no timestamps
    # the same advice from shuffled layers renders byte-identical text
    shuffled = list(model.layers)
    random.Random(7).shuffle(shuffled)
    again = _advice(replace(model, layers=tuple(shuffled)))
    assert render(again, fmt, request) == text


def test_check_command_pins_the_chosen_profile(llama):
    model, advice, _ = llama
    text = render(advice, "filter", SuggestRequest(TARGET, 1, 8192, recipe="auto"))  # no --profile typed
    check_line = text.splitlines()[4]
    assert "--profile stub-profile" in check_line and "--recipe auto" in check_line


def test_write_and_check(tmp_path, llama):
    model, advice, request = llama
    text = render(advice, "torchtitan-toml", request)
    path = write(tmp_path / "float8.toml", text)
    assert path.read_bytes() == text.encode()
    assert check(path, text) == (True, "")
    edited = text.replace('"attention.wv",\n', "")
    path.write_text(edited)
    ok, diff = check(path, text)
    assert not ok
    assert '+  "attention.wv",' in diff and diff.startswith("---")
    with pytest.raises(ConfigError, match="does not exist"):  # not "stale": there is nothing to compare
        check(tmp_path / "missing.toml", text)


def test_read_back_by_verify_reader(tmp_path, llama):
    """verify's reader (fp8advisor.frameworks.reader) decides, layer by layer, exactly the advice for every
    format."""
    import torch
    from torch import nn

    model, advice, request = llama
    modules = {}
    suffixes = {"torchtitan-toml": ".toml", "nemo-automodel": ".yaml", "filter": ".json"}
    for fmt in (f for f in FILE_FORMATS if f is not ConfigFormat.MEGATRON):  # verify refuses megatron
        path = tmp_path / f"{fmt.value}{suffixes.get(fmt.value, '.py')}"
        write(path, render(advice, fmt, request, output=path.name))
        config = configs.read_config(path, recipe="rowwise")
        assert config.enabled and config.recipe.value == "rowwise", fmt
        decided = set()
        for layer in model.layers:
            key = (layer.K, layer.N)
            if key not in modules:
                modules[key] = nn.Linear(layer.K, layer.N, bias=False, device=torch.device("meta"))
            if config.decides(modules[key], layer.fqn):
                decided.add(layer.fqn)
        assert decided == set(advice.convert_fqns), fmt


EXAMPLE_MODELS = sorted(p.name for p in MODELS_DIR.glob("*.py"))


@pytest.fixture(scope="module")
def inspected():
    from fp8advisor.inspect.layers import inspect_model

    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = inspect_model(str(MODELS_DIR / name), batch=1, seq=256)
        return cache[name]

    return get


@pytest.mark.parametrize("name", EXAMPLE_MODELS)
def test_example_models_every_format_converts_the_advice(tmp_path, inspected, name):
    """The shipped example models, really inspected: every format, read back, converts exactly the advice."""
    model = inspected(name)
    # a mixed decision inside each block: square-or-wider layers convert, narrowing ones stay bf16
    predictor = StubPredictor(rule=lambda M, K, N: 1.2 if N >= K else 0.9)
    advice = advise(
        model,
        StubChoice(),
        "rowwise",
        predictor=predictor,
        device_capability=None,
        compare_torchao_auto=False,
    )
    request = SuggestRequest(f"data/models/{name}", 1, 256, recipe="rowwise")
    advised = set(advice.convert_fqns)
    substring_result = set(advice.filter_list.converted)
    # exact, or (a prefix conflict) the advice less the layers kept in bf16 as the safe choice, and said so
    assert substring_result == advised - advice.filter_list.demoted
    assert advice.filter_list.exact == (substring_result == advised)
    if not advised:  # nothing pays (the ViT at 256 tokens): the files leave FP8 off (tested below)
        assert all("FP8 left off" in render(advice, fmt, request) for fmt in SWITCHED_OFF_FORMATS)
        return
    parsed = {
        "torchtitan-toml": lambda t: tomllib.loads(t)["quantize"]["linear"]["float8"]["filter_fqns"],
        "nemo-automodel": lambda t: yaml.safe_load(t)["fp8"]["filter_fqns"],
        "filter": lambda t: yaml.safe_load(t) or [],
    }
    for fmt, read in parsed.items():
        entries = read(render(advice, fmt, request))
        for framework in (Framework.TORCHTITAN, Framework.NEMO_AUTOMODEL):
            assert converted_by_framework(model.layers, entries, framework) == substring_result, (
                fmt,
                framework,
            )
    for fmt, filter_name in (("accelerate", "module_filter_func"), ("torchao", "module_filter_fn")):
        assert _run_filter(render(advice, fmt, request), filter_name, model.linear_fqns()) == advised


def test_exact_filters_name_a_shared_module_under_each_of_its_names():
    """torchao swaps a module once per parent that holds it: FLOAT8_LAYERS must name it under both."""
    from _advice_helpers import layer

    from fp8advisor.inspect.records import ModelLayers

    shared = replace(layer("blocks.0.shared", 8192, 8192), aliases=("blocks.1.shared",))
    model = ModelLayers("shared.py", 1, 8192, (shared, layer("blocks.0.own", 256, 256)))
    advice = _advice(model)
    assert advice.convert_fqns == ("blocks.0.shared",)
    for fmt in ("torchao", "accelerate"):
        text = render(advice, fmt, SuggestRequest("shared.py", 1, 8192))
        assert _exact_set(text) == {"blocks.0.shared", "blocks.1.shared"}, fmt


#: The formats that leave FP8 off when nothing is worth converting (the filter list says so in a comment).
SWITCHED_OFF_FORMATS = [
    ConfigFormat.TORCHTITAN_TOML,
    ConfigFormat.TORCHTITAN_PY,
    ConfigFormat.NEMO_AUTOMODEL,
    ConfigFormat.ACCELERATE,
    ConfigFormat.TORCHAO,
    ConfigFormat.FILTER,
]


def test_nothing_worth_converting_leaves_fp8_off_and_says_why():
    """No layer reaches the threshold: each format leaves FP8 off (not on with a filter excluding all)."""
    model = llama_layers(1)
    advice = advise(
        model,
        StubChoice(),
        "rowwise",
        50.0,
        predictor=StubPredictor(),
        device_capability=None,
        compare_torchao_auto=False,
    )
    assert advice.convert_fqns == ()
    request = SuggestRequest("m.py", 1, 8192, recipe="rowwise", min_speedup=50.0)
    texts = {fmt: render(advice, fmt, request) for fmt in SWITCHED_OFF_FORMATS}
    for fmt, text in texts.items():
        why = text.splitlines()[3]
        assert why.startswith("# FP8 left off: nothing is worth converting") and "50.00x" in why, fmt
    assert set(tomllib.loads(texts[ConfigFormat.TORCHTITAN_TOML])) == {"training", "parallelism"}  # no float8
    assert yaml.safe_load(texts[ConfigFormat.NEMO_AUTOMODEL]) == {"fp8": {"enabled": False}}
    assert not _calls(texts[ConfigFormat.TORCHTITAN_PY], "Config")
    assert _calls(texts[ConfigFormat.TORCHTITAN_PY], "model_registry")
    (accelerator,) = _calls(texts[ConfigFormat.ACCELERATE], "Accelerator")
    assert ast.literal_eval(_keywords(accelerator)["mixed_precision"]) == "bf16"
    assert not _calls(texts[ConfigFormat.ACCELERATE], "AORecipeKwargs")
    assert not _calls(texts[ConfigFormat.TORCHAO], "convert_to_float8_training")
    # the bare list has no switch: it keeps every layer in bf16 and says to leave FP8 off
    entries = yaml.safe_load(texts[ConfigFormat.FILTER])
    assert not converted_by_framework(model.layers, entries, Framework.TORCHTITAN)
    assert "leave FP8 off" in texts[ConfigFormat.FILTER]
    # torchtitan-py names the registry model it was written from, FP8 off or on (placeholders otherwise)
    assert "EDIT: placeholder" in texts[ConfigFormat.TORCHTITAN_PY]
    titan = render(advice, ConfigFormat.TORCHTITAN_PY, replace(request, target="torchtitan:qwen3/0.6B"))
    assert (
        "from torchtitan.models.qwen3 import model_registry\n" in titan
        and 'FLAVOR = "0.6B"  # torchtitan:qwen3/0.6B\n' in titan
    )
    assert "placeholder" not in titan
