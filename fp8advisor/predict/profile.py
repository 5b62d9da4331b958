"""Speedup profiles: what float8 buys on one GPU, per recipe, as a versioned JSON document.

A profile is written by `fp8advisor fit` (from `bench` results or a published table) or built from the
roofline model, and shipped in `data/profiles/`. Format: schema `fp8advisor.profile/1` (see
`Profile.to_json`); `Profile.from_json` checks every field of a document first (`fp8advisor.predict.
profile_schema`) and says what is wrong and where; `dumps_profile` writes only what it can read back.

Its parts: the figures (`fp8advisor.predict.figures`: points, provenance, fit error), the grouped expert GEMM
section (`fp8advisor.predict.grouped_profile`); its files (`fp8advisor.predict.profile_files`); which profile
a GPU gets (`fp8advisor.predict.selection`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fp8advisor.errors import ProfileError
from fp8advisor.gpus import FAMILY_COMPUTE_CAPABILITY, GpuSpecs, gpu_family
from fp8advisor.json_output import dumps
from fp8advisor.predict.figures import FitError, SpeedupPoint
from fp8advisor.predict.grouped_profile import GroupedProfile
from fp8advisor.predict.profile_schema import SCHEMA, check_profile_document
from fp8advisor.recipes import Recipe, mx_unsupported_reason


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
            capability = self.device.compute_capability or FAMILY_COMPUTE_CAPABILITY.get(self.family or "")
            unsupported = Recipe(recipe).is_mx and mx_unsupported_reason(capability)
            if unsupported:
                raise ProfileError(
                    f"profile {self.name!r} ({self.family}) has no figures for {Recipe(recipe)}: "
                    f"{unsupported}",
                    hint="use --gpu B200 (or GB200, B300) for MXFP8 advice, or a float8 recipe",
                ) from None
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
        """Validate and read a profile document; a ProfileError says what is wrong and where (the rules:
        `fp8advisor.predict.profile_schema`)."""
        where = str(path) if path else None
        check_profile_document(data, where)  # every field, before anything is built from it
        device, recipes, roofline, grouped = _read_sections(data, where)
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


def dumps_profile(profile: Profile) -> str:
    """The profile as deterministic JSON text: sorted keys, 2-space indent, trailing newline.

    What is written can be read back: the text is read again with `Profile.from_json` before it is returned,
    so a profile no reader would accept (a name that is not a plain name, a speedup out of range) is a
    `ProfileError` here, before any file is written."""
    text = dumps(profile.to_json(), sort_keys=True, indent=2, ensure_ascii=False) + "\n"
    Profile.from_json(json.loads(text))
    return text


__all__ = [
    "SCHEMA",
    "DeviceInfo",
    "Profile",
    "RecipeProfile",
    "dumps_profile",
]
