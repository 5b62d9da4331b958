"""MoE experts in every config format, and `verify` of the experts' decision. CPU only.

The advice's expert decisions (`Advice.experts`) are built here by hand (`dataclasses.replace`): another part
of the advice fills them. torchtitan 0.3's own files are run through torchtitan 0.3.0 (its GPU check lifted);
torchao's through torchao's own `quantize_`, on the meta device (its float8 grouped GEMM is CUDA only).
"""

from __future__ import annotations

import json
import runpy
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import StubChoice, StubPredictor  # noqa: E402
from _verify_helpers import advise_with_predictor, predictor  # noqa: E402

from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.advice.records import ExpertAdvice  # noqa: E402
from fp8advisor.emit.config_file import format_warnings, render  # noqa: E402
from fp8advisor.emit.experts import expert_notes  # noqa: E402
from fp8advisor.frameworks import reader as configs
from fp8advisor.frameworks.formats import ConfigFormat  # noqa: E402
from fp8advisor.inspect.layers import inspect_model  # noqa: E402
from fp8advisor.paths import MODELS_DIR  # noqa: E402
from fp8advisor.recipes import Recipe  # noqa: E402
from fp8advisor.request import SuggestRequest  # noqa: E402
from fp8advisor.verification import experts as verify_experts  # noqa: E402
from fp8advisor.verification import verifier as verify  # noqa: E402
from fp8advisor.verification.report import DifferenceKind  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

SEQ = 256
MOE = (
    f"{MODELS_DIR / 'moe.py'}:build_model(dim=64, n_heads=4, vocab_size=256, expert_hidden_dim=64, "
    "shared_hidden_dim=64)"
)
MOE_GROUPS = ("layers.0.moe.experts", "layers.1.moe.experts")
TITAN_MOE = "torchtitan:deepseek_v3/debugmodel"
TITAN_GROUPS = tuple(f"layers.{i}.moe.routed_experts.inner_experts" for i in range(1, 6))


def experts(groups, convert, weights=("w1", "w2", "w3"), speedup=1.3) -> tuple[ExpertAdvice, ...]:
    """One ExpertAdvice per group; `convert`: a bool for all, or one per group."""
    decisions = convert if isinstance(convert, (list, tuple)) else [convert] * len(groups)
    return tuple(
        ExpertAdvice(
            group=group,
            form="grouped",
            members=tuple(f"{group}.{w}" for w in weights),
            n_experts=8,
            top_k=2,
            M_per_expert=64.0,
            convert=decision,
            reason="test",
            recipe="rowwise",
            predicted_speedup=speedup if decision else 0.9,
            bf16_time_s=1.0,
            float8_time_s=1.0 / (speedup if decision else 0.9),
            provenance="modelled",
        )
        for group, decision in zip(groups, decisions, strict=True)
    )


@pytest.fixture(scope="module")
def moe_advice():
    """The small MoE example advised with the verify tests' predictor: only `output` converts. Its own
    expert decisions are taken out: each test states the decisions it renders."""
    advice = advise_with_predictor(inspect_model(MOE, batch=1, seq=SEQ))
    assert advice.convert_fqns == ("output",)
    assert len(advice.experts) == 2  # decided by the advice; replaced below
    return replace(advice, experts=())


@pytest.fixture(scope="module")
def titan_advice():
    """torchtitan 0.3's DeepSeek-V3 debug model (MoE, 5 MoE layers): every convertible Linear advised."""
    layers = inspect_model(TITAN_MOE, batch=1, seq=SEQ)
    advice = advise(
        layers,
        StubChoice(),
        "rowwise",
        predictor=StubPredictor(rule=lambda M, K, N: 1.5),
        device_capability=None,
        compare_torchao_auto=False,
    )
    assert not any("router" in fqn for fqn in advice.convert_fqns)  # N = 8: not convertible
    return advice


def comments(text: str) -> str:
    """The file's comment lines as one paragraph (they are wrapped at 110 columns)."""
    return " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))


def request(target: str) -> SuggestRequest:
    return SuggestRequest(target, 1, SEQ, recipe="rowwise", profile="stub")


# ------------------------------------------------------------------------------------------ torchtitan 0.3


def build_titan(text: str, tmp_path: Path, monkeypatch):
    """Run the emitted recipe function through torchtitan 0.3.0 and build its model on the meta device."""
    import torchtitan.components.quantization.float8 as float8
    import torchtitan.models.deepseek_v3 as deepseek_v3

    monkeypatch.setattr(float8, "has_cuda_capability", lambda *args: True)  # its GPU check, lifted (CPU)
    given = []
    registry = deepseek_v3.model_registry

    def recording_registry(*args, converters=None, **kwargs):  # torchtitan's own, recording the converters
        given.extend(converters or [])
        return registry(*args, converters=converters, **kwargs)

    monkeypatch.setattr(deepseek_v3, "model_registry", recording_registry)
    path = tmp_path / "float8.py"
    path.write_text(text)
    config = runpy.run_path(str(path))["float8_advised"]()
    with torch.device("meta"):
        model = config.model_spec.model.build()
    return given, model


def test_torchtitan_py_holds_both_converters_and_torchtitan_converts_both(
    titan_advice, tmp_path, monkeypatch
):
    pytest.importorskip("torchtitan.models.deepseek_v3")
    from torchao.prototype.moe_training.tensor import Float8TrainingWeightWrapperTensor
    from torchtitan.components.quantization import Float8GroupedExpertsConverter, Float8LinearConverter

    advice = replace(
        titan_advice, experts=experts(TITAN_GROUPS, True, weights=("w1_EFD", "w2_EDF", "w3_EFD"))
    )
    text = render(advice, "torchtitan-py", request(TITAN_MOE))
    converters, model = build_titan(text, tmp_path, monkeypatch)
    linear = [c for c in converters if isinstance(c, Float8LinearConverter.Config)]
    grouped = [c for c in converters if isinstance(c, Float8GroupedExpertsConverter.Config)]
    assert len(converters) == 2 and len(linear) == 1 and len(grouped) == 1
    assert linear[0].filter_fqns == list(advice.filter_fqns) and grouped[0].model_compile_enabled
    assert any("router.gate" in entry for entry in linear[0].filter_fqns) or all(
        "router" not in fqn for fqn in advice.convert_fqns
    )
    float8_linear = {fqn for fqn, m in model.named_modules() if type(m).__name__ == "Float8Linear"}
    assert float8_linear == set(advice.convert_fqns)
    assert not any(fqn.endswith("router.gate") for fqn in float8_linear)
    swapped = verify_experts.swapped_expert_modules(model)
    assert swapped == set(TITAN_GROUPS)
    for group in TITAN_GROUPS:
        module = model.get_submodule(group)
        assert all(isinstance(p, Float8TrainingWeightWrapperTensor) for p in module.parameters())
    assert "rowwise whatever recipe_name says" in comments(text)
    read = configs.read_config(tmp_path / "float8.py")
    assert read.enabled and read.converts_experts is True


def test_torchtitan_py_experts_alone_and_experts_in_bf16(titan_advice, tmp_path, monkeypatch):
    pytest.importorskip("torchtitan.models.deepseek_v3")
    from torchtitan.components.quantization import Float8GroupedExpertsConverter

    no_linear = replace(
        titan_advice,
        layers=tuple(replace(layer, convert=False) for layer in titan_advice.layers),
        experts=experts(TITAN_GROUPS, True, weights=("w1_EFD", "w2_EDF", "w3_EFD")),
    )
    text = render(no_linear, "torchtitan-py", request(TITAN_MOE))
    assert "Float8LinearConverter" not in text
    converters, model = build_titan(text, tmp_path, monkeypatch)
    (converter,) = converters
    assert isinstance(converter, Float8GroupedExpertsConverter.Config)
    assert not any(type(m).__name__ == "Float8Linear" for m in model.modules())
    assert verify_experts.swapped_expert_modules(model) == set(TITAN_GROUPS)
    read = configs.read_config(tmp_path / "float8.py")
    assert not read.enabled and read.converts_experts is True
    assert read.notes == (
        "no Float8LinearConverter.Config(...): every nn.Linear stays bf16, only the MoE experts convert",
    )

    kept = replace(titan_advice, experts=experts(TITAN_GROUPS, False, weights=("w1_EFD", "w2_EDF", "w3_EFD")))
    text = render(kept, "torchtitan-py", request(TITAN_MOE))
    assert "Float8GroupedExpertsConverter" not in text.split('"""')[-1]  # not in the code
    assert "# MoE experts stay bf16: no Float8GroupedExpertsConverter." in text
    assert "predicted 0.90x over bf16, modelled" in comments(text)
    (tmp_path / "kept.py").write_text(text)
    assert configs.read_config(tmp_path / "kept.py").converts_experts is False


def test_torchtitan_py_cannot_convert_some_groups_it_chooses_by_the_total(moe_advice):
    groups = experts(MOE_GROUPS, [True, False], speedup=1.3)  # total 2 / (1/1.3 + 1/0.9) = 1.06x
    advice = replace(moe_advice, experts=groups)
    text = render(advice, "torchtitan-py", request(MOE))
    code = text.split('"""')[-1]
    assert "Float8GroupedExpertsConverter.Config" in code  # 1.06 >= min speedup 1.0: all
    assert (
        "torchtitan 0.3 cannot convert some expert groups and not others: this file converts all"
        in " ".join(line.lstrip("# ") for line in text.splitlines())
    )
    (warning,) = [w for w in format_warnings(advice, "torchtitan-py") if "expert" in w]
    assert "converts every expert group or none" in warning and "this file converts all" in warning
    strict = replace(advice, min_speedup=1.1)  # 1.06 < 1.1: none
    assert (
        "Float8GroupedExpertsConverter.Config"
        not in render(strict, "torchtitan-py", request(MOE)).split('"""')[-1]
    )


def test_router_converted_by_a_hand_built_advice_is_warned(moe_advice):
    gate = "layers.0.moe.router.gate"
    layers = tuple(
        replace(layer, convert=True) if layer.fqn == gate else layer for layer in moe_advice.layers
    )
    advice = replace(moe_advice, layers=layers, experts=experts(MOE_GROUPS, True))
    assert any(gate in warning and "routers" in warning for warning in format_warnings(advice, "torchao"))
    assert any("look like MoE routers" in line for line in expert_notes(advice, ConfigFormat.TORCHAO))
    assert not any(
        "routers" in w for w in format_warnings(replace(advice, layers=moe_advice.layers), "torchao")
    )


# ------------------------------------------------------------------------------------------------ torchao


def converted_by_torchao_file(text: str, tmp_path: Path):
    """Run the emitted file's convert_model on the small MoE model built on the meta device."""
    from fp8advisor.inspect.target import load_model

    path = tmp_path / "convert.py"
    path.write_text(text)
    namespace = runpy.run_path(str(path))
    model = load_model(MOE, "meta").model
    compiled = namespace["convert_model"](model)  # torch.compile is lazy: nothing compiles here
    assert compiled._orig_mod is model
    return model


def test_torchao_swaps_exactly_the_advised_expert_weights(moe_advice, tmp_path):
    from torchao.prototype.moe_training.tensor import Float8TrainingWeightWrapperTensor

    advice = replace(moe_advice, experts=experts(MOE_GROUPS, [False, True]))
    text = render(advice, "torchao", request(MOE))
    model = converted_by_torchao_file(text, tmp_path)
    wrapped = {n for n, p in model.named_parameters() if isinstance(p, Float8TrainingWeightWrapperTensor)}
    assert wrapped == {f"layers.1.moe.experts.{w}" for w in ("w1", "w2", "w3")}
    assert {n for n, m in model.named_modules() if type(m).__name__ == "Float8Linear"} == {"output"}
    read = configs.read_config(tmp_path / "convert.py")
    assert read.converts_experts is True and read.enabled
    assert {fqn for fqn in MOE_GROUPS + ("layers.1.moe.router",) if read.expert_filter(None, fqn)} == {
        "layers.1.moe.experts"
    }


def test_torchao_experts_alone_and_none(moe_advice, tmp_path):
    from torchao.prototype.moe_training.tensor import Float8TrainingWeightWrapperTensor

    no_linear = replace(
        moe_advice,
        layers=tuple(replace(layer, convert=False) for layer in moe_advice.layers),
        experts=experts(MOE_GROUPS, True),
    )
    text = render(no_linear, "torchao", request(MOE))
    assert "convert_to_float8_training" not in text and "quantize_(model" in text
    model = converted_by_torchao_file(text, tmp_path)
    wrapped = {
        n.rpartition(".")[0]
        for n, p in model.named_parameters()
        if isinstance(p, Float8TrainingWeightWrapperTensor)
    }
    assert wrapped == set(MOE_GROUPS)
    assert not any(type(m).__name__ == "Float8Linear" for m in model.modules())
    read = configs.read_config(tmp_path / "convert.py")
    assert not read.enabled and read.converts_experts is True

    kept = replace(moe_advice, experts=experts(MOE_GROUPS, False))
    text = render(kept, "torchao", request(MOE))
    assert "quantize_" not in text.split('"""')[-1] and "no quantize_ call: they stay bf16." in comments(text)


# ------------------------------------------------------------------------------------------ torchtitan 0.2


def test_torchtitan_toml_writes_the_grouped_mm_section(moe_advice, tmp_path):
    advice = replace(moe_advice, experts=experts(MOE_GROUPS, [True, False]))
    text = render(advice, "torchtitan-toml", request(MOE))
    data = tomllib.loads(text)
    assert data["model"]["converters"] == ["quantize.linear.float8", "quantize.grouped_mm.float8"]
    assert data["quantize"]["grouped_mm"]["float8"] == {"fqns": ["layers.0.moe.experts"]}
    assert "Float8GroupedMMConverter" in text
    path = tmp_path / "job.toml"
    path.write_text(text)
    read = configs.read_config(path)
    assert read.converts_experts is True
    names = ["layers.0.moe.experts", "layers.1.moe.experts", "layers.0.moe.router"]
    assert [fqn for fqn in names if read.expert_filter(None, fqn)] == ["layers.0.moe.experts"]


# ------------------------------------------------------------------------------- formats without experts


@pytest.mark.parametrize("fmt", ["nemo-automodel", "accelerate", "filter"])
def test_formats_that_cannot_convert_experts_say_they_stay_bf16(moe_advice, fmt):
    advice = replace(moe_advice, experts=experts(MOE_GROUPS, True))
    text = render(advice, fmt, request(MOE))
    said = comments(text)
    assert "MoE experts stay bf16 with this file" in said and "predicted 1.30x over bf16, modelled" in said
    (warning,) = format_warnings(advice, fmt)
    assert warning.startswith(
        f"--format {fmt} cannot convert grouped MoE experts"
    )  # no "warning: " of its own
    assert render(moe_advice, fmt, request(MOE)) == render(replace(advice, experts=()), fmt, request(MOE))


def test_megatron_refuses_a_model_with_routers_and_shared_experts(moe_advice):
    """Megatron's GPTModel names no router or shared expert of this model: the format refuses it (exit 2)."""
    from fp8advisor.errors import ConfigError

    advice = replace(moe_advice, recipe=Recipe.TENSORWISE, experts=experts(MOE_GROUPS, True))
    with pytest.raises(ConfigError, match="cannot name 8 Linear layer"):
        render(advice, "megatron", request(MOE))


def test_json_filter_has_no_comment_but_warns(moe_advice):
    advice = replace(moe_advice, experts=experts(MOE_GROUPS, True))
    with_experts = json.loads(render(advice, "filter", request(MOE), output="f.json"))
    without = json.loads(render(moe_advice, "filter", request(MOE), output="f.json"))
    assert with_experts["filter_fqns"] == without["filter_fqns"]
    notes = expert_notes(advice, "filter")
    assert notes and not set(notes) & set(with_experts["header"])  # the notes go to stderr instead
    assert format_warnings(advice, "filter")


def test_dense_advice_has_no_expert_text(moe_advice):
    for fmt in ConfigFormat:
        if fmt.has_file:
            assert expert_notes(moe_advice, fmt) == []
    assert format_warnings(moe_advice, "nemo-automodel") == []


# ------------------------------------------------------------------------------------------------- verify


def run_verify(monkeypatch, config: Path, groups):
    """verify the small MoE model against `config`, its advice given the expert decisions `groups`."""
    real = verify.advice_for
    monkeypatch.setattr(verify, "advice_for", lambda *a, **k: replace(real(*a, **k), experts=groups))
    request = SuggestRequest(MOE, 1, SEQ)
    return verify.verify(request, config, predictor=predictor, real_model_max_parameters=0)


@pytest.fixture
def torchao_file(moe_advice, tmp_path):
    def write(groups) -> Path:
        path = tmp_path / "convert.py"
        path.write_text(render(replace(moe_advice, experts=groups), "torchao", request(MOE)))
        return path

    return write


def test_verify_passes_when_the_experts_agree_and_fails_when_not(monkeypatch, torchao_file):
    advised = experts(MOE_GROUPS, [True, False])
    report = run_verify(monkeypatch, torchao_file(advised), advised)
    assert report.passed, [d.describe() for d in report.differences]
    assert [(c.group, c.converted) for c in report.experts] == [(MOE_GROUPS[0], True), (MOE_GROUPS[1], False)]
    assert verify_experts.EXPERTS_NOT_RUN in report.notes

    report = run_verify(monkeypatch, torchao_file(advised), experts(MOE_GROUPS, [True, True]))
    assert not report.passed and report.exit_code == 1
    (difference,) = report.differences
    assert difference.kind is DifferenceKind.EXPERTS and difference.subject == MOE_GROUPS[1]
    assert "the config keeps it in bf16" in difference.detail


def test_verify_of_a_torchtitan_py_file_checks_all_or_none(monkeypatch, moe_advice, tmp_path):
    path = tmp_path / "float8.py"
    groups = experts(MOE_GROUPS, False)
    path.write_text(
        render(replace(moe_advice, experts=experts(MOE_GROUPS, True)), "torchtitan-py", request(MOE))
    )
    report = run_verify(monkeypatch, path, groups)
    assert {d.kind for d in report.differences} == {DifferenceKind.EXPERTS}
    assert {d.subject for d in report.differences} == set(MOE_GROUPS)
    assert all("the config converts it" in d.detail for d in report.differences)


def test_verify_of_a_format_without_experts_passes_with_a_note(monkeypatch, moe_advice, tmp_path):
    path = tmp_path / "nemo.yaml"
    groups = experts(MOE_GROUPS, True)
    path.write_text(render(replace(moe_advice, experts=groups), "nemo-automodel", request(MOE)))
    report = run_verify(monkeypatch, path, groups)
    assert report.passed
    assert any(note.startswith("nemo-automodel cannot convert grouped MoE experts") for note in report.notes)
    assert all(check.converted is None for check in report.experts)
