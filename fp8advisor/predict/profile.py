"""Speedup profiles: what float8 buys on one GPU, per recipe, as a versioned JSON document.

A profile is written by `fp8advisor fit` (from `bench` results or a published table) or built from the
roofline model, and shipped in `data/profiles/`. `select_profile` picks the best one for a GPU and pairs it
with the modelled roofline profile of the same GPU, which answers for the recipes the primary profile does not
cover (`ProfileChoice`). Format: schema `fp8advisor.profile/1` (see `Profile.to_json`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fp8advisor.errors import ProfileError, quote
from fp8advisor.paths import PROFILES_DIR
from fp8advisor.predict.roofline import GpuSpecs, gpu_family
from fp8advisor.recipes import Recipe

SCHEMA = "fp8advisor.profile/1"

#: Where a figure comes from. `emulated` profiles (fitted from `bench --emulate`) exist for tests and are
#: never selected automatically.
PROVENANCES = ("measured", "published", "modelled", "emulated")

#: Evidence ranks, best first (the order above): the profile that answers when several describe one GPU type,
#: and the provenance within which `advise` compares recipes' figures.
PROVENANCE_RANK = {provenance: rank for rank, provenance in enumerate(PROVENANCES)}


def weakest_provenance(provenances, empty: str = "none") -> str:
    """The weakest evidence among `provenances` (an unknown one counts as weakest); `empty` when there is
    none: what a figure made of several others can claim."""
    found = set(provenances)
    return max(found, key=lambda p: PROVENANCE_RANK.get(p, 9)) if found else empty


#: Environment variable naming the directory of the user's own profiles (default:
#: ~/.cache/fp8advisor/profiles).
PROFILE_DIR_ENV = "FP8ADVISOR_PROFILE_DIR"

#: The family whose shipped profile answers for GPUs that have none of their own.
DEFAULT_FAMILY = "H100"


def user_profile_dir() -> Path:
    """The directory `fit` writes to by default and `select_profile` looks in first."""
    configured = os.environ.get(PROFILE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "fp8advisor" / "profiles"


def stable_float(value: float, digits: int = 6) -> float:
    """A float rounded to `digits` significant digits, so that generated JSON is the same on every machine."""
    if value == 0 or not math.isfinite(value):
        return float(value)
    return float(f"{value:.{digits}g}")


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

#: The largest GEMM dimension a profile may hold (far beyond any layer).
_MAX_SIZE = 2**40


def _size(value: Any) -> int:
    """A GEMM dimension from a profile: a positive integer (not a float, not a bool), else ValueError."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= _MAX_SIZE:
        raise ValueError(f"size {quote(value)} is not a positive integer")
    return value


def _with_times(data: dict[str, Any], bf16_time_s: float | None, float8_time_s: float | None) -> dict:
    """A point's JSON `data` with its measured times, where it has them (speedup points of either kind)."""
    if bf16_time_s is not None:
        data["bf16_time_s"] = stable_float(bf16_time_s)
    if float8_time_s is not None:
        data["float8_time_s"] = stable_float(float8_time_s)
    return data


def _times_from(data: Mapping) -> dict[str, float | None]:
    """The `bf16_time_s` / `float8_time_s` keyword arguments of a point read from JSON (None: not given)."""
    return {
        key: None if data.get(key) is None else float(data[key]) for key in ("bf16_time_s", "float8_time_s")
    }


@dataclass(frozen=True)
class SpeedupPoint:
    """One measured shape: speedup = bf16 time / float8 time; the times when the source had them."""

    M: int
    K: int
    N: int
    speedup: float
    bf16_time_s: float | None = None
    float8_time_s: float | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.M, self.K, self.N)

    def to_json(self) -> dict:
        data: dict[str, Any] = {"M": self.M, "K": self.K, "N": self.N, "speedup": stable_float(self.speedup)}
        return _with_times(data, self.bf16_time_s, self.float8_time_s)

    @classmethod
    def from_json(cls, data: Mapping) -> SpeedupPoint:
        return cls(
            M=_size(data["M"]),
            K=_size(data["K"]),
            N=_size(data["N"]),
            speedup=float(data["speedup"]),
            **_times_from(data),
        )


@dataclass(frozen=True)
class FitError:
    """How well the profile's predictor reproduces measured points it did not see (leave-one-out)."""

    method: str
    median_relative_error: float
    worst_relative_error: float
    sign_accuracy: float  # fraction of held-out points where "speedup > 1" was predicted right
    n: int

    def to_json(self) -> dict:
        return {
            "method": self.method,
            "median_relative_error": stable_float(self.median_relative_error, 4),
            "worst_relative_error": stable_float(self.worst_relative_error, 4),
            "sign_accuracy": stable_float(self.sign_accuracy, 4),
            "n": self.n,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> FitError:
        return cls(
            method=str(data["method"]),
            median_relative_error=float(data["median_relative_error"]),
            worst_relative_error=float(data["worst_relative_error"]),
            sign_accuracy=float(data["sign_accuracy"]),
            n=int(data["n"]),
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
class GroupedSpeedupPoint:
    """One measured grouped expert GEMM: E experts of (M_per_expert, K) x (K, N), speedup = bf16 time /
    float8 time of forward + backward (`bench --grouped`)."""

    E: int
    M_per_expert: int
    K: int
    N: int
    speedup: float
    bf16_time_s: float | None = None
    float8_time_s: float | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.E, self.M_per_expert, self.K, self.N)

    def to_json(self) -> dict:
        data: dict[str, Any] = {
            "E": self.E,
            "M_per_expert": self.M_per_expert,
            "K": self.K,
            "N": self.N,
            "speedup": stable_float(self.speedup),
        }
        return _with_times(data, self.bf16_time_s, self.float8_time_s)

    @classmethod
    def from_json(cls, data: Mapping) -> GroupedSpeedupPoint:
        return cls(
            E=_size(data["E"]),
            M_per_expert=_size(data["M_per_expert"]),
            K=_size(data["K"]),
            N=_size(data["N"]),
            speedup=float(data["speedup"]),
            **_times_from(data),
        )


#: What a grouped profile's "model" section says; `GroupedProfile.speedup_at` implements it.
GROUPED_INTERPOLATION_MODEL = {
    "kind": "log-linear-interpolation",
    "inside": "multilinear in (log2 E, log2 M_per_expert, log2 K, log2 N) -> log speedup over the measured "
    "product grid (holes first filled from their measured neighbours along each axis)",
    "outside": "E, K or N outside the measured range: no answer; M_per_expert above the largest measured: "
    "clamp to the edge; below the smallest: the edge speedup times the measured trend of the two smallest "
    "M_per_expert (log-log), never above the edge",
}


@dataclass(frozen=True)
class GroupedProfile:
    """What a profile knows of the grouped expert GEMMs (MoE experts) on its GPU: float8 rowwise
    (torchao's grouped recipe) against bf16 `torch._grouped_mm`, measured by `bench --grouped` over
    (E, M_per_expert, K, N), with the held-out error of its predictor (`fp8advisor fit`).

    `speedup_at(E, M_per_expert, K, N)` answers (speedup, "interpolated" | "extrapolated"), or None where it
    cannot (E, K or N outside the measured range; see `GROUPED_INTERPOLATION_MODEL`)."""

    points: tuple[GroupedSpeedupPoint, ...]
    provenance: str = "measured"  # one of PROVENANCES ("emulated" for fits of `bench --emulate`)
    recipe: str = "rowwise"
    error: FitError | None = None
    model: Mapping[str, Any] = field(default_factory=lambda: dict(GROUPED_INTERPOLATION_MODEL), hash=False)

    def speedup_at(self, E: int, M_per_expert: float, K: int, N: int) -> tuple[float, str] | None:
        from fp8advisor.predict.grid import grouped_model

        if not self.points:
            return None
        return grouped_model(self.points).speedup_at(E, M_per_expert, K, N)

    def to_json(self) -> dict:
        return {
            "provenance": self.provenance,
            "recipe": self.recipe,
            "points": [point.to_json() for point in sorted(self.points, key=lambda p: p.shape)],
            "model": dict(self.model),
            "error": self.error.to_json() if self.error else None,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> GroupedProfile:
        return cls(
            points=tuple(GroupedSpeedupPoint.from_json(point) for point in data.get("points") or ()),
            provenance=str(data.get("provenance", "measured")),
            recipe=str(data.get("recipe", "rowwise")),
            error=FitError.from_json(data["error"]) if data.get("error") else None,
            model=dict(data.get("model") or GROUPED_INTERPOLATION_MODEL),
        )


def _grouped_problem(grouped: GroupedProfile) -> str | None:
    """The first thing wrong with a profile's grouped section, said as "grouped: WHAT"; None when sound."""
    if grouped.provenance not in PROVENANCES:
        return f"grouped: unknown provenance {grouped.provenance!r}"
    if not grouped.points:
        return "grouped: no measured points"
    if len({point.shape for point in grouped.points}) != len(grouped.points):
        return "grouped: a shape appears twice among its points"
    for point in grouped.points:
        if not (point.speedup > 0 and math.isfinite(point.speedup)):
            return f"grouped: point {point.shape}: speedup = {point.speedup}"
        for label, value in (("bf16_time_s", point.bf16_time_s), ("float8_time_s", point.float8_time_s)):
            if not _positive(value):
                return f"grouped: point {point.shape}: {label} = {value}"
    error = grouped.error
    if error is not None and not (
        math.isfinite(error.median_relative_error)
        and error.median_relative_error >= 0
        and math.isfinite(error.worst_relative_error)
        and error.worst_relative_error >= 0
        and 0 <= error.sign_accuracy <= 1
        and error.n >= 0
    ):
        return f"grouped: error {error.to_json()}"
    return None


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
        problem = _figure_problem(recipes, roofline) or (grouped and _grouped_problem(grouped))
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


def _positive(value: float | None) -> bool:
    return value is None or (math.isfinite(value) and value > 0)


def _figure_problem(recipes: Mapping[str, RecipeProfile], roofline: GpuSpecs | None) -> str | None:
    """The first figure of a profile that is negative, zero, NaN or infinite where it cannot be (times, rates,
    errors, fractions), said as "WHERE = VALUE"; None when every figure is possible."""
    for name, body in recipes.items():
        for point in body.points:
            for label, value in (("bf16_time_s", point.bf16_time_s), ("float8_time_s", point.float8_time_s)):
                if not _positive(value):
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
            if not _positive(getattr(roofline, label)):
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


def save_profile(profile: Profile, path: str | Path) -> Path:
    """Write the profile (atomically: a temporary file renamed into place) and return the path."""
    from fp8advisor.files import write_atomic

    return write_atomic(path, dumps_profile(profile))


def looks_like_profile(path: Path) -> bool:
    """True when the file at `path` is a JSON object with this module's schema: a file `fit -o` may
    replace."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def _read_profile_file(path: Path) -> Profile:
    hint = "profiles are JSON documents written by `fp8advisor fit`"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ProfileError(
            f"cannot read profile: {error.strerror or error}", hint="check the path", location=str(path)
        ) from None
    except UnicodeDecodeError:
        raise ProfileError("not a text file (binary or pickled?)", hint=hint, location=str(path)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ProfileError(
            f"not valid JSON: {error.msg} at line {error.lineno}", hint=hint, location=str(path)
        ) from None
    except RecursionError:
        raise ProfileError("not a profile: JSON nested too deeply", hint=hint, location=str(path)) from None
    return Profile.from_json(data, path=path)


def _profiles_in(directory: Path, passed_over: list[str] | None = None) -> list[Profile]:
    """The profiles in `directory` (its `*.json` files, by name). With a `passed_over` list, a file that is
    not a readable profile is named there ("file: why") and skipped; without one it is a `ProfileError`."""
    if not directory.is_dir():
        return []
    profiles = []
    for path in sorted(directory.glob("*.json")):
        try:
            profiles.append(_read_profile_file(path))
        except ProfileError as error:
            if passed_over is None:
                raise
            passed_over.append(f"{path}: {error.message}")
    return profiles


def list_profiles(*, include_user: bool = True) -> list[Profile]:
    """Every shipped profile, then the user's own (from `user_profile_dir()`), each sorted by file name."""
    profiles = _profiles_in(PROFILES_DIR)
    if include_user:
        profiles += _profiles_in(user_profile_dir())
    return profiles


def load_profile(name_or_path: str | Path) -> Profile:
    """A profile by path, or by name (a user profile of that name first, then a shipped one)."""
    candidate = Path(name_or_path).expanduser()
    looks_like_path = candidate.suffix == ".json" or os.sep in str(name_or_path) or candidate.is_file()
    if looks_like_path:
        if not candidate.is_file():
            raise ProfileError(
                f"no profile file {str(name_or_path)!r}",
                hint="give a path to a profile JSON, or a name from `fp8advisor fit` / data/profiles",
            )
        return _read_profile_file(candidate)
    for directory in (user_profile_dir(), PROFILES_DIR):
        path = directory / f"{name_or_path}.json"
        if path.is_file():
            return _read_profile_file(path)
    known = sorted(
        {path.stem for directory in (user_profile_dir(), PROFILES_DIR) for path in directory.glob("*.json")}
    )
    raise ProfileError(f"no profile named {str(name_or_path)!r}", hint=f"known profiles: {', '.join(known)}")


@dataclass(frozen=True)
class ProfileChoice:
    """The profile chosen for a GPU, with the modelled profile that answers where it has no figures.

    `primary` answers for the recipes it covers; `fallback` (the roofline profile of the same GPU family, None
    when the primary is itself modelled or no model exists) answers for the others. `reason` says why, for
    people.
    """

    primary: Profile
    fallback: Profile | None
    reason: str
    #: The profile whose grouped expert GEMM figures answer when it is not the primary: the one given with
    #: --grouped-profile, else (the primary having none) the best profile of the same GPU family that has
    #: them (`select_profile`); None when none has, or the primary's own answer.
    grouped_source: Profile | None = None
    #: --grouped-profile none: the grouped roofline predicts the experts, whatever profile has figures.
    grouped_off: bool = False

    @property
    def grouped_profile(self) -> Profile | None:
        """The profile whose grouped expert GEMM figures predict the experts, None when no profile of this GPU
        has measured them or --grouped-profile none was given (the grouped roofline answers)."""
        if self.grouped_off:
            return None
        if self.grouped_source is not None:
            return self.grouped_source
        return self.primary if self.primary.grouped is not None else None

    @property
    def grouped(self) -> GroupedProfile | None:
        """The grouped expert GEMM figures to predict with (`GroupedProfile`), None when no profile of this
        GPU has measured them."""
        source = self.grouped_profile
        return source.grouped if source is not None else None

    @property
    def name(self) -> str:
        return self.primary.name

    @property
    def path(self) -> Path | None:
        return self.primary.path

    @property
    def provenance(self) -> str:
        return self.primary.provenance

    def covers(self, recipe: Recipe | str) -> bool:
        return self.primary.covers(recipe) or (self.fallback is not None and self.fallback.covers(recipe))

    def profile_for(self, recipe: Recipe | str) -> Profile:
        """The profile that answers for `recipe`: the primary when it covers it, else the fallback."""
        if self.primary.covers(recipe):
            return self.primary
        if self.fallback is not None and self.fallback.covers(recipe):
            return self.fallback
        return self.primary  # raises a clear ProfileError on use

    def describe(self) -> str:
        text = f"profile {self.primary.describe()}: {self.reason}"
        if self.fallback is not None:
            text += f"; other recipes and sizes from {self.fallback.name} ({self.fallback.provenance})"
        if self.grouped_source is not None and self.grouped is not None:
            text += f"; MoE expert grouped GEMMs from {self.grouped_source.name} ({self.grouped.provenance})"
        if self.grouped_off:
            text += f"; MoE expert grouped GEMMs from the roofline (--grouped-profile {NO_GROUPED_PROFILE})"
        return text


def modelled_profile_for(family: str | None) -> Profile | None:
    """The shipped roofline profile of a GPU family, None when none is shipped."""
    if family is None:
        return None
    for profile in _profiles_in(PROFILES_DIR):
        if profile.is_modelled and profile.family == family:
            return profile
    return None


def _pair(
    primary: Profile, reason: str, grouped_source: Profile | None = None, *, grouped_given: bool = False
) -> ProfileChoice:
    """The choice of `primary`; `grouped_source` answers for the experts when given with --grouped-profile
    (`grouped_given`), else only when the primary has no grouped figures of its own."""
    fallback = None if primary.is_modelled else modelled_profile_for(primary.family)
    if primary.grouped is not None and not grouped_given:
        grouped_source = None
    return ProfileChoice(primary=primary, fallback=fallback, reason=reason, grouped_source=grouped_source)


def _grouped_source(family: str | None, user_profiles: list[Profile]) -> Profile | None:
    """The best profile of `family` with grouped expert GEMM figures: the user's own (measured before
    published, then the newest), else a shipped one; emulated ones never."""
    if family is None:
        return None
    for candidates in (user_profiles, _profiles_in(PROFILES_DIR)):
        grouped = [
            p
            for p in candidates
            if p.family == family and p.grouped is not None and p.provenance in ("measured", "published")
        ]
        if grouped:
            return _best(grouped)
    return None


#: `--grouped-profile none`: predict the experts with the grouped roofline (pinned in a check command when no
#: profile's grouped figures were used, so that a grouped profile found on another machine does not count).
NO_GROUPED_PROFILE = "none"


def load_grouped_profile(name_or_path: str | Path) -> Profile:
    """The profile given with --grouped-profile (a name or path, as `load_profile`); it must hold grouped
    expert GEMM figures (`fit` of `bench --grouped` results)."""
    profile = load_profile(name_or_path)
    if profile.grouped is None:
        raise ProfileError(
            f"profile {profile.name!r} has no grouped expert GEMM figures",
            hint="give --grouped-profile a profile `fit` made from `bench --grouped` results",
        )
    return profile


def _requested_profile(name_or_path: str | Path) -> Profile:
    """The profile given with --profile; a profile of grouped expert GEMMs alone is refused (it has no Linear
    recipe to predict with), saying to pass it as --grouped-profile."""
    profile = load_profile(name_or_path)
    if not profile.recipes and profile.grouped is not None:
        raise ProfileError(
            f"profile {profile.name!r} is a grouped-only profile (MoE expert GEMMs, no Linear recipe)",
            hint=f"pass it as --grouped-profile {name_or_path} (the Linear profile is then chosen as usual)",
        )
    return profile


def _detect_device_name() -> str | None:
    """The name of CUDA device 0, or None without a GPU (torch imported only here)."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except Exception:  # a broken CUDA install must not stop advice from the shipped profiles
        return None
    return None


def _best(profiles: list[Profile]) -> Profile:
    """Measured before published before modelled; among equals the newest (`created`, then name)."""
    best_rank = min(PROVENANCE_RANK[profile.provenance] for profile in profiles)
    return max(
        (profile for profile in profiles if PROVENANCE_RANK[profile.provenance] == best_rank),
        key=lambda profile: (profile.created, profile.name),
    )


def select_profile(
    requested: str | Path | None = None,
    *,
    grouped: str | Path | None = None,
    device_name: str | None = None,
    detect_device: bool = True,
) -> ProfileChoice:
    """Choose the profile to predict with, and say why.

    `requested` (a name or path) wins. Otherwise, for the GPU `device_name` (detected from CUDA device 0 when
    None and `detect_device`): a profile the user made for this GPU family (in `user_profile_dir()`, the
    newest; measured before published) > the shipped one for this family (measured or published before
    modelled) > the shipped H100 one. The result pairs it with the modelled roofline profile of the same
    family.

    The MoE experts' grouped GEMM figures: `grouped` (--grouped-profile, a name or path; "none": the grouped
    roofline) wins; else the
    chosen profile's own; else the best profile of its GPU family that has them (`_grouped_source`), for a
    requested profile too.
    """
    off = grouped is not None and str(grouped) == NO_GROUPED_PROFILE
    given = load_grouped_profile(grouped) if grouped is not None and not off else None
    choice = _select_profile(requested, device_name=device_name, detect_device=detect_device)
    if off:
        return replace(choice, grouped_source=None, grouped_off=True)
    if given is not None:
        return _pair(choice.primary, choice.reason, given, grouped_given=True)
    return choice


def _select_profile(
    requested: str | Path | None, *, device_name: str | None, detect_device: bool
) -> ProfileChoice:
    if requested is not None:
        primary = _requested_profile(requested)
        own = [p for p in _profiles_in(user_profile_dir(), []) if p.family == primary.family]  # bad: skipped
        return _pair(primary, "requested with --profile", _grouped_source(primary.family, own))
    if device_name is None and detect_device:
        device_name = _detect_device_name()
    # a GPU the roofline table lacks is its own family, so that the user's profile of it is still found
    family = gpu_family(device_name) or device_name
    gpu_words = f"{device_name} ({family})" if family != device_name else (device_name or "no GPU found")

    # One bad file among the user's own must not block every suggest: it is passed over, and said.
    passed_over: list[str] = []
    skipped = ""
    grouped_source = None
    if family is not None:
        own = [p for p in _profiles_in(user_profile_dir(), passed_over) if p.family == family]
        grouped_source = _grouped_source(family, own)
        # A profile of grouped expert GEMMs only (no Linear recipe) answers for the experts, not as primary.
        user_profiles = [p for p in own if p.provenance in ("measured", "published") and p.recipes]
        if passed_over:
            skipped = f" (passed over {len(passed_over)} unreadable file(s): {passed_over[0]})"
        if user_profiles:
            return _pair(
                _best(user_profiles),
                f"your own profile for {gpu_words} in {user_profile_dir()}{skipped}",
                grouped_source,
            )
        shipped = [
            p
            for p in _profiles_in(PROFILES_DIR)
            if p.family == family and p.provenance != "emulated" and p.recipes
        ]
        if shipped:
            return _pair(_best(shipped), f"the shipped profile for {gpu_words}{skipped}", grouped_source)

    shipped_default = [
        p
        for p in _profiles_in(PROFILES_DIR)
        if p.family == DEFAULT_FAMILY and p.provenance in ("measured", "published") and p.recipes
    ]
    if not shipped_default:
        raise ProfileError(
            f"no shipped {DEFAULT_FAMILY} profile found in {PROFILES_DIR}",
            hint="reinstall fp8advisor, or pass --profile PATH",
        )
    why = f"no profile for {device_name}" if device_name else "no GPU found"
    grouped_source = grouped_source or _grouped_source(DEFAULT_FAMILY, [])
    return _pair(
        _best(shipped_default), f"{why}: the shipped {DEFAULT_FAMILY} profile{skipped}", grouped_source
    )


__all__ = [
    "NO_GROUPED_PROFILE",
    "PROFILE_DIR_ENV",
    "PROVENANCES",
    "PROVENANCE_RANK",
    "weakest_provenance",
    "SCHEMA",
    "DeviceInfo",
    "FitError",
    "GROUPED_INTERPOLATION_MODEL",
    "GroupedProfile",
    "GroupedSpeedupPoint",
    "Profile",
    "ProfileChoice",
    "RecipeProfile",
    "SpeedupPoint",
    "dumps_profile",
    "list_profiles",
    "load_grouped_profile",
    "load_profile",
    "modelled_profile_for",
    "save_profile",
    "select_profile",
    "stable_float",
    "user_profile_dir",
]
