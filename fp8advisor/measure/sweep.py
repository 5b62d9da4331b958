"""The sweep every grid workload shares (`run_sweep`): which points to measure, in what order, with which
workers, under what budget, and the results line each point leaves.

A sweep measures the points of a grid (`fp8advisor.measure.workload.ShapeGrid`) with the grid's workload:
torchao's LayerNorm -> Linear -> Sigmoid block (`fp8advisor.measure.linear`, what is measured and how) or the
grouped expert GEMMs of mixture-of-experts models (`fp8advisor.measure.grouped`). Every point of either is
written by one record writer (`point_record`) to the run files of `fp8advisor.measure.results`.

How a sweep is laid out (`fp8advisor.measure.schedule`, `fp8advisor.measure.precompile`): compilation
dominates (a cold `torch.compile` of one forward + backward costs seconds to tens of seconds of CPU, a point's
GPU work a fraction of a second even at 32768^3). So the pending points, largest shape first, go in batches:
worker processes pre-compile a batch in parallel (filling inductor's on-disk caches; they never leave
autotuning choices behind), then this process measures it alone on the GPU, its compiles hitting those caches.
A time budget (`--time-budget`) is checked before each batch and each point; `--shard I/N` measures a slice of
the grid. Each point is appended to the run file as soon as it is measured, so a stop, a Ctrl-C or a kill
loses at most the point in flight and the same command resumes.

Every process writes a run file of its own, so the shards of one grid measure side by side into one
directory (`bench --gpus`, torchrun, a job array; the locks are `fp8advisor.measure.launch.ShardLock`), each
resuming what the others saved; `grid_on_disk` counts the whole grid's points saved there.
"""

from __future__ import annotations

import gc
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fp8advisor import interrupts
from fp8advisor.files import absolute, check_output_directory
from fp8advisor.interrupts import interrupts_kept
from fp8advisor.measure import results as results_store
from fp8advisor.measure.launch import ShardLock
from fp8advisor.measure.protocol import BenchSettings, Measurement, failure_reason, measurement_fields
from fp8advisor.measure.run_writer import RunWriter, make_header, new_run_id, run_file_name, utc_now
from fp8advisor.measure.schedule import DurationEstimator, Shard, TimeBudget, batches, sweep_order
from fp8advisor.measure.workload import Point, ShapeGrid, Workload

# --- a point's results line ---------------------------------------------------------------------------------


def point_record(
    run_id: str,
    point: Point,
    *,
    emulated: bool,
    measurement: Measurement | None = None,
    failure: str | None = None,
    duration_s: float | None = None,
    precompiled: str | None = None,
    precompile_s: float | None = None,
) -> dict:
    """The results line of a point (fp8advisor.results/1), Linear or grouped: ok with a measurement, or failed
    with a reason. Its sizes are named by the point's `AXES`; a grouped point's line says `"grouped": true`,
    a Linear point's carries the breakdown (GEMM-only speedup, cast time, why the probes failed; null when
    not measured).

    `duration_s`: seconds the timing process spent on the point; `precompiled`: the pre-compile worker's
    outcome ("ok" or why not; None when no worker ran); `precompile_s`: the seconds the worker took (its
    compile, cold unless inductor's on-disk cache held the configuration, and one run; None when no worker
    answered)."""
    return {
        "kind": "point",
        **({"grouped": True} if point.GROUPED else {}),
        "run_id": run_id,
        **dict(zip(point.AXES, point.shape, strict=True)),
        "recipe": point.recipe,
        **measurement_fields(measurement, failure),
        **({} if point.GROUPED else breakdown_fields(measurement)),
        "precompiled": precompiled,
        "precompile_s": precompile_s,
        "duration_s": duration_s,
        "measured_at": utc_now(),
        "emulated": emulated,
    }


def breakdown_fields(measurement: Measurement | None) -> dict:
    """Where a Linear point's time goes: GEMM-only speedup, cast time, and why the probes failed (if so)."""
    m = measurement
    return {
        "gemm_only_speedup": m.gemm_only_speedup if m else None,
        "cast_overhead_s": m.cast_overhead_s if m else None,
        "breakdown_error": m.breakdown_error if m else None,
    }


def worker_memory_budget(workers: int) -> float:
    """GPU bytes the pre-compiling workers share: 85% of what is free, less a CUDA context and allocator
    slack per worker, and never under a quarter of what is free."""
    torch = _torch()
    torch.cuda.empty_cache()  # what this process cached (the ceilings' buffers) is free for workers
    free, _total = torch.cuda.mem_get_info()
    context_bytes = 1 << 30
    return max(free * 0.85 - workers * context_bytes, free * 0.25)


def _torch():
    import torch

    return torch


# --- the sweep ----------------------------------------------------------------------------------------------


@dataclass
class SweepSummary:
    """What a sweep did: `records` are the points this run wrote, `runs` this run and those it continues."""

    grid: ShapeGrid
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


#: How `run_sweep` measures unless told otherwise.
DEFAULT_SETTINGS = BenchSettings()

#: on_progress(stage, completed, total, description); stage is "compile" or "measure".
ProgressCallback = Callable[[str, int, int, str], None]


def run_sweep(
    grid: ShapeGrid,
    out_dir: Path,
    settings: BenchSettings = DEFAULT_SETTINGS,
    *,
    shard: Shard | None = None,
    time_budget_s: float | None = None,
    started: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_progress: ProgressCallback | None = None,
    on_point: Callable[[dict], None] | None = None,
    workload: Workload | None = None,
) -> SweepSummary:
    """Measure every point of `grid` (or of its `shard`) not already in `out_dir` (resume), appending each to
    a new run file (`workload`: what a point is; by default the grid's, `grid.workload`: torchao's Linear
    block or grouped expert GEMMs); with `time_budget_s`,
    stop before a point that would not finish inside the budget, counted from `started` (a `clock` reading;
    default: now).

    Raises `DeviceError` without an FP8-capable GPU (unless emulating), `AdvisorError` when `shard` counts
    more shards than the grid has shapes (`Shard.check`, before anything is written), when `out_dir` cannot
    be written or another sweep is writing to it (`launch.ShardLock`: the other shards of the same split
    may), and `SweepInterrupted` on Ctrl-C.
    """
    from fp8advisor.device import require_fp8_gpu

    budget = TimeBudget(time_budget_s, clock() if started is None else started, clock)
    if shard is not None:
        shard.check(len(set(grid.shapes)))  # more shards than shapes: refused before anything is written
    if not settings.emulate:
        require_fp8_gpu()
    out_dir = Path(out_dir)
    check_output_directory(out_dir)
    workload = workload or grid.workload
    # One sweep per directory at a time, or the shards of one split, each its own: two sweeps of one point
    # would both measure what neither has saved yet.
    with ShardLock(out_dir, shard) as lock:
        return _run_locked(
            grid, out_dir, settings, shard, time_budget_s, budget, on_progress, on_point, workload, lock
        )


def _header(grid: ShapeGrid, settings: BenchSettings, workload: Workload, **fields) -> dict:
    """A run header for a sweep of `grid` on this device (`fields`: the shard, the time budget)."""
    from fp8advisor.device import describe_device, software_versions

    return make_header(
        run_id=new_run_id(),
        started=utc_now(),
        device=describe_device(emulate=settings.emulate),
        software=software_versions(),
        method=workload.method(settings.emulate),
        grid=grid.to_json(),
        **fields,
    )


def grid_on_disk(
    grid: ShapeGrid,
    out_dir: Path,
    settings: BenchSettings = DEFAULT_SETTINGS,
    workload: Workload | None = None,
) -> tuple[int, list[results_store.Run]]:
    """The points of the whole `grid` saved in `out_dir` by runs a sweep on this device would resume, all
    shards', and those runs (oldest first)."""
    header = _header(grid, settings, workload or grid.workload)
    runs = results_store.resumable_runs(Path(out_dir), header)
    wanted = {point.key for point in grid.points()}
    return len(results_store.done_keys(runs) & wanted), runs


def _continued(earlier: list, points: list[Point], shard: Shard | None) -> list:
    """The earlier runs a sweep continues: all of them, or for a shard those that saved a point of it (not
    the other shards' runs, which may be measuring beside it)."""
    if shard is None:
        return earlier
    mine = {point.key for point in points}
    return [run for run in earlier if run.keys() & mine]


def _create_run_file(out_dir: Path, header: dict, lock: ShardLock) -> RunWriter:
    """The run's file, under a name no other process takes: created while no other shard creates one, with
    another run id should a file of that name exist already."""
    with lock.creating():
        while absolute(out_dir / run_file_name(header["started"], header["run_id"])).exists():
            header["run_id"] = new_run_id()
        return RunWriter.create(out_dir, header)


def _run_locked(
    grid, out_dir, settings, shard, time_budget_s, budget, on_progress, on_point, workload, lock
) -> SweepSummary:
    """`run_sweep`'s work, with `out_dir` locked: read what is saved, measure the rest into a new run file."""
    progress = on_progress or (lambda stage, completed, total, description: None)
    header = _header(
        grid, settings, workload, shard=shard.to_json() if shard else None, time_budget_s=time_budget_s
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
        resumed_from=[run.run_id for run in _continued(earlier, points, shard)],
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
    writer = _create_run_file(out_dir, header, lock)
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
        with interrupts_kept():  # a Ctrl-C swallowed by a __del__ still stops the sweep at the next point
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

    def run(self, pending: list[Point]) -> None:
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

    def _precompile(self, batch: list[Point], deadline: float | None) -> None:
        def compiled(point: Point, reason: str | None, seconds: float | None) -> None:
            self.compiled += 1
            self.precompiled[point.key] = "ok" if reason is None else reason
            self.precompile_s[point.key] = seconds
            if reason is not None:
                self.summary.not_precompiled[point.key] = reason
            # A failed warm-up is measured (and recorded) later; show it: a cold compile costs time.
            description = f"{point}: {reason}" if reason else str(point)
            self.progress("compile", self.compiled, self.total, description)

        self.precompiler.run(batch, compiled, deadline=deadline)

    def _measure(self, batch: list[Point]) -> bool:
        """Measure `batch` shape by shape; False when the budget stopped it."""
        for shape, shape_points in itertools.groupby(batch, key=lambda point: point.shape):
            bench = None
            try:
                for point in shape_points:
                    interrupts.check()
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
                    interrupts.check()  # before the record: a point a Ctrl-C cut short is not saved
                    if failure is not None:  # outside the except block, whose traceback held the tensors
                        gc.collect()
                    self._record(point, measurement, failure, duration, precompiled)
            finally:
                if bench is not None:
                    bench.release()
        return True

    def _record(self, point, measurement, failure, duration, precompiled) -> None:
        record = point_record(
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
    "DEFAULT_SETTINGS",
    "ProgressCallback",
    "SweepInterrupted",
    "SweepSummary",
    "breakdown_fields",
    "grid_on_disk",
    "point_record",
    "run_sweep",
    "worker_memory_budget",
]
