"""What torchao 0.18's MXFP8 grouped GEMM adds to one expert GEMM set's forward+backward, kernel by kernel.

Read from `torchao/prototype/moe_training/mxfp8_grouped_mm.py` (`_MXFP8GroupedMM`, kernel preference AUTO:
`_compute_fwd_sm100`, `_compute_dgrad_sm100`, `_compute_wgrad_sm100`) and its kernels
(`kernels/mxfp8/quant.py`, `kernels/mxfp8/cutedsl_quantize_2d_1x32.py`, `cutedsl_quantize_3d.py`,
`mx_formats/kernels.py::mxfp8_quantize_cuda`). A is the (M_total, K) token rows, sorted by expert, expert e
holding rows[e] of them; W the (E, N, K) expert weights (B_t = W^T per expert, as the bench lays it out); G
the (M_total, N) output gradient. bf16 is 2 bytes, e4m3 1, an E8M0 scale 1 per 32 elements. The blocked
(swizzled) layout of the block-scaled GEMMs stores scales in tiles of 128 rows x 4 scale columns
(`to_blocked`); "padded" below is that padding.

forward (output = A @ W^T per expert)
- `mxfp8_quantize_2d_1x32_cutedsl(A, offs)`: blocks of 32 along K; reads A, writes e4m3 A and its scales
  already blocked, ceil(M_total / 128) * 128 rows x ceil(K / 32 / 4) * 4 columns (one layout for all groups);
- `triton_to_mxfp8_dim0(W)`: blocks along K; reads W, writes e4m3 W and E x N x K/32 scales;
- `triton_mx_block_rearrange_per_group_3d`: those scales read, written padded per expert,
  E x ceil(N / 128) * 128 x ceil(K / 32 / 4) * 4;
backward, grad_input = G @ W per expert
- `mxfp8_quantize_2d_1x32_cutedsl(G, offs)`: blocks along N, scales written blocked as for A;
- `mxfp8_quantize_cuda_3d(W, scale_block_dim1=32)`: blocks of 32 along N; reads W again, writes e4m3 W and
  blocked scales, E x ceil(K / 128) * 128 x ceil(N / 32 / 4) * 4;
backward, grad_weight = G^T @ A per expert (absent with `wgrad_with_hp`: a bf16 `torch._grouped_mm` of the
saved A and G, no kernel added)
- `mxfp8_quantize_cuda` (dim1, via `_to_mxfp8_dim1_kernel_wrapper`) of G and of A: blocks of 32 along the
  tokens; each reads its tensor, writes it e4m3 transposed and N x M_total/32 (K x M_total/32) scales;
- `triton_mx_block_rearrange_2d_K_groups` for each: the output is first zero-filled (`new_zeros`,
  ceil(N / 128) * 128 rows x (M_total/32 + 4 E) columns: torchao pads every group by the upper bound of 4
  columns), then the kernel reads the scales and writes each group's columns padded to 4,
  ceil(N / 128) * 128 x sum_e ceil(rows[e] / 32 / 4) * 4 bytes (K alike for A).

So 5 kernels for the forward and dgrad and 6 more for the weight gradient (11; 5 with `wgrad_with_hp`),
none fused into their neighbours (torchao's custom ops). The three `torch._scaled_grouped_mm` read their
scales too: `roofline.grouped_gemm_time_s` in "mxfp8" adds (reads) / 32, as torchao's roofline does.
Token-group padding inside torchao (`pad_token_groups_for_grouped_mm`) is off in every MXFP8 recipe of
torchao 0.18: the rows given here are what reaches the kernels. torchtitan pads each group to 128 rows in its
token dispatcher (`padded_rows`, which `roofline.grouped_fwd_bwd_time_s` applies before counting).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from fp8advisor.predict.mx_roofline import (
    BF16,
    E4M3,
    E8M0,
    TILE_ROWS,
    TILE_SCALE_COLUMNS,
    blocked_scale_bytes,
)
from fp8advisor.recipes import MX_BLOCK_SIZE, MX_GROUPED_ALIGNMENT, Recipe, parse_recipe


def _up(value: float, multiple: int) -> float:
    return math.ceil(value / multiple) * multiple


def _cast(elements: float) -> float:
    """A 1x32 cast of `elements` bf16 values: read, written e4m3 (scales counted by the caller)."""
    return elements * (BF16 + E4M3)


def grouped_kernel_bytes(
    rows: Sequence[float], K: int, N: int, recipe: Recipe | str
) -> list[tuple[str, float]]:
    """(kernel, bytes moved) of every kernel torchao 0.18's MXFP8 grouped GEMM adds to one expert GEMM set of
    E = len(rows) experts (module docstring); `recipe` an MXFP8 recipe."""
    recipe = parse_recipe(str(recipe))
    if not recipe.is_mx:
        raise ValueError(f"{recipe} is not an MXFP8 recipe")
    E, M = len(rows), float(sum(rows))
    W = E * K * N
    scales = {"A": M * K / MX_BLOCK_SIZE, "G": M * N / MX_BLOCK_SIZE, "W": W / MX_BLOCK_SIZE}
    kernels = [
        ("fwd: 1x32 cast of A along K, blocked scales", _cast(M * K) + blocked_scale_bytes(M, K)),
        ("fwd: 1x32 cast of W along K", _cast(W) + scales["W"]),
        ("fwd: W's scales to the per-expert blocked layout", scales["W"] + E * blocked_scale_bytes(N, K)),
        ("bwd: 1x32 cast of G along N, blocked scales", _cast(M * N) + blocked_scale_bytes(M, N)),
        ("bwd: 32x1 cast of W along N, blocked scales", _cast(W) + E * blocked_scale_bytes(K, N)),
    ]
    if recipe.grad_weight_in_bf16:
        return kernels
    for name, width in (("G", N), ("A", K)):
        padded_rows = _up(width, TILE_ROWS)
        group_columns = sum(_up(m / MX_BLOCK_SIZE, TILE_SCALE_COLUMNS) for m in rows)
        kernels += [
            (f"bwd: 32x1 cast of {name} along the tokens", _cast(M * width) + scales[name]),
            (
                f"bwd: zero fill of {name}^T's blocked scales",
                padded_rows * (M / MX_BLOCK_SIZE + TILE_SCALE_COLUMNS * E) * E8M0,
            ),
            (
                f"bwd: {name}^T's scales to the per-group blocked layout",
                scales[name] + padded_rows * group_columns * E8M0,
            ),
        ]
    return kernels


def padded_rows(rows: Sequence[float]) -> list[float]:
    """Each expert's token group padded up to `recipes.MX_GROUPED_ALIGNMENT` (128) rows, as torchtitan 0.3's
    MXFP8 token dispatcher pads it (`pad_multiple`) for torchao's sm_100 cast; an empty group stays empty."""
    return [_up(m, MX_GROUPED_ALIGNMENT) if m > 0 else 0.0 for m in rows]


def grouped_recipe_for(recipe: Recipe | str) -> Recipe:
    """The recipe routed experts run beside Linear layers of `recipe`, as torchtitan 0.3's converters pair
    them: rowwise for every float8 recipe (torchao's only float8 grouped recipe), the MXFP8 recipe itself for
    MXFP8 (`MXFP8GroupedExpertsConverter`, `wgrad_with_hp` included: torchao's `MXFP8TrainingOpConfig`
    carries it to the grouped GEMM)."""
    recipe = parse_recipe(str(recipe))
    return recipe if recipe.is_mx else Recipe.ROWWISE


__all__ = ["grouped_kernel_bytes", "grouped_recipe_for", "padded_rows"]
