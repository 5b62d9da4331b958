"""Measure where float8 pays for the grouped expert GEMMs of mixture-of-experts models: `bench --grouped`.

What is measured (the method of torchao's moe_training benchmarks, `benchmarks/prototype/moe_training/
benchmark_scaled_grouped_mm_dq.py`): one grouped GEMM of E experts, forward then backward, in bf16
(`torch._grouped_mm`) and in float8 rowwise (torchao 0.18's
`fp8_grouped_mm._to_fp8_rowwise_then_scaled_grouped_mm`: dynamic rowwise casts, then
`torch._scaled_grouped_mm` for the output, the input gradient and the weight gradient; what
`Float8TrainingOpConfig`, recipe FP8_ROWWISE, dispatches every converted grouped GEMM to), each under
`torch.compile` after `torch._dynamo.reset()`. The operands are laid out as torchao's benchmark lays them:

- A: (E * M_per_expert, K) bf16, row-major, requires_grad (the routed tokens, sorted by expert);
- B_t: (E, K, N) bf16, the transpose of a leaf weight (E, N, K) that requires grad, so column-major per
  expert (strides (N*K, 1, K)), as torchao's grouped GEMM requires of its right operand;
- offs: the end offset of each expert's group of rows, int32, equal groups (balanced routing: torchao's
  benchmark draws jagged groups at random; equal groups make a point reproducible and M_per_expert exact);
- a random bf16 grad_output (E * M_per_expert, N), as `bench`'s Linear block (torchao's benchmark takes an
  MSE loss against ones; the gradient's values do not change the kernels' time).

torchao requires K, N and each group's size to be multiples of 16 (its float8 path runs without padding the
groups: `pad_token_groups_for_grouped_mm=False`, the config's default), so the grid refuses other sizes.

Each configuration goes through `fp8advisor.measure.protocol.time_step` on the timers of
`fp8advisor.measure.timers`, exactly as a Linear point: the compile call (timed, with the cache counters), the
SQNR of the float8 output, input gradient and weight gradient against eager bf16, warm-up, the memory window,
GPU kernel time with the padded profiler, peak memory, and wall-clock with do_bench. The sweep itself (order,
batches, pre-compiling workers, time budget, resume, results files) is `fp8advisor.measure.sweep.run_sweep`
with the `GROUPED` workload (a `GroupedGrid`'s). Results rows (`fp8advisor.measure.sweep.point_record`) say
`"grouped": true` and carry E, M_per_expert, K, N and the recipe (`rowwise`).

MXFP8 (`--recipes mxfp8_rceil[,mxfp8_rceil_wgrad_with_hp]`, Blackwell, measured by default there) is torchao
0.18's `mxfp8_grouped_mm._to_mxfp8_then_scaled_grouped_mm` with its `MXFP8TrainingOpConfig`'s settings
(`mx_grouped_mm`); under `--emulate` with its EMULATED kernel preference (torchao's own emulation), run
eager: inductor fails on the CPU on every MX grouped shape whose M_total, K and N differ (an AssertionError
in its code generation), so an emulated MX point times the eager emulation (`prepared_function`; the GPU
path stays compiled). Its sizes: `recipe_support.grouped_alignment` (128 on a GPU, 32 emulated).

`--emulate` runs the same pipeline on the CPU. `torch._scaled_grouped_mm` and torchao's Triton casts have no
CPU kernel, so the float8 path is emulated: the same rowwise scales as torchao's kernels (A and grad_output
per row, B per expert and output column for the forward and per expert and input column for the input
gradient, grad_output and A per expert group and column for the weight gradient; powers of two, e4m3), the
operands quantized to float8 with torchao's own scale functions, dequantized exactly to bf16, and multiplied
with `torch._grouped_mm` (which runs on the CPU). Its times are CPU wall-clock; every record says
`"emulated": true` and `fit` refuses such runs for a real profile.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from fp8advisor import compat
from fp8advisor.errors import AdvisorError
from fp8advisor.measure.protocol import (
    BenchSettings,
    Measurement,
    checked_sqnr,
    compile_module,
    failure_reason,
    time_step,
)
from fp8advisor.measure.recipe_support import (
    FLOAT8_GROUPED_ALIGNMENT,
    aligned_tokens,
    check_grouped_alignment,
    grouped_recipes,
    is_mx,
)
from fp8advisor.measure.results import GROUPED_AXES, GROUPED_WORKLOAD
from fp8advisor.measure.timers import Timer
from fp8advisor.measure.workload import Point, ShapeGrid, Workload, check_point_count, check_sizes
from fp8advisor.recipes import BASELINE, mx_config, sqnr_db

#: The float8 recipe of torchao's grouped GEMMs: rowwise scales, float8 weight gradient
#: (`Float8TrainingRecipe.FP8_ROWWISE`, the only float8 recipe torchao 0.18 has for grouped GEMMs); the MXFP8
#: recipes (`recipe_support.GROUPED_RECIPES`) join it on Blackwell or where --recipes names them.
GROUPED_RECIPE = "rowwise"
RECIPES = (BASELINE, GROUPED_RECIPE)

#: torchao's float8 grouped GEMM needs K, N and every group's size to be multiples of 16 (MXFP8: 32 emulated,
#: 128 on a GPU, `recipe_support.grouped_alignment`).
ALIGNMENT = FLOAT8_GROUPED_ALIGNMENT

WORKLOAD = (
    "grouped GEMM of E experts, A (E*M_per_expert, K) row-major @ B_t (E, K, N) column-major, equal int32 "
    "group offsets, bf16, fwd+bwd: torch._grouped_mm vs torchao fp8_grouped_mm."
    "_to_fp8_rowwise_then_scaled_grouped_mm (torch._scaled_grouped_mm)"
)

GPU_METHOD = {
    "workload": WORKLOAD,
    "compile": "torch.compile default mode of the grouped GEMM function, torch._dynamo.reset() before each "
    "configuration; pre-compiled in worker processes (autotune_local_cache off); the point's compile "
    "record: seconds of the first call in the timing process, with inductor FX-graph and AOTAutograd cache "
    "hits/misses",
    "kernel_time": "torch.profiler: compile call + 2 warm-up, then 5 profiled iterations in one session "
    "padded with k+16 torch.cuda._sleep kernels (k-th session), sum of GPU kernel time, grad-accumulation "
    "add_/sum, syncs and Unrecognized rows dropped as torchao 0.18 float8_roofline.py (their time recorded)",
    "wall_time": "CUDA events per iteration after warm-up, L2 flushed, median and 20th/80th percentiles, "
    "at least 5 iterations (triton.testing.do_bench)",
    "correctness": "SQNR (dB) of float8 output, input gradient and weight gradient against eager bf16 "
    "torch._grouped_mm",
    "peak_memory": "torch.cuda.max_memory_allocated over the profiled iterations only, minus memory held "
    "before the configuration was built",
    "breakdown": None,
}

EMULATED_METHOD = {
    "workload": WORKLOAD,
    "compile": "torch.compile default mode on the CPU; float8 EMULATED: torchao's rowwise scales (powers of "
    "two, e4m3) quantize A, B and grad_output as torchao's kernels do, dequantized to bf16 and multiplied "
    "with torch._grouped_mm (torch._scaled_grouped_mm has no CPU kernel); MXFP8 (torchao's EMULATED kernel "
    "preference) runs EAGER, not compiled: inductor fails on the CPU on its non-square shapes, so an MXFP8 "
    "point's time (and its compile record: the first eager call) is eager against a compiled bf16",
    "kernel_time": None,
    "wall_time": "EMULATED on the CPU, one thread: time.perf_counter per iteration, compile call + 2 warm-up "
    "+ 5 timed iterations, median and 20th/80th percentiles",
    "correctness": "SQNR (dB) of float8 output, input gradient and weight gradient against eager bf16 "
    "torch._grouped_mm",
    "peak_memory": None,
    "breakdown": None,
}

# --- what is measured ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupedPoint(Point):
    """One configuration: E experts, each a (M_per_expert, K) x (K, N) GEMM, in bf16 or float8 rowwise."""

    AXES = GROUPED_AXES
    LABELS = ("E", "M/expert", "K", "N")
    GROUPED = True

    E: int
    M_per_expert: int
    K: int
    N: int
    recipe: str

    @property
    def rows(self) -> int:
        """Rows of A: every expert's tokens."""
        return self.E * self.M_per_expert

    def estimated_peak_bytes(self) -> int:
        """A generous estimate of the configuration's GPU memory (for the pre-compiling workers): bf16 A,
        weight and output with their gradients and copies, plus float8 copies of each in both layouts."""
        activations_in, weights, activations_out = (
            self.rows * self.K,
            self.E * self.K * self.N,
            self.rows * self.N,
        )
        bf16_bytes = 2 * (4 * activations_in + 3 * weights + 4 * activations_out)
        float8_bytes = 0 if self.recipe == BASELINE else 2 * (activations_in + weights + activations_out)
        return bf16_bytes + float8_bytes


#: Shapes whose weight (E*K*N) or activations (E*M_per_expert*(K+N)) exceed this many elements are left out
#: of a grid: 2^32 bf16 elements are 8 GiB, and a configuration holds several such tensors (gradients, float8
#: copies), which would not fit an 80 GB GPU. Real MoE layers stay below it (DeepSeek-V3's 256 experts of
#: 7168 x 2048: 3.8e9 weight elements).
MAX_ELEMENTS = 2**32


def fits(shape: tuple[int, int, int, int]) -> bool:
    """Whether (E, M_per_expert, K, N) stays within `MAX_ELEMENTS` for its weight and its activations."""
    E, M_per_expert, K, N = shape
    return E * K * N <= MAX_ELEMENTS and E * M_per_expert * (K + N) <= MAX_ELEMENTS


@dataclass(frozen=True)
class GroupedGrid(ShapeGrid):
    """A named set of (E, M_per_expert, K, N) shapes and the recipes measured at each (bf16 first)."""

    POINT = GroupedPoint

    recipes: tuple[str, ...] = RECIPES
    #: Shapes of the product left out by `fits` (too large for one GPU).
    left_out: tuple[tuple[int, int, int, int], ...] = ()

    @property
    def workload(self) -> Workload:
        return GROUPED

    @classmethod
    def product(
        cls,
        name: str,
        E: Iterable[int],
        M_per_expert: Iterable[int],
        K: Iterable[int],
        N: Iterable[int],
        recipes: Sequence[str] = RECIPES,
    ) -> GroupedGrid:
        """Every combination of the axes that `fits` on one GPU."""
        product = list(itertools.product(*(sorted(set(axis)) for axis in (E, M_per_expert, K, N))))
        return cls(
            name=name,
            shapes=tuple(shape for shape in product if fits(shape)),
            recipes=tuple(recipes),
            left_out=tuple(shape for shape in product if not fits(shape)),
        )

    def to_json(self) -> dict:
        return {
            "workload": GROUPED_WORKLOAD,
            **super().to_json(),
            "left_out": [list(shape) for shape in self.left_out],
        }


#: The default grid: E over 8 (Mixtral), 64 and 256 (DeepSeek-V3; Qwen3-30B-A3B's 128 in between), tokens
#: per expert over 128, 1024 and 8192, and K and N over 768 (Qwen3-30B-A3B's expert width), 4096 (Mixtral's
#: hidden size) and 14336 (Mixtral's expert width), which span Qwen3-30B-A3B's 2048/768 and DeepSeek-V3's
#: 7168/2048 too. The product is 81 shapes; `fits` leaves out the 21 too large for one GPU, which leaves 60
#: shapes x 2 configurations. No GPU has run it yet.
DEFAULT_E = (8, 64, 256)
DEFAULT_M_PER_EXPERT = (128, 1024, 8192)
DEFAULT_KN = (768, 4096, 14336)

GROUPED_GRIDS: dict[str, GroupedGrid] = {
    "default": GroupedGrid.product("default", DEFAULT_E, DEFAULT_M_PER_EXPERT, DEFAULT_KN, DEFAULT_KN),
    # a smoke test: 8 shapes
    "quick": GroupedGrid.product("quick", (8, 64), (256, 2048), (2048,), (768, 7168)),
    # --emulate: tiny, as each float8 graph costs seconds to compile on a CPU.
    "emulated": GroupedGrid.product("emulated", (2, 4), (16,), (32,), (32,)),
}


def make_grouped_grid(
    name: str | None = None,
    *,
    E: Sequence[int] | None = None,
    M_per_expert: Sequence[int] | None = None,
    K: Sequence[int] | None = None,
    N: Sequence[int] | None = None,
    recipes: Sequence[str] | None = None,
    emulate: bool = False,
    capability: tuple[int, int] | None = None,
) -> GroupedGrid:
    """The named grouped grid (`default`, or `emulated` under --emulate), axes overridden where given (the
    product of the given values and the named grid's other axes, less the shapes `fits` leaves out).

    Raises `AdvisorError` (exit 2) for an unknown grid, sizes that are not positive, K, N or M_per_expert not
    a multiple of what each recipe's grouped GEMM needs (`recipe_support.grouped_alignment`: 16 for rowwise,
    32 or 128 for MXFP8), a recipe torchao has no grouped GEMM for, an MXFP8 recipe on a GPU of another
    `capability` than 10.x, or an empty grid. Without --recipes: bf16 and rowwise, and the MXFP8 recipes on a
    GPU that runs them. Without --M-per-expert, the named grid's tokens per expert are rounded up to what the
    recipes need (`recipe_support.aligned_tokens`: the emulated grid's 16 become 32 with MXFP8).
    """
    if name is None:
        name = "emulated" if emulate else "default"
    if name not in GROUPED_GRIDS:
        raise AdvisorError(f"unknown grouped grid {name!r}", hint=f"use one of: {', '.join(GROUPED_GRIDS)}")
    base = GROUPED_GRIDS[name]
    given = {"E": E, "M-per-expert": M_per_expert, "K": K, "N": N}
    for option, values in given.items():
        if values is not None:
            check_sizes(f"--{option}", values)
    chosen = grouped_recipes(recipes, base.recipes, emulate=emulate, capability=capability)
    tokens = aligned_tokens(base.axis("M_per_expert"), chosen, emulate=emulate)
    if M_per_expert is None and tokens != base.axis("M_per_expert"):  # the emulated grid's 16 with MXFP8
        base = GroupedGrid.product(base.name, base.axis("E"), tokens, base.axis("K"), base.axis("N"))
    named = {"M-per-expert": "M_per_expert", "K": "K", "N": "N"}
    sizes = {option: given[option] or base.axis(axis) for option, axis in named.items()}  # [] is refused
    check_grouped_alignment(sizes, chosen, emulate=emulate)
    if all(values is None for values in given.values()):
        return dataclasses.replace(base, recipes=chosen)
    axes = [
        E if E is not None else base.axis("E"),
        M_per_expert if M_per_expert is not None else base.axis("M_per_expert"),
        K if K is not None else base.axis("K"),
        N if N is not None else base.axis("N"),
    ]
    check_point_count(axes, chosen)
    grid = GroupedGrid.product(f"{name}+custom", *axes, recipes=chosen)
    if not grid.shapes:
        raise AdvisorError(
            "every shape of this grid is too large for one GPU (a weight or activation over 2^32 elements)",
            hint="choose fewer experts, fewer tokens per expert or smaller K and N",
        )
    return grid


# --- the workload -------------------------------------------------------------------------------------------


def _torch():
    import torch

    return torch


def equal_group_offsets(E: int, M_per_expert: int, *, device: str):
    """End offsets of E equal groups of rows, int32 (what `torch._grouped_mm`'s `offs` takes): balanced
    routing, M_per_expert tokens each."""
    torch = _torch()
    return (torch.arange(1, E + 1, device=device, dtype=torch.int32) * M_per_expert).to(torch.int32)


def make_operands(E: int, M_per_expert: int, K: int, N: int, *, device: str, seed: int) -> dict:
    """A (E*M_per_expert, K), the weight (E, N, K), offs and grad_output (E*M_per_expert, N), bf16 (offs
    int32), drawn on `device` from `seed`; the caller takes B_t = weight.transpose(-2, -1)."""
    torch = _torch()
    generator = torch.Generator(device=device).manual_seed(seed + 1)
    rows = E * M_per_expert
    return {
        "A": torch.randn(rows, K, dtype=torch.bfloat16, device=device, generator=generator),
        "weight": torch.randn(E, N, K, dtype=torch.bfloat16, device=device, generator=generator),
        "offs": equal_group_offsets(E, M_per_expert, device=device),
        "grad_output": torch.randn(rows, N, dtype=torch.bfloat16, device=device, generator=generator),
    }


def bf16_grouped_mm(A, B_t, offs):
    """The baseline: `torch._grouped_mm(A, B_t, offs=offs)`, bf16 in, bf16 out."""
    return compat.grouped_mm()(A, B_t, offs=offs)


def float8_grouped_mm(*, emulate: bool) -> Callable:
    """The float8 rowwise grouped GEMM `fn(A, B_t, offs)`: torchao's (GPU) with the dtypes of its default
    `Float8TrainingOpConfig`, or the CPU emulation of it."""
    if emulate:
        return emulated_float8_grouped_mm()
    op = compat.fp8_rowwise_grouped_mm()
    config = compat.float8_grouped_training_config()
    out_dtype, float8_dtype = config.out_dtype, config.float8_dtype
    pad = config.pad_token_groups_for_grouped_mm  # False: torchao 0.18's forward asserts it

    def fp8_rowwise_grouped_mm(A, B_t, offs):
        return op(A, B_t, offs, out_dtype, float8_dtype, pad)

    return fp8_rowwise_grouped_mm


def mx_grouped_mm(recipe: str, *, emulate: bool) -> Callable:
    """torchao's MXFP8 grouped GEMM `fn(A, B_t, offs)` with the settings of its
    `MXFP8TrainingOpConfig.from_recipe(recipe)` (what a converted expert weight dispatches to), EMULATED under
    `emulate` (`to_mx` casts and a dequantized `torch._grouped_mm`: runs on the CPU, eager only)."""
    op, config = compat.mx_grouped_mm(), mx_config(recipe, emulate=emulate)
    settings = {
        "out_dtype": _torch().bfloat16,
        "kernel_preference": config.kernel_preference,
        "wgrad_with_hp": config.wgrad_with_hp,
        "scale_calculation_mode": config.scale_calculation_mode,
        "pad_token_groups_for_grouped_mm": config.pad_token_groups_for_grouped_mm,  # False: groups aligned
    }

    def mxfp8_grouped_mm(A, B_t, offs):
        return op(A, B_t, offs, **settings)

    return mxfp8_grouped_mm


def grouped_function(recipe: str, *, emulate: bool) -> Callable:
    if recipe == BASELINE:
        return bf16_grouped_mm
    return mx_grouped_mm(recipe, emulate=emulate) if is_mx(recipe) else float8_grouped_mm(emulate=emulate)


def prepared_function(recipe: str, *, emulate: bool) -> Callable:
    """`grouped_function` under `protocol.compile_module`, but eager for MXFP8 emulated on the CPU (torch
    2.13's inductor fails on torchao's EMULATED MX grouped GEMM unless M_total = K = N: "InductorError:
    AssertionError ({y0: 64, y1: 4, y2: 32}, ...)"); MXFP8 on a GPU is compiled."""
    function = grouped_function(recipe, emulate=emulate)
    return function if emulate and is_mx(recipe) else compile_module(function)


# --- the CPU emulation of torchao's float8 rowwise grouped GEMM ---------------------------------------------


def _dequantized(x, scale, float8_dtype, scaling):
    """x scaled, cast to float8 (saturated) and back: the value the float8 GEMM sees, exactly, in bf16 (a
    float8 value times a power-of-two scale is a bf16 value)."""
    torch = _torch()
    float8 = scaling.to_fp8_saturated(x.to(torch.float32) * scale, float8_dtype)
    return (float8.to(torch.float32) / scale).to(torch.bfloat16)


def _axiswise(x, dim: int, float8_dtype, scaling):
    """x through float8 with one scale per slice along `dim` (torchao's AXISWISE, power-of-two scales)."""
    scale = scaling.tensor_to_scale(
        x,
        float8_dtype,
        scaling_granularity=scaling.AXISWISE,
        axiswise_dim=dim,
        round_scales_to_power_of_2=True,
    )
    return _dequantized(x, scale, float8_dtype, scaling)


def _per_group_columns(x, offs, groups: int, float8_dtype, scaling):
    """x (rows, C) through float8 with one scale per group of rows and column (torchao's per-group colwise
    scales of the weight gradient's operands), without a Python loop over the groups (traceable)."""
    torch = _torch()
    rows, columns = x.shape
    group = torch.bucketize(torch.arange(rows, device=x.device), offs.to(torch.int64), right=True)
    index = group[:, None].expand(rows, columns)
    amax = torch.zeros(groups, columns, dtype=torch.float32, device=x.device).scatter_reduce(
        0, index, x.abs().to(torch.float32), "amax", include_self=True
    )
    scale = scaling.amax_to_scale(amax, float8_dtype, round_scales_to_power_of_2=True)
    return _dequantized(x, scale[group], float8_dtype, scaling)


@functools.cache
def _emulated_function():
    """The autograd.Function of the emulation, made once per process, outside any compiled region (it
    imports torchao's scale functions)."""
    torch = _torch()
    grouped_mm = compat.grouped_mm()
    scaling = compat.float8_scaling()

    class EmulatedFloat8RowwiseGroupedMM(torch.autograd.Function):
        """torchao's `_Float8GroupedMM` with its casts emulated and its GEMMs in bf16 (module docstring)."""

        @staticmethod
        def forward(ctx, A, B_t, offs, float8_dtype):
            ctx.save_for_backward(A, B_t, offs)
            ctx.float8_dtype = float8_dtype
            # A per row (over K); B_t (E, K, N) per expert and output column (over K).
            A_float8 = _axiswise(A, -1, float8_dtype, scaling)
            return grouped_mm(A_float8, _axiswise(B_t, -2, float8_dtype, scaling), offs=offs)

        @staticmethod
        def backward(ctx, grad_output):
            A, B_t, offs = ctx.saved_tensors
            float8_dtype = ctx.float8_dtype
            # grad_A = grad_output (per row, over N) @ B (per expert and input column, over N).
            B = _axiswise(B_t, -1, float8_dtype, scaling).transpose(-2, -1)
            grad_A = grouped_mm(_axiswise(grad_output, -1, float8_dtype, scaling), B, offs=offs)
            # grad_B = grad_output^T @ A per group, both scaled per group and column (over the group's rows).
            groups = B_t.shape[0]
            grad_output_t = _per_group_columns(grad_output, offs, groups, float8_dtype, scaling).t()
            A_float8 = _per_group_columns(A, offs, groups, float8_dtype, scaling)
            grad_B = grouped_mm(grad_output_t, A_float8, offs=offs)
            return grad_A, grad_B.transpose(-2, -1), None, None

    return EmulatedFloat8RowwiseGroupedMM


def emulated_float8_grouped_mm() -> Callable:
    """The CPU emulation of torchao's float8 rowwise grouped GEMM, `fn(A, B_t, offs)` (e4m3, the float8 dtype
    of torchao's default config on NVIDIA GPUs)."""
    function, float8_dtype = _emulated_function(), _torch().float8_e4m3fn

    def emulated_fp8_rowwise_grouped_mm(A, B_t, offs):
        return function.apply(A, B_t, offs, float8_dtype)

    return emulated_fp8_rowwise_grouped_mm


# --- a shape's measurements ---------------------------------------------------------------------------------


class GroupedBench:
    """The operands of one (E, M_per_expert, K, N), shared by its configurations, and the per-configuration
    measurement (`time_step`, as a Linear point)."""

    def __init__(
        self, E: int, M_per_expert: int, K: int, N: int, settings: BenchSettings, timer: Timer | None = None
    ):
        self.shape = (E, M_per_expert, K, N)
        self.settings = settings
        self.timer = timer or settings.timer()
        self.device = "cpu" if self.timer.emulated else "cuda"
        self.operands = make_operands(E, M_per_expert, K, N, device=self.device, seed=settings.seed)
        self._reference = None

    def _leaves(self):
        """Fresh leaf copies of A and the weight that require grad, and B_t, the weight's transposed view."""
        A = self.operands["A"].detach().clone().requires_grad_()
        weight = self.operands["weight"].detach().clone().requires_grad_()
        return A, weight, weight.transpose(-2, -1)

    def reference(self):
        """(output, grad of A, grad of the weight) of eager bf16 `torch._grouped_mm`."""
        if self._reference is None:
            A, weight, B_t = self._leaves()
            output = bf16_grouped_mm(A, B_t, self.operands["offs"])
            output.backward(self.operands["grad_output"])
            self._reference = (output.detach(), A.grad.detach(), weight.grad.detach())
            del A, weight, B_t, output
        return self._reference

    def check(self, output, grad_input, grad_weight) -> dict[str, float]:
        """SQNR of a float8 call's output and gradients against the bf16 reference; not finite fails."""
        reference_output, reference_grad_input, reference_grad_weight = self.reference()
        return checked_sqnr(
            {
                "output": sqnr_db(reference_output, output),
                "grad_input": sqnr_db(reference_grad_input, grad_input),
                "grad_weight": sqnr_db(reference_grad_weight, grad_weight),
            }
        )

    def measure(self, recipe: str) -> Measurement:
        """One configuration: compile call (with the correctness check), warm-up, memory window, profiled
        calls, peak, wall-clock window (`time_step`)."""
        timer = self.timer
        if recipe != BASELINE:
            self.reference()
        timer.release()
        memory_before = timer.memory_allocated()
        function = prepared_function(recipe, emulate=timer.emulated)
        A, weight, B_t = self._leaves()
        offs, grad_output = self.operands["offs"], self.operands["grad_output"]

        def step():
            output = function(A, B_t, offs)
            output.backward(grad_output)
            return output

        return time_step(
            step,
            [A, weight],
            timer=timer,
            settings=self.settings,
            memory_before=memory_before,
            check=(lambda output: self.check(output, A.grad, weight.grad)) if recipe != BASELINE else None,
        )

    def release(self) -> None:
        self.operands = {}
        self._reference = None
        self.timer.release()


def _grouped_shape_bench(shape: tuple[int, int, int, int], settings: BenchSettings) -> GroupedBench:
    return GroupedBench(*shape, settings)  # looked up at call time: tests replace GroupedBench


def precompile_grouped_point(point: GroupedPoint, settings: BenchSettings) -> str | None:
    """Compile `point`'s graph and run it once (in a worker process) so that its caches are warm; the
    failure reason, or None."""
    torch = _torch()
    device = "cpu" if settings.emulate else "cuda"
    function = operands = None
    try:
        operands = make_operands(*point.shape, device=device, seed=settings.seed)
        A = operands["A"].requires_grad_()
        weight = operands["weight"].requires_grad_()
        function = prepared_function(point.recipe, emulate=settings.emulate)
        function(A, weight.transpose(-2, -1), operands["offs"]).backward(operands["grad_output"])
        if not settings.emulate:
            torch.cuda.synchronize()
        return None
    except Exception as error:  # noqa: BLE001 - the measuring process meets it again and records it
        return failure_reason(error)
    finally:
        function = operands = None
        gc.collect()
        if not settings.emulate:
            torch.cuda.empty_cache()


#: The grouped expert GEMM workload of `fp8advisor.measure.sweep.run_sweep`.
GROUPED = Workload(
    name="grouped_mm",
    gpu_method=GPU_METHOD,
    emulated_method=EMULATED_METHOD,
    shape_bench=_grouped_shape_bench,
    precompile=precompile_grouped_point,
    ceilings=False,
)


def with_grouped_defaults(settings: BenchSettings) -> BenchSettings:
    """`settings` without the Linear-only breakdown probes (GEMM-only speedup and cast time per point)."""
    return dataclasses.replace(settings, breakdown=False)


__all__ = [
    "ALIGNMENT",
    "GROUPED",
    "GROUPED_GRIDS",
    "GROUPED_RECIPE",
    "MAX_ELEMENTS",
    "GroupedBench",
    "GroupedGrid",
    "GroupedPoint",
    "emulated_float8_grouped_mm",
    "equal_group_offsets",
    "fits",
    "float8_grouped_mm",
    "make_grouped_grid",
    "make_operands",
    "mx_grouped_mm",
    "precompile_grouped_point",
    "prepared_function",
    "with_grouped_defaults",
]
