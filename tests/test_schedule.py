"""Which points a sweep measures and when it stops: order, shards, batches, the time budget (with the GPU
timings replaced by a clock that advances as points are measured)."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from fp8advisor.errors import AdvisorError  # noqa: E402
from fp8advisor.measure import linear  # noqa: E402
from fp8advisor.measure import sweep as bench  # noqa: E402
from fp8advisor.measure.linear import GRIDS, BenchPoint, make_grid  # noqa: E402
from fp8advisor.measure.protocol import BenchSettings, Measurement  # noqa: E402
from fp8advisor.measure.results import load_results  # noqa: E402
from fp8advisor.measure.schedule import (  # noqa: E402
    FINISH_RESERVE_S,
    FIRST_POINT_ESTIMATE_S,
    DurationEstimator,
    Shard,
    TimeBudget,
    batches,
    sweep_order,
)
from fp8advisor.measure.sweep import run_sweep  # noqa: E402

# --- order and batches ------------------------------------------------------------------------------------


def test_sweep_goes_largest_shape_first_with_bf16_first_in_each_shape():
    points = GRIDS["quick"].points()
    ordered = sweep_order(points)
    sizes = [p.M * p.K * p.N for p in ordered]
    assert sizes == sorted(sizes, reverse=True)
    assert ordered[0].shape == (8192, 8192, 8192) and ordered[-1].shape == (1024, 1024, 1024)
    for _, group in itertools.groupby(ordered, key=lambda p: p.shape):
        assert [p.recipe for p in group] == list(GRIDS["quick"].recipes)
    assert sorted(ordered, key=str) == sorted(points, key=str)


@pytest.mark.parametrize("configurations", [1, 4, 5, 24, 28, 1000])
def test_batches_hold_whole_shapes_mixing_large_and_small(configurations):
    points = GRIDS["default"].points()
    cut = batches(points, configurations)
    assert sorted(p.key for batch in cut for p in batch) == sorted(p.key for p in points)
    owner = {p.shape: index for index, batch in enumerate(cut) for p in batch}
    assert all(owner[p.shape] == index for index, batch in enumerate(cut) for p in batch)  # whole shapes
    assert all(batch == sweep_order(batch) for batch in cut)  # largest first within a batch
    sizes = [len(batch) for batch in cut]
    assert max(sizes) - min(sizes) <= len(GRIDS["default"].recipes)  # one shape apart at most
    assert len(cut) == min(36, -(-144 // configurations))
    largest = [p.shape for p in sweep_order(points)][:: len(GRIDS["default"].recipes)]
    assert owner[largest[0]] == 0  # the first batch sets the time budget's estimates
    # the largest shapes, whose memory lets only two or three compile at once, go to different batches
    assert len({owner[shape] for shape in largest[: len(cut)]}) == len(cut)


# --- shards -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", ["default", "quick", "llama"])
@pytest.mark.parametrize("count", range(1, 9))
def test_shards_partition_the_grid_exactly(grid, count):
    points = GRIDS[grid].points()
    shards = [Shard(index, count).select(points) for index in range(1, count + 1)]
    keys = [p.key for shard in shards for p in shard]
    assert sorted(keys) == sorted(p.key for p in points)  # every point once: none missing, none twice
    for shard in shards:  # a shape's recipes stay together (one bf16 baseline per shape)
        shapes = {p.shape for p in shard}
        assert len(shard) == len(shapes) * len(GRIDS[grid].recipes)
    shape_counts = [len({p.shape for p in shard}) for shard in shards]
    assert max(shape_counts) - min(shape_counts) <= 1


def test_shards_deal_sizes_back_and_forth():
    # Largest shapes first, dealt 1, 2, 2, 1, 1, 2...: neither shard gets all the big ones.
    shapes = [(s, s, s) for s in (8, 7, 6, 5, 4, 3)]
    assert Shard(1, 2).shapes(shapes) == {(8, 8, 8), (5, 5, 5), (4, 4, 4)}
    assert Shard(2, 2).shapes(shapes) == {(7, 7, 7), (6, 6, 6), (3, 3, 3)}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2/4", Shard(2, 4)),
        (" 1 / 1 ", Shard(1, 1)),
        ("0/4", None),  # 1-based
        ("5/4", None),  # past the count
        ("2", None),  # not I/N
        ("a/b", None),
    ],
)
def test_shard_parse(text, expected):
    if expected is None:
        with pytest.raises(AdvisorError, match="--shard"):
            Shard.parse(text)
    else:
        assert Shard.parse(text) == expected


# --- the time budget ----------------------------------------------------------------------------------------


def test_estimate_is_the_longest_point_of_the_same_recipe_and_compile_state():
    estimator = DurationEstimator()
    assert estimator.estimate("bf16", precompiled=True) == FIRST_POINT_ESTIMATE_S  # nothing measured yet
    estimator.observe("bf16", True, 4.0)
    estimator.observe("bf16", True, 9.0)
    estimator.observe("rowwise", True, 12.0)
    assert estimator.estimate("bf16", precompiled=True) == 9.0  # the longest bf16 so far
    assert estimator.estimate("tensorwise", precompiled=True) == 12.0  # no tensorwise yet: the longest
    # Nothing was compiled cold yet: the longest point plus a cold compile.
    assert estimator.estimate("bf16", precompiled=False) == 12.0 + FIRST_POINT_ESTIMATE_S
    estimator.observe("bf16", False, 30.0)
    assert estimator.estimate("rowwise", precompiled=False) == 30.0


def test_estimates_seed_from_the_runs_a_sweep_resumes():
    estimator = DurationEstimator()
    estimator.observe_records(
        [
            {"recipe": "rowwise", "duration_s": 7.5, "precompiled": "ok"},
            {"recipe": "rowwise", "duration_s": None},  # a record of an older version: no duration
        ]
    )
    assert estimator.estimate("rowwise", precompiled=True) == 7.5


@pytest.mark.parametrize(
    ("elapsed", "estimate", "allowed"),
    [
        (0.0, 100 - FINISH_RESERVE_S, True),  # exactly fits with the reserve for the summary
        (0.0, 100 - FINISH_RESERVE_S + 0.1, False),
        (50.0, 10.0, True),
    ],
)
def test_budget_allows_a_point_only_if_it_finishes_inside(elapsed, estimate, allowed):
    budget = TimeBudget(100.0, started=0.0, clock=lambda: elapsed)
    assert budget.allows(estimate) is allowed
    assert TimeBudget(None, started=0.0).allows(1e9)


@pytest.mark.parametrize("seconds", [0, -5.0, float("nan")])
def test_budget_must_be_positive(seconds):
    with pytest.raises(AdvisorError, match="--time-budget"):
        TimeBudget(seconds, started=0.0)


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


POINT_SECONDS = 10.0


def fake_shape_bench(clock: FakeClock, measured: list):
    """ShapeBench whose points take POINT_SECONDS on `clock`, and no time at all."""

    class FakeShapeBench:
        def __init__(self, M, K, N, settings):
            self.shape = (M, K, N)

        def measure(self, recipe):
            clock.now += POINT_SECONDS
            measured.append((*self.shape, recipe))
            return Measurement(
                kernel_time_s=None,
                wall_time_s={"median": 1e-3, "p20": 1e-3, "p80": 1e-3, "iterations": 5},
                peak_memory_bytes=None,
                sqnr_db=None,
            )

        def release(self):
            pass

    return FakeShapeBench


def test_time_budget_stops_and_the_same_sweep_resumes_without_loss_or_duplicates(tmp_path, monkeypatch):
    clock, measured = FakeClock(), []
    monkeypatch.setattr(linear, "ShapeBench", fake_shape_bench(clock, measured))
    grid = make_grid(emulate=True)  # 4 shapes x 4 configurations
    settings = BenchSettings(emulate=True, compile_workers=0)
    budget = 100.0
    first = run_sweep(grid, tmp_path, settings, time_budget_s=budget, clock=clock, started=0.0)
    # The first point (estimate FIRST_POINT_ESTIMATE_S) fits; then each 10 s point while it + the reserve fit.
    assert first.stopped_by_budget and clock.now <= budget - FINISH_RESERVE_S
    assert len(first.records) == int((budget - FINISH_RESERVE_S) // POINT_SECONDS)
    assert first.left_points == 16 - len(first.records)
    while True:
        started = clock.now
        again = run_sweep(grid, tmp_path, settings, time_budget_s=budget, clock=clock, started=started)
        assert clock.now - started <= budget - FINISH_RESERVE_S
        if not again.stopped_by_budget:
            break
    assert again.left_points == 0
    keys = [(p["M"], p["K"], p["N"], p["recipe"]) for run in load_results([tmp_path]) for p in run.points]
    assert sorted(keys) == sorted(p.key for p in grid.points()) == sorted(measured)
    assert all(p["duration_s"] == POINT_SECONDS for run in load_results([tmp_path]) for p in run.points)


def test_a_budget_too_small_for_one_point_measures_nothing_and_says_so(tmp_path, monkeypatch):
    clock, measured = FakeClock(), []
    monkeypatch.setattr(linear, "ShapeBench", fake_shape_bench(clock, measured))
    summary = run_sweep(
        make_grid(emulate=True), tmp_path, BenchSettings(emulate=True), time_budget_s=30.0, clock=clock
    )
    assert summary.stopped_by_budget and not measured and summary.records == []
    [run] = load_results([tmp_path])  # the header is written: the next command resumes from it
    assert run.header["time_budget_s"] == 30.0


def test_shards_of_one_grid_in_one_directory_resume_each_other(tmp_path, monkeypatch):
    clock, measured = FakeClock(), []
    monkeypatch.setattr(linear, "ShapeBench", fake_shape_bench(clock, measured))
    grid, settings = make_grid(emulate=True), BenchSettings(emulate=True)
    for index in (1, 2, 3):
        summary = run_sweep(grid, tmp_path, settings, shard=Shard(index, 3), clock=clock)
        assert summary.run_id and not summary.stopped_by_budget
    assert sorted(measured) == sorted(p.key for p in grid.points())
    headers = [run.header["shard"] for run in load_results([tmp_path])]
    assert sorted(h["index"] for h in headers) == [1, 2, 3] and {h["count"] for h in headers} == {3}
    # Every point is saved: the whole grid has nothing left.
    assert run_sweep(grid, tmp_path, settings, clock=clock).path is None


# --- through the CLI ----------------------------------------------------------------------------------------

runner = CliRunner()


def test_bench_with_a_time_budget_exits_0_and_says_how_to_resume(tmp_path, monkeypatch):
    clock, measured = FakeClock(), []
    monkeypatch.setattr(linear, "ShapeBench", fake_shape_bench(clock, measured))
    real_run_sweep = bench.run_sweep

    def run_sweep_on_the_fake_clock(grid, out, settings, **kwargs):
        return real_run_sweep(grid, out, settings, **{**kwargs, "clock": clock, "started": 0.0})

    monkeypatch.setattr(bench, "run_sweep", run_sweep_on_the_fake_clock)
    from fp8advisor.cli import app

    arguments = ["bench", "--emulate", "--out", str(tmp_path), "--no-png", "--time-budget", "100"]
    monkeypatch.setattr(sys, "argv", ["/usr/bin/fp8advisor", *arguments])
    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    assert "time budget" in result.output and "Resume with the same command" in result.output
    assert f"fp8advisor bench --emulate --out {tmp_path} --no-png --time-budget 100" in result.output
    assert len(measured) == int((100 - FINISH_RESERVE_S) // POINT_SECONDS)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--shard", "3/2"], "--shard"),
        (["--time-budget", "0"], "--time-budget"),
        (["--compile-timeout", "-1"], "--compile-timeout"),
    ],
)
def test_bad_sweep_options_exit_2_before_measuring(tmp_path, arguments, message):
    from fp8advisor.cli import app

    result = runner.invoke(app, ["bench", "--emulate", "--out", str(tmp_path), *arguments])
    assert result.exit_code == 2 and message in result.output
    assert not list(tmp_path.iterdir())


def test_point_record_says_how_long_and_how_it_was_compiled():
    record = bench.point_record(
        "r", BenchPoint(64, 32, 32, "bf16"), emulated=True, failure="boom", duration_s=1.5, precompiled="ok"
    )
    assert (record["duration_s"], record["precompiled"], record["compile"], record["profiler"]) == (
        1.5,
        "ok",
        None,
        None,
    )
