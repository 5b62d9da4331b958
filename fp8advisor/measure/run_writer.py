"""Writing a results file (schema `fp8advisor.results/1`, docs/formats.md): its name, its header line, and
appends that a kill cannot tear.

The file appears whole or not at all: it is created with its header through a temporary file renamed into
place. Each later line (one measured point) is written with a single `write` of the whole line, then flushed
and fsync'ed, so a crash can at worst leave a torn last line, which `fp8advisor.measure.results.read_run`
ignores. JSON has no NaN or Infinity: non-finite floats are written as null (`fp8advisor.json_output`).
What is written reads back: a header `results.read_run` would refuse is refused before the file is created.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path

from fp8advisor.errors import ResultsError
from fp8advisor.files import absolute, write_atomic
from fp8advisor.json_output import dumps
from fp8advisor.measure.result_records import SCHEMA, header_problem


def utc_now() -> str:
    """The current time as the results files write it: `2026-11-22T10:00:00Z`."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_run_id() -> str:
    """A short random id (8 hex digits) that tells apart runs started in the same second."""
    return secrets.token_hex(4)


def run_file_name(started: str, run_id: str) -> str:
    """`run-20261122T100000Z-1a2b3c4d.jsonl` for a run started at `2026-11-22T10:00:00Z`."""
    stamp = started.replace("-", "").replace(":", "")
    return f"run-{stamp}-{run_id}.jsonl"


def encode_line(record: dict) -> bytes:
    """One record as one line of JSON (UTF-8, newline-terminated; `fp8advisor.json_output.dumps`: non-finite
    floats as null)."""
    return (dumps(record) + "\n").encode("utf-8")


class RunWriter:
    """Appends records to one run file, each durable before `append` returns.

    The file appears whole or not at all: it is created with its header through a temporary file renamed
    into place. An append that fails (a full disk) is cut back off, so the file never holds half a line it
    did not mean to, and the error says so (`ResultsError`)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            # O_APPEND: each write lands at the end even if something else grew the file; one write per line.
            self._fd = os.open(absolute(self.path), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as error:
            raise ResultsError(f"cannot write {self.path}: {error.strerror}") from None

    @classmethod
    def create(cls, out_dir: Path, header: dict) -> RunWriter:
        """A new run file in `out_dir` named after the header's start time and run id, header written."""
        problem = header_problem(header)
        if problem is not None:  # what is written must read back (`results.read_run`)
            raise ResultsError(
                f"cannot start a results file: {problem}",
                hint="every text of a run header (the model's path, the device, the versions) must be one "
                "line of printable characters",
            )
        out_dir = Path(out_dir)
        path = out_dir / run_file_name(header["started"], header["run_id"])
        if absolute(path).exists():
            raise ResultsError(f"{path} already exists", hint="run ids are random; run bench again")
        write_atomic(path, encode_line(header))
        return cls(path)

    def append(self, record: dict) -> None:
        line = encode_line(record)
        start = os.fstat(self._fd).st_size
        view = memoryview(line)
        try:
            while view:  # os.write may write less than asked (signals, pipes); finish the line
                written = os.write(self._fd, view)
                view = view[written:]
            os.fsync(self._fd)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, start)
            raise ResultsError(
                f"cannot save a point to {self.path}: {error.strerror}; the points before it are intact",
                hint="free some disk space, then run the same command again: it resumes",
            ) from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def make_header(
    *,
    run_id: str,
    started: str,
    device: dict,
    software: dict,
    method: dict,
    grid: dict,
    resumes: Iterable[str] = (),
    ceilings: dict | None = None,
    shard: dict | None = None,
    time_budget_s: float | None = None,
) -> dict:
    """The run header line. `resumes` names earlier runs this one continues; `ceilings` are the device's
    measured matmul rates and bandwidth (null when not measured, e.g. emulated); `shard` the slice of the
    grid this run measures ({"index": I, "count": N}, null for all of it); `time_budget_s` its time budget."""
    return {
        "kind": "run",
        "schema": SCHEMA,
        "run_id": run_id,
        "started": started,
        "device": device,
        "software": software,
        "method": method,
        "grid": grid,
        "resumes": list(resumes),
        "ceilings": ceilings,
        "shard": shard,
        "time_budget_s": time_budget_s,
    }


__all__ = ["RunWriter", "encode_line", "make_header", "new_run_id", "run_file_name", "utc_now"]
