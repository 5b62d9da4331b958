"""`fp8advisor bench` through the CLI: the emulated pipeline end to end, its records and heatmaps, exit
codes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _bench_helpers import CLI_GRID, RECIPE, SHAPE, load_benchmark, serial_inductor  # noqa: E402

from fp8advisor.cli import app  # noqa: E402
from fp8advisor.measure.results import SCHEMA  # noqa: E402

HAS_FP8_GPU = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
runner = CliRunner()

POINT_KEYS = {
    "kind",
    "run_id",
    "M",
    "K",
    "N",
    "recipe",
    "status",
    "reason",
    "kernel_time_s",
    "wall_time_s",
    "peak_memory_bytes",
    "sqnr_db",
    "gemm_only_speedup",
    "cast_overhead_s",
    "breakdown_error",
    "compile",
    "profiler",
    "precompiled",
    "precompile_s",
    "duration_s",
    "measured_at",
    "emulated",
}


@pytest.fixture(scope="module")
def emulated_sweep(tmp_path_factory):
    """One emulated sweep through the CLI (bf16 + tensorwise at one tiny shape), shared by the tests below."""
    out = tmp_path_factory.mktemp("bench") / "results"
    with serial_inductor():
        result = runner.invoke(app, ["bench", *CLI_GRID, "--out", str(out)])
    return result, out


@pytest.mark.slow
def test_emulated_sweep_exits_0_and_says_it_is_emulated(emulated_sweep):
    result, out = emulated_sweep
    assert result.exit_code == 0, result.output
    assert "EMULATED" in result.output and "2 ok" in result.output
    assert f"{RECIPE}: speedup over bf16 (wall_time_median)" in result.output  # the terminal heatmap


@pytest.mark.slow
def test_emulated_sweep_writes_one_run_file_with_header_and_points(emulated_sweep):
    _, out = emulated_sweep
    [path] = list(out.glob("run-*.jsonl"))
    assert re.fullmatch(r"run-\d{8}T\d{6}Z-[0-9a-f]{8}\.jsonl", path.name)
    header, *points = [json.loads(line) for line in path.read_text().splitlines()]
    assert header["kind"] == "run" and header["schema"] == SCHEMA
    assert header["device"]["emulated"] is True and header["device"]["compute_capability"] is None
    assert {"torch", "torchao", "triton", "cuda", "fp8advisor", "python"} <= set(header["software"])
    assert header["method"]["kernel_time"] is None and "EMULATED" in header["method"]["wall_time"]
    assert header["grid"]["shapes"] == [list(SHAPE)] and header["grid"]["recipes"] == ["bf16", RECIPE]
    assert header["ceilings"] is None and header["resumes"] == []
    assert header["shard"] is None and header["time_budget_s"] is None
    assert [point["recipe"] for point in points] == ["bf16", RECIPE]
    for point in points:
        assert set(point) == POINT_KEYS
        assert (point["M"], point["K"], point["N"]) == SHAPE
        assert point["status"] == "ok" and point["reason"] is None and point["run_id"] == header["run_id"]
        assert (
            point["emulated"] is True
            and point["kernel_time_s"] is None
            and point["peak_memory_bytes"] is None
        )
        wall = point["wall_time_s"]
        assert 0 < wall["p20"] <= wall["median"] <= wall["p80"] and wall["iterations"] == 5
        assert point["compile"]["seconds"] > 0 and point["duration_s"] >= point["compile"]["seconds"]
        assert point["profiler"] is None  # no profiler
        assert point["precompiled"] is None and point["precompile_s"] is None  # no workers
    bf16, float8 = points
    assert bf16["sqnr_db"] is None
    # e4m3 keeps about 3 bits of mantissa: tens of dB on the output, less on the gradient (e5m2 in
    # tensorwise).
    assert float8["sqnr_db"]["output"] > 20 and float8["sqnr_db"]["grad_input"] > 15


@pytest.mark.slow
def test_emulated_sweep_writes_the_heatmap_png(emulated_sweep):
    _, out = emulated_sweep
    [png] = list(out.glob("run-*-heatmap.png"))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


@pytest.mark.slow
def test_the_same_command_again_has_nothing_to_measure(emulated_sweep):
    _, out = emulated_sweep
    result = runner.invoke(app, ["bench", *CLI_GRID, "--out", str(out), "--no-png"])
    assert result.exit_code == 0, result.output
    assert "nothing to measure" in result.output
    assert len(list(out.glob("run-*.jsonl"))) == 1


@pytest.mark.skipif(HAS_FP8_GPU, reason="this machine has an FP8 GPU")
def test_without_a_gpu_bench_exits_2_and_points_to_emulate(tmp_path):
    result = runner.invoke(app, ["bench", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--emulate" in result.output and "sm_89" in result.output
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--M", "1024,x"], "integers"),  # not a number
        (["--recipes", "fp4"], "unknown recipe"),
        (["--grid", "huge"], "unknown grid"),
    ],
)
def test_bad_options_exit_2(tmp_path, arguments, message):
    result = runner.invoke(app, ["bench", "--emulate", "--out", str(tmp_path), *arguments])
    assert result.exit_code == 2 and message in result.output


def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path, monkeypatch):
    from fp8advisor.measure import sweep as bench

    def interrupted_sweep(grid, out, settings, **kwargs):
        summary = bench.SweepSummary(grid=grid, path=None, run_id="r", total_points=8, skipped_points=3)
        summary.records = [{"status": "ok"}, {"status": "ok"}]
        raise bench.SweepInterrupted(summary)

    monkeypatch.setattr(bench, "run_sweep", interrupted_sweep)
    result = runner.invoke(app, ["bench", "--emulate", "--out", str(tmp_path)])
    assert result.exit_code == 130
    assert "5 of 8 points are saved" in result.output and "again to resume" in result.output


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_FP8_GPU, reason="needs a CUDA GPU with FP8 tensor cores (sm >= 89)")
def test_gpu_sweep_of_one_shape_records_kernel_time_memory_and_breakdown(tmp_path):
    result = runner.invoke(
        app,
        [
            "bench",
            "--M",
            "1024",
            "--K",
            "1024",
            "--N",
            "1024",
            "--out",
            str(tmp_path),
            "--compile-workers",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    [path] = list(tmp_path.glob("run-*.jsonl"))
    header, *points = [json.loads(line) for line in path.read_text().splitlines()]
    assert header["device"]["emulated"] is False and header["device"]["sm_count"] > 0
    assert "error" not in header["ceilings"], header["ceilings"]
    assert header["ceilings"]["bf16_flops"] > 0
    assert len(points) == 4 and all(point["status"] == "ok" for point in points)
    for point in points:
        assert point["kernel_time_s"] > 0 and point["peak_memory_bytes"] > 0
        assert point["profiler"]["suspect"] is None, point["profiler"]
        assert point["profiler"]["pads_recorded"] > 0 and point["wall_time_s"]["iterations"] >= 5
        assert point["precompiled"] == "ok" and not point["compile"]["cold"], point["compile"]
    for point in points[1:]:
        assert point["breakdown_error"] is None, point["breakdown_error"]
        assert point["gemm_only_speedup"] > 0 and point["cast_overhead_s"] > 0
        assert point["sqnr_db"]["output"] > 20


REPOSITORY = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_bench_runs_from_a_plain_checkout_on_pythonpath(tmp_path):
    """As on a bare GPU machine: no install, the checkout on PYTHONPATH, torchao's compiled extras skipped,
    results where --out says and no PNG."""
    checkout = tmp_path / "checkout"
    for name in ("fp8advisor", "fp8advisor_kernels", "data"):
        shutil.copytree(REPOSITORY / name, checkout / name, ignore=shutil.ignore_patterns("__pycache__"))
    environment = {
        **os.environ,
        "PYTHONPATH": str(checkout),
        "TORCHAO_FORCE_SKIP_LOADING_SO_FILES": "1",
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
    }
    show = "import fp8advisor, fp8advisor_kernels; print(fp8advisor.__file__, fp8advisor_kernels.__file__)"
    where = subprocess.run(
        [sys.executable, "-c", show], env=environment, capture_output=True, text=True, cwd=tmp_path
    )
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(checkout)) for line in where.stdout.split())  # not the installed copy
    out = tmp_path / "results" / "here"
    command = [sys.executable, "-m", "fp8advisor", "bench", *CLI_GRID, "--out", str(out), "--no-png"]
    completed = subprocess.run(
        command, env=environment, capture_output=True, text=True, timeout=400, cwd=tmp_path
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    [results] = list(out.glob("run-*.jsonl"))
    assert not list(out.glob("*.png")) and not (tmp_path / "fp8advisor-results").exists()
    kinds = [json.loads(line)["kind"] for line in results.read_text().splitlines()]
    assert kinds == ["run", "point", "point"]


@pytest.mark.skipif(HAS_FP8_GPU, reason="checks the message of a machine without an FP8 GPU")
def test_the_gpu_smoke_test_refuses_a_machine_without_an_fp8_gpu(tmp_path):
    command = [sys.executable, str(REPOSITORY / "benchmarks" / "gpu_smoke.py"), "--out", str(tmp_path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and "sm_89" in completed.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("text", ["8192,32768", "8192,32768,x", "8,32768,32768", "1,2,3,4"])
def test_the_gpu_smoke_test_refuses_a_rows_shape_that_is_not_three_sizes(text, tmp_path):
    command = [sys.executable, str(REPOSITORY / "benchmarks" / "gpu_smoke.py"), "--out", str(tmp_path)]
    completed = subprocess.run([*command, "--rows-at", text], capture_output=True, text=True, timeout=120)
    assert completed.returncode == 2 and "expected M,K,N" in completed.stderr and text in completed.stderr
    assert load_benchmark("gpu_smoke")._shape("8192,32768,1024") == (8192, 32768, 1024)
