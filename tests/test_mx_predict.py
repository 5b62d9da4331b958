"""MXFP8 in the predictions (issue 30): the recipes and the GPUs that run them, the byte counts of torchao
0.18's MXFP8 Linear, the K / N multiples of 32 in the decisions, the Blackwell step constants."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _advice_helpers import StubChoice, StubPredictor, layer  # noqa: E402

from fp8advisor.advice.decide import advise  # noqa: E402
from fp8advisor.inspect.records import ModelLayers  # noqa: E402
from fp8advisor.predict import mx_roofline  # noqa: E402
from fp8advisor.predict.roofline import cast_overhead_s, gemm_time_s, linear_gemm_time_s  # noqa: E402
from fp8advisor.recipes import (  # noqa: E402
    FLOAT8_RECIPES,
    MX_RECIPES,
    Recipe,
    dims_supported,
    parse_recipe,
    recipes_for_compute_capability,
)


def test_mxfp8_is_torchaos_default_mx_recipe_and_runs_on_blackwell_only():
    assert parse_recipe("mxfp8") is Recipe.MXFP8_RCEIL and Recipe("mxfp8") is Recipe.MXFP8_RCEIL
    assert str(Recipe.MXFP8_RCEIL) == "mxfp8_rceil"  # torchao's MXFP8TrainingRecipe value
    assert [r.is_mx for r in Recipe] == [False, False, False, True, True]
    assert Recipe.MXFP8_RCEIL_WGRAD_WITH_HP.grad_weight_in_bf16 and not Recipe.MXFP8_RCEIL.grad_weight_in_bf16
    assert recipes_for_compute_capability((9, 0)) == FLOAT8_RECIPES  # Hopper: no block-scaled GEMMs
    assert recipes_for_compute_capability((10, 0)) == FLOAT8_RECIPES + MX_RECIPES
    assert recipes_for_compute_capability((10, 3)) == FLOAT8_RECIPES + MX_RECIPES  # B300
    assert recipes_for_compute_capability((8, 0)) == ()  # A100: no FP8 tensor cores


@pytest.mark.parametrize(
    "K, N, float8, mx",
    [
        (4096, 14336, True, True),
        (48, 64, True, False),
        (64, 80, True, False),
        (64, 96, True, True),
        (40, 64, False, False),
    ],
)
def test_mx_needs_k_and_n_multiples_of_the_32_element_block(K, N, float8, mx):
    assert dims_supported("rowwise", K, N) is float8
    assert dims_supported("mxfp8", K, N) is mx


def test_the_mx_linear_kernels_byte_for_byte():
    """Hand arithmetic for M=256, K=64, N=96 (bf16 2 bytes, e4m3 1, one E8M0 scale byte per 32 elements;
    the blocked layout pads rows to 128 and scale columns to 4)."""
    kernels = dict(mx_roofline.linear_kernel_bytes(256, 64, 96, "mxfp8_rceil"))
    # casts: read bf16 (2) + write e4m3 (1) per element, plus rows x columns / 32 scales
    assert kernels["output: cast X dim0"] == 256 * 64 * 3 + 256 * 2  # 49,664
    assert kernels["output: cast W dim0"] == 96 * 64 * 3 + 96 * 2  # 18,624
    assert kernels["grad_input: cast G dim0"] == 256 * 96 * 3 + 256 * 3  # 74,496
    assert kernels["grad_input: cast W dim1"] == 64 * 96 * 3 + 64 * 3  # W^T: 64 rows, blocks along N
    assert kernels["grad_weight: cast G dim1"] == 96 * 256 * 3 + 96 * 8  # G^T: 96 rows, blocks along M
    assert kernels["grad_weight: cast X dim1"] == 64 * 256 * 3 + 64 * 8
    # rearrangements: read the scales, write them padded to (128 rows, 4 scale columns) tiles
    assert kernels["output: scales of X dim0 to the blocked layout"] == 256 * 2 + 256 * 4
    assert kernels["output: scales of W dim0 to the blocked layout"] == 96 * 2 + 128 * 4
    assert kernels["grad_input: scales of G dim0 to the blocked layout"] == 256 * 3 + 256 * 4
    assert kernels["grad_input: scales of W dim1 to the blocked layout"] == 64 * 3 + 128 * 4
    assert kernels["grad_weight: scales of G dim1 to the blocked layout"] == 96 * 8 + 128 * 8
    assert kernels["grad_weight: scales of X dim1 to the blocked layout"] == 64 * 8 + 128 * 8
    assert len(kernels) == 12
    with_hp = dict(mx_roofline.linear_kernel_bytes(256, 64, 96, "mxfp8_rceil_wgrad_with_hp"))
    assert sorted(with_hp) == sorted(k for k in kernels if not k.startswith("grad_weight"))
    with pytest.raises(ValueError):
        mx_roofline.linear_kernel_bytes(256, 64, 96, "rowwise")


def test_the_mx_casts_cost_every_kernel_at_least_the_floor_and_never_fuse():
    """A tiny Linear: twelve kernels at the 2 us floor; fused or not, the same (torchao's own kernels)."""
    assert cast_overhead_s(32, 32, 32, "mxfp8_rceil", "B200") == pytest.approx(12 * 2e-6)
    assert cast_overhead_s(32, 32, 32, "mxfp8_rceil_wgrad_with_hp", "B200") == pytest.approx(8 * 2e-6)
    big = (8192, 4096, 14336)
    assert cast_overhead_s(*big, "mxfp8_rceil", "B200", fused=True) == cast_overhead_s(
        *big, "mxfp8_rceil", "B200", fused=False
    )


def test_an_mx_gemm_runs_at_the_fp8_peak_and_reads_its_scales():
    compute_bound = (8192, 8192, 8192)
    assert gemm_time_s(*compute_bound, "mxfp8", "B200") == gemm_time_s(*compute_bound, "fp8", "B200")
    memory_bound = (16, 8192, 8192)  # bytes: (M*K + K*N) * (1 + 1/32) + M*N*2
    ratio = gemm_time_s(*memory_bound, "mxfp8", "B200") / gemm_time_s(*memory_bound, "fp8", "B200")
    M, K, N = memory_bound
    assert ratio == pytest.approx(((M * K + K * N) * 33 / 32 + 2 * M * N) / (M * K + K * N + 2 * M * N))
    # the weight-gradient GEMM in bf16 with wgrad_with_hp
    mx, hp = (linear_gemm_time_s(*compute_bound, r, "B200") for r in MX_RECIPES)
    assert hp - mx == pytest.approx(
        gemm_time_s(*compute_bound, "bf16", "B200") - gemm_time_s(*compute_bound, "fp8", "B200")
    )


def test_mx_advice_keeps_k_or_n_not_a_multiple_of_32_in_bf16():
    model = ModelLayers(
        "m.py", 1, 8192, (layer("a", 4096, 4096), layer("b", 4096, 4112), layer("c", 4112, 4096))
    )
    common = dict(predictor=StubPredictor(rule=lambda M, K, N: 1.5), device_capability=None)
    mx = advise(model, StubChoice(), "mxfp8", compare_torchao_auto=False, **common)
    float8 = advise(model, StubChoice(), "rowwise", compare_torchao_auto=False, **common)
    assert [(x.fqn, x.convert) for x in mx.layers] == [("a", True), ("b", False), ("c", False)]
    assert "not divisible by 32" in mx.layers[1].reason and "mxfp8_rceil" in mx.layers[1].reason
    assert all(x.convert for x in float8.layers)  # 4112 = 257 x 16


def test_mx_advice_for_a_hopper_gpu_is_refused_with_the_reason(cli):
    result = cli("suggest", "torchtitan:llama3/debugmodel", "--gpu", "H100", "--recipe", "mxfp8")
    assert result.exit_code == 2
    assert "compute capability 10.x" in result.output and "9.0" in result.output


def test_blackwell_profiles_cover_mx_and_hopper_ones_do_not():
    from fp8advisor.predict.fit import roofline_profile

    assert {"mxfp8_rceil", "mxfp8_rceil_wgrad_with_hp"} <= set(roofline_profile("B200", created="x").recipes)
    assert {"mxfp8_rceil", "mxfp8_rceil_wgrad_with_hp"} <= set(roofline_profile("GB200", created="x").recipes)
    assert not {"mxfp8_rceil"} & set(roofline_profile("H100", created="x").recipes)
    assert not {"mxfp8_rceil"} & set(roofline_profile("MI300X", created="x").recipes)


def test_gb200_and_b300_take_b200s_in_step_efficiency_not_h100s():
    from fp8advisor.advice.step_calibration import Calibration

    b200 = Calibration.load(family="B200")
    for family in ("GB200", "B300"):
        calibration = Calibration.load(family=family)
        assert calibration.in_step_efficiency == b200.in_step_efficiency
        assert calibration.fitted_to.startswith(f"B200's, no {family} anchor")
    assert (
        Calibration.load(family="H200").in_step_efficiency
        == Calibration.load(family="H100").in_step_efficiency
    )


@pytest.mark.parametrize("name", ["nvfp4", "NVFP4", "mxfp4_cutlass"])
def test_fp4_recipes_are_refused_with_their_own_message(cli, name):
    result = cli("suggest", "torchtitan:llama3/debugmodel", "--gpu", "B200", "--recipe", name)
    assert result.exit_code == 2
    assert f"does not advise {name}" in result.output and "unknown recipe" not in result.output


def test_mx_under_tensor_parallelism_is_priced_with_unfused_casts_and_says_so(cli):
    """MX casts are priced unfused already: bf16 TP collectives add no cast (float8 rowwise's do)."""
    from fp8advisor.advice.step import StepConfig
    from fp8advisor.advice.step_parallel import tp_cast_adjustment

    config = StepConfig(world_size=2, tp=2).for_recipe(Recipe.MXFP8_RCEIL)
    seconds, how = tp_cast_adjustment([], frozenset({"x"}), config, lambda num_bytes: num_bytes / 1e12)
    assert seconds == 0.0 and "unfused everywhere" in how
    result = cli(
        "suggest",
        "torchtitan:llama3/debugmodel",
        "--gpu",
        "B200",
        "--recipe",
        "mxfp8",
        "--tp",
        "2",
        "--world-size",
        "2",
        "--json",
    )
    assert result.exit_code == 0, result.output
    notes = json.loads(result.stdout)["step"]["notes"]
    assert any(note.startswith("MXFP8 + tensor parallelism") for note in notes)


def test_an_mx_linears_three_gemms_read_their_scales():
    """linear_gemm_time_s prices every MX GEMM as "mxfp8" (scales read), checked where memory binds."""
    M, K, N = 32, 8192, 8192
    expected = sum(gemm_time_s(*shape, "mxfp8", "B200") for shape in ((M, K, N), (M, N, K), (K, M, N)))
    assert linear_gemm_time_s(M, K, N, "mxfp8_rceil", "B200") == pytest.approx(expected, rel=1e-12)
    assert linear_gemm_time_s(M, K, N, "mxfp8_rceil", "B200") > linear_gemm_time_s(M, K, N, "rowwise", "B200")


@pytest.mark.parametrize("gpu", ["GB200", "B300"])
def test_gb200_and_b300_get_blackwells_profile_and_mx_advice(cli, gpu):
    result = cli("suggest", "torchtitan:llama3/8B", "--gpu", gpu, "--recipe", "mxfp8", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["recipe"] == "mxfp8_rceil" and document["profile"].startswith("b200-")
    assert document["filter_fqns"] is None and document["mx_fqns"]


def test_mx_grouped_experts_need_k_and_n_multiples_of_128_and_expert_linears_32():
    from fp8advisor.advice.experts import odd_gemms
    from fp8advisor.inspect.records import ExpertForm, ExpertGemm, ExpertGroup

    def group(form, N):
        gemms = (ExpertGemm("w1", 2048, N, ()), ExpertGemm("w2", N, 2048, ()))
        return ExpertGroup("layers.0.moe.experts", "X", form, 8, 2, "test", 4096, 8192, gemms)

    grouped, linears = group(ExpertForm.GROUPED, 1440), group(ExpertForm.LINEAR_LIST, 1440)  # 1440 = 45 x 32
    assert odd_gemms(grouped, 1, Recipe.MXFP8_RCEIL) == ["w1 2048x1440", "w2 1440x2048"]
    assert odd_gemms(linears, 1, Recipe.MXFP8_RCEIL) == []
    assert odd_gemms(grouped, 1, Recipe.ROWWISE) == []
    assert odd_gemms(group(ExpertForm.GROUPED, 1408), 1, Recipe.MXFP8_RCEIL) == []  # 11 x 128


def test_mx_grouped_gemms_run_each_token_group_padded_to_128_rows():
    from fp8advisor.predict.mx_grouped import padded_rows
    from fp8advisor.predict.roofline import grouped_fwd_bwd_time_s

    assert padded_rows([100, 0, 129, 256]) == [128, 0, 256, 256]
    mx = grouped_fwd_bwd_time_s([1000, 28], 8192, 8192, "mxfp8_rceil", "B200")
    assert mx == grouped_fwd_bwd_time_s([1024, 128], 8192, 8192, "mxfp8_rceil", "B200")
    bf16 = grouped_fwd_bwd_time_s([1000, 28], 8192, 8192, "bf16", "B200")
    assert bf16 < grouped_fwd_bwd_time_s([1024, 128], 8192, 8192, "bf16", "B200")  # bf16: no padding


def test_mx_keeps_layers_whose_token_count_is_not_a_multiple_of_32_in_bf16():
    """mxfp8_rceil's weight-gradient casts scale 32-token blocks; its wgrad_with_hp variant and float8 run."""
    model = ModelLayers("m.py", 1, 1008, (layer("a", 4096, 4096, 1008),))
    common = dict(predictor=StubPredictor(rule=lambda M, K, N: 1.5), device_capability=None)
    decided = {
        recipe: advise(model, StubChoice(), recipe, compare_torchao_auto=False, **common).layers[0]
        for recipe in ("mxfp8_rceil", "mxfp8_rceil_wgrad_with_hp", "rowwise")
    }
    assert (
        not decided["mxfp8_rceil"].convert
        and "M = 1008 tokens not divisible by 32" in decided["mxfp8_rceil"].reason
    )
    assert decided["mxfp8_rceil_wgrad_with_hp"].convert and decided["rowwise"].convert


def test_no_fqns_list_is_written_when_no_entry_can_name_an_advised_layer_alone(cli, tmp_path):
    """`blocks.N.ff` advised, `blocks.N.ff2` (N = 48: MXFP8 cannot run it) not: no entry names the first
    without the second, and an empty fqns would convert every Linear, so no MXFP8LinearConverter at all."""
    model = tmp_path / "conflict.py"
    model.write_text(
        textwrap.dedent(
            """
            import torch
            from torch import nn


            class Block(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.ff = nn.Linear(8192, 8192, bias=False)
                    self.ff2 = nn.Linear(8192, 48, bias=False)

                def forward(self, x):
                    return self.ff(x) + self.ff2(x).sum(-1, keepdim=True)


            class M(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.blocks = nn.ModuleList([Block() for _ in range(2)])

                def forward(self, x):
                    for block in self.blocks:
                        x = block(x)
                    return x


            def build_model():
                return M()


            def example_inputs(batch, seq):
                return (torch.randn(batch, seq, 8192),)
            """
        )
    )
    common = (str(model), "--gpu", "B200", "--recipe", "mxfp8")
    written = cli("suggest", *common, "--format", "torchtitan-py")
    assert written.exit_code == 0, written.output
    assert "MXFP8LinearConverter.Config" not in written.stdout and "fqns=[" not in written.stdout
    assert "no MXFP8LinearConverter written" in written.stdout
    document = json.loads(cli("suggest", *common, "--json").stdout)
    assert document["convert_fqns"] and document["mx_fqns"] == []
