"""Measure where float8 training pays on this GPU: torchao's LayerNorm -> Linear -> Sigmoid block, per shape
and recipe (the Linear workload of `fp8advisor.measure.sweep`).

What is measured (the method torchao publishes, `benchmarks/float8/float8_roofline.py
--enable_fusion_modeling`): `LayerNorm(K, elementwise_affine=False) -> Linear(K, N, bias=False) -> Sigmoid` in
bf16, forward then backward with a random grad_output, for bf16 and for each float8 recipe converted with
`convert_to_float8_training(copy, config=Float8LinearConfig.from_recipe_name(recipe))`, all under
`torch.compile` (default mode, after `torch._dynamo.reset()`). Per point, in this order (`ShapeBench.measure`,
on the timers of `fp8advisor.measure.timers`):

1. the first call, timed, with the inductor / AOTAutograd cache counters around it: the compile record;
2. for float8, a correctness check on that call: SQNR of the output and input gradient against the eager
   bf16 module;
3. 2 warm-up calls, then the memory window opens (everything of steps 1-2 freed, peak statistics reset);
4. GPU kernel time with `torch.profiler`: 5 profiled calls in one padded session, the self GPU time of the
   CPU ops that launched kernels summed, the benchmark's own overhead dropped as torchao 0.18's
   `profiler_output_to_filtered_time_by_kernel_name` does (the dropped rows' time is recorded, and the session
   is checked for lost records), and runtime-API rows left out (a correlation-id collision lends them other
   ops' kernels; `timers.RUNTIME_API_ROW`);
5. peak GPU memory over those profiled calls (`torch.cuda.max_memory_allocated`), minus what the sweep held
   before the configuration was built;
6. wall-clock per call with `triton.testing.do_bench` (L2 flush, CUDA events, median and 20th/80th
   percentiles, at least 5 calls; gradients set to None before each call so accumulation is not timed);
7. where the time goes, per float8 point: GEMM-only speedup (`torch._scaled_mm` against `torch.mm`, the three
   GEMMs of forward + backward) and the time of the recipe's casts, with the kernels of `fp8advisor_kernels`.

The default grid is a complete cube, M over {1024, 4096, 8192, 32768} and K and N over {1024, 4096, 32768}
(1024 is the GQA key/value width, 4096 the hidden size of 7-8B models, M = 8192 one sequence of 8192 tokens,
32768 the upper end of the published tables): 36 shapes, 144 configurations; on one H200 it took 7.7 minutes
of sweep in two commands (docs/benchmarks.md). `quick` is a smoke test; `llama` the Llama 3 8B/70B layer
shapes at three token counts; `full` the published 1024..32768 power-of-two cube (216 shapes).

MXFP8 recipes (`mxfp8_rceil`, `mxfp8_rceil_wgrad_with_hp`; Blackwell, compute capability 10.x) go through the
same steps, the Linear converted with torchao 0.18's `quantize_(..., MXFP8TrainingOpConfig.from_recipe(...))`
(`recipes.convert_linears`); step 7 is skipped for them (its probes time `torch._scaled_mm` and float8 casts).
K and N must be multiples of 32 for them (`recipe_support`); on another GPU they are refused before measuring.

`--emulate` runs the same pipeline on the CPU with torchao's emulated float8 on a tiny grid, timing wall-clock
with `time.perf_counter` only; every record says `"emulated": true` and `fit` refuses such runs for a real
profile.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gc
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

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
    check_linear_dims,
    check_recipes_on_device,
    default_recipes,
    is_mx,
)
from fp8advisor.measure.results import LINEAR_AXES
from fp8advisor.measure.timers import Timer
from fp8advisor.measure.workload import Point, ShapeGrid, Workload, check_point_count, check_sizes
from fp8advisor.recipes import BASELINE, FLOAT8_RECIPES, convert_linears, parse_recipe, sqnr_db

WORKLOAD = "LayerNorm(K, elementwise_affine=False) -> Linear(K, N, bias=False) -> Sigmoid, bf16, fwd+bwd"

GPU_METHOD = {
    "workload": WORKLOAD,
    "compile": "torch.compile default mode, torch._dynamo.reset() before each configuration; pre-compiled in "
    "worker processes (autotune_local_cache off); the point's compile record: seconds of the first call in "
    "the timing process, with inductor FX-graph and AOTAutograd cache hits/misses",
    "kernel_time": "torch.profiler: compile call + 2 warm-up, then 5 profiled iterations in one session "
    "padded with k+16 torch.cuda._sleep kernels (k-th session), sum of GPU kernel time, grad-accumulation "
    "add_/sum, syncs and Unrecognized rows dropped as torchao 0.18 float8_roofline.py (their time recorded)",
    "wall_time": "CUDA events per iteration after warm-up, L2 flushed, median and 20th/80th percentiles, "
    "at least 5 iterations (triton.testing.do_bench)",
    "correctness": "SQNR (dB) of float8 output and input gradient against the eager bf16 module",
    "peak_memory": "torch.cuda.max_memory_allocated over the profiled iterations only (peak statistics reset "
    "after compile and correctness check), minus memory held before the configuration was built",
    "breakdown": "gemm_only_speedup: the 3 GEMMs of fwd+bwd, torch.mm vs torch._scaled_mm; cast_overhead_s: "
    "the recipe's dynamic-quantization kernels, unfused (fp8advisor_kernels); do_bench medians",
}

EMULATED_METHOD = {
    "workload": WORKLOAD,
    "compile": "torch.compile default mode on the CPU, torchao float8 with emulate=True (MXFP8: "
    "KernelPreference.EMULATED); the point's compile "
    "record: seconds of the first call, with inductor FX-graph and AOTAutograd cache hits/misses",
    "kernel_time": None,
    "wall_time": "EMULATED on the CPU, one thread: time.perf_counter per iteration, compile call + 2 warm-up "
    "+ 5 timed iterations, median and 20th/80th percentiles",
    "correctness": "SQNR (dB) of float8 output and input gradient against the eager bf16 module",
    "peak_memory": None,
    "breakdown": None,
}

# --- what is measured ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchPoint(Point):
    """One configuration: the module at (M, K, N) in bf16 or under a float8 recipe."""

    AXES = LABELS = LINEAR_AXES

    M: int
    K: int
    N: int
    recipe: str  # "bf16" or a Recipe value


@dataclass(frozen=True)
class Grid(ShapeGrid):
    """A named set of (M, K, N) shapes and the recipes measured at each (bf16 first: it is the baseline)."""

    POINT = BenchPoint

    @property
    def workload(self) -> Workload:
        return LINEAR

    @classmethod
    def cube(
        cls, name: str, Ms: Iterable[int], Ks: Iterable[int], Ns: Iterable[int], recipes: Sequence[str]
    ) -> Grid:
        shapes = tuple(itertools.product(sorted(set(Ms)), sorted(set(Ks)), sorted(set(Ns))))
        return cls(name=name, shapes=shapes, recipes=_ordered_recipes(recipes))


def _ordered_recipes(recipes: Sequence[str]) -> tuple[str, ...]:
    """bf16 first (every float8 point needs its baseline), then the float8 recipes as given, no repeats."""
    names = [BASELINE] + [parse_recipe(str(recipe)).value for recipe in recipes if str(recipe) != BASELINE]
    return tuple(dict.fromkeys(names))


#: The named grids' recipes: bf16 and the float8 recipes (MXFP8 joins them on Blackwell: `make_grid`).
ALL = (BASELINE, *(recipe.value for recipe in FLOAT8_RECIPES))


#: Llama 3 layer widths (K, N): 8B q/o, k/v, w1/w3, w2; 70B q/o, k/v, w1/w3, w2.
LLAMA3_8B_LAYERS = ((4096, 4096), (4096, 1024), (4096, 14336), (14336, 4096))
LLAMA3_70B_LAYERS = ((8192, 8192), (8192, 1024), (8192, 28672), (28672, 8192))


#: The default grid, a complete cube so that `fit` interpolates it on a regular grid: M over 1024, 4096, 8192
#: (seq 8192, today's most common tokens per GPU) and 32768; K and N over 1024 (GQA key/value width), 4096 and
#: 32768. 36 shapes x (bf16 + 3 recipes) = 144 configurations: about 10 to 13 minutes on one H100 by design
#: estimate, measured in two or three `--time-budget 540` commands under a 10-minute job limit (see
#: docs/benchmarks.md). Interpolating the published H100 rowwise table from just these 36 shapes predicts its
#: other 180 points with a median error of 5.4% and the right side of 1.0x for 95% of them
#: (tests/test_bench.py checks this).
DEFAULT_M = (1024, 4096, 8192, 32768)
DEFAULT_KN = (1024, 4096, 32768)


GRIDS: dict[str, Grid] = {
    "quick": Grid.cube("quick", (1024, 8192), (1024, 8192), (1024, 8192), ALL),
    "default": Grid.cube("default", DEFAULT_M, DEFAULT_KN, DEFAULT_KN, ALL),
    "llama": Grid(
        name="llama",
        shapes=tuple(
            (M, K, N) for M in (4096, 8192, 16384) for (K, N) in LLAMA3_8B_LAYERS + LLAMA3_70B_LAYERS
        ),
        recipes=ALL,
    ),
    "full": Grid.cube("full", *([tuple(2**power for power in range(10, 16))] * 3), ALL),
    # --emulate: tiny (4 shapes, 16 graphs), as each graph costs seconds to compile on a CPU.
    "emulated": Grid.cube("emulated", (64,), (32, 64), (32, 64), ALL),
}


def make_grid(
    name: str | None = None,
    *,
    M: Sequence[int] | None = None,
    K: Sequence[int] | None = None,
    N: Sequence[int] | None = None,
    recipes: Sequence[str] | None = None,
    emulate: bool = False,
    capability: tuple[int, int] | None = None,
) -> Grid:
    """The named grid (`default`, or `emulated` under --emulate), its axes and recipes overridden where given.

    Overriding any of M, K, N makes the grid the product of the given values, the other axes taken from the
    named grid; bf16 is always measured (it is the baseline). `capability`: the GPU's (None: emulated or
    unknown): without --recipes the grid measures what that GPU supports (`recipe_support.default_recipes`:
    MXFP8 joins on 10.x), and an MXFP8 recipe on another GPU, or with a K or N not a multiple of 32 (for
    mxfp8_rceil, an M), is refused (exit 2) before anything is measured.
    """
    if name is None:
        name = "emulated" if emulate else "default"
    if name not in GRIDS:
        raise AdvisorError(f"unknown grid {name!r}", hint=f"use one of: {', '.join(GRIDS)}")
    base = GRIDS[name]
    for axis, values in (("M", M), ("K", K), ("N", N)):
        if values is not None:
            check_sizes(f"--{axis}", values)
    if recipes:
        chosen_recipes = _ordered_recipes(recipes)
    else:
        chosen_recipes = default_recipes(base.recipes, capability, emulate=emulate)
    check_recipes_on_device(chosen_recipes, None if emulate else capability)
    axes = [
        values if values is not None else base.axis(axis) for axis, values in (("M", M), ("K", K), ("N", N))
    ]
    check_linear_dims(axes[1], axes[2], chosen_recipes, Ms=axes[0])
    if M is None and K is None and N is None:
        return dataclasses.replace(base, recipes=chosen_recipes)
    check_point_count(axes, chosen_recipes)
    return Grid.cube(f"{name}+custom", *axes, chosen_recipes)


# --- the module and its tensors -----------------------------------------------------------------------------


def _torch():
    import torch

    return torch


@functools.cache
def _module_class():
    torch = _torch()

    class LNLinearSigmoid(torch.nn.Module):
        """torchao benchmarks/float8/float8_roofline.py's module: the Linear between the ops it fuses with."""

        def __init__(self, fc_dim1: int, fc_dim2: int):
            super().__init__()
            self.ln = torch.nn.LayerNorm(fc_dim1, elementwise_affine=False)
            self.fc = torch.nn.Linear(fc_dim1, fc_dim2, bias=False)
            self.sigmoid = torch.nn.Sigmoid()

        def forward(self, x):
            return self.sigmoid(self.fc(self.ln(x)))

    return LNLinearSigmoid


def build_module(K: int, N: int, *, device: str, seed: int):
    """torchao's `LNLinearSigmoid(K, N)` in bf16, built on `device` (initialising a 32768^2 weight on the CPU
    would take seconds per shape), weights drawn from `seed`."""
    torch = _torch()
    torch.manual_seed(seed)
    with torch.device(device):
        return _module_class()(K, N).bfloat16()


def make_inputs(M: int, K: int, N: int, *, device: str, seed: int):
    """x (M, K) with requires_grad and a random grad_output (M, N), bf16, drawn on `device` from `seed`."""
    torch = _torch()
    generator = torch.Generator(device=device).manual_seed(seed + 1)
    x = torch.randn(M, K, dtype=torch.bfloat16, device=device, generator=generator).requires_grad_()
    grad_output = torch.randn(M, N, dtype=torch.bfloat16, device=device, generator=generator)
    return x, grad_output


def prepare_module(base, recipe: str, *, emulate: bool):
    """A deep copy of `base`, its Linear converted as torchao does for `recipe` (`recipes.convert_linears`:
    Float8Linear for float8, the MXFP8 training weight for MXFP8, EMULATED kernels under `emulate`) unless
    it is bf16 (not compiled)."""
    module = copy.deepcopy(base)
    if recipe == BASELINE:
        return module
    return convert_linears(module, recipe, lambda _module, _fqn: True, emulate=emulate)


# --- a shape's measurements ---------------------------------------------------------------------------------


class ShapeBench:
    """The tensors of one (M, K, N), shared by its configurations, and the per-configuration measurement."""

    def __init__(self, M: int, K: int, N: int, settings: BenchSettings, timer: Timer | None = None):
        self.M, self.K, self.N = M, K, N
        self.settings = settings
        self.timer = timer or settings.timer()
        self.device = "cpu" if self.timer.emulated else "cuda"
        self.base = build_module(K, N, device=self.device, seed=settings.seed)
        self.x, self.grad_output = make_inputs(M, K, N, device=self.device, seed=settings.seed)
        self._reference = None
        self._probe_cache: dict = {}

    def reference(self):
        """(output, grad of x) of the eager bf16 module: what the float8 results are checked against."""
        if self._reference is None:
            module = copy.deepcopy(self.base)
            x = self.x.detach().clone().requires_grad_()
            y = module(x)
            y.backward(self.grad_output)
            self._reference = (y.detach(), x.grad.detach())
            del module, x, y
        return self._reference

    def check(self, output, grad_input) -> dict[str, float]:
        """SQNR of a float8 call's output and input gradient against the bf16 reference; not finite fails."""
        reference_output, reference_grad = self.reference()
        return checked_sqnr(
            {
                "output": sqnr_db(reference_output, output),
                "grad_input": sqnr_db(reference_grad, grad_input),
            }
        )

    def measure(self, recipe: str) -> Measurement:
        """One configuration, in the order of the module docstring: compile call (with the correctness
        check), warm-up, memory window, profiled calls, peak, wall-clock window, breakdown."""
        timer, settings = self.timer, self.settings
        if recipe != BASELINE:
            self.reference()  # computed on first use, before the configuration's memory is counted
        timer.release()  # the previous configuration's compiled graphs (and all they hold) go now
        memory_before = timer.memory_allocated()
        module = compile_module(prepare_module(self.base, recipe, emulate=timer.emulated))
        x = self.x.detach().clone().requires_grad_()
        grad_output = self.grad_output

        def step():
            y = module(x)
            y.backward(grad_output)
            return y

        measurement = time_step(
            step,
            [x, *module.parameters()],
            timer=timer,
            settings=settings,
            memory_before=memory_before,
            check=(lambda output: self.check(output, x.grad)) if recipe != BASELINE else None,
        )
        # the probes time torch._scaled_mm and fp8advisor's own float8 casts: none of MXFP8's kernels
        if not timer.emulated and recipe != BASELINE and settings.breakdown and not is_mx(recipe):
            try:
                breakdown = self._breakdown(recipe)
            except Exception as error:  # noqa: BLE001 - a failed probe must not discard the point's times
                breakdown = {"breakdown_error": failure_reason(error)}
            measurement = dataclasses.replace(measurement, **breakdown)
        return measurement

    def _breakdown(self, recipe: str) -> dict:
        """GEMM-only speedup and cast time of `recipe` at this shape (GPU), probes shared by the shape's
        recipes."""
        from fp8advisor_kernels import timing

        # A smaller do_bench budget than the module's timing: these 18 or so probes per shape are a breakdown,
        # and each GEMM or cast is a single kernel, steady after a few calls.
        probe = {"device": self.device, "cache": self._probe_cache, "warmup_ms": 10, "rep_ms": 40}
        bf16_total, float8_total = timing.gemm_times(self.M, self.K, self.N, recipe, **probe)
        cast_total = timing.cast_times(self.M, self.K, self.N, recipe, **probe)
        return {"gemm_only_speedup": bf16_total / float8_total, "cast_overhead_s": cast_total}

    def release(self) -> None:
        self.base = self.x = self.grad_output = self._reference = None
        self.timer.release()


# --- pre-compilation (run in worker processes: fp8advisor.measure.precompile) -------------------------------


def precompile_point(point: BenchPoint, settings: BenchSettings) -> str | None:
    """Compile `point`'s graph and run it once so that its caches are warm; the failure reason, or None.

    Runs in a worker process. Failures are only reported: the measuring process meets them again and records
    them.
    """
    device = "cpu" if settings.emulate else "cuda"
    try:
        base = build_module(point.K, point.N, device=device, seed=settings.seed)
        x, grad_output = make_inputs(point.M, point.K, point.N, device=device, seed=settings.seed)
        module = compile_module(prepare_module(base, point.recipe, emulate=settings.emulate))
        module(x).backward(grad_output)
        if not settings.emulate:
            _torch().cuda.synchronize()
        return None
    except Exception as error:  # noqa: BLE001 - any failure is the measuring process's to record
        return failure_reason(error)
    finally:
        base = x = grad_output = module = None
        gc.collect()
        if not settings.emulate:
            _torch().cuda.empty_cache()


def _linear_shape_bench(shape: tuple[int, int, int], settings: BenchSettings) -> ShapeBench:
    return ShapeBench(*shape, settings)  # looked up at call time: tests replace ShapeBench


#: torchao's LayerNorm -> Linear -> Sigmoid block (this module).
LINEAR = Workload(
    name="linear",
    gpu_method=GPU_METHOD,
    emulated_method=EMULATED_METHOD,
    shape_bench=_linear_shape_bench,
    precompile=precompile_point,
)


__all__ = [
    "ALL",
    "EMULATED_METHOD",
    "GPU_METHOD",
    "GRIDS",
    "LINEAR",
    "BenchPoint",
    "Grid",
    "ShapeBench",
    "build_module",
    "make_grid",
    "make_inputs",
    "precompile_point",
    "prepare_module",
]
