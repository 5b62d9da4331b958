"""torchao's roofline model of a float8 Linear's forward+backward, in plain Python (no sympy, no torch).

This is `torchao/testing/training/roofline_utils.py` (torchao 0.18) as `benchmarks/float8/float8_roofline.py`
uses it with `--enable_fusion_modeling`, term for term:

- one GEMM takes `max(2*M*K*N / (peak * gemm_efficiency), bytes / (bandwidth * bandwidth_efficiency), floor)`
  with bytes = (M*K + K*N) * b + 2*M*N (b = 2 for bf16, 1 for float8; the output is bf16 either way);
- a Linear's forward+backward is three GEMMs: output (M, K, N), grad_input (M, N, K), grad_weight (K, M, N);
  `rowwise_with_gw_hp` (and `mxfp8_rceil_wgrad_with_hp`) keeps the grad_weight GEMM in bf16;
- the float8 cast overhead is one `max(bytes / (bandwidth * bandwidth_efficiency), floor)` per cast kernel of
  input (M x K), weight (K x N) and grad_output (M x N), with the per-recipe kernel lists of
  `_cast_kernel_bytes`; every listed kernel pays at least the floor, even one that moves no bytes (torchao
  counts it so);
- MXFP8 recipes (Blackwell): the GEMMs run at the FP8 peak and read their E8M0 scales too (1 byte per 32
  elements, as torchao's roofline counts them); the cast overhead is every kernel torchao 0.18's MXFP8 Linear
  runs (`fp8advisor.predict.mx_roofline`: six casts and six scale rearrangements, none fused);
- roofline speedup = bf16 GEMM time / (float8 GEMM time + cast overhead). LayerNorm and Sigmoid are not
  modelled; `fused=True` (torchao's `enable_fusion_modeling`) assumes the casts of input and grad_output fuse
  into the LayerNorm and Sigmoid kernels before them, as in the published LNLinearSigmoid benchmark.

Routed experts (MoE) have their own model below (`grouped_fwd_bwd_time_s`): not torchao's (it has none for
grouped GEMMs) but the same GEMM terms per expert, and the cast kernels counted from torchao 0.18's rowwise
grouped path (`grouped_cast_kernel_bytes`) or its MXFP8 grouped path (`fp8advisor.predict.mx_grouped`).

The GPU constants (`GpuSpecs`: torchao's `gpu_name_to_specs`, by family) are the catalogue in
`fp8advisor.gpus`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from fp8advisor.gpus import GpuSpecs, get_specs
from fp8advisor.predict import mx_grouped, mx_roofline
from fp8advisor.recipes import BASELINE, Recipe

BYTES_PER_BF16 = 2
BYTES_PER_FLOAT8 = 1


def _floored_memory_time_s(num_bytes: float, specs: GpuSpecs) -> float:
    return max(num_bytes / (specs.bandwidth_bytes_per_s * specs.bandwidth_efficiency), specs.kernel_floor_s)


def gemm_time_s(M: int, K: int, N: int, dtype: str, gpu: str | GpuSpecs) -> float:
    """Roofline time of one (M x K) @ (K x N) GEMM, inputs in `dtype` ("bf16", "fp8" or "mxfp8": e4m3 with
    its block scales), output bf16."""
    specs = get_specs(gpu)
    peak, input_bytes = _peak_and_input_bytes(dtype, specs)
    return max(_gemm_roofline_s(M, K, N, peak, input_bytes, specs), specs.kernel_floor_s)


def _peak_and_input_bytes(dtype: str, specs: GpuSpecs) -> tuple[float, float]:
    if dtype == "bf16":
        return specs.bf16_flops, BYTES_PER_BF16
    if dtype == "fp8":
        return specs.fp8_flops, BYTES_PER_FLOAT8
    if dtype == "mxfp8":  # the FP8 peak (Blackwell runs MXFP8 at its FP8 rate), the scales read beside
        return specs.fp8_flops, BYTES_PER_FLOAT8 * (1 + mx_roofline.gemm_scale_read_fraction())
    raise ValueError(f"dtype must be 'bf16', 'fp8' or 'mxfp8', not {dtype!r}")


def _gemm_roofline_s(M: float, K: int, N: int, peak: float, input_bytes: float, specs: GpuSpecs) -> float:
    """max(compute, memory) of one (M x K) @ (K x N) GEMM with a bf16 output, without the kernel floor."""
    compute_s = 2 * M * K * N / (peak * specs.gemm_efficiency)
    memory_bytes = (M * K + K * N) * input_bytes + M * N * BYTES_PER_BF16
    memory_s = memory_bytes / (specs.bandwidth_bytes_per_s * specs.bandwidth_efficiency)
    return max(compute_s, memory_s)


def linear_gemm_time_s(M: int, K: int, N: int, recipe: Recipe | str, gpu: str | GpuSpecs) -> float:
    """The three GEMMs of a Linear's forward+backward: output, grad_input and grad_weight."""
    if recipe == BASELINE:
        dtypes = ("bf16", "bf16", "bf16")
    else:
        recipe = Recipe(recipe)
        low = "mxfp8" if recipe.is_mx else "fp8"
        # rowwise_with_gw_hp and mxfp8_rceil_wgrad_with_hp keep the grad_weight GEMM in high precision
        dtypes = (low, low, "bf16" if recipe.grad_weight_in_bf16 else low)
    return (
        gemm_time_s(M, K, N, dtypes[0], gpu)  # input @ weight.t = output
        + gemm_time_s(M, N, K, dtypes[1], gpu)  # grad_output @ weight = grad_input
        + gemm_time_s(K, M, N, dtypes[2], gpu)  # input.t @ grad_output = grad_weight
    )


def cast_kernel_bytes(role: str, numel: int, recipe: Recipe | str, *, fused: bool) -> list[int]:
    """Bytes read+written by each cast kernel of one tensor (torchao's `get_tensor_memory_traffic_ovhd_s`).

    `role` is "input", "weight" or "grad_output"; `fused` says the first read fuses into the op before
    (torchao passes it for input and grad_output only, never for the weight).
    """
    recipe = Recipe(recipe)
    if recipe.is_mx:
        raise ValueError(
            f"{recipe}'s casts depend on the tensor's shape: see mx_roofline.linear_kernel_bytes"
        )
    n, bf16, fp8 = numel, BYTES_PER_BF16, BYTES_PER_FLOAT8
    if role not in ("input", "weight", "grad_output"):
        raise ValueError(f"role must be input, weight or grad_output, not {role!r}")
    if recipe is Recipe.TENSORWISE:
        amax_read = 0 if fused else bf16 * n  # kernel 1: amax stage 1; kernel 2 (amax stage 2) moves ~0 bytes
        if role == "weight":
            return [amax_read, 0, bf16 * n + fp8 * n, bf16 * n + fp8 * n]  # cast for fwd, cast for bwd
        return [amax_read, 0, bf16 * n + 2 * fp8 * n]  # one cast writing both layouts
    if recipe is Recipe.ROWWISE:
        if role == "weight":
            first = fp8 * n if fused else bf16 * n + fp8 * n
            return [first, 2 * bf16 * n, bf16 * n + fp8 * n]  # cast dim0, transpose, cast dim1
        first = fp8 * n + bf16 * n if fused else 2 * bf16 * n + fp8 * n  # cast dim0 + write transposed bf16
        return [first, bf16 * n + fp8 * n]
    # rowwise_with_gw_hp: input and grad_output are cast once (the grad_weight GEMM is bf16)
    if role == "weight":
        return [
            bf16 * n + fp8 * n,
            0,
            bf16 * n + fp8 * n,
        ]  # the middle kernel turns row scales into one scale
    return [fp8 * n if fused else bf16 * n + fp8 * n]


def cast_overhead_s(
    M: int, K: int, N: int, recipe: Recipe | str, gpu: str | GpuSpecs, *, fused: bool = True
) -> float:
    """Time of every float8 cast kernel of a Linear's forward+backward; each costs at least the floor. MXFP8
    casts are never fused (`mx_roofline`)."""
    specs = get_specs(gpu)
    if Recipe(recipe).is_mx:
        kernels = [num_bytes for _, num_bytes in mx_roofline.linear_kernel_bytes(M, K, N, recipe)]
        return sum(_floored_memory_time_s(num_bytes, specs) for num_bytes in kernels)
    kernels = (
        cast_kernel_bytes("input", M * K, recipe, fused=fused)
        + cast_kernel_bytes("weight", K * N, recipe, fused=False)
        + cast_kernel_bytes("grad_output", M * N, recipe, fused=fused)
    )
    return sum(_floored_memory_time_s(num_bytes, specs) for num_bytes in kernels)


def linear_fwd_bwd_time_s(
    M: int, K: int, N: int, recipe_or_bf16: Recipe | str, gpu: str | GpuSpecs, *, fused: bool = True
) -> float:
    """Modelled forward+backward time of one Linear: its three GEMMs plus, for float8, the cast overhead."""
    gemms = linear_gemm_time_s(M, K, N, recipe_or_bf16, gpu)
    if recipe_or_bf16 == BASELINE:
        return gemms
    return gemms + cast_overhead_s(M, K, N, recipe_or_bf16, gpu, fused=fused)


def roofline_speedup(
    M: int, K: int, N: int, recipe: Recipe | str, gpu: str | GpuSpecs, *, fused: bool = True
) -> float:
    """torchao's `r_fp8_gemm_and_ovhd_spdp`: bf16 GEMM time / (float8 GEMM time + cast overhead)."""
    return linear_fwd_bwd_time_s(M, K, N, BASELINE, gpu) / linear_fwd_bwd_time_s(
        M, K, N, recipe, gpu, fused=fused
    )


# --- grouped GEMMs of routed experts (MoE) ------------------------------------------------------------------
#
# The forward+backward of one expert GEMM set: E experts, expert e multiplies m_e rows (its tokens) by its own
# K x N weight, sum(m_e) = M_total. Three grouped GEMMs, as torch._grouped_mm / torch._scaled_grouped_mm run
# them: output (M_total, K) x (E, K, N), grad_input (M_total, N) x (E, N, K), grad_weight per expert
# (K, m_e) x (m_e, N). bf16 runs them through torch._grouped_mm; torchao 0.18's float8 grouped path
# (`torchao/prototype/moe_training/fp8_grouped_mm.py`, `_to_fp8_rowwise_then_scaled_grouped_mm`) runs all
# three as float8 `torch._scaled_grouped_mm` with rowwise scales (its only recipe for grouped GEMMs), after
# the cast kernels of `grouped_cast_kernel_bytes`.

#: The recipe of torchao's float8 grouped GEMMs (`Float8TrainingRecipe.FP8_ROWWISE`: rowwise only).
GROUPED_RECIPE = Recipe.ROWWISE

_FLOAT32 = 4  # bytes of a float32 scale


def _row_counts(rows: Sequence[float]) -> Counter:
    """Distinct per-expert row counts and how many experts have each (balanced: one entry)."""
    counts = Counter(float(m) for m in rows)
    if not counts or min(counts) < 0:
        raise ValueError(f"per-expert rows must be non-negative and not empty, got {list(rows)[:8]}")
    return counts


def grouped_gemm_time_s(
    rows: Sequence[float],
    K: int,
    N: int,
    dtype: str,
    gpu: str | GpuSpecs,
    grad_weight_dtype: str | None = None,
) -> float:
    """Roofline time of the three grouped GEMMs of one expert GEMM set's forward+backward, inputs in `dtype`
    (the grad_weight GEMM's in `grad_weight_dtype` when given: bf16 for `mxfp8_rceil_wgrad_with_hp`).

    Modelled per expert and summed: expert e's part of each grouped GEMM takes the Linear roofline's
    max(compute, memory) of its own sub-GEMM (output (m_e, K, N), grad_input (m_e, N, K), grad_weight (K, m_e,
    N), bytes as `gemm_time_s`, so each expert streams its own K x N weight); a grouped GEMM is one kernel, so
    the kernel floor applies once to each grouped GEMM's sum, not per expert. The sum assumes the experts'
    tiles do not overlap a compute-bound expert with a memory-bound one (the kernel may), which overstates
    skewed routing's time a little in bf16 and float8 alike. An expert with no rows costs nothing in output
    and grad_input (no tiles) and still writes its K x N grad_weight. Tile quantisation (a group of 5 rows
    runs a 64- or 128-row tile) is not modelled. With one expert this is `linear_gemm_time_s`.
    """
    specs = get_specs(gpu)
    peak, input_bytes = _peak_and_input_bytes(dtype, specs)
    weight_peak, weight_bytes = _peak_and_input_bytes(grad_weight_dtype or dtype, specs)
    output = grad_input = grad_weight = 0.0
    for m, experts in _row_counts(rows).items():
        if m > 0:
            output += experts * _gemm_roofline_s(m, K, N, peak, input_bytes, specs)
            grad_input += experts * _gemm_roofline_s(m, N, K, peak, input_bytes, specs)
        grad_weight += experts * _gemm_roofline_s(K, m, N, weight_peak, weight_bytes, specs)
    return sum(max(gemm, specs.kernel_floor_s) for gemm in (output, grad_input, grad_weight))


def grouped_cast_kernel_bytes(M_total: float, K: int, N: int, E: int) -> list[tuple[str, float]]:
    """(kernel, bytes moved) of every kernel torchao 0.18's rowwise grouped path adds to one expert GEMM set.

    Read from `_Float8GroupedMM` in `torchao/prototype/moe_training/fp8_grouped_mm.py` and its kernels
    (`kernels/float8_rowwise.py`, `kernels/jagged_float8_scales.py`); A is the (M_total, K) token rows, B the
    (E, K, N) weights, G the (M_total, N) grad_output; bf16 in (2 bytes), float8 out (1), float32 scales (4):

    forward
    - `triton_fp8_rowwise_2d_scale_and_cast(A)`: ONE kernel over all M_total x K token rows (not per expert);
      two passes over each row, the second from L2 (its docstring): A read once, float8 A and M_total scales
      written;
    - `triton_fp8_colwise_3d_scale_and_cast(B)`: one kernel over the E x K x N weights, two passes, the second
      from L2 (its docstring): B read once, float8 B and E x N scales written;
    - two `reciprocal()` of the scales (M_total, E x N) for `_scaled_grouped_mm`;
    backward
    - `triton_fp8_rowwise_2d_scale_and_cast(G)`: as for A, over M_total x N;
    - `triton_fp8_rowwise_3d_transpose_rhs(B)`: `torch.full` of the E x K scales, a scales kernel reading B,
      then a cast kernel reading B again and writing it float8, transposed;
    - `triton_fp8_per_group_colwise_scales_dual(G, A)`: one kernel for both, per token group column-wise
      scales for the grad_weight GEMM; its second pass re-reads each group's rows (counted: no L2 claim
      there), writes float8 G and A column-major and E x (N + K) scales;
    - four `reciprocal()` of the scales (M_total, E x K, E x N, E x K) for the two `_scaled_grouped_mm`.

    Token-group padding is not here: the op asserts it is off (torchtitan pads the groups to 16 in its own
    token permutation, which runs in bf16 training too).
    """
    b, f, s = BYTES_PER_BF16, BYTES_PER_FLOAT8, _FLOAT32
    A, B, G = M_total * K, E * K * N, M_total * N
    return [
        ("fwd: rowwise cast of the token rows A (one kernel)", A * (b + f) + M_total * s),
        ("fwd: column-wise cast of the E expert weights B", B * (b + f) + E * N * s),
        ("fwd: reciprocal of A's scales", 2 * M_total * s),
        ("fwd: reciprocal of B's scales", 2 * E * N * s),
        ("bwd: rowwise cast of grad_output G (one kernel)", G * (b + f) + M_total * s),
        ("bwd: fill of B's transposed scales", E * K * s),
        ("bwd: scales of B transposed", B * b + E * K * s),
        ("bwd: cast of B transposed", B * (b + f) + E * K * s),
        ("bwd: reciprocal of G's scales", 2 * M_total * s),
        ("bwd: reciprocal of B transposed's scales", 2 * E * K * s),
        ("bwd: per-group column-wise casts of G and A (one kernel)", (G + A) * (2 * b + f) + E * (N + K) * s),
        ("bwd: reciprocal of G's per-group scales", 2 * E * N * s),
        ("bwd: reciprocal of A's per-group scales", 2 * E * K * s),
    ]


def grouped_cast_overhead_s(M_total: float, K: int, N: int, E: int, gpu: str | GpuSpecs) -> float:
    """Time of the kernels of `grouped_cast_kernel_bytes`: each its bytes at the achievable bandwidth, at
    least the kernel floor (as torchao's Linear roofline prices its cast kernels)."""
    specs = get_specs(gpu)
    return sum(
        _floored_memory_time_s(num_bytes, specs)
        for _, num_bytes in grouped_cast_kernel_bytes(M_total, K, N, E)
    )


def grouped_fwd_bwd_time_s(
    rows: Sequence[float], K: int, N: int, recipe_or_bf16: Recipe | str, gpu: str | GpuSpecs
) -> float:
    """Modelled forward+backward time of one expert GEMM set (E = len(rows) experts, expert e with rows[e]):
    bf16 grouped GEMMs, or low-precision grouped GEMMs plus torchao's kernels of the grouped recipe: rowwise
    (`grouped_cast_kernel_bytes`) or MXFP8 (`mx_grouped.grouped_kernel_bytes`, block-scaled GEMMs reading
    their scales; `mxfp8_rceil_wgrad_with_hp`'s grad_weight GEMM in bf16). MXFP8 runs each expert's token
    group padded to 128 rows (`mx_grouped.padded_rows`: torchtitan's pad_multiple, what the GPU's cast
    needs)."""
    if recipe_or_bf16 == BASELINE:
        return grouped_gemm_time_s(rows, K, N, "bf16", gpu)
    recipe = Recipe(recipe_or_bf16)
    if recipe.is_mx:
        specs = get_specs(gpu)
        rows = mx_grouped.padded_rows(rows)
        gemms = grouped_gemm_time_s(
            rows, K, N, "mxfp8", specs, "bf16" if recipe.grad_weight_in_bf16 else None
        )
        kernels = mx_grouped.grouped_kernel_bytes(rows, K, N, recipe)
        return gemms + sum(_floored_memory_time_s(num_bytes, specs) for _, num_bytes in kernels)
    if recipe is not GROUPED_RECIPE:
        raise ValueError(f"torchao's float8 grouped GEMMs are rowwise only (or MXFP8), not {recipe_or_bf16}")
    return grouped_gemm_time_s(rows, K, N, "fp8", gpu) + grouped_cast_overhead_s(
        sum(rows), K, N, len(rows), gpu
    )


def grouped_roofline_speedup(
    rows: Sequence[float], K: int, N: int, gpu: str | GpuSpecs, recipe: Recipe | str = GROUPED_RECIPE
) -> float:
    """bf16 time / low-precision time (rowwise unless `recipe` says otherwise) of one expert GEMM set, by the
    grouped roofline."""
    return grouped_fwd_bwd_time_s(rows, K, N, BASELINE, gpu) / grouped_fwd_bwd_time_s(rows, K, N, recipe, gpu)


def routed_rows(M_total: float, n_experts: int, imbalance: float = 1.0) -> tuple[float, ...]:
    """Rows per expert when the busiest expert gets `imbalance` x the mean (M_total / E) and the other E - 1
    share the rest equally: (mean x imbalance, then E - 1 times mean x (E - imbalance) / (E - 1)).

    `imbalance` 1.0 is balanced routing; it must lie in [1, E] (E: one expert takes every row).
    """
    if n_experts < 1:
        raise ValueError(f"a group needs at least one expert, not {n_experts}")
    if not 1.0 <= imbalance <= n_experts:
        raise ValueError(f"imbalance must lie in [1, E = {n_experts}], not {imbalance}")
    mean = M_total / n_experts
    if n_experts == 1:
        return (float(M_total),)
    rest = mean * (n_experts - imbalance) / (n_experts - 1)
    return (mean * imbalance,) + (rest,) * (n_experts - 1)


__all__ = [
    "GROUPED_RECIPE",
    "cast_kernel_bytes",
    "cast_overhead_s",
    "gemm_time_s",
    "grouped_cast_kernel_bytes",
    "grouped_cast_overhead_s",
    "grouped_fwd_bwd_time_s",
    "grouped_gemm_time_s",
    "grouped_roofline_speedup",
    "linear_fwd_bwd_time_s",
    "linear_gemm_time_s",
    "roofline_speedup",
    "routed_rows",
]
