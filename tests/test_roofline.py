"""The roofline model: hand-computed GEMM and cast times, torchao's per-recipe cast kernels, GPU lookup."""

from __future__ import annotations

import pytest

from fp8advisor import roofline
from fp8advisor.errors import ProfileError
from fp8advisor.roofline import (
    GPU_SPECS,
    cast_kernel_bytes,
    cast_overhead_s,
    gemm_time_s,
    gpu_family,
    linear_fwd_bwd_time_s,
    linear_gemm_time_s,
    roofline_speedup,
)

H100_BF16 = 989e12 * 0.78  # achievable FLOP/s
H100_FP8 = 1979e12 * 0.78
H100_BW = 2.4e12 * 0.92  # achievable B/s


@pytest.mark.parametrize(
    ("shape", "dtype", "expected_s"),
    [
        # compute bound: 2*M*K*N / (peak * 0.78)
        ((8192, 8192, 8192), "bf16", 2 * 8192**3 / H100_BF16),
        ((8192, 8192, 8192), "fp8", 2 * 8192**3 / H100_FP8),
        # memory bound: (M*K + K*N) * b + 2*M*N bytes over 0.92 of 2.4 TB/s
        ((2**20, 16, 16), "bf16", ((2**20 * 16 + 16 * 16) * 2 + 2 * 2**20 * 16) / H100_BW),
        ((2**20, 16, 16), "fp8", ((2**20 * 16 + 16 * 16) * 1 + 2 * 2**20 * 16) / H100_BW),
        # below both: the 2 us kernel floor
        ((16, 16, 16), "bf16", 2e-6),
        ((16, 16, 16), "fp8", 2e-6),
    ],
)
def test_gemm_time_hand_computed(shape, dtype, expected_s):
    assert gemm_time_s(*shape, dtype, "H100") == pytest.approx(expected_s, rel=1e-12)


def test_gemm_time_rejects_unknown_dtype():
    with pytest.raises(ValueError, match="bf16"):
        gemm_time_s(16, 16, 16, "fp16", "H100")


def test_linear_is_three_gemms_and_gw_hp_keeps_grad_weight_in_bf16():
    M, K, N = 4096, 8192, 1024
    output, grad_input = gemm_time_s(M, K, N, "fp8", "H100"), gemm_time_s(M, N, K, "fp8", "H100")
    assert linear_gemm_time_s(M, K, N, "rowwise", "H100") == output + grad_input + gemm_time_s(
        K, M, N, "fp8", "H100"
    )
    assert linear_gemm_time_s(M, K, N, "rowwise_with_gw_hp", "H100") == (
        output + grad_input + gemm_time_s(K, M, N, "bf16", "H100")
    )
    bf16 = gemm_time_s(M, K, N, "bf16", "H100") + gemm_time_s(M, N, K, "bf16", "H100")
    assert linear_fwd_bwd_time_s(M, K, N, "bf16", "H100") == bf16 + gemm_time_s(K, M, N, "bf16", "H100")


n = 1000  # element count used in the table below
# FACTS.md section 2, from torchao's get_tensor_memory_traffic_ovhd_s
CAST_KERNELS = [
    ("tensorwise", "input", True, [0, 0, 4 * n]),
    ("tensorwise", "input", False, [2 * n, 0, 4 * n]),
    ("tensorwise", "grad_output", True, [0, 0, 4 * n]),
    ("tensorwise", "weight", False, [2 * n, 0, 3 * n, 3 * n]),
    ("rowwise", "input", True, [3 * n, 3 * n]),
    ("rowwise", "input", False, [5 * n, 3 * n]),
    ("rowwise", "grad_output", True, [3 * n, 3 * n]),
    ("rowwise", "weight", False, [3 * n, 4 * n, 3 * n]),
    ("rowwise_with_gw_hp", "input", True, [n]),
    ("rowwise_with_gw_hp", "input", False, [3 * n]),
    ("rowwise_with_gw_hp", "grad_output", True, [n]),
    ("rowwise_with_gw_hp", "weight", False, [3 * n, 0, 3 * n]),
]


@pytest.mark.parametrize(("recipe", "role", "fused", "expected"), CAST_KERNELS)
def test_cast_kernel_bytes_per_recipe(recipe, role, fused, expected):
    assert cast_kernel_bytes(role, n, recipe, fused=fused) == expected


@pytest.mark.parametrize(
    ("recipe", "kernels"),
    [
        ("tensorwise", 3 + 4 + 3),  # input, weight, grad_output
        ("rowwise", 2 + 3 + 2),
        ("rowwise_with_gw_hp", 1 + 3 + 1),
    ],
)
def test_every_cast_kernel_pays_the_floor_even_without_bytes(recipe, kernels):
    assert cast_overhead_s(16, 16, 16, recipe, "H100") == pytest.approx(kernels * 2e-6, rel=1e-12)


def test_cast_overhead_hand_computed_large_rowwise():
    M, K, N = 16384, 8192, 4096
    # fused: input [3, 3] x M*K, weight [3, 4, 3] x K*N, grad_output [3, 3] x M*N bytes, all above the floor
    expected = (6 * M * K + 10 * K * N + 6 * M * N) / H100_BW
    assert cast_overhead_s(M, K, N, "rowwise", "H100") == pytest.approx(expected, rel=1e-12)


def test_roofline_speedup_is_bf16_over_fp8_plus_casts():
    M, K, N = 8192, 4096, 14336
    bf16 = linear_gemm_time_s(M, K, N, "bf16", "H100")
    fp8 = linear_gemm_time_s(M, K, N, "tensorwise", "H100") + cast_overhead_s(M, K, N, "tensorwise", "H100")
    assert roofline_speedup(M, K, N, "tensorwise", "H100") == pytest.approx(bf16 / fp8, rel=1e-12)
    # large shapes approach the peak ratio 2 but never reach it (casts cost time)
    assert 1.5 < roofline_speedup(32768, 32768, 32768, "tensorwise", "H100") < 2.0
    # tiny shapes: every kernel at the floor, float8 loses
    assert roofline_speedup(16, 16, 16, "rowwise", "H100") == pytest.approx(3 / (3 + 7), rel=1e-12)


def _torchao_roofline_utils():
    """torchao's roofline_utils.py loaded on its own: importing the torchao package costs seconds."""
    import importlib.util
    from pathlib import Path

    package = importlib.util.find_spec("torchao")
    if package is None or not package.submodule_search_locations:
        pytest.skip("torchao is not installed")
    path = Path(package.submodule_search_locations[0]) / "testing" / "training" / "roofline_utils.py"
    spec = importlib.util.spec_from_file_location("_torchao_roofline_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_matches_torchao_roofline_utils():
    """Term for term the same as torchao's sympy model, on shapes across all regimes."""
    pytest.importorskip("sympy")
    torch = pytest.importorskip("torch")
    utils = _torchao_roofline_utils()
    for family, torchao_name in (
        ("H100", "NVIDIA H100"),
        ("B200", "NVIDIA B200"),
        ("B300", "NVIDIA B300 SXM6 AC"),
    ):
        for recipe in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
            for shape in ((16, 16, 16), (1024, 4096, 1024), (16384, 1024, 32768), (2**20, 16, 64)):
                # numbers in place of sympy symbols: the same formulas, evaluated at once
                overhead = utils.get_float8_mem_sympy(*shape, recipe, None, True, torchao_name)
                bf16 = utils.get_gemm_time_sympy(*shape, torch.bfloat16, None, None, torchao_name)
                fp8 = utils.get_gemm_time_sympy(*shape, torch.float8_e4m3fn, recipe, None, torchao_name)
                expected = float(bf16) / (float(fp8) + float(overhead))
                assert roofline_speedup(*shape, recipe, family) == pytest.approx(expected, rel=1e-12)


def test_h200_is_h100_compute_with_h200_bandwidth():
    h100, h200 = GPU_SPECS["H100"], GPU_SPECS["H200"]
    assert (h200.bf16_flops, h200.fp8_flops) == (h100.bf16_flops, h100.fp8_flops)
    assert h200.bandwidth_bytes_per_s == 4.8e12
    assert "not in torchao" in h200.note
    # more bandwidth: the memory-bound casts cost less, so float8 pays more at the same shape
    assert roofline_speedup(4096, 4096, 4096, "rowwise", "H200") > roofline_speedup(
        4096, 4096, 4096, "rowwise", "H100"
    )


@pytest.mark.parametrize(
    ("device_name", "family"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("NVIDIA GH200 480GB", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H200 NVL", "H200"),
        ("NVIDIA B200", "B200"),
        ("NVIDIA GB200", "GB200"),  # not B200: the longer prefix wins
        ("NVIDIA B300 SXM6 AC", "B300"),
        ("AMD Instinct MI300X", "MI300X"),
        ("H200", "H200"),  # a family name is its own family
        ("NVIDIA A100-SXM4-80GB", None),  # no FP8 tensor cores, no constants
        ("", None),
        (None, None),
    ],
)
def test_gpu_family(device_name, family):
    assert gpu_family(device_name) == family


def test_unknown_gpu_is_a_profile_error_with_hint():
    with pytest.raises(ProfileError) as error:
        roofline.get_specs("NVIDIA A100-SXM4-80GB")
    assert "known" in error.value.hint
