"""`fp8advisor bench` through the CLI: the emulated pipeline end to end, its records and heatmaps, exit
codes."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from _bench_helpers import CLI_GRID, RECIPE, SHAPE, serial_inductor  # noqa: E402

from fp8advisor.cli import app  # noqa: E402
from fp8advisor.results import SCHEMA  # noqa: E402

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
        assert 0 < wall["p20"] <= wall["median"] <= wall["p80"]
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
    from fp8advisor import bench

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
    for point in points[1:]:
        assert point["breakdown_error"] is None, point["breakdown_error"]
        assert point["gemm_only_speedup"] > 0 and point["cast_overhead_s"] > 0
        assert point["sqnr_db"]["output"] > 20
