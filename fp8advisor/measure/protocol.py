"""How one configuration is measured, whatever the workload (a grid's Linear block, its grouped expert GEMMs,
or a model's own block in context): the sweep's settings, the protocol and its raw figures.

The protocol (`time_step`, on the timers of `fp8advisor.measure.timers`) follows torchao's published method
(`benchmarks/float8/float8_roofline.py`): `torch.compile` in default mode after `torch._dynamo.reset()`
(`compile_module`), the first call timed as the compile, float8 checked against bf16 on that call (SQNR,
`checked_sqnr`), warm-up, then the memory window, the profiled calls, the peak and the wall-clock window.
A configuration that fails is recorded with one line saying why (`failure_reason`), and the sweep goes on.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

from fp8advisor import compat
from fp8advisor.errors import describe_error
from fp8advisor.measure.timers import CompileRecord, CpuTimer, CudaTimer, ProfileSummary, Timer


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
        # the machine's cores shared by the bench processes torchrun started on it (`bench --gpus`)
        processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
        return max(1, min(((os.cpu_count() or 2) - 2) // processes, 12, pending_configurations))

    def timer(self) -> Timer:
        if self.emulate:
            return CpuTimer(iterations=self.emulated_wall_iterations)
        return CudaTimer(warmup_ms=self.wall_warmup_ms, rep_ms=self.wall_rep_ms)


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
    return describe_error(error)


def checked_sqnr(sqnr: dict[str, float]) -> dict[str, float]:
    """`sqnr` (dB of float8 against bf16, per tensor compared), unless one is not finite (NaN or -inf: the
    float8 result is not finite), which fails the configuration (`FloatingPointError`)."""
    if not all(math.isfinite(value) or value == math.inf for value in sqnr.values()):
        raise FloatingPointError(f"float8 result is not finite (SQNR {sqnr})")
    return sqnr


def compile_module(module, backend: str = "inductor"):
    """`torch.compile` in default mode after `torch._dynamo.reset()`, as torchao's benchmark does (`backend`:
    "aot_eager" for the in-context emulation, which skips inductor's code generation)."""
    import torch

    compat.dynamo_reset()
    return torch.compile(module, backend=backend)


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


__all__ = [
    "BenchSettings",
    "Measurement",
    "checked_sqnr",
    "compile_module",
    "failure_reason",
    "measurement_fields",
    "time_step",
]
