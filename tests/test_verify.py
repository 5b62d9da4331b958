"""fp8advisor.verification.verifier: config against advice, the float8 GEMM trace, per-layer numerics (CPU,
emulated)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from _verify_helpers import ADVISED, advise_with_predictor, predictor, torchtitan_toml, write_tiny_model  # noqa: E402

from fp8advisor.paths import MODELS_DIR  # noqa: E402
from fp8advisor.request import OPTIONS, SuggestRequest  # noqa: E402
from fp8advisor.verification import conversion, execution, shadow  # noqa: E402
from fp8advisor.verification.numerics import SQNR_THRESHOLD_DB  # noqa: E402
from fp8advisor.verification.report import DifferenceKind  # noqa: E402
from fp8advisor.verification.verifier import verify  # noqa: E402

SEQ = 256  # the advised batch x seq; the run itself uses batch 1 x seq 64


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return write_tiny_model(tmp_path_factory.mktemp("model"))


def run(target: str, config: Path, **options):
    """`verify` at batch 1 x SEQ with the test predictor; `options` as `SuggestRequest` or `verify` take."""
    settings = {name: options.pop(name) for name in list(options) if name in OPTIONS}
    return verify(SuggestRequest(target, 1, SEQ, **settings), config, predictor=predictor, **options)


def kinds(report) -> dict[DifferenceKind, list[str]]:
    found: dict[DifferenceKind, list[str]] = {}
    for difference in report.differences:
        found.setdefault(difference.kind, []).append(difference.subject)
    return found


def toml(tmp_path: Path, entries: list[str], **kwargs) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(torchtitan_toml(entries, **kwargs))
    return path


# --- a correct config passes, in every format suggest writes ------------------------------------------------


@pytest.fixture(scope="module")
def suggested(tiny, tmp_path_factory):
    """Write every format with fp8advisor's own emitter, for the same model, batch, seq and recipe."""
    from fp8advisor.emit.config_file import render
    from fp8advisor.frameworks.formats import ConfigFormat
    from fp8advisor.inspect.layers import inspect_model
    from fp8advisor.request import SuggestRequest

    directory = tmp_path_factory.mktemp("configs")
    advice = advise_with_predictor(inspect_model(tiny, batch=1, seq=SEQ))
    assert advice.convert_fqns == ADVISED
    request = SuggestRequest(target=tiny, batch=1, seq=SEQ, recipe="rowwise")
    files = {}
    for fmt, name in [
        (ConfigFormat.TORCHTITAN_TOML, "job.toml"),
        (ConfigFormat.TORCHTITAN_PY, "recipe.py"),
        (ConfigFormat.NEMO_AUTOMODEL, "nemo.yaml"),
        (ConfigFormat.ACCELERATE, "accel.py"),
        (ConfigFormat.TORCHAO, "train.py"),
        (ConfigFormat.FILTER, "filter.yaml"),
        (ConfigFormat.FILTER, "filter.json"),
    ]:
        path = directory / name
        path.write_text(render(advice, fmt, request, output=str(path)))
        files[name] = path
    return files


@pytest.mark.parametrize(
    "name", ["job.toml", "recipe.py", "nemo.yaml", "accel.py", "train.py", "filter.yaml", "filter.json"]
)
def test_suggested_config_passes(tiny, suggested, name):
    report = run(tiny, suggested[name], recipe="rowwise")
    assert "--trust-config" not in report.config.rule  # a Python filter is evaluated, never run
    assert [d.describe() for d in report.differences] == []
    assert report.passed and report.exit_code == 0
    assert sorted(report.converted) == list(ADVISED)
    assert report.execution.mode == "model" and report.execution.emulated
    by_fqn = {layer.fqn: layer for layer in report.layers}
    for fqn in ADVISED:  # float8 forward (1 GEMM) and backward (grad_input, grad_weight)
        assert (by_fqn[fqn].float8_gemms, by_fqn[fqn].high_precision_gemms) == (3, 0)
        assert by_fqn[fqn].float8_casts > 0
    for fqn in ("blocks.0.gate", "head"):
        assert by_fqn[fqn].float8_gemms == 0 and by_fqn[fqn].high_precision_gemms == 3
        assert by_fqn[fqn].float8_casts == 0
    assert by_fqn["blocks.0.spare"].calls == 0


@pytest.mark.parametrize(
    ("recipe", "float8_gemms"),
    [("tensorwise", 3), ("rowwise", 3), ("rowwise_with_gw_hp", 2)],  # gw_hp: grad_weight stays in bf16
)
def test_sqnr_of_correct_layers_clears_threshold_by_margin(tiny, tmp_path, recipe, float8_gemms):
    """The measured basis of SQNR_THRESHOLD_DB: correct layers measure 28-29 dB (output) and 24-29 dB (input
    gradient; tensorwise casts gradients to e5m2, two mantissa bits); the threshold sits ~10 dB below."""
    report = run(tiny, toml(tmp_path, ["gate", "spare"], recipe=recipe))
    assert report.passed, [d.describe() for d in report.differences]
    converted = [layer for layer in report.layers if layer.converted]
    assert len(converted) == 4
    assert all(layer.float8_gemms == float8_gemms for layer in converted)
    assert min(layer.sqnr_output_db for layer in converted) > SQNR_THRESHOLD_DB + 10
    assert min(layer.sqnr_grad_input_db for layer in converted) > SQNR_THRESHOLD_DB + 8
    assert max(layer.sqnr_output_db for layer in converted) < 40  # float8, not a bf16 copy


# --- what differs is named ----------------------------------------------------------------------------------


def test_filter_entry_matching_nothing_is_named(tiny, tmp_path):
    report = run(tiny, toml(tmp_path, ["gate", "spare", "output"]))  # the head is called `head` here
    assert report.exit_code == 1
    assert kinds(report) == {DifferenceKind.UNUSED_ENTRY: ["output"]}


OFF_FILES = ["job.toml", "recipe.py", "nemo.yaml", "accel.py", "train.py", "filter.yaml", "filter.json"]


@pytest.fixture(scope="module")
def suggested_off(tiny, tmp_path_factory):
    """Every format written by suggest when nothing is worth converting (min speedup 3x: no layer reaches
    it)."""
    from fp8advisor.emit.config_file import render
    from fp8advisor.frameworks.formats import ConfigFormat
    from fp8advisor.inspect.layers import inspect_model
    from fp8advisor.request import SuggestRequest

    advice = advise_with_predictor(inspect_model(tiny, batch=1, seq=SEQ), min_speedup=3.0)
    assert advice.convert_fqns == ()
    request = SuggestRequest(target=tiny, batch=1, seq=SEQ, recipe="rowwise", min_speedup=3.0)
    directory = tmp_path_factory.mktemp("off")
    formats = [
        ConfigFormat.TORCHTITAN_TOML,
        ConfigFormat.TORCHTITAN_PY,
        ConfigFormat.NEMO_AUTOMODEL,
        ConfigFormat.ACCELERATE,
        ConfigFormat.TORCHAO,
        ConfigFormat.FILTER,
        ConfigFormat.FILTER,
    ]
    files = {}
    for name, fmt in zip(OFF_FILES, formats, strict=True):
        path = directory / name
        path.write_text(render(advice, fmt, request, output=str(path)))
        files[name] = path
    return files


@pytest.mark.parametrize("name", OFF_FILES)
def test_fp8_off_file_passes_when_nothing_is_worth_converting(tiny, suggested_off, name):
    report = run(tiny, suggested_off[name], recipe="rowwise", min_speedup=3.0)
    assert [d.describe() for d in report.differences] == []
    assert report.passed and report.converted == () and report.advised == ()
    # the bare filter list has no switch: it stays on and filters every layer out; the others leave FP8 off
    assert report.config.enabled is name.startswith("filter")
    assert all(layer.float8_gemms == 0 for layer in report.layers)


@pytest.mark.parametrize("name", ["job.toml", "recipe.py", "nemo.yaml", "accel.py", "train.py"])
def test_fp8_off_file_fails_where_the_advice_converts(tiny, suggested_off, name):
    report = run(tiny, suggested_off[name], recipe="rowwise")  # default min speedup: four layers pay
    found = kinds(report)
    assert found[DifferenceKind.FP8_OFF] == [str(suggested_off[name])]
    assert sorted(found[DifferenceKind.LEFT_BF16]) == list(ADVISED)


def test_extra_converted_layer_is_named(tiny, tmp_path):
    report = run(tiny, toml(tmp_path, ["spare"]))
    assert kinds(report) == {DifferenceKind.AGAINST_ADVICE: ["blocks.0.gate", "blocks.1.gate"]}
    gate = next(layer for layer in report.layers if layer.fqn == "blocks.0.gate")
    assert gate.converted and not gate.advised and gate.float8_gemms == 3


def test_converted_but_never_called_is_named(tiny, tmp_path):
    report = run(tiny, toml(tmp_path, ["gate"]))
    assert kinds(report) == {DifferenceKind.NEVER_CALLED: ["blocks.0.spare", "blocks.1.spare"]}


def test_advised_layer_left_in_bf16_is_named(tiny, tmp_path):
    report = run(tiny, toml(tmp_path, ["gate", "spare", "blocks.1.up"]))
    assert kinds(report) == {DifferenceKind.LEFT_BF16: ["blocks.1.up"]}
    assert "'blocks.1.up' match" in report.differences[0].detail


def test_fp8_off_leaves_every_advised_layer_in_bf16(tiny, tmp_path):
    report = run(tiny, toml(tmp_path, ["gate", "spare"], converters="float8"))
    found = kinds(report)
    assert found[DifferenceKind.FP8_OFF] == [str(tmp_path / "job.toml")]
    assert sorted(found[DifferenceKind.LEFT_BF16]) == list(ADVISED)
    assert all(layer.float8_gemms == 0 for layer in report.layers)


def test_recipe_other_than_requested_is_named(tiny, tmp_path):
    report = run(tiny, toml(tmp_path, ["gate", "spare"], recipe="tensorwise"), recipe="rowwise")
    assert list(kinds(report)) == [DifferenceKind.RECIPE]


# --- the trace and the numerics catch what conversion alone cannot ------------------------------------------


def test_converted_layer_that_runs_bf16_is_caught(tiny, tmp_path, monkeypatch):
    """A framework that swaps the module but whose forward never reaches float8 (here: F.linear in bf16)."""
    real_convert = execution.convert

    def convert_then_bypass(model, *args, **kwargs):
        converted = real_convert(model, *args, **kwargs)
        down = dict(model.named_modules()).get("blocks.0.down")
        if down is not None and down.weight.device.type != "meta":
            down.forward = lambda x: F.linear(x, down.weight)
        return converted

    monkeypatch.setattr(execution, "convert", convert_then_bypass)  # the real model's conversion
    report = run(tiny, toml(tmp_path, ["gate", "spare"]))
    assert kinds(report) == {DifferenceKind.NO_FLOAT8: ["blocks.0.down"]}
    assert "forward 0, backward 0" in report.differences[0].detail


def test_layer_losing_precision_is_flagged(tiny, tmp_path, monkeypatch):
    """Break the weight cast of the `up` layers (64 -> 256) on purpose: keep only the sign of each weight."""
    import torchao.float8.float8_linear as float8_linear
    from torchao.float8.float8_training_tensor import GemmInputRole

    real_cast = float8_linear.hp_tensor_to_float8_dynamic

    def broken_cast(hp, *args, gemm_input_role=None, **kwargs):
        if gemm_input_role is GemmInputRole.WEIGHT and tuple(hp.shape) == (64, 256):
            hp = torch.sign(hp) * hp.abs().mean()
        return real_cast(hp, *args, gemm_input_role=gemm_input_role, **kwargs)

    monkeypatch.setattr(float8_linear, "hp_tensor_to_float8_dynamic", broken_cast)
    report = run(tiny, toml(tmp_path, ["gate", "spare"]))
    assert kinds(report) == {DifferenceKind.NUMERICS: ["blocks.0.up", "blocks.1.up"]}
    up = next(layer for layer in report.layers if layer.fqn == "blocks.0.up")
    assert up.sqnr_output_db < SQNR_THRESHOLD_DB and up.float8_gemms == 3
    down = next(layer for layer in report.layers if layer.fqn == "blocks.0.down")
    assert down.sqnr_output_db > SQNR_THRESHOLD_DB + 10


def test_layer_whose_input_gradient_alone_loses_precision_is_flagged(tiny, tmp_path, monkeypatch):
    """Break only the grad_output casts of the `up` layers (N = 256): their output stays a correct float8
    output, their input gradient does not. The input-gradient SQNR alone must fail verify."""
    import torchao.float8.float8_linear as float8_linear
    from torchao.float8.float8_training_tensor import GemmInputRole

    real_cast = float8_linear.hp_tensor_to_float8_dynamic

    def broken_cast(hp, *args, gemm_input_role=None, **kwargs):
        if gemm_input_role is GemmInputRole.GRAD_OUTPUT and hp.shape[-1] == 256:
            hp = torch.sign(hp) * hp.abs().mean()
        return real_cast(hp, *args, gemm_input_role=gemm_input_role, **kwargs)

    monkeypatch.setattr(float8_linear, "hp_tensor_to_float8_dynamic", broken_cast)
    report = run(tiny, toml(tmp_path, ["gate", "spare"]))
    assert kinds(report) == {DifferenceKind.NUMERICS: ["blocks.0.up", "blocks.1.up"]}
    assert report.differences[0].detail.startswith("SQNR input gradient ")
    up = next(layer for layer in report.layers if layer.fqn == "blocks.0.up")
    assert up.sqnr_output_db > SQNR_THRESHOLD_DB + 10
    assert up.sqnr_grad_input_db < SQNR_THRESHOLD_DB


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_layer_sqnr_measures_float8_against_bf16(recipe):
    """Both figures are 20 log10(|bf16| / |bf16 - float8|), each of its own tensor: the output, and the
    gradient of the input; neither compares a tensor with itself (which would read inf)."""
    import copy

    from torchao.float8 import convert_to_float8_training

    from fp8advisor.recipes import float8_config
    from fp8advisor.verification.numerics import layer_sqnr

    torch.manual_seed(0)
    bf16 = torch.nn.Sequential(torch.nn.Linear(64, 256, bias=False, dtype=torch.bfloat16))
    float8 = convert_to_float8_training(copy.deepcopy(bf16), config=float8_config(recipe, emulate=True))
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    grad_output = torch.randn(32, 256, dtype=torch.bfloat16)

    def expected(reference: torch.Tensor, value: torch.Tensor) -> float:
        reference, value = reference.float(), value.float()
        return float(20 * torch.log10(reference.norm() / (reference - value).norm()))

    results = []
    for layer in (bf16[0], float8[0]):
        x_leaf = x.clone().requires_grad_(True)
        output = layer(x_leaf)
        output.backward(grad_output)
        results.append((output.detach(), x_leaf.grad))
    (bf16_output, bf16_grad), (float8_output, float8_grad) = results

    output_db, grad_input_db = layer_sqnr(bf16[0], float8[0], x, grad_output)
    assert output_db == pytest.approx(expected(bf16_output, float8_output), abs=1e-3)
    assert grad_input_db == pytest.approx(expected(bf16_grad, float8_grad), abs=1e-3)
    assert 15 < grad_input_db < 40 and 15 < output_db < 40  # float8's error, not a tensor against itself


@pytest.mark.parametrize(
    ("reference", "actual", "expected"),
    [
        ([3.0, 4.0], [3.0, 4.0], math.inf),  # no noise
        ([0.0, 0.0], [0.0, 0.0], math.inf),  # no noise and no signal: still equal, not NaN
        ([3.0, 4.0], [3.0, 4.5], 20 * math.log10(5 / 0.5)),  # |signal| 5, |noise| 0.5: 20 dB
        ([0.0, 0.0], [0.0, 1.0], -math.inf),  # noise without signal
    ],
)
def test_sqnr_db_table(reference, actual, expected):
    from fp8advisor.recipes import sqnr_db

    value = sqnr_db(torch.tensor(reference), torch.tensor(actual, dtype=torch.bfloat16))
    assert value == pytest.approx(expected)


def test_sqnr_db_of_nan_is_nan():
    from fp8advisor.recipes import sqnr_db

    assert math.isnan(sqnr_db(torch.tensor([1.0, 2.0]), torch.tensor([1.0, math.nan])))


# --- models too big to build run as a shadow with the same names --------------------------------------------


def test_shadow_run_keeps_names_and_checks(tiny, tmp_path):
    report = run(tiny, toml(tmp_path, ["gate"]), real_model_max_parameters=0)
    assert report.execution.mode == "shadow"
    assert kinds(report) == {DifferenceKind.NEVER_CALLED: ["blocks.0.spare", "blocks.1.spare"]}
    by_fqn = {layer.fqn: layer for layer in report.layers}
    assert by_fqn["blocks.0.up"].float8_gemms == 3 and by_fqn["blocks.0.gate"].float8_gemms == 0
    assert by_fqn["blocks.0.up"].sqnr_output_db > SQNR_THRESHOLD_DB + 10
    assert by_fqn["blocks.1.up"].sqnr_output_db is None  # one layer per repeated group in a shadow


def test_shadow_step_runs_single_threaded_on_shared_weights(tiny, tmp_path, monkeypatch):
    # The step runs on one CPU thread (its small GEMMs ran 3 to 10x slower on two) and the caller's thread
    # count comes back afterwards; the float8 twin of the shadow shares the bf16 shadow's weights (memory).
    seen = {}
    real_forward_backward = execution._forward_backward

    def forward_backward(bf16_model, float8_model, *args):
        seen["threads"] = torch.get_num_threads()
        up = "blocks.0.up"
        seen["shared"] = bf16_model.get_submodule(up).weight is float8_model.get_submodule(up).weight
        return real_forward_backward(bf16_model, float8_model, *args)

    monkeypatch.setattr(execution, "_forward_backward", forward_backward)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        report = run(tiny, toml(tmp_path, ["gate"]), real_model_max_parameters=0)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert report.execution.mode == "shadow" and report.converted
    assert seen == {"threads": 1, "shared": True}


def test_shadow_is_built_in_linear_time(tmp_path, monkeypatch):
    # The shadow's module table is read a fixed number of times, not once per converted layer (quadratic:
    # 2.4 s of a 405B verify, hours on an MoE with tens of thousands of expert Linears).
    from types import SimpleNamespace

    from torch import nn

    from fp8advisor.frameworks.reader import read_config
    from fp8advisor.inspect.records import LayerStatus
    from fp8advisor.recipes import Recipe

    with torch.device("meta"):
        shapes = nn.ModuleDict({str(i): nn.Linear(32, 32, bias=False) for i in range(300)})
    layers = [SimpleNamespace(fqn=str(i), calls=1, status=LayerStatus.TRACED) for i in range(300)]
    config = read_config(toml(tmp_path, []), recipe=Recipe.ROWWISE)
    tables = []
    real_named_modules = nn.Module.named_modules

    def counted(self, *args, **kwargs):
        if isinstance(self, shadow._Shadow):
            tables.append(1)
        return real_named_modules(self, *args, **kwargs)

    monkeypatch.setattr(nn.Module, "named_modules", counted)
    device = execution.execution_device()
    converted = {str(i) for i in range(300)}
    _, float8 = shadow.shadow_models(shapes, layers, config, converted, device, 0)
    assert len(tables) <= 10, len(tables)
    assert len(conversion.converted_fqns(float8)) == 300


def test_llama_example_at_small_size(tmp_path):
    """The shipped Llama-3-style example (build_model: 2 blocks, dim 256) with its torchtitan names."""

    def wide_layers_pay(
        recipe, M, K, N
    ):  # the feed-forward layers and the head (1024 wide) pay, attention not
        return predictor(recipe, M, 1024, 1024) if max(K, N) >= 1024 else predictor(recipe, M, 16, 16)

    target = str(MODELS_DIR / "llama3.py")
    report = verify(SuggestRequest(target, 1, SEQ), toml(tmp_path, ["attention"]), predictor=wide_layers_pay)
    assert report.execution.mode == "model"
    assert report.passed, [d.describe() for d in report.differences]
    assert report.converted == (
        *(f"layers.{i}.feed_forward.{w}" for i in range(2) for w in ("w1", "w2", "w3")),
        "output",
    )
    assert report.execution.model_output_sqnr_db > SQNR_THRESHOLD_DB


@pytest.mark.gpu
@pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)),
    reason="needs a CUDA GPU with FP8 tensor cores (sm >= 89)",
)
def test_gpu_runs_real_float8_gemms(tiny, tmp_path):
    report = run(tiny, toml(tmp_path, ["gate", "spare"]))
    assert not report.execution.emulated
    assert report.passed, [d.describe() for d in report.differences]
    up = next(layer for layer in report.layers if layer.fqn == "blocks.0.up")
    assert up.float8_gemms == 3 and up.sqnr_output_db > SQNR_THRESHOLD_DB + 10


SHARED_MODEL = """
from torch import nn


class Block(nn.Module):
    def __init__(self, shared):
        super().__init__()
        self.shared = shared

    def forward(self, x):
        return x + self.shared(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 256)
        shared = nn.Linear(256, 256, bias=False)
        self.blocks = nn.ModuleList([Block(shared), Block(shared)])

    def forward(self, tokens):
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return h
"""


@pytest.mark.parametrize(
    ("names", "passes"),
    [
        ({"blocks.0.shared"}, False),  # torchao swaps per parent: the calls through blocks.1 stay bf16
        ({"blocks.0.shared", "blocks.1.shared"}, True),  # what suggest writes: every name of the module
    ],
)
def test_module_shared_by_two_blocks_must_be_converted_under_both_names(tmp_path, names, passes):
    model = tmp_path / "shared.py"
    model.write_text(SHARED_MODEL)
    config = tmp_path / "convert.py"
    config.write_text(
        "from torchao.float8 import Float8LinearConfig, convert_to_float8_training\n"
        f"FLOAT8_LAYERS = {sorted(names)!r}\n"
        "def module_filter_fn(module, fqn):\n"
        "    return fqn in FLOAT8_LAYERS\n"
        'convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name("rowwise"), '
        "module_filter_fn=module_filter_fn)\n"
    )
    report = run(f"{model}:Net", config)
    assert report.advised == ("blocks.0.shared",)
    if passes:
        assert report.passed, [d.describe() for d in report.differences]
    else:
        assert [(d.kind, d.subject) for d in report.differences] == [
            (DifferenceKind.NO_FLOAT8, "blocks.0.shared")
        ]
        assert "blocks.1.shared" in report.differences[0].detail
