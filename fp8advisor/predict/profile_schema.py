"""The fields of a profile document (schema `fp8advisor.profile/1`), checked one by one before it is read.

A profile is read from the user's profile directory and picked automatically when it claims `measured`; its
name is written into generated config headers and its texts are printed. So every field is checked on
reading, before anything uses it (`check_profile_document`, called by `Profile.from_json`), with the rules of
`fp8advisor.fields`:

- `name`: a safe name (`fields.read_name_problem`: printable, bounded, no path separator, not `.`/`..`, not
  starting with `-`; wider than the plain name `fit` writes, so that profiles named by older versions, such
  as `my h100 (table)`, still read); `provenance`: one of `PROVENANCES`; `source`, `created`, `method`, the
  device's `name` and `family`, the software versions, the texts of a recipe's `model` and of its `error`:
  free text without control characters, of bounded length.
- sizes (M, K, N; E, M_per_expert): positive integers up to `fields.MAX_SIZE`; speedups: finite, within
  [`MIN_SPEEDUP`, `MAX_SPEEDUP`]; times: within [`fields.MIN_TIME_S`, `fields.MAX_TIME_S`] or absent;
  errors: finite and non-negative (up to `MAX_RELATIVE_ERROR`), `sign_accuracy` a fraction, `n` a count;
  roofline constants: rates and efficiencies within their ranges (`ROOFLINE_RANGES`).
- a shape appears once per recipe, a recipe has points or roofline constants to predict from, a grouped
  section has points.

With these bounds no figure of a valid profile can make a prediction overflow to infinity or NaN. The first
problem found is one `ProfileError` naming the field ("recipes.rowwise.points[3].speedup = inf ...").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fp8advisor.errors import ProfileError, quote
from fp8advisor.fields import (
    LONG_TEXT_CHARS,
    SHORT_TEXT_CHARS,
    at,
    integer_problem,
    is_real,
    number_problem,
    read_name_problem,
    size_problem,
    text_problem,
    time_problem,
)
from fp8advisor.predict.figures import PROVENANCES
from fp8advisor.recipes import Recipe

SCHEMA = "fp8advisor.profile/1"

#: The range of a speedup a profile may hold: float8 over bf16 of one GEMM is within 0.01x and 10x on every
#: GPU; these bounds are far wider, and keep every prediction made from a profile finite.
MIN_SPEEDUP, MAX_SPEEDUP = 1e-4, 1e4
#: The largest relative error a profile's fit may state (a predictor 10^6 times off is no predictor).
MAX_RELATIVE_ERROR = 1e6
#: The most points a recipe (or the grouped section) may hold.
MAX_POINTS = 1_000_000
#: The roofline constants and their ranges (low, high, low excluded).
ROOFLINE_RANGES = {
    "bf16_flops": (1e9, 1e20, False),
    "fp8_flops": (1e9, 1e20, False),
    "bandwidth_bytes_per_s": (1e6, 1e17, False),
    "gemm_efficiency": (0.0, 1.0, True),
    "bandwidth_efficiency": (0.0, 1.0, True),
    "kernel_floor_s": (0.0, 1.0, False),
}
#: The recipe of the grouped section: torchao's grouped float8 recipe, or one of its MXFP8 grouped recipes
#: (`predict.speedup` answers a grouped question from the section only under its own recipe). `fit` writes
#: rowwise sections only for now (`predict.measurements` leaves MXFP8 grouped points out, with a note).
GROUPED_RECIPES = ("rowwise", "mxfp8_rceil", "mxfp8_rceil_wgrad_with_hp")

_HINT = "regenerate the profile with `fp8advisor fit` (profiles are JSON documents it writes)"


def check_profile_document(data: Any, where: str | None) -> None:
    """A `ProfileError` naming the first field of `data` that a profile cannot hold (module docstring)."""
    if not isinstance(data, dict):
        raise ProfileError("a profile must be a JSON object", hint=_HINT, location=where)
    if data.get("schema") != SCHEMA:
        raise ProfileError(
            f"not a profile of schema {SCHEMA!r} (schema: {quote(data.get('schema'))})",
            hint="profiles are written by `fp8advisor fit`; regenerate it with the installed version",
            location=where,
        )
    missing = [key for key in ("name", "provenance", "device", "recipes") if key not in data]
    if missing:
        raise ProfileError(f"profile lacks {', '.join(missing)}", hint=_HINT, location=where)
    problem = _outline_problem(data) or next(_document_problems(data), None)
    if problem is not None:
        raise ProfileError(f"malformed profile: {problem}", hint=_HINT, location=where)


def _outline_problem(data: dict) -> str | None:
    """The document's outline first: its sections are objects (a profile whose recipes are a number is not a
    profile, whatever its name)."""
    for key in ("recipes", "device"):
        problem = _object_problem(data[key], key)
        if problem:
            return problem
    return None


def _document_problems(data: dict) -> Iterator[str]:
    """What is wrong with the fields of a profile document, in document order (the first is reported)."""
    problem = read_name_problem(data["name"], "name") or _provenance_problem(data["provenance"], "provenance")
    texts = {"source": LONG_TEXT_CHARS, "created": SHORT_TEXT_CHARS, "method": LONG_TEXT_CHARS}
    for key, limit in texts.items():
        problem = problem or (text_problem(data[key], key, limit) if key in data else None)
    if problem:
        yield problem
    yield from _device_problems(data["device"])
    yield from _software_problems(data.get("software"))
    recipes = data["recipes"]
    if not isinstance(recipes, dict):
        yield f"recipes is {quote(recipes)}, not an object"
        return
    for name, body in recipes.items():
        if name not in {recipe.value for recipe in Recipe}:
            yield f"recipes: unknown recipe {quote(name)} (recipes are: {', '.join(r.value for r in Recipe)})"
        yield from _recipe_problems(body, at("recipes", name))
    roofline = data.get("roofline")
    if roofline is not None:
        yield from _roofline_problems(roofline)
    for name, body in recipes.items():
        if isinstance(body, dict) and not body.get("points") and roofline is None:
            yield f"recipes.{name} has neither measured points nor roofline constants to predict from"
    if data.get("grouped") is not None:
        yield from _grouped_problems(data["grouped"])


def _provenance_problem(value: Any, place: str) -> str | None:
    if not isinstance(value, str) or value not in PROVENANCES:
        return f"{place} is {quote(value)}, not one of {', '.join(PROVENANCES)}"
    return None


def _object_problem(value: Any, place: str, *, optional: bool = False) -> str | None:
    if optional and value is None:
        return None
    return None if isinstance(value, dict) else f"{place} is {quote(value)}, not an object"


def _device_problems(device: Any) -> Iterator[str]:
    problem = _object_problem(device, "device")
    if problem:
        yield problem
        return
    yield from filter(None, [text_problem(device.get("name"), "device.name")])
    if device.get("family") is not None:
        yield from filter(None, [text_problem(device["family"], "device.family")])
    capability = device.get("compute_capability")
    if capability is not None:
        if not isinstance(capability, list) or len(capability) != 2:
            yield f"device.compute_capability is {quote(capability)}, not [major, minor]"
        else:
            for index, value in enumerate(capability):
                yield from filter(
                    None, [integer_problem(value, f"device.compute_capability[{index}]", 0, 99)]
                )


def _software_problems(software: Any) -> Iterator[str]:
    problem = _object_problem(software, "software", optional=True)
    if problem:
        yield problem
        return
    for key, value in (software or {}).items():
        yield from filter(
            None, [text_problem(key, "software: a name"), text_problem(value, at("software", key))]
        )


def _recipe_problems(body: Any, place: str) -> Iterator[str]:
    problem = _object_problem(body, place)
    if problem:
        yield problem
        return
    yield from _points_problems(body.get("points"), f"{place}.", ("M", "K", "N"))
    yield from _model_problems(body.get("model"), at(place, "model"))
    if body.get("error") is not None:
        yield from _error_problems(body["error"], at(place, "error"))


def _points_problems(points: Any, prefix: str, axes: tuple[str, ...]) -> Iterator[str]:
    """The points of a recipe (Linear: M, K, N; `prefix` "recipes.NAME.") or of the grouped section (E,
    M_per_expert, K, N; `prefix` "grouped: ")."""
    if points is None:
        return
    if not isinstance(points, list):
        yield f"{prefix}points is {quote(points)}, not a list"
        return
    if len(points) > MAX_POINTS:
        yield f"{prefix}points holds {len(points)} points (at most {MAX_POINTS})"
        return
    shapes = set()
    for index, point in enumerate(points):
        here = f"{prefix}points[{index}]"
        problem = _object_problem(point, here)
        if problem:
            yield problem
            return
        sizes = [size_problem(point.get(axis), at(here, axis)) for axis in axes]
        times = [
            time_problem(point[key], at(here, key))
            for key in ("bf16_time_s", "float8_time_s")
            if point.get(key) is not None
        ]
        speedup = number_problem(point.get("speedup"), at(here, "speedup"), MIN_SPEEDUP, MAX_SPEEDUP)
        problem = next(filter(None, [*sizes, speedup, *times]), None)
        if problem:
            yield problem
            return
        shape = tuple(point[axis] for axis in axes)
        if shape in shapes:
            yield f"{here}: a shape appears twice, {shape} (merge repeated measurements, as fit does)"
            return
        shapes.add(shape)


def _model_problems(model: Any, place: str) -> Iterator[str]:
    """A predictor's settings: text keys, and values that are text, numbers, booleans or null; `fused` a
    boolean."""
    problem = _object_problem(model, place, optional=True)
    if problem:
        yield problem
        return
    for key, value in (model or {}).items():
        here = at(place, key) if isinstance(key, str) else place
        problem = text_problem(key, f"{place}: a key")
        if problem is None and isinstance(value, str):
            problem = text_problem(value, here, LONG_TEXT_CHARS)
        elif problem is None and is_real(value):
            problem = number_problem(value, here, -1e300, 1e300)
        elif problem is None and not isinstance(value, bool | None):
            problem = f"{here} is {quote(value)}, not text, a number or a boolean"
        if problem is None and key == "fused" and not isinstance(value, bool):
            problem = f"{here} is {quote(value)}, not true or false"
        if problem:
            yield problem
            return


def _error_problems(error: Any, place: str) -> Iterator[str]:
    """A fit's held-out error: method, median and worst relative errors, sign accuracy, count."""
    problem = _object_problem(error, place)
    if problem:
        yield problem
        return
    relative = ("median_relative_error", "worst_relative_error")
    checks = [
        text_problem(error.get("method"), at(place, "method")),
        *(number_problem(error.get(key), at(place, key), 0, MAX_RELATIVE_ERROR) for key in relative),
        number_problem(error.get("sign_accuracy"), at(place, "sign_accuracy"), 0, 1),
        integer_problem(error.get("n"), at(place, "n"), 0, 10**9),
    ]
    yield from filter(None, checks)


def _roofline_problems(roofline: Any) -> Iterator[str]:
    problem = _object_problem(roofline, "roofline")
    if problem:
        yield problem
        return
    for key, (low, high, low_open) in ROOFLINE_RANGES.items():
        if key in roofline or key in ("bf16_flops", "fp8_flops", "bandwidth_bytes_per_s"):
            problem = number_problem(roofline.get(key), at("roofline", key), low, high, low_open=low_open)
            if problem:
                yield problem


def _grouped_problems(grouped: Any) -> Iterator[str]:
    """The grouped expert GEMM section: provenance, recipe, points (at least one), model, error."""
    problem = _object_problem(grouped, "grouped")
    if problem:
        yield problem
        return
    if "provenance" in grouped:
        yield from filter(None, [_provenance_problem(grouped["provenance"], "grouped.provenance")])
    recipe = grouped.get("recipe", GROUPED_RECIPES[0])
    if recipe not in GROUPED_RECIPES:
        yield f"grouped.recipe is {quote(recipe)}, not one of {', '.join(GROUPED_RECIPES)}"
    if not grouped.get("points"):
        yield "grouped: no measured points"
    yield from _points_problems(grouped.get("points"), "grouped: ", ("E", "M_per_expert", "K", "N"))
    yield from _model_problems(grouped.get("model"), "grouped.model")
    if grouped.get("error") is not None:
        yield from _error_problems(grouped["error"], "grouped.error")


__all__ = [
    "GROUPED_RECIPES",
    "MAX_RELATIVE_ERROR",
    "MAX_SPEEDUP",
    "MIN_SPEEDUP",
    "ROOFLINE_RANGES",
    "SCHEMA",
    "check_profile_document",
]
