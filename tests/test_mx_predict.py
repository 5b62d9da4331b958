"""MXFP8 in the predictions (issue 30): the recipes and the GPUs that run them, the byte counts of torchao
0.18's MXFP8 Linear, the K / N multiples of 32 in the decisions, the Blackwell step constants."""

from __future__ import annotations

import sys
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
    import json

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
