"""How one configuration is timed: the GPU timer (profiler kernel time, do_bench wall time, peak memory), the
CPU timer of `--emulate`, and the checks that keep their figures honest.

`fp8advisor.measure.protocol.time_step` runs the same protocol on either timer: time the first call (the
compile) with the compile caches' counters, check float8 against bf16, warm up, open the memory window,
profile, read the peak, time wall-clock. What differs per device lives here.

The checks:
- **Profiler records that are not silently lost.** CUPTI from CUDA 12.6 update 2 to 13.0 drops the first k
  kernel records of the k-th profiler session in a process (pytorch issue 192021, fixed in CUPTI 13.1);
  a sweep opens one session per configuration. Each session therefore starts with k + `PAD_MARGIN` idle
  `torch.cuda._sleep` kernels (under an annotation of ours, `PAD_ANNOTATION`, whose row counts nowhere) and
  a synchronize, so that what is lost is padding. `summarize_profile` then checks that the session's
  device records (pads excluded) are a multiple of the iteration count, that some padding survived, and
  that the rows hold no more device time than the kernels took; otherwise the point is marked suspect.
- **Nothing dropped unseen.** The profiler rows torchao's filter drops (gradient accumulation, syncs,
  "Unrecognized", ...) keep their device time in the record, and so does device time no CPU row accounts
  for, so that a GEMM hiding there shows.
- **Nothing counted twice.** torch's profiler looks the kernels up for a CPU event by that event's id, and a
  runtime-API call made outside any op (a `cudaLaunchKernel`, a `cudaDeviceSynchronize`) has as its id
  its CUPTI correlation id, a counter apart from the ops' ids: where the two numbers meet, the call's row
  is lent the kernels of the op with that id, which its own row holds too. Seen on an H200 (2026-11-26,
  bf16 at 8192x32768x32768: two padding kernels' `cudaLaunchKernel` calls and a `cudaDeviceSynchronize`
  were lent three GEMMs and two Triton kernels, 14.4 ms per iteration counted twice). A runtime-API row
  holds no device time of its own (the profiler ties a kernel to the op that launched it, never to the
  call), so its device time is left out of the kernel time and recorded apart
  (`ProfileSummary.collided_s`). torchao's filter keeps such rows.
- **Honest memory.** The peak is read over the profiled iterations only, not the compile or the SQNR check.
- **Enough samples.** The wall-clock window is sized to hold at least `MIN_WALL_ITERATIONS` calls.
"""

from __future__ import annotations

import contextlib
import gc
import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from fp8advisor import compat, interrupts

#: Keys of profiler rows that are not the module's work, as torchao 0.18's benchmarks/float8/utils.py drops
#: them: the benchmark's own `sum` and gradient accumulation (`add_`), device syncs, the profiler's own rows.
#: (torchao stopped dropping `aten::fill_` and `aten::copy_` in 2025: they are counted, as there.) Their time
#: is not in the kernel time but is recorded per point (`ProfileSummary.dropped_s`). The syncs are runtime-API
#: rows, so device time on them is recorded as a collision instead (`RUNTIME_API_ROW`).
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
#: The name of a CUDA or HIP runtime or driver API call (`cudaLaunchKernel`, `cuLaunchKernelEx`,
#: `cudaDeviceSynchronize`, `hipLaunchKernel`): a profiler row of one holds device time only through a
#: correlation-id collision (see the module docstring).
RUNTIME_API_ROW = re.compile(r"(cuda|cu|hip)[A-Z]\w*")
#: The annotation the padding kernels are launched under, so that their time belongs to a row of ours and
#: to no other (left out of the kernel time and of the dropped rows alike).
PAD_ANNOTATION = "fp8advisor::profiler_pad"

#: Idle kernels beyond the session number that start every profiler session (see the module docstring).
PAD_MARGIN = 16
#: Clock cycles each padding kernel spins: well under a microsecond on any FP8 GPU.
PAD_CYCLES = 1000
#: The fewest calls the wall-clock window may hold.
MIN_WALL_ITERATIONS = 5
#: Device time (seconds per iteration) by which the rows may exceed the kernels' own time (rounding) before
#: the excess counts as time counted twice.
ATTRIBUTION_TOLERANCE_S = 1e-7

_PROFILER_THRESHOLD_US = 1e-10  # torchao's "> 0" test on profiler times
_profiler_sessions = 0  # profiler sessions this process has opened (CUPTI's k)


# --- profiler sessions and what they recorded --------------------------------------------------------------


@dataclass(frozen=True)
class ProfilerRow:
    """One row of `prof.key_averages()`: an op or kernel name with its self times (microseconds)."""

    key: str
    self_cpu_us: float
    self_device_us: float
    count: int = 1


@dataclass(frozen=True)
class DeviceRecord:
    """One record on the GPU timeline (a kernel, memcpy or memset) and its duration in microseconds."""

    name: str
    duration_us: float


@dataclass(frozen=True)
class ProfileSummary:
    """What one profiler session of `iterations` calls measured, and how far to trust it."""

    kernel_time_s: float  # per iteration, filtered as torchao's published figures, less runtime-API rows
    iterations: int
    device_records: int  # kernels, memcpys and memsets recorded over the iterations, padding excluded
    pads_launched: int
    pads_recorded: int
    dropped_s: dict[str, float]  # per iteration: device time of the rows torchao's filter drops, by key
    unattributed_s: float  # per iteration: device time of records that no CPU row accounts for
    suspect: str | None  # why the kernel time may be wrong, or None
    collided_s: dict[str, float] = field(default_factory=dict)  # per iteration: runtime-API rows, by key

    def to_json(self) -> dict:
        return {
            "iterations": self.iterations,
            "device_records": self.device_records,
            "pads_launched": self.pads_launched,
            "pads_recorded": self.pads_recorded,
            "dropped_s": dict(sorted(self.dropped_s.items())),
            "unattributed_s": self.unattributed_s,
            "collided_s": dict(sorted(self.collided_s.items())),
            "suspect": self.suspect,
        }


def row_role(row: ProfilerRow) -> str:
    """How a row counts: "kept" (a top-level op that launched GPU work), "dropped" (the benchmark's own
    overhead), both as torchao's filter; "collided" (a runtime-API call lent an op's kernels by a
    correlation-id collision, which torchao's filter keeps); or "not counted" (no GPU time of its own, or a
    kernel row, whose time its launching op already holds)."""
    if not (row.self_cpu_us > _PROFILER_THRESHOLD_US and row.self_device_us > _PROFILER_THRESHOLD_US):
        return "not counted"
    if RUNTIME_API_ROW.fullmatch(row.key):
        return "collided"
    return "dropped" if row.key in PROFILER_OVERHEAD_KEYS or row.key == PAD_ANNOTATION else "kept"


def summarize_profile(
    rows: Iterable[ProfilerRow],
    records: Iterable[DeviceRecord],
    *,
    iterations: int,
    pads_launched: int,
) -> ProfileSummary:
    """Kernel time per iteration as torchao filters it, with what was dropped and whether records were lost.

    Kept: top-level CPU ops that launched GPU work (self CPU time and self device time both > 0), minus the
    benchmark's own overhead (`PROFILER_OVERHEAD_KEYS`), as torchao 0.18's
    `profiler_output_to_filtered_time_by_kernel_name`, and minus the runtime-API rows, whose device time is
    another op's (`RUNTIME_API_ROW`). Records of the padding kernels are counted apart.
    """
    kept_us, dropped_us, collided_us = 0.0, {}, {}
    for row in rows:
        role = row_role(row)
        if role == "dropped":
            dropped_us[row.key] = dropped_us.get(row.key, 0.0) + row.self_device_us
        elif role == "collided":
            collided_us[row.key] = collided_us.get(row.key, 0.0) + row.self_device_us
        elif role == "kept":
            kept_us += row.self_device_us
    pads = work = 0
    work_us = 0.0
    for record in records:
        if compat.SLEEP_KERNEL_MARKER in record.name:
            pads += 1
        else:
            work += 1
            work_us += record.duration_us
    dropped_us.pop(PAD_ANNOTATION, None)  # the padding is not the module's, nor the benchmark's overhead
    unattributed_us = work_us - kept_us - sum(dropped_us.values())
    per_iteration = 1e-6 / iterations
    suspect = None
    if work % iterations:
        suspect = (
            f"{work} device records is not a multiple of {iterations} iterations: the profiler lost records"
        )
    elif pads_launched and not pads:
        suspect = f"all {pads_launched} padding kernels lost: records of the timed iterations may be lost too"
    elif unattributed_us * per_iteration < -ATTRIBUTION_TOLERANCE_S:
        suspect = (
            f"the rows hold {-unattributed_us * per_iteration * 1e6:.1f} us per iteration more device time "
            "than the kernels took: some kernel time is counted twice"
        )
    return ProfileSummary(
        kernel_time_s=kept_us * per_iteration,
        iterations=iterations,
        device_records=work,
        pads_launched=pads_launched,
        pads_recorded=pads,
        dropped_s={key: value * per_iteration for key, value in dropped_us.items()},
        unattributed_s=unattributed_us * per_iteration,
        suspect=suspect,
        collided_s={key: value * per_iteration for key, value in collided_us.items()},
    )


def _self_device_us(event) -> float:
    if hasattr(event, "self_device_time_total"):
        return event.self_device_time_total
    return event.self_cuda_time_total  # torch < 2.4 spelled it cuda


@dataclass
class ProfilerSession:
    """An open `torch.profiler.profile` session and the padding it started with."""

    profile: object
    pads_launched: int

    def rows(self) -> list[ProfilerRow]:
        return [
            ProfilerRow(
                key=event.key,
                self_cpu_us=event.self_cpu_time_total,
                self_device_us=_self_device_us(event),
                count=event.count,
            )
            for event in self.profile.key_averages()
        ]

    def records(self) -> list[DeviceRecord]:
        return [
            DeviceRecord(event.name, event.time_range.elapsed_us())
            for event in self.profile.events()
            if compat.is_device_record(event)
        ]

    def summary(self, iterations: int) -> ProfileSummary:
        return summarize_profile(
            self.rows(), self.records(), iterations=iterations, pads_launched=self.pads_launched
        )

    def table(self, row_limit: int = 40) -> str:
        """The profiler's own table of rows, by device time (for the smoke test's dump)."""
        return self.profile.key_averages().table(sort_by="self_device_time_total", row_limit=row_limit)


@contextlib.contextmanager
def padded_profile(*, pad: bool = True) -> Iterator[ProfilerSession]:
    """A CPU + CUDA profiler session that starts with k + PAD_MARGIN idle kernels (the k-th session of this
    process), then a synchronize, so that records CUPTI drops at the start of a session are padding."""
    global _profiler_sessions
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    _profiler_sessions += 1
    pads = _profiler_sessions + PAD_MARGIN if pad else 0
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        # Under an annotation of ours, so that the pads' time has a row that counts nowhere. (The annotation
        # does not tie their cudaLaunchKernel calls to an op: those rows can still collide, see row_role.)
        with record_function(PAD_ANNOTATION):
            for _ in range(pads):
                compat.cuda_sleep(PAD_CYCLES)
            torch.cuda.synchronize()
        session = ProfilerSession(prof, pads)
        yield session


# --- compile time and caches -------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompileRecord:
    """The first call of a compiled configuration in the timing process: its seconds (compile, autotuning
    and one run) and what inductor's and AOTAutograd's caches did meanwhile."""

    seconds: float
    cache: dict[str, int]  # counter deltas, compat.CACHE_COUNTERS's names

    @property
    def cold(self) -> bool:
        """Inductor generated code here: an FX-graph cache miss, or a bypass (a graph the cache cannot hold,
        compiled from scratch)."""
        return self.cache.get("fxgraph_cache_miss", 0) + self.cache.get("fxgraph_cache_bypass", 0) > 0

    def to_json(self) -> dict:
        return {"seconds": self.seconds, **self.cache, "cold": self.cold}


# --- wall-clock windows -------------------------------------------------------------------------------------


def quantiles_s(times_s: Sequence[float]) -> dict[str, float]:
    """Median and 20th/80th percentiles (linear interpolation, as torch.quantile in triton's do_bench)."""
    ordered = sorted(times_s)

    def quantile(q: float) -> float:
        position = q * (len(ordered) - 1)
        low, high = math.floor(position), math.ceil(position)
        return ordered[low] + (ordered[high] - ordered[low]) * (position - low)

    return {"median": quantile(0.5), "p20": quantile(0.2), "p80": quantile(0.8)}


def repetition_ms(call_ms: float, rep_ms: float, min_iterations: int = MIN_WALL_ITERATIONS) -> float:
    """do_bench's `rep` (it times int(rep / estimated call time) calls) so that the window holds at least
    `min_iterations` calls of `call_ms`: the larger of `rep_ms` and 1.5 x min_iterations calls (do_bench's
    own estimate also counts the L2 flush before each call)."""
    return max(float(rep_ms), 1.5 * min_iterations * call_ms)


# --- the timers ---------------------------------------------------------------------------------------------


@dataclass
class Timer:
    """What the measurement protocol asks of a device. Subclasses: `CudaTimer`, `CpuTimer`."""

    emulated: ClassVar[bool] = False

    def synchronize(self) -> None:
        pass

    def release(self) -> None:
        """Free what the previous configuration held: compiled graphs, Python garbage, cached memory."""
        compat.dynamo_reset()
        gc.collect()

    def first_call(self, call: Callable[[], object]) -> tuple[object, CompileRecord]:
        """Run `call` once (under torch.compile: compile, autotune, run) and say how long and how cached."""
        before = compat.compile_cache_counters()
        start = time.perf_counter()
        result = call()
        self.synchronize()
        interrupts.check()
        seconds = time.perf_counter() - start
        after = compat.compile_cache_counters()
        return result, CompileRecord(seconds=seconds, cache={k: after[k] - before[k] for k in after})

    def time_call(self, call: Callable[[], object]) -> float:
        """Seconds of one call, synchronized: the estimate that sizes the wall-clock window."""
        start = time.perf_counter()
        call()
        self.synchronize()
        interrupts.check()
        return time.perf_counter() - start

    # Memory: None where the device does not report it.
    def memory_allocated(self) -> int | None:
        return None

    def open_memory_window(self) -> None:
        pass

    def window_peak(self) -> int | None:
        return None

    def kernel_time(self, step: Callable[[], object], iterations: int) -> ProfileSummary | None:
        return None

    def wall_time(self, step: Callable[[], object], grads: list, call_s: float) -> dict:
        raise NotImplementedError


@dataclass
class CpuTimer(Timer):
    """`--emulate`: wall-clock with `time.perf_counter`, `iterations` calls; no kernel time, no memory."""

    emulated: ClassVar[bool] = True
    iterations: int = 5

    def wall_time(self, step: Callable[[], object], grads: list, call_s: float) -> dict:
        times = []
        for _ in range(self.iterations):
            for tensor in grads:
                tensor.grad = None
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
            interrupts.check()
        return {**quantiles_s(times), "iterations": len(times)}


@dataclass
class CudaTimer(Timer):
    """The GPU: padded profiler sessions, do_bench windows of at least MIN_WALL_ITERATIONS calls, and
    `max_memory_allocated` over the profiled iterations."""

    warmup_ms: int = 25
    rep_ms: int = 100

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def release(self) -> None:
        import torch

        super().release()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    def memory_allocated(self) -> int:
        import torch

        return torch.cuda.memory_allocated()

    def open_memory_window(self) -> None:
        import torch

        gc.collect()  # the SQNR check's temporaries go before the window opens
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()

    def window_peak(self) -> int:
        import torch

        return torch.cuda.max_memory_allocated()

    def kernel_time(self, step: Callable[[], object], iterations: int) -> ProfileSummary:
        """torchao's get_gpu_kernel_time: `iterations` calls, each synchronized, gradients accumulating (their
        add_ is filtered out), in one padded profiler session."""
        import torch

        with padded_profile() as session:
            for _ in range(iterations):
                step()
                torch.cuda.synchronize()
        return session.summary(iterations)

    def wall_time(self, step: Callable[[], object], grads: list, call_s: float) -> dict:
        from fp8advisor_kernels.timing import do_bench_samples

        rep = repetition_ms(call_s * 1e3, self.rep_ms)
        for _ in range(3):  # do_bench's own estimate can be longer than ours: widen the window and retry
            times = do_bench_samples(step, warmup_ms=self.warmup_ms, rep_ms=rep, grad_to_none=grads)
            if len(times) >= MIN_WALL_ITERATIONS:
                break
            rep *= 2 * MIN_WALL_ITERATIONS / len(times)
        return {**quantiles_s(times), "iterations": len(times)}


__all__ = [
    "MIN_WALL_ITERATIONS",
    "PAD_ANNOTATION",
    "PAD_MARGIN",
    "PROFILER_OVERHEAD_KEYS",
    "CompileRecord",
    "CpuTimer",
    "CudaTimer",
    "DeviceRecord",
    "ProfileSummary",
    "ProfilerRow",
    "ProfilerSession",
    "Timer",
    "padded_profile",
    "quantiles_s",
    "repetition_ms",
    "row_role",
    "summarize_profile",
]
