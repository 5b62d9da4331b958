"""Measurements to fit a profile from: the speedups of `bench` results (JSON Lines) or of a published speedup
table (CSV), each source with what it was measured on (`Measurements`).

Speedups come from kernel times of the same GPU and software (bf16 time / float8 time at the same shape),
paired by `fp8advisor.measure.speedups`; `predict.fit` merges the sources of one GPU into a profile.
"""

from __future__ import annotations

import csv
import io
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fp8advisor.errors import ResultsError, quote
from fp8advisor.fields import number_problem, size_problem
from fp8advisor.measure.results import load_results, point_key, setup_key, suspect_reason, unreadable_lines
from fp8advisor.measure.speedups import pair_with_baseline
from fp8advisor.predict.figures import SpeedupPoint
from fp8advisor.predict.grouped_profile import GroupedSpeedupPoint
from fp8advisor.predict.profile_schema import MAX_SPEEDUP, MIN_SPEEDUP
from fp8advisor.reading import read_text
from fp8advisor.recipes import Recipe

#: The header of a speedup table.
TABLE_COLUMNS = ("recipe", "M", "K", "N", "speedup")


@dataclass(frozen=True)
class Measurements:
    """Speedups of one source (a results run or a table), with what it was measured on."""

    source: str  # the file it came from
    kind: str  # "results" or "table"
    device_name: str | None  # None for a table: the caller says which GPU
    compute_capability: tuple[int, int] | None
    software: Mapping[str, str]
    emulated: bool
    method: str
    speedups: Mapping[str, tuple[SpeedupPoint, ...]]  # recipe -> points
    notes: tuple[str, ...] = ()  # what was left out, and why
    grouped: tuple[GroupedSpeedupPoint, ...] = ()  # grouped expert GEMM points (bench --grouped)


def read_speedup_table(path: str | Path) -> Measurements:
    """A CSV table with columns recipe,M,K,N,speedup (as the transcribed published torchao table).

    Read by `fp8advisor.reading` (a regular file; UTF-8, the byte-order mark Excel writes dropped; a binary
    file is refused), every row checked: five fields, a recipe name, M, K and N positive integers up to
    `fields.MAX_SIZE`, a speedup within the range a profile holds (`profile_schema.MIN_SPEEDUP` to
    `MAX_SPEEDUP`). The first bad row is a ResultsError naming its line."""
    path = Path(path)
    text = read_text(path, "CSV speedup table", error=ResultsError)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows: dict[str, list[SpeedupPoint]] = defaultdict(list)
    try:
        missing = [c for c in TABLE_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise ResultsError(
                f"CSV table lacks column(s) {', '.join(missing)}",
                hint=f"a speedup table has the header {','.join(TABLE_COLUMNS)}",
                location=str(path),
            )
        for row in reader:
            recipe, point = _table_row(row, f"{path}:{reader.line_num}", len(reader.fieldnames or ()))
            rows[recipe.value].append(point)
    except csv.Error as error:
        raise ResultsError(
            f"not a readable CSV table: {error}",
            hint=f"a speedup table has the header {','.join(TABLE_COLUMNS)}, then one row per shape",
            location=f"{path}:{reader.reader.line_num}",  # DictReader's own count lags behind on an error
        ) from None
    if not rows:
        raise ResultsError("the table has no rows", hint="add measured rows", location=str(path))
    return Measurements(
        source=str(path),
        kind="table",
        device_name=None,
        compute_capability=None,
        software={},
        emulated=False,
        method="",
        speedups={recipe: tuple(points) for recipe, points in rows.items()},
    )


_ROW_HINT = (
    f"a row is {','.join(TABLE_COLUMNS)}: a torchao recipe name, three positive integers and a speedup "
    "(float8 over bf16, e.g. 1.25)"
)


def _table_row(row: dict, location: str, columns: int) -> tuple[Recipe, SpeedupPoint]:
    """One row of a speedup table, checked field by field (`read_speedup_table`)."""
    extra = row.get(None)  # csv.DictReader puts the fields beyond the header there
    if extra is not None or any(value is None for value in row.values()):
        count = columns + len(extra or ()) - sum(value is None for value in row.values())
        raise ResultsError(
            f"bad row: {count} fields, the header has {columns}", hint=_ROW_HINT, location=location
        )
    try:
        recipe = Recipe(row["recipe"].strip())
    except ValueError:
        raise ResultsError(
            f"bad row: unknown recipe {quote(row['recipe'])}", hint=_ROW_HINT, location=location
        ) from None
    sizes = []
    for name in ("M", "K", "N"):
        try:
            size = int(row[name])
        except ValueError:
            size = row[name]
        problem = size_problem(size, name)
        if problem is not None:
            raise ResultsError(f"bad row: {problem}", hint=_ROW_HINT, location=location)
        sizes.append(size)
    try:
        speedup = float(row["speedup"])
    except ValueError:
        speedup = row["speedup"]
    problem = number_problem(speedup, "speedup", MIN_SPEEDUP, MAX_SPEEDUP)
    if problem is not None:
        raise ResultsError(f"bad row: {problem}", hint=_ROW_HINT, location=location)
    return recipe, SpeedupPoint(*sizes, speedup)


def _method_text(method: object) -> str:
    """A results header's `method` (an object, or text) as one line: "key: value; ..." by key."""
    if isinstance(method, Mapping):
        return "; ".join(f"{key}: {method[key]}" for key in sorted(method) if method[key] is not None)
    return str(method or "")


def measurements_from_runs(runs: Sequence) -> list[Measurements]:
    """Speedups of bench runs, one `Measurements` per setup (device name, emulation, software versions).

    Pairing is `measure.speedups.pair_with_baseline`: each ok float8 point over the ok bf16 point of
    the same shape in a run of the same setup, by GPU kernel time (wall time only where a run has no kernel
    times, as emulated runs). Failed points (out of memory, compile errors) have no time and are simply left
    out.
    """
    by_setup: dict[tuple, list] = defaultdict(list)
    for run in runs:
        by_setup[setup_key(run.header)].append(run)
    return [_setup_measurements(by_setup[setup]) for setup in sorted(by_setup, key=repr)]


def _setup_measurements(group: Sequence) -> Measurements:
    """The speedups of the runs of one setup, with that setup's device, software and method."""
    header = group[-1].header
    device = header.get("device") or {}
    speedups, grouped, bases, absurd = _paired_points(group)
    notes = _left_out_notes(group) + absurd
    capability = device.get("compute_capability")
    method = _method_text(header.get("method"))
    if bases - {"kernel_time"}:
        method += f"; speedup basis: {', '.join(sorted(bases))}"
    return Measurements(
        source=", ".join(str(run.path) for run in group),
        kind="results",
        device_name=device.get("name"),
        compute_capability=tuple(int(v) for v in capability) if capability else None,
        software={str(k): str(v) for k, v in (header.get("software") or {}).items()},
        emulated=bool(device.get("emulated", False)),
        method=method,
        speedups={recipe: tuple(points) for recipe, points in speedups.items()},
        notes=notes,
        grouped=tuple(grouped),
    )


def _absurd_pairs(pairs: Sequence) -> tuple[list, tuple[str, ...]]:
    """The pairs whose speedup a profile can hold (`profile_schema.MIN_SPEEDUP` to `MAX_SPEEDUP`: each time
    is in range, their ratio may not be), and a note naming those left out (none when none is)."""
    kept, absurd = [], []
    for pair in pairs:
        problem = number_problem(pair.speedup, "speedup", MIN_SPEEDUP, MAX_SPEEDUP)
        if problem is None:
            kept.append(pair)
        else:
            shape = "x".join(map(str, pair.shape))
            absurd.append(f"{shape} {pair.recipe} (run {pair.run_id}): {problem}")
    if not absurd:
        return kept, ()
    first = f"; ... and {len(absurd) - 1} more" if len(absurd) > 1 else ""
    note = f"{len(absurd)} point(s) left out, their times give no possible speedup: {absurd[0]}{first}"
    return kept, (note,)


#: The recipe of a profile's grouped section (`GroupedProfile.recipe`).
GROUPED_PROFILE_RECIPE = "rowwise"


def _paired_points(
    group: Sequence,
) -> tuple[dict[str, list[SpeedupPoint]], list[GroupedSpeedupPoint], set[str], tuple[str, ...]]:
    """Each float8 point of one setup's runs over its bf16 baseline: the Linear speedups per recipe, the
    grouped speedups, the times they divide ("kernel_time", or "wall_time_median" for emulated runs), and a
    note on the pairs left out for a speedup out of range (`_absurd_pairs`)."""
    speedups: dict[str, list[SpeedupPoint]] = defaultdict(list)
    bases = set()
    linear, absurd_linear = _absurd_pairs(pair_with_baseline(group))
    grouped_pairs, absurd_grouped = _absurd_pairs(pair_with_baseline(group, grouped=True))
    for pair in linear:
        bases.add(pair.basis)
        speedups[str(Recipe(pair.recipe))].append(
            SpeedupPoint(
                pair.M,
                pair.K,
                pair.N,
                pair.speedup,
                bf16_time_s=pair.bf16_time_s,
                float8_time_s=pair.float8_time_s,
            )
        )
    # the profile's grouped section holds one recipe, rowwise: MXFP8 grouped points are left out, said
    mx_grouped = [pair for pair in grouped_pairs if pair.recipe != GROUPED_PROFILE_RECIPE]
    if mx_grouped:
        counts = Counter(pair.recipe for pair in mx_grouped)
        counted = ", ".join(f"{count} {recipe}" for recipe, count in counts.items())
        absurd_grouped += (
            f"grouped MXFP8 point(s) left out ({counted}): a profile's grouped section holds "
            f"{GROUPED_PROFILE_RECIPE} only, it has no per-recipe grouped section (the grouped roofline "
            "predicts MXFP8 experts)",
        )
    grouped = []
    for pair in grouped_pairs:
        if pair.recipe != GROUPED_PROFILE_RECIPE:
            continue
        bases.add(pair.basis)
        grouped.append(
            GroupedSpeedupPoint(
                *pair.shape, pair.speedup, bf16_time_s=pair.bf16_time_s, float8_time_s=pair.float8_time_s
            )
        )
    return speedups, grouped, bases, absurd_linear + absurd_grouped


def _left_out_notes(group: Sequence) -> tuple[str, ...]:
    """What one setup's runs leave out, for people: unreadable lines, and points whose profiler session may
    have lost records (unless a later run measured them again)."""
    remeasured = {
        point_key(point)
        for run in group
        for point in run.points
        if point.get("status") == "ok" and not suspect_reason(point)
    }
    suspect = [
        point
        for run in group
        for point in run.points
        if suspect_reason(point) and point_key(point) not in remeasured
    ]
    notes: tuple[str, ...] = ()
    unreadable = unreadable_lines([problem for run in group for problem in run.problems])
    if unreadable:
        notes += (unreadable,)
    if suspect:
        first = suspect[0]
        *sizes, recipe = point_key(first)
        notes += (
            f"{len(suspect)} point(s) left out: their profiler session may have lost records (e.g. "
            f"{'x'.join(map(str, sizes))} {recipe}: {suspect_reason(first)}); "
            "the same bench command measures them again",
        )
    return notes


def load_measurements(
    paths: Sequence[str | Path], *, passed_over: list[str] | None = None
) -> list[Measurements]:
    """Every source among PATHS: `.csv` files are speedup tables; other files and directories are results.

    A results file found in a directory that cannot be read is named in `passed_over` and passed over
    (`measure.results.load_results`; without the list, an error); a file named in PATHS is an error."""
    tables, results = [], []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise ResultsError(
                f"no such file or directory: {path}", hint="give bench results (.jsonl/dir) or a CSV"
            )
        (tables if path.suffix.lower() == ".csv" else results).append(path)
    measurements = [read_speedup_table(path) for path in tables]
    if results:
        runs = load_results(results, passed_over=passed_over)
        grid_runs = [run for run in runs if not run.in_context]
        if runs and not grid_runs:
            raise ResultsError(
                f"{runs[0].path} holds in-context block results (bench --model), not a grid to fit",
                hint="`fp8advisor suggest MODEL --measured DIR` reads them; fit reads bench grids",
            )
        measurements += measurements_from_runs(grid_runs)
    return measurements


__all__ = [
    "TABLE_COLUMNS",
    "Measurements",
    "load_measurements",
    "measurements_from_runs",
    "read_speedup_table",
]
