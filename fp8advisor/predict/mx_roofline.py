"""What torchao 0.18's MXFP8 Linear adds to a Linear's forward+backward: its cast kernels and the scale
rearrangements, byte for byte, and the scale bytes its block-scaled GEMMs read.

Read from `torchao/prototype/moe_training/mxfp8_linear.py` (`mx_mm`, kernel preference AUTO: the Triton dim0
cast `triton_to_mxfp8_dim0`, the CUDA dim1 cast behind `_to_mxfp8_dim1_kernel_wrapper`) and
`torchao/prototype/mx_formats/mx_tensor.py` (`_addmm_mx_dispatch`: each operand's E8M0 scales go through
`to_blocked`, cuBLAS's swizzled 128 x 4 tile layout, before `torch._scaled_mm`). Per Linear, with the input X
(M x K), the weight W (N x K, as nn.Linear stores it) and the output gradient G (M x N):

forward (output = X @ W^T)
- dim0 cast of X: blocks of 32 along K; reads X in bf16, writes e4m3 X and M x K/32 scales;
- dim0 cast of W: blocks along K; reads W, writes e4m3 W and N x K/32 scales;
- the two scale tensors rearranged to the blocked layout (read, written padded to 128 rows x 4 columns);
backward, grad_input = G @ W
- dim0 cast of G: blocks along N; dim1 cast of W: blocks along N (W read again, written transposed);
- their two scale rearrangements;
backward, grad_weight = G^T @ X (absent with `wgrad_with_hp`, which multiplies the saved bf16 X and G)
- dim1 cast of G: blocks along M; dim1 cast of X: blocks along M;
- their two scale rearrangements.

So six cast kernels and six rearrangements (four and four with `wgrad_with_hp`). The casts are torchao's
own kernels (custom ops), which inductor does not fuse into the LayerNorm or Sigmoid around them: no cast is
`fused` here, unlike torchao's float8 casts. bf16 is 2 bytes, e4m3 and E8M0 1 byte each. torchao's own
roofline (`roofline_utils.py`, recipe `mxfp8_cublas`) counts two casts per tensor without the scale bytes
and rearrangements; this module counts what 0.18's training path runs.
"""

from __future__ import annotations

import math

from fp8advisor.recipes import MX_BLOCK_SIZE, Recipe

BF16, E4M3, E8M0 = 2, 1, 1

#: cuBLAS's block-scaled layout: scales in tiles of 128 rows x 4 scale columns (torchao `to_blocked`).
TILE_ROWS, TILE_SCALE_COLUMNS = 128, 4


def scale_bytes(rows: float, columns: float) -> float:
    """E8M0 scales of a rows x columns tensor cast in 1 x 32 blocks along its columns."""
    return rows * columns / MX_BLOCK_SIZE * E8M0


def blocked_scale_bytes(rows: float, columns: float) -> float:
    """The same scales in the blocked layout: rows padded to 128, scale columns to 4
    (torchao `to_blocked`: (32 * ceil(rows / 128), 16 * ceil(scale_columns / 4)) scales)."""
    scale_columns = math.ceil(columns / MX_BLOCK_SIZE)
    padded_rows = math.ceil(rows / TILE_ROWS) * TILE_ROWS
    padded_columns = math.ceil(scale_columns / TILE_SCALE_COLUMNS) * TILE_SCALE_COLUMNS
    return padded_rows * padded_columns * E8M0


def cast_bytes(rows: float, columns: float) -> float:
    """One MX cast kernel of a rows x columns bf16 tensor, blocks along `columns`: reads it, writes e4m3 and
    the scales (a dim1 cast is the dim0 cast of the transpose: call it with the axes swapped)."""
    return rows * columns * (BF16 + E4M3) + scale_bytes(rows, columns)


def rearrange_bytes(rows: float, columns: float) -> float:
    """One `to_blocked` of the scales of a rows x columns tensor cast along `columns`: read, then written
    padded."""
    return scale_bytes(rows, columns) + blocked_scale_bytes(rows, columns)


def linear_kernel_bytes(M: float, K: int, N: int, recipe: Recipe | str) -> list[tuple[str, float]]:
    """(kernel, bytes moved) of every kernel torchao 0.18's MXFP8 Linear adds to one forward+backward."""
    recipe = Recipe(recipe)
    if not recipe.is_mx:
        raise ValueError(f"{recipe} is not an MXFP8 recipe")
    # (GEMM, tensor, rows, columns): each operand as cast, the scale blocks along `columns`
    operands = [
        ("output", "X dim0", M, K),
        ("output", "W dim0", N, K),
        ("grad_input", "G dim0", M, N),
        ("grad_input", "W dim1", K, N),
    ]
    if not recipe.grad_weight_in_bf16:
        operands += [("grad_weight", "G dim1", N, M), ("grad_weight", "X dim1", K, M)]
    kernels = [(f"{gemm}: cast {tensor}", cast_bytes(rows, cols)) for gemm, tensor, rows, cols in operands]
    kernels += [
        (f"{gemm}: scales of {tensor} to the blocked layout", rearrange_bytes(rows, cols))
        for gemm, tensor, rows, cols in operands
    ]
    return kernels


def gemm_scale_read_fraction() -> float:
    """Scale bytes an MX GEMM reads per e4m3 operand byte (torchao's roofline: reads / 32)."""
    return E8M0 / (MX_BLOCK_SIZE * E4M3)


__all__ = [
    "blocked_scale_bytes",
    "cast_bytes",
    "gemm_scale_read_fraction",
    "linear_kernel_bytes",
    "rearrange_bytes",
    "scale_bytes",
]
