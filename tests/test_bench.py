"""The sweep: grids, the profiler filter, quantiles, a failed point recorded and skipped, resume after kill
-9."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from _bench_helpers import CLI_GRID, RECIPE, SHAPE, serial_inductor  # noqa: E402

from fp8advisor.errors import AdvisorError  # noqa: E402
from fp8advisor.measure import linear as bench  # noqa: E402
from fp8advisor.measure.linear import Grid, make_grid  # noqa: E402
from fp8advisor.measure.protocol import BenchSettings  # noqa: E402
from fp8advisor.measure.results import grid_point_keys, load_results, runs_in  # noqa: E402
from fp8advisor.measure.sweep import run_sweep  # noqa: E402

# --- grids
# -----------------------------------------------------------------------------------------------------


def test_default_grid_spans_1024_to_32768_on_every_axis_as_a_complete_cube():
    grid = bench.GRIDS["default"]
    for axis in "MKN":
        values = grid.axis(axis)
        assert min(values) == 1024 and max(values) == 32768, axis
    assert 8192 in grid.axis("M")  # seq 8192 at batch 1: today's most common tokens per GPU
    assert grid.recipes == ("bf16", "tensorwise", "rowwise", "rowwise_with_gw_hp")
    assert len(grid.shapes) == len(set(grid.shapes)) == 4 * 3 * 3


def test_default_grid_predicts_the_published_table_it_leaves_out():
    # What the default grid is sized on: interpolating the published H100 rowwise table from the grid's 36
    # shapes must predict the other 180 points well (median error, and the side of 1.0x that decides).
    from fp8advisor.paths import RESULTS_DIR
    from fp8advisor.predict.interpolation import LogGridModel
    from fp8advisor.predict.measurements import read_speedup_table

    table = read_speedup_table(RESULTS_DIR / "torchao_rowwise_h100_2025-06.csv")
    published = {point.shape: point.speedup for point in table.speedups["rowwise"]}
    shapes = bench.GRIDS["default"].shapes
    model = LogGridModel(shapes, [published[shape] for shape in shapes])
    errors, right_side = [], []
    for shape, measured in published.items():
        if shape in shapes:
            continue
        predicted = math.exp(model.log_value(np.log2(np.array(shape, dtype=float))))
        errors.append(abs(predicted - measured) / measured)
        right_side.append((predicted > 1) == (measured > 1))
    assert len(errors) == 180
    assert float(np.median(errors)) < 0.06
    assert sum(right_side) / len(right_side) >= 0.95


def test_points_run_shape_by_shape_with_bf16_first():
    points = Grid.cube("t", [64], [32], [32, 16], ["rowwise", "bf16"]).points()
    assert [(p.N, p.recipe) for p in points] == [(16, "bf16"), (16, "rowwise"), (32, "bf16"), (32, "rowwise")]


@pytest.mark.parametrize(
    ("kwargs", "name", "shapes", "recipes"),
    [
        # --emulate without a grid: the tiny CPU grid
        ({"emulate": True}, "emulated", 4, 4),
        # an axis override keeps the named grid's other axes
        ({"name": "quick", "M": [4096]}, "quick+custom", 4, 4),
        # recipes override: bf16 is always kept, and first
        ({"name": "quick", "recipes": ["rowwise"]}, "quick", 8, 2),
        # all three axes given
        ({"M": [16], "K": [32], "N": [48, 64], "recipes": ["bf16", "tensorwise"]}, "default+custom", 2, 2),
    ],
)
def test_make_grid(kwargs, name, shapes, recipes):
    grid = make_grid(**kwargs)
    assert (grid.name, len(grid.shapes), len(grid.recipes)) == (name, shapes, recipes)
    assert grid.recipes[0] == "bf16"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": "huge"},  # unknown grid
        {"M": [0]},  # not positive
        {"M": []},  # empty
        {"recipes": ["fp4"]},  # unknown recipe
    ],
)
def test_make_grid_refuses_bad_input(kwargs):
    with pytest.raises(AdvisorError):
        make_grid(**kwargs)


def test_header_grid_lists_axes_and_shapes():
    grid = make_grid("quick")
    as_json = grid.to_json()
    assert as_json["M"] == [1024, 8192] and len(as_json["shapes"]) == 8
    assert grid_point_keys(as_json) == {point.key for point in grid.points()}


# --- pure measurement logic
# ------------------------------------------------------------------------------------


def test_failure_reason_is_one_line_with_the_exception_type():
    error = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
    assert bench.failure_reason(error) == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert bench.failure_reason(KeyError()) == "KeyError"


@pytest.mark.parametrize(
    ("settings", "pending", "workers"),
    [
        (BenchSettings(emulate=True), 10, 0),  # the CPU emulation compiles in-process
        (BenchSettings(compile_workers=3), 2, 2),  # never more workers than configurations
        (BenchSettings(compile_workers=0), 10, 0),  # explicitly off
    ],
)
def test_worker_count(settings, pending, workers):
    assert settings.worker_count(pending) == workers


# --- the emulated pipeline (torch.compile on the CPU)
# ----------------------------------------------------------


@pytest.mark.slow
def test_a_failed_point_is_recorded_with_its_reason_and_the_sweep_goes_on(tmp_path, monkeypatch):
    compile_module = bench.compile_module

    def compile_or_fail(module):
        if not hasattr(module, "fc") or type(module.fc).__name__ == "Linear":  # the bf16 configuration
            raise RuntimeError("injected compile error\nsecond line")
        return compile_module(module)

    monkeypatch.setattr(bench, "compile_module", compile_or_fail)
    grid = make_grid(emulate=True, M=[SHAPE[0]], K=[SHAPE[1]], N=[SHAPE[2]], recipes=[RECIPE])
    with serial_inductor():
        summary = run_sweep(grid, tmp_path, BenchSettings(emulate=True))
    failed, measured = summary.records
    assert (failed["recipe"], failed["status"]) == ("bf16", "failed")
    assert failed["reason"] == "RuntimeError: injected compile error"
    assert failed["wall_time_s"] is None and failed["kernel_time_s"] is None
    assert (measured["recipe"], measured["status"]) == (RECIPE, "ok")  # the sweep went on
    assert measured["wall_time_s"]["median"] > 0 and measured["emulated"] is True
    [run] = load_results([tmp_path])
    assert [point["status"] for point in run.points] == ["failed", "ok"]
    # A failed point counts as done: a second sweep has nothing left to measure.
    again = run_sweep(grid, tmp_path, BenchSettings(emulate=True))
    assert again.path is None and again.skipped_points == 2


def _complete_points(directory: Path) -> int:
    return sum(len(run.points) for run in runs_in(directory, problems=[]))


@pytest.mark.slow
def test_resume_after_kill_9_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "results"
    command = [sys.executable, "-c", "from fp8advisor.cli import main; main()", "bench", *CLI_GRID]
    command += ["--out", str(out), "--no-png"]
    environment = dict(os.environ, TORCHINDUCTOR_COMPILE_THREADS="1")
    process = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 150
        while _complete_points(out) < 1 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        process.kill()  # SIGKILL: no cleanup runs
        process.wait()
    finally:
        if process.poll() is None:
            process.kill()
    assert _complete_points(out) == 1, "the sweep should have been killed after its first point"
    [killed] = list(out.glob("run-*.jsonl"))
    with killed.open("ab") as file:
        file.write(b'{"kind": "point", "run_id": "x", "M": 32, "K": ')  # as if killed mid-write

    grid = make_grid(emulate=True, M=[SHAPE[0]], K=[SHAPE[1]], N=[SHAPE[2]], recipes=[RECIPE])
    with serial_inductor():
        summary = run_sweep(grid, out, BenchSettings(emulate=True))
    assert summary.skipped_points == 1 and len(summary.records) == 1
    assert summary.resumed_from == [load_results([killed])[0].run_id]
    keys = [
        (point["M"], point["K"], point["N"], point["recipe"])
        for run in load_results([out])
        for point in run.points
    ]
    assert sorted(keys) == sorted(
        point.key for point in grid.points()
    )  # every point once: none lost, none twice


# --- heatmaps -----------------------------------------------------------------------------------------------


def speedup(recipe, M, K, N, value):
    from fp8advisor.measure.speedups import Speedup

    return Speedup(M, K, N, recipe, value, 1.0, 1.0 / value, "kernel_time", "GPU", False, "r")


def test_heatmap_panels_are_per_recipe_in_torchao_order_then_per_m_with_k_rows_and_n_columns():
    from fp8advisor.measure.heatmaps import heatmap_panels

    panels = heatmap_panels(
        [
            speedup("rowwise", 4096, 1024, 2048, 1.5),
            speedup("tensorwise", 1024, 1024, 1024, 0.8),
            speedup("rowwise", 4096, 2048, 1024, 1.2),
            speedup("rowwise", 1024, 1024, 1024, 0.5),
        ]
    )
    assert list(panels) == ["tensorwise", "rowwise"]
    first, second = panels["rowwise"]
    assert first.M == 1024 and first.cells == ((0.5,),)
    assert (second.M, second.Ks, second.Ns) == (4096, (1024, 2048), (1024, 2048))
    assert second.cells == ((None, 1.5), (1.2, None))  # unmeasured cells stay empty


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.234, "1.23"),  # two decimals
        (0.01, "0.01"),  # the boundary
        (0.0042, "4.2e-03"),  # never "0.00"
    ],
)
def test_format_speedup(value, text):
    from fp8advisor.measure.heatmaps import format_speedup

    assert format_speedup(value) == text


def test_png_of_results_without_baselines_is_refused(tmp_path):
    from fp8advisor.measure.heatmaps import speedup_heatmaps_png

    with pytest.raises(AdvisorError, match="nothing to plot"):
        speedup_heatmaps_png([], tmp_path / "h.png")


def test_breakdown_sums_the_three_gemms_and_the_recipe_casts_and_reuses_them_across_recipes(monkeypatch):
    """The arithmetic of the GPU breakdown with the GPU timings replaced by constants (the kernels themselves
    are tested in test_kernels.py)."""
    pytest.importorskip("triton", reason="fp8advisor_kernels needs triton: pip install 'fp8advisor[bench]'")
    from fp8advisor_kernels import timing

    calls = {"mm": 0, "scaled_mm": 0, "cast": 0}

    def bf16_gemm_seconds(rows, inner, columns, layout, **budget):
        calls["mm"] += 1
        return 4.0

    def fp8_gemm_seconds(rows, inner, columns, rowwise, fast_accum, **budget):
        calls["scaled_mm"] += 1
        return 2.0 if rowwise else 1.0

    def do_bench_seconds(fn, **budget):
        calls["cast"] += 1
        return {"median": 0.5, "p20": 0.5, "p80": 0.5}

    monkeypatch.setattr(timing, "bf16_gemm_seconds", bf16_gemm_seconds)
    monkeypatch.setattr(timing, "fp8_gemm_seconds", fp8_gemm_seconds)
    monkeypatch.setattr(timing, "do_bench_seconds", do_bench_seconds)
    shape = bench.ShapeBench(32, 16, 48, BenchSettings(emulate=True))
    assert shape._breakdown("rowwise") == {"gemm_only_speedup": 12.0 / 6.0, "cast_overhead_s": 6 * 0.5}
    # grad_weight stays bf16: (4 + 4 + 4) / (2 + 2 + 4); the output and grad_input GEMMs and casts are reused
    # from rowwise...
    assert shape._breakdown("rowwise_with_gw_hp") == {"gemm_only_speedup": 12.0 / 8.0, "cast_overhead_s": 2.0}
    # ... except its tensorwise weight cast for grad_input, the one cast rowwise does not make
    assert calls == {"mm": 3, "scaled_mm": 3, "cast": 7}
    assert shape._breakdown("tensorwise") == {"gemm_only_speedup": 12.0 / 3.0, "cast_overhead_s": 1.5}


# --- device -------------------------------------------------------------------------------------------------


def test_emulated_device_and_software_versions():
    from fp8advisor.device import emulated_device, software_versions

    assert emulated_device()["emulated"] is True and emulated_device()["compute_capability"] is None
    assert {"torch", "torchao", "triton", "cuda", "fp8advisor", "python"} == set(software_versions())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without a CUDA GPU")
def test_require_fp8_gpu_without_a_gpu_is_a_device_error_pointing_to_emulate():
    from fp8advisor.device import require_fp8_gpu
    from fp8advisor.errors import DeviceError

    with pytest.raises(DeviceError) as error:
        require_fp8_gpu()
    assert error.value.exit_code == 2 and "--emulate" in error.value.hint


@pytest.mark.parametrize(
    ("stdout", "expected"),
    [
        # driver and clocks as nvidia-smi prints them
        ("550.54.15, 1980, 2619, 1980, 2619\n", {"driver": "550.54.15", "sm": 1980, "sm_max": 1980}),
        # clocks it cannot read
        ("550.54.15, [N/A], [N/A], [N/A], [N/A]\n", {"driver": "550.54.15", "clocks_mhz": None}),
        # nothing printed: nothing known, no crash
        ("", {"driver": None, "clocks_mhz": None}),
    ],
)
def test_nvidia_smi_parsing(monkeypatch, stdout, expected):
    from fp8advisor import device

    monkeypatch.setattr(device.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(device.subprocess, "run", lambda *args, **kwargs: SimpleNamespace(stdout=stdout))
    parsed = device._nvidia_smi("GPU-0")
    assert parsed.get("driver") == expected["driver"]
    if "clocks_mhz" in expected:
        assert parsed.get("clocks_mhz") is None
    else:
        assert (
            parsed["clocks_mhz"]["sm"] == expected["sm"]
            and parsed["clocks_mhz"]["sm_max"] == expected["sm_max"]
        )


@pytest.mark.slow
def test_precompiled_graphs_are_cache_hits_in_the_timing_process(tmp_path):
    """The two-phase design on the CPU, from empty caches: a spawned worker (with the worker's inductor
    settings) compiles each configuration first, then the timing process measures them, and every compile
    of the timing process must hit the caches the worker filled."""
    out = tmp_path / "results"
    command = [sys.executable, "-m", "fp8advisor", "bench", *CLI_GRID, "--out", str(out), "--no-png"]
    command += ["--compile-workers", "1"]
    environment = dict(
        os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), TORCHINDUCTOR_COMPILE_THREADS="1"
    )
    completed = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=400)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    [run] = load_results([out])
    assert [point["status"] for point in run.points] == ["ok", "ok"]
    for point in run.points:
        # The caches' own counters say hit or miss; the two compile times are not compared (a busy machine
        # can make a cache hit slower than the worker's cold compile).
        assert point["precompiled"] == "ok" and point["precompile_s"] > 0 and point["compile"]["seconds"] > 0
        compile_counters = point["compile"]
        assert compile_counters["fxgraph_cache_hit"] > 0 and not compile_counters["cold"], compile_counters
    assert "0 cold" in completed.stdout and "compile" in completed.stdout
