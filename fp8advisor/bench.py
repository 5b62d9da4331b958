"""Measure where float8 training pays on this GPU: torchao's LayerNorm -> Linear -> Sigmoid block, per shape
and recipe.

What is measured (the method torchao publishes, `benchmarks/float8/float8_roofline.py
--enable_fusion_modeling`): `LayerNorm(K, elementwise_affine=False) -> Linear(K, N, bias=False) -> Sigmoid` in
bf16, forward then backward with a random grad_output, for bf16 and for each float8 recipe converted with
`convert_to_float8_training(copy, config=Float8LinearConfig.from_recipe_name(recipe))`, all under
`torch.compile` (default mode, after `torch._dynamo.reset()`). Per point:

- a correctness check first: SQNR of the float8 output and input gradient against the bf16 module (eager);
- GPU kernel time with `torch.profiler`: 2 warm-up + 5 profiled iterations, the self GPU time of the CPU ops
  that launched kernels summed, the benchmark's own overhead (gradient accumulation `aten::add_`, `aten::sum`,
  device syncs, the profiler's own "Activity Buffer Request" and "Unrecognized" rows) dropped, exactly as
  torchao 0.18's `profiler_output_to_filtered_time_by_kernel_name`;
- peak GPU memory of the configuration over its compile, correctness check and profiled iterations
  (`torch.cuda.max_memory_allocated` after a reset, minus what the sweep held before the configuration
  started; read before do_bench, whose 256 MB L2-flush buffer is not the configuration's);
- wall-clock per iteration with `triton.testing.do_bench` (warm-up, L2 flush, CUDA events, median and
  20th/80th percentiles; gradients set to None before each call so accumulation is not timed);
- where the time goes, per float8 point: GEMM-only speedup (`torch._scaled_mm` against `torch.mm`, the three
  GEMMs of forward + backward) and the time of the recipe's casts, with the kernels of `fp8advisor_kernels`.

Why the sweep is laid out as it is (the 10-minute budget for the default grid on one H100):
compilation dominates. A cold `torch.compile` of one forward + backward costs seconds of CPU (inductor codegen
and Triton compilation of each kernel), roughly twice as much for a float8 graph as for bf16, while the GPU
work of a point is a fraction of a second even at 32768^3. So the sweep runs in two phases:

1. Pre-compile. Spawned worker processes (one CPU core each, `compile_threads=1`, as many as the cores allow
   less two) compile every pending (shape, recipe) graph and run it once, which fills inductor's FX-graph and
   AOTAutograd caches, the Triton kernel cache and the pointwise autotuning results on disk. Workers share the
   GPU only with each other, never with a timing, and take GPU memory from a shared budget (estimated per
   shape) so that the 32768-wide shapes do not run out of memory together.
2. Measure. One process, alone on the GPU, goes through the points shape by shape (bf16 once per shape, then
   each recipe). Its `torch.compile` calls now hit the caches (about a second each instead of tens), so the
   measurement phase costs a few seconds per point, most of it the profiler and do_bench windows.

The default grid is sized for that budget: a complete cube, M over {1024, 4096, 8192, 32768} and K and N over
{1024, 4096, 32768} (1024 is the GQA key/value width, 4096 the hidden size of 7-8B models, M = 8192 one
sequence of 8192 tokens, 32768 the upper end of the published tables): 36 shapes, 144 configurations. The
10-minute figure is a design target, not a measurement: no GPU has run this sweep yet.
`quick` is a smoke test; `llama` the Llama 3 8B/70B layer shapes at three token counts; `full` the published
1024..32768 power-of-two cube (216 shapes, about an hour).

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fp8advisor import results as results_store
from fp8advisor.errors import AdvisorError
from fp8advisor.recipes import ALL_RECIPES, BASELINE, parse_recipe

WORKLOAD = "LayerNorm(K, elementwise_affine=False) -> Linear(K, N, bias=False) -> Sigmoid, bf16, fwd+bwd"

GPU_METHOD = {
    "workload": WORKLOAD,
    "compile": "torch.compile default mode, torch._dynamo.reset() before each configuration",
    "kernel_time": "torch.profiler: 2 warm-up + 5 profiled iterations, sum of GPU kernel time, "
    "grad-accumulation add_/sum dropped (as torchao float8_roofline.py)",
    "wall_time": "CUDA events per iteration after warm-up, L2 flushed, median and 20th/80th percentiles "
    "(triton.testing.do_bench)",
    "correctness": "SQNR (dB) of float8 output and input gradient against the eager bf16 module",
    "peak_memory": "torch.cuda.max_memory_allocated after reset_peak_memory_stats, minus memory held before "
    "the configuration, over its compile, correctness check and profiled iterations",
    "breakdown": "gemm_only_speedup: the 3 GEMMs of fwd+bwd, torch.mm vs torch._scaled_mm; cast_overhead_s: "
    "the recipe's dynamic-quantization kernels, unfused (fp8advisor_kernels); do_bench medians",
}

EMULATED_METHOD = {
    "workload": WORKLOAD,
    "compile": "torch.compile default mode on the CPU, torchao float8 with emulate=True",
    "kernel_time": None,
    "wall_time": "EMULATED on the CPU, one thread: time.perf_counter per iteration, 2 warm-up + 5 timed "
    "iterations, median and 20th/80th percentiles",
    "correctness": "SQNR (dB) of float8 output and input gradient against the eager bf16 module",
    "peak_memory": None,
    "breakdown": None,
}

#: Keys of profiler rows that are not the module's work, as torchao 0.18's benchmarks/float8/utils.py drops
#: them: the benchmark's own `sum` and gradient accumulation (`add_`), device syncs, the profiler's own rows.
#: (torchao stopped dropping `aten::fill_` and `aten::copy_` in 2025: they are counted, as there.)
PROFILER_OVERHEAD_KEYS = frozenset(
    {
        "aten::sum",
        "aten::add_",
        "cudaDeviceSynchronize",
        "hipDeviceSynchronize",
        "Activity Buffer Request",
        "Unrecognized",
    }
)


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
#: 32768. 36 shapes x (bf16 + 3 recipes) = 144 configurations, sized for 10 minutes on one H100 (see
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
        if values is not None and (not values or any(int(value) <= 0 for value in values)):
            raise AdvisorError(f"--{axis} needs positive integers, got {list(values)}")
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
    #: Measure GEMM-only speedup and cast time per float8 point, and the device ceilings (GPU only).
    breakdown: bool = True
    seed: int = 0

    def worker_count(self, pending_configurations: int) -> int:
        if self.compile_workers is not None:
            return max(0, min(self.compile_workers, pending_configurations))
        if self.emulate:
            return 0
        return max(1, min((os.cpu_count() or 2) - 2, 12, pending_configurations))


# --- raw timings --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measurement:
    """The raw figures of one configuration, kept apart from what was measured (`BenchPoint`)."""

    kernel_time_s: float | None
    wall_time_s: dict[str, float]
    peak_memory_bytes: int | None
    sqnr_db: dict[str, float] | None
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
) -> dict:
    """The results line of a point (fp8advisor.results/1): ok with a measurement, or failed with a reason."""
    m = measurement
    return {
        "kind": "point",
        "run_id": run_id,
        "M": point.M,
        "K": point.K,
        "N": point.N,
        "recipe": point.recipe,
        "status": "failed" if failure is not None else "ok",
        "reason": failure,
        "kernel_time_s": m.kernel_time_s if m else None,
        "wall_time_s": m.wall_time_s if m else None,
        "peak_memory_bytes": m.peak_memory_bytes if m else None,
        "sqnr_db": m.sqnr_db if m else None,
        "gemm_only_speedup": m.gemm_only_speedup if m else None,
        "cast_overhead_s": m.cast_overhead_s if m else None,
        "breakdown_error": m.breakdown_error if m else None,
        "measured_at": results_store.utc_now(),
        "emulated": emulated,
    }


def quantiles_s(times_s: Sequence[float]) -> dict[str, float]:
    """Median and 20th/80th percentiles (linear interpolation, as torch.quantile in triton's do_bench)."""
    ordered = sorted(times_s)

    def quantile(q: float) -> float:
        position = q * (len(ordered) - 1)
        low, high = math.floor(position), math.ceil(position)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return {"median": quantile(0.5), "p20": quantile(0.2), "p80": quantile(0.8)}


def kernel_time_from_profile(key_averages: Iterable, iterations: int) -> float:
    """Seconds of GPU kernel time per iteration from `prof.key_averages()`, filtered like torchao.

    Keeps top-level CPU ops that launched GPU work (self CPU time and self device time both > 0) and drops the
    benchmark's own overhead (`PROFILER_OVERHEAD_KEYS`). Profiler times are in microseconds.
    """
    threshold = 1e-10
    total_us = 0.0
    for event in key_averages:
        device_us = getattr(event, "self_device_time_total", None)
        if device_us is None:  # torch < 2.4 spelled it cuda
            device_us = event.self_cuda_time_total
        if not (event.self_cpu_time_total > threshold and device_us > threshold):
            continue
        if event.key in PROFILER_OVERHEAD_KEYS:
            continue
        total_us += device_us
    return total_us / 1e6 / iterations


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


def float8_config(recipe: str, *, emulate: bool):
    from torchao.float8 import Float8LinearConfig

    config = Float8LinearConfig.from_recipe_name(recipe)
    return dataclasses.replace(config, emulate=True) if emulate else config


def prepare_module(base, recipe: str, *, emulate: bool):
    """A deep copy of `base`, converted to float8 training under `recipe` unless it is bf16 (not compiled)."""
    module = copy.deepcopy(base)
    if recipe == BASELINE:
        return module
    from torchao.float8 import convert_to_float8_training

    return convert_to_float8_training(module, config=float8_config(recipe, emulate=emulate))


def compile_module(module):
    """`torch.compile` in default mode after `torch._dynamo.reset()`, as torchao's benchmark does."""
    torch = _torch()
    torch._dynamo.reset()
    return torch.compile(module)


def sqnr_db(reference, actual) -> float:
    """torchao's `compute_error`: 20 log10(|reference| / |reference - actual|), in float32."""
    from torchao.float8.float8_utils import compute_error

    return float(compute_error(reference.detach().float(), actual.detach().float()))


# --- a shape's measurements ---------------------------------------------------------------------------------


class ShapeBench:
    """The tensors of one (M, K, N), shared by its configurations, and the per-configuration measurement."""

    def __init__(self, M: int, K: int, N: int, settings: BenchSettings):
        self.M, self.K, self.N = M, K, N
        self.settings = settings
        self.device = "cpu" if settings.emulate else "cuda"
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

    def measure(self, recipe: str) -> Measurement:
        torch = _torch()
        emulate = self.settings.emulate
        if recipe != BASELINE:
            self.reference()  # computed on first use, before the configuration's memory window opens
        memory_before = 0
        if not emulate:
            # The previous configuration's compiled graphs (and all they hold) go now, not inside this window.
            torch._dynamo.reset()
            gc.collect()
            torch.cuda.synchronize()
            memory_before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        module = compile_module(prepare_module(self.base, recipe, emulate=emulate))
        x = self.x.detach().clone().requires_grad_()
        grad_output = self.grad_output

        def step():
            y = module(x)
            y.backward(grad_output)
            return y

        sqnr = None
        if recipe != BASELINE:
            y = step()
            reference_output, reference_grad = self.reference()
            sqnr = {"output": sqnr_db(reference_output, y), "grad_input": sqnr_db(reference_grad, x.grad)}
            del y
            if not all(math.isfinite(value) or value == math.inf for value in sqnr.values()):
                raise FloatingPointError(f"float8 result is not finite (SQNR {sqnr})")
            x.grad = None
        parameters = list(module.parameters())
        if emulate:
            measurement = self._measure_cpu(step, x, parameters, sqnr)
        else:
            measurement = self._measure_gpu(step, x, parameters, sqnr, memory_before)
            if recipe != BASELINE and self.settings.breakdown:
                try:
                    breakdown = self._breakdown(recipe)
                except Exception as error:  # noqa: BLE001 - a failed probe must not discard the point's times
                    breakdown = {"breakdown_error": failure_reason(error)}
                measurement = dataclasses.replace(measurement, **breakdown)
        return measurement

    def _measure_cpu(self, step: Callable, x, parameters, sqnr) -> Measurement:
        for _ in range(self.settings.warmup_iterations):
            step()
        times = []
        for _ in range(self.settings.emulated_wall_iterations):
            for tensor in (x, *parameters):
                tensor.grad = None
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return Measurement(
            kernel_time_s=None, wall_time_s=quantiles_s(times), peak_memory_bytes=None, sqnr_db=sqnr
        )

    def _measure_gpu(self, step: Callable, x, parameters, sqnr, memory_before: int) -> Measurement:
        torch = _torch()
        from fp8advisor_kernels.timing import do_bench_seconds
        from torch.profiler import ProfilerActivity, profile

        # Kernel time exactly as torchao's get_gpu_kernel_time: gradients accumulate, add_ is filtered out.
        for _ in range(self.settings.warmup_iterations):
            step()
        iterations = self.settings.profiled_iterations
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(iterations):
                step()
                torch.cuda.synchronize()
        kernel_time = kernel_time_from_profile(prof.key_averages(), iterations)
        # Before do_bench: its L2-flush buffer (256 MB) is not the configuration's memory.
        peak = torch.cuda.max_memory_allocated() - memory_before
        wall = do_bench_seconds(
            step,
            warmup_ms=self.settings.wall_warmup_ms,
            rep_ms=self.settings.wall_rep_ms,
            grad_to_none=[x, *parameters],
        )
        return Measurement(kernel_time_s=kernel_time, wall_time_s=wall, peak_memory_bytes=peak, sqnr_db=sqnr)

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
        _release_memory(self.settings.emulate)


def _release_memory(emulate: bool) -> None:
    gc.collect()
    if not emulate:
        _torch().cuda.empty_cache()


# --- pre-compilation in worker processes --------------------------------------------------------------------


def estimated_peak_bytes(point: BenchPoint) -> int:
    """A generous estimate of a configuration's GPU memory: bf16 activations, weights, gradients and copies,
    plus float8 copies in both layouts. Used only to keep pre-compiling workers from running out of memory."""
    M, K, N = point.shape
    bf16_bytes = 2 * (4 * M * K + 3 * K * N + 4 * M * N)
    float8_bytes = 0 if point.recipe == BASELINE else 2 * (M * K + K * N + M * N)
    return bf16_bytes + float8_bytes


_worker_budget = None  # (condition, used bytes value, budget bytes) in a worker process


def _init_worker(condition, used, budget: float, emulate: bool) -> None:
    """Worker start-up: one compile thread each (the workers are the parallelism), shared memory budget."""
    global _worker_budget
    torch = _torch()
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    if emulate:
        torch.set_num_threads(1)  # as the measuring process does under --emulate (it is in the cache key)
    _worker_budget = (condition, used, budget)


def precompile_point(point: BenchPoint, settings: BenchSettings) -> str | None:
    """Compile `point`'s graph and run it once so that its caches are warm; the failure reason, or None.

    Runs in a worker process. Failures are only reported: the measuring process meets them again and records
    them.
    """
    need = estimated_peak_bytes(point)
    budget = _worker_budget
    if budget is not None and not settings.emulate:
        condition, used, total = budget
        need = min(need, total)  # a configuration larger than the budget runs alone
        with condition:
            while used.value + need > total:
                condition.wait()
            used.value += need
    try:
        device = "cpu" if settings.emulate else "cuda"
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
        _release_memory(settings.emulate)
        if budget is not None and not settings.emulate:
            with condition:
                used.value -= need
                condition.notify_all()


class Precompiler:
    """Spawned worker processes that warm the compile caches for a list of points."""

    def __init__(self, workers: int, settings: BenchSettings):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")  # CUDA cannot be used in forked children
        budget = 0.0
        if not settings.emulate:
            torch = _torch()
            torch.cuda.empty_cache()  # what this process cached (the ceilings' buffers) is free for workers
            free, _total = torch.cuda.mem_get_info()
            context_bytes = 1 << 30  # each worker's CUDA context and allocator slack, outside the budget
            budget = max(free * 0.85 - workers * context_bytes, free * 0.25)
        self.settings = settings
        self.executor = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=context,
            initializer=_init_worker,
            initargs=(context.Condition(), context.Value("d", 0.0), budget, settings.emulate),
        )

    def run(self, points: Sequence[BenchPoint], on_done: Callable[[BenchPoint, str | None], None]) -> None:
        from concurrent.futures import as_completed

        futures = {self.executor.submit(precompile_point, point, self.settings): point for point in points}
        for future in as_completed(futures):
            try:
                reason = future.result()
            except Exception as error:  # noqa: BLE001 - a crashed worker (e.g. killed) only loses the warm-up
                reason = failure_reason(error)
            on_done(futures[future], reason)

    def shutdown(self, *, wait: bool = False) -> None:
        """Stop the workers: `wait` lets idle workers exit; otherwise our own children are terminated now
        rather than after the compile they are in (Ctrl-C)."""
        processes = list((getattr(self.executor, "_processes", None) or {}).values())
        self.executor.shutdown(wait=wait, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                process.terminate()


# --- the sweep ----------------------------------------------------------------------------------------------


@dataclass
class SweepSummary:
    """What a sweep did: `records` are the points this run wrote, `runs` this run and those it continues."""

    grid: Grid
    path: Path | None
    run_id: str | None
    total_points: int
    skipped_points: int
    records: list[dict] = field(default_factory=list)
    runs: list[results_store.Run] = field(default_factory=list)
    resumed_from: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    interrupted: bool = False

    @property
    def ok(self) -> int:
        return sum(record["status"] == "ok" for record in self.records)

    @property
    def failed(self) -> int:
        return sum(record["status"] == "failed" for record in self.records)

    @property
    def saved_points(self) -> int:
        """Points on disk for this grid: earlier runs' and this one's."""
        return self.skipped_points + len(self.records)


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
    on_progress: ProgressCallback | None = None,
    on_point: Callable[[dict], None] | None = None,
) -> SweepSummary:
    """Measure every point of `grid` not already in `out_dir` (resume), appending each to a new run file.

    Raises `DeviceError` without an FP8-capable GPU (unless emulating) and `SweepInterrupted` on Ctrl-C.
    """
    from fp8advisor.device import describe_device, require_fp8_gpu, software_versions

    started_clock = time.perf_counter()
    progress = on_progress or (lambda stage, completed, total, description: None)
    if not settings.emulate:
        require_fp8_gpu()
    out_dir = Path(out_dir)
    header = results_store.make_header(
        run_id=results_store.new_run_id(),
        started=results_store.utc_now(),
        device=describe_device(emulate=settings.emulate),
        software=software_versions(),
        method=EMULATED_METHOD if settings.emulate else GPU_METHOD,
        grid=grid.to_json(),
    )
    earlier = results_store.resumable_runs(out_dir, header)
    done = results_store.done_keys(earlier)
    points = grid.points()
    pending = [point for point in points if point.key not in done]
    summary = SweepSummary(
        grid=grid,
        path=None,
        run_id=None,
        total_points=len(points),
        skipped_points=len(points) - len(pending),
        runs=list(earlier),
        resumed_from=[run.run_id for run in earlier],
    )
    if not pending:
        summary.elapsed_s = time.perf_counter() - started_clock
        return summary

    header["resumes"] = summary.resumed_from
    if not settings.emulate and settings.breakdown:
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
    precompiler = None
    threads = _torch().get_num_threads()
    if settings.emulate:
        # One CPU thread, compile and timing alike: on a busy CPU, OpenMP barriers stall for tens of
        # milliseconds now and then, which turns tiny emulated timings bimodal. (Inductor's C++ kernels
        # specialise on the thread count, so it must not change between compiling and timing.)
        _torch().set_num_threads(1)
    try:
        workers = settings.worker_count(len(pending))
        if workers:
            precompiler = Precompiler(workers, settings)
            completed = 0
            progress("compile", 0, len(pending), f"compiling in {workers} worker processes")

            def compiled(point: BenchPoint, reason: str | None) -> None:
                nonlocal completed
                completed += 1
                # A failed warm-up is measured (and recorded) later; show it: a cold compile costs time.
                progress("compile", completed, len(pending), f"{point}: {reason}" if reason else str(point))

            precompiler.run(pending, compiled)
            precompiler.shutdown(wait=True)
            precompiler = None
        _measure(pending, settings, header["run_id"], writer, summary, progress, on_point)
    except KeyboardInterrupt:
        summary.interrupted = True
        raise SweepInterrupted(summary) from None
    finally:
        _torch().set_num_threads(threads)
        if precompiler is not None:
            precompiler.shutdown()
        writer.close()
        summary.elapsed_s = time.perf_counter() - started_clock
        summary.runs = list(earlier) + [results_store.read_run(writer.path)]
    return summary


def _measure(pending, settings, run_id, writer, summary, progress, on_point) -> None:
    progress("measure", 0, len(pending), "measuring")
    for shape, shape_points in itertools.groupby(pending, key=lambda point: point.shape):
        bench = None
        try:
            for point in shape_points:
                progress("measure", len(summary.records), len(pending), str(point))
                try:
                    if bench is None:
                        bench = ShapeBench(*shape, settings)
                    record = point_record(
                        run_id, point, emulated=settings.emulate, measurement=bench.measure(point.recipe)
                    )
                except Exception as error:  # noqa: BLE001 - OOM, compile errors...: record it and go on
                    record = point_record(
                        run_id, point, emulated=settings.emulate, failure=failure_reason(error)
                    )
                if record["status"] == "failed":  # outside the except block, whose traceback held the tensors
                    _release_memory(settings.emulate)
                writer.append(record)
                summary.records.append(record)
                if on_point is not None:
                    on_point(record)
                progress("measure", len(summary.records), len(pending), str(point))
        finally:
            if bench is not None:
                bench.release()


__all__ = [
    "GRIDS",
    "BenchPoint",
    "BenchSettings",
    "Grid",
    "Measurement",
    "SweepInterrupted",
    "SweepSummary",
    "kernel_time_from_profile",
    "make_grid",
    "point_record",
    "quantiles_s",
    "run_sweep",
]
