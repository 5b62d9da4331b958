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


@triton.jit
def _tensor_amax_kernel(x_ptr, amax_ptr, numel, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    tl.atomic_max(amax_ptr, _abs_max(x, 0))


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
):
    pid = tl.program_id(0)
    scale = _amax_to_scale(tl.load(amax_ptr), ROUND_POW2)
    if pid == 0:
        tl.store(scale_ptr, scale)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < numel
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    _scale_cast_store(x, scale, out_ptr, offsets, mask, SOFTWARE_CAST)


@triton.jit
def _rowwise_kernel(
    x_ptr,
    out_ptr,
    scale_ptr,
    rows,
    length,
    stride_row,
    stride_along,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_ALONG: tl.constexpr,
    ROUND_POW2: tl.constexpr,
    SOFTWARE_CAST: tl.constexpr,
):
    """One program per BLOCK_ROWS rows: pass 1 finds each row's amax, pass 2 scales and casts the row."""
    row = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = row < rows
    amax = tl.full([BLOCK_ROWS], 0.0, tl.float32)
    for start in range(0, length, BLOCK_ALONG):
        along = start + tl.arange(0, BLOCK_ALONG)
        offsets = row[:, None] * stride_row + along[None, :] * stride_along
        mask = row_mask[:, None] & (along[None, :] < length)
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
        amax = tl.maximum(amax, _abs_max(x, 1))
    scale = _amax_to_scale(amax, ROUND_POW2)
    tl.store(scale_ptr + row, scale, mask=row_mask)
    for start in range(0, length, BLOCK_ALONG):
        along = start + tl.arange(0, BLOCK_ALONG)
        offsets = row[:, None] * stride_row + along[None, :] * stride_along
        mask = row_mask[:, None] & (along[None, :] < length)
        x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
        _scale_cast_store(x, scale[:, None], out_ptr, offsets, mask, SOFTWARE_CAST)


def _software_cast(software_cast: bool | None) -> bool:
    return interpreting() if software_cast is None else software_cast


def quantize_tensorwise(
    x: torch.Tensor,
    *,
    round_scales_to_power_of_2: bool = False,
    software_cast: bool | None = None,
    block: int = 1024,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(float8_e4m3fn data shaped like `x`, float32 scale of shape ()) with one scale for the whole tensor.

    Same numerics as torchao: `scale = tensor_to_scale(x, e4m3)`, `data = to_fp8_saturated(x.float() *
    scale)`. Two launches: an amax reduction (atomic max) and the scale + cast.
    """
    x = x.contiguous()
    numel = x.numel()
    amax = torch.zeros((), dtype=torch.float32, device=x.device)
    scale = torch.empty((), dtype=torch.float32, device=x.device)
    out = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    grid = (triton.cdiv(numel, block),)
    _tensor_amax_kernel[grid](x, amax, numel, BLOCK=block)
    _tensor_cast_kernel[grid](
        x,
        amax,
        out.view(torch.uint8),
        scale,
        numel,
        BLOCK=block,
        ROUND_POW2=round_scales_to_power_of_2,
        SOFTWARE_CAST=_software_cast(software_cast),
    )
    return out, scale


def quantize_rowwise(
    x: torch.Tensor,
    *,
    dim: int = -1,
    round_scales_to_power_of_2: bool = True,
    software_cast: bool | None = None,
    block_rows: int | None = None,
    block_along: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(float8_e4m3fn data, float32 scales) of a 2-D `x` with one scale per slice along `dim`.

    `dim=-1` scales each row (scale shape (rows, 1)); `dim=0` each column (scale shape (1, columns)): the
    shapes of torchao's `tensor_to_scale(x, e4m3, scaling_granularity=AXISWISE, axiswise_dim=dim)`. torchao's
    rowwise recipes round scales down to a power of two; pass `round_scales_to_power_of_2=False` for plain
    axiswise.
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
    if block_rows is None or block_along is None:
        # Tiles whose contiguous side is long enough for coalesced loads: along the row for dim=-1, across
        # the scaled columns for dim=0 (then consecutive "rows" of the kernel are adjacent in memory).
        default_rows, default_along = (16, 256) if dim == 1 else (64, 64)
        block_rows = block_rows or default_rows
        block_along = block_along or default_along
    grid = (triton.cdiv(rows, block_rows),)
    _rowwise_kernel[grid](
        x,
        out.view(torch.uint8),
        scale,
        rows,
        length,
        stride_row,
        stride_along,
        BLOCK_ROWS=block_rows,
        BLOCK_ALONG=block_along,
        ROUND_POW2=round_scales_to_power_of_2,
        SOFTWARE_CAST=_software_cast(software_cast),
    )
    return out, scale


__all__ = ["E4M3_MAX", "interpreting", "quantize_rowwise", "quantize_tensorwise"]
