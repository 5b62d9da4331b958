"""The roofline model: hand-computed GEMM and cast times, torchao's per-recipe cast kernels, GPU lookup."""

from __future__ import annotations

import pytest

from fp8advisor.errors import ProfileError
from fp8advisor.gpus import GPU_SPECS, GpuSpecs, get_specs, gpu_family
from fp8advisor.predict import roofline
from fp8advisor.predict.roofline import (
    cast_kernel_bytes,
    cast_overhead_s,
    gemm_time_s,
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
        get_specs("NVIDIA A100-SXM4-80GB")
    assert "known" in error.value.hint


# --- grouped GEMMs of routed experts ------------------------------------------------------------------------

#: Round constants for hand arithmetic: 10 GFLOP/s bf16, 20 GFLOP/s float8, 1 GB/s, efficiencies 1.
ROUND = GpuSpecs("ROUND", 1e10, 2e10, 1e9, 1.0, 1.0, kernel_floor_s=0.0)


def test_grouped_gemm_time_is_the_sum_of_each_experts_own_roofline():
    # two experts, 16 and 48 rows, K = 32, N = 64, bf16 (2 bytes in, 2 bytes out):
    # expert 1 (m = 16), each of its three GEMMs: 2*16*32*64 = 65536 FLOP / 1e10 = 6.5536e-6 s compute;
    #   output bytes (16*32 + 32*64)*2 + 16*64*2 = 7168, grad_input (16*64 + 64*32)*2 + 16*32*2 = 7168,
    #   grad_weight (32*16 + 16*64)*2 + 32*64*2 = 7168: 7.168e-6 s each, memory-bound
    # expert 2 (m = 48): 2*48*32*64 = 196608 FLOP / 1e10 = 1.96608e-5 s compute; bytes (48*32 + 2048)*2 +
    #   48*64*2 = 13312, (48*64 + 2048)*2 + 48*32*2 = 13312, (32*48 + 48*64)*2 + 4096 = 13312: 1.3312e-5 s,
    #   compute-bound
    per_grouped_gemm = 7.168e-6 + 1.96608e-5
    assert roofline.grouped_gemm_time_s([16, 48], 32, 64, "bf16", ROUND) == pytest.approx(
        3 * per_grouped_gemm
    )
    # not max(sum of compute, sum of memory) over the experts, which would hide expert 1's memory time
    pooled = max(6.5536e-6 + 1.96608e-5, 7.168e-6 + 1.3312e-5)
    assert 3 * pooled < 3 * per_grouped_gemm


def test_grouped_gemm_pays_the_kernel_floor_once_per_grouped_gemm():
    floored = GpuSpecs("F", 1e10, 2e10, 1e9, 1.0, 1.0, kernel_floor_s=1e-3)
    # every expert's part is microseconds: each of the three grouped GEMMs is one kernel at the 1 ms floor
    assert roofline.grouped_gemm_time_s([16, 48], 32, 64, "bf16", floored) == pytest.approx(3e-3)


def test_one_expert_is_a_linear_layer():
    for recipe in ("bf16", "rowwise"):
        assert roofline.grouped_gemm_time_s(
            [8192], 4096, 14336, "bf16" if recipe == "bf16" else "fp8", "H100"
        ) == pytest.approx(roofline.linear_gemm_time_s(8192, 4096, 14336, recipe, "H100"))


def test_an_expert_without_rows_only_writes_its_grad_weight():
    # expert 2 has no rows: no output or grad_input tiles; its grad_weight (32 x 64, bf16) is written: 4096 B
    with_empty = roofline.grouped_gemm_time_s([16, 0], 32, 64, "bf16", ROUND)
    alone = roofline.grouped_gemm_time_s([16], 32, 64, "bf16", ROUND)
    assert with_empty == pytest.approx(alone + 4096 / 1e9)


def test_grouped_cast_kernels_counted_from_torchaos_rowwise_grouped_path():
    # M_total = 64 token rows, K = 32, N = 64, E = 2: A = 64*32 = 2048, B = 2*32*64 = 4096, G = 64*64 = 4096
    # elements; bf16 read 2 B, float8 written 1 B, float32 scales 4 B
    kernels = roofline.grouped_cast_kernel_bytes(64, 32, 64, 2)
    assert [num_bytes for _, num_bytes in kernels] == [
        2048 * 3 + 64 * 4,  # A rowwise, one kernel over all tokens: 6400
        4096 * 3 + 2 * 64 * 4,  # B column-wise, E x N scales: 12800
        2 * 64 * 4,  # 1/A scales
        2 * 2 * 64 * 4,  # 1/B scales
        4096 * 3 + 64 * 4,  # G rowwise: 12544
        2 * 32 * 4,  # torch.full of B transposed's E x K scales
        4096 * 2 + 2 * 32 * 4,  # scales kernel reads B
        4096 * 3 + 2 * 32 * 4,  # cast kernel reads B again, writes float8
        2 * 64 * 4,  # 1/G scales
        2 * 2 * 32 * 4,  # 1/B transposed scales
        (4096 + 2048) * (2 + 2 + 1) + 2 * (64 + 32) * 4,  # per-group G and A: two reads, one write: 31488
        2 * 2 * 64 * 4,  # 1/G per-group scales
        2 * 2 * 32 * 4,  # 1/A per-group scales
    ]
    # the token rows are cast once per group of tokens, whatever E; the weight casts grow with E
    more_experts = roofline.grouped_cast_kernel_bytes(64, 32, 64, 4)
    assert more_experts[0] == kernels[0] and more_experts[4] == kernels[4]
    assert more_experts[1][1] == 2 * 4096 * 3 + 4 * 64 * 4
    # priced as torchao prices cast kernels: bytes at the bandwidth, at least the floor each
    floored = GpuSpecs("F", 1e10, 2e10, 1e9, 1.0, 1.0, kernel_floor_s=1e-5)
    above_floor = 12800 + 12544 + 12544 + 31488  # the four kernels moving more than 10 kB
    expected = 9 * 1e-5 + above_floor / 1e9
    assert roofline.grouped_cast_overhead_s(64, 32, 64, 2, floored) == pytest.approx(expected)


def test_grouped_float8_time_is_float8_gemms_plus_casts_and_rowwise_only():
    rows = [512.0] * 8
    expected = roofline.grouped_gemm_time_s(
        rows, 2048, 1408, "fp8", "H100"
    ) + roofline.grouped_cast_overhead_s(4096, 2048, 1408, 8, "H100")
    assert roofline.grouped_fwd_bwd_time_s(rows, 2048, 1408, "rowwise", "H100") == pytest.approx(expected)
    speedup = roofline.grouped_roofline_speedup(rows, 2048, 1408, "H100")
    assert speedup == pytest.approx(roofline.grouped_gemm_time_s(rows, 2048, 1408, "bf16", "H100") / expected)
    with pytest.raises(ValueError, match="rowwise only"):
        roofline.grouped_fwd_bwd_time_s(rows, 2048, 1408, "tensorwise", "H100")


def test_grouped_speedup_grows_with_rows_per_expert():
    # weight casts are fixed per step; more rows per expert amortise them
    small = roofline.grouped_roofline_speedup([256.0] * 64, 7168, 2048, "H100")
    large = roofline.grouped_roofline_speedup([16384.0] * 64, 7168, 2048, "H100")
    assert small < 1.0 < large


def test_routed_rows_busiest_expert_and_the_rest():
    rows = roofline.routed_rows(1024, 8, 2.0)
    # mean 128: the busiest 2 x 128 = 256, the other seven share 1024 - 256 = 768
    assert rows == (256.0,) + (768 / 7,) * 7
    assert sum(rows) == pytest.approx(1024)
    assert roofline.routed_rows(1024, 8) == (128.0,) * 8
    assert roofline.routed_rows(1024, 8, 8.0) == (1024.0,) + (0.0,) * 7
    for bad in (0.5, 9.0):
        with pytest.raises(ValueError):
            roofline.routed_rows(1024, 8, bad)
