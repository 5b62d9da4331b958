"""torchtitan's config files do what they say in the torchtitan that runs them (issue 26), CPU only.

Every claim here is checked with the framework's own code: the torchtitan-py files `suggest` writes are
imported and run by torchtitan 0.3.0 (its recipe function, its converters, its model built on the meta
device); the torchtitan-toml files are parsed and converted by torchtitan 0.2.2 in a subprocess (it cannot be
installed beside 0.3: `_torchtitan02.torchtitan_0_2_site` fetches its wheel); the NaN of a torchao-converted
torchtitan model is found by torchtitan's own build and init. Only the GPU-capability checks are lifted
(`has_cuda_capability` in the converters' modules).

- version rules: a registry target is built by the installed torchtitan (0.3), so torchtitan-toml (0.2.x)
  from it is refused, before any model is built; the name heuristic for other targets no longer mistakes
  DeepSeek-V3's MLA `attention.wq` for torchtitan 0.2.
- torchao on a torchtitan registry target is refused (torchtitan's init skips torchao's Float8Linear).
- the files train at the advised point: the model compiled, batch, seq, TP and EP as advised.
- wording: a Megatron file with nothing in float8 never turns FP8 on; the torchtitan-toml expert note names
  the torchao its converter needs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import LLAMA_BLOCK, StubChoice, StubPredictor, layer, llama_layers, modelled_choice  # noqa: E402

from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.advice.records import ExpertAdvice  # noqa: E402
from fp8advisor.cli import app  # noqa: E402
from fp8advisor.emit.config_file import check_format_target, format_warnings, render  # noqa: E402
from fp8advisor.emit.experts import expert_warnings  # noqa: E402
from fp8advisor.errors import ConfigError  # noqa: E402
from fp8advisor.frameworks.formats import ConfigFormat  # noqa: E402
from fp8advisor.inspect import titan  # noqa: E402
from fp8advisor.inspect.records import ModelLayers  # noqa: E402
from fp8advisor.request import SuggestRequest  # noqa: E402

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

pytest.importorskip("torchtitan.models.llama3")  # the test extra installs it: these tests run in CI

runner = CliRunner()
LLAMA3_8B = "torchtitan:llama3/8B"
DEEPSEEK_16B = "torchtitan:deepseek_v3/16B"
#: The options of issue 26's DeepSeek-V3 instance: its base recipe trains at EP 8, batch 4, seq 4096.
ISSUE_OPTIONS = ["--recipe", "rowwise", "--ep", "32", "--seq", "8192"]


@pytest.fixture
def gpu_check_lifted(monkeypatch):
    """torchtitan 0.3's float8 converters refuse a machine without SM89: that check alone is lifted."""
    import torchtitan.components.quantization.float8 as float8

    monkeypatch.setattr(float8, "has_cuda_capability", lambda *args: True)


def suggest(tmp_path: Path, target: str, *options: str, fmt: str = "torchtitan-py"):
    """`fp8advisor suggest` through the CLI: (the file it wrote, its --json advice, its stderr)."""
    path = tmp_path / ("float8_advised.py" if fmt == "torchtitan-py" else "float8_advised.toml")
    result = runner.invoke(app, ["suggest", target, *options, "--format", fmt, "-o", str(path), "--json"])
    assert result.exit_code == 0, result.output
    return path, json.loads(result.stdout), result.stderr


def import_recipe(path: Path):
    """The recipe function's config: our generated file imported as a module, run by torchtitan 0.3."""
    spec = importlib.util.spec_from_file_location(f"advised_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.float8_advised()


def converted_by_torchtitan(config) -> tuple[set[str], set[str], set[str]]:
    """What torchtitan 0.3 trains in float8 with `config`: its model_spec (converters applied by
    model_registry) updated and built on the meta device as torchtitan's Trainer does: (Float8Linear FQNs,
    Float8 grouped-experts FQNs, every GroupedExperts FQN)."""
    from torchtitan.components.quantization.float8 import Float8Linear
    from torchtitan.models.common.moe import GroupedExperts

    model_config = config.model_spec.model
    model_config.update_from_config(config=config)
    with torch.device("meta"):
        model = model_config.build()
    modules = dict(model.named_modules())
    linear = {fqn for fqn, module in modules.items() if isinstance(module, Float8Linear)}
    grouped = {fqn for fqn, module in modules.items() if isinstance(module, GroupedExperts)}
    float8_grouped = {fqn for fqn in grouped if type(modules[fqn]).__name__.startswith("Float8")}
    return linear, float8_grouped, grouped


def advised(document: dict) -> tuple[set[str], set[str]]:
    """(the Linear FQNs, the grouped expert groups) the --json advice converts."""
    layers = {row["fqn"] for row in document["layers"] if row["convert"]}
    return layers, {row["group"] for row in document.get("experts", []) if row["convert"]}


# --------------------------------------------------------------------------- torchtitan-py, torchtitan 0.3


def test_llama3_8b_recipe_trains_at_the_advised_point_and_converts_the_advice(tmp_path, gpu_check_lifted):
    options = ["--recipe", "rowwise", "--batch", "2", "--seq", "4096", "--tp", "2"]  # llama3_8b: 1, 8192, 1
    path, document, stderr = suggest(tmp_path, LLAMA3_8B, *options)
    assert "Linear names" not in stderr  # its names are the installed torchtitan's: no heuristic
    config = import_recipe(path)
    assert config.compile.enable and "model" in config.compile.components
    assert (config.training.local_batch_size, config.training.seq_len) == (2, 4096)
    assert config.parallelism.tensor_parallel_degree == 2
    linear, _, _ = converted_by_torchtitan(config)
    layers, _ = advised(document)
    assert linear == layers and 0 < len(layers) < 32 * 5 + 1  # exactly the advice, not every Linear


def test_deepseek_v3_16b_recipe_trains_at_the_advised_point(tmp_path, gpu_check_lifted):
    """Issue 26, points 3, 4 and 6a: its base recipe compiles only the loss and trains at EP 8, batch 4,
    seq 4096; torchtitan 0.3's own DeepSeek-V3 has MLA's attention.wq (no wk / wv) and is no 0.2 model."""
    from torchtitan.models.deepseek_v3.config_registry import deepseek_v3_16b

    base = deepseek_v3_16b()
    assert "model" not in base.compile.components and base.parallelism.expert_parallel_degree == 8
    path, document, stderr = suggest(tmp_path, DEEPSEEK_16B, *ISSUE_OPTIONS)
    assert "torchtitan 0.2" not in stderr
    config = import_recipe(path)
    assert config.compile.enable and "model" in config.compile.components
    assert config.training.seq_len == 8192 and config.training.local_batch_size == 1
    assert config.parallelism.expert_parallel_degree == 32
    linear, float8_grouped, grouped = converted_by_torchtitan(config)
    layers, groups = advised(document)
    assert linear == layers and layers  # exactly the advised Linear layers
    assert float8_grouped == groups == set()  # the advice keeps the 26 expert groups in bf16 here
    assert len(grouped) == 26


def test_deepseek_v3_16b_experts_convert_as_advised(tmp_path, gpu_check_lifted):
    """Where the advice puts every expert group in float8, torchtitan's converter swaps every one of them."""
    path, document, _ = suggest(tmp_path, DEEPSEEK_16B, *ISSUE_OPTIONS, "--min-speedup", "0.9")
    linear, float8_grouped, grouped = converted_by_torchtitan(import_recipe(path))
    layers, groups = advised(document)
    assert linear == layers
    assert float8_grouped == groups == grouped and len(groups) == 26


# ------------------------------------------------------------------------------------------ version rules


@pytest.mark.parametrize("target", [LLAMA3_8B, DEEPSEEK_16B])
def test_torchtitan_toml_from_a_registry_model_is_refused(target, monkeypatch):
    """Issue 26, point 2: torchtitan 0.2.2 would convert 193 of Llama 3 8B's layers where 129 were advised
    (its wq / wk / wv), and none of DeepSeek-V3's expert groups (its moe.experts). Refused before the work."""
    monkeypatch.setattr("fp8advisor.inspect.layers.inspect_model", lambda *a, **k: pytest.fail("built"))
    result = runner.invoke(app, ["suggest", target, *ISSUE_OPTIONS[:2], "--format", "torchtitan-toml"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert f"built by torchtitan {titan.torchtitan_version()}" in message and "0.2.x" in message
    assert "moe.routed_experts.inner_experts" in message and "write --format torchtitan-py" in message
    assert "Traceback" not in result.output


def test_the_version_check_needs_no_model(monkeypatch):
    """check_format_target decides from the target's name and the installed version: before the work."""
    monkeypatch.setattr("fp8advisor.inspect.titan._import_torchtitan", lambda: pytest.fail("imported"))
    with pytest.raises(ConfigError, match="torchtitan 0.2.x's job config"):
        check_format_target("torchtitan-toml", LLAMA3_8B)
    check_format_target("torchtitan-py", LLAMA3_8B)
    check_format_target("torchtitan-toml", "llama02.py")  # not a registry model: the heuristic warns
    check_format_target(None, LLAMA3_8B)
    monkeypatch.setattr(titan, "torchtitan_version", lambda: "0.2.2")
    with pytest.raises(ConfigError, match="installed torchtitan is 0.2.2, whose model names are 0.2's"):
        check_format_target("torchtitan-py", LLAMA3_8B)


def test_render_refuses_what_suggest_refuses():
    """`render` (the API, and `--check`) asks again: a registry model in torchtitan-toml or torchao."""
    advice = advise(llama_layers(2), modelled_choice(), "rowwise", device_capability=None)
    registry = replace(advice, target=LLAMA3_8B)
    for fmt, words in [
        ("torchtitan-toml", "torchtitan 0.2.x's job config"),
        ("torchao", "init_states skips"),
    ]:
        with pytest.raises(ConfigError, match=words):
            render(registry, fmt, SuggestRequest(LLAMA3_8B, recipe="rowwise"))
    assert "[quantize.linear.float8]" in render(advice, "torchtitan-toml", SuggestRequest("llama02.py"))


def test_a_registry_target_never_goes_through_the_name_heuristic():
    advice = advise(llama_layers(2), modelled_choice(), "rowwise", device_capability=None)
    assert titan.names_look_like([row.fqn for row in advice.layers]).version == titan.TORCHTITAN_0_2
    assert len(format_warnings(advice, "torchtitan-py")) == 1  # a model file: the heuristic warns
    assert format_warnings(replace(advice, target=LLAMA3_8B), "torchtitan-py") == []


#: torchtitan 0.3.0's DeepSeek-V3 block (MLA, q_lora_rank 0) and MoE, and 0.2.2's: the same Linear names.
MLA_BLOCK = ["attention.wq", "attention.wkv_a", "attention.wkv_b", "attention.wo"]
MOE_LINEARS = ["moe.router.gate", "moe.shared_experts.w1", "moe.shared_experts.w2", "moe.shared_experts.w3"]


def test_deepseek_names_are_told_apart_by_their_experts_only():
    """Issue 26, point 6a: MLA's attention.wq alone is no torchtitan 0.2 evidence; the experts are."""
    linears = [f"layers.1.{name}" for name in MLA_BLOCK + MOE_LINEARS] + ["layers.0.feed_forward.w1"]
    assert titan.names_look_like(linears) is None
    new = titan.names_look_like(linears, ["layers.1.moe.routed_experts.inner_experts"])
    old = titan.names_look_like(linears, ["layers.1.moe.experts"])
    assert (new.version, new.attention, new.experts) == ("0.3", None, "moe.routed_experts.inner_experts")
    assert (old.version, old.experts) == ("0.2", "moe.experts")
    # experts named as 0.3's under torchtitan-toml: warned; 0.2's under torchtitan-py: 0.3 converts them all
    assert "grouped MoE experts moe.routed_experts.inner_experts" in titan.version_mismatch(
        [layer(fqn, 2048, 2048) for fqn in linears],
        titan.TORCHTITAN_0_2,
        ("layers.1.moe.routed_experts.inner_experts",),
    )
    assert (
        titan.version_mismatch([layer(f, 2048, 2048) for f in linears], "0.3", ("layers.1.moe.experts",))
        is None
    )


# ------------------------------------------------------------------------------ torchao on torchtitan


def test_torchao_on_a_torchtitan_registry_model_is_refused():
    result = runner.invoke(app, ["suggest", LLAMA3_8B, "--recipe", "rowwise", "--format", "torchao"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert "init_states skips torchao's plain Float8Linear" in message
    assert "hint: write --format torchtitan-py" in message
    check_format_target("accelerate", LLAMA3_8B)  # accelerate converts after the user's init: below


def _debugmodel(converters=None, convert=None):
    """torchtitan 0.3's llama3 debugmodel as its Trainer builds it: model_registry(..., converters) on the
    meta device, (the torchao file's conversion), to_empty, init_weights (= init_states). to_empty leaves
    arbitrary memory; it is filled with NaN here so that whatever the init skips shows."""
    from torchtitan.models.llama3 import model_registry

    with torch.device("meta"):
        model = model_registry("debugmodel", converters=converters).model.build()
    if convert is not None:
        convert(model)
    model.to_empty(device="cpu")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(float("nan"))
        model.init_weights(buffer_device=None)
    return model


#: Linear layers of torchtitan 0.3's llama3 debugmodel (dim 256): one of each kind, and the head.
NAN_LAYERS = {"layers.0.attention.qkv_linear.wqkv", "layers.1.attention.wo", "layers.2.feed_forward.w2"}


def test_torchao_leaves_torchtitan_weights_uninitialised_and_torchtitans_converter_does_not(gpu_check_lifted):
    """Issue 26, point 1, with torchtitan 0.3's own build and init."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchtitan.components.quantization import Float8LinearConverter

    def torchao_file(model):  # what the torchao file's convert_model does, on the model torchtitan built
        convert_to_float8_training(
            model,
            config=Float8LinearConfig.from_recipe_name("rowwise"),
            module_filter_fn=lambda module, fqn: fqn in NAN_LAYERS,
        )

    with_torchao = _debugmodel(convert=torchao_file)
    converted = {
        fqn for fqn, module in with_torchao.named_modules() if type(module).__name__ == "Float8Linear"
    }
    assert converted == NAN_LAYERS
    for fqn, parameter in with_torchao.named_parameters():
        assert torch.isnan(parameter).all() == (fqn.rpartition(".")[0] in NAN_LAYERS), fqn
    with pytest.raises(RuntimeError, match="Float8Linear"):  # torchtitan's Trainer refuses it at build too
        with_torchao.verify_module_protocol()

    keep = [fqn for fqn, module in with_torchao.named_modules() if type(module).__name__ == "Linear"]
    converter = Float8LinearConverter.Config(
        recipe_name="rowwise", filter_fqns=keep, model_compile_enabled=True
    )
    with_torchtitan = _debugmodel(converters=[converter])
    converted = {
        fqn for fqn, module in with_torchtitan.named_modules() if type(module).__name__ == "Float8Linear"
    }
    assert converted == NAN_LAYERS
    assert all(torch.isfinite(parameter).all() for parameter in with_torchtitan.parameters())
    with_torchtitan.verify_module_protocol()


def test_accelerate_converts_after_the_init_and_keeps_it():
    """accelerate's own conversion (`Accelerator.prepare` -> `_prepare_ao` -> convert_model_to_fp8_ao) runs
    on the model the user built and initialised: the initialised weights are the Float8Linear's."""
    from accelerate.utils.ao import convert_model_to_fp8_ao
    from torchao.float8 import Float8LinearConfig

    model = _debugmodel()
    before = {fqn: parameter.clone() for fqn, parameter in model.named_parameters()}
    convert_model_to_fp8_ao(
        model,
        config=Float8LinearConfig.from_recipe_name("rowwise"),
        module_filter_func=lambda module, fqn: fqn in NAN_LAYERS,
    )
    converted = {fqn for fqn, module in model.named_modules() if type(module).__name__ == "Float8Linear"}
    assert converted == NAN_LAYERS
    assert all(torch.equal(parameter, before[fqn]) for fqn, parameter in model.named_parameters())


# ------------------------------------------------------------------------- torchtitan-toml, torchtitan 0.2.2

#: Run by torchtitan 0.2.2 (PYTHONPATH=its site): its ConfigManager reads the TOML, its converters convert its
#: own Llama 3 8B on the meta device; its grouped-experts converter is tried with the installed torchao.
TORCHTITAN_0_2_SCRIPT = r"""
import json, sys, torch
import torchtitan.components.quantization.float8 as float8
float8.has_cuda_capability = lambda *args: True  # its GPU check, lifted (CPU)
from torchtitan.config import ConfigManager
from torchtitan.distributed import ParallelDims
from torchtitan.protocols.model_converter import build_model_converters
from torchtitan.protocols.train_spec import get_train_spec
dense, experts = sys.argv[1:3]
config = ConfigManager().parse_args(["--job.config_file", dense])
tp = config.parallelism.tensor_parallel_degree
dims = ParallelDims(dp_replicate=1, dp_shard=-1, cp=1, tp=tp, pp=1, ep=1, etp=1, world_size=4 * tp)
spec = get_train_spec("llama3")
args = spec.model_args["8B"]
args.update_from_config(config)
with torch.device("meta"):
    model = spec.model_cls(args)
converters = build_model_converters(config, dims)
converters.convert(model)
linear = sorted(fqn for fqn, module in model.named_modules() if type(module).__name__ == "Float8Linear")
all_gather = [m.config.enable_fsdp_float8_all_gather for m in model.modules() if hasattr(m, "config")]
moe = ConfigManager().parse_args(["--job.config_file", experts])
try:
    float8.Float8GroupedMMConverter(moe, dims).convert(torch.nn.Module())
    grouped = "converted"
except ImportError as error:
    grouped = f"{error} ({error.__cause__})"
print(json.dumps({
    "linear": linear,
    "all_gather": sorted(set(all_gather)),
    "training": [config.training.local_batch_size, config.training.seq_len],
    "compile": [config.compile.enable, config.compile.components],
    "grouped": grouped,
}))
"""


def _grouped_experts_advice(advice, group="layers.0.moe.experts"):
    """`advice` with one grouped expert group (torchtitan 0.2's name) advised to convert."""
    expert = ExpertAdvice(
        group=group,
        form="grouped",
        members=tuple(f"{group}.{w}" for w in ("w1", "w2", "w3")),
        n_experts=8,
        top_k=2,
        M_per_expert=1024.0,
        convert=True,
        reason="test",
        recipe="rowwise",
        predicted_speedup=1.3,
        bf16_time_s=1.0,
        float8_time_s=1.0 / 1.3,
        provenance="modelled",
    )
    return replace(advice, experts=(expert,))


def test_torchtitan_toml_is_what_torchtitan_0_2_2_trains(tmp_path):
    """A 0.2-named Llama 3 8B (a model file, not the registry): tensorwise with --float8-all-gather, batch 2,
    seq 4096, TP 2. torchtitan 0.2.2 reads the file, converts exactly the advised layers with float8
    all-gather, at the advised point with the model compiled; its expert converter fails with the installed
    torchao (0.18) as the expert note says."""
    from _torchtitan02 import torchtitan_0_2_site

    site, why = torchtitan_0_2_site()
    if site is None:
        pytest.skip(why)
    advice = advise(llama_layers(32), modelled_choice(), "tensorwise", device_capability=None)
    request = SuggestRequest("llama02.py", 2, 4096, recipe="tensorwise", tensor_parallel=2)
    request = replace(request, float8_all_gather=True)
    dense = tmp_path / "dense.toml"
    dense.write_text(render(advice, "torchtitan-toml", request))
    data = tomllib.loads(dense.read_text())
    float8 = data["quantize"]["linear"]["float8"]
    assert "model" in data["compile"]["components"]  # set, not left to a merged TOML (a recipe may say loss)
    assert "recipe_name" not in float8 and float8["enable_fsdp_float8_all_gather"] is True
    experts = tmp_path / "experts.toml"
    experts_text = render(
        _grouped_experts_advice(advice), "torchtitan-toml", replace(request, float8_all_gather=False)
    )
    experts.write_text(experts_text)
    note = " ".join(line.lstrip("# ") for line in experts_text.splitlines() if line.startswith("#"))
    assert "needs torchao 0.12 to 0.16" in note

    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", TORCHTITAN_0_2_SCRIPT, str(dense), str(experts)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result["linear"]) == set(advice.convert_fqns)
    assert result["all_gather"] == [True]
    assert result["training"] == [2, 4096]
    assert result["compile"][0] is True and "model" in result["compile"][1]
    assert "MoETrainingConfig" in result["grouped"]  # torchao 0.18 has none: the note's torchao range


def test_torchtitan_toml_expert_converter_warns_on_stderr():
    advice = _grouped_experts_advice(
        advise(llama_layers(2), modelled_choice(), "rowwise", device_capability=None)
    )
    warnings = expert_warnings(advice, ConfigFormat.TORCHTITAN_TOML)
    assert any("needs torchao 0.12 to 0.16" in warning for warning in warnings)
    assert not any(
        "torchao 0.12" in warning for warning in expert_warnings(advice, ConfigFormat.TORCHTITAN_PY)
    )


# ---------------------------------------------------------------------------------- megatron, nothing in fp8


def test_a_megatron_file_with_nothing_in_float8_never_turns_fp8_on():
    """Issue 26, point 6b: "train without --fp8-format" and then fp8='hybrid' for NeMo 2 contradicted."""
    layers = [layer(f"layers.{i}.{name}", K, N) for i in range(2) for name, (K, N) in LLAMA_BLOCK.items()]
    model = ModelLayers("llama_like.py", 1, 8192, (*layers, layer("output", 4096, 128256)))
    advice = advise(
        model,
        StubChoice(),
        "tensorwise",
        predictor=StubPredictor(rule=lambda M, K, N: 0.9),
        device_capability=None,
        compare_torchao_auto=False,
    )
    assert advice.convert_fqns == ()
    request = SuggestRequest("llama_like.py", 1, 8192, recipe="tensorwise", profile="stub-profile")
    text = render(advice, "megatron", request)
    words = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
    assert "train without --fp8-format" in words
    assert "fp8='hybrid'" not in words and "fp8: true" not in words and "--fp8-format hybrid" not in words
    assert "fp8 unset (None)" in words and "fp8: false" in words
