"""Measure where float8 training pays on this GPU: torchao's LayerNorm -> Linear -> Sigmoid block, per shape
and recipe.

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
   CPU ops that launched kernels summed, the benchmark's own overhead dropped exactly as torchao 0.18's
   `profiler_output_to_filtered_time_by_kernel_name` (the dropped rows' time is recorded, and the session
   is checked for lost records);
5. peak GPU memory over those profiled calls (`torch.cuda.max_memory_allocated`), minus what the sweep held
   before the configuration was built;
6. wall-clock per call with `triton.testing.do_bench` (L2 flush, CUDA events, median and 20th/80th
   percentiles, at least 5 calls; gradients set to None before each call so accumulation is not timed);
7. where the time goes, per float8 point: GEMM-only speedup (`torch._scaled_mm` against `torch.mm`, the three
   GEMMs of forward + backward) and the time of the recipe's casts, with the kernels of `fp8advisor_kernels`.

How a sweep is laid out (`fp8advisor.measure.schedule`, `fp8advisor.measure.precompile`): compilation
dominates (a cold `torch.compile` of one forward + backward costs seconds to tens of seconds of CPU, a point's
GPU work a fraction of a second even at 32768^3). So the pending points, largest shape first, go in batches:
worker processes pre-compile a batch in parallel (filling inductor's on-disk caches; they never leave
autotuning choices behind), then this process measures it alone on the GPU, its compiles hitting those caches.
A time budget (`--time-budget`) is checked before each batch and each point; `--shard I/N` measures a slice of
the grid. Each point is appended to the run file as soon as it is measured, so a stop, a Ctrl-C or a kill
loses at most the point in flight and the same command resumes.

The default grid is a complete cube, M over {1024, 4096, 8192, 32768} and K and N over {1024, 4096, 32768}
(1024 is the GQA key/value width, 4096 the hidden size of 7-8B models, M = 8192 one sequence of 8192 tokens,
32768 the upper end of the published tables): 36 shapes, 144 configurations; on one H200 it took 7.7 minutes
of sweep in two commands (docs/benchmarks.md). `quick` is a smoke test; `llama` the Llama 3 8B/70B layer
shapes at three token counts; `full` the published 1024..32768 power-of-two cube (216 shapes).

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
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fp8advisor import compat
from fp8advisor.errors import AdvisorError
from fp8advisor.files import DirectoryLock, check_output_directory
from fp8advisor.measure import results as results_store
from fp8advisor.measure.schedule import DurationEstimator, Shard, TimeBudget, batches, sweep_order
from fp8advisor.measure.timers import CompileRecord, CpuTimer, CudaTimer, ProfileSummary, Timer
from fp8advisor.recipes import ALL_RECIPES, BASELINE, float8_config, parse_recipe, sqnr_db

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
    "compile": "torch.compile default mode on the CPU, torchao float8 with emulate=True; the point's compile "
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
class BenchPoint:
    """One configuration: the module at (M, K, N) in bf16 or under a float8 recipe."""

    M: int
    K: int
    N: int
    recipe: str  # "bf16" or a Recipe value

    @property
    def key(self) -> results_store.PointKey:
        return (self.M, self.K, self.N, self.recipe)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.M, self.K, self.N)

    def __str__(self) -> str:
        return f"M={self.M} K={self.K} N={self.N} {self.recipe}"


@dataclass(frozen=True)
class Grid:
    """A named set of (M, K, N) shapes and the recipes measured at each (bf16 first: it is the baseline)."""

    name: str
    shapes: tuple[tuple[int, int, int], ...]
    recipes: tuple[str, ...]

    @classmethod
    def cube(
        cls, name: str, Ms: Iterable[int], Ks: Iterable[int], Ns: Iterable[int], recipes: Sequence[str]
    ) -> Grid:
        shapes = tuple(itertools.product(sorted(set(Ms)), sorted(set(Ks)), sorted(set(Ns))))
        return cls(name=name, shapes=shapes, recipes=_ordered_recipes(recipes))

    def points(self) -> list[BenchPoint]:
        """Shape by shape, bf16 first, in the order the sweep measures them."""
        return [BenchPoint(M, K, N, recipe) for (M, K, N) in self.shapes for recipe in self.recipes]

    def axis(self, name: str) -> list[int]:
        index = "MKN".index(name)
        return sorted({shape[index] for shape in self.shapes})

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "M": self.axis("M"),
            "K": self.axis("K"),
            "N": self.axis("N"),
            "shapes": [list(shape) for shape in self.shapes],
            "recipes": list(self.recipes),
        }


def _ordered_recipes(recipes: Sequence[str]) -> tuple[str, ...]:
    """bf16 first (every float8 point needs its baseline), then the float8 recipes as given, no repeats."""
    names = [BASELINE] + [parse_recipe(str(recipe)).value for recipe in recipes if str(recipe) != BASELINE]
    return tuple(dict.fromkeys(names))


ALL = (BASELINE, *(recipe.value for recipe in ALL_RECIPES))

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


def check_sizes(option: str, values: Sequence[int]) -> None:
    """Raise `AdvisorError` (exit 2) unless `values`, given for a grid axis option, are positive integers."""
    if not values or any(int(value) <= 0 for value in values):
        raise AdvisorError(f"{option} needs positive integers, got {list(values)}")


def make_grid(
    name: str | None = None,
    *,
    M: Sequence[int] | None = None,
    K: Sequence[int] | None = None,
    N: Sequence[int] | None = None,
    recipes: Sequence[str] | None = None,
    emulate: bool = False,
) -> Grid:
    """The named grid (`default`, or `emulated` under --emulate), its axes and recipes overridden where given.

    Overriding any of M, K, N makes the grid the product of the given values, the other axes taken from the
    named grid; bf16 is always measured (it is the baseline).
    """
    if name is None:
        name = "emulated" if emulate else "default"
    if name not in GRIDS:
        raise AdvisorError(f"unknown grid {name!r}", hint=f"use one of: {', '.join(GRIDS)}")
    base = GRIDS[name]
    for axis, values in (("M", M), ("K", K), ("N", N)):
        if values is not None:
            check_sizes(f"--{axis}", values)
    chosen_recipes = _ordered_recipes(recipes) if recipes else base.recipes
    if M is None and K is None and N is None:
        return dataclasses.replace(base, recipes=chosen_recipes)
    return Grid.cube(
        f"{name}+custom",
        M if M is not None else base.axis("M"),
        K if K is not None else base.axis("K"),
        N if N is not None else base.axis("N"),
        chosen_recipes,
    )


@dataclass(frozen=True)
class BenchSettings:
    """How a sweep measures. Iteration counts follow torchao (profiler) and triton (do_bench) defaults."""

    emulate: bool = False
    warmup_iterations: int = 2
    profiled_iterations: int = 5
    wall_warmup_ms: int = 25
    wall_rep_ms: int = 100
    emulated_wall_iterations: int = 5
    #: Processes that pre-compile graphs before timing; None = as many as the CPU allows (0 when emulating).
    compile_workers: int | None = None
    #: Seconds a worker may spend on one configuration before it is killed (its point compiles in the timing
    #: process instead).
    compile_timeout_s: float = 300.0
    #: Measure GEMM-only speedup and cast time per float8 point, and the device ceilings (GPU only).
    breakdown: bool = True
    seed: int = 0

    def worker_count(self, pending_configurations: int) -> int:
        if self.compile_workers is not None:
            return max(0, min(self.compile_workers, pending_configurations))
        if self.emulate:
            return 0
        return max(1, min((os.cpu_count() or 2) - 2, 12, pending_configurations))

    def timer(self) -> Timer:
        if self.emulate:
            return CpuTimer(iterations=self.emulated_wall_iterations)
        return CudaTimer(warmup_ms=self.wall_warmup_ms, rep_ms=self.wall_rep_ms)


# --- raw timings --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """The raw figures of one configuration, kept apart from what was measured (`BenchPoint`)."""

    kernel_time_s: float | None
    wall_time_s: dict[str, float]
    peak_memory_bytes: int | None
    sqnr_db: dict[str, float] | None
    compile: CompileRecord | None = None
    #: The profiler session's bookkeeping (records, padding, dropped rows, suspect); None when emulated.
    profile: ProfileSummary | None = None
    gemm_only_speedup: float | None = None
    cast_overhead_s: float | None = None
    #: Why the breakdown probes failed (the timings above still stand), None when they ran or were not asked.
    breakdown_error: str | None = None


def point_record(
    run_id: str,
    point: BenchPoint,
    *,
    emulated: bool,
    measurement: Measurement | None = None,
    failure: str | None = None,
    duration_s: float | None = None,
    precompiled: str | None = None,
    precompile_s: float | None = None,
) -> dict:
    """The results line of a point (fp8advisor.results/1): ok with a measurement, or failed with a reason.

    `duration_s`: seconds the timing process spent on the point; `precompiled`: the pre-compile worker's
    outcome ("ok" or why not; None when no worker ran); `precompile_s`: the seconds the worker took (its
    compile, cold unless inductor's on-disk cache held the configuration, and one run; None when no worker
    answered)."""
    m = measurement
    return {
        "kind": "point",
        "run_id": run_id,
        "M": point.M,
        "K": point.K,
        "N": point.N,
        "recipe": point.recipe,
        **measurement_fields(measurement, failure),
        "gemm_only_speedup": m.gemm_only_speedup if m else None,
        "cast_overhead_s": m.cast_overhead_s if m else None,
        "breakdown_error": m.breakdown_error if m else None,
        "precompiled": precompiled,
        "precompile_s": precompile_s,
        "duration_s": duration_s,
        "measured_at": results_store.utc_now(),
        "emulated": emulated,
    }


def measurement_fields(measurement: Measurement | None, failure: str | None) -> dict:
    """The fields every measured record carries (grid points and in-context blocks alike): the status and
    reason, the times, peak memory, SQNR, the compile record and the profiler's bookkeeping."""
    m = measurement
    return {
        "status": "failed" if failure is not None else "ok",
        "reason": failure,
        "kernel_time_s": m.kernel_time_s if m else None,
        "wall_time_s": m.wall_time_s if m else None,
        "peak_memory_bytes": m.peak_memory_bytes if m else None,
        "sqnr_db": m.sqnr_db if m else None,
        "compile": m.compile.to_json() if m and m.compile else None,
        "profiler": m.profile.to_json() if m and m.profile else None,
    }


def failure_reason(error: BaseException) -> str:
    """One line saying why a point failed: the exception type and the first line of its message."""
    text = str(error).strip().splitlines()
    first = text[0] if text else ""
    reason = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return reason[:500]


# --- the workload -------------------------------------------------------------------------------------------


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
    """A deep copy of `base`, converted to float8 training under `recipe` unless it is bf16 (not compiled)."""
    module = copy.deepcopy(base)
    if recipe == BASELINE:
        return module
    from torchao.float8 import convert_to_float8_training

    return convert_to_float8_training(module, config=float8_config(recipe, emulate=emulate))


def compile_module(module, backend: str = "inductor"):
    """`torch.compile` in default mode after `torch._dynamo.reset()`, as torchao's benchmark does (`backend`:
    "aot_eager" for the in-context emulation, which skips inductor's code generation)."""
    compat.dynamo_reset()
    return _torch().compile(module, backend=backend)


def time_step(
    step: Callable[[], object],
    grads: list,
    *,
    timer: Timer,
    settings: BenchSettings,
    memory_before: int | None,
    check: Callable[[object], dict[str, float]] | None = None,
) -> Measurement:
    """The protocol of one compiled configuration, grid point or in-context block alike: the first call
    (compile), `check(output)` on it (float8: SQNR against bf16; None for bf16), warm-up, the memory window,
    the profiled calls, the peak (less `memory_before`) and the wall-clock window (`grads` set to None
    before each call)."""
    output, compile_record = timer.first_call(step)
    sqnr = check(output) if check is not None else None
    del output
    call_s = min(timer.time_call(step) for _ in range(max(1, settings.warmup_iterations)))
    timer.open_memory_window()
    profile = timer.kernel_time(step, settings.profiled_iterations)
    peak = timer.window_peak()
    wall = timer.wall_time(step, grads, call_s)
    return Measurement(
        kernel_time_s=profile.kernel_time_s if profile else None,
        wall_time_s=wall,
        peak_memory_bytes=None if peak is None or memory_before is None else peak - memory_before,
        sqnr_db=sqnr,
        compile=compile_record,
        profile=profile,
    )


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
        sqnr = {
            "output": sqnr_db(reference_output, output),
            "grad_input": sqnr_db(reference_grad, grad_input),
        }
        if not all(math.isfinite(value) or value == math.inf for value in sqnr.values()):
            raise FloatingPointError(f"float8 result is not finite (SQNR {sqnr})")
        return sqnr

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
        if not timer.emulated and recipe != BASELINE and settings.breakdown:
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


# --- pre-compilation (run in worker processes: fp8advisor.measure.precompile)
# ---------------------------------------


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


def worker_memory_budget(workers: int) -> float:
    """GPU bytes the pre-compiling workers share: 85% of what is free, less a CUDA context and allocator
    slack per worker, and never under a quarter of what is free."""
    torch = _torch()
    torch.cuda.empty_cache()  # what this process cached (the ceilings' buffers) is free for workers
    free, _total = torch.cuda.mem_get_info()
    context_bytes = 1 << 30
    return max(free * 0.85 - workers * context_bytes, free * 0.25)


# --- what a sweep measures ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What `run_sweep` measures at each point, so that one sweep machinery (order, batches, pre-compiling
    workers, time budget, resume, results files) serves every workload: this module's Linear block and the
    grouped expert GEMMs of `fp8advisor.measure.grouped`.

    `shape_bench(shape, settings)` builds the tensors of one shape, shared by its configurations: an object
    with `measure(recipe) -> Measurement` and `release()`. `record` makes a point's results line (the
    signature of `point_record`); `precompile(point, settings)` warms a worker's caches (a module-level
    function: spawned workers receive it by name). `ceilings`: measure the device's matmul rates and bandwidth
    into the run header (GPU, with `BenchSettings.breakdown`)."""

    name: str
    gpu_method: Mapping[str, object]
    emulated_method: Mapping[str, object]
    shape_bench: Callable[[tuple, BenchSettings], object]
    record: Callable[..., dict]
    precompile: Callable[[object, BenchSettings], str | None]
    ceilings: bool = True

    def method(self, emulate: bool) -> dict:
        return dict(self.emulated_method if emulate else self.gpu_method)


def _linear_shape_bench(shape: tuple[int, int, int], settings: BenchSettings) -> ShapeBench:
    return ShapeBench(*shape, settings)  # looked up at call time: tests replace ShapeBench


#: torchao's LayerNorm -> Linear -> Sigmoid block (this module).
LINEAR = Workload(
    name="linear",
    gpu_method=GPU_METHOD,
    emulated_method=EMULATED_METHOD,
    shape_bench=_linear_shape_bench,
    record=point_record,
    precompile=precompile_point,
)


# --- the sweep ----------------------------------------------------------------------------------------------


@dataclass
class SweepSummary:
    """What a sweep did: `records` are the points this run wrote, `runs` this run and those it continues."""

    grid: Grid
    path: Path | None
    run_id: str | None
    total_points: int  # of the grid, or of the shard
    skipped_points: int  # already saved by the runs this one continues
    records: list[dict] = field(default_factory=list)
    runs: list[results_store.Run] = field(default_factory=list)
    resumed_from: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    interrupted: bool = False
    shard: Shard | None = None
    time_budget_s: float | None = None
    #: The time budget stopped the sweep before every pending point was measured.
    stopped_by_budget: bool = False
    #: Points whose pre-compilation failed, timed out or was cut, with the reason.
    not_precompiled: dict[results_store.PointKey, str] = field(default_factory=dict)
    #: Earlier results files and lines the resume could not read ("file:line: why"); their points are
    #: measured again.
    unreadable: list[str] = field(default_factory=list)

    @property
    def ok(self) -> int:
        return sum(record["status"] == "ok" for record in self.records)

    @property
    def failed(self) -> int:
        return sum(record["status"] == "failed" for record in self.records)

    @property
    def saved_points(self) -> int:
        """Points on disk for this grid (or shard): earlier runs' and this one's."""
        return self.skipped_points + len(self.records)

    @property
    def left_points(self) -> int:
        return self.total_points - self.saved_points

    @property
    def cold_compiles(self) -> int:
        """Points of this run whose compile in the timing process missed inductor's cache."""
        return sum(bool((record.get("compile") or {}).get("cold")) for record in self.records)

    @property
    def suspect(self) -> list[dict]:
        """Points of this run whose profiler session may have lost records."""
        return [record for record in self.records if results_store.suspect_reason(record)]


class SweepInterrupted(Exception):
    """Ctrl-C during a sweep: the points measured so far are on disk; `summary` says how many."""

    def __init__(self, summary: SweepSummary):
        super().__init__("sweep interrupted")
        self.summary = summary


#: on_progress(stage, completed, total, description); stage is "compile" or "measure".
ProgressCallback = Callable[[str, int, int, str], None]


def run_sweep(
    grid: Grid,
    out_dir: Path,
    settings: BenchSettings = BenchSettings(),
    *,
    shard: Shard | None = None,
    time_budget_s: float | None = None,
    started: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_progress: ProgressCallback | None = None,
    on_point: Callable[[dict], None] | None = None,
    workload: Workload = LINEAR,
) -> SweepSummary:
    """Measure every point of `grid` (or of its `shard`) not already in `out_dir` (resume), appending each to
    a new run file (`workload`: what a point is; torchao's Linear block by default); with `time_budget_s`,
    stop before a point that would not finish inside the budget, counted from `started` (a `clock` reading;
    default: now).

    Raises `DeviceError` without an FP8-capable GPU (unless emulating), `AdvisorError` when `out_dir` cannot
    be written or another sweep is writing to it (`DirectoryLock`), and `SweepInterrupted` on Ctrl-C.
    """
    from fp8advisor.device import require_fp8_gpu

    budget = TimeBudget(time_budget_s, clock() if started is None else started, clock)
    if not settings.emulate:
        require_fp8_gpu()
    out_dir = Path(out_dir)
    check_output_directory(out_dir)
    # One sweep per directory at a time: two would both measure the points neither has saved yet.
    with DirectoryLock(out_dir, what="bench"):
        return _run_locked(
            grid, out_dir, settings, shard, time_budget_s, budget, on_progress, on_point, workload
        )


def _run_locked(
    grid, out_dir, settings, shard, time_budget_s, budget, on_progress, on_point, workload
) -> SweepSummary:
    """`run_sweep`'s work, with `out_dir` locked: read what is saved, measure the rest into a new run file."""
    from fp8advisor.device import describe_device, software_versions

    progress = on_progress or (lambda stage, completed, total, description: None)
    header = results_store.make_header(
        run_id=results_store.new_run_id(),
        started=results_store.utc_now(),
        device=describe_device(emulate=settings.emulate),
        software=software_versions(),
        method=workload.method(settings.emulate),
        grid=grid.to_json(),
        shard=shard.to_json() if shard else None,
        time_budget_s=time_budget_s,
    )
    unreadable: list[str] = []
    earlier = results_store.resumable_runs(out_dir, header, unreadable)
    done = results_store.done_keys(earlier)
    points = shard.select(grid.points()) if shard else grid.points()
    pending = sweep_order([point for point in points if point.key not in done])
    summary = SweepSummary(
        grid=grid,
        path=None,
        run_id=None,
        total_points=len(points),
        skipped_points=len(points) - len(pending),
        runs=list(earlier),
        resumed_from=[run.run_id for run in earlier],
        shard=shard,
        time_budget_s=time_budget_s,
        unreadable=unreadable,
    )
    if not pending:
        summary.elapsed_s = budget.elapsed()
        return summary

    header["resumes"] = summary.resumed_from
    if not settings.emulate and settings.breakdown and workload.ceilings:
        from fp8advisor_kernels.timing import measure_ceilings

        try:
            header["ceilings"] = measure_ceilings()
        except KeyboardInterrupt:
            summary.interrupted = True
            raise SweepInterrupted(summary) from None
        except Exception as error:  # noqa: BLE001 - the ceilings are auxiliary: say why, measure the grid
            header["ceilings"] = {"error": failure_reason(error)}
    writer = results_store.RunWriter.create(out_dir, header)
    summary.path, summary.run_id = writer.path, header["run_id"]
    estimator = DurationEstimator()
    estimator.observe_records(point for run in earlier for point in run.points)
    sweep = _Sweep(
        settings, header["run_id"], writer, summary, budget, estimator, progress, on_point, workload
    )
    threads = _torch().get_num_threads()
    if settings.emulate:
        # One CPU thread, compile and timing alike: on a busy CPU, OpenMP barriers stall for tens of
        # milliseconds now and then, which turns tiny emulated timings bimodal. (Inductor's C++ kernels
        # specialise on the thread count, so it must not change between compiling and timing.)
        _torch().set_num_threads(1)
    try:
        sweep.run(pending)
    except KeyboardInterrupt:
        summary.interrupted = True
        raise SweepInterrupted(summary) from None
    finally:
        _torch().set_num_threads(threads)
        sweep.close()
        writer.close()
        summary.elapsed_s = budget.elapsed()
        summary.runs = list(earlier) + [results_store.read_run(writer.path)]
    return summary


class _Sweep:
    """One run's loop over its pending points: batches of pre-compilation then measurement, under a budget."""

    def __init__(self, settings, run_id, writer, summary, budget, estimator, progress, on_point, workload):
        self.settings, self.run_id, self.writer, self.summary = settings, run_id, writer, summary
        self.workload = workload
        self.budget, self.estimator, self.progress, self.on_point = budget, estimator, progress, on_point
        self.precompiler = None
        self.precompiled: dict[results_store.PointKey, str] = {}  # point key -> "ok" or why not
        self.precompile_s: dict[results_store.PointKey, float | None] = {}  # the worker's seconds
        self.compiled = self.measured = self.total = 0

    def run(self, pending: list[BenchPoint]) -> None:
        self.total = len(pending)
        workers = self.settings.worker_count(len(pending))
        if workers:
            from fp8advisor.measure.precompile import Precompiler

            self.precompiler = Precompiler(
                workers,
                self.settings,
                timeout_s=self.settings.compile_timeout_s,
                task=self.workload.precompile,
                memory_budget_bytes=None if self.settings.emulate else worker_memory_budget(workers),
                clock=self.budget.clock,
            )
            self.progress("compile", 0, self.total, f"compiling in {workers} worker processes")
        self.progress("measure", 0, self.total, "measuring")
        for batch in batches(pending, 2 * workers if workers else len(pending)):
            first_estimate = self.estimator.estimate(batch[0].recipe, precompiled=bool(workers))
            if not self.budget.allows(first_estimate):
                self.summary.stopped_by_budget = True
                return
            if self.precompiler is not None:
                self._precompile(batch, deadline=self.budget.deadline(first_estimate))
            if not self._measure(batch):
                self.summary.stopped_by_budget = True
                return

    def _precompile(self, batch: list[BenchPoint], deadline: float | None) -> None:
        def compiled(point: BenchPoint, reason: str | None, seconds: float | None) -> None:
            self.compiled += 1
            self.precompiled[point.key] = "ok" if reason is None else reason
            self.precompile_s[point.key] = seconds
            if reason is not None:
                self.summary.not_precompiled[point.key] = reason
            # A failed warm-up is measured (and recorded) later; show it: a cold compile costs time.
            description = f"{point}: {reason}" if reason else str(point)
            self.progress("compile", self.compiled, self.total, description)

        self.precompiler.run(batch, compiled, deadline=deadline)

    def _measure(self, batch: list[BenchPoint]) -> bool:
        """Measure `batch` shape by shape; False when the budget stopped it."""
        for shape, shape_points in itertools.groupby(batch, key=lambda point: point.shape):
            bench = None
            try:
                for point in shape_points:
                    precompiled = self.precompiled.get(point.key)
                    estimate = self.estimator.estimate(point.recipe, precompiled=precompiled == "ok")
                    if not self.budget.allows(estimate):
                        return False
                    self.progress("measure", self.measured, self.total, str(point))
                    started = self.budget.clock()
                    measurement = failure = None
                    try:
                        if bench is None:
                            bench = self.workload.shape_bench(shape, self.settings)
                        measurement = bench.measure(point.recipe)
                    except Exception as error:  # noqa: BLE001 - OOM, compile errors...: record it and go on
                        failure = failure_reason(error)
                    duration = self.budget.clock() - started
                    if failure is not None:  # outside the except block, whose traceback held the tensors
                        gc.collect()
                    self._record(point, measurement, failure, duration, precompiled)
            finally:
                if bench is not None:
                    bench.release()
        return True

    def _record(self, point, measurement, failure, duration, precompiled) -> None:
        record = self.workload.record(
            self.run_id,
            point,
            emulated=self.settings.emulate,
            measurement=measurement,
            failure=failure,
            duration_s=duration,
            precompiled=precompiled,
            precompile_s=self.precompile_s.get(point.key),
        )
        self.writer.append(record)
        self.summary.records.append(record)
        self.estimator.observe(point.recipe, precompiled == "ok", duration)
        self.measured += 1
        if self.on_point is not None:
            self.on_point(record)
        self.progress("measure", self.measured, self.total, str(point))

    def close(self) -> None:
        if self.precompiler is not None:
            self.precompiler.close()
            self.precompiler = None


__all__ = [
    "GRIDS",
    "LINEAR",
    "BenchPoint",
    "BenchSettings",
    "Grid",
    "Measurement",
    "ShapeBench",
    "SweepInterrupted",
    "SweepSummary",
    "make_grid",
    "measurement_fields",
    "point_record",
    "precompile_point",
    "run_sweep",
    "time_step",
    "Workload",
]
