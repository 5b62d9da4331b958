"""Worker processes that compile a sweep's configurations before the timing process measures them.

A cold `torch.compile` of one forward + backward costs seconds to tens of seconds of CPU; the GPU work of a
point is a fraction of that. So spawned workers (one compile thread each) compile every configuration and
run it once, which fills inductor's FX-graph and AOTAutograd caches and the Triton kernel cache on disk;
the timing process then measures alone on the GPU and its compiles hit those caches. Rules:

- Workers never leave autotuning choices for the timing process (`compat.configure_compile_worker`).
- The largest configurations are submitted first, so the long ones do not trail at the end.
- GPU memory is shared out by an estimate per configuration (`estimated_peak_bytes`): a configuration is
  dispatched only while the estimates of those running fit the budget; one larger than the budget runs alone.
- A worker that takes longer than `timeout_s` on one configuration is killed (a hang, a runaway compile),
  as is one still busy at the caller's deadline (a time budget); a worker that dies is noticed. Either way
  its configuration is reported with the reason and simply compiles later, in the timing process. A
  replacement worker starts for what is left.

Each worker talks to the parent over its own pipe, so that killing one cannot corrupt what the others send.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: Workers in a row that may fail to start (die, or not be ready within STARTUP_TIMEOUT_S) before the pool
#: gives up (a broken environment).
MAX_FAILED_STARTS = 3
#: Seconds a worker may take to start (spawn, import torch and torchao) before it counts as failed.
STARTUP_TIMEOUT_S = 120.0
#: Seconds `close` waits for idle workers to exit before it kills them.
CLOSE_WAIT_S = 5.0

#: on_done(point, reason, seconds): reason None when the point was compiled and run, else why not; seconds
#: from its dispatch to the worker until the worker answered (its compile and one run), None when the
#: worker did not answer (killed, died, or never given the point).
DoneCallback = Callable[[object, str | None, float | None], None]


def estimated_peak_bytes(point) -> int:
    """A generous estimate of a configuration's GPU memory: bf16 activations, weights, gradients and copies,
    plus float8 copies in both layouts. Used only to keep pre-compiling workers from running out of memory.
    A point that knows its own estimate (grouped expert GEMMs) says it: `point.estimated_peak_bytes()`."""
    own = getattr(point, "estimated_peak_bytes", None)
    if own is not None:
        return int(own())
    M, K, N = point.shape
    bf16_bytes = 2 * (4 * M * K + 3 * K * N + 4 * M * N)
    float8_bytes = 0 if point.recipe == "bf16" else 2 * (M * K + K * N + M * N)
    return bf16_bytes + float8_bytes


def submission_order(points: Sequence) -> list:
    """Largest configuration first (by memory estimate, then shape), for a short tail."""
    return sorted(points, key=lambda point: (estimated_peak_bytes(point), point.shape), reverse=True)


def _worker_main(connection, task: Callable, settings, emulate: bool) -> None:
    """A worker: configure, say ready, then compile each point it is sent until it is sent None."""
    import signal

    from fp8advisor import compat

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops the workers
    compat.configure_compile_worker()
    if emulate:
        import torch

        torch.set_num_threads(1)  # as the timing process does under --emulate (it is in inductor's cache key)
    connection.send(("ready", None))
    while True:
        point = connection.recv()
        if point is None:
            return
        try:
            reason = task(point, settings)
        except Exception as error:  # noqa: BLE001 - the timing process meets it again and records it
            reason = f"{type(error).__name__}: {error}"[:500]
        connection.send(("done", reason))


@dataclass
class _Worker:
    process: object
    connection: object
    ready: bool = False
    point: object = None
    need: float = 0.0
    started: float = 0.0


class Precompiler:
    """`workers` spawned processes running `task(point, settings)` (a workload's `precompile`, for example
    `fp8advisor.measure.linear.precompile_point`)."""

    def __init__(
        self,
        workers: int,
        settings,
        *,
        timeout_s: float,
        task: Callable,
        memory_budget_bytes: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        import multiprocessing

        self._context = multiprocessing.get_context("spawn")  # CUDA cannot be used in forked children
        self._settings, self._task, self._timeout_s, self._clock = settings, task, timeout_s, clock
        self._budget = memory_budget_bytes
        self._count = workers
        self._workers: list[_Worker] = []
        self._failed_starts = 0  # workers in a row that died, or hung, before they were ready

    # --- workers

    def _start(self) -> _Worker:
        parent, child = self._context.Pipe()
        process = self._context.Process(
            target=_worker_main,
            args=(child, self._task, self._settings, self._settings.emulate),
            daemon=True,
            name="fp8advisor-precompile",
        )
        process.start()
        child.close()
        worker = _Worker(process, parent, started=self._clock())
        self._workers.append(worker)
        return worker

    def _stop(self, worker: _Worker) -> None:
        if worker.process.is_alive():
            worker.process.kill()
        worker.process.join(timeout=10)
        worker.connection.close()
        self._workers.remove(worker)

    def _used(self) -> float:
        return sum(worker.need for worker in self._workers if worker.point is not None)

    # --- the loop

    def run(self, points: Sequence, on_done: DoneCallback, *, deadline: float | None = None) -> None:
        """Compile `points`, largest first; `on_done` is called once per point, with None or the reason it
        was not compiled (failed, timed out, worker died, deadline), and the seconds the worker took.
        Returns when every point is reported."""
        from multiprocessing.connection import wait

        queue = submission_order(points)
        while len(self._workers) < min(self._count, len(queue)):
            self._start()
        while queue or any(worker.point is not None for worker in self._workers):
            now = self._clock()
            if deadline is not None and now >= deadline:
                self._abandon(queue, on_done, "the time budget left no time to pre-compile it")
                return
            self._dispatch(queue)
            waits = [worker.started + self._timeout_s for worker in self._workers if worker.point is not None]
            waits += [worker.started + STARTUP_TIMEOUT_S for worker in self._workers if not worker.ready]
            if deadline is not None:
                waits.append(deadline)
            timeout = max(0.0, min([now + 1.0, *waits]) - now)
            handles = {worker.connection: worker for worker in self._workers}
            handles.update({worker.process.sentinel: worker for worker in self._workers})
            for handle in wait(list(handles), timeout=timeout):
                worker = handles[handle]
                if worker in self._workers:
                    self._receive(worker, on_done)
            self._kill_overdue(on_done)
            if self._failed_starts >= MAX_FAILED_STARTS:
                reason = "the compile workers fail to start: compiles in the timing process"
                self._abandon(queue, on_done, reason)
                return
            while queue and len(self._workers) < min(self._count, len(queue)):
                self._start()  # replacements for workers that died or were killed

    def _dispatch(self, queue: list) -> None:
        for worker in list(self._workers):
            if not worker.ready or worker.point is not None or not queue:
                continue
            busy = any(other.point is not None for other in self._workers)
            for index, point in enumerate(queue):
                need = float(estimated_peak_bytes(point))
                if self._budget is None or not busy or self._used() + need <= self._budget:
                    try:
                        worker.connection.send(point)
                    except OSError:  # it died while idle: the point stays queued for another worker
                        self._stop(worker)
                        break
                    del queue[index]
                    worker.point, worker.need, worker.started = point, need, self._clock()
                    break

    def _receive(self, worker: _Worker, on_done: DoneCallback) -> None:
        try:
            kind, reason = worker.connection.recv()
        except (EOFError, OSError):  # the process is gone
            point, ready = worker.point, worker.ready
            worker.process.join(timeout=5)
            code = worker.process.exitcode
            self._stop(worker)
            if point is not None:
                reason = f"the compile worker died (exit code {code}): compiles in the timing process"
                on_done(point, reason, None)
            if not ready:
                self._failed_starts += 1
            return
        if kind == "ready":
            worker.ready = True
            self._failed_starts = 0
        else:
            point, worker.point, worker.need = worker.point, None, 0.0
            on_done(point, reason, self._clock() - worker.started)

    def _kill_overdue(self, on_done: DoneCallback) -> None:
        now = self._clock()
        for worker in list(self._workers):
            if not worker.ready and now - worker.started >= STARTUP_TIMEOUT_S:
                self._stop(worker)  # stuck before it could say ready
                self._failed_starts += 1
            elif worker.point is not None and now - worker.started >= self._timeout_s:
                point = worker.point
                self._stop(worker)
                reason = f"timed out after {self._timeout_s:.0f} s: compiles in the timing process"
                on_done(point, reason, None)

    def _abandon(self, queue: list, on_done: DoneCallback, reason: str) -> None:
        for worker in list(self._workers):
            if worker.point is not None:
                point = worker.point
                self._stop(worker)
                on_done(point, reason, None)
        for point in queue:
            on_done(point, reason, None)
        queue.clear()

    def close(self) -> None:
        """Stop every worker: the idle ones are told to exit, all at once, and get CLOSE_WAIT_S in all; busy
        ones (Ctrl-C) and any still running after that are killed."""
        for worker in self._workers:
            if worker.point is None:
                try:
                    worker.connection.send(None)
                except OSError:
                    pass
        deadline = time.monotonic() + CLOSE_WAIT_S
        for worker in list(self._workers):
            if worker.point is None:
                worker.process.join(timeout=max(0.0, deadline - time.monotonic()))
            self._stop(worker)

    def __enter__(self) -> Precompiler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Precompiler", "estimated_peak_bytes", "submission_order"]
