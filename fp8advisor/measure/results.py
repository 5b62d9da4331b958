"""The results store and reading it back: one JSON Lines file per run, every line checked as it is read.

Layout (schema `fp8advisor.results/1`, docs/formats.md): `<out>/run-<UTC timestamp>-<run id>.jsonl`.
Line 1 is the run header (device, software, method, grid); every later line is one measured point. Files are
written by `fp8advisor.measure.run_writer` so that a crash can at worst leave a torn last line, which
`read_run` ignores; a line that cannot be used is left out and named (`Run.problems`). A file is read through
`fp8advisor.reading` (a regular file of bounded size) and each record is checked field by field before it is
kept (`fp8advisor.measure.result_records`: sizes, times, names, the header's texts, a bounded grid).

One bad file never breaks a directory: a file found by scanning one (`runs_in`, `load_results`) that cannot
be read at all (binary, empty, torn before its header, another tool's, a pipe, a device or a directory named
like a run file) is named in a `passed_over` list ("file: why", for the caller to warn of once) and the other
runs are read; a file the user names is an error (`ResultsError`), and so is a directory left with no run.

Resume: a sweep that finds earlier runs in its output directory measured with the same device name, software
versions and grid points skips every (M, K, N, recipe) already recorded there, ok or failed, and writes the
rest to a new run file whose header lists the runs it continues (`"resumes"`). Reading the directory back
gives every point exactly once.

Grouped expert GEMMs (`bench --grouped`, `fp8advisor.measure.grouped`) use the same files: the header's grid
says `"workload": "grouped_mm"` and lists E, M_per_expert, K and N; each point says `"grouped": true` and is
identified by (E, M_per_expert, K, N, recipe) (`point_key`). Speedups over bf16 are
`fp8advisor.measure.speedups`.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fp8advisor.errors import ResultsError
from fp8advisor.measure.result_records import (
    GROUPED_AXES,
    GROUPED_WORKLOAD,
    LINEAR_AXES,
    SCHEMA,
    block_problem,
    choice_problem,
    grid_problem,
    header_problem,
    is_grouped,
    point_problem,
)
from fp8advisor.reading import read_bytes

RUN_FILE_GLOB = "run-*.jsonl"

#: The identity of a point within a run: (M, K, N, recipe), or (E, M_per_expert, K, N, recipe) when grouped.
PointKey = tuple


# --- point keys and setups ----------------------------------------------------------------------------------


def point_key(point: dict) -> PointKey:
    """A point record's identity: (M, K, N, recipe), or (E, M_per_expert, K, N, recipe) when grouped."""
    axes = GROUPED_AXES if is_grouped(point) else LINEAR_AXES
    return (*(int(point[axis]) for axis in axes), str(point["recipe"]))


def suspect_reason(point: dict) -> str | None:
    """Why a point's kernel time may be wrong (its profiler session lost records), or None."""
    return (point.get("profiler") or {}).get("suspect")


def grid_point_keys(grid: dict) -> frozenset[PointKey]:
    """Every point key a header's grid asks for: its `shapes` list, or the product of its axes (M, K, N; or
    E, M_per_expert, K, N for a grouped grid), times its recipes. A grid that is not one, or asks for more
    than `result_records.MAX_GRID_POINTS` points, is a ValueError (`grid_problem`)."""
    problem = grid_problem(grid)
    if problem is not None:
        raise ValueError(problem)
    axes = GROUPED_AXES if grid.get("workload") == GROUPED_WORKLOAD else LINEAR_AXES
    if grid.get("shapes") is not None:
        shapes = [tuple(shape) for shape in grid["shapes"]]
    else:
        shapes = list(itertools.product(*(grid[axis] for axis in axes)))
    if any(len(shape) != len(axes) for shape in shapes):
        raise ValueError(f"a shape of this grid is not ({', '.join(axes)})")
    return frozenset(
        (*(int(size) for size in shape), str(recipe)) for shape in shapes for recipe in grid["recipes"]
    )


def setup_key(header: dict) -> tuple:
    """What must match for two runs' figures to be compared: device name, emulation, software versions."""
    device = header.get("device") or {}
    software = header.get("software") or {}
    return (device.get("name"), bool(device.get("emulated")), tuple(sorted(software.items())))


def same_setup(a: dict, b: dict) -> bool:
    return setup_key(a) == setup_key(b)


def setup_changes(earlier: dict, header: dict) -> list[str]:
    """How the setup (`setup_key`) of the run with header `earlier` differs from `header`'s, in words that
    name the earlier run's side: "emulated", "on a GPU", "device NVIDIA H100 80GB HBM3", "torch 2.11.0"."""
    was, now = earlier.get("device") or {}, header.get("device") or {}
    changes = []
    if bool(was.get("emulated")) != bool(now.get("emulated")):
        changes.append("emulated" if was.get("emulated") else "on a GPU")
    if was.get("name") != now.get("name"):
        changes.append(f"device {was.get('name')}")
    was_software, software = earlier.get("software") or {}, header.get("software") or {}
    for name in sorted(set(was_software) | set(software)):
        if name not in software or name not in was_software or was_software[name] != software[name]:
            changes.append(f"{name} {was_software.get(name, 'not recorded')}")
    return changes


# --- reading -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One results file: its header, its points in the order they were measured, and the lines that could not
    be read (`problems`: "file:line: why", each left out; a resume measures those points again)."""

    header: dict
    points: list[dict]
    path: Path
    problems: tuple[str, ...] = ()
    #: In-context runs (`bench --model`, header "context": "block"): each variant of a block measured, and
    #: each block's chosen float8 set per recipe (`fp8advisor.measure.block_bench`). Empty in a grid run.
    blocks: tuple[dict, ...] = ()
    choices: tuple[dict, ...] = ()
    #: The problem of an unterminated last line (a kill while it was written: harmless, a resume measures
    #: its point again), None when the file ends whole. It is one of `problems` too.
    torn: str | None = None

    @property
    def damaged(self) -> tuple[str, ...]:
        """The lines that could not be used other than a torn last line: edits or corruption."""
        return tuple(problem for problem in self.problems if problem != self.torn)

    @property
    def in_context(self) -> bool:
        return self.header.get("context") == "block"

    @property
    def grouped(self) -> bool:
        """A grouped expert GEMM run (`bench --grouped`)."""
        return (self.header.get("grid") or {}).get("workload") == GROUPED_WORKLOAD

    @property
    def run_id(self) -> str:
        return self.header["run_id"]

    @property
    def device_name(self) -> str:
        return self.header["device"]["name"]

    @property
    def emulated(self) -> bool:
        return bool(self.header["device"].get("emulated"))

    def keys(self) -> set[PointKey]:
        return {point_key(point) for point in self.points}


def read_run(path: Path) -> Run:
    """Read one results file.

    A file that cannot be read, is empty or does not start with a valid run header is a `ResultsError`. A
    later line that is not JSON, not an object or not a usable point is left out and named in
    `Run.problems`, so that the file's other points still count; a torn last line (a kill mid-write) too."""
    path = Path(path)
    hint = "the file was edited or corrupted; bench writes these files, fit and resume read them"
    data = read_bytes(path, "results file", error=ResultsError, hint=hint).removeprefix(b"\xef\xbb\xbf")
    lines = data.split(b"\n")
    # The last element is b"" when the file ends with a newline; otherwise it is an unterminated, torn line.
    records: list[tuple[int, object]] = []
    problems: list[str] = []
    torn_line = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        torn = number == len(lines)
        try:
            records.append((number, json.loads(line.decode("utf-8"))))
        except (ValueError, RecursionError) as error:  # UnicodeDecodeError is a ValueError too
            if number == 1 and not torn:
                break  # reported below: no header
            why = "torn by a kill while it was written" if torn else _json_reason(error)
            problems.append(f"{path}:{number}: {why}")
            torn_line = problems[-1] if torn else None
    if not records or records[0][0] != 1:
        why = f"line 1 must be a run header with schema {SCHEMA}" if data.strip() else "it is empty"
        raise ResultsError(
            f"the file is not an fp8advisor results file ({why})", location=str(path), hint=hint
        )
    header = records[0][1]
    problem = header_problem(header)
    if problem is not None:
        raise ResultsError(f"not a usable results file: {problem}", location=f"{path}:1", hint=hint)
    kept: dict[str, list[dict]] = {"point": [], "block": [], "block_choice": []}
    checks = {"point": point_problem, "block": block_problem, "block_choice": choice_problem}
    for number, record in records[1:]:
        if not isinstance(record, dict):
            problems.append(f"{path}:{number}: not a JSON object")
            continue
        kind = record.get("kind")
        if kind not in checks:
            continue
        problem = checks[kind](record)
        if problem is not None:
            problems.append(f"{path}:{number}: {problem}")
            continue
        kept[kind].append(record)
    return Run(
        header=header,
        points=kept["point"],
        path=path,
        problems=tuple(problems),
        blocks=tuple(kept["block"]),
        choices=tuple(kept["block_choice"]),
        torn=torn_line,
    )


def _json_reason(error: BaseException) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    return f"not JSON ({getattr(error, 'msg', None) or type(error).__name__})"


def runs_in(directory: Path, *, problems: list[str] | None = None) -> list[Run]:
    """Every run file in `directory`, oldest first (file names start with the UTC start time); [] if none.

    With a `problems` list, a file that cannot be read at all is named there ("file: why", `passed_over_line`)
    and passed over (a resume, a fit go on without it); without one it is a `ResultsError`."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    runs = []
    for path in sorted(directory.glob(RUN_FILE_GLOB)):
        try:
            runs.append(read_run(path))
        except ResultsError as error:
            if problems is None:
                raise
            problems.append(passed_over_line(path, error))
    return runs


def passed_over_line(path: Path, error: ResultsError) -> str:
    """The line naming a results file that a directory scan passes over: "file: why", the file named once."""
    if error.location:
        return f"{error.location}: {error.message}"
    return error.message if str(path) in error.message else f"{path}: {error.message}"


def load_results(paths: Sequence[Path | str], *, passed_over: list[str] | None = None) -> list[Run]:
    """Runs from results files and directories (a directory contributes every `run-*.jsonl` in it).

    A file named in `paths` that cannot be read is a `ResultsError`. A file found in a directory that cannot
    be read is named in `passed_over` and passed over (without a `passed_over` list: a `ResultsError`); a
    directory with no run file, or none readable, is a `ResultsError` saying why."""
    runs: list[Run] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            unread: list[str] = []
            found = runs_in(path, problems=unread)
            if not found:
                raise _no_runs_error(path, unread)
            if unread and passed_over is None:
                raise ResultsError(f"a results file cannot be read: {unread[0]}", hint=_REMOVE_HINT)
            runs.extend(found)
            if passed_over is not None:
                passed_over.extend(line for line in unread if line not in passed_over)
        elif os.path.lexists(path):
            runs.append(read_run(path))  # not a regular file: `fp8advisor.reading` says what it is
        else:
            raise ResultsError(f"{path} does not exist", hint="pass a results directory or run-*.jsonl file")
    return runs


_REMOVE_HINT = "move the file out of the directory (bench writes run files; fit and resume read them)"


def _no_runs_error(directory: Path, unread: Sequence[str]) -> ResultsError:
    """The error of a results directory with no run file (`unread` empty), or none that can be read."""
    if not unread:
        return ResultsError(
            f"{directory} holds no results files ({RUN_FILE_GLOB})",
            hint="run `fp8advisor bench --out DIR` first, or pass the .jsonl files themselves",
        )
    more = f" (and {len(unread) - 1} more)" if len(unread) > 1 else ""
    return ResultsError(
        f"{directory} holds no readable results file: {unread[0]}{more}",
        hint="give the --out directory of bench, or the run-*.jsonl files themselves",
    )


def unreadable_lines(problems: Sequence[str], limit: int = 5) -> str | None:
    """One sentence naming the results files and lines that could not be read (the first `limit` of
    `problems`, from `Run.problems` or `resumable_runs`), or None when there are none."""
    if not problems:
        return None
    shown = "; ".join(problems[:limit])
    if len(problems) > limit:
        shown += f"; ... and {len(problems) - limit} more"
    return f"{len(problems)} results file(s) or line(s) could not be read and were left out: {shown}"


# --- resume -------------------------------------------------------------------------------------------------


def resumable_runs(out_dir: Path, header: dict, problems: list[str] | None = None) -> list[Run]:
    """Earlier runs in `out_dir` that a sweep with `header` continues: same device, software, grid points.
    (The shard does not matter: shards of one grid writing to one directory skip each other's points.)
    Files that cannot be read, and the lines of the others that cannot, are named in `problems`."""
    problems = [] if problems is None else problems
    wanted = grid_point_keys(header["grid"])
    runs = [
        run
        for run in runs_in(out_dir, problems=problems)
        if same_setup(run.header, header) and grid_point_keys(run.header["grid"]) == wanted
    ]
    problems.extend(problem for run in runs for problem in run.problems)
    return runs


def done_keys(runs: Iterable[Run]) -> set[PointKey]:
    """Every (M, K, N, recipe) recorded in `runs`, ok or failed, except points whose profiler session may
    have lost records (`suspect_reason`): a resumed sweep measures those again, and the later run wins."""
    return {point_key(point) for run in runs for point in run.points if not suspect_reason(point)}


__all__ = [
    "GROUPED_AXES",
    "GROUPED_WORKLOAD",
    "LINEAR_AXES",
    "RUN_FILE_GLOB",
    "SCHEMA",
    "PointKey",
    "Run",
    "block_problem",
    "choice_problem",
    "done_keys",
    "grid_point_keys",
    "is_grouped",
    "load_results",
    "passed_over_line",
    "point_key",
    "point_problem",
    "read_run",
    "resumable_runs",
    "runs_in",
    "same_setup",
    "setup_changes",
    "setup_key",
    "suspect_reason",
    "unreadable_lines",
]
