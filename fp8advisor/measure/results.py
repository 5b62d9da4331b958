"""The results store: one JSON Lines file per run, written so that a kill loses at most the point in flight.

Layout (schema `fp8advisor.results/1`, docs/formats.md): `<out>/run-<UTC timestamp>-<run id>.jsonl`.
Line 1 is the run header (device, software, method, grid); every later line is one measured point. Each line
is written with a single `write` of the whole line, then flushed and fsync'ed, so a crash can at worst leave a
torn last line, which `read_run` ignores.

Resume: a sweep that finds earlier runs in its output directory measured with the same device name, software
versions and grid points skips every (M, K, N, recipe) already recorded there, ok or failed, and writes the
rest to a new run file whose header lists the runs it continues (`"resumes"`). Reading the directory back
gives every point exactly once.

Speedup of a float8 point = bf16 time / float8 time at the same (M, K, N), taken from the same run or from a
run with identical device name and software versions (`pair_with_baseline`).

Grouped expert GEMMs (`bench --grouped`, `fp8advisor.measure.grouped`) use the same files: the header's grid
says `"workload": "grouped_mm"` and lists E, M_per_expert, K and N; each point says `"grouped": true` and is
identified by (E, M_per_expert, K, N, recipe) (`point_key`); `pair_grouped_with_baseline` gives their
speedups, and `pair_with_baseline` leaves grouped runs out.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from fp8advisor.errors import ResultsError, quote
from fp8advisor.recipes import BASELINE

SCHEMA = "fp8advisor.results/1"
RUN_FILE_GLOB = "run-*.jsonl"

#: The identity of a point within a run: (M, K, N, recipe), or (E, M_per_expert, K, N, recipe) when grouped.
PointKey = tuple

#: The grid's `workload` of grouped expert GEMM runs (`bench --grouped`).
GROUPED_WORKLOAD = "grouped_mm"
#: The size fields of a grouped point, in key order.
GROUPED_AXES = ("E", "M_per_expert", "K", "N")


# --- names and times
# -------------------------------------------------------------------------------------------


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


# --- records
# ---------------------------------------------------------------------------------------------------


def _json_safe(value):
    """Non-finite floats become null: JSON has no NaN or Infinity and other tools reject them."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value


def encode_line(record: dict) -> bytes:
    """One record as one line of JSON (UTF-8, newline-terminated)."""
    return (json.dumps(_json_safe(record), allow_nan=False) + "\n").encode("utf-8")


def is_grouped(point: dict) -> bool:
    """Whether a point record is a grouped expert GEMM point (`"grouped": true`)."""
    return point.get("grouped") is True


def point_key(point: dict) -> PointKey:
    if is_grouped(point):
        return (*(int(point[axis]) for axis in GROUPED_AXES), str(point["recipe"]))
    return (int(point["M"]), int(point["K"]), int(point["N"]), str(point["recipe"]))


def grid_point_keys(grid: dict) -> frozenset[PointKey]:
    """Every point key a header's grid asks for: its `shapes` list, or the product of its axes (M, K, N; or
    E, M_per_expert, K, N for a grouped grid), times its recipes."""
    axes = GROUPED_AXES if grid.get("workload") == GROUPED_WORKLOAD else ("M", "K", "N")
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


# --- reading
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One results file: its header, its points in the order they were measured, and the lines that could not
    be read (`problems`: "file:line: why", each left out; a resume measures those points again)."""

    header: dict
    points: list[dict]
    path: Path
    problems: tuple[str, ...] = ()
    #: In-context runs (`bench --model`, header "context": "block"): each variant of a block measured, and
    #: each block's chosen float8 set per recipe (`fp8advisor.measure.in_context`). Empty in a grid run.
    blocks: tuple[dict, ...] = ()
    choices: tuple[dict, ...] = ()

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


def _is_size(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _is_time(value) -> bool:
    """A usable time in seconds: a finite, positive number (JSON's NaN and Infinity parse, but are not)."""
    return (
        isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    )


def point_problem(record: dict) -> str | None:
    """Why a point record cannot be used (a missing or wrong key, a time that is NaN, infinite, negative or
    not a number), or None when it can. Failed points need only their identity and a status."""
    for key in GROUPED_AXES if is_grouped(record) else ("M", "K", "N"):
        if not _is_size(record.get(key)):
            return f"{key} is {quote(record.get(key))}, not a positive integer"
    if not isinstance(record.get("recipe"), str):
        return f"recipe is {quote(record.get('recipe'))}, not a name"
    status = record.get("status")
    if status not in ("ok", "failed"):
        return f"status is {quote(status)}, not 'ok' or 'failed'"
    if status == "failed":
        return None
    kernel = record.get("kernel_time_s")
    if kernel is not None and not _is_time(kernel):
        return f"kernel_time_s is {quote(kernel)}, not a positive number of seconds"
    wall = record.get("wall_time_s")
    if wall is not None and not isinstance(wall, dict):
        return f"wall_time_s is {quote(wall)}, not an object"
    median = (wall or {}).get("median")
    if median is not None and not _is_time(median):
        return f"wall_time_s.median is {quote(median)}, not a positive number of seconds"
    if kernel is None and median is None:
        return "an ok point with neither kernel_time_s nor wall_time_s.median"
    return None


def _wall_problem(record: dict, key: str = "wall_time_s") -> str | None:
    wall = record.get(key)
    if not isinstance(wall, dict) or not all(_is_time(wall.get(q)) for q in ("median", "p20", "p80")):
        return f"{key} is {quote(wall)}, not an object with positive median, p20 and p80"
    return None


def block_problem(record: dict) -> str | None:
    """Why an in-context variant record (`"kind": "block"`) cannot be used, or None when it can."""
    if not isinstance(record.get("block"), str) or not isinstance(record.get("recipe"), str):
        return "a block record without a block pattern or recipe"
    if not isinstance(record.get("float8"), list) or not all(isinstance(n, str) for n in record["float8"]):
        return f"float8 is {quote(record.get('float8'))}, not a list of layer names"
    status = record.get("status")
    if status not in ("ok", "failed"):
        return f"status is {quote(status)}, not 'ok' or 'failed'"
    return None if status == "failed" else _wall_problem(record)


def choice_problem(record: dict) -> str | None:
    """Why a block's chosen-set record (`"kind": "block_choice"`) cannot be used, or None when it can."""
    if not isinstance(record.get("block"), str) or not isinstance(record.get("recipe"), str):
        return "a block choice without a block pattern or recipe"
    for key in ("float8", "instances"):
        if not isinstance(record.get(key), list) or not all(isinstance(n, str) for n in record[key]):
            return f"{key} is {quote(record.get(key))}, not a list of names"
    return _wall_problem(record) or _wall_problem(record, "bf16_wall_time_s")


def _header_problem(header) -> str | None:
    if not isinstance(header, dict) or header.get("kind") != "run" or header.get("schema") != SCHEMA:
        return f"line 1 is not a run header with schema {SCHEMA}"
    if not isinstance(header.get("run_id"), str):
        return "the header has no run_id"
    device = header.get("device")
    if not isinstance(device, dict) or not isinstance(device.get("name"), str):
        return "the header has no device name"
    for key in ("software", "method"):
        if header.get(key) is not None and not isinstance(header.get(key), dict):
            return f"the header's {key} is not an object"
    software = header.get("software") or {}
    if not all(isinstance(value, str | int | float | type(None)) for value in software.values()):
        return "the header's software versions are not plain values"
    grid = header.get("grid")
    try:
        grid_point_keys(grid)
    except (AttributeError, KeyError, TypeError, ValueError):
        return "the header's grid is not a grid (M, K, N or E, M_per_expert, K, N, or shapes; and recipes)"
    return None


def read_run(path: Path) -> Run:
    """Read one results file.

    A file that cannot be read, is empty or does not start with a valid run header is a `ResultsError`. A
    later line that is not JSON, not an object or not a usable point is left out and named in
    `Run.problems`, so that the file's other points still count; a torn last line (a kill mid-write) too."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ResultsError(f"cannot read {path}: {error.strerror}") from None
    hint = "the file was edited or corrupted; bench writes these files, fit and resume read them"
    lines = data.split(b"\n")
    # The last element is b"" when the file ends with a newline; otherwise it is an unterminated, torn line.
    records: list[tuple[int, object]] = []
    problems: list[str] = []
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
    if not records or records[0][0] != 1:
        raise ResultsError(
            f"{path} is not an fp8advisor results file (line 1 must be a run header with schema {SCHEMA})",
            hint=hint,
        )
    header = records[0][1]
    problem = _header_problem(header)
    if problem is not None:
        raise ResultsError(f"{path} is not a usable results file: {problem}", location=f"{path}:1", hint=hint)
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
    )


def _json_reason(error: BaseException) -> str:
    if isinstance(error, UnicodeDecodeError):
        return "not UTF-8 text"
    return f"not JSON ({getattr(error, 'msg', None) or type(error).__name__})"


def runs_in(directory: Path, *, problems: list[str] | None = None) -> list[Run]:
    """Every run file in `directory`, oldest first (file names start with the UTC start time); [] if none.

    With a `problems` list, a file that cannot be read at all is named there and passed over (a resume goes
    on without it); without one it is a `ResultsError`."""
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
            problems.append(f"{path}: not read ({error.message})")
    return runs


def load_results(paths: Sequence[Path | str]) -> list[Run]:
    """Runs from results files and directories (a directory contributes every `run-*.jsonl` in it)."""
    runs: list[Run] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = runs_in(path)
            if not found:
                raise ResultsError(
                    f"{path} holds no results files ({RUN_FILE_GLOB})",
                    hint="run `fp8advisor bench --out DIR` first, or pass the .jsonl files themselves",
                )
            runs.extend(found)
        elif path.is_file():
            runs.append(read_run(path))
        else:
            raise ResultsError(f"{path} does not exist", hint="pass a results directory or run-*.jsonl file")
    return runs


def unreadable_lines(problems: Sequence[str], limit: int = 5) -> str | None:
    """One sentence naming the results files and lines that could not be read (the first `limit` of
    `problems`, from `Run.problems` or `resumable_runs`), or None when there are none."""
    if not problems:
        return None
    shown = "; ".join(problems[:limit])
    if len(problems) > limit:
        shown += f"; ... and {len(problems) - limit} more"
    return f"{len(problems)} results file(s) or line(s) could not be read and were left out: {shown}"


# --- writing ------------------------------------------------------------------------------------------------


class RunWriter:
    """Appends records to one run file, each durable before `append` returns.

    The file appears whole or not at all: it is created with its header through a temporary file renamed
    into place. An append that fails (a full disk) is cut back off, so the file never holds half a line it
    did not mean to, and the error says so (`ResultsError`)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            # O_APPEND: each write lands at the end even if something else grew the file; one write per line.
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as error:
            raise ResultsError(f"cannot write {self.path}: {error.strerror}") from None

    @classmethod
    def create(cls, out_dir: Path, header: dict) -> RunWriter:
        """A new run file in `out_dir` named after the header's start time and run id, header written."""
        from fp8advisor.files import write_atomic

        out_dir = Path(out_dir)
        path = out_dir / run_file_name(header["started"], header["run_id"])
        if path.exists():
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


# --- speedups -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Speedup:
    """A float8 point set against its bf16 baseline. `basis` says which time was divided."""

    M: int
    K: int
    N: int
    recipe: str
    speedup: float
    bf16_time_s: float
    float8_time_s: float
    basis: str  # "kernel_time" (GPU kernel time, the published method) or "wall_time_median" (emulated runs)
    device_name: str
    emulated: bool
    run_id: str  # the run of the float8 point

    def to_json(self) -> dict:
        return {
            "M": self.M,
            "K": self.K,
            "N": self.N,
            "recipe": self.recipe,
            "speedup": self.speedup,
            "bf16_time_s": self.bf16_time_s,
            "float8_time_s": self.float8_time_s,
            "basis": self.basis,
            "device_name": self.device_name,
            "emulated": self.emulated,
            "run_id": self.run_id,
        }


def suspect_reason(point: dict) -> str | None:
    """Why a point's kernel time may be wrong (its profiler session lost records), or None."""
    return (point.get("profiler") or {}).get("suspect")


def _point_time(point: dict, basis: str) -> float | None:
    if basis == "kernel_time":
        return point.get("kernel_time_s")
    wall = point.get("wall_time_s") or {}
    return wall.get("median")


def _paired(runs: Sequence[Run], basis: str, *, grouped: bool) -> list[tuple]:
    """(key, float8 point, run, basis chosen, bf16 time, float8 time) of every ok float8 point over the ok
    bf16 point of the same shape and setup, in the runs of one form (grouped or not): `pair_with_baseline`."""
    if basis not in ("auto", "kernel_time", "wall_time_median"):
        raise ValueError(f"unknown basis {basis!r}")
    baselines: dict[tuple, dict] = {}
    float8: dict[tuple, tuple[dict, Run]] = {}
    for run in runs:
        if run.grouped != grouped:
            continue
        setup = setup_key(run.header)
        for point in run.points:
            if point.get("status") != "ok" or suspect_reason(point) or is_grouped(point) != grouped:
                continue
            *shape, recipe = point_key(point)
            if recipe == BASELINE:
                baselines[(setup, *shape)] = point
            else:
                float8[(setup, *shape, recipe)] = (point, run)
    pairs = []
    for (setup, *key), (point, run) in float8.items():
        baseline = baselines.get((setup, *key[:-1]))
        if baseline is None:
            continue
        chosen = basis
        if basis == "auto":
            has_kernel = point.get("kernel_time_s") and baseline.get("kernel_time_s")
            chosen = "kernel_time" if has_kernel else "wall_time_median"
        bf16_time, float8_time = _point_time(baseline, chosen), _point_time(point, chosen)
        if not bf16_time or not float8_time:
            continue
        pairs.append((tuple(key), point, run, chosen, bf16_time, float8_time))
    return pairs


def pair_with_baseline(runs: Sequence[Run], *, basis: str = "auto") -> list[Speedup]:
    """Speedup of every ok float8 point over the ok bf16 point of the same shape and setup.

    `basis`: "kernel_time" (GPU kernel time, as torchao publishes), "wall_time_median", or "auto" (kernel
    time where both points have one, else wall time, which is all an emulated run has). Runs are paired only
    with runs of identical device name and software (`setup_key`); when a shape was measured more than once,
    the later run wins.
    Points without a baseline are left out, and so are points whose profiler session may have lost records
    (`suspect_reason`), float8 or baseline, and grouped runs (`pair_grouped_with_baseline`). Sorted by recipe,
    M, K, N.
    """
    pairs = [
        Speedup(
            M=M,
            K=K,
            N=N,
            recipe=recipe,
            speedup=bf16_time / float8_time,
            bf16_time_s=bf16_time,
            float8_time_s=float8_time,
            basis=chosen,
            device_name=run.device_name,
            emulated=run.emulated,
            run_id=run.run_id,
        )
        for (M, K, N, recipe), _, run, chosen, bf16_time, float8_time in _paired(runs, basis, grouped=False)
    ]
    return sorted(pairs, key=lambda pair: (pair.recipe, pair.M, pair.K, pair.N))


@dataclass(frozen=True)
class GroupedSpeedup:
    """A float8 grouped expert GEMM point set against its bf16 baseline (`torch._grouped_mm`)."""

    E: int
    M_per_expert: int
    K: int
    N: int
    recipe: str
    speedup: float
    bf16_time_s: float
    float8_time_s: float
    basis: str
    device_name: str
    emulated: bool
    run_id: str

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.E, self.M_per_expert, self.K, self.N)


def pair_grouped_with_baseline(runs: Sequence[Run], *, basis: str = "auto") -> list[GroupedSpeedup]:
    """`pair_with_baseline` for grouped runs: each ok float8 grouped point over the ok bf16 point of the same
    (E, M_per_expert, K, N) and setup. Sorted by recipe, E, M_per_expert, K, N."""
    pairs = [
        GroupedSpeedup(
            E=E,
            M_per_expert=M_per_expert,
            K=K,
            N=N,
            recipe=recipe,
            speedup=bf16_time / float8_time,
            bf16_time_s=bf16_time,
            float8_time_s=float8_time,
            basis=chosen,
            device_name=run.device_name,
            emulated=run.emulated,
            run_id=run.run_id,
        )
        for (E, M_per_expert, K, N, recipe), _, run, chosen, bf16_time, float8_time in _paired(
            runs, basis, grouped=True
        )
    ]
    return sorted(pairs, key=lambda pair: (pair.recipe, *pair.shape))


__all__ = [
    "GROUPED_AXES",
    "GROUPED_WORKLOAD",
    "SCHEMA",
    "GroupedSpeedup",
    "PointKey",
    "Run",
    "RunWriter",
    "Speedup",
    "done_keys",
    "encode_line",
    "grid_point_keys",
    "is_grouped",
    "pair_grouped_with_baseline",
    "block_problem",
    "choice_problem",
    "load_results",
    "make_header",
    "new_run_id",
    "pair_with_baseline",
    "point_key",
    "point_problem",
    "read_run",
    "resumable_runs",
    "run_file_name",
    "runs_in",
    "same_setup",
    "setup_changes",
    "setup_key",
    "suspect_reason",
    "unreadable_lines",
    "utc_now",
]
