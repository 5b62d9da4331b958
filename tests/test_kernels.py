"""fp8advisor_kernels against torchao's reference casts: on the CPU under TRITON_INTERPRET=1, on a GPU
natively.

Triton decides at decoration time whether a `@triton.jit` function is interpreted, so the fixtures reload the
kernel modules with TRITON_INTERPRET set as they need it.
"""

from __future__ import annotations

import dataclasses
import importlib
import os

import pytest
import torch

# The kernels are Triton's: installed by the bench and test extras, absent from the light install.
pytest.importorskip("triton", reason="the kernel tests need triton: pip install 'fp8advisor[bench]'")

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


#: An SM count small enough that the tiny interpreted tensors get every structure the H100 launches have at
#: full size: several programs per scaled slice (chunks folded by atomic max), several slices per tile,
#: persistent amax programs walking several blocks, partial tiles at the edges.
SMALL_GPU_SMS = 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("sm_count", [SMALL_GPU_SMS, 132])
def test_tensorwise_matches_torchao_bit_for_bit(interpreted, dtype, sm_count):
    quantize, _ = interpreted
    x = sample(rows=96, columns=200, dtype=dtype)
    launch = quantize.tensorwise_launch(x.numel(), sm_count=sm_count, block=128)
    if sm_count == SMALL_GPU_SMS:
        assert launch.amax_programs < launch.cast_programs  # each amax program walks several blocks
    data, scale = quantize.quantize_tensorwise(x, launch=launch)
    reference_data, reference_scale = torchao_reference(x)
    assert torch.equal(scale, reference_scale.reshape(()))
    assert_same_bytes(data, reference_data)


def test_tensorwise_with_64_bit_offsets_is_bit_exact(interpreted):
    quantize, _ = interpreted
    x = sample()
    launch = quantize.TensorwiseLaunch(block=64, amax_programs=3, cast_programs=60, wide_index=True)
    data, scale = quantize.quantize_tensorwise(x, launch=launch)
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
    x = sample(rows=96, columns=200)
    reference_data, reference_scale = torchao_reference(
        x, axiswise_dim=dim, round_scales_to_power_of_2=round_scales_to_power_of_2
    )
    rows, length = (96, 200) if dim == -1 else (200, 96)
    launches = [
        # the choice for a small GPU: on these sizes, the structures H100 launches have at full size
        quantize.rowwise_launch(rows, length, contiguous_along=dim == -1, sm_count=SMALL_GPU_SMS),
        # several slices per tile and three chunks per slice, the last one partial
        quantize.rowwise_launch(
            rows, length, contiguous_along=dim == -1, block_rows=8, block_along=16, chunk_length=48
        ),
        # 64-bit offsets
        dataclasses.replace(
            quantize.rowwise_launch(rows, length, contiguous_along=dim == -1, sm_count=SMALL_GPU_SMS),
            wide_index=True,
        ),
    ]
    assert launches[0].chunks > 1 or launches[0].block_rows > 1
    for launch in launches:
        data, scale = quantize.quantize_rowwise(
            x, dim=dim, round_scales_to_power_of_2=round_scales_to_power_of_2, launch=launch
        )
        assert scale.shape == reference_scale.shape and torch.equal(scale, reference_scale), launch
        assert_same_bytes(data, reference_data)


# --- launch configurations (what an H100 gets at full size) ------------------------------------------------

H100_SMS = 132
#: The default grid's sizes: every tensor a cast of the sweep sees is (rows, columns) from these.
DEFAULT_SIZES = (1024, 4096, 8192, 32768)


@pytest.mark.parametrize("rows", DEFAULT_SIZES)
@pytest.mark.parametrize("columns", DEFAULT_SIZES)
@pytest.mark.parametrize("dim", [-1, 0])
def test_rowwise_launch_fills_an_h100_at_every_default_size(rows, columns, dim):
    # Before: one program per 16 rows (per-row scales) or per 64 columns (per-column scales), so 1024
    # columns made 16 programs for 132 SMs.
    from fp8advisor_kernels.quantize import TARGET_PROGRAMS_PER_SM, rowwise_launch

    slices, length = (rows, columns) if dim == -1 else (columns, rows)
    launch = rowwise_launch(slices, length, contiguous_along=dim == -1, sm_count=H100_SMS)
    assert launch.programs >= H100_SMS
    assert launch.programs >= min(TARGET_PROGRAMS_PER_SM * H100_SMS, slices * length // 4096)
    assert launch.chunk_length % launch.block_along == 0
    assert launch.chunks * launch.chunk_length >= length > (launch.chunks - 1) * launch.chunk_length
    assert launch.row_blocks * launch.block_rows >= slices
    # 16 x 1024 tiles spilled registers at 4 warps on sm_90 (255 registers, 544 bytes of stack)
    assert launch.block_rows * launch.block_along <= 4096
    if dim == 0:
        assert launch.block_rows == 64  # 64 adjacent bf16 columns: 128-byte loads


@pytest.mark.parametrize(
    ("numel", "wide"),
    [
        (32768 * 32768, False),  # 2**30 elements: int32 offsets suffice
        (65536 * 32768, True),  # 2**31: the first element past int32
        (2**31 - 2**19, True),  # the persistent amax loop's counter runs one stride (528 x 1024) past the end
        (2**31 - 2**20, False),
    ],
)
def test_offsets_go_64_bit_where_a_counter_would_pass_int32(numel, wide):
    from fp8advisor_kernels.quantize import rowwise_launch, tensorwise_launch

    assert tensorwise_launch(numel, sm_count=H100_SMS).wide_index is wide
    rows = numel // 32768
    assert rowwise_launch(rows, 32768, contiguous_along=True).wide_index is (rows * 32768 >= 2**31)


def test_tensorwise_amax_is_a_few_hundred_atomics_not_a_million():
    from fp8advisor_kernels.quantize import TARGET_PROGRAMS_PER_SM, tensorwise_launch

    launch = tensorwise_launch(32768 * 32768, sm_count=H100_SMS)
    assert launch.amax_programs == TARGET_PROGRAMS_PER_SM * H100_SMS  # one atomic per program
    assert launch.cast_programs == 32768 * 32768 // 1024


def test_recipe_casts_follow_torchaos_cast_configs():
    """Each recipe's casts, read off torchao's own Float8LinearConfig: the granularity of every operand of
    the GEMMs that run in float8."""
    from torchao.float8 import Float8LinearConfig
    from torchao.float8.config import ScalingGranularity, ScalingType

    from fp8advisor_kernels.timing import RECIPE_CASTS

    def cast_of(tensor, cast_config, axiswise_dim):
        if cast_config.scaling_type is ScalingType.DISABLED:
            return None
        if cast_config.scaling_granularity is ScalingGranularity.TENSORWISE:
            return (tensor, None)
        return (tensor, axiswise_dim)

    for recipe, casts in RECIPE_CASTS.items():
        config = Float8LinearConfig.from_recipe_name(recipe)
        # output = input @ weight.t(); grad_input = grad_output @ weight; grad_weight = grad_output.t() @ x
        wanted = {
            cast_of("input", config.cast_config_input, -1),
            cast_of("weight", config.cast_config_weight, -1),
            cast_of("grad_output", config.cast_config_grad_output, -1),
            cast_of("weight", config.cast_config_weight_for_grad_input or config.cast_config_weight, 0),
            cast_of(
                "grad_output",
                config.cast_config_grad_output_for_grad_weight or config.cast_config_grad_output,
                0,
            ),
            cast_of("input", config.cast_config_input_for_grad_weight or config.cast_config_input, 0),
        } - {None}
        assert set(casts) == wanted, recipe


def test_every_bf16_value_in_range_encodes_like_torch(interpreted):
    """All finite bf16 values within +-448 with a scale of exactly 1: the e4m3 encoder, rounding to nearest
    even at every tie and every carry into the exponent."""
    quantize, _ = interpreted
    values = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    values = values[values.isfinite() & (values.abs() <= 448)]
    x = torch.cat([values, torch.tensor([448.0])])  # amax 448 -> scale 1
    data, scale = quantize.quantize_tensorwise(x, launch=quantize.tensorwise_launch(x.numel(), block=4096))
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
