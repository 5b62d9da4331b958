"""Fit a speedup profile from measurements: `bench` results (JSON Lines) or a published speedup table (CSV).

The stage `results -> fit -> profile`. Speedups come from kernel times of the same GPU and software (bf16 time
/ float8 time at the same shape, read by `fp8advisor.predict.measurements`); the profile's predictor is
`fp8advisor.predict.speedup` (log-space interpolation with a stated rule outside the grid). `fit_profile` also
measures that predictor's error on the points themselves (leave-one-out, `fp8advisor.predict.fit_error`) and
summarises, per recipe and per M, which (K, N) pay as a simple rule set beside torchao's auto filter
(`fp8advisor.predict.thresholds`). Modelled profiles (`roofline_profile`) need no measurements.

Grouped expert GEMM results (`bench --grouped`) fit the profile's `grouped` section (`GroupedProfile`): their
speedups over (E, M_per_expert, K, N), predicted by `fp8advisor.predict.interpolation`, with the same
leave-one-out error (`grouped_leave_one_out`). Linear and grouped results of one GPU may be fitted together
into one profile.

What `fit` writes, `suggest` can read: the measurements are checked as they are read (a results line with a
size or time out of range is left out and named in the notes, a bad table row is an error naming its line;
a results file found in a directory that cannot be read at all is passed over and named in
`FitReport.passed_over`, one named on its own is an error), pairs whose speedup no profile can hold are left
out with a note, and the fitted profile is read back with the profile reader before it is returned
(`fit_profile`).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from fp8advisor.errors import ProfileError, ResultsError
from fp8advisor.fields import name_problem
from fp8advisor.gpus import (
    FAMILY_COMPUTE_CAPABILITY,
    GPU_SPECS,
    GpuSpecs,
    get_specs,
    gpu_family,
    recipes_for_family,
)
from fp8advisor.predict.figures import FitError, SpeedupPoint
from fp8advisor.predict.fit_error import PointT, grouped_leave_one_out, leave_one_out, roofline_error
from fp8advisor.predict.grouped_profile import (
    GROUPED_INTERPOLATION_MODEL,
    GroupedProfile,
    GroupedSpeedupPoint,
)
from fp8advisor.predict.interpolation import grouped_model
from fp8advisor.predict.measurements import Measurements, load_measurements
from fp8advisor.predict.profile import DeviceInfo, Profile, RecipeProfile, dumps_profile
from fp8advisor.predict.speedup import INTERPOLATION_MODEL
from fp8advisor.predict.thresholds import MThreshold, threshold_table

ROOFLINE_METHOD = (
    "roofline model of torchao/testing/training/roofline_utils.py as benchmarks/float8/float8_roofline.py "
    "--enable_fusion_modeling uses it: bf16 GEMM time / (float8 GEMM time + cast overhead) of a Linear's "
    "3 forward+backward GEMMs; LayerNorm and Sigmoid not modelled; input and grad_output casts fused "
    "(float8 recipes; MXFP8's casts are torchao's own kernels, never fused)"
)


def _check_compatible(measurements: Sequence[Measurements], *, force: bool, allow_emulated: bool) -> None:
    """Refuse emulated sources (unless `allow_emulated`), and sources of different GPUs, software versions or
    kinds (a table with results) unless `force`."""
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


@dataclass(frozen=True)
class FitReport:
    """The fitted profile, and what `fit` prints about it."""

    profile: Profile
    thresholds: Mapping[str, list[MThreshold]]
    sources: tuple[str, ...]
    notes: tuple[str, ...] = field(default=())
    roofline_errors: Mapping[str, FitError | None] = field(default_factory=dict, hash=False)
    #: Results files found in a directory that could not be read, passed over ("file: why"), for the caller
    #: to warn of (`fp8advisor.measure.results.load_results`).
    passed_over: tuple[str, ...] = ()

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
            "passed_over": list(self.passed_over),
        }


def _slug(text: str) -> str:
    """'NVIDIA GeForce RTX 4090' -> 'nvidia-geforce-rtx-4090', for file names."""
    return "-".join("".join(c if c.isalnum() else " " for c in text.lower()).split())


def _today() -> str:
    """Today's date (UTC), a profile's `created` by default."""
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

    `name` must be a plain name (`fields.name_problem`: it names the file `fit` writes, which must stay in
    the profile directory; a default name made from the device and `created` must be one too: reading
    accepts wider names, `fields.read_name_problem`, writing only plain ones). The profile returned is one
    `Profile.from_json` reads back (`_readable`): a field it would refuse (a control character in --source,
    a --created that makes the name a path) is a `ProfileError` here, before anything is written.
    """
    if name is not None and name_problem(name, "--name") is not None:
        raise ProfileError(name_problem(name, "--name"), hint=_NAME_HINT)
    passed_over: list[str] = []
    measurements = _compatible_measurements(
        paths, force=force, allow_emulated=allow_emulated, passed_over=passed_over
    )
    results = [m for m in measurements if m.kind == "results"]
    device = _measured_device(results, device_name, force=force)
    emulated = any(m.emulated for m in measurements)
    provenance = "emulated" if emulated else ("measured" if results else "published")
    by_recipe, grouped_points = _measured_points(measurements)
    notes = [note for m in measurements for note in m.notes]
    if device.family not in GPU_SPECS and by_recipe:
        notes.append(f"no roofline constants for {device.name}: extrapolation below the grid uses H100's")
    recipes, thresholds, roofline_errors = _fit_recipes(by_recipe, device.family)
    grouped = None
    if grouped_points:
        grouped = _fit_grouped(grouped_points, provenance)
        fill = grouped_model(grouped_points).fill_fraction
        if fill < 1.0:
            notes.append(
                f"grouped points fill {fill:.0%} of their (E, M_per_expert, K, N) grid: the holes are filled "
                "from their neighbours"
            )

    created = created or _today()
    if name is None:
        covered = sorted(recipes) + (["grouped"] if grouped else [])
        name = f"{_slug(device.family)}-{provenance}-{'-'.join(covered)}-{created}"
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
        device=device,
        software=all_software,
        method=method,
        recipes=recipes,
        roofline=None,
        grouped=grouped,
    )
    return FitReport(
        profile=_readable(profile),
        thresholds=thresholds,
        sources=tuple(m.source for m in measurements),
        notes=tuple(notes),
        roofline_errors=roofline_errors,
        passed_over=tuple(passed_over),
    )


_NAME_HINT = (
    "name a profile with letters, digits and . _ + -, starting with a letter or a digit "
    "(e.g. --name h100-mine-2026-01)"
)


def _readable(profile: Profile) -> Profile:
    """`profile` when its JSON reads back (`dumps_profile` reads what it writes) and its name is a plain name
    (what `fit` writes: `fields.name_problem`, stricter than the names a profile may be read with; a default
    name is made from the device and --created); else a ProfileError that names the field and the option
    that set it."""
    try:
        dumps_profile(profile)
    except ProfileError as error:
        raise ProfileError(
            f"the fitted profile could not be read back: {error.message}",
            hint=f"{_NAME_HINT}; --device, --source, --method, --software and --created are one line of "
            "text each (no control characters)",
        ) from None
    problem = name_problem(profile.name, "the fitted profile's name (from --device and --created)")
    if problem is not None:
        raise ProfileError(problem, hint=f"give --name: {_NAME_HINT}")
    return profile


def _compatible_measurements(
    paths: Sequence[str | Path], *, force: bool, allow_emulated: bool, passed_over: list[str]
) -> list[Measurements]:
    """The measurements among `paths`, refused when there is none or they do not belong together; the
    results files of a directory that cannot be read are named in `passed_over` and passed over."""
    measurements = load_measurements(paths, passed_over=passed_over)
    if not measurements:
        raise ResultsError(
            "no results found in " + ", ".join(map(str, paths)), hint="run `fp8advisor bench` first"
        )
    _check_compatible(measurements, force=force, allow_emulated=allow_emulated)
    return measurements


def _measured_device(results: Sequence[Measurements], device_name: str | None, *, force: bool) -> DeviceInfo:
    """The GPU the profile describes: the one the results name, or `device_name` (--device, which must be of
    the same family unless `force`); a GPU the roofline table lacks is its own family."""
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
    family = gpu_family(device_name) or device_name
    capability = next((m.compute_capability for m in results if m.compute_capability), None)
    capability = capability or FAMILY_COMPUTE_CAPABILITY.get(family or "")
    return DeviceInfo(name=device_name, family=family, compute_capability=capability)


def _measured_points(
    measurements: Sequence[Measurements],
) -> tuple[dict[str, list[SpeedupPoint]], tuple[GroupedSpeedupPoint, ...]]:
    """Every source's Linear points per recipe, and the grouped points merged; refused when there is none."""
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
    return by_recipe, grouped_points


def _fit_recipes(
    by_recipe: Mapping[str, list[SpeedupPoint]], family: str
) -> tuple[dict[str, RecipeProfile], dict[str, list[MThreshold]], dict[str, FitError | None]]:
    """Per recipe (sorted): its section of the profile (merged points, model, leave-one-out error), its
    threshold table, and the unfitted roofline's error; extrapolation uses the family's roofline constants,
    H100's for a GPU the roofline table lacks."""
    specs = get_specs(family) if family in GPU_SPECS else GPU_SPECS["H100"]
    recipes, thresholds, roofline_errors = {}, {}, {}
    for recipe in sorted(by_recipe):
        points = _merge_points(by_recipe[recipe])
        recipes[recipe] = RecipeProfile(
            points=points, model=dict(INTERPOLATION_MODEL), error=leave_one_out(points, recipe, specs)
        )
        thresholds[recipe] = threshold_table(points, recipe)
        roofline_errors[recipe] = roofline_error(points, recipe, specs)
    return recipes, thresholds, roofline_errors


def _fit_grouped(points: tuple[GroupedSpeedupPoint, ...], provenance: str) -> GroupedProfile:
    """The grouped section of the profile, with its leave-one-out error."""
    return GroupedProfile(
        points=points,
        provenance=provenance,
        error=grouped_leave_one_out(points),
        model=dict(GROUPED_INTERPOLATION_MODEL),
    )


def roofline_profile(gpu: str | GpuSpecs, *, created: str, name: str | None = None) -> Profile:
    """The modelled profile of a GPU family: every recipe it runs (`gpus.recipes_for_family`: MXFP8 on
    Blackwell only), predicted by the roofline formula."""
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
            for recipe in recipes_for_family(specs.family)
        },
        roofline=specs,
    )


__all__ = [
    "ROOFLINE_METHOD",
    "FitReport",
    "fit_profile",
    "roofline_profile",
]
