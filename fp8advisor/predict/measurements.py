"""Measurements to fit a profile from: the speedups of `bench` results (JSON Lines) or of a published speedup
table (CSV), each source with what it was measured on (`Measurements`).

Speedups come from kernel times of the same GPU and software (bf16 time / float8 time at the same shape),
paired by `fp8advisor.measure.speedups`; `predict.fit` merges the sources of one GPU into a profile.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fp8advisor.errors import ResultsError
from fp8advisor.measure.results import load_results, point_key, setup_key, suspect_reason, unreadable_lines
from fp8advisor.measure.speedups import pair_with_baseline
from fp8advisor.predict.figures import SpeedupPoint
from fp8advisor.predict.grouped_profile import GroupedSpeedupPoint
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
    """A CSV table with columns recipe,M,K,N,speedup (as the transcribed published torchao table)."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in TABLE_COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise ResultsError(
                    f"CSV table lacks column(s) {', '.join(missing)}",
                    hint=f"a speedup table has the header {','.join(TABLE_COLUMNS)}",
                    location=str(path),
                )
            rows: dict[str, list[SpeedupPoint]] = defaultdict(list)
            for line_number, row in enumerate(reader, start=2):
                try:
                    recipe = Recipe(row["recipe"].strip())
                    point = SpeedupPoint(int(row["M"]), int(row["K"]), int(row["N"]), float(row["speedup"]))
                except (ValueError, AttributeError) as error:
                    raise ResultsError(
                        f"bad row ({error})",
                        hint="recipe: a torchao recipe name; M, K, N: integers; speedup: a number",
                        location=f"{path}:{line_number}",
                    ) from None
                if min(point.shape) <= 0 or not point.speedup > 0:
                    raise ResultsError(
                        "sizes and speedup must be positive",
                        hint="fix the row",
                        location=f"{path}:{line_number}",
                    )
                rows[recipe.value].append(point)
    except OSError as error:
        raise ResultsError(f"cannot read {path}: {error.strerror}", hint="check the path") from None
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
    speedups, grouped, bases = _paired_points(group)
    notes = _left_out_notes(group)
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


def _paired_points(
    group: Sequence,
) -> tuple[dict[str, list[SpeedupPoint]], list[GroupedSpeedupPoint], set[str]]:
    """Each float8 point of one setup's runs over its bf16 baseline: the Linear speedups per recipe, the
    grouped speedups, and the times they divide ("kernel_time", or "wall_time_median" for emulated runs)."""
    speedups: dict[str, list[SpeedupPoint]] = defaultdict(list)
    bases = set()
    for pair in pair_with_baseline(group):
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
    grouped = []
    for pair in pair_with_baseline(group, grouped=True):
        bases.add(pair.basis)
        grouped.append(
            GroupedSpeedupPoint(
                *pair.shape, pair.speedup, bf16_time_s=pair.bf16_time_s, float8_time_s=pair.float8_time_s
            )
        )
    return speedups, grouped, bases


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


def load_measurements(paths: Sequence[str | Path]) -> list[Measurements]:
    """Every source among PATHS: `.csv` files are speedup tables; other files and directories are results."""
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
        runs = load_results(results)
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
