"""Fit a speedup profile from measurements: `bench` results (JSON Lines) or a published speedup table (CSV).

The stage `results -> fit -> profile`. Speedups come from kernel times of the same GPU and software (bf16 time
/ float8 time at the same shape); the profile's predictor is `fp8advisor.predict.speedup` (log-space
interpolation with a stated rule outside the grid). `fit_profile` also measures that predictor's error on the
points themselves (leave-one-out) and summarises, per recipe and per M, which (K, N) pay as a simple rule set
beside torchao's auto filter. Modelled profiles (`roofline_profile`) need no measurements.

Grouped expert GEMM results (`bench --grouped`) fit the profile's `grouped` section (`GroupedProfile`): their
speedups over (E, M_per_expert, K, N), predicted by `fp8advisor.predict.grid`, with the same
leave-one-out error (`grouped_leave_one_out`). Linear and grouped results of one GPU may be fitted together
into one profile.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TypeVar

import numpy as np

from fp8advisor.errors import ResultsError
from fp8advisor.predict.profile import (
    GROUPED_INTERPOLATION_MODEL,
    DeviceInfo,
    FitError,
    GroupedProfile,
    GroupedSpeedupPoint,
    Profile,
    RecipeProfile,
    SpeedupPoint,
)
from fp8advisor.predict.roofline import (
    FAMILY_COMPUTE_CAPABILITY,
    GPU_SPECS,
    GpuSpecs,
    get_specs,
    gpu_family,
    roofline_speedup,
)
from fp8advisor.recipes import Recipe

#: What a measured profile's "model" section says; `fp8advisor.predict.speedup` implements it.
INTERPOLATION_MODEL = {
    "kind": "log-linear-interpolation",
    "inside": "linear in (log2 M, log2 K, log2 N) -> log speedup: scipy RegularGridInterpolator on the grid "
    "(holes first filled from their measured neighbours along each axis); LinearNDInterpolator with "
    "nearest-neighbour fallback when points fill less than half of their grid",
    "outside": "above the largest measured size: clamp to the edge; below the smallest: edge speedup "
    "times the roofline ratio speedup(query)/speedup(edge), capped at 1",
    "fused": True,
}

ROOFLINE_METHOD = (
    "roofline model of torchao/testing/training/roofline_utils.py as benchmarks/float8/float8_roofline.py "
    "--enable_fusion_modeling uses it: bf16 GEMM time / (float8 GEMM time + cast overhead) of a Linear's "
    "3 forward+backward GEMMs; LayerNorm and Sigmoid not modelled; input and grad_output casts fused"
)

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


# --------------------------------------------------------------------------------------------------- reading


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
    if isinstance(method, Mapping):
        return "; ".join(f"{key}: {method[key]}" for key in sorted(method) if method[key] is not None)
    return str(method or "")


def measurements_from_runs(runs: Sequence) -> list[Measurements]:
    """Speedups of bench runs, one `Measurements` per setup (device name, emulation, software versions).

    Pairing is `fp8advisor.measure.results.pair_with_baseline`: each ok float8 point over the ok bf16 point of
    the same shape in a run of the same setup, by GPU kernel time (wall time only where a run has no kernel
    times, as emulated runs). Failed points (out of memory, compile errors) have no time and are simply left
    out.
    """
    from fp8advisor.measure.results import (
        pair_grouped_with_baseline,
        pair_with_baseline,
        point_key,
        setup_key,
        suspect_reason,
        unreadable_lines,
    )

    by_setup: dict[tuple, list] = defaultdict(list)
    for run in runs:
        by_setup[setup_key(run.header)].append(run)
    measurements = []
    for setup in sorted(by_setup, key=repr):
        group = by_setup[setup]
        header = group[-1].header
        device = header.get("device") or {}
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
        for pair in pair_grouped_with_baseline(group):
            bases.add(pair.basis)
            grouped.append(
                GroupedSpeedupPoint(
                    *pair.shape, pair.speedup, bf16_time_s=pair.bf16_time_s, float8_time_s=pair.float8_time_s
                )
            )
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
        capability = device.get("compute_capability")
        method = _method_text(header.get("method"))
        if bases - {"kernel_time"}:
            method += f"; speedup basis: {', '.join(sorted(bases))}"
        measurements.append(
            Measurements(
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
        )
    return measurements


def load_measurements(paths: Sequence[str | Path]) -> list[Measurements]:
    """Every source among PATHS: `.csv` files are speedup tables; other files and directories are results."""
    from fp8advisor.measure.results import load_results

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


# ---------------------------------------------------------------------------------------------- combining


def _check_compatible(measurements: Sequence[Measurements], *, force: bool, allow_emulated: bool) -> None:
    emulated = [m.source for m in measurements if m.emulated]
    if emulated and not allow_emulated:
        raise ResultsError(
            f"{len(emulated)} source(s) are emulated (bench --emulate), e.g. {emulated[0]}",
            hint="emulated float8 on the CPU says nothing about a GPU: run `fp8advisor bench` on the GPU "
            "(--allow-emulated writes an 'emulated' profile, for tests only)",
        )
    if force:
        return
    devices = sorted({m.device_name for m in measurements if m.device_name})
    if len(devices) > 1:
        raise ResultsError(
            f"results of different GPUs: {', '.join(devices)}",
            hint="fit each GPU separately (or --force if they truly are the same GPU type)",
        )
    kinds = {m.kind for m in measurements}
    if kinds == {"table", "results"}:
        # A table names no software versions: merging it with bench results would mix them unseen.
        raise ResultsError(
            "a speedup table and bench results: the table's software versions are unknown",
            hint="fit them separately (or --force to merge them anyway)",
        )
    software = sorted(
        {json.dumps(dict(m.software), sort_keys=True) for m in measurements if m.kind == "results"}
    )
    if len(software) > 1:
        raise ResultsError(
            "results of different software versions: " + " vs ".join(software),
            hint="fit the runs of one software setup together (or --force to mix them anyway)",
        )


#: A measured point of either profile: a Linear (M, K, N) or a grouped (E, M_per_expert, K, N) one.
PointT = TypeVar("PointT", SpeedupPoint, GroupedSpeedupPoint)


def _merge_points(points: Iterable[PointT]) -> tuple[PointT, ...]:
    """One point per shape (M, K, N, or E, M_per_expert, K, N for grouped points): the median of repeated
    measurements of a shape, its times too where every repeat has them."""
    by_shape: dict[tuple[int, ...], list[PointT]] = defaultdict(list)
    for point in points:
        by_shape[point.shape].append(point)
    merged = []
    for shape in sorted(by_shape):
        group = by_shape[shape]
        if len(group) == 1:
            merged.append(group[0])
            continue
        bf16 = [p.bf16_time_s for p in group if p.bf16_time_s is not None]
        float8 = [p.float8_time_s for p in group if p.float8_time_s is not None]
        merged.append(
            type(group[0])(
                *shape,
                statistics.median(p.speedup for p in group),
                bf16_time_s=statistics.median(bf16) if len(bf16) == len(group) else None,
                float8_time_s=statistics.median(float8) if len(float8) == len(group) else None,
            )
        )
    return tuple(merged)


# ---------------------------------------------------------------------------------------------- evaluation


def leave_one_out(points: Sequence[SpeedupPoint], recipe: Recipe | str, specs: GpuSpecs) -> FitError | None:
    """Predict each point from all the others with the profile's own predictor (None below 2 points)."""
    from fp8advisor.predict.grid import LogGridModel
    from fp8advisor.predict.speedup import extrapolate, roofline_ratio

    if len(points) < 2:
        return None
    model_ratio = roofline_ratio(Recipe(recipe), specs, fused=INTERPOLATION_MODEL["fused"])
    relative_errors, sign_right = [], 0
    for held_out, point in enumerate(points):
        others = [p for i, p in enumerate(points) if i != held_out]
        model = LogGridModel([p.shape for p in others], [p.speedup for p in others])
        predicted, _, _ = extrapolate(model, point.shape, model_ratio)
        relative_errors.append(abs(predicted - point.speedup) / point.speedup)
        sign_right += (predicted > 1.0) == (point.speedup > 1.0)
    return FitError(
        method="leave-one-out",
        median_relative_error=float(np.median(relative_errors)),
        worst_relative_error=float(max(relative_errors)),
        sign_accuracy=sign_right / len(points),
        n=len(points),
    )


def grouped_leave_one_out(points: Sequence[GroupedSpeedupPoint]) -> FitError | None:
    """Predict each grouped point from all the others with the grouped profile's own predictor
    (`grouped_model.GroupedModel`). A point the others cannot answer for (the only one measured at its E, K or
    N) is not counted; None when no point can be predicted."""
    from fp8advisor.predict.grid import GroupedModel

    relative_errors, sign_right = [], 0
    for held_out, point in enumerate(points):
        others = [p for i, p in enumerate(points) if i != held_out]
        if not others:
            continue
        answer = GroupedModel([p.shape for p in others], [p.speedup for p in others]).speedup_at(*point.shape)
        if answer is None:
            continue
        predicted = answer[0]
        relative_errors.append(abs(predicted - point.speedup) / point.speedup)
        sign_right += (predicted > 1.0) == (point.speedup > 1.0)
    if not relative_errors:
        return None
    return FitError(
        method="leave-one-out",
        median_relative_error=float(np.median(relative_errors)),
        worst_relative_error=float(max(relative_errors)),
        sign_accuracy=sign_right / len(relative_errors),
        n=len(relative_errors),
    )


def roofline_error(points: Sequence[SpeedupPoint], recipe: Recipe | str, specs: GpuSpecs) -> FitError | None:
    """How far the unfitted roofline model is from the measured points, for comparison with leave-one-out."""
    if not points:
        return None
    predicted = [roofline_speedup(*point.shape, recipe, specs) for point in points]
    relative_errors = [
        abs(p - point.speedup) / point.speedup for p, point in zip(predicted, points, strict=True)
    ]
    sign_right = sum((p > 1.0) == (point.speedup > 1.0) for p, point in zip(predicted, points, strict=True))
    return FitError(
        method=f"roofline model ({specs.family}), no fit",
        median_relative_error=float(np.median(relative_errors)),
        worst_relative_error=float(max(relative_errors)),
        sign_accuracy=sign_right / len(points),
        n=len(points),
    )


@dataclass(frozen=True)
class KNRule:
    """A rule on (K, N) that says "convert": `K >= min_K and N >= min_N`, or `K * N >= min_KN`."""

    kind: str  # "and" or "product"
    min_K: int = 0
    min_N: int = 0
    min_KN: int = 0

    def converts(self, K: int, N: int) -> bool:
        if self.kind == "product":
            return K * N >= self.min_KN
        return K >= self.min_K and N >= self.min_N

    def text(self, smallest_K: int = 0, smallest_N: int = 0) -> str:
        """People's words, dropping conditions every measured K or N meets."""
        if self == NEVER:
            return "never"
        if self.kind == "product":
            return f"K*N >= {self.min_KN}" if self.min_KN else "always"
        words = [
            f"K >= {self.min_K}" if self.min_K > smallest_K else "",
            f"N >= {self.min_N}" if self.min_N > smallest_N else "",
        ]
        words = [w for w in words if w]
        return " and ".join(words) or "always"


NEVER = KNRule("product", min_KN=2**62)


@dataclass(frozen=True)
class MThreshold:
    """For one M of one recipe: which measured (K, N) pay (speedup > 1) and the simplest rule that says so."""

    M: int
    cells: int
    paying: int
    rule: KNRule
    rule_text: str
    rule_agreement: int  # cells where the rule's decision equals "speedup > 1"
    torchao_agreement: int | None  # the same for torchao's auto filter (None: it has no rule for this recipe)

    def to_json(self) -> dict:
        return {
            "M": self.M,
            "cells": self.cells,
            "paying": self.paying,
            "rule": self.rule_text,
            "rule_agreement": self.rule_agreement,
            "torchao_auto_filter_agreement": self.torchao_agreement,
        }


def _best_rule(cells: Sequence[tuple[int, int, bool]]) -> KNRule:
    """The rule that agrees with the most cells; on ties the "and" form, then the smaller thresholds."""
    Ks = sorted({K for K, _, _ in cells})
    Ns = sorted({N for _, N, _ in cells})
    candidates = [KNRule("and", min_K=a, min_N=b) for a in Ks for b in Ns]
    candidates += [KNRule("product", min_KN=c) for c in sorted({K * N for K, N, _ in cells})] + [NEVER]

    def agreement(rule: KNRule) -> int:
        return sum(rule.converts(K, N) == pays for K, N, pays in cells)

    # max() keeps the first of equal scores: the "and" rules come first, in increasing thresholds
    return max(candidates, key=agreement)


def threshold_table(points: Sequence[SpeedupPoint], recipe: Recipe | str) -> list[MThreshold]:
    """Per measured M: the (K, N) rule that best separates paying cells, and torchao's auto filter."""
    from fp8advisor.frameworks.filters import auto_filter_keeps

    recipe = Recipe(recipe)
    by_M: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)
    for point in points:
        by_M[point.M].append((point.K, point.N, point.speedup > 1.0))
    table = []
    for M in sorted(by_M):
        cells = by_M[M]
        rule = _best_rule(cells)
        try:
            torchao = sum((not auto_filter_keeps(recipe, K, N)) == pays for K, N, pays in cells)
        except NotImplementedError:
            torchao = None
        table.append(
            MThreshold(
                M=M,
                cells=len(cells),
                paying=sum(pays for _, _, pays in cells),
                rule=rule,
                rule_text=rule.text(min(K for K, _, _ in cells), min(N for _, N, _ in cells)),
                rule_agreement=sum(rule.converts(K, N) == pays for K, N, pays in cells),
                torchao_agreement=torchao,
            )
        )
    return table


# --------------------------------------------------------------------------------------------------- fitting


@dataclass(frozen=True)
class FitReport:
    """The fitted profile, and what `fit` prints about it."""

    profile: Profile
    thresholds: Mapping[str, list[MThreshold]]
    sources: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())
    roofline_errors: Mapping[str, FitError | None] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict:
        """What `fit --json` prints: the profile's name and error per recipe, the thresholds, the notes."""
        return {
            "profile": self.profile.name,
            "provenance": self.profile.provenance,
            "device": self.profile.device.to_json(),
            "sources": list(self.sources),
            "error": {
                recipe: body.error.to_json() if body.error else None
                for recipe, body in self.profile.recipes.items()
            },
            "thresholds": {
                recipe: [row.to_json() for row in rows] for recipe, rows in self.thresholds.items()
            },
            "grouped": None
            if self.profile.grouped is None
            else {
                "recipe": self.profile.grouped.recipe,
                "points": len(self.profile.grouped.points),
                "error": self.profile.grouped.error.to_json() if self.profile.grouped.error else None,
            },
            "notes": list(self.notes),
        }


def _slug(text: str) -> str:
    """'NVIDIA GeForce RTX 4090' -> 'nvidia-geforce-rtx-4090', for file names."""
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def _today() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d")


def fit_profile(
    paths: Sequence[str | Path],
    *,
    name: str | None = None,
    force: bool = False,
    allow_emulated: bool = False,
    device_name: str | None = None,
    source: str | None = None,
    method: str | None = None,
    software: Mapping[str, str] | None = None,
    created: str | None = None,
) -> FitReport:
    """Fit a profile from bench results and/or speedup tables (see the module docstring).

    Tables carry no metadata: `device_name` (needed when only tables are given), `software` and `method` say
    what they were measured on. Results of different GPUs or software versions are refused unless `force`;
    emulated results unless `allow_emulated` (which yields provenance "emulated", never selected
    automatically).
    """
    measurements = load_measurements(paths)
    if not measurements:
        raise ResultsError(
            "no results found in " + ", ".join(map(str, paths)), hint="run `fp8advisor bench` first"
        )
    _check_compatible(measurements, force=force, allow_emulated=allow_emulated)
    results = [m for m in measurements if m.kind == "results"]
    measured_device = next((m.device_name for m in results if m.device_name), None)
    if (
        device_name
        and measured_device
        and (gpu_family(device_name) or device_name) != (gpu_family(measured_device) or measured_device)
        and not force
    ):
        raise ResultsError(
            f"--device {device_name!r} but the results were measured on {measured_device!r}",
            hint="drop --device (results name their GPU), or --force",
        )
    device_name = device_name or measured_device
    if device_name is None:
        raise ResultsError(
            "a speedup table does not say which GPU it was measured on",
            hint="pass the GPU name, e.g. --device 'NVIDIA H100 80GB HBM3'",
        )
    family = gpu_family(device_name) or device_name  # a GPU the roofline table lacks is its own family
    capability = next((m.compute_capability for m in results if m.compute_capability), None)
    capability = capability or FAMILY_COMPUTE_CAPABILITY.get(family or "")
    emulated = any(m.emulated for m in measurements)
    provenance = "emulated" if emulated else ("measured" if results else "published")

    by_recipe: dict[str, list[SpeedupPoint]] = defaultdict(list)
    for m in measurements:
        for recipe, points in m.speedups.items():
            by_recipe[recipe].extend(points)
    grouped_points = _merge_points(point for m in measurements for point in m.grouped)
    if not by_recipe and not grouped_points:
        raise ResultsError(
            "no shape was measured both in bf16 and in a float8 recipe",
            hint="bench the bf16 baseline together with the recipes (the default does)",
        )
    specs = get_specs(family) if family in GPU_SPECS else GPU_SPECS["H100"]
    notes = [note for m in measurements for note in m.notes]
    if family not in GPU_SPECS and by_recipe:
        notes.append(f"no roofline constants for {device_name}: extrapolation below the grid uses H100's")
    recipes, thresholds, roofline_errors = {}, {}, {}
    for recipe in sorted(by_recipe):
        points = _merge_points(by_recipe[recipe])
        recipes[recipe] = RecipeProfile(
            points=points, model=dict(INTERPOLATION_MODEL), error=leave_one_out(points, recipe, specs)
        )
        thresholds[recipe] = threshold_table(points, recipe)
        roofline_errors[recipe] = roofline_error(points, recipe, specs)

    grouped = None
    if grouped_points:
        grouped = GroupedProfile(
            points=grouped_points,
            provenance=provenance,
            error=grouped_leave_one_out(grouped_points),
            model=dict(GROUPED_INTERPOLATION_MODEL),
        )
        from fp8advisor.predict.grid import grouped_model

        fill = grouped_model(grouped_points).fill_fraction
        if fill < 1.0:
            notes.append(
                f"grouped points fill {fill:.0%} of their (E, M_per_expert, K, N) grid: the holes are filled "
                "from their neighbours"
            )

    created = created or _today()
    if name is None:
        covered = sorted(recipes) + (["grouped"] if grouped else [])
        name = f"{_slug(family)}-{provenance}-{'-'.join(covered)}-{created}"
    all_software = dict(software or {})
    for m in results:
        all_software = {**m.software, **all_software}
    if method is None:
        method = (
            "; ".join(sorted({m.method for m in results if m.method})) or "speedups as given in the table"
        )
    profile = Profile(
        name=name,
        provenance=provenance,
        source=source or ", ".join(m.source for m in measurements),
        created=created,
        device=DeviceInfo(name=device_name, family=family, compute_capability=capability),
        software=all_software,
        method=method,
        recipes=recipes,
        roofline=None,
        grouped=grouped,
    )
    return FitReport(
        profile=profile,
        thresholds=thresholds,
        sources=tuple(m.source for m in measurements),
        notes=tuple(notes),
        roofline_errors=roofline_errors,
    )


def roofline_profile(gpu: str | GpuSpecs, *, created: str, name: str | None = None) -> Profile:
    """The modelled profile of a GPU family: every recipe, predicted by the roofline formula."""
    specs = get_specs(gpu)
    return Profile(
        name=name or f"{specs.family.lower()}-roofline",
        provenance="modelled",
        source=specs.note,
        created=created,
        device=DeviceInfo(
            name=f"{specs.family} (roofline model)",
            family=specs.family,
            compute_capability=FAMILY_COMPUTE_CAPABILITY.get(specs.family),
        ),
        software={},
        method=ROOFLINE_METHOD,
        recipes={
            recipe.value: RecipeProfile(points=(), model={"kind": "roofline", "fused": True}, error=None)
            for recipe in Recipe
        },
        roofline=specs,
    )


__all__ = [
    "FitReport",
    "KNRule",
    "MThreshold",
    "Measurements",
    "fit_profile",
    "grouped_leave_one_out",
    "leave_one_out",
    "load_measurements",
    "measurements_from_runs",
    "read_speedup_table",
    "roofline_error",
    "roofline_profile",
    "threshold_table",
]
