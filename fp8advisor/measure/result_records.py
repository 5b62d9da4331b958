"""The records of a results file (schema `fp8advisor.results/1`), checked field by field as they are read.

`fp8advisor.measure.results.read_run` checks every line with these before anything uses it: the run header
(`header_problem`), a grid point (`point_problem`), an in-context variant (`block_problem`) and a block's
chosen set (`choice_problem`). Each returns None for a usable record, else why not, in words a message can
quote (the reader names the file and line). The rules are `fp8advisor.fields`':

- sizes are positive integers up to `fields.MAX_SIZE`; times are within [`fields.MIN_TIME_S`,
  `fields.MAX_TIME_S`] (JSON's NaN and Infinity parse, but are not times); a grid asks for at most
  `MAX_GRID_POINTS` points;
- every string of a header (the device, the software versions, the method, the model's fingerprint and
  target) is free text: printable characters only, bounded, since each can be printed or written into a
  profile's `source`, `method` or `software`;
- layer names (a block's pattern, its instances, its float8 sets, each seed's) are lists of strings of
  bounded length and count: the model's own names, escaped wherever they are shown.
"""

from __future__ import annotations

import math
from typing import Any

from fp8advisor.errors import quote
from fp8advisor.fields import (
    LONG_TEXT_CHARS,
    SHORT_TEXT_CHARS,
    integer_problem,
    is_real,
    size_problem,
    text_problem,
    time_problem,
)
from fp8advisor.recipes import BASELINE, Recipe

SCHEMA = "fp8advisor.results/1"
#: The grid's `workload` of grouped expert GEMM runs (`bench --grouped`).
GROUPED_WORKLOAD = "grouped_mm"
#: The size fields of a Linear point, and of a grouped one, in key order.
LINEAR_AXES = ("M", "K", "N")
GROUPED_AXES = ("E", "M_per_expert", "K", "N")
#: The most points a header's grid may ask for (the largest real grid has a few thousand).
MAX_GRID_POINTS = 1_000_000
#: The longest layer name, and the most names in one list, a record may hold.
MAX_LAYER_NAME_CHARS, MAX_LAYER_NAMES = 1000, 100_000
#: The recipes a grid point may name: the bf16 baseline and torchao's float8 recipes.
POINT_RECIPES = (BASELINE, *(recipe.value for recipe in Recipe))
#: The deepest nesting of a header whose strings are checked (a real header: 3 levels).
_MAX_HEADER_DEPTH = 20


def is_grouped(point: dict) -> bool:
    """Whether a point record is a grouped expert GEMM point (`"grouped": true`)."""
    return point.get("grouped") is True


def grid_problem(grid: Any) -> str | None:
    """Why a header's grid is not one (its axes and recipes, or its shapes), None when it is."""
    if not isinstance(grid, dict):
        return "the header's grid is not an object"
    axes = GROUPED_AXES if grid.get("workload") == GROUPED_WORKLOAD else LINEAR_AXES
    recipes = grid.get("recipes")
    if not isinstance(recipes, list) or not all(isinstance(r, str) and len(r) <= 100 for r in recipes):
        return "the header's grid has no list of recipes"
    if grid.get("shapes") is not None:
        shapes = grid["shapes"]
        if not isinstance(shapes, list) or not all(
            isinstance(shape, list) and len(shape) == len(axes) for shape in shapes
        ):
            return f"a shape of the header's grid is not ({', '.join(axes)})"
        sizes, count = [size for shape in shapes for size in shape], len(shapes)
    else:
        if not all(isinstance(grid.get(axis), list) for axis in axes):
            return f"the header's grid lacks a list of {' or '.join(axes)}"
        sizes, count = [size for axis in axes for size in grid[axis]], math.prod(len(grid[a]) for a in axes)
    problem = next(filter(None, (size_problem(size, "a size of the header's grid") for size in sizes)), None)
    if problem:
        return problem
    if count * max(len(recipes), 1) > MAX_GRID_POINTS:
        return f"the header's grid asks for {count * len(recipes)} points (at most {MAX_GRID_POINTS})"
    return None


def _strings_problem(value: Any, place: str) -> str | None:
    """The first string in `value` (keys too, at any depth) that is not free text, said with its place."""
    stack = [(value, place, 0)]
    while stack:
        item, here, depth = stack.pop()
        if depth > _MAX_HEADER_DEPTH:
            return f"{here} is nested too deeply"
        if isinstance(item, str):
            problem = text_problem(item, here, LONG_TEXT_CHARS)
            if problem:
                return problem
        elif isinstance(item, dict):
            for key, child in item.items():
                problem = text_problem(key, f"a key of {here}", SHORT_TEXT_CHARS)
                if problem:
                    return problem
                stack.append((child, f"{here}.{key}", depth + 1))
        elif isinstance(item, list):
            stack.extend((child, f"{here}[{index}]", depth + 1) for index, child in enumerate(item))
    return None


def header_problem(header: Any) -> str | None:
    """Why line 1 is not a usable run header, None when it is."""
    if not isinstance(header, dict) or header.get("kind") != "run" or header.get("schema") != SCHEMA:
        return f"line 1 is not a run header with schema {SCHEMA}"
    if not isinstance(header.get("run_id"), str):
        return "the header has no run_id"
    device = header.get("device")
    if device is not None and not isinstance(device, dict):
        return f"the header's device is {quote(device)}, not an object with a name"
    if device is None or not isinstance(device.get("name"), str):
        return "the header has no device name"
    if not isinstance(device.get("emulated", False), bool | None):
        return f"the header's device.emulated is {quote(device.get('emulated'))}, not true or false"
    capability = device.get("compute_capability")
    if capability is not None and (
        not isinstance(capability, list)
        or len(capability) != 2
        or any(integer_problem(v, "compute capability", 0, 99) for v in capability)
    ):
        return f"the header's device.compute_capability is {quote(capability)}, not [major, minor]"
    for key in ("software", "method", "model", "ceilings"):
        if header.get(key) is not None and not isinstance(header.get(key), dict):
            return f"the header's {key} is {quote(header.get(key))}, not an object"
    software = header.get("software") or {}
    if not all(isinstance(v, str | None) or (is_real(v) and math.isfinite(v)) for v in software.values()):
        return "the header's software versions are not plain values"
    fingerprint = (header.get("model") or {}).get("fingerprint")
    if fingerprint is not None and not isinstance(fingerprint, str):
        return f"the header's model.fingerprint is {quote(fingerprint)}, not a string"
    if header.get("context") is not None and not isinstance(header.get("context"), str):
        return f"the header's context is {quote(header.get('context'))}, not a string"
    return grid_problem(header.get("grid")) or _strings_problem(header, "the header")


def point_problem(record: dict) -> str | None:
    """Why a point record cannot be used (a missing or wrong key, a size out of range, a time that is NaN,
    infinite, out of range or not a number), or None when it can. Failed points need only their identity and
    a status."""
    for key in GROUPED_AXES if is_grouped(record) else LINEAR_AXES:
        problem = size_problem(record.get(key), key)
        if problem:
            return problem
    if record.get("recipe") not in POINT_RECIPES:
        return f"recipe is {quote(record.get('recipe'))}, not one of {', '.join(POINT_RECIPES)}"
    status = record.get("status")
    if status not in ("ok", "failed"):
        return f"status is {quote(status)}, not 'ok' or 'failed'"
    profiler = record.get("profiler")
    if profiler is not None and not isinstance(profiler, dict):
        return f"profiler is {quote(profiler)}, not an object"
    suspect = (profiler or {}).get("suspect")
    if suspect is not None and not isinstance(suspect, str):
        return f"profiler.suspect is {quote(suspect)}, not a reason"
    if status == "failed":
        return None
    kernel = record.get("kernel_time_s")
    if kernel is not None and time_problem(kernel, "kernel_time_s"):
        return time_problem(kernel, "kernel_time_s")
    wall = record.get("wall_time_s")
    if wall is not None and not isinstance(wall, dict):
        return f"wall_time_s is {quote(wall)}, not an object"
    median = (wall or {}).get("median")
    if median is not None and time_problem(median, "wall_time_s.median"):
        return time_problem(median, "wall_time_s.median")
    if kernel is None and median is None:
        return "an ok point with neither kernel_time_s nor wall_time_s.median"
    return None


def wall_problem(wall: Any, key: str = "wall_time_s") -> str | None:
    """Why `wall` is not an iteration timing (an object of times median, p20 and p80), None when it is."""
    if not isinstance(wall, dict):
        return f"{key} is {quote(wall)}, not an object with median, p20 and p80"
    for quantile in ("median", "p20", "p80"):
        problem = time_problem(wall.get(quantile), quantile)
        if problem:
            return f"{key} is {quote(wall)}: {problem}"
    return None


def names_problem(names: Any, key: str) -> str | None:
    """Why `names` is not a list of layer names (strings of bounded length and count), None when it is."""
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return f"{key} is {quote(names)}, not a list of layer names"
    if len(names) > MAX_LAYER_NAMES or any(len(name) > MAX_LAYER_NAME_CHARS for name in names):
        return f"{key} holds more or longer names than any model has"
    return None


def _pattern_problem(record: dict, what: str) -> str | None:
    block, recipe = record.get("block"), record.get("recipe")
    if not isinstance(block, str) or not isinstance(recipe, str):
        return f"a {what} without a block pattern or recipe"
    if len(block) > MAX_LAYER_NAME_CHARS or len(recipe) > 100:
        return f"a {what} with a block pattern or recipe longer than any"
    return None


def block_problem(record: dict) -> str | None:
    """Why an in-context variant record (`"kind": "block"`) cannot be used, or None when it can."""
    problem = _pattern_problem(record, "block record") or names_problem(record.get("float8"), "float8")
    if problem:
        return problem
    status = record.get("status")
    if status not in ("ok", "failed"):
        return f"status is {quote(status)}, not 'ok' or 'failed'"
    return None if status == "failed" else wall_problem(record.get("wall_time_s"))


def _seeds_problem(seeds: Any) -> str | None:
    """Why a choice's `seeds` ({name: {"float8": [...], "wall_time_s": timing or null}}) is not usable."""
    if seeds is None:
        return None
    if not isinstance(seeds, dict):
        return f"seeds is {quote(seeds)}, not an object"
    for name, seed in seeds.items():
        problem = text_problem(name, "a seed's name", SHORT_TEXT_CHARS)
        if problem is None and not isinstance(seed, dict):
            problem = f"seeds.{name} is {quote(seed)}, not an object"
        if problem is None and seed.get("float8") is not None:
            problem = names_problem(seed["float8"], f"seeds.{name}.float8")
        if problem is None and seed.get("wall_time_s") is not None:
            problem = wall_problem(seed["wall_time_s"], f"seeds.{name}.wall_time_s")
        if problem:
            return problem
    return None


def choice_problem(record: dict) -> str | None:
    """Why a block's chosen-set record (`"kind": "block_choice"`) cannot be used, or None when it can."""
    measured_at = record.get("measured_at")
    return (
        _pattern_problem(record, "block choice")
        or names_problem(record.get("float8"), "float8")
        or names_problem(record.get("instances"), "instances")
        or wall_problem(record.get("wall_time_s"))
        or wall_problem(record.get("bf16_wall_time_s"), "bf16_wall_time_s")
        or _seeds_problem(record.get("seeds"))
        or (text_problem(measured_at, "measured_at") if measured_at is not None else None)
    )


__all__ = [
    "GROUPED_AXES",
    "GROUPED_WORKLOAD",
    "LINEAR_AXES",
    "MAX_GRID_POINTS",
    "POINT_RECIPES",
    "SCHEMA",
    "block_problem",
    "choice_problem",
    "grid_problem",
    "header_problem",
    "is_grouped",
    "names_problem",
    "point_problem",
    "wall_problem",
]
