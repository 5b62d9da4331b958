"""MXFP8 in every config format (issue 30, "Configs"): what each format writes for an MX recipe, read back by
`verify` and by the framework's own loader where it is installed, and the formats that refuse it.

- torchtitan-py: torchtitan 0.3's `MXFP8LinearConverter.Config(fqns=[...])` inclusion list, the goal file of
  `torchtitan:llama3/8B --gpu B200 --recipe mxfp8` run by torchtitan's own recipe function and converters on
  the meta device (only `has_cuda_capability` of torchtitan's mx module is patched: it refuses below SM100);
  the MoE grouped converter with pad_multiple 32.
- torchao: `quantize_(model, MXFP8TrainingOpConfig.from_recipe(...), filter_fn=...)` for both MX recipes, read
  back, converted by torchao itself, run emulated on the CPU: the converted layers' outputs are torchao's own
  `_to_mxfp8_then_scaled_mm` with EMULATED kernels, and only MX noise away from bf16.
- megatron: `--fp8-recipe mxfp8`, `fp8_quantization_recipe: mxfp8` with `fp8_format: e4m3`, read back by
  Megatron-Core's own matcher.
- refused (exit 2, one message): torchtitan-toml, nemo-automodel, accelerate, filter;
  mxfp8_rceil_wgrad_with_hp for torchtitan-py and megatron.
- K or N not a multiple of 32 is never advised, written or run as MX; `layers.1` never selects `layers.10`.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import layer, prefix_conflict_layers  # noqa: E402
from _verify_helpers import predictor  # noqa: E402

from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.cli import app  # noqa: E402
from fp8advisor.emit.config_file import render  # noqa: E402
from fp8advisor.errors import ConfigError  # noqa: E402
from fp8advisor.frameworks.filters import included_by_fqns  # noqa: E402
from fp8advisor.frameworks.reader import read_config  # noqa: E402
from fp8advisor.frameworks.shortest_filter import shortest_inclusion_filter  # noqa: E402
from fp8advisor.inspect.layers import inspect_model  # noqa: E402
from fp8advisor.request import SuggestRequest  # noqa: E402
from fp8advisor.verification.verifier import verify  # noqa: E402

runner = CliRunner()

LLAMA3_8B = "torchtitan:llama3/8B"

#: Eleven blocks; only block 1 is wide enough to convert (the stub `predictor`: 2x from K x N >= 64 x 256).
#: Its `odd` (N = 272 = 17 x 16) is wide enough too, and float8 converts it, but 272 is no multiple of 32.
MX_MODEL = """
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, wide):
        super().__init__()
        width = 256 if wide else 64
        self.up = nn.Linear(64, width, bias=False)
        self.down = nn.Linear(width, 64, bias=False)
        self.odd = nn.Linear(64, 272 if wide else 16, bias=False)

    def forward(self, x):
        return x + self.down(F.silu(self.up(x))) + self.odd(x).mean(-1, keepdim=True)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        self.layers = nn.ModuleList([Block(i == 1) for i in range(11)])
        self.head = nn.Linear(64, 100, bias=False)

    def forward(self, tokens):
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(h)


def build_model():
    return Net()
"""
MX_ADVISED = ("layers.1.down", "layers.1.up")
SEQ = 64


@pytest.fixture(scope="module")
def mx_target(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("mx") / "mxnet.py"
    path.write_text(MX_MODEL)
    return f"{path}:build_model"


def mx_advice(target: str, recipe: str):
    layers = inspect_model(target, batch=1, seq=SEQ)
    return advise(
        layers, "test", recipe, 1.0, predictor=predictor, device_capability=None, compare_torchao_auto=False
    )


def write(advice, fmt: str, target: str, path: Path, recipe: str) -> Path:
    path.write_text(render(advice, fmt, SuggestRequest(target, 1, SEQ, recipe=recipe)))
    return path


def verified(target: str, path: Path, recipe: str):
    return verify(SuggestRequest(target, 1, SEQ, recipe=recipe), path, predictor=predictor)


# --------------------------------------------------------------------------------------- the inclusion list


def test_the_inclusion_list_never_lets_layers_1_select_layers_10():
    layers = [layer(f"layers.{i}.{name}", 4096, 4096) for i in range(12) for name in ("wq", "ff.w1")]
    layers.append(layer("output", 4096, 128256))
    advised = {fqn.fqn for fqn in layers if fqn.fqn.startswith("layers.1.")}
    assert len(included_by_fqns(layers, ["layers.1"])) == 6  # the naive substring: layers.1, .10 and .11
    found = shortest_inclusion_filter(layers, advised)
    assert found.entries == ("layers.1.",) and found.exact
    assert included_by_fqns(layers, found.entries) == advised


def test_the_inclusion_list_is_never_empty_and_leaves_out_what_mx_cannot_run():
    layers = [layer(f"layers.{i}.{name}", 4096, 4096) for i in range(3) for name in ("wq", "wo")]
    layers.append(layer("layers.0.odd", 4096, 4112))  # 4112 % 32 == 16: no MXFP8, and nothing checks it
    everything = {one.fqn for one in layers if one.fqn != "layers.0.odd"}
    found = shortest_inclusion_filter(layers, everything)
    assert found.entries and included_by_fqns(layers, found.entries) == everything
    with pytest.raises(ValueError, match="multiple of 32"):
        shortest_inclusion_filter(layers, everything | {"layers.0.odd"})


def test_an_advised_layer_inside_another_name_stays_bf16_and_says_so():
    found = shortest_inclusion_filter(prefix_conflict_layers().layers, {"blocks.0.ff", "blocks.0.proj"})
    assert found.entries == ("blocks.0.proj",) and found.demoted == {"blocks.0.ff"}
    assert "'blocks.0.ff' (advised) is a substring of 'blocks.0.ff2'" in found.conflicts[0].describe()


# ------------------------------------------------------------------------------- torchtitan 0.3, the goal


def suggest(tmp_path: Path, target: str, fmt: str, *options: str) -> tuple[Path, dict]:
    path = tmp_path / ("advised.py" if fmt != "megatron" else "advised.yaml")
    result = runner.invoke(
        app, ["suggest", target, "--gpu", "B200", *options, "--format", fmt, "-o", str(path), "--json"]
    )
    assert result.exit_code == 0, result.output
    return path, json.loads(result.stdout)


def torchtitan_mx_linears(path: Path, monkeypatch) -> tuple[set[str], set[str]]:
    """What torchtitan 0.3 trains in MXFP8 with the file: its recipe function run (the generated file
    imported), its model config built on meta as the Trainer builds it: (MXFP8Linear FQNs, MXFP8 grouped
    experts FQNs). torchtitan's mx module refuses below SM100: that one check answers True."""
    import torchtitan.components.quantization.mx as mx
    from torchtitan.models.common.moe import GroupedExperts

    monkeypatch.setattr(mx, "has_cuda_capability", lambda *args: True)
    spec = importlib.util.spec_from_file_location(f"advised_{path.parent.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.float8_advised()
    model_config = config.model_spec.model
    model_config.update_from_config(config=config)
    with torch.device("meta"):
        model = model_config.build()
    modules = dict(model.named_modules())
    linear = {fqn for fqn, one in modules.items() if isinstance(one, mx.MXFP8Linear)}
    grouped = {
        fqn
        for fqn, one in modules.items()
        if isinstance(one, GroupedExperts) and type(one).__name__.startswith("MXFP8")
    }
    return linear, grouped


@pytest.mark.parametrize("options", [(), ("--min-speedup", "1.6")], ids=["default", "mixed"])
def test_goal_torchtitan_converts_exactly_the_advised_set(tmp_path, monkeypatch, options):
    pytest.importorskip("torchtitan.components.quantization.mx")
    path, advice = suggest(tmp_path, LLAMA3_8B, "torchtitan-py", "--recipe", "mxfp8", *options)
    text = path.read_text()
    assert "MXFP8LinearConverter.Config(" in text and "Float8" not in text.split('"""')[-1]
    assert advice["recipe"] == "mxfp8_rceil"
    advised = set(advice["convert_fqns"])
    # fp8advisor reads it back, and runs torchtitan's converters on it (lifting the SM100 check itself)
    result = runner.invoke(app, ["verify", LLAMA3_8B, "--config", str(path)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "torchtitan 0.3.0's own conversion ran" in out
    # an inclusion list: never worded as float8's filter_fqns, which keeps what it names in bf16
    assert "keeps in bf16" not in out and "filter_fqns (" not in out
    assert re.search(r"fqns \(\d+ entr(y|ies)\) converts to MXFP8 every nn.Linear whose FQN contains", out)
    linear, grouped = torchtitan_mx_linears(path, monkeypatch)  # torchtitan's own recipe function
    assert linear == advised and not grouped
    if options:  # a strict subset: the list names it exactly, never an empty list
        assert 0 < len(advised) < 161 and "fqns=[\n" in text


def test_suggest_shows_the_inclusion_list_the_mx_file_holds_and_checks_it(tmp_path):
    path, advice = suggest(tmp_path, LLAMA3_8B, "torchtitan-py", "--recipe", "mxfp8", "--min-speedup", "1.6")
    shown = runner.invoke(
        app, ["suggest", LLAMA3_8B, "--gpu", "B200", "--recipe", "mxfp8", "--min-speedup", "1.6"]
    )
    out = " ".join(shown.stdout.split())
    entries = read_config(path).filter_fqns
    assert (
        "fqns (torchtitan 0.3 MXFP8LinearConverter) converts every Linear whose FQN contains an entry: "
        in out
    )
    assert json.dumps(list(entries)) in out and "filter_fqns (torchtitan, NeMo AutoModel)" not in out
    assert f"converts exactly the {len(advice['convert_fqns'])} advised layers" in out
    check = path.read_text().split("# check in CI: fp8advisor ")[1].split(" --check")[0].split()
    checked = runner.invoke(app, [*check, "--check", str(path)])  # --check regenerates it
    assert checked.exit_code == 0, checked.output
    # the inclusion list's own simulation, not the float8 exclusion list's
    words = " ".join(checked.output.split())
    assert (
        f"(torchtitan-py, fqns simulated: converts exactly the {len(advice['convert_fqns'])} advised" in words
    )
    assert "substring rule" not in words
    # --current reads it as torchtitan's MX converter, not as torchao's float8 conversion
    no_format = [word for word in check if word not in ("--format", "torchtitan-py")]
    current = runner.invoke(app, [*no_format, "--current", str(path)])
    assert current.exit_code == 0, current.output
    assert "read as: torchtitan 0.3's MXFP8LinearConverter" in " ".join(current.stdout.split())


def test_a_moe_file_converts_every_expert_group_with_mx_padding(tmp_path, monkeypatch):
    pytest.importorskip("torchtitan.components.quantization.mx")
    target = "torchtitan:deepseek_v3/16B"
    path, advice = suggest(tmp_path, target, "torchtitan-py", "--recipe", "mxfp8", "--min-speedup", "0.5")
    assert all(group["convert"] for group in advice["experts"])
    text = path.read_text()
    assert 'recipe_name="mxfp8_rceil",\n                pad_multiple=128,' in text
    linear, grouped = torchtitan_mx_linears(path, monkeypatch)
    assert linear == set(advice["convert_fqns"])
    assert len(grouped) == 26 and "layers.1.moe.routed_experts.inner_experts" in grouped
    # verify reads the same file back: every group converted, nothing differs
    result = runner.invoke(app, ["verify", target, "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    experts = json.loads(result.stdout)["experts"]
    assert len(experts) == 26 and all(group["converted"] and group["advised"] for group in experts)


# ----------------------------------------------------------------- a model with K or N not a multiple of 32


def test_mx_never_advises_a_layer_whose_k_or_n_is_no_multiple_of_32(mx_target):
    rowwise = mx_advice(mx_target, "rowwise")
    assert "layers.1.odd" in rowwise.convert_fqns  # float8 runs N = 272
    advice = mx_advice(mx_target, "mxfp8_rceil")
    assert advice.convert_fqns == MX_ADVISED
    assert "not divisible by 32" in next(one.reason for one in advice.layers if one.fqn == "layers.1.odd")


def test_torchtitan_py_mx_file_is_read_back_and_verified(mx_target, tmp_path):
    advice = mx_advice(mx_target, "mxfp8_rceil")
    path = write(advice, "torchtitan-py", mx_target, tmp_path / "titan.py", "mxfp8_rceil")
    text = path.read_text()
    assert '"layers.1.down",\n' in text and '"layers.1.up",\n' in text and "layers.1.odd" not in text
    config = read_config(path)
    assert config.recipe.value == "mxfp8_rceil" and config.filter_fqns == MX_ADVISED
    report = verified(mx_target, path, "mxfp8_rceil")
    assert report.exit_code == 0, report.differences
    assert {check.fqn for check in report.layers if check.converted} == set(MX_ADVISED)
    assert all(check.float8_gemms == 3 for check in report.layers if check.converted)  # fwd, dgrad, wgrad
    # a layer the list gains by hand, which MXFP8 cannot run: two differences, never a crash
    path.write_text(text.replace('"layers.1.up",\n', '"layers.1.up",\n"layers.1.odd",\n'))
    edited = verified(mx_target, path, "mxfp8_rceil")
    assert edited.exit_code == 1
    assert {(d.kind.value, d.subject) for d in edited.differences} == {
        ("converted against the advice", "layers.1.odd"),
        ("float8 missing where converted", "layers.1.odd"),
    }
    assert any("not a multiple of 32" in note for note in edited.notes)


@pytest.mark.parametrize("recipe", ["mxfp8_rceil", "mxfp8_rceil_wgrad_with_hp"])
def test_torchao_mx_file_runs_torchaos_own_mx_where_advised(mx_target, tmp_path, recipe):
    advice = mx_advice(mx_target, recipe)
    path = write(advice, "torchao", mx_target, tmp_path / "ao.py", recipe)
    text = path.read_text()
    member = "MXFP8_RCEIL_WGRAD_WITH_HP" if recipe.endswith("hp") else "MXFP8_RCEIL)"
    assert f"MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.{member}" in text
    assert read_config(path).recipe.value == recipe
    report = verified(mx_target, path, recipe)
    assert report.exit_code == 0, report.differences
    assert report.framework.startswith("torchao 0.18") and "the same 2 Linear layer(s)" in report.framework
    converted = {check.fqn: check for check in report.layers if check.converted}
    assert set(converted) == set(MX_ADVISED)
    # mxfp8_rceil_wgrad_with_hp: the weight gradient's GEMM stays bf16
    hp = 1 if recipe.endswith("hp") else 0
    assert all((c.float8_gemms, c.high_precision_gemms) == (3 - hp, hp) for c in converted.values())
    assert all(25 < c.sqnr_output_db < 40 and 25 < c.sqnr_grad_input_db < 40 for c in converted.values())


def test_torchao_mx_file_for_a_moe_model_pads_its_expert_groups_and_verifies(tmp_path):
    """A torchao MX file for data/models/moe.py: the quantize_ filter names the grouped experts, whose token
    groups torchao pads to the MX block (from_recipe leaves the padding off), and verify passes."""
    target = str(Path(__file__).parents[1] / "data" / "models" / "moe.py")
    path, advice = suggest(tmp_path, target, "torchao", "--batch", "4", "--recipe", "mxfp8")
    assert [group["convert"] for group in advice["experts"]] == [True, True]
    text = path.read_text()
    assert "return fqn in MXFP8_LAYERS or fqn in MXFP8_EXPERTS" in text
    assert '"layers.0.moe.experts",\n' in text.split("MXFP8_EXPERTS = ")[1]
    assert "    pad_token_groups_for_grouped_mm=True,\n" in text
    result = runner.invoke(app, ["verify", target, "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["passed"] and [group["converted"] for group in report["experts"]] == [True, True]


def test_the_converted_layer_computes_torchaos_emulated_mx_reference(mx_target, tmp_path):
    """verify's conversion is torchao's own: the layer's weight is its MXFP8 training tensor with the
    recipe's settings, and its output is `_to_mxfp8_then_scaled_mm` with EMULATED kernels, bit for bit."""
    from torchao.prototype.moe_training.mxfp8_linear import _to_mxfp8_then_scaled_mm
    from torchao.prototype.moe_training.tensor import MXFP8TrainingWeightWrapperTensor
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.quantization.quantize_.common.kernel_preference import KernelPreference

    from fp8advisor.verification.conversion import convert

    advice = mx_advice(mx_target, "mxfp8_rceil_wgrad_with_hp")
    config = read_config(write(advice, "torchao", mx_target, tmp_path / "ao.py", advice.recipe.value))
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("layers", torch.nn.Module())
    model.layers.add_module("1", torch.nn.Module())
    block = getattr(model.layers, "1")
    block.up = torch.nn.Linear(64, 256, bias=False, dtype=torch.bfloat16)
    block.odd = torch.nn.Linear(64, 256, bias=False, dtype=torch.bfloat16)
    assert convert(model, config, config.recipe, emulate=True) == {"layers.1.up"}
    weight = block.up.weight
    assert isinstance(weight.data, MXFP8TrainingWeightWrapperTensor) and weight.data.config.wgrad_with_hp
    x = torch.randn(32, 64, dtype=torch.bfloat16)
    reference = _to_mxfp8_then_scaled_mm(
        x, weight.data.detach().clone(), KernelPreference.EMULATED, ScaleCalculationMode.RCEIL, True
    )
    assert torch.equal(block.up(x).detach(), reference)
    assert not torch.equal(reference, x @ weight.detach().clone().T)  # MX, not bf16


# ---------------------------------------------------------------------------------------------- megatron


def test_megatron_mx_file_is_read_by_megatrons_own_matcher(tmp_path):
    pytest.importorskip("megatron.core")
    path, advice = suggest(tmp_path, LLAMA3_8B, "megatron", "--recipe", "mxfp8", "--min-speedup", "1.6")
    text = path.read_text()
    assert "--fp8-format e4m3 --fp8-recipe mxfp8 --te-precision-config-file <this file>" in text
    training = yaml.safe_load(text)["configs"]["float8_mxfp8_rceil"]["training_recipe"]
    assert training == {"fp8_quantization_recipe": "mxfp8", "fp8_format": "e4m3"}
    result = runner.invoke(app, ["verify", LLAMA3_8B, "--config", str(path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["recipe"] == "mxfp8_rceil" and report["framework"].startswith("Megatron-Core 0.16")
    path.write_text(text.replace("fp8_format: e4m3", "fp8_format: hybrid"))  # e5m2 gradients: not the advice
    result = runner.invoke(app, ["verify", LLAMA3_8B, "--config", str(path), "--json"])
    assert result.exit_code == 1
    (difference,) = json.loads(result.stdout)["differences"]
    assert difference["kind"] == "setting differs" and "e4m3" in difference["detail"]
    # TE's tensorwise where the header says mxfp8: the recipe differs
    path.write_text(text.replace("fp8_quantization_recipe: mxfp8", "fp8_quantization_recipe: tensorwise"))
    result = runner.invoke(app, ["verify", LLAMA3_8B, "--config", str(path), "--json"])
    assert result.exit_code == 1
    (difference,) = json.loads(result.stdout)["differences"]
    assert difference["kind"] == "recipe differs" and "'tensorwise'" in difference["detail"]


def test_the_megatron_mx_file_says_mxfp8_and_current_prices_it_as_mxfp8(tmp_path):
    path, advice = suggest(tmp_path, LLAMA3_8B, "megatron", "--recipe", "mxfp8", "--min-speedup", "1.6")
    header = " ".join(line.lstrip("# ") for line in path.read_text().splitlines() if line.startswith("#"))
    assert "64 of the 128 Transformer Engine linear modules in MXFP8:" in header
    assert "the advice converts lm_head to MXFP8: that is lost" in header and "in float8" not in header
    result = runner.invoke(
        app,
        ["suggest", LLAMA3_8B, "--gpu", "B200", "--recipe", "mxfp8", "--min-speedup", "1.6"]
        + ["--current", str(path), "--json"],
    )
    assert result.exit_code == 0, result.output
    current = json.loads(result.stdout)["current"]
    assert (
        current["recipe"] == "mxfp8_rceil"
        and current["recipe_from"] == "the file (Transformer Engine's mxfp8)"
    )
    assert not any("tensorwise" in note for note in current["notes"])
    shown = runner.invoke(
        app,
        ["suggest", LLAMA3_8B, "--gpu", "B200", "--recipe", "mxfp8", "--min-speedup", "1.6"]
        + ["--current", str(path)],
    )
    out = " ".join(shown.stdout.split())
    assert "(mxfp8_rceil, from the file (Transformer Engine's mxfp8))" in out
    assert "Transformer Engine's tensorwise" not in out and "tensorwise figures" not in out


# ---------------------------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "fmt, recipe, words",
    [
        ("torchtitan-toml", "mxfp8", "MXLinearConfig"),
        ("nemo-automodel", "mxfp8", "torchao float8 only"),
        ("accelerate", "mxfp8", "no MXFP8 recipe"),
        ("filter", "mxfp8", "exclusion list"),
        ("torchtitan-py", "mxfp8_rceil_wgrad_with_hp", "--format torchao"),
        ("megatron", "mxfp8_rceil_wgrad_with_hp", "--format torchao"),
    ],
)
def test_a_format_that_cannot_write_mx_refuses_with_one_message(mx_target, fmt, recipe, words):
    result = runner.invoke(app, ["suggest", mx_target, "--gpu", "B200", "--recipe", recipe, "--format", fmt])
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert output.count("error:") == 1 and f"--format {fmt} cannot write" in output and words in output
    if recipe == "mxfp8":
        assert "torchtitan-py (torchtitan 0.3), torchao or megatron" in output


def test_mx_refusals_name_what_can_write_mx(mx_target):
    """torchao for a torchtitan model, in MX words; megatron for a model it cannot name, without accelerate
    (which has no MXFP8 recipe)."""
    result = runner.invoke(
        app, ["suggest", LLAMA3_8B, "--gpu", "B200", "--recipe", "mxfp8", "--format", "torchao"]
    )
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert "cannot convert torchtitan:llama3/8B to MXFP8" in output and "quantize_" in output
    assert "MXFP8LinearConverter" in output and "Float8" not in output
    result = runner.invoke(
        app, ["suggest", mx_target, "--gpu", "B200", "--recipe", "mxfp8", "--format", "megatron"]
    )
    assert result.exit_code == 2, result.output
    output = " ".join(result.output.split())
    assert "--format megatron cannot name" in output and "use --format torchao for this model" in output
    assert "accelerate" not in output


def test_torchtitan_py_files_mixing_float8_and_mx_or_another_mx_recipe_are_refused(tmp_path):
    head = "from torchtitan.components.quantization import {}\n\n\ndef recipe():\n    return [\n"
    mixed = tmp_path / "mixed.py"
    mixed.write_text(
        head.format("Float8LinearConverter, MXFP8LinearConverter")
        + '        MXFP8LinearConverter.Config(fqns=["wq"]),\n'
        + '        Float8LinearConverter.Config(recipe_name="rowwise"),\n    ]\n'
    )
    with pytest.raises(ConfigError, match="both torchtitan's MX converters and Float8LinearConverter"):
        read_config(mixed)
    grouped = tmp_path / "grouped.py"
    grouped.write_text(
        head.format("MXFP8GroupedExpertsConverter")
        + '        MXFP8GroupedExpertsConverter.Config(recipe_name="mxfp8_rceil", pad_multiple=16),\n    ]\n'
    )
    with pytest.raises(ConfigError, match="padded to a multiple of 128"):
        read_config(grouped)
