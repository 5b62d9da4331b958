"""Triton kernels of torchao's dynamic float8 quantization: amax, scale, saturated cast to e4m3.

- tensorwise: one amax over the whole tensor, scale = 448 / max(amax, 1e-12) (computed in float64 like
  `torchao.float8.float8_utils.amax_to_scale`), data = saturate(x * scale) as float8_e4m3fn.
- rowwise (axiswise): one amax and scale per row along `dim`, optionally rounded down to a power of two
  (torchao's rowwise recipes set `round_scales_to_power_of_2=True`).

They reproduce torchao's numerics bit for bit (tested against `tensor_to_scale` / `to_fp8_saturated` under
`TRITON_INTERPRET=1`), so that `bench` can time the casts a recipe adds on their own.

Why a software cast: the Triton interpreter converts float32 to float8e4nv without carrying mantissa overflow
into the exponent (31.75 becomes 16) and rounds ties away from zero, so under the interpreter the kernels
encode e4m3 by integer arithmetic (round to nearest even, saturating), which is exactly what the GPU's
`cvt.rn.satfinite` does. On a GPU the hardware conversion is used (`software_cast=False`); both paths are
checked against torchao on a GPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

E4M3_MAX = 448.0
#: torchao.float8.float8_utils.EPS: the smallest amax a scale is computed from.
AMAX_EPS = 1e-12


def interpreting() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1 when this module was
    imported)."""
    try:
        from triton import knobs  # triton >= 3.4
    except ImportError:
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    return bool(knobs.runtime.interpret)


@triton.jit
def _e4m3_bits(y):
    """float32 (already clamped to +-448) -> float8_e4m3fn bits, round to nearest even, as uint8."""
    sign = (y.to(tl.uint32, bitcast=True) >> 31).to(tl.int32)
    magnitude = tl.abs(y)
    exponent = (magnitude.to(tl.int32, bitcast=True) >> 23) - 127  # floor(log2) for normal float32
    exponent = tl.maximum(exponent, -6)  # below 2**-6 e4m3 is subnormal: a fixed step of 2**-9
    step = ((exponent - 3 + 127) << 23).to(tl.float32, bitcast=True)  # 3 mantissa bits: step = 2**(e - 3)
    # magnitude / step <= 16 and is exact (step is a power of two); adding and subtracting 2**23 rounds it to
    # an integer with the IEEE default, ties to even.
    rounded = ((magnitude / step + 8388608.0) - 8388608.0) * step
    rounded_bits = rounded.to(tl.int32, bitcast=True)
    normal_code = ((((rounded_bits >> 23) - 127) + 7) << 3) | ((rounded_bits >> 20) & 7)
    subnormal_code = (rounded * 512.0).to(tl.int32)
    code = tl.where(rounded >= 0.015625, normal_code, subnormal_code)
    code = tl.where(y != y, 0x7F, code)  # NaN stays NaN
    return (code | (sign << 7)).to(tl.uint8)


@triton.jit
def _maximum(a, b):
    return tl.maximum(a, b)


@triton.jit
def _abs_max(x, axis: tl.constexpr):
    # tl.reduce with our own combine function rather than tl.max: tl.max (like tl.zeros) is a @triton.jit
    # function of triton's standard library, which the interpreter cannot run when triton.language was
    # imported before TRITON_INTERPRET was set (as it is once torch.compile has run in the process). Only
    # builtins and our own @triton.jit functions are used here, so the kernels run in any test order.
    return tl.reduce(tl.abs(x), axis, _maximum)


@triton.jit
def _scale_cast_store(x, scale, out_ptr, offsets, mask, SOFTWARE_CAST: tl.constexpr):
    scaled = tl.clamp(x.to(tl.float32) * scale, -448.0, 448.0)
    if SOFTWARE_CAST:
        bits = _e4m3_bits(scaled)
    else:
        bits = scaled.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    tl.store(out_ptr + offsets, bits, mask=mask)


@triton.jit
def _amax_to_scale(amax, ROUND_POW2: tl.constexpr):
    # float64 like torchao's amax_to_scale, so that compile and eager (and we) agree on every bit.
    scale = (448.0 / tl.maximum(amax.to(tl.float64), 1e-12)).to(tl.float32)
    if ROUND_POW2:
        # exp2(floor(log2(scale))) for a positive normal float32: keep the exponent, clear the mantissa.
        scale = (scale.to(tl.int32, bitcast=True) & 0x7F800000).to(tl.float32, bitcast=True)
    return scale


#: Programs per streaming multiprocessor a cast launch aims for: several waves, so that the tail of the last
#: wave is short and every SM stays busy (one program per SM would leave SMs idle behind a slow one).
TARGET_PROGRAMS_PER_SM = 4
#: An H100's SM count: the launch a GPU would get, used where no GPU is present (the interpreter).
DEFAULT_SM_COUNT = 132
#: Element offsets at or past this need 64-bit arithmetic (Triton computes offsets in int32 otherwise).
INT32_OFFSET_LIMIT = 2**31
#: The largest tile of a rowwise cast at 4 warps: 16 x 1024 tiles spilled registers (255 registers and
#: 544-640 bytes of stack on sm_90, 3160 with 64-bit offsets), 4 x 1024 use about 120 and none.
MAX_TILE_ELEMENTS = 4096


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _power_of_two_at_most(value: int) -> int:
    return 1 << (max(1, value).bit_length() - 1)


def _power_of_two_at_least(value: int) -> int:
    return 1 << (max(1, value) - 1).bit_length()


def sm_count_of(device: torch.device | str) -> int:
    """The device's streaming multiprocessors, or `DEFAULT_SM_COUNT` off the GPU."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return DEFAULT_SM_COUNT


@dataclass(frozen=True)
class TensorwiseLaunch:
    """How `quantize_tensorwise` covers a tensor: a persistent amax reduction of `amax_programs` programs (one
    atomic each, not one per block), then a cast of `cast_programs` blocks."""

    block: int
    amax_programs: int
    cast_programs: int
    wide_index: bool


def tensorwise_launch(numel: int, *, sm_count: int = DEFAULT_SM_COUNT, block: int = 1024) -> TensorwiseLaunch:
    blocks = max(1, _cdiv(numel, block))
    amax_programs = min(blocks, TARGET_PROGRAMS_PER_SM * sm_count)
    return TensorwiseLaunch(
        block=block,
        amax_programs=amax_programs,
        cast_programs=blocks,
        # the amax loop's counter runs one stride (amax_programs * block) past the end
        wide_index=numel + amax_programs * block >= INT32_OFFSET_LIMIT,
    )


@dataclass(frozen=True)
class RowwiseLaunch:
    """How `quantize_rowwise` covers a tensor: a 2-D grid of `row_blocks` x `chunks` programs, each a tile of
    `block_rows` scaled slices ("rows") by `chunk_length` elements along them. A row split over several
    chunks gets its amax by atomic max of the chunks' partial amaxes."""

    block_rows: int
    block_along: int
    chunk_length: int  # a multiple of block_along
    row_blocks: int
    chunks: int
    wide_index: bool

    @property
    def grid(self) -> tuple[int, int]:
        return (self.row_blocks, self.chunks)

    @property
    def programs(self) -> int:
        return self.row_blocks * self.chunks


def rowwise_launch(
    rows: int,
    length: int,
    *,
    contiguous_along: bool,
    sm_count: int = DEFAULT_SM_COUNT,
    block_rows: int | None = None,
    block_along: int | None = None,
    chunk_length: int | None = None,
) -> RowwiseLaunch:
    """The launch for `rows` slices of `length` elements each, at least `TARGET_PROGRAMS_PER_SM * sm_count`
    programs where the tensor has that many tiles.

    `contiguous_along`: each slice is contiguous (per-row scales of a row-major tensor), so tiles are long
    along it; otherwise neighbouring slices are adjacent in memory (per-column scales) and a tile spans 64 of
    them (128 bytes of bf16 per memory row). Slices are split into chunks when there are too few of them to
    fill the GPU (1024 columns of 64 make only 16 tiles across). Explicit sizes override the choice.
    """
    target = TARGET_PROGRAMS_PER_SM * sm_count
    if contiguous_along:
        chosen_along = min(1024, max(16, _power_of_two_at_least(length)))
        chosen_rows = min(MAX_TILE_ELEMENTS // chosen_along, _power_of_two_at_most(rows // target))
    else:
        chosen_along = 32
        chosen_rows = min(64, max(16, _power_of_two_at_least(rows)))
    block_rows = block_rows or chosen_rows
    block_along = block_along or chosen_along
    row_blocks = _cdiv(rows, block_rows)
    if chunk_length is None:
        steps = max(1, _cdiv(length, block_along))
        wanted_chunks = min(steps, max(1, _cdiv(target, row_blocks)))
        chunk_length = (steps // wanted_chunks) * block_along  # rounded down: at least wanted_chunks
    elif chunk_length % block_along:
        raise ValueError(f"chunk_length {chunk_length} is not a multiple of block_along {block_along}")
    return RowwiseLaunch(
        block_rows=block_rows,
        block_along=block_along,
        chunk_length=chunk_length,
        row_blocks=row_blocks,
        chunks=max(1, _cdiv(length, chunk_length)),
        wide_index=rows * length >= INT32_OFFSET_LIMIT,
    )


@triton.jit
def _tensor_amax_kernel(x_ptr, amax_ptr, numel, BLOCK: tl.constexpr, WIDE_INDEX: tl.constexpr):
    """A persistent reduction: each program walks every `num_programs`-th block, then one atomic max."""
    pid = tl.program_id(0)
    if WIDE_INDEX:
        pid = pid.to(tl.int64)
    amax = tl.full([BLOCK], 0.0, tl.float32)
    for start in range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offsets, mask=offsets < numel, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    tl.atomic_max(amax_ptr, _abs_max(amax, 0))


@triton.jit
def _tensor_cast_kernel(
    x_ptr,
    amax_ptr,
    out_ptr,
    scale_ptr,
    numel,
    BLOCK: tl.constexpr,
    ROUND_POW2: tl.constexpr,
    SOFTWARE_CAST: tl.constexpr,
    WIDE_INDEX: tl.constexpr,
):
    pid = tl.program_id(0)
    scale = _amax_to_scale(tl.load(amax_ptr), ROUND_POW2)
    if pid == 0:
        tl.store(scale_ptr, scale)
    if WIDE_INDEX:
        pid = pid.to(tl.int64)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    _scale_cast_store(x, scale, out_ptr, offsets, mask, SOFTWARE_CAST)


@triton.jit
def _tile_rows(BLOCK_ROWS: tl.constexpr, WIDE_INDEX: tl.constexpr):
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    if WIDE_INDEX:
        row = row.to(tl.int64)
    return row


@triton.jit
def _tile(
    row,
    row_mask,
    start,
    length,
    stride_row,
    stride_along,
    BLOCK_ALONG: tl.constexpr,
    WIDE_INDEX: tl.constexpr,
):
    """Offsets and mask of the tile of `row` x [start, start + BLOCK_ALONG)."""
    along = start + tl.arange(0, BLOCK_ALONG)
    if WIDE_INDEX:
        along = along.to(tl.int64)
    mask = row_mask[:, None] & (along[None, :] < length)
    return row[:, None] * stride_row + along[None, :] * stride_along, mask


@triton.jit
def _rowwise_amax_kernel(
    x_ptr,
    amax_ptr,
    rows,
    length,
    stride_row,
    stride_along,
    chunk_length,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_ALONG: tl.constexpr,
    WIDE_INDEX: tl.constexpr,
):
    """Program (i, j): the amax of rows i*BLOCK_ROWS.. over chunk j, folded into `amax_ptr` by atomic max."""
    row = _tile_rows(BLOCK_ROWS, WIDE_INDEX)
    row_mask = row < rows
    chunk_start = tl.program_id(1) * chunk_length
    amax = tl.full([BLOCK_ROWS, BLOCK_ALONG], 0.0, tl.float32)
    for start in range(chunk_start, chunk_start + chunk_length, BLOCK_ALONG):
        offsets, mask = _tile(row, row_mask, start, length, stride_row, stride_along, BLOCK_ALONG, WIDE_INDEX)
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, tl.abs(x))
    tl.atomic_max(amax_ptr + row, _abs_max(amax, 1), mask=row_mask)


@triton.jit
def _rowwise_cast_kernel(
    x_ptr,
    amax_ptr,
    out_ptr,
    scale_ptr,
    rows,
    length,
    stride_row,
    stride_along,
    chunk_length,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_ALONG: tl.constexpr,
    ROUND_POW2: tl.constexpr,
    SOFTWARE_CAST: tl.constexpr,
    WIDE_INDEX: tl.constexpr,
):
    """Program (i, j): scale and cast rows i*BLOCK_ROWS.. over chunk j; chunk 0 also stores the scales."""
    row = _tile_rows(BLOCK_ROWS, WIDE_INDEX)
    row_mask = row < rows
    scale = _amax_to_scale(tl.load(amax_ptr + row, mask=row_mask, other=0.0), ROUND_POW2)
    chunk = tl.program_id(1)
    if chunk == 0:
        tl.store(scale_ptr + row, scale, mask=row_mask)
    chunk_start = chunk * chunk_length
    for start in range(chunk_start, chunk_start + chunk_length, BLOCK_ALONG):
        offsets, mask = _tile(row, row_mask, start, length, stride_row, stride_along, BLOCK_ALONG, WIDE_INDEX)
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        _scale_cast_store(x, scale[:, None], out_ptr, offsets, mask, SOFTWARE_CAST)


def _software_cast(software_cast: bool | None) -> bool:
    return interpreting() if software_cast is None else software_cast


def quantize_tensorwise(
    x: torch.Tensor,
    *,
    round_scales_to_power_of_2: bool = False,
    software_cast: bool | None = None,
    sm_count: int | None = None,
    launch: TensorwiseLaunch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(float8_e4m3fn data shaped like `x`, float32 scale of shape ()) with one scale for the whole tensor.

    Same numerics as torchao: `scale = tensor_to_scale(x, e4m3)`, `data = to_fp8_saturated(x.float() *
    scale)`. Three launches: zeroing the amax, the persistent amax reduction, the scale + cast.
    `launch` (default: `tensorwise_launch` for the device's SM count) sets the grid.
    """
    x = x.contiguous()
    numel = x.numel()
    launch = launch or tensorwise_launch(numel, sm_count=sm_count or sm_count_of(x.device))
    amax = torch.zeros((), dtype=torch.float32, device=x.device)
    scale = torch.empty((), dtype=torch.float32, device=x.device)
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    _tensor_amax_kernel[(launch.amax_programs,)](
        x, amax, numel, BLOCK=launch.block, WIDE_INDEX=launch.wide_index
    )
    _tensor_cast_kernel[(launch.cast_programs,)](
        x,
        amax,
        out.view(torch.uint8),
        scale,
        numel,
        BLOCK=launch.block,
        ROUND_POW2=round_scales_to_power_of_2,
        SOFTWARE_CAST=_software_cast(software_cast),
        WIDE_INDEX=launch.wide_index,
    )
    return out, scale


def quantize_rowwise(
    x: torch.Tensor,
    *,
    dim: int = -1,
    round_scales_to_power_of_2: bool = True,
    software_cast: bool | None = None,
    sm_count: int | None = None,
    launch: RowwiseLaunch | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(float8_e4m3fn data, float32 scales) of a 2-D `x` with one scale per slice along `dim`.

    `dim=-1` scales each row (scale shape (rows, 1)); `dim=0` each column (scale shape (1, columns)): the
    shapes of torchao's `tensor_to_scale(x, e4m3, scaling_granularity=AXISWISE, axiswise_dim=dim)`. torchao's
    rowwise recipes round scales down to a power of two; pass `round_scales_to_power_of_2=False` for plain
    axiswise. Three launches: zeroing the amaxes, the amax tiles, the scale + cast tiles; `launch` (default:
    `rowwise_launch` for the device's SM count) sets the tiles and grid.
    """
    if x.dim() != 2:
        raise ValueError(f"quantize_rowwise takes a 2-D tensor, got shape {tuple(x.shape)}")
    dim = dim % 2
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    if x.stride() != out.stride():
        x = x.contiguous()
    if dim == 1:  # amax along columns: one scale per row
        rows, length, stride_row, stride_along = x.shape[0], x.shape[1], x.stride(0), x.stride(1)
        scale = torch.empty((x.shape[0], 1), dtype=torch.float32, device=x.device)
    else:  # amax along rows: one scale per column
        rows, length, stride_row, stride_along = x.shape[1], x.shape[0], x.stride(1), x.stride(0)
        scale = torch.empty((1, x.shape[1]), dtype=torch.float32, device=x.device)
    launch = launch or rowwise_launch(
        rows, length, contiguous_along=stride_along == 1, sm_count=sm_count or sm_count_of(x.device)
    )
    amax = torch.zeros(rows, dtype=torch.float32, device=x.device)
    geometry = (rows, length, stride_row, stride_along, launch.chunk_length)
    tiles = {"BLOCK_ROWS": launch.block_rows, "BLOCK_ALONG": launch.block_along}
    _rowwise_amax_kernel[launch.grid](x, amax, *geometry, **tiles, WIDE_INDEX=launch.wide_index)
    _rowwise_cast_kernel[launch.grid](
        x,
        amax,
        out.view(torch.uint8),
        scale,
        *geometry,
        **tiles,
        ROUND_POW2=round_scales_to_power_of_2,
        SOFTWARE_CAST=_software_cast(software_cast),
        WIDE_INDEX=launch.wide_index,
    )
    return out, scale


__all__ = [
    "E4M3_MAX",
    "RowwiseLaunch",
    "TensorwiseLaunch",
    "interpreting",
    "quantize_rowwise",
    "quantize_tensorwise",
    "rowwise_launch",
    "sm_count_of",
    "tensorwise_launch",
]
