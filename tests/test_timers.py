"""The timers: the profiler filter and its checks, padded sessions, the memory window, the wall window."""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fp8advisor.measure import linear as bench
from fp8advisor.measure import timers  # noqa: E402
from fp8advisor.measure.linear import ShapeBench  # noqa: E402
from fp8advisor.measure.protocol import BenchSettings  # noqa: E402
from fp8advisor.measure.timers import (  # noqa: E402
    CpuTimer,
    CudaTimer,
    DeviceRecord,
    ProfilerRow,
    ProfileSummary,
    summarize_profile,
)
from fp8advisor.paths import DATA_DIR  # noqa: E402

# --- the profiler filter (torchao 0.18's) and what it drops -------------------------------------------------

ROWS = [
    ProfilerRow("aten::mm", 10.0, 300.0),  # a GEMM: kept
    ProfilerRow("triton_red_fused_native_layer_norm_0", 5.0, 100.0),  # an inductor kernel: kept
    ProfilerRow("aten::copy_", 3.0, 7.0),  # module work: kept (torchao stopped dropping copy_/fill_ in 2025)
    ProfilerRow("aten::fill_", 3.0, 2.0),  # kept likewise
    ProfilerRow("aten::add_", 3.0, 50.0),  # gradient accumulation: dropped, recorded
    ProfilerRow("aten::sum", 3.0, 7.0),  # dropped, recorded
    ProfilerRow("cudaDeviceSynchronize", 3.0, 7.0),  # a runtime-API row: another op's time, recorded apart
    ProfilerRow("Activity Buffer Request", 3.0, 11.0),  # the profiler's own row: dropped, recorded
    ProfilerRow("Unrecognized", 3.0, 13.0),  # dropped as torchao does; a GEMM could hide here: recorded
    ProfilerRow("CompiledFunction", 40.0, 0.0),  # no GPU time of its own: not a kernel
    ProfilerRow("void cutlass_gemm<...>", 0.0, 300.0),  # the kernel row itself: counted via aten::mm
]
KEPT_US = 300 + 100 + 7 + 2
DROPPED_US = {"aten::add_": 50, "aten::sum": 7, "Activity Buffer Request": 11, "Unrecognized": 13}


def records(work: int, pads: int, work_us: float) -> list[DeviceRecord]:
    """`work` device records sharing `work_us`, and `pads` padding kernels."""
    pad = [DeviceRecord("at::cuda::(anonymous namespace)::spin_kernel(long)", 0.5)] * pads
    return pad + [DeviceRecord(f"kernel_{i}", work_us / work) for i in range(work)]


def test_kernel_time_keeps_what_torchao_keeps_and_records_what_it_drops():
    total_us = KEPT_US + sum(DROPPED_US.values())
    summary = summarize_profile(ROWS, records(40, 20, total_us), iterations=5, pads_launched=20)
    assert summary.kernel_time_s == pytest.approx(KEPT_US * 1e-6 / 5)
    assert summary.dropped_s == pytest.approx({key: value * 1e-6 / 5 for key, value in DROPPED_US.items()})
    assert summary.collided_s == pytest.approx({"cudaDeviceSynchronize": 7e-6 / 5})
    assert summary.unattributed_s == pytest.approx(0.0, abs=1e-12)
    assert summary.suspect is None
    assert (summary.device_records, summary.pads_recorded) == (40, 20)


def test_device_time_no_row_accounts_for_is_recorded():
    # 250 us of kernels that no CPU op launched (e.g. a GEMM with no aten parent): not in the kernel time,
    # torchao's method would not see it either, but the record shows it.
    total_us = KEPT_US + sum(DROPPED_US.values()) + 250
    summary = summarize_profile(ROWS, records(40, 20, total_us), iterations=5, pads_launched=20)
    assert summary.unattributed_s == pytest.approx(250e-6 / 5)
    assert summary.kernel_time_s == pytest.approx(KEPT_US * 1e-6 / 5)


@pytest.mark.parametrize(
    ("work", "pads_recorded", "suspect"),
    [
        (40, 20, None),  # nothing lost
        (40, 3, None),  # CUPTI took 17 records, all of them padding: the iterations are whole
        (38, 0, "not a multiple"),  # the loss reached the timed iterations
        (40, 0, "padding kernels lost"),  # a multiple, but nothing says the padding absorbed the loss
    ],
)
def test_a_session_that_lost_records_is_suspect(work, pads_recorded, suspect):
    total_us = KEPT_US + sum(DROPPED_US.values())
    summary = summarize_profile(ROWS, records(work, pads_recorded, total_us), iterations=5, pads_launched=20)
    if suspect is None:
        assert summary.suspect is None
    else:
        assert suspect in summary.suspect


def test_the_padding_and_its_annotation_count_nowhere():
    # The pads run under an annotation of ours: its row holds their time, and it is neither kept nor dropped.
    rows = [*ROWS, ProfilerRow(timers.PAD_ANNOTATION, 20.0, 10.0)]
    total_us = KEPT_US + sum(DROPPED_US.values())
    summary = summarize_profile(rows, records(40, 20, total_us), iterations=5, pads_launched=20)
    assert summary.kernel_time_s == pytest.approx(KEPT_US * 1e-6 / 5)
    assert timers.PAD_ANNOTATION not in summary.dropped_s and summary.suspect is None


def test_rows_holding_more_time_than_the_kernels_took_are_suspect():
    # an op row holding more device time than the records: some kernel counted twice, cause unknown
    rows = [*ROWS, ProfilerRow("aten::mm", 2.0, 300.0)]
    total_us = KEPT_US + sum(DROPPED_US.values())
    summary = summarize_profile(rows, records(40, 20, total_us), iterations=5, pads_launched=20)
    assert "counted twice" in summary.suspect


@pytest.mark.parametrize(
    "key", ["cudaLaunchKernel", "cuLaunchKernelEx", "cudaDeviceSynchronize", "hipLaunchKernel"]
)
def test_a_runtime_api_row_lent_an_ops_kernels_is_left_out_and_recorded(key):
    # torch's profiler looks kernels up by the CPU event's id; a runtime call outside any op has its CUPTI
    # correlation id as its id, which can equal an op's: its row is lent that op's kernels (counted twice).
    rows = [*ROWS, ProfilerRow(key, 2.0, 300.0)]
    total_us = KEPT_US + sum(DROPPED_US.values())  # the kernels: the collided 300 us are aten::mm's
    summary = summarize_profile(rows, records(40, 20, total_us), iterations=5, pads_launched=20)
    assert summary.kernel_time_s == pytest.approx(KEPT_US * 1e-6 / 5)
    assert summary.collided_s[key] == pytest.approx(
        300e-6 / 5 + (7e-6 / 5 if key == "cudaDeviceSynchronize" else 0)
    )
    assert summary.suspect is None and summary.unattributed_s == pytest.approx(0.0, abs=1e-12)
    assert timers.row_role(ProfilerRow(key, 2.0, 300.0)) == "collided"
    assert timers.row_role(ProfilerRow("aten::cudnn_convolution", 2.0, 300.0)) == "kept"


H200_ROWS = DATA_DIR / "results" / "h200-2026-11-26" / "rows"


def _logged_rows(log: Path, recipe: str) -> list[ProfilerRow]:
    """The rows `gpu_smoke.py --rows-at` logged for a recipe (self CPU us, self device us, count, key)."""
    lines = log.read_text().splitlines()
    start = lines.index(f"--- {recipe}: rows as bench counts them (self CPU us, self device us, count)") + 1
    rows = []
    for line in lines[start:]:
        if line.startswith("---"):
            break
        fields = re.match(r"\s+(kept|dropped|not counted)\s+([\d.]+)\s+([\d.]+)\s+(\d+)  (.*)$", line)
        rows.append(ProfilerRow(fields[5], float(fields[2]), float(fields[3]), int(fields[4])))
    return rows


def _traced_records(trace: Path) -> list[DeviceRecord]:
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return [
        DeviceRecord(event["name"], event["dur"])
        for event in events
        if event.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy")
    ]


def test_the_h200_collision_no_longer_counts_three_gemms_twice():
    # Real rows and records of one profiler session (H200, torch 2.11+cu130, 2026-11-26, bf16
    # LN-Linear-Sigmoid at 8192x32768x32768, 5 iterations, 17 pads): two pads' cudaLaunchKernel calls and a
    # cudaDeviceSynchronize were lent three GEMMs (the trace shows their correlation ids equal to aten::mm
    # ops' External ids).
    rows = _logged_rows(H200_ROWS / "smoke.log", "bf16")
    records = _traced_records(H200_ROWS / "trace-bf16-8192x32768x32768.json.gz")
    summary = summarize_profile(rows, records, iterations=5, pads_launched=17)
    assert summary.suspect is None
    assert summary.kernel_time_s == pytest.approx(75.16e-3, rel=1e-3)  # was 84.58 ms, above its wall clock
    assert summary.collided_s == pytest.approx(
        {"cudaLaunchKernel": 9.4235e-3, "cudaDeviceSynchronize": 4.9840e-3}, rel=1e-3
    )
    assert summary.dropped_s == pytest.approx({"aten::add_": 1.8204e-3}, rel=1e-3)
    assert abs(summary.unattributed_s) < 1e-5
    # the float8 session of the same shape had no collision: nothing changes there
    rows = _logged_rows(H200_ROWS / "smoke.log", "tensorwise")
    records = _traced_records(H200_ROWS / "trace-tensorwise-8192x32768x32768.json.gz")
    summary = summarize_profile(rows, records, iterations=5, pads_launched=18)
    assert summary.suspect is None and summary.collided_s == {}
    assert summary.kernel_time_s == pytest.approx(44.4995e-3, rel=1e-4)


def test_each_profiler_session_is_padded_by_its_number_plus_a_margin(monkeypatch):
    # CUPTI 12.6u2..13.0 drops the first k kernel records of the k-th session of a process.
    import torch
    import torch.profiler

    sleeps = []
    monkeypatch.setattr(timers.compat, "cuda_sleep", lambda cycles: sleeps.append(cycles))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(torch.profiler, "profile", lambda **kwargs: contextlib.nullcontext("prof"))
    monkeypatch.setattr(torch.profiler, "record_function", lambda name: contextlib.nullcontext())
    monkeypatch.setattr(timers, "_profiler_sessions", 0)
    launched = []
    for _ in range(3):
        sleeps.clear()
        with timers.padded_profile() as session:
            launched.append((len(sleeps), session.pads_launched))
    margin = timers.PAD_MARGIN
    assert launched == [(1 + margin, 1 + margin), (2 + margin, 2 + margin), (3 + margin, 3 + margin)]
    with timers.padded_profile(pad=False) as session:
        assert session.pads_launched == 0


# --- the measurement protocol -------------------------------------------------------------------------------

GIB = 1 << 30


class MemoryTimer(CpuTimer):
    """A CPU timer that keeps allocation books like CUDA's caching allocator and logs the protocol's steps."""

    def __init__(self):
        super().__init__(iterations=3)
        self.allocated = self.peak = 1000
        self.log = []

    def allocate(self, size):
        self.allocated += size
        self.peak = max(self.peak, self.allocated)

    def memory_allocated(self):
        return self.allocated

    def open_memory_window(self):
        self.log.append("window")
        self.peak = self.allocated

    def window_peak(self):
        return self.peak

    def kernel_time(self, step, iterations):
        self.log.append("profile")
        for _ in range(iterations):
            step()
            self.allocate(5)  # a step's activations, freed when it ends
            self.allocate(-5)
        return ProfileSummary(1e-3, iterations, 10 * iterations, 17, 17, {}, 0.0, None)


def test_peak_memory_is_read_over_the_profiled_calls_only(monkeypatch):
    # The SQNR check upcasts to float32: ~8 GiB of temporaries at 32768^3 that are not the configuration's.
    timer = MemoryTimer()
    sqnr_db = bench.sqnr_db

    def sqnr_with_temporaries(reference, actual):
        timer.log.append("sqnr")
        timer.allocate(8 * GIB)
        timer.allocate(-8 * GIB)
        return sqnr_db(reference, actual)

    monkeypatch.setattr(bench, "sqnr_db", sqnr_with_temporaries)
    monkeypatch.setattr(bench, "compile_module", lambda module: module)  # eager: the protocol, not inductor
    shape = ShapeBench(32, 32, 32, BenchSettings(emulate=True), timer=timer)
    measurement = shape.measure("tensorwise")
    assert measurement.peak_memory_bytes == 5
    assert timer.log == ["sqnr", "sqnr", "window", "profile"]
    assert measurement.kernel_time_s == 1e-3 and measurement.profile.pads_launched == 17
    assert measurement.compile.seconds > 0
    assert set(measurement.compile.cache) == set(timers.compat.CACHE_COUNTERS)
    assert measurement.wall_time_s["iterations"] == 3
    assert measurement.sqnr_db["output"] > 20


# --- the wall-clock window ----------------------------------------------------------------------------------


def triton_like_do_bench(call_s: float, windows: list, flush_s: float = 1e-4):
    """do_bench's count rule: int(rep / (estimated call + L2 flush)) timed calls, at least one. Each window's
    rep_ms is appended to `windows`."""

    def do_bench_samples(fn, *, warmup_ms, rep_ms, grad_to_none):
        windows.append(rep_ms)
        calls = max(1, int(rep_ms / ((call_s + flush_s) * 1e3)))
        return [call_s] * calls

    return do_bench_samples


@pytest.mark.parametrize(
    ("call_s", "estimate_s"),
    [
        (0.27, 0.27),  # a 32768^3 forward + backward: do_bench's default 100 ms would time it once
        (0.27, 0.05),  # our estimate too low: the window widens and do_bench runs again
        (0.001, 0.001),  # small shapes keep do_bench's own budget
    ],
)
def test_the_wall_clock_window_holds_at_least_five_calls(monkeypatch, call_s, estimate_s):
    pytest.importorskip("triton", reason="fp8advisor_kernels needs triton: pip install 'fp8advisor[bench]'")
    from fp8advisor_kernels import timing

    windows = []
    monkeypatch.setattr(timing, "do_bench_samples", triton_like_do_bench(call_s, windows))
    wall = CudaTimer(rep_ms=100).wall_time(lambda: None, [], estimate_s)
    assert wall["iterations"] >= timers.MIN_WALL_ITERATIONS
    assert wall["median"] == pytest.approx(call_s)
    assert len(windows) == (1 if estimate_s == call_s else 2)  # sized up front from the estimate
    if call_s == 0.001:
        assert wall["iterations"] == int(100 / 1.1)


@pytest.mark.parametrize(
    ("call_ms", "rep_ms", "expected"),
    [
        (270.0, 100, 1.5 * 5 * 270.0),  # the calls set the window
        (1.0, 100, 100.0),  # do_bench's budget is already enough
    ],
)
def test_repetition_ms(call_ms, rep_ms, expected):
    assert timers.repetition_ms(call_ms, rep_ms) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ([3.0], {"median": 3.0, "p20": 3.0, "p80": 3.0}),  # one sample
        ([5.0, 1.0, 3.0, 2.0, 4.0], {"median": 3.0, "p20": 1.8, "p80": 4.2}),  # linear interpolation
        ([1.0, 2.0], {"median": 1.5, "p20": 1.2, "p80": 1.8}),
    ],
)
def test_quantiles_interpolate_like_torch_quantile(times, expected):
    assert timers.quantiles_s(times) == pytest.approx(expected)


def test_compile_record_is_cold_when_inductor_compiled_from_scratch():
    assert timers.CompileRecord(1.0, {"fxgraph_cache_miss": 2}).cold
    assert timers.CompileRecord(1.0, {"fxgraph_cache_hit": 1, "fxgraph_cache_bypass": 1}).cold  # uncacheable
    assert not timers.CompileRecord(1.0, {"fxgraph_cache_hit": 2, "autograd_cache_bypass": 1}).cold
    assert math.isclose(timers.CompileRecord(1.5, {}).to_json()["seconds"], 1.5)
