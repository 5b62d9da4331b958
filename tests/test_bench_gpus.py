"""`bench --gpus`: one grid measured by several processes at once through torchrun, into one results
directory, on the CPU with emulated processes.

The torchrun tests run the real launcher, the real workers and the real files; only the timing of a point is
replaced, in the workers, by a sleep (a `sitecustomize` on PYTHONPATH: torch.compile on a CPU costs seconds
per shape and process). The locks, the options and the worker's place are checked in this process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from fp8advisor.errors import AdvisorError  # noqa: E402
from fp8advisor.measure import launch, linear  # noqa: E402
from fp8advisor.measure import sweep as sweep_module  # noqa: E402
from fp8advisor.measure.launch import (  # noqa: E402
    ShardLock,
    TorchrunWorker,
    pin_gpu,
    shard_lock_name,
    torchrun_command,
    without_gpus,
)
from fp8advisor.measure.linear import make_grid  # noqa: E402
from fp8advisor.measure.protocol import BenchSettings, Measurement  # noqa: E402
from fp8advisor.measure.results import load_results, point_key, read_run  # noqa: E402
from fp8advisor.measure.schedule import Shard  # noqa: E402
from fp8advisor.measure.sweep import grid_on_disk, run_sweep  # noqa: E402

runner = CliRunner()

#: A worker's timing replaced by a sleep of FP8ADVISOR_TEST_POINT_S seconds (in torchrun's workers only).
FAKE_TIMING = """
import os

if os.environ.get("RANK") is not None and os.environ.get("FP8ADVISOR_TEST_POINT_S"):
    import time

    from fp8advisor.measure import linear
    from fp8advisor.measure.protocol import Measurement

    class _SleepingShapeBench:
        def __init__(self, M, K, N, settings):
            pass

        def measure(self, recipe):
            time.sleep(float(os.environ["FP8ADVISOR_TEST_POINT_S"]))
            wall = {"median": 1e-3, "p20": 1e-3, "p80": 1e-3, "iterations": 5}
            return Measurement(kernel_time_s=None, wall_time_s=wall, peak_memory_bytes=None, sqnr_db=None)

        def release(self):
            pass

    linear.ShapeBench = _SleepingShapeBench
"""


def sizes(count: int) -> list[str]:
    """`--M 32,48,...` of `count` shapes (K = N = 32)."""
    return ["--M", ",".join(str(32 + 16 * index) for index in range(count)), "--K", "32", "--N", "32"]


def gpus_command(out: Path, processes: int, shapes: int) -> list[str]:
    grid = [*sizes(shapes), "--recipes", "tensorwise", "--compile-workers", "0", "--no-png"]
    return [sys.executable, "-m", "fp8advisor", "bench", "--gpus", str(processes), "--emulate", *grid]


def environment(tmp_path: Path, point_s: float) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(FAKE_TIMING)
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "FP8ADVISOR_TEST_POINT_S": str(point_s)}


def saved_points(out: Path) -> list[tuple]:
    """(point key, run id, measured at) of every point in every run file of `out`."""
    return [(point_key(p), run.run_id, p["measured_at"]) for run in load_results([out]) for p in run.points]


def expected_keys(shapes: int) -> list[tuple]:
    return sorted(
        (32 + 16 * index, 32, 32, recipe) for index in range(shapes) for recipe in ("bf16", "tensorwise")
    )


# --- through torchrun ---------------------------------------------------------------------------------------


def test_gpus_3_measures_every_point_of_the_grid_once_in_three_shards(tmp_path):
    out = tmp_path / "results"
    completed = subprocess.run(
        [*gpus_command(out, 3, 3), "--out", str(out)],
        env=environment(tmp_path, 0.05),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    runs = load_results([out])
    assert sorted((run.header["shard"]["index"], run.header["shard"]["count"]) for run in runs) == [
        (1, 3),
        (2, 3),
        (3, 3),
    ]
    assert sorted(key for key, _, _ in saved_points(out)) == expected_keys(3)  # each once, none missing
    assert "[shard 2/3] measured" in completed.stdout  # plain lines per worker, no live bars
    assert "the whole grid: 6 of 6 points are saved" in completed.stdout
    # `fit` reads every run file of the directory: the three shards' speedups merge into one setup.
    from fp8advisor.predict.measurements import measurements_from_runs

    [merged] = measurements_from_runs(load_results([out]))
    assert sorted(point.M for point in merged.speedups["tensorwise"]) == [32, 48, 64]


def test_a_worker_killed_mid_sweep_is_started_again_and_nothing_saved_is_lost(tmp_path):
    out = tmp_path / "results"
    launcher = subprocess.Popen(
        [*gpus_command(out, 3, 6), "--out", str(out)],
        env=environment(tmp_path, 0.5),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        pid, before = _kill_shard_2_after_its_first_point(out, launcher)
        output, _ = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, output
    after = saved_points(out)
    assert sorted(key for key, _, _ in after) == expected_keys(6)  # every point once
    assert set(before) <= set(after)  # what was saved before the kill stays, as it was
    # torchrun started the group again, and shard 2's new worker resumed what the killed one saved.
    killed, again = sorted(
        (run for run in load_results([out]) if run.header["shard"]["index"] == 2),
        key=lambda run: bool(run.header["resumes"]),
    )
    assert again.header["resumes"] == [killed.run_id] and killed.points
    assert f"pid: {pid}" in output


def _kill_shard_2_after_its_first_point(out: Path, launcher: subprocess.Popen) -> tuple[int, list]:
    """SIGKILL the worker of shard 2/3 (its lock file names it) once it saved a point, with points left."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and launcher.poll() is None:
        runs = [read_run(path) for path in out.glob("run-*.jsonl")] if out.is_dir() else []
        if any(run.header["shard"]["index"] == 2 and run.points for run in runs):
            holder = (out / shard_lock_name(Shard(2, 3))).read_text().split()
            pid = int(holder[1])
            before = saved_points(out)
            os.kill(pid, signal.SIGKILL)
            assert sum(run.header["shard"]["index"] == 2 for run in runs) == 1
            assert len([key for key, _, _ in before if key[0] in (48, 96)]) < 4  # shard 2 had points left
            return pid, before
        time.sleep(0.05)
    raise AssertionError(f"shard 2 saved no point in time (launcher status {launcher.poll()})")


# --- the locks ----------------------------------------------------------------------------------------------


class _InstantShapeBench:
    def __init__(self, M, K, N, settings):
        pass

    def measure(self, recipe):
        wall = {"median": 1e-3, "p20": 1e-3, "p80": 1e-3, "iterations": 5}
        return Measurement(kernel_time_s=None, wall_time_s=wall, peak_memory_bytes=None, sqnr_db=None)

    def release(self):
        pass


@pytest.fixture
def instant(monkeypatch):
    """Points that are measured at once (in this process)."""
    monkeypatch.setattr(linear, "ShapeBench", _InstantShapeBench)
    return make_grid(emulate=True), BenchSettings(emulate=True, compile_workers=0)  # 4 shapes


def test_shards_of_one_split_run_side_by_side_and_nothing_else_does(tmp_path, instant):
    grid, settings = instant
    with ShardLock(tmp_path, Shard(1, 4)):  # another process measuring shard 1/4
        for refused, why in [
            (Shard(1, 4), "another bench is writing to"),  # the same shard twice
            (None, "another bench is writing to"),  # the whole grid beside a shard
            (Shard(1, 2), "splits the grid another way"),  # overlapping points
        ]:
            with pytest.raises(AdvisorError, match=why):
                run_sweep(grid, tmp_path, settings, shard=refused)
        assert not list(tmp_path.glob("run-*.jsonl"))  # refused before anything was written
        assert run_sweep(grid, tmp_path, settings, shard=Shard(2, 4)).saved_points == 4  # its neighbour runs
    with ShardLock(tmp_path, None):  # a whole-grid run holds the directory alone
        with pytest.raises(AdvisorError, match="another bench is writing to"):
            run_sweep(grid, tmp_path, settings, shard=Shard(3, 4))
    assert grid_on_disk(grid, tmp_path, settings)[0] == 4
    assert run_sweep(grid, tmp_path, settings).saved_points == 16  # nothing holds it: the rest, resumed


def test_two_shards_started_in_the_same_second_with_the_same_run_id_get_two_files(
    tmp_path, instant, monkeypatch
):
    grid, settings = instant
    ids = iter(["1a2b3c4d", "1a2b3c4d", "5e6f7a8b"])
    monkeypatch.setattr(sweep_module, "new_run_id", lambda: next(ids))
    monkeypatch.setattr(sweep_module, "utc_now", lambda: "2026-11-22T10:00:00Z")
    first = run_sweep(grid, tmp_path, settings, shard=Shard(1, 2))
    second = run_sweep(grid, tmp_path, settings, shard=Shard(2, 2))
    assert (first.run_id, second.run_id) == ("1a2b3c4d", "5e6f7a8b") and first.path != second.path
    assert len(load_results([tmp_path])[0].points) == 8


# --- options, the command torchrun runs, and a worker's place ----------------------------------------------


def cli(*arguments: str):
    from fp8advisor.cli import app

    return runner.invoke(app, ["bench", *arguments])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--gpus", "0"], "--gpus takes `all` or a number of processes from 1 to 9999, got '0'"),
        (["--gpus", "x"], "--gpus takes `all` or a number of processes from 1 to 9999, got 'x'"),
        (["--gpus", "all"], "--gpus all: no CUDA GPU is visible"),
        (["--gpus", "2", "--shard", "1/2"], "--shard does not go with it"),
        (["--gpus", "2", "--model", "model.py"], "--model does not go with it"),
        (["--gpus", "5"], "--gpus 5: the grid has 4 shape(s)"),
    ],
)
def test_bad_gpus_exit_2_with_one_line_before_anything_starts(tmp_path, monkeypatch, arguments, message):
    monkeypatch.setattr(launch, "gpu_count", lambda: 0)
    monkeypatch.setattr(launch, "run_torchrun", _no_torchrun)
    result = cli("--emulate", "--out", str(tmp_path / "out"), *arguments)
    assert result.exit_code == 2, result.output
    assert message in result.output and result.output.count("error:") == 1
    if "all" in arguments:
        assert "--emulate" in result.output  # the hint says how to try it on the CPU
    assert not (tmp_path / "out").exists()


def test_gpus_without_a_gpu_and_without_emulate_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "gpu_count", lambda: 0)
    result = cli("--gpus", "2", "--out", str(tmp_path))
    assert result.exit_code == 2 and "no CUDA GPU is visible" in result.output
    assert "--gpus 2 --emulate" in result.output


def _no_torchrun(*args, **kwargs):
    raise AssertionError("torchrun must not start")


def test_the_launcher_runs_the_same_arguments_under_torchrun(tmp_path, monkeypatch):
    launched = []

    def run_torchrun(command, env):
        launched.append((command, env))
        return False, 0

    monkeypatch.setattr(launch, "run_torchrun", run_torchrun)
    arguments = ["--debug", "bench", "--emulate", "--gpus=2", "--out", str(tmp_path), "--no-png", "--M", "64"]
    monkeypatch.setattr(sys, "argv", ["/usr/bin/fp8advisor", *arguments])
    from fp8advisor.cli import app

    result = runner.invoke(app, arguments)
    assert result.exit_code == 0, result.output
    [(command, env)] = launched
    assert command == [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "--max-restarts=2",
        "-m",
        "fp8advisor",
        "--debug",
        "bench",
        "--emulate",
        "--out",
        str(tmp_path),
        "--no-png",
        "--M",
        "64",
    ]
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(Path(launch.__file__).resolve().parents[2])
    assert "the whole grid: 0 of 16 points are saved" in result.output  # nothing measured: resume it
    assert "the same command resumes them" in result.output


def test_gpus_1_measures_in_this_process(tmp_path, monkeypatch, instant):
    monkeypatch.setattr(launch, "run_torchrun", _no_torchrun)
    result = cli("--emulate", "--gpus", "1", "--out", str(tmp_path), "--no-png", "--compile-workers", "0")
    assert result.exit_code == 0, result.output
    [run] = load_results([tmp_path])
    assert run.header["shard"] is None and len(run.points) == 16


def torchrun_place(monkeypatch, rank: int, world_size: int, local_rank: int | None = None) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    monkeypatch.setenv("LOCAL_RANK", str(rank if local_rank is None else local_rank))


def test_a_torchrun_worker_measures_shard_rank_plus_1(tmp_path, monkeypatch, instant):
    torchrun_place(monkeypatch, rank=2, world_size=4)
    result = cli("--emulate", "--out", str(tmp_path), "--compile-workers", "0")
    assert result.exit_code == 0, result.output
    [run] = load_results([tmp_path])
    assert run.header["shard"] == {"index": 3, "count": 4} and len(run.points) == 4
    assert "[shard 3/4] measured 4/4" in result.output
    assert "[shard 3/4] the whole grid: 4 of 16 points are saved" in result.output
    assert "speedup over bf16" not in result.output and not list(tmp_path.glob("*.png"))  # fit merges


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--shard", "1/2"], "--shard 1/2: this is torchrun's process 2 of 2, which measures shard 2/2"),
        (["--gpus", "2"], "--gpus starts torchrun itself"),
        (["--model", "model.py"], "--model measures one model's blocks in one process"),
    ],
)
def test_a_torchrun_worker_refuses_options_that_pick_its_points(
    tmp_path, monkeypatch, instant, arguments, message
):
    torchrun_place(monkeypatch, rank=1, world_size=2)
    result = cli("--emulate", "--out", str(tmp_path), *arguments)
    assert result.exit_code == 2 and message in result.output, result.output
    assert not list(tmp_path.iterdir())


def test_torchrun_variables_that_are_not_a_place_are_refused(monkeypatch):
    torchrun_place(monkeypatch, rank=3, world_size=2)
    with pytest.raises(AdvisorError, match="RANK 3 is not below its WORLD_SIZE 2"):
        TorchrunWorker.from_environment()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(AdvisorError, match="RANK is 'x'"):
        TorchrunWorker.from_environment()
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    assert TorchrunWorker.from_environment() is None  # RANK alone is not torchrun's


def test_without_gpus_keeps_every_other_argument_as_given():
    assert without_gpus(["bench", "--gpus", "all", "--out", "a b", "--M=1,2"]) == [
        "bench",
        "--out",
        "a b",
        "--M=1,2",
    ]
    assert without_gpus(["bench", "--gpus=3", "--emulate"]) == ["bench", "--emulate"]
    with pytest.raises(AdvisorError, match="holds no --gpus"):
        without_gpus(["bench", "--emulate"])
    assert torchrun_command(4, ["bench"])[-3:] == ["-m", "fp8advisor", "bench"]


@pytest.mark.parametrize(
    ("visible", "local_rank", "chosen"),
    [(None, 2, "2"), ("4,5,6,7", 1, "5"), ("GPU-aa, GPU-bb", 1, "GPU-bb")],
)
def test_a_worker_takes_the_gpu_of_its_local_rank(visible, local_rank, chosen):
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert pin_gpu(local_rank, environ) == chosen and environ["CUDA_VISIBLE_DEVICES"] == chosen


def test_a_worker_beyond_the_visible_gpus_is_refused():
    with pytest.raises(AdvisorError, match="LOCAL_RANK is 2, but CUDA_VISIBLE_DEVICES='0,1' names 2 GPU"):
        pin_gpu(2, {"CUDA_VISIBLE_DEVICES": "0,1"})
