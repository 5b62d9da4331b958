"""fp8advisor_kernels against torchao's reference casts: on the CPU under TRITON_INTERPRET=1, on a GPU
natively.

Triton decides at decoration time whether a `@triton.jit` function is interpreted, so the fixtures reload the
kernel modules with TRITON_INTERPRET set as they need it.
"""

from __future__ import annotations

import importlib
import os

import pytest
import torch

E4M3 = torch.float8_e4m3fn
HAS_FP8_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
gpu = pytest.mark.skipif(not HAS_FP8_GPU, reason="needs a CUDA GPU with FP8 tensor cores (sm >= 89)")


def reload_kernels():
    """(quantize, bandwidth) modules re-imported, so that their kernels follow TRITON_INTERPRET as it is
    now."""
    import fp8advisor_kernels.bandwidth
    import fp8advisor_kernels.quantize

    return importlib.reload(fp8advisor_kernels.quantize), importlib.reload(fp8advisor_kernels.bandwidth)


@pytest.fixture(scope="module")
def interpreted():
    """The kernels run by Triton's CPU interpreter. TRITON_INTERPRET stays set while they run (Triton checks
    it again at launch), and is put back afterwards with the modules reloaded as they were."""
    saved = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield reload_kernels()
    finally:
        if saved is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = saved
        reload_kernels()


@pytest.fixture
def native(monkeypatch):
    """The kernels compiled for the GPU."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    return reload_kernels()


def torchao_reference(x, *, axiswise_dim=None, round_scales_to_power_of_2=False):
    """(data, scale) as torchao computes them for training: tensor_to_scale, then to_fp8_saturated."""
    from torchao.float8.config import ScalingGranularity
    from torchao.float8.float8_utils import tensor_to_scale, to_fp8_saturated

    granularity = ScalingGranularity.TENSORWISE if axiswise_dim is None else ScalingGranularity.AXISWISE
    scale = tensor_to_scale(
        x,
        E4M3,
        scaling_granularity=granularity,
        axiswise_dim=axiswise_dim,
        round_scales_to_power_of_2=round_scales_to_power_of_2,
    )
    return to_fp8_saturated(x.to(torch.float32) * scale, E4M3), scale


def sample(rows=48, columns=80, dtype=torch.bfloat16, device="cpu"):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, columns, generator=generator) * torch.logspace(-3, 3, columns)  # wide dynamic range
    x[1] = 0.0  # an all-zero row: amax clamps to 1e-12
    x[2, :4] = torch.tensor([1e-30, -1e-30, 0.0, -0.0])  # subnormal and signed zeros
    return x.to(dtype).to(device)


def assert_same_bytes(data, reference):
    assert data.dtype == E4M3 and data.shape == reference.shape
    mismatch = (data.view(torch.uint8) != reference.view(torch.uint8)).sum().item()
    assert mismatch == 0, f"{mismatch} of {data.numel()} bytes differ from torchao"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_tensorwise_matches_torchao_bit_for_bit(interpreted, dtype):
    quantize, _ = interpreted
    x = sample(dtype=dtype)
    data, scale = quantize.quantize_tensorwise(x, block=512)
    reference_data, reference_scale = torchao_reference(x)
    assert torch.equal(scale, reference_scale.reshape(()))
    assert_same_bytes(data, reference_data)


def test_tensorwise_of_zeros_uses_the_epsilon_scale(interpreted):
    quantize, _ = interpreted
    data, scale = quantize.quantize_tensorwise(torch.zeros(4, 16, dtype=torch.bfloat16))
    assert scale.item() == pytest.approx(448.0 / 1e-12) and not data.view(torch.uint8).any()


@pytest.mark.parametrize(
    ("dim", "round_scales_to_power_of_2"),
    [
        (-1, True),  # torchao's rowwise recipes: per row, power-of-two scales
        (0, True),  # per column (the transposed operand of grad_weight)
        (-1, False),  # plain axiswise scaling
        (0, False),
    ],
)
def test_rowwise_matches_torchao_axiswise_bit_for_bit(interpreted, dim, round_scales_to_power_of_2):
    quantize, _ = interpreted
    x = sample()
    data, scale = quantize.quantize_rowwise(
        x, dim=dim, round_scales_to_power_of_2=round_scales_to_power_of_2, block_rows=8, block_along=32
    )
    reference_data, reference_scale = torchao_reference(
        x, axiswise_dim=dim, round_scales_to_power_of_2=round_scales_to_power_of_2
    )
    assert scale.shape == reference_scale.shape and torch.equal(scale, reference_scale)
    assert_same_bytes(data, reference_data)
    default_tiles, _ = quantize.quantize_rowwise(
        x, dim=dim, round_scales_to_power_of_2=round_scales_to_power_of_2
    )
    assert_same_bytes(default_tiles, reference_data)


def test_every_bf16_value_in_range_encodes_like_torch(interpreted):
    """All finite bf16 values within +-448 with a scale of exactly 1: the e4m3 encoder, rounding to nearest
    even at every tie and every carry into the exponent."""
    quantize, _ = interpreted
    values = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    values = values[values.isfinite() & (values.abs() <= 448)]
    x = torch.cat([values, torch.tensor([448.0])])  # amax 448 -> scale 1
    data, scale = quantize.quantize_tensorwise(x, block=4096)
    assert scale.item() == 1.0
    assert_same_bytes(data, x.to(E4M3))


def test_rowwise_refuses_other_ranks(interpreted):
    quantize, _ = interpreted
    with pytest.raises(ValueError, match="2-D"):
        quantize.quantize_rowwise(torch.zeros(2, 2, 2))


def test_bandwidth_probe_copies_exactly(interpreted):
    _, bandwidth = interpreted
    source = torch.randn(10_000)
    assert torch.equal(bandwidth.copy(source, block=1024), source)
    assert bandwidth.copy_bytes_moved(source) == 2 * 10_000 * 4


# --- GPU ----------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("software_cast", [False, True])
def test_gpu_casts_match_torchao(native, software_cast):
    quantize, _ = native
    x = sample(rows=1024, columns=4096, device="cuda")
    data, scale = quantize.quantize_tensorwise(x, software_cast=software_cast)
    reference_data, reference_scale = torchao_reference(x)
    assert torch.equal(scale, reference_scale.reshape(()))
    assert_same_bytes(data, reference_data)
    for dim in (-1, 0):
        data, scale = quantize.quantize_rowwise(x, dim=dim, software_cast=software_cast)
        reference_data, reference_scale = torchao_reference(
            x, axiswise_dim=dim, round_scales_to_power_of_2=True
        )
        assert torch.equal(scale, reference_scale)
        assert_same_bytes(data, reference_data)


@pytest.mark.gpu
@gpu
def test_gpu_ceilings_and_breakdown_are_positive(native):
    from fp8advisor_kernels import timing

    ceilings = timing.measure_ceilings()
    assert ceilings["bf16_flops"] > 1e12 and ceilings["fp8_flops"] > 1e12
    assert ceilings["bandwidth_bytes_per_s"] > 1e11
    bf16, float8 = timing.gemm_times(1024, 1024, 1024, "rowwise")
    assert bf16 > 0 and float8 > 0
    assert timing.cast_times(1024, 1024, 1024, "tensorwise") > 0
