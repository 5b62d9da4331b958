"""The pre-compiling worker pool: largest first, a hung worker killed, a dead one noticed, deadlines kept."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _bench_helpers import hanging_compile, misbehaving_compile  # noqa: E402

from fp8advisor.measure.linear import BenchPoint  # noqa: E402
from fp8advisor.measure.precompile import Precompiler, estimated_peak_bytes, submission_order  # noqa: E402
from fp8advisor.measure.protocol import BenchSettings  # noqa: E402

SETTINGS = BenchSettings(emulate=True)


def reasons_by_K(outcomes: dict):
    """An on_done that keeps the first reason reported for each point, by its K."""

    def done(point, reason, seconds):
        outcomes.setdefault(point.K, reason)

    return done


def test_largest_configurations_are_submitted_first():
    points = [BenchPoint(1024, 1024, 1024, "bf16"), BenchPoint(32768, 32768, 32768, "bf16")]
    points.append(BenchPoint(1024, 1024, 1024, "rowwise"))  # float8 copies: more memory than its bf16
    assert submission_order(points) == [points[1], points[2], points[0]]


def test_memory_estimate_grows_with_the_shape_and_float8_copies():
    small, large = BenchPoint(1024, 1024, 1024, "bf16"), BenchPoint(32768, 32768, 32768, "bf16")
    assert estimated_peak_bytes(large) > estimated_peak_bytes(small)
    assert estimated_peak_bytes(BenchPoint(1024, 1024, 1024, "rowwise")) > estimated_peak_bytes(small)


@pytest.mark.slow
def test_a_hung_worker_is_killed_and_a_dead_one_noticed_and_the_rest_compile():
    points = [BenchPoint(64, K, 32, "bf16") for K in (32, 48, 16, 80, 96, 112)]
    outcomes, seconds = {}, {}

    def done(point, reason, worker_seconds):
        outcomes[point.K], seconds[point.K] = reason, worker_seconds

    started = time.monotonic()
    with Precompiler(2, SETTINGS, timeout_s=4.0, task=misbehaving_compile) as pool:
        pool.run(points, done)
        processes = [worker.process for worker in pool._workers]
    elapsed = time.monotonic() - started
    assert elapsed < 60  # not the hour the hung worker would sleep
    # a worker that answered says how long it took (failed too); a killed or dead one cannot
    assert all(0 < seconds[K] < elapsed for K in (32, 96, 80)) and seconds[48] is None and seconds[16] is None
    # counted from the point's dispatch, not the worker's start (spawning and importing torch take seconds)
    assert 1.5 <= seconds[112] < 2.5 and outcomes[112] is None
    assert outcomes[32] is None and outcomes[96] is None
    assert outcomes[48].startswith("timed out after 4 s")
    assert "died (exit code 3)" in outcomes[16]
    assert outcomes[80] == "ValueError: boom"
    assert not any(process.is_alive() for process in processes)  # closed: nothing left running


@pytest.mark.slow
def test_at_the_deadline_busy_workers_are_killed_and_every_point_is_reported():
    points = [BenchPoint(64, K, 32, "bf16") for K in (32, 48, 64)]
    outcomes = {}
    with Precompiler(2, SETTINGS, timeout_s=600.0, task=hanging_compile) as pool:
        started = time.monotonic()
        pool.run(points, reasons_by_K(outcomes), deadline=started + 2)
        assert time.monotonic() - started < 15
        assert not any(worker.point is not None for worker in pool._workers)
    assert sorted(outcomes) == [32, 48, 64]
    assert all("time budget" in reason for reason in outcomes.values())


@pytest.mark.slow
def test_a_worker_that_died_while_idle_is_replaced():
    points = [BenchPoint(64, K, 32, "bf16") for K in (32, 64, 96)]
    outcomes = {}
    with Precompiler(1, SETTINGS, timeout_s=60.0, task=misbehaving_compile) as pool:
        pool.run(points[:1], reasons_by_K(outcomes))
        [idle] = pool._workers
        idle.process.kill()  # e.g. the OOM killer, between two batches
        idle.process.join()
        pool.run(points[1:], reasons_by_K(outcomes))
    assert outcomes == {32: None, 64: None, 96: None}


def test_workers_that_never_get_ready_are_given_up(monkeypatch):
    from fp8advisor.measure import precompile

    monkeypatch.setattr(precompile, "STARTUP_TIMEOUT_S", 0.0)  # nobody starts that fast
    outcomes = {}
    with Precompiler(2, SETTINGS, timeout_s=60.0, task=misbehaving_compile) as pool:
        pool.run([BenchPoint(64, 32, 32, "bf16")], reasons_by_K(outcomes))
    assert "fail to start" in outcomes[32]
