"""torchtitan's own conversion of the files `suggest` writes (`fp8advisor.verification.native_torchtitan`),
run with torchtitan's own code on the CPU: torchtitan 0.3.0 (installed; torchtitan-py) in this process,
torchtitan 0.2.2 (torchtitan-toml's release, fetched once by `_torchtitan02`) in a subprocess. Each test
compares what torchtitan converted with the advice the file was written from."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import modelled_choice  # noqa: E402

from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.emit.config_file import render  # noqa: E402
from fp8advisor.errors import ConfigError  # noqa: E402
from fp8advisor.frameworks.formats import expert_modules, grouped_expert_groups  # noqa: E402
from fp8advisor.frameworks.reader import read_config  # noqa: E402
from fp8advisor.inspect.layers import inspect_model  # noqa: E402
from fp8advisor.inspect.target import load_model  # noqa: E402
from fp8advisor.request import SuggestRequest  # noqa: E402
from fp8advisor.verification import native_torchtitan  # noqa: E402
from fp8advisor.verification.native import NativeConversion, NotRun  # noqa: E402
from fp8advisor.verification.native_torchtitan import torchtitan_conversion  # noqa: E402

pytest.importorskip("torchtitan.models.llama3")  # the test extra installs torchtitan 0.3

MODELS = Path(__file__).parent.parent / "data" / "models"
SEQ = 8192
#: (target, --min-speedup) for each file: mixed advice under the H100 roofline (modelled_choice)
REGISTRY = {
    "torchtitan:llama3/debugmodel": 0.5,  # 25 of 37: every wo stays bf16
    "torchtitan:llama3/8B": 1.38,  # 129 of 161: fused wqkv 1.40x in, wo 1.35x out
    "torchtitan:deepseek_v3/16B": 0.5,  # 190 Linear and every routed-expert group, the routers out
}


def advice_for(target: str, min_speedup: float):
    layers = inspect_model(target, batch=1, seq=SEQ)
    return advise(layers, modelled_choice(), "rowwise", min_speedup, device_capability=None)


def write(advice, fmt: str, target: str, path: Path) -> Path:
    path.write_text(render(advice, fmt, SuggestRequest(target, 1, SEQ)))
    return path


def advised_experts(advice) -> frozenset[str]:
    groups = grouped_expert_groups(advice.experts)
    return frozenset(module for group in groups if group.convert for module in expert_modules(group))


def convert(path: Path, target: str):
    return torchtitan_conversion(read_config(path), target, load_model(target, "meta").model)


@pytest.fixture(scope="module")
def registry_advice():
    return {target: advice_for(target, min_speedup) for target, min_speedup in REGISTRY.items()}


def py_file(registry_advice, target: str, tmp_path: Path) -> Path:
    return write(registry_advice[target], "torchtitan-py", target, tmp_path / "float8.py")


# ------------------------------------------------------------------------------------- torchtitan 0.3.0


@pytest.mark.parametrize("target", list(REGISTRY))
def test_torchtitan_converts_exactly_the_advice_of_a_registry_file(registry_advice, target, tmp_path):
    advice = registry_advice[target]
    native = convert(py_file(registry_advice, target, tmp_path), target)
    assert isinstance(native, NativeConversion) and native.framework.startswith("torchtitan 0.3")
    model = load_model(target, "meta").model
    assert (
        0 < len(advice.convert_fqns) < sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    )  # mixed
    assert native.linear_fqns == set(advice.convert_fqns)
    assert native.expert_modules == advised_experts(advice)
    if "deepseek" in target:  # torchtitan's Float8GroupedExperts, in all 26 MoE blocks
        assert len(native.expert_modules) == 26
        assert "layers.1.moe.routed_experts.inner_experts" in native.expert_modules


@pytest.mark.parametrize(
    "target, entry, extra",
    [
        ("torchtitan:llama3/8B", "attention.wo", r"layers\.\d+\.attention\.wo"),
        ("torchtitan:deepseek_v3/16B", "router.gate", r"layers\.\d+\.moe\.router\.gate"),
    ],
)
def test_a_file_edited_to_convert_more_converts_the_layers_it_names(
    registry_advice, target, entry, extra, tmp_path
):
    path = py_file(registry_advice, target, tmp_path)
    text = path.read_text()
    assert f'"{entry}",\n' in text
    path.write_text(text.replace(f'"{entry}",\n', "", 1))
    native = convert(path, target)
    gained = native.linear_fqns - set(registry_advice[target].convert_fqns)
    assert gained and all(re.fullmatch(extra, fqn) for fqn in gained)
    assert len(gained) == (32 if "llama3" in target else 26)  # every block's, and nothing else


def test_torchtitans_own_warnings_become_notes(registry_advice, tmp_path):
    """A grouped-experts converter told the model is not compiled: torchtitan's own warning, in the notes."""
    target = "torchtitan:deepseek_v3/16B"
    path = py_file(registry_advice, target, tmp_path)
    text = path.read_text()
    quiet = convert(path, target)
    assert not any("Compile is required" in note for note in quiet.notes)
    call = "Float8GroupedExpertsConverter.Config(model_compile_enabled=True)"
    assert call in text
    path.write_text(text.replace(call, "Float8GroupedExpertsConverter.Config(model_compile_enabled=False)"))
    warned = convert(path, target)
    assert any(note.startswith("torchtitan 0.3.0 warned: Compile is required") for note in warned.notes)


AUTO_FILTER_FILE = """
from torchtitan.components.quantization import Float8LinearConverter
from torchtitan.models.llama3 import model_registry


def float8():
    return model_registry(
        "debugmodel",
        converters=[
            Float8LinearConverter.Config(recipe_name="rowwise", filter_fqns=["auto_filter_small_kn"]),
        ],
    )
"""


@pytest.mark.parametrize("target", ["torchtitan:llama3/debugmodel", f"{MODELS / 'llama3.py'}:llama3_8b"])
def test_auto_filter_converts_nothing_in_torchtitan_0_3(target, tmp_path):
    """torchtitan 0.3 hands torchao's `_auto_filter_for_recipe` a Linear.Config, which is no nn.Linear: the
    auto filter converts nothing, on its own model and (its filter applied as it applies it) on any other."""
    path = tmp_path / "float8.py"
    path.write_text(AUTO_FILTER_FILE)
    config = read_config(path)
    native = convert(path, target)
    assert native.linear_fqns == frozenset()
    model = load_model(target, "meta").model
    rule = config.filter_for(model)
    assert not any(
        rule(module, fqn) for fqn, module in model.named_modules()
    )  # the reader's simulation agrees


def test_a_model_outside_the_registry_is_checked_with_torchtitans_filter(tmp_path):
    """A Python model with torchtitan 0.2's names: torchtitan's own filter_fn on its Linear layers."""
    target = f"{MODELS / 'llama3.py'}:llama3_8b"
    advice = advice_for(target, 1.2)
    assert advice.filter_fqns == ("attention.wk", "attention.wv")
    native = convert(write(advice, "torchtitan-py", target, tmp_path / "float8.py"), target)
    assert native.linear_fqns == set(advice.convert_fqns) and len(native.linear_fqns) == 161
    assert native.expert_modules is None  # torchtitan converts its own GroupedExperts only
    assert any("not a torchtitan registry model" in note for note in native.notes)


def test_the_gpu_check_is_lifted_only_while_torchtitan_runs(registry_advice, tmp_path):
    import torch._inductor.config as inductor_config
    from torchtitan.components.quantization import Float8LinearConverter, float8

    checks = (float8.has_cuda_capability, float8.has_rocm_capability)
    casts = inductor_config.emulate_precision_casts
    inductor_config.emulate_precision_casts = False  # what rowwise sets to True, whatever ran before
    target = "torchtitan:llama3/8B"
    try:
        assert convert(py_file(registry_advice, target, tmp_path), target).linear_fqns  # rowwise: sets it
        assert inductor_config.emulate_precision_casts is False
    finally:
        inductor_config.emulate_precision_casts = casts
    assert (float8.has_cuda_capability, float8.has_rocm_capability) == checks
    if not torch.cuda.is_available():  # what the lift is for: torchtitan refuses float8 without SM89
        with pytest.raises(ValueError, match="SM89"):
            Float8LinearConverter.Config(recipe_name="rowwise").build()


def test_a_file_torchtitan_rejects_is_one_config_error(tmp_path):
    path = tmp_path / "float8.py"
    path.write_text(AUTO_FILTER_FILE.replace('recipe_name="rowwise"', 'recipe_name="rowwise_with_gw_hp"'))
    with pytest.raises(
        ConfigError, match=r"torchtitan 0\.3\.0 rejects the file: NotImplementedError"
    ) as caught:
        convert(path, "torchtitan:llama3/debugmodel")
    assert "torchao" in caught.value.hint


def test_a_toml_file_is_not_run_by_torchtitan_0_3(tmp_path):
    target = f"{MODELS / 'llama3.py'}:build_model"
    path = write(advice_for(target, 0.5), "torchtitan-toml", target, tmp_path / "float8.toml")
    native = convert(path, target)
    assert native == NotRun(
        "torchtitan 0.2.x",
        "torchtitan 0.3.0 is installed: --format torchtitan-toml is read by torchtitan 0.2.x only",
    )
    assert native.note().startswith("simulated: torchtitan 0.2.x's own conversion did not run")


def test_missing_torchtitan_says_how_to_install(monkeypatch, registry_advice, tmp_path):
    monkeypatch.setattr(native_torchtitan, "installed_torchtitan", lambda: None)
    target = "torchtitan:llama3/8B"
    native = convert(py_file(registry_advice, target, tmp_path), target)
    assert isinstance(native, NotRun) and "pip install 'fp8advisor[torchtitan]'" in native.reason
    toml = tmp_path / "float8.toml"
    toml.write_text('[model]\nconverters = ["quantize.linear.float8"]\n')
    native = torchtitan_conversion(read_config(toml), target, torch.nn.Linear(16, 16))
    assert isinstance(native, NotRun) and "pip install torchtitan==0.2.2" in native.reason


def test_a_custom_config_module_is_never_imported(monkeypatch, tmp_path):
    """torchtitan 0.2's loader imports `[job] custom_config_module`: user code, so the loader is not run."""
    monkeypatch.setattr(native_torchtitan, "installed_torchtitan", lambda: "0.2.2")
    toml = tmp_path / "float8.toml"
    toml.write_text(
        '[job]\ncustom_config_module = "h3_never_imported"\n'
        '[model]\nconverters = ["quantize.linear.float8"]\n'
    )
    native = torchtitan_conversion(read_config(toml), "model.py", torch.nn.Linear(16, 16))
    assert isinstance(native, NotRun) and "custom_config_module" in native.reason
    assert "h3_never_imported" not in sys.modules


# ------------------------------------------------------------------------------------- torchtitan 0.2.2


@pytest.fixture(scope="session")
def torchtitan02_site():
    """The folder holding torchtitan 0.2.2's package: its wheel fetched once (`_torchtitan02`)."""
    from _torchtitan02 import torchtitan_0_2_site

    site, why = torchtitan_0_2_site()
    if site is None:
        pytest.skip(why)
    return site


@pytest.fixture(scope="module")
def torchtitan02(torchtitan02_site, tmp_path_factory):
    """torchtitan 0.2.2's conversion of four torchtitan-toml files, in one subprocess (about 10 s)."""
    from _torchtitan02 import run_cases

    folder = tmp_path_factory.mktemp("torchtitan02")
    llama02, hf = f"{MODELS / 'llama3.py'}:llama3_8b", str(MODELS / "llama31_8b_hf")
    advice = {target: advice_for(target, 1.2) for target in (llama02, hf)}
    advice["torchtitan:llama3/8B"] = advice_for("torchtitan:llama3/8B", 1.38)
    moe = f"{MODELS / 'moe.py'}"
    advice[moe] = advice_for(moe, 0.1)
    titan_filter = advice["torchtitan:llama3/8B"].filter_fqns
    by_hand = folder / "from_0_3_names.toml"  # what suggest wrote before it refused this (issue 26, point 2)
    by_hand.write_text(
        '[model]\nconverters = ["quantize.linear.float8"]\n\n'
        '[quantize.linear.float8]\nrecipe_name = "rowwise"\n'
        f"filter_fqns = [{', '.join(repr(entry).replace(chr(39), chr(34)) for entry in titan_filter)}]\n"
    )
    cases = [
        {
            "config": str(write(advice[llama02], "torchtitan-toml", llama02, folder / "llama02.toml")),
            "target": llama02,
        },
        {"config": str(write(advice[hf], "torchtitan-toml", hf, folder / "hf.toml")), "target": hf},
        {"config": str(by_hand), "own": "llama3/8B"},
        {"config": str(write(advice[moe], "torchtitan-toml", moe, folder / "moe.toml")), "target": moe},
    ]
    return advice, dict(
        zip(("llama02", "hf", "from_0_3", "moe"), run_cases(torchtitan02_site, cases, folder), strict=True)
    )


def test_torchtitan_0_2_converts_the_advice_of_its_files(torchtitan02):
    advice, results = torchtitan02
    for name, target in (
        ("llama02", f"{MODELS / 'llama3.py'}:llama3_8b"),
        ("hf", str(MODELS / "llama31_8b_hf")),
    ):
        result = results[name]
        assert result["framework"] == "torchtitan 0.2.2", result
        assert set(result["linear"]) == set(advice[target].convert_fqns), name
        assert 0 < len(result["linear"]) < len(result["model_linears"])  # mixed advice
        assert result["experts"] == []


def test_torchtitan_0_2_converts_193_where_a_file_from_0_3_names_says_129(torchtitan02):
    """Issue 26, point 2: torchtitan-toml written from torchtitan:llama3/8B's advice (0.3 names), on
    torchtitan 0.2.2's own Llama 3 8B (0.2 names), converts every wq / wk / wv and the head `output` too (the
    advice names a fused wqkv and `lm_head`, which 0.2 does not have)."""
    advice, results = torchtitan02
    result = results["from_0_3"]
    advised = set(advice["torchtitan:llama3/8B"].convert_fqns)
    assert len(advised) == 129 and len(result["linear"]) == 193
    assert (
        result["model_linears"] == results["llama02"]["model_linears"]
    )  # data/models/llama3.py: 0.2's names
    extra = set(result["linear"]) - advised
    assert {re.sub(r"\d+", "N", fqn) for fqn in extra} == {f"layers.N.attention.w{x}" for x in "qkv"} | {
        "output"
    }
    missing = {re.sub(r"\d+", "N", fqn) for fqn in advised - set(result["linear"])}
    assert missing == {"layers.N.attention.qkv_linear.wqkv", "lm_head"}


def test_torchtitan_0_2_expert_converter_fails_with_this_torchao(torchtitan02):
    """torchtitan 0.2.2's Float8GroupedMMConverter imports torchao's MoETrainingConfig, which torchao 0.18 has
    not: the file does not train, and the check says so (one ConfigError) rather than passing it."""
    advice, results = torchtitan02
    assert advised_experts(advice[f"{MODELS / 'moe.py'}"])  # the file converts experts
    error = results["moe"]["error"]
    assert "torchtitan 0.2.2 rejects the file" in error and "MoE training support" in error


def test_a_file_edited_to_train_another_flavor_says_so(registry_advice, tmp_path):
    target = "torchtitan:llama3/debugmodel"
    path = py_file(registry_advice, target, tmp_path)
    assert convert(path, target).other_model == ""
    path.write_text(path.read_text().replace('FLAVOR = "debugmodel"', 'FLAVOR = "8B"'))
    assert convert(path, target).other_model == (
        "the file builds torchtitan's flavor '8B', not torchtitan:llama3/debugmodel, which verify built and "
        "checked"
    )
