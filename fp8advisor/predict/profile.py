"""Speedup profiles: what float8 buys on one GPU, per recipe, as a versioned JSON document.

A profile is written by `fp8advisor fit` (from `bench` results or a published table) or built from the
roofline model, and shipped in `data/profiles/`. Format: schema `fp8advisor.profile/1` (see
`Profile.to_json`); `Profile.from_json` validates a document and says what is wrong and where.

Its parts: the figures (`fp8advisor.predict.figures`: points, provenance, fit error), the grouped expert GEMM
section (`fp8advisor.predict.grouped_profile`); its files (`fp8advisor.predict.profile_files`); which profile
a GPU gets (`fp8advisor.predict.selection`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fp8advisor.errors import ProfileError, quote
from fp8advisor.gpus import GpuSpecs, gpu_family
from fp8advisor.predict.figures import PROVENANCES, FitError, SpeedupPoint, absent_or_positive
from fp8advisor.predict.grouped_profile import GroupedProfile, grouped_problem
from fp8advisor.recipes import Recipe

SCHEMA = "fp8advisor.profile/1"


@dataclass(frozen=True)
class DeviceInfo:
    """The GPU a profile describes. `family` ("H100") is what selection matches on."""

    name: str
    family: str | None
    compute_capability: tuple[int, int] | None = None

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "family": self.family,
            "compute_capability": list(self.compute_capability) if self.compute_capability else None,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> DeviceInfo:
        capability = data.get("compute_capability")
        return cls(
            name=str(data["name"]),
            family=data.get("family") or gpu_family(str(data["name"])) or str(data["name"]),
            compute_capability=tuple(int(v) for v in capability) if capability else None,
        )


_KIND_WORDS = {"name": "a string", "recipes": "an object", "device": "an object", "software": "an object"}


@dataclass(frozen=True)
class RecipeProfile:
    """What a profile knows of one recipe: its measured points, the predictor's settings and its error."""

    points: tuple[SpeedupPoint, ...] = ()
    model: Mapping[str, Any] = field(default_factory=dict, hash=False)
    error: FitError | None = None

    def to_json(self) -> dict:
        return {
            "points": [point.to_json() for point in sorted(self.points, key=lambda p: p.shape)],
            "model": dict(self.model),
            "error": self.error.to_json() if self.error else None,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> RecipeProfile:
        return cls(
            points=tuple(SpeedupPoint.from_json(point) for point in data.get("points") or ()),
            model=dict(data.get("model") or {}),
            error=FitError.from_json(data["error"]) if data.get("error") else None,
        )


@dataclass(frozen=True)
class Profile:
    """A versioned speedup profile of one GPU (schema `fp8advisor.profile/1`)."""

    name: str
    provenance: str  # one of PROVENANCES
    source: str
    created: str
    device: DeviceInfo
    software: Mapping[str, str] = field(default_factory=dict, hash=False)
    method: str = ""
    recipes: Mapping[str, RecipeProfile] = field(default_factory=dict, hash=False)
    roofline: GpuSpecs | None = None  # the constants of a modelled profile
    #: The grouped expert GEMMs (MoE experts) measured on this GPU, None when not measured.
    grouped: GroupedProfile | None = field(default=None, hash=False)
    path: Path | None = field(
        default=None, compare=False
    )  # where it was loaded from; None when built in memory

    @property
    def family(self) -> str | None:
        return self.device.family

    @property
    def is_modelled(self) -> bool:
        return self.provenance == "modelled"

    def covers(self, recipe: Recipe | str) -> bool:
        """True when this profile has figures for `recipe` (points, or a model that predicts it)."""
        return str(Recipe(recipe)) in self.recipes

    def recipe(self, recipe: Recipe | str) -> RecipeProfile:
        try:
            return self.recipes[str(Recipe(recipe))]
        except KeyError:
            raise ProfileError(
                f"profile {self.name!r} has no figures for recipe {Recipe(recipe)}",
                hint=f"it covers: {', '.join(self.recipes) or 'nothing'}; pick another recipe or profile",
            ) from None

    def describe(self) -> str:
        """One line for people: name, provenance, GPU, recipes (and grouped expert GEMMs when measured)."""
        covers = f"recipes: {', '.join(self.recipes) or 'none'}"
        if self.grouped is not None:
            covers += f"; grouped expert GEMMs: {self.grouped.recipe}"
        return f"{self.name} ({self.provenance}, {self.device.name}, {covers})"

    def to_json(self) -> dict:
        data = {
            "schema": SCHEMA,
            "name": self.name,
            "provenance": self.provenance,
            "source": self.source,
            "created": self.created,
            "device": self.device.to_json(),
            "software": dict(self.software),
            "method": self.method,
            "recipes": {name: self.recipes[name].to_json() for name in sorted(self.recipes)},
        }
        if self.roofline is not None:
            data["roofline"] = self.roofline.to_json()
        if self.grouped is not None:  # absent otherwise: profiles without one read and write as before
            data["grouped"] = self.grouped.to_json()
        return data

    @classmethod
    def from_json(cls, data: Any, *, path: Path | None = None) -> Profile:
        """Validate and read a profile document; a ProfileError says what is wrong and where."""
        where = str(path) if path else None
        _check_document(data, where)
        device, recipes, roofline, grouped = _read_sections(data, where)
        _check_figures(recipes, roofline, grouped, where)
        return cls(
            name=str(data["name"]),
            provenance=str(data["provenance"]),
            source=str(data.get("source", "")),
            created=str(data.get("created", "")),
            device=device,
            software={str(k): str(v) for k, v in (data.get("software") or {}).items()},
            method=str(data.get("method", "")),
            recipes=recipes,
            roofline=roofline,
            grouped=grouped,
            path=path,
        )


def _check_document(data: Any, where: str | None) -> None:
    """The document's outline: a JSON object of this schema, with the keys and kinds a profile needs and
    known recipes and provenance; a ProfileError otherwise."""
    if not isinstance(data, dict):
        raise ProfileError(
            "a profile must be a JSON object", hint="regenerate it with `fp8advisor fit`", location=where
        )
    schema = data.get("schema")
    if schema != SCHEMA:
        raise ProfileError(
            f"not a profile of schema {SCHEMA!r} (schema: {schema!r})",
            hint="profiles are written by `fp8advisor fit`; regenerate it with the installed version",
            location=where,
        )
    missing = [key for key in ("name", "provenance", "device", "recipes") if key not in data]
    if missing:
        raise ProfileError(
            f"profile lacks {', '.join(missing)}",
            hint="regenerate it with `fp8advisor fit`",
            location=where,
        )
    if data["provenance"] not in PROVENANCES:
        raise ProfileError(
            f"unknown provenance {data['provenance']!r}",
            hint=f"use one of: {', '.join(PROVENANCES)}",
            location=where,
        )
    for key, kind in (
        ("name", str),
        ("recipes", dict),
        ("device", dict),
        ("software", (dict, type(None))),
    ):
        if not isinstance(data.get(key), kind):
            raise ProfileError(
                f"the profile's {key} is {quote(data.get(key))}, not {_KIND_WORDS[key]}",
                hint="regenerate it with `fp8advisor fit`",
                location=where,
            )
    unknown = [name for name in data["recipes"] if name not in {r.value for r in Recipe}]
    if unknown:
        raise ProfileError(
            f"unknown recipe(s) {', '.join(unknown)}",
            hint=f"recipes are: {', '.join(r.value for r in Recipe)}",
            location=where,
        )


def _read_sections(
    data: dict, where: str | None
) -> tuple[DeviceInfo, dict[str, RecipeProfile], GpuSpecs | None, GroupedProfile | None]:
    """The device, recipes, roofline and grouped sections of a checked document; a ProfileError when one is
    malformed."""
    try:
        device = DeviceInfo.from_json(data["device"])
        recipes = {name: RecipeProfile.from_json(body) for name, body in data["recipes"].items()}
        roofline = (
            GpuSpecs.from_json(data["roofline"], family=device.family or device.name)
            if data.get("roofline")
            else None
        )
        grouped = GroupedProfile.from_json(data["grouped"]) if data.get("grouped") is not None else None
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise ProfileError(
            f"malformed profile ({type(error).__name__}: {error})",
            hint="regenerate it with `fp8advisor fit`",
            location=where,
        ) from None
    return device, recipes, roofline, grouped


def _check_figures(
    recipes: Mapping[str, RecipeProfile],
    roofline: GpuSpecs | None,
    grouped: GroupedProfile | None,
    where: str | None,
) -> None:
    """A ProfileError for the first figure a profile cannot hold: an impossible value, a shape measured twice,
    a size or speedup not positive, a recipe with nothing to predict from."""
    problem = _figure_problem(recipes, roofline) or (grouped and grouped_problem(grouped))
    if problem is not None:
        raise ProfileError(
            f"{problem}: not a figure a profile can hold",
            hint="regenerate the profile with `fp8advisor fit`",
            location=where,
        )
    for name, body in recipes.items():
        if len({point.shape for point in body.points}) != len(body.points):
            raise ProfileError(
                f"recipe {name}: a shape appears twice among its points",
                hint="merge repeated measurements (fp8advisor fit does) and regenerate the profile",
                location=where,
            )
        for point in body.points:
            if min(point.shape) <= 0 or not (point.speedup > 0 and math.isfinite(point.speedup)):
                raise ProfileError(
                    f"recipe {name}: point {point.shape}: size or speedup ({point.speedup}) not positive",
                    hint="fix or drop that point and regenerate the profile",
                    location=where,
                )
        if not body.points and roofline is None:
            raise ProfileError(
                f"recipe {name} has neither measured points nor roofline constants to predict from",
                hint="a modelled profile needs a 'roofline' section",
                location=where,
            )


def _figure_problem(recipes: Mapping[str, RecipeProfile], roofline: GpuSpecs | None) -> str | None:
    """The first figure of a profile that is negative, zero, NaN or infinite where it cannot be (times, rates,
    errors, fractions), said as "WHERE = VALUE"; None when every figure is possible."""
    for name, body in recipes.items():
        for point in body.points:
            for label, value in (("bf16_time_s", point.bf16_time_s), ("float8_time_s", point.float8_time_s)):
                if not absent_or_positive(value):
                    return f"recipe {name}: point {point.shape}: {label} = {value}"
        error = body.error
        if error is not None:
            for label, value in (
                ("median_relative_error", error.median_relative_error),
                ("worst_relative_error", error.worst_relative_error),
            ):
                if not (math.isfinite(value) and value >= 0):
                    return f"recipe {name}: error.{label} = {value}"
            if not 0 <= error.sign_accuracy <= 1:
                return f"recipe {name}: error.sign_accuracy = {error.sign_accuracy} (a fraction)"
            if error.n < 0:
                return f"recipe {name}: error.n = {error.n}"
    if roofline is not None:
        for label in ("bf16_flops", "fp8_flops", "bandwidth_bytes_per_s"):
            if not absent_or_positive(getattr(roofline, label)):
                return f"roofline.{label} = {getattr(roofline, label)}"
        for label in ("gemm_efficiency", "bandwidth_efficiency"):
            if not 0 < getattr(roofline, label) <= 1:
                return f"roofline.{label} = {getattr(roofline, label)} (a fraction of the peak)"
        if not (math.isfinite(roofline.kernel_floor_s) and roofline.kernel_floor_s >= 0):
            return f"roofline.kernel_floor_s = {roofline.kernel_floor_s}"
    return None


def dumps_profile(profile: Profile) -> str:
    """The profile as deterministic JSON text: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(profile.to_json(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


__all__ = [
    "SCHEMA",
    "DeviceInfo",
    "Profile",
    "RecipeProfile",
    "dumps_profile",
]
